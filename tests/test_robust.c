/* test_robust.c - bad input gives one clear error and never a crash or a
 * huge allocation: the shared file reader, and the CLI cases of the
 * robustness review (each must exit 1 with exactly one line). */
#include "test.h"
#include "file_read.h"
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
    const int tails[3] = { 0, 16, 100 }, sinks[3] = { 0, 4, 0 };
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
    CHECK_ONE_ERROR("GiB", "ulimit -v 2000000; %s run -m %s -p hi -n 1 -c 400000 -ctk f32 -ctv f32", bin, austen);
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
