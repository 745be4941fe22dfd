/* test_robust.c - bad input gives one clear error and never a crash or a
 * huge allocation: the shared file reader, and the CLI cases of the
 * robustness review (each must exit 1 with exactly one line). */
#include "test.h"
#include "file_read.h"
#include "kld_ref.h"
#include "../tools/engine_cli.h"

#include <string.h>
#include <unistd.h>

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* cmd (a printf format) must exit 1 with one line containing "error" and
 * `want` (when not NULL). */
#define CHECK_ONE_ERROR(want, ...)                                                                   \
    do {                                                                                              \
        char cmd_[4096];                                                                              \
        static char out_[8192];                                                                       \
        CHECK(snprintf(cmd_, sizeof cmd_, __VA_ARGS__) < (int)sizeof cmd_, "command too long");      \
        int rc_ = test_run(cmd_, out_, sizeof out_);                                                  \
        CHECK(rc_ == 1, "'%s' exited %d: %s", cmd_, rc_, out_);                                       \
        CHECK(count_lines(out_) == 1 && strstr(out_, "error"), "'%s' printed %d lines: %s", cmd_,     \
              count_lines(out_), out_);                                                               \
        CHECK(!(want) || strstr(out_, (want) ? (want) : ""), "'%s': no '%s' in: %s", cmd_,            \
              (want) ? (want) : "", out_);                                                            \
    } while (0)

TEST(read_file_refuses_non_regular_and_large) {
    char *buf = NULL;
    size_t len = 0;
    kvq_error err = { 0 };
    CHECK(kvq_read_file("/", "text file", KVQ_TEXT_CAP, &buf, &len, &err) == KVQ_ERR_IO && !buf,
          "a directory must be refused");
    CHECK(strstr(err.msg, "not a regular file"), "message: %s", err.msg);
    if (access("/dev/zero", R_OK) == 0)
        CHECK(kvq_read_file("/dev/zero", "text file", KVQ_TEXT_CAP, &buf, &len, &err) != KVQ_OK && !buf,
              "/dev/zero must be refused");
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvq_test_read_%d.txt", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    fputs("0123456789", f);
    fclose(f);
    kvq_status st = kvq_read_file(path, "text file", 9, &buf, &len, &err);
    CHECK(st == KVQ_ERR_ARG && !buf && strstr(err.msg, "limit"), "10 bytes over a cap of 9: %d %s", (int)st, err.msg);
    st = kvq_read_file(path, "text file", 10, &buf, &len, &err);
    remove(path);
    CHECK(st == KVQ_OK && len == 10 && buf && !memcmp(buf, "0123456789", 11), "exactly the cap must be read");
    free(buf);
    CHECK(kvq_read_file("/nonexistent/x", "text file", 10, &buf, &len, &err) == KVQ_ERR_IO, "missing file");
}

TEST(read_stream_caps_standard_input) {
    FILE *f = tmpfile();
    CHECK(f, "no tmpfile");
    for (int i = 0; i < 100000; i++) fputc('a' + i % 26, f);
    rewind(f);
    char *buf = NULL;
    size_t len = 0;
    kvq_error err = { 0 };
    kvq_status st = kvq_read_stream(f, "standard input", 99999, &buf, &len, &err);
    CHECK(st == KVQ_ERR_ARG && !buf, "one byte over the cap must be refused (%d)", (int)st);
    rewind(f);
    st = kvq_read_stream(f, "standard input", 100000, &buf, &len, &err);
    fclose(f);
    CHECK(st == KVQ_OK && len == 100000 && buf[99999] == 'a' + 99999 % 26 && buf[100000] == 0, "read at the cap");
    free(buf);
}

TEST(cli_files_that_are_not_files) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf")) SKIP("../shared not found");
    CHECK_ONE_ERROR("regular file", "%s kld -m %s --base /tmp", bin, model);
    CHECK_ONE_ERROR("regular file", "%s perplexity -m %s -f /tmp", bin, model);
    CHECK_ONE_ERROR("regular file", "%s tokenize -m %s -f /dev/zero", bin, model);
    CHECK_ONE_ERROR("regular file", "%s plan -m %s -f / --budget 100%%", bin, model);
}

/* Without -b a long chunk is evaluated in batches of 512 (memory flat in
 * -c), with the same result as one batch of the whole chunk. */
TEST(cli_perplexity_default_batch_is_512) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[8192];
    double ppl[2] = { 0, 0 };
    const char *batch_flag[2] = { "", "-b 640" };
    const char *want[2] = { "batch 512", "batch 640" };
    const int runs = test_sanitized() ? 1 : 2;   /* the layout check alone under sanitizers */
    for (int i = 0; i < runs; i++) {
        CHECK(snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 640 --chunks 1 -t 2 %s", bin, model, text,
                       batch_flag[i]) < (int)sizeof cmd, "command too long");
        int rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 0, "'%s' exited %d: %s", cmd, rc, out);
        CHECK(strstr(out, want[i]), "'%s': no '%s' in: %s", cmd, want[i], out);
        const char *fe = strstr(out, "Final estimate: PPL = ");
        CHECK(fe && sscanf(fe, "Final estimate: PPL = %lf", &ppl[i]) == 1, "no PPL in: %s", out);
    }
    if (runs == 2) CHECK(fabs(ppl[0] / ppl[1] - 1.0) < 1e-4, "PPL with batches of 512 %.4f, one batch %.4f", ppl[0], ppl[1]);
}

/* Fewer than 2 scored tokens: refused before any evaluation. */
TEST(cli_too_few_scored_tokens) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    char tmp[128];
    snprintf(tmp, sizeof tmp, "/tmp/kvq_test_few_%d.kld", (int)getpid());
    CHECK_ONE_ERROR("4..", "%s perplexity -m %s -f %s -c 2", bin, model, text);
    CHECK_ONE_ERROR("at least 2", "%s perplexity -m %s -f %s -c 4 --chunks 1", bin, model, text);
    CHECK_ONE_ERROR("at least 2", "%s kld -m %s -f %s -c 4 --chunks 1 --save-base %s", bin, model, text, tmp);
    CHECK(access(tmp, F_OK) != 0, "no base file may be left behind");
    CHECK_ONE_ERROR("at least 2", "%s plan -m %s -f %s -c 4 --chunks 1 --budget 100%%", bin, model, text);
}

/* Exact rows beyond the context, negative or non-numeric counts: one
 * clear error each, before any work (issue 10), for run and perplexity. */
TEST(cli_tail_and_sink_bounds) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    CHECK_ONE_ERROR("longer than the context", "%s perplexity -m %s -f %s -c 64 -ctk q4_0 --kv-tail-tokens 65", bin,
                    model, text);
    CHECK_ONE_ERROR("longer than the context", "%s run -m %s -p Once -n 4 -c 64 --kv-tail-tokens 100000", bin, model);
    CHECK_ONE_ERROR("longer than the context", "%s perplexity -m %s -f %s -c 64 --kv-sink-tokens 65", bin, model, text);
    CHECK_ONE_ERROR("longer than the context", "%s run -m %s -p Once -n 4 -c 64 --kv-sink-tokens 100000", bin, model);
    CHECK_ONE_ERROR("--kv-tail-tokens", "%s run -m %s -p Once -n 4 -c 64 --kv-tail-tokens -1", bin, model);
    CHECK_ONE_ERROR("--kv-tail-tokens", "%s run -m %s -p Once -n 4 -c 64 --kv-tail-tokens ten", bin, model);
    CHECK_ONE_ERROR("--kv-sink-tokens", "%s run -m %s -p Once -n 4 -c 64 --kv-sink-tokens 4x", bin, model);
    CHECK_ONE_ERROR("--kvarn-sink-tile", "%s run -m %s -p Once -n 4 -c 64 --kvarn-sink-tile maybe", bin, model);
    /* the whole context as a tail is allowed */
    char cmd[4096];
    static char out[8192];
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 64 --chunks 1 -ctk q4_0 -ctv q4_0 --kv-tail-tokens 64 2>&1",
             bin, model, text);
    CHECK(test_run(cmd, out, sizeof out) == 0 && strstr(out, "Final estimate"), "tail == context refused: %s", out);
}

/* Each of --dim and --rows is in range, their product is not (13 GiB). */
TEST(cli_quant_test_caps_values) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    CHECK_ONE_ERROR("64 M", "%s quant-test --dim 16384 --rows 100000", bin);
}

/* The estimate printed before allocating is what the cache allocates. */
TEST(cli_kv_bytes_matches_the_cache) {
    kvq_model_info in = { 0 };
    in.n_layer = 3;
    in.n_head_kv = 2;
    in.head_dim_k = 64;
    in.head_dim_v = 32;
    const kvq_type layer_k[3] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_F16 };
    const int tails[3] = { 0, 16, 96 }, sinks[3] = { 0, 4, 0 };
    for (int i = 0; i < 3; i++) {
        kvq_cache_params p;
        kvq_cache_params_default(&p);
        p.n_layer = in.n_layer;
        p.n_head_kv = in.n_head_kv;
        p.head_dim_k = in.head_dim_k;
        p.head_dim_v = in.head_dim_v;
        p.n_ctx = 96;
        p.max_batch = 32;
        p.type_k = KVQ_TYPE_Q8_0;
        p.type_v = KVQ_TYPE_Q4_0;
        p.layer_type_k = i == 1 ? layer_k : NULL;
        p.tail_tokens = tails[i];
        p.sink_tokens = sinks[i];
        kvq_cache *c = NULL;
        kvq_error err = { 0 };
        CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "cache: %s", err.msg);
        kvq_cache_bytes b;
        kvq_cache_memory(c, &b);
        kvq_cache_free(c);
        const double est = cli_kv_bytes(&in, &p, p.n_ctx);
        CHECK(est == (double)b.total, "case %d: estimate %.0f bytes, the cache %zu", i, est, b.total);
    }
}

/* A context past the trained one is a warning; a cache beyond the memory
 * limit is refused before allocating, in one line. */
TEST(cli_context_warning_and_memory_limit) {
    const char *bin = test_kvq_bin();
    char model[1024], austen[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(austen, sizeof austen, "models/austen-qwen3-h128.gguf"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[8192];
    CHECK(snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 --temp 0 -c 256 -t 1", bin, model) < (int)sizeof cmd, "long");
    int rc = test_run(cmd, out, sizeof out);
    const char *w = strstr(out, "warning: context 256 is longer than the model was trained for (128)");
    CHECK(rc == 0 && w, "exit %d, no trained-context warning in: %s", rc, out);
    CHECK(!strstr(w + 1, "warning: context"), "the warning must be printed once: %s", out);
    if (test_sanitized()) SKIP("address-space limits and sanitizers do not mix");
    /* f32 K and V of 4 layers x 2 heads x 128: 8 KiB per position, 3.1 GiB at 400000 */
    CHECK_ONE_ERROR("GiB", "ulimit -v 2000000; %s run -m %s -p hi -n 1 --temp 0 -c 400000 -ctk f32 -ctv f32", bin, austen);
}

/* A copy of a shared model with the value after metadata key `key`
 * replaced by `value` (same length), written to `out`. */
static bool patched_model(const char *rel, const char *key, const void *value, size_t len, char *out, size_t cap) {
    char src[1024];
    if (!test_shared_path(src, sizeof src, rel)) return false;
    FILE *f = fopen(src, "rb");
    if (!f) return false;
    static uint8_t buf[8 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const size_t klen = strlen(key);
    size_t at = 0;
    while (at + klen + 4 < n && memcmp(buf + at, key, klen)) at++;
    if (at + klen + 4 + len > n) return false;
    memcpy(buf + at + klen + 4, value, len);   /* after the key: uint32 value type, then the value */
    snprintf(out, cap, "/tmp/kvq_test_patched_%d.gguf", (int)getpid());
    FILE *o = fopen(out, "wb");
    if (!o) return false;
    bool ok = fwrite(buf, 1, n, o) == n;
    return fclose(o) == 0 && ok;
}

TEST(model_rejects_heads_above_the_cache_limit) {
    char path[256];
    const uint32_t big = 1024;   /* the synth model stores key_length as a uint32 */
    if (!patched_model("models/synth/qwen3-h128.gguf", "qwen3.attention.key_length", &big, 4, path, sizeof path))
        SKIP("../shared not found");
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = kvq_model_load(path, &m, &err);
    remove(path);
    kvq_model_free(m);
    CHECK(st == KVQ_ERR_UNSUPPORTED && strstr(err.msg, "1024") && strstr(err.msg, "512"),
          "head size 1024: status %d, '%s'", (int)st, err.msg);
}

TEST(model_unsupported_arch_status_without_err) {
    char path[256];
    /* general.architecture's value: uint64 length 5, then "qwen3" */
    const char value[13] = { 5, 0, 0, 0, 0, 0, 0, 0, 'q', 'w', 'e', 'n', '9' };
    if (!patched_model("models/synth/qwen3-h128.gguf", "general.architecture", value, sizeof value, path, sizeof path))
        SKIP("../shared not found");
    kvq_model *m = NULL;
    kvq_status st = kvq_model_load(path, &m, NULL);
    kvq_error err = { 0 };
    kvq_status st2 = kvq_model_load(path, &m, &err);
    remove(path);
    CHECK(st == KVQ_ERR_UNSUPPORTED && !m, "unsupported architecture with err NULL: status %d", (int)st);
    CHECK(st2 == KVQ_ERR_UNSUPPORTED && strstr(err.msg, "qwen9"), "with err: %d '%s'", (int)st2, err.msg);
}

static double json_num(const char *json, const char *key) {
    char k[80];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

/* --save-base writes kvq's exact format, kld and plan read it back (KLD 0
 * against itself, precision 100%), another model or text is refused, and
 * llama.cpp's spelling still writes llama.cpp's format. */
TEST(cli_kld_exact_base_round_trip_and_checks) {
    const char *bin = test_kvq_bin();
    char model[1024], other[1024], text[1024], readme[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(other, sizeof other, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt") ||
        !test_shared_path(readme, sizeof readme, "golden/README.md"))
        SKIP("../shared not found");
    char base[128], llama[128], cmd[4096];
    static char out[16384];
    snprintf(base, sizeof base, "/tmp/kvq_test_exact_%d.kvqb", (int)getpid());
    snprintf(llama, sizeof llama, "/tmp/kvq_test_llama_%d.kld", (int)getpid());
    CHECK(snprintf(cmd, sizeof cmd, "{ %s kld -m %s -f %s -c 64 --chunks 2 -t 2 -ctk f32 -ctv f32 --save-base %s && "
                   "%s kld -m %s -f %s -c 64 --chunks 2 -t 2 --kl-divergence-base %s; } 2>&1", bin, model, text, base, bin, model,
                   text, llama) < (int)sizeof cmd, "command too long");
    int rc = test_run(cmd, out, sizeof out);
    char magic[2][9] = { "", "" };
    const char *paths[2] = { base, llama };
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (f) { /* a short read leaves a short magic, which the checks below name */
            magic[i][fread(magic[i], 1, 8, f)] = 0;
            fclose(f);
        }
    }
    if (rc || strcmp(magic[0], "KVQBASE1") || strcmp(magic[1], "_logits_")) { remove(base); remove(llama); }
    CHECK(rc == 0, "writing the bases exited %d: %s", rc, out);
    CHECK(!strcmp(magic[0], "KVQBASE1"), "--save-base must write kvq's format, got '%s'", magic[0]);
    CHECK(!strcmp(magic[1], "_logits_"), "--kl-divergence-base must write llama.cpp's format, got '%s'", magic[1]);

    CHECK(snprintf(cmd, sizeof cmd, "{ %s kld -m %s --base %s -f %s -t 2 -ctk f32 -ctv f32 --json 2>/dev/null; }", bin,
                   model, base, text) < (int)sizeof cmd, "command too long");
    rc = test_run(cmd, out, sizeof out);
    const double kld = json_num(out, "mean_kld"), prec = json_num(out, "mean_precision");
    const double mib = json_num(out, "kv_mib_full_ctx"), rms = json_num(out, "rms_dp");
    const double bytes = json_num(out, "kv_bytes"), top = json_num(out, "same_top_p");
    CHECK(rc == 0 && fabs(kld) < 1e-6 && fabs(prec - 100.0) < 1e-4, "exact base against itself: rc %d: %s", rc, out);
    CHECK(top == 100.0 && fabs(rms) < 1e-6, "same top %g%%, rms dp %g%%", top, rms);
    /* stories260K's trained context is 128, twice -c 64 */
    CHECK(fabs(mib * 1048576.0 - 2 * bytes) < 1.0, "kv_mib_full_ctx %g MiB for %g bytes at half that context", mib, bytes);

    CHECK(snprintf(cmd, sizeof cmd, "{ %s kld -m %s --base %s -t 2 --json 2>/dev/null; }", bin, model, llama) <
              (int)sizeof cmd, "command too long");
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "\"mean_precision\": null"), "no precision against a 16-bit base: %s", out);

    CHECK(snprintf(cmd, sizeof cmd, "{ %s plan -m %s --base %s --chunks 1 -t 2 --types q8_0 --budget 400%% --json "
                   "2>/dev/null; }", bin, model, base) < (int)sizeof cmd, "command too long");
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && fabs(json_num(out, "exact_mean_kld")) < 1e-6, "plan with an exact base: rc %d: %s", rc, out);

    CHECK_ONE_ERROR("different model", "%s kld -m %s --base %s", bin, other, base);
    CHECK_ONE_ERROR("does not match", "%s kld -m %s --base %s -f %s", bin, model, base, readme);
    CHECK_ONE_ERROR("different model", "%s plan -m %s --base %s --budget 100%%", bin, other, base);
    remove(base);
    remove(llama);
}

/* size %: tail and sink rows on both sides, so an f16 cache is 100% of
 * bf16 whatever its tail; output checked before the model loads. */
TEST(cli_kld_size_pct_and_early_output_check) {
    const char *bin = test_kvq_bin();
    char model[1024], base[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(base, sizeof base, "golden/toy-h64.gpl3.c128.kld"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[8192];
    CHECK(snprintf(cmd, sizeof cmd, "{ %s kld -m %s --base %s --chunks 1 -t 2 -ctk f16 -ctv f16 --kv-tail-tokens 16 "
                   "--kv-sink-tokens 4 --json 2>/dev/null; }", bin, model, base) < (int)sizeof cmd, "command too long");
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && fabs(json_num(out, "size_pct") - 100.0) < 1e-9, "f16 with tail and sink: rc %d: %s", rc, out);
    CHECK_ONE_ERROR("/nonexistent/dir", "%s kld -m /nonexistent/model.gguf -f x --save-base /nonexistent/dir/x.kvqb", bin);
    CHECK_ONE_ERROR("directory", "%s kld -m /nonexistent/model.gguf -f x --save-base /tmp", bin);
}

TEST(cli_perplexity_json) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[8192];
    CHECK(snprintf(cmd, sizeof cmd, "{ %s perplexity -m %s -f %s -c 128 --chunks 2 -t 2 --json 2>/dev/null; }", bin,
                   model, text) < (int)sizeof cmd, "command too long");
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && count_lines(out) == 1, "perplexity --json: rc %d: %s", rc, out);
    CHECK(json_num(out, "n_tokens") == 126 && json_num(out, "ppl") > 1 && json_num(out, "size_pct") == 100.0 &&
          json_num(out, "kv_mib_full_ctx") > 0, "perplexity --json: %s", out);
}

/* A scored position past the reference is an error, not a NULL record
 * read; the log-sum-exp helper is exact on a known case. */
TEST(kld_ref_compare_past_the_end) {
    const int n_vocab = 4;
    float logits[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
    const double want = log(exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0));
    CHECK(fabs(kvq_log_sum_exp(logits, n_vocab) - want) < 1e-12, "log-sum-exp %.15g, want %.15g",
          kvq_log_sum_exp(logits, n_vocab), want);
    uint16_t rec[8];
    int32_t tokens[4] = { 0, 1, 2, 3 };
    kvq_kld_encode(logits, n_vocab, rec);
    kvq_kld_base b = { .n_ctx = 4, .n_vocab = n_vocab, .n_chunk = 1, .tokens = tokens, .records = rec, .n_pos = 1,
                       .record_len = kvq_kld_record_len(n_vocab) };
    kvq_kld_ref ref;
    kvq_kld_ref_from_llama(&ref, &b);
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, &ref);
    kvq_error err = { 0 };
    kvq_status st0 = kvq_kld_acc_token(&acc, 0, logits, 3, &err);
    kvq_status st1 = kvq_kld_acc_token(&acc, 1, logits, 3, &err);
    const size_t n = acc.stats.n;
    const double kld0 = n ? acc.stats.kld[0] : -1;
    kvq_kld_acc_free(&acc);
    CHECK(st0 == KVQ_OK && n == 1 && fabs(kld0) < 1e-6, "position 0: status %d, %zu tokens, KLD %g", (int)st0, n, kld0);
    CHECK(st1 == KVQ_ERR_ARG && strstr(err.msg, "past"), "position 1 of 1: status %d '%s'", (int)st1, err.msg);
}

/* Sampling without --seed draws a random seed, prints it, and --seed
 * with that value replays the run; greedy decoding prints none. */
TEST(cli_run_random_seed_is_printed_and_replays) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf")) SKIP("../shared not found");
    char cmd[4096];
    static char out[3][8192], replay[8192];
    unsigned long long seed[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        CHECK(snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 24 -c 128 -t 1 --temp 1.5", bin, model) <
                  (int)sizeof cmd, "command too long");
        int rc = test_run(cmd, out[i], sizeof out[i]);
        const char *s = strstr(out[i], "kvq run: seed ");
        CHECK(rc == 0 && s && sscanf(s, "kvq run: seed %llu", &seed[i]) == 1, "no seed printed (rc %d): %s", rc, out[i]);
    }
    CHECK(seed[0] != seed[1], "two runs without --seed drew the same seed %llu", seed[0]);
    /* stdout only, for the replay comparison */
    CHECK(snprintf(cmd, sizeof cmd, "{ %s run -m %s -p 'Once upon a time' -n 24 -c 128 -t 1 --temp 1.5 --seed %llu "
                   "2>/dev/null; }", bin, model, seed[1]) < (int)sizeof cmd, "command too long");
    CHECK(test_run(cmd, replay, sizeof replay) == 0, "replay failed: %s", replay);
    CHECK(snprintf(cmd, sizeof cmd, "{ %s run -m %s -p 'Once upon a time' -n 24 -c 128 -t 1 --temp 1.5 --seed %llu "
                   "2>/dev/null; }", bin, model, seed[1]) < (int)sizeof cmd, "command too long");
    CHECK(test_run(cmd, out[2], sizeof out[2]) == 0 && !strcmp(out[2], replay), "--seed %llu is not reproducible",
          seed[1]);
    CHECK(strstr(out[1], replay), "--seed %llu does not replay the run: '%s' not in '%s'", seed[1], replay, out[1]);
    CHECK(snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 4 -c 128 -t 1 --temp 0", bin, model) <
              (int)sizeof cmd, "command too long");
    CHECK(test_run(cmd, out[2], sizeof out[2]) == 0 && !strstr(out[2], "seed"), "greedy printed a seed: %s", out[2]);
}

/* Message style: OUTDIR checked before anything is printed; out-of-range
 * values name the range and point at --help, in every command. */
TEST(cli_messages_outdir_first_and_range_hints) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    /* a tail longer than the context made the grid print a note first */
    CHECK_ONE_ERROR("/nonexistent/a", "%s sweep -m %s -f %s -c 64 --tails 0,999 -o /nonexistent/a/b", bin, model, text);
    CHECK_ONE_ERROR("(see kvq perplexity --help)", "%s perplexity -m %s -f %s -b 0", bin, model, text);
    CHECK_ONE_ERROR("(see kvq kld --help)", "%s kld -m %s --base x -c 2", bin, model);
    CHECK_ONE_ERROR("(see kvq run --help)", "%s run -m %s -p hi --temp 200", bin, model);
    CHECK_ONE_ERROR("(see kvq sweep --help)", "%s sweep -m %s -f %s -o /tmp/x --jobs 0", bin, model, text);
    CHECK_ONE_ERROR("(see kvq plan --help)", "%s plan -m %s -f %s --budget 10%% --chunks 0", bin, model, text);
    CHECK_ONE_ERROR("(see kvq run --help)", "%s run -m %s -p hi --kv-tail-tokens -5", bin, model);
    CHECK_ONE_ERROR("is not an integer in 10..1000000 (see kvq turbo-bench --help)", "%s turbo-bench -n 5", bin);
    CHECK_ONE_ERROR("(see kvq turbo-bench --help)", "%s turbo-bench --bogus", bin);
}

/* --prompt-cache: the first run saves, the second reuses all but the last
 * prompt token and prints the same text; other cache settings are refused
 * in one line.  --context-shift generates past the context. */
TEST(cli_run_prompt_cache_and_context_shift) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf")) SKIP("../shared not found");
    char state[128], cmd[4096];
    snprintf(state, sizeof state, "/tmp/kvq_pc_%d.kvqs", (int)getpid());
    remove(state);
    static char out1[8192], out2[8192], err2[8192];
    const char *flags = "-p 'This License applies to any program' -n 16 --temp 0 -c 128 -ctk q4_0 -ctv q4_0 --kv-tail-tokens 8";
    snprintf(cmd, sizeof cmd, "{ %s run -m %s %s --prompt-cache %s 2>/dev/null; }", bin, model, flags, state);
    const int rc1 = test_run(cmd, out1, sizeof out1);
    snprintf(cmd, sizeof cmd, "{ %s run -m %s %s --prompt-cache %s 2>&1 >/dev/null; }", bin, model, flags, state);
    const int rc2e = test_run(cmd, err2, sizeof err2);
    snprintf(cmd, sizeof cmd, "{ %s run -m %s %s --prompt-cache %s 2>/dev/null; }", bin, model, flags, state);
    const int rc2 = test_run(cmd, out2, sizeof out2);
    CHECK(rc1 == 0 && rc2 == 0 && rc2e == 0, "runs exited %d %d %d", rc1, rc2, rc2e);
    CHECK(strstr(err2, "prompt tokens reused") && !strstr(err2, " 0 of "), "no reuse reported: %s", err2);
    CHECK(!strcmp(out1, out2), "reused prompt changed the output:\n%s\nvs\n%s", out1, out2);
    static char out_bad[8192];
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'This License' -n 4 --temp 0 -c 128 -ctk q4_0 --prompt-cache %s", bin,
             model, state);
    const int rc_bad = test_run(cmd, out_bad, sizeof out_bad);
    int error_lines = 0;
    for (const char *p = out_bad; (p = strstr(p, "error:")) != NULL; p++) error_lines++;
    CHECK(rc_bad == 1 && error_lines == 1 && strstr(out_bad, "tail tokens is 8, this cache's 0"),
          "other settings: rc %d: %s", rc_bad, out_bad);
    remove(state);
    static char out3[16384];
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'This License' -n 150 --temp 0 -c 64 -ctk q8_0 -ctv q8_0 --context-shift 2>&1",
             bin, model);
    const int rc3 = test_run(cmd, out3, sizeof out3);
    CHECK(rc3 == 0 && strstr(out3, "context shift: kept 1") && strstr(out3, "generated 150 tokens"),
          "context shift run (rc %d): %s", rc3, out3);
}

/* examples/generate.c, built against include/kvq.h alone, runs on the
 * bundled model: it prints the prompt, a continuation and the cache size. */
TEST(example_generate_runs) {
    const char *dir = getenv("KVQ_EXAMPLES");
    if (!dir) SKIP("KVQ_EXAMPLES not set (make test sets it)");
    if (access("models/austen-qwen3-h128-4k-q8_0.gguf", R_OK) != 0) SKIP("models/ not found (run from the repository)");
    char cmd[2048];
    static char out[8192];
    snprintf(cmd, sizeof cmd, "%s/generate models/austen-qwen3-h128-4k-q8_0.gguf 'It was a truth' 12", dir);
    const int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "It was a truth") && strlen(out) > 60 && strstr(out, "generate: KV cache"),
          "example exited %d: %s", rc, out);
    snprintf(cmd, sizeof cmd, "%s/generate /nonexistent.gguf x 1", dir);
    CHECK(test_run(cmd, out, sizeof out) == 1 && strstr(out, "generate:"), "bad model: %s", out);
}

/* Symbol hygiene: libkvq.so exports the functions the public headers
 * (include/kvq.h, include/kvq_eval.h) declare and nothing else (no
 * gguf_find_tensor to collide with ggml's, no helpers without the kvq_
 * prefix), under the SONAME libkvq.so.0. */
TEST(shared_library_exports_only_the_public_api) {
    const char *lib = getenv("KVQ_SHARED_LIB");
    if (!lib) SKIP("KVQ_SHARED_LIB not set (make test sets it)");
    static char header[1 << 18];
    size_t hn = 0;
    const char *public_headers[] = { "include/kvq.h", "include/kvq_eval.h" };
    for (size_t i = 0; i < sizeof public_headers / sizeof *public_headers; i++) {
        FILE *h = fopen(public_headers[i], "r");
        if (!h) SKIP("%s not found (run from the repository)", public_headers[i]);
        hn += fread(header + hn, 1, sizeof header - 1 - hn, h);
        fclose(h);
    }
    header[hn] = 0;
    char cmd[1200];
    static char out[1 << 16];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' | awk '$2 ~ /^[TDBRW]$/ {print $3}'", lib);
    CHECK(test_run(cmd, out, sizeof out) == 0, "nm failed: %s", out);
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char decl[160];
        snprintf(decl, sizeof decl, "%s(", line);
        CHECK(!strncmp(line, "kvq_", 4) && strstr(header, decl), "exported symbol '%s' is not declared in include/", line);
        n++;
    }
    CHECK(n >= 40, "only %d symbols exported", n);
    snprintf(cmd, sizeof cmd, "readelf -d '%s'", lib);
    CHECK(test_run(cmd, out, sizeof out) == 0 && strstr(out, "Library soname: [libkvq.so.0]"), "no SONAME: %s", out);
}

/* Every docs/... page that a comment in include/, src/ or tools/ cites
 * exists in the repository (the specs live in docs/spec/, not outside). */
TEST(cited_docs_exist) {
    if (access("docs", F_OK) != 0 || access("src", F_OK) != 0) SKIP("run from the repository");
    static char out[1 << 16];
    const int rc = test_run("grep -rhoE 'docs/[a-z0-9_/-]+\\.md' include src tools | sort -u", out, sizeof out);
    CHECK(rc == 0, "grep failed: %s", out);
    int n = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        CHECK(access(line, R_OK) == 0, "a comment cites %s, which does not exist", line);
        n++;
    }
    CHECK(n >= 5, "only %d cited pages found", n);
}
