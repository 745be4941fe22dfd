/* test_calib_stats.c - what `kvq calibrate` measures (src/calib_stats.c)
 * and the command itself: the moments are the cached rows', the received
 * attention sums to the number of queries, the file is the same for any
 * thread count, and bad arguments give one error line each. */
#include "base_kvq.h"
#include "cache.h"
#include "calib_build.h"
#include "calib_stats.h"
#include "model.h"
#include "test.h"

#include <unistd.h>

static kvq_ctx *exact_ctx(const kvq_model *m, int n_ctx, int threads) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.type_k = p.type_v = KVQ_TYPE_F32;
    p.rot.mode = KVQ_ROT_OFF;
    p.n_ctx = n_ctx;
    p.max_batch = 32;
    kvq_ctx *ctx = NULL;
    kvq_error err;
    return kvq_ctx_create(m, &p, threads, &ctx, &err) == KVQ_OK ? ctx : NULL;
}

TEST(calib_stats_are_the_cached_rows) {
    char path[1024];
    if (!test_shared_path(path, sizeof path, "models/toy-h64.gguf")) SKIP("../shared/models/toy-h64.gguf not found");
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    CHECK(kvq_model_load(path, &m, &err) == KVQ_OK, "%s", err.msg);
    const kvq_model_info *in = kvq_model_get_info(m);
    enum { N = 96 };
    kvq_ctx *ctx = exact_ctx(m, N, 2);
    kvq_calib_stats s;
    CHECK(ctx && kvq_calib_stats_init(&s, in, N, &err) == KVQ_OK, "setup: %s", err.msg);
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)(1 + (i * 37) % (in->n_vocab - 1));
    kvq_calib_observer ob = { &s, ctx };
    kvq_ctx_set_observer(ctx, kvq_calib_observe, &ob);
    kvq_status st = KVQ_OK;
    for (int pos = 0; !st && pos < N; pos += 32) st = kvq_ctx_eval(ctx, toks + pos, 32, pos, NULL, false, &err);
    /* the moments of layer 1, head 1 against the cache's own rows */
    const int G = in->n_head / in->n_head_kv, d = in->head_dim_k;
    double sum0 = 0, want0 = 0;
    float row[512];
    for (int t = 0; !st && t < N; t++) {
        st = kvq_cache_read_row(kvq_ctx_cache(ctx), 1, false, KVQ_PART_BODY, 1, t, row, &err);
        want0 += row[0];
    }
    sum0 = kvq_calib_stats_at(&s, 1, 1, KVQ_MOM_K)->sum[0];
    if (!st) st = kvq_calib_stats_end_chunk(&s, ctx, &err);
    const kvq_moments *va = kvq_calib_stats_at(&s, 1, 1, KVQ_MOM_V_ATT);
    const kvq_moments *k = kvq_calib_stats_at(&s, 1, 1, KVQ_MOM_K), *q = kvq_calib_stats_at(&s, 1, 1, KVQ_MOM_Q);
    /* each query's weights sum to 1, so sum_t p_t^2 is in [1/(t+1), 1]
     * per query: v_att's weight lies between G sum_i 1/(i+1) and N G */
    double lo = 0;
    for (int i = 0; i < N; i++) lo += (double)G / (i + 1);
    const bool counts = k->w == N && q->w == (double)N * G && va->w > lo && va->w < (double)N * G && s.n_tokens == N;
    /* the query moments are the queries' (a different row set from K) */
    const bool distinct = fabs(q->sum[0] / q->w - k->sum[0] / k->w) > 1e-6;
    kvq_calib_stats_free(&s);
    kvq_ctx_free(ctx);
    kvq_model_free(m);
    CHECK(st == KVQ_OK, "%s", err.msg);
    CHECK(fabs(sum0 - want0) < 1e-9 * (1 + fabs(want0)), "K sum %.9g, cached rows %.9g", sum0, want0);
    CHECK(counts, "weights: K %g Q %g V_att %g (> %g) tokens %lld", k->w, q->w, va->w, lo, s.n_tokens);
    CHECK(distinct, "query moments equal the keys'");
    (void)d;
}

static int run_calibrate(const char *bin, const char *model, const char *text, const char *out, int threads,
                         char *log, size_t cap) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -f %s -o %s -c 64 --chunks 3 -t %d 2>&1", bin, model, text, out,
             threads);
    return test_run(cmd, log, cap);
}

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        const int x = fgetc(fa), y = fgetc(fb);
        same = x == y;
        if (x == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

TEST(calib_cli_same_file_for_any_thread_count) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared/models/toy-h64.gguf or text/gpl3.txt not found");
    char a[64], b[64];
    snprintf(a, sizeof a, "/tmp/kvq_calib_t1_%d.cal", (int)getpid());
    snprintf(b, sizeof b, "/tmp/kvq_calib_t2_%d.cal", (int)getpid());
    static char log[8192];
    int rc1 = run_calibrate(bin, model, text, a, 1, log, sizeof log);
    CHECK(rc1 == 0, "calibrate -t 1 exited %d: %s", rc1, log);
    CHECK(strstr(log, "chunk 3/3") && strstr(log, "wrote"), "no progress / summary: %s", log);
    int rc2 = run_calibrate(bin, model, text, b, 2, log, sizeof log);
    const bool same = rc2 == 0 && same_file(a, b);
    kvq_calib *c = NULL;
    kvq_error err = { 0 };
    /* the file's model hash (from the loaded model's mapping) is the
     * model file's hash */
    uint64_t hash = 0;
    kvq_status st = kvq_model_file_hash(model, &hash, &err);
    if (!st) st = kvq_calib_load_for(a, hash, &c, &err);
    const bool shape = st == KVQ_OK && c->n_layer == 4 && c->head_dim_k == 64 && c->n_rates == KVQ_CALIB_N_RATES &&
                       c->n_tokens == 3 * 64;
    kvq_calib_free(c);
    unlink(a);
    unlink(b);
    CHECK(rc2 == 0, "calibrate -t 2 exited %d", rc2);
    CHECK(same, "-t 1 and -t 2 wrote different files");
    CHECK(shape, "load: %s", st ? err.msg : "unexpected shape");
}

TEST(calib_cli_bad_arguments) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    struct { const char *args, *needle; } cases[] = {
        { "-f x.txt -o x.cal", "no model given" },
        { "-m x.gguf -o x.cal", "no calibration text" },
        { "-m x.gguf -f x.txt", "no output file" },
        { "-m x.gguf -f x.txt -o x.cal --query-mix 1.5", "--query-mix: '1.5' is not a number in 0..1" },
        { "-m x.gguf -f x.txt -o /nonexistent/dir/x.cal", "does not exist" },
        { "-m /nonexistent.gguf -f x.txt -o /tmp/x.cal", "cannot load" },
        { "-m x.gguf -f x.txt -o x.cal --frobnicate", "unknown option" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[1024];
        static char out[4096];
        snprintf(cmd, sizeof cmd, "%s calibrate %s 2>&1", bin, cases[i].args);
        const int rc = test_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        CHECK(rc == 1 && lines == 1 && strstr(out, cases[i].needle), "'%s': exit %d, %d lines: %s", cases[i].args, rc,
              lines, out);
    }
}
