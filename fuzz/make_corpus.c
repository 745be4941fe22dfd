/*
 * make_corpus.c - writes the fuzz targets' seed files, one directory per
 * target (make fuzz-corpus):
 *   gguf/        small valid GGUF files covering both versions, every
 *                value type, several tensor types and alignments (the test
 *                suite's writer, tests/gguf_writer.h);
 *   base_llama/  llama.cpp KLD bases and base_kvq/ kvq exact bases of a
 *                few sizes (the library's own writers);
 *   tokenizer/   vocabulary + text inputs in fuzz_tokenizer.c's layout;
 *   state/       cache state files of fuzz_state.c's caches (state_caches.h);
 *   model/       tiny complete llama models (tests/model_writer.h): f32,
 *                f16 and q8_0 weights, tied and untied output, MHA and GQA;
 *   calib/       small calibration files (the library's writer) of random
 *                transforms with valid allocations at two rates.
 * Files found by the fuzzer (regress-*) are kept beside them by hand.
 *
 *   make fuzz-corpus     (builds this against build/libkvq.a and runs it
 *                         on fuzz/corpus)
 */
#include "model_writer.h"
#include "base_kvq.h"
#include "calib.h"
#include "kld.h"
#include "state_caches.h"

#include <math.h>
#include <stdio.h>
#include <sys/stat.h>

static int write_seed(const char *dir, const char *name, const gw_model *m) {
    gw w = { 0 };
    gw_write_model(&w, m);
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = !w.oom && f && fwrite(w.p, 1, w.n, f) == w.n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "make_corpus: cannot write %s\n", path);
    else printf("%s: %zu bytes\n", path, w.n);
    gw_free(&w);
    return ok ? 0 : 1;
}

static int write_bytes(const char *dir, const char *name, const void *p, size_t n) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "make_corpus: cannot write %s\n", path);
    else printf("%s: %zu bytes\n", path, n);
    return ok ? 0 : 1;
}

/* A base of either format: n_chunk chunks of n_ctx over n_vocab tokens,
 * smooth logits (a peaked distribution per position). */
static int write_base(const char *dir, const char *name, bool exact, int n_ctx, int n_vocab, int n_chunk) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int32_t tokens[256];
    float logits[64];
    if (n_ctx * n_chunk > 256 || n_vocab > 64) return 1;
    for (int i = 0; i < n_ctx * n_chunk; i++) tokens[i] = (i * 7 + 3) % n_vocab;
    kvq_error err = { 0 };
    kvq_kld_writer *lw = NULL;
    kvq_base_kvq_writer *kw = NULL;
    kvq_status st = exact ? kvq_base_kvq_writer_open(path, 0x5eed, n_ctx, n_vocab, n_chunk, tokens, &kw, &err)
                          : kvq_kld_writer_open(path, n_ctx, n_vocab, n_chunk, tokens, &lw, &err);
    const int n_pos = n_chunk * kvq_kld_scored_per_chunk(n_ctx);
    for (int p = 0; !st && p < n_pos; p++) {
        for (int v = 0; v < n_vocab; v++) logits[v] = 3.0f * cosf(0.7f * (float)(v - p));
        st = exact ? kvq_base_kvq_writer_add(kw, logits, &err) : kvq_kld_writer_add(lw, logits, &err);
    }
    kvq_status cst = exact ? kvq_base_kvq_writer_close(kw, &err) : kvq_kld_writer_close(lw, &err);
    if (st || cst) {
        fprintf(stderr, "make_corpus: %s: %s\n", path, err.msg);
        return 1;
    }
    printf("%s\n", path);
    return 0;
}

static int write_bases(const char *root) {
    char dir[1024];
    int fails = 0;
    for (int exact = 0; exact < 2; exact++) {
        snprintf(dir, sizeof dir, "%s/%s", root, exact ? "base_kvq" : "base_llama");
        mkdir(dir, 0755);
        fails += write_base(dir, "c4_v5_n1.base", exact, 4, 5, 1);
        fails += write_base(dir, "c8_v17_n2.base", exact, 8, 17, 2);
        fails += write_base(dir, "c16_v64_n3.base", exact, 16, 64, 3);
    }
    return fails;
}

/* fuzz_tokenizer.c's layout: flags, V, M, V vocabulary lines, M merges,
 * the text. */
static int write_tokenizer_seeds(const char *root) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tokenizer", root);
    mkdir(dir, 0755);
    static const struct { const char *name; uint8_t flags, v, m; const char *body; } seeds[] = {
        { "spm_words", 64 | 8, 9, 0,
          "\xE2\x96\x81\nt\nh\ne\nth\nthe\n\xE2\x96\x81the\nc\nat\nthe cat sat on the mat" },
        { "spm_special", 64 | 16 | 32 | 128, 4, 0, "<|im_start|>\n!user\na\nb\n<|im_start|>user ab\xC3\xA9\xFF" },
        { "bpe_gpt2", 1 | 64, 3, 3, "th\nthe\n\xC4\xA0the\nt h\nth e\n\xC4\xA0 the\nthe the  3.14 don't" },
        { "bpe_llama3", 1 | 2 | 64 | 32, 2, 1, "ab\n123\na b\nab 12345 \xF0\x9F\x98\x80\r\n" },
        { "bpe_qwen2", 1 | 4 | 64 | 128, 2, 1, "!<tool>\nhi\nh i\nhi <tool> 2024 \xE4\xBD\xA0\xE5\xA5\xBD" },
    };
    int fails = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        uint8_t buf[512];
        const size_t n = strlen(seeds[i].body);
        buf[0] = seeds[i].flags;
        buf[1] = seeds[i].v;
        buf[2] = seeds[i].m;
        memcpy(buf + 3, seeds[i].body, n);
        fails += write_bytes(dir, seeds[i].name, buf, n + 3);
    }
    return fails;
}

/* Each cache of state_caches.h filled with 0, 37 and 260 positions. */
static int write_states(const char *root) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/state", root);
    mkdir(dir, 0755);
    static float k[64 * 64], v[64 * 64];
    for (int i = 0; i < 64 * 64; i++) { k[i] = sinf(0.37f * (float)i); v[i] = cosf(0.11f * (float)i); }
    static int32_t toks[300];
    int fails = 0;
    static const int lengths[] = { 0, 37, 140 };
    for (int c = 0; c < STATE_CACHES; c++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            kvq_cache *cache = state_cache_make(c);
            bool ok = cache != NULL;
            for (int l = 0; ok && l < 1; l++)
                for (int p = 0; ok && p < lengths[li]; p += 64) {
                    const int n = lengths[li] - p < 64 ? lengths[li] - p : 64;
                    ok = kvq_cache_write(cache, l, p, n, k, v, NULL) == KVQ_OK;
                }
            const kvq_state_tag tag = { 0, toks, lengths[li] };
            snprintf(path, sizeof path, "%s/cache%d_n%d.kvqs", dir, c, lengths[li]);
            ok = ok && kvq_cache_save(cache, path, &tag, NULL) == KVQ_OK;
            kvq_cache_free(cache);
            fails += !ok;
        }
    return fails;
}

static int write_models(const char *root) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/model", root);
    mkdir(dir, 0755);
    int fails = 0;
    for (int v = 0; v < 3; v++) {
        tm_spec s = tm_spec_default();
        s.n_ctx_train = 16;
        s.n_blocks = s.block_count = v == 2 ? 1 : 2;
        s.type_embd = v == 0 ? GW_T_F32 : GW_T_F16;
        s.type_attn_k = v == 1 ? GW_T_F16 : GW_T_Q8_0;
        s.tied = v == 1;
        s.n_head_kv = v == 2 ? 4 : 2;
        tm_file f;
        tm_write(&f, &s);
        char name[32];
        snprintf(name, sizeof name, "tiny_v%d.gguf", v);
        fails += f.w.oom ? 1 : write_bytes(dir, name, f.w.p, f.w.n);
        tm_free(&f);
    }
    return fails;
}

/* A calibration of n_layer x n_head KV heads of head dims dk/dv at rates
 * 225 and 325: random transforms (any finite values are valid), means,
 * and the allocation of decaying importances at each rate. */
static int write_calib(const char *dir, const char *name, int n_layer, int n_head, int dk, int dv) {
    static const int rates[2] = { 225, 325 };
    kvq_calib *c;
    kvq_error err;
    if (kvq_calib_alloc(&c, n_layer, n_head, dk, dv, 2, rates, &err)) return 1;
    uint64_t rng = 0x5eed;
    int fails = 0;
    for (int l = 0; l < n_layer; l++)
        for (int h = 0; h < n_head; h++)
            for (int s = 0; s < 2; s++) {
                kvq_calib_side *sd = kvq_calib_side_at(c, l, h, s == 1);
                double imp[KVQ_MAX_HEAD_DIM];
                for (int i = 0; i < sd->d; i++) {
                    sd->mean[i] = (float)tm_gauss(&rng) * 0.1f;
                    imp[i] = exp(-0.2 * i);
                    sd->weight[i] = (float)imp[i];
                }
                for (int i = 0; i < sd->d * sd->d; i++) {   /* near the identity: a usable transform */
                    sd->fwd[i] = (i % (sd->d + 1) == 0) + 0.05f * (float)tm_gauss(&rng);
                    sd->inv[i] = (i % (sd->d + 1) == 0) - 0.05f * (float)tm_gauss(&rng);
                }
                for (int r = 0; r < 2; r++)
                    fails += kvq_calib_allocate(imp, sd->d, 8 * (kvq_calib_row_bytes(rates[r], sd->d) - 2),
                                                sd->bits + r * sd->d, &err) != KVQ_OK;
                kvq_calib_side_finish(sd, s == 1);
            }
    c->method_k = KVQ_CALIB_QUERY_MIX;
    c->method_v = KVQ_CALIB_ATT2_WO;
    c->n_tokens = 1000;
    c->model_hash = 0x1234abcd;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fails += kvq_calib_write(c, path, &err) != KVQ_OK;
    kvq_calib_free(c);
    return fails;
}

static int write_calibs(const char *root) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/calib", root);
    mkdir(dir, 0755);
    return write_calib(dir, "l1_h1_d8.cal", 1, 1, 8, 8) + write_calib(dir, "l2_h2_d16_v8.cal", 2, 2, 16, 8) +
           write_calib(dir, "l1_h1_d32.cal", 1, 1, 32, 32);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/gguf", argv[1]);
    mkdir(dir, 0755);
    int fails = write_bases(argv[1]) + write_tokenizer_seeds(argv[1]) + write_states(argv[1]) + write_models(argv[1]) +
                write_calibs(argv[1]);

    gw_model m = gw_model_default();
    fails += write_seed(dir, "baseline_v3.gguf", &m);
    m.version = 2;
    fails += write_seed(dir, "baseline_v2.gguf", &m);

    static const gw_tensor aligned64[3] = {
        { "tok", 2, { 4, 3, 0, 0 }, GW_T_F32, 0 },
        { "norm", 1, { 8, 0, 0, 0 }, GW_T_F16, 64 },
        { "q8", 2, { 32, 2, 0, 0 }, GW_T_Q8_0, 128 },
    };
    m = gw_model_default();
    m.alignment = 64;
    m.tensors = aligned64;
    fails += write_seed(dir, "align64.gguf", &m);

    static const gw_tensor kquant[2] = {
        { "blk.0.ffn_down.weight", 4, { 256, 1, 1, 1 }, GW_T_Q4_K, 0 },
        { "output_norm.weight", 1, { 8, 0, 0, 0 }, GW_T_F32, 160 },
    };
    m = gw_model_default();
    m.all_types = false;
    m.tensors = kquant;
    m.n_tensors = 2;
    fails += write_seed(dir, "kquant_4d.gguf", &m);

    m = gw_model_default();
    m.n_tensors = 0;
    fails += write_seed(dir, "metadata_only.gguf", &m);
    m.all_types = false;
    fails += write_seed(dir, "tiny.gguf", &m);

    /* a whole vocabulary (tests/model_writer.h's), no tensors: the
     * tokenizer loader's input */
    gw w = { 0 };
    tm_spec ts = tm_spec_default();
    ts.pad = 0;
    ts.extra_id_key = "tokenizer.ggml.eot_token_id";
    ts.extra_id = 0xFFFFFFFFu;
    gw_u32(&w, 0x46554747u);
    gw_u32(&w, 3);
    gw_u64(&w, 0);
    gw kvs = { 0 };
    gw_u64(&w, (uint64_t)tm_write_kvs(&kvs, &ts));
    gw_bytes(&w, kvs.p, kvs.n);
    fails += w.oom || kvs.oom ? 1 : write_bytes(dir, "vocab_spm.gguf", w.p, w.n);
    gw_free(&kvs);
    gw_free(&w);
    return fails ? 1 : 0;
}
