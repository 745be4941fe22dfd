/* test_base_kvq.c - kvq's exact KLD base file (src/eval/base_kvq.c), its
 * checksum (src/base/hash64.c) and the model-file hash: round trip, every
 * kind of corruption rejected, mismatching model or text named. */
#include "test.h"
#include "base_kvq.h"
#include "hash64.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------- hash64 */

TEST(hash64_streaming_equals_one_shot) {
    test_rng rng = { 11, 0, 0 };
    uint8_t data[1000];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)test_rng_u64(&rng);
    for (size_t len = 0; len <= sizeof data; len += len < 80 ? 1 : 97) {
        uint64_t want = kvq_hash64_of(data, len);
        for (int trial = 0; trial < 8; trial++) {
            kvq_hash64 h;
            kvq_hash64_init(&h);
            size_t at = 0;
            while (at < len) {
                size_t step = 1 + test_rng_u64(&rng) % 45;
                if (step > len - at) step = len - at;
                kvq_hash64_update(&h, data + at, step);
                at += step;
            }
            CHECK(kvq_hash64_final(&h) == want, "len %zu: split update differs from one shot", len);
        }
    }
}

TEST(hash64_sees_every_byte_and_the_length) {
    uint8_t data[256] = { 0 };
    uint64_t base = kvq_hash64_of(data, sizeof data);
    for (size_t i = 0; i < sizeof data; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            data[i] ^= (uint8_t)(1u << bit);
            uint64_t h = kvq_hash64_of(data, sizeof data);
            data[i] ^= (uint8_t)(1u << bit);
            CHECK(h != base, "flipping bit %d of byte %zu left the hash unchanged", bit, i);
        }
    }
    /* zero padding of the last word must not make lengths collide */
    CHECK(kvq_hash64_of(data, 5) != kvq_hash64_of(data, 6), "lengths 5 and 6 collide");
    CHECK(kvq_hash64_of(data, 0) != kvq_hash64_of(data, 8), "lengths 0 and 8 collide");
    /* swapping two words (different lanes) changes it */
    uint8_t a[16] = { 1 }, b[16] = { 0 };
    b[8] = 1;
    CHECK(kvq_hash64_of(a, 16) != kvq_hash64_of(b, 16), "word order ignored");
}

/* ------------------------------------------------------------ helpers */

typedef struct base_fixture {
    char dir[64], path[96];
    int n_ctx, n_vocab, n_chunk;
    int32_t tokens[3 * 16];
    float logits[3 * 7][37];     /* n_chunk * scored_per_chunk(16) rows */
    size_t n_pos;
} base_fixture;

static void fixture_init(base_fixture *fx, uint64_t seed) {
    test_rng rng = { seed, 0, 0 };
    fx->n_ctx = 16;
    fx->n_vocab = 37;
    fx->n_chunk = 3;
    fx->n_pos = (size_t)fx->n_chunk * (size_t)(fx->n_ctx - 1 - fx->n_ctx / 2);
    for (int i = 0; i < fx->n_ctx * fx->n_chunk; i++) fx->tokens[i] = (int32_t)(test_rng_u64(&rng) % 37);
    for (size_t p = 0; p < fx->n_pos; p++)
        for (int v = 0; v < fx->n_vocab; v++) fx->logits[p][v] = (float)(4.0 * test_rng_gauss(&rng));
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kvq_base_XXXXXX");
    if (!mkdtemp(fx->dir)) fx->dir[0] = 0;
    snprintf(fx->path, sizeof fx->path, "%s/base.kvqb", fx->dir);
}

static void fixture_done(base_fixture *fx) {
    unlink(fx->path);
    if (fx->dir[0]) rmdir(fx->dir);
}

static kvq_status write_base(const base_fixture *fx, uint64_t model_hash, size_t n_rows, kvq_error *err) {
    kvq_base_kvq_writer *w = NULL;
    kvq_status st = kvq_base_kvq_writer_open(fx->path, model_hash, fx->n_ctx, fx->n_vocab, fx->n_chunk, fx->tokens,
                                             &w, err);
    for (size_t p = 0; st == KVQ_OK && p < n_rows; p++) st = kvq_base_kvq_writer_add(w, fx->logits[p], err);
    if (st != KVQ_OK) {
        kvq_base_kvq_writer_close(w, NULL);
        return st;
    }
    return kvq_base_kvq_writer_close(w, err);
}

static bool patch_byte(const char *path, long off, int xor_mask) {
    FILE *f = fopen(path, "r+b");
    if (!f) return false;
    int c = -1;
    if (fseek(f, off, off < 0 ? SEEK_END : SEEK_SET) == 0) c = fgetc(f);
    bool ok = c >= 0 && fseek(f, off, off < 0 ? SEEK_END : SEEK_SET) == 0 && fputc(c ^ xor_mask, f) != EOF;
    return fclose(f) == 0 && ok;
}

/* ---------------------------------------------------------- round trip */

TEST(base_kvq_round_trip) {
    base_fixture fx;
    fixture_init(&fx, 21);
    CHECK(fx.dir[0], "mkdtemp failed");
    kvq_error err = { 0 };
    kvq_status st = write_base(&fx, 0x1234abcdULL, fx.n_pos, &err);
    kvq_base_kvq *b = NULL;
    if (st == KVQ_OK) st = kvq_base_kvq_open(fx.path, &b, &err);
    kvq_base_format fmt = kvq_base_sniff(fx.path);
    fixture_done(&fx);                             /* the mapping outlives the name */
    CHECK(st == KVQ_OK, "round trip failed: %s", err.msg);
    bool hdr = b->n_ctx == fx.n_ctx && b->n_vocab == fx.n_vocab && b->n_chunk == fx.n_chunk && b->n_pos == fx.n_pos &&
               b->model_hash == 0x1234abcdULL &&
               b->token_hash == kvq_hash64_of(fx.tokens, sizeof(int32_t) * (size_t)(fx.n_ctx * fx.n_chunk));
    bool toks = !memcmp(b->tokens, fx.tokens, sizeof(int32_t) * (size_t)(fx.n_ctx * fx.n_chunk));
    size_t bad_pos = 0;
    int bad_v = -1;
    double worst_norm = 0;
    for (size_t p = 0; p < fx.n_pos && bad_v < 0; p++) {
        const float *lp = kvq_base_kvq_row(b, p);
        /* the log-softmax, computed here independently */
        double mx = fx.logits[p][0], s = 0, norm = 0;
        for (int v = 1; v < fx.n_vocab; v++) mx = fmax(mx, fx.logits[p][v]);
        for (int v = 0; v < fx.n_vocab; v++) s += exp(fx.logits[p][v] - mx);
        for (int v = 0; v < fx.n_vocab; v++) {
            float want = (float)((double)fx.logits[p][v] - (mx + log(s)));
            if (lp[v] != want) { bad_pos = p; bad_v = v; }
            norm += exp((double)lp[v]);
        }
        worst_norm = fmax(worst_norm, fabs(norm - 1.0));
    }
    bool out_of_range_null = kvq_base_kvq_row(b, fx.n_pos) == NULL;
    kvq_base_kvq_close(b);
    CHECK(fmt == KVQ_BASE_KVQ, "sniff says %d", (int)fmt);
    CHECK(hdr, "header fields differ after the round trip");
    CHECK(toks, "tokens differ after the round trip");
    CHECK(bad_v < 0, "log-prob %zu/%d is not the exact log-softmax", bad_pos, bad_v);
    CHECK(worst_norm < 1e-5, "probabilities sum to 1 +- %g", worst_norm);
    CHECK(out_of_range_null, "row past the end is not NULL");
}

/* Every region of the file is protected: tokens, log-probs, last byte,
 * header fields; truncation and padding too. */
TEST(base_kvq_corruption_is_an_error) {
    base_fixture fx;
    fixture_init(&fx, 22);
    CHECK(fx.dir[0], "mkdtemp failed");
    static const struct { long off; const char *want; } cases[] = {
        { 80, "payload checksum" },            /* first token            */
        { 80 + 4 * 48 + 5, "payload checksum" },/* a log-prob             */
        { -1, "payload checksum" },            /* the very last byte     */
        { 49, "header checksum" },             /* n_ctx                  */
        { 20, "header checksum" },             /* model hash             */
        { 3, "magic" },
    };
    kvq_error err = { 0 };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        CHECK(write_base(&fx, 7, fx.n_pos, &err) == KVQ_OK, "write failed: %s", err.msg);
        CHECK(patch_byte(fx.path, cases[k].off, 0x10), "cannot patch the file");
        kvq_base_kvq *b = NULL;
        err.msg[0] = 0;
        kvq_status st = kvq_base_kvq_open(fx.path, &b, &err);
        kvq_base_kvq_close(b);
        CHECK(st == KVQ_ERR_FORMAT && strstr(err.msg, cases[k].want), "byte %ld: status %d '%s' (want '%s')",
              cases[k].off, (int)st, err.msg, cases[k].want);
    }
    /* truncated by one byte, then padded by one */
    CHECK(write_base(&fx, 7, fx.n_pos, &err) == KVQ_OK, "write failed: %s", err.msg);
    long size = 80 + 4L * 48 + 4L * (long)fx.n_pos * 37;
    CHECK(truncate(fx.path, size - 1) == 0, "truncate failed");
    kvq_base_kvq *b = NULL;
    kvq_status st = kvq_base_kvq_open(fx.path, &b, &err);
    CHECK(st == KVQ_ERR_FORMAT && strstr(err.msg, "size"), "truncated file: %d '%s'", (int)st, err.msg);
    CHECK(write_base(&fx, 7, fx.n_pos, &err) == KVQ_OK, "write failed: %s", err.msg);
    CHECK(truncate(fx.path, size + 1) == 0, "truncate failed");
    st = kvq_base_kvq_open(fx.path, &b, &err);
    CHECK(st == KVQ_ERR_FORMAT && strstr(err.msg, "size"), "padded file: %d '%s'", (int)st, err.msg);
    fixture_done(&fx);
}

/* The checksums only prove the writer wrote the bytes: a log-prob that is
 * NaN, -inf or above 0 is refused even in a correctly sealed file, and so
 * is a token outside the vocabulary. */
TEST(base_kvq_refuses_values_behind_valid_checksums) {
    base_fixture fx;
    fixture_init(&fx, 24);
    CHECK(fx.dir[0], "mkdtemp failed");
    kvq_error err = { 0 };
    kvq_status st = write_base(&fx, 7, fx.n_pos, &err);
    FILE *f = st == KVQ_OK ? fopen(fx.path, "rb") : NULL;
    static uint32_t words[4096];                 /* 4-byte aligned, as a mapping is */
    size_t size = f ? fread(words, 1, sizeof words, f) : 0;
    if (f) fclose(f);
    fixture_done(&fx);
    CHECK(st == KVQ_OK && size == 80 + 4 * 48 + 4 * fx.n_pos * 37, "write/read: %s (%zu bytes)", err.msg, size);
    kvq_base_kvq *b = NULL;
    CHECK(kvq_base_kvq_open_memory(words, size, "mem", &b, &err) == KVQ_OK, "the valid base: %s", err.msg);
    kvq_base_kvq_close(b);
    const struct { size_t word; uint32_t v; const char *want; } cases[] = {
        { 20 + 48 + 37 * 5 + 3, 0x7fc00000u, "position 5, token 3" },   /* NaN */
        { 20 + 48 + 37 * 0 + 0, 0xff800000u, "position 0, token 0" },   /* -inf */
        { 20 + 48 + 37 * 20 + 36, 0x3f000000u, "position 20, token 36" },/* +0.5 */
        { 20 + 7, 37, "token 37 at 7" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        static uint32_t bad[4096];
        memcpy(bad, words, size);
        bad[cases[k].word] = cases[k].v;
        kvq_base_kvq_reseal(bad, size);
        b = NULL;
        st = kvq_base_kvq_open_memory(bad, size, "mem", &b, &err);
        kvq_base_kvq_close(b);
        CHECK(st == KVQ_ERR_FORMAT && strstr(err.msg, cases[k].want), "case %zu: status %d '%s'", k, (int)st,
              err.msg);
    }
    CHECK(kvq_base_kvq_open_memory((const uint8_t *)words + 1, size - 1, "mem", &b, &err) == KVQ_ERR_ARG,
          "a misaligned buffer must be refused, not read");
}

/* A run that stops early leaves a file that cannot be mistaken for a base. */
TEST(base_kvq_incomplete_run_rejected) {
    base_fixture fx;
    fixture_init(&fx, 23);
    CHECK(fx.dir[0], "mkdtemp failed");
    kvq_error err = { 0 };
    kvq_status st = write_base(&fx, 7, fx.n_pos - 1, &err);
    bool named = strstr(err.msg, "20 of 21") != NULL;
    kvq_base_kvq *b = NULL;
    kvq_status st2 = kvq_base_kvq_open(fx.path, &b, &err);
    kvq_base_kvq_close(b);
    fixture_done(&fx);
    CHECK(st == KVQ_ERR_IO && named, "short write: %d '%s'", (int)st, err.msg);
    CHECK(st2 == KVQ_ERR_FORMAT, "an incomplete base opened (%d)", (int)st2);
}

TEST(base_kvq_mismatch_is_named) {
    base_fixture fx;
    fixture_init(&fx, 24);
    CHECK(fx.dir[0], "mkdtemp failed");
    kvq_error err = { 0 };
    CHECK(write_base(&fx, 0xaaaa, fx.n_pos, &err) == KVQ_OK, "write failed: %s", err.msg);
    kvq_base_kvq *b = NULL;
    kvq_status st = kvq_base_kvq_open(fx.path, &b, &err);
    fixture_done(&fx);
    CHECK(st == KVQ_OK, "open failed: %s", err.msg);
    kvq_error e1 = { 0 }, e2 = { 0 }, e3 = { 0 }, e4 = { 0 }, e5 = { 0 };
    kvq_status wrong_model = kvq_base_kvq_check_model(b, 0xaaab, &e1);
    kvq_status right_model = kvq_base_kvq_check_model(b, 0xaaaa, NULL);
    int32_t toks[48];
    memcpy(toks, fx.tokens, sizeof toks);
    kvq_status same_text = kvq_base_kvq_check_tokens(b, toks, 48, 16, 3, NULL);
    kvq_status fewer_chunks = kvq_base_kvq_check_tokens(b, toks, 32, 16, 2, NULL);
    toks[21] = (toks[21] + 1) % 37;
    kvq_status other_text = kvq_base_kvq_check_tokens(b, toks, 48, 16, 3, &e2);
    kvq_status other_ctx = kvq_base_kvq_check_tokens(b, toks, 48, 8, 3, &e3);
    kvq_status more_chunks = kvq_base_kvq_check_tokens(b, fx.tokens, 64, 16, 4, &e4);
    kvq_status short_text = kvq_base_kvq_check_tokens(b, fx.tokens, 40, 16, 3, &e5);
    kvq_base_kvq_close(b);
    CHECK(wrong_model == KVQ_ERR_ARG && strstr(e1.msg, "different model"), "wrong model: %d '%s'", (int)wrong_model, e1.msg);
    CHECK(right_model == KVQ_OK && same_text == KVQ_OK && fewer_chunks == KVQ_OK, "matching run rejected");
    CHECK(other_text == KVQ_ERR_ARG && strstr(e2.msg, "at token 21 (chunk 1"), "other text: '%s'", e2.msg);
    CHECK(other_ctx == KVQ_ERR_ARG && strstr(e3.msg, "context 16"), "other context: '%s'", e3.msg);
    CHECK(more_chunks == KVQ_ERR_ARG && strstr(e4.msg, "holds 3 chunks"), "more chunks: '%s'", e4.msg);
    CHECK(short_text == KVQ_ERR_ARG && strstr(e5.msg, "40 tokens"), "short text: '%s'", e5.msg);
}

TEST(base_sniff_formats) {
    char dir[] = "/tmp/kvq_sniff_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp failed");
    char path[64];
    snprintf(path, sizeof path, "%s/f", dir);
    static const struct { const char *bytes; kvq_base_format want; } cases[] = {
        { "_logits_\x10\x00", KVQ_BASE_LLAMA }, { "KVQBASE1", KVQ_BASE_KVQ }, { "GGUF\x03\x00\x00\x00", KVQ_BASE_UNKNOWN },
        { "_log", KVQ_BASE_UNKNOWN },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        FILE *f = fopen(path, "wb");
        CHECK(f, "cannot create");
        fwrite(cases[k].bytes, 1, strlen(cases[k].bytes), f);
        fclose(f);
        kvq_base_format got = kvq_base_sniff(path);
        CHECK(got == cases[k].want, "case %zu: %d", k, (int)got);
    }
    unlink(path);
    CHECK(kvq_base_sniff(path) == KVQ_BASE_UNKNOWN, "missing file sniffed as a format");
    rmdir(dir);
}

/* ---------------------------------------------------------- model hash */

/* Small files are hashed whole; a large (sparse) file through its 16 MiB
 * prefix and 1024 strided samples, so bytes there count and a byte
 * between samples does not (documented). */
TEST(model_file_hash_prefix_and_samples) {
    char dir[] = "/tmp/kvq_mhash_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp failed");
    char path[64];
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    CHECK(fd >= 0, "cannot create");
    CHECK(write(fd, "GGUF\x03\0\0\0", 8) == 8, "write failed");
    close(fd);
    kvq_error err = { 0 };
    uint64_t h_small = 0, h1 = 0, h2 = 0, h3 = 0, h4 = 0, h5 = 0;
    kvq_status st = kvq_model_file_hash(path, &h_small, &err);
    bool ok = st == KVQ_OK;

    const long big = 40L << 20;              /* 40 MiB, sparse: fast anywhere */
    const long prefix = 16L << 20, span = big - prefix - 4096;
    ok = ok && truncate(path, big) == 0 && kvq_model_file_hash(path, &h1, &err) == KVQ_OK;
    ok = ok && patch_byte(path, 1 << 20, 1) && kvq_model_file_hash(path, &h2, &err) == KVQ_OK;   /* in the prefix */
    long sample7 = prefix + 7 * span / 1023 + 100;
    ok = ok && patch_byte(path, sample7, 1) && kvq_model_file_hash(path, &h3, &err) == KVQ_OK;   /* in a sample */
    long between = prefix + 7 * span / 1023 + 4096 + 10;
    ok = ok && patch_byte(path, between, 1) && kvq_model_file_hash(path, &h4, &err) == KVQ_OK;   /* between */
    ok = ok && truncate(path, big + 1) == 0 && kvq_model_file_hash(path, &h5, &err) == KVQ_OK;    /* size */
    unlink(path);
    uint64_t hmissing;
    kvq_status missing = kvq_model_file_hash(path, &hmissing, &err);
    rmdir(dir);
    CHECK(ok, "hashing failed: %s", err.msg);
    CHECK(h_small != h1, "size not hashed");
    CHECK(h2 != h1, "a byte of the metadata prefix is not hashed");
    CHECK(h3 != h2, "a byte of a tensor sample is not hashed");
    CHECK(h4 == h3, "a byte between samples changed the hash (sampling not as documented)");
    CHECK(h5 != h4, "one more byte of size not seen");
    CHECK(missing == KVQ_ERR_IO && strstr(err.msg, "cannot open"), "missing model: %d '%s'", (int)missing, err.msg);
}

/* ------------------------------------------------------------- compare */

/* Against the definition computed here in double, and against llama.cpp's
 * 16-bit base (kld.c) where nothing falls under its -16-nat floor. */
TEST(base_kvq_compare_matches_definition) {
    test_rng rng = { 31, 0, 0 };
    enum { V = 301 };
    float base_logits[V], test_logits[V], lp[V];
    uint16_t rec[4 + 2 * ((V + 1) / 2)];
    double worst_def = 0, worst_llama = 0;
    for (int trial = 0; trial < 20; trial++) {
        for (int v = 0; v < V; v++) {
            base_logits[v] = (float)(1.5 * test_rng_gauss(&rng));
            test_logits[v] = base_logits[v] + (float)(0.02 * trial * test_rng_gauss(&rng));
        }
        double mb = base_logits[0], s = 0, mt = test_logits[0], st = 0;
        for (int v = 1; v < V; v++) { mb = fmax(mb, base_logits[v]); mt = fmax(mt, test_logits[v]); }
        for (int v = 0; v < V; v++) { s += exp(base_logits[v] - mb); st += exp(test_logits[v] - mt); }
        double kl = 0;
        for (int v = 0; v < V; v++) {
            double lb = base_logits[v] - mb - log(s), lt = test_logits[v] - mt - log(st);
            lp[v] = (float)lb;
            kl += exp(lb) * (lb - lt);
        }
        int next = (int)(test_rng_u64(&rng) % V);
        kvq_kld_token got = kvq_base_kvq_compare(test_logits, V, lp, next);
        kvq_kld_encode(base_logits, V, rec);
        kvq_kld_token llama = kvq_kld_compare(test_logits, V, rec, next);
        worst_def = fmax(worst_def, fabs(got.kld - kl));
        worst_llama = fmax(worst_llama, fabs(got.kld - llama.kld));
        double nll = -(test_logits[next] - mt - log(st));
        CHECK(fabs(got.nll - nll) < 1e-5 && fabs(got.nll_base + lp[next]) < 1e-6, "trial %d: NLLs wrong", trial);
        CHECK(fabs(got.dp - (exp(-nll) - exp(lp[next]))) < 1e-6, "trial %d: delta-p wrong", trial);
        /* identical logits: only the float rounding of the stored log-probs */
        if (trial == 0) CHECK(fabs(got.kld) < 1e-7 && got.same_top, "identical logits: KLD %g", got.kld);
    }
    CHECK(worst_def < 1e-6, "KLD off the definition by %g", worst_def);
    CHECK(worst_llama < 1e-3, "KLD off llama.cpp's 16-bit base by %g", worst_llama);
}
