/* test_drift.c - kvq drift (src/eval/drift.h): the statistics on hand-made
 * runs, the prompt-file splitter and the plot; then on the 4k Austen
 * model: an f32 cache drifts by exactly nothing, q2_0 diverges before
 * q8_0, the first divergence equals a real free-running decode, and the
 * CLI's bad inputs are one line each and its results independent of the
 * thread and job counts. */
#include "test.h"
#include "drift.h"
#include "kld.h"
#include "ladder.h"
#include "plot_drift.h"

#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------ no model needed */

TEST(drift_buckets_cover_positions) {
    kvq_drift_bucket b[KVQ_DRIFT_MAX_BUCKETS];
    int n = kvq_drift_buckets(3500, b);
    CHECK(n == 5, "%d buckets for 3500", n);
    const int first[] = { 1, 17, 65, 257, 1025 }, last[] = { 16, 64, 256, 1024, 3500 };
    for (int i = 0; i < n; i++)
        CHECK(b[i].first == first[i] && b[i].last == last[i], "bucket %d is %d-%d", i, b[i].first, b[i].last);
    n = kvq_drift_buckets(10, b);
    CHECK(n == 1 && b[0].first == 1 && b[0].last == 10, "10 positions: %d buckets, %d-%d", n, b[0].first, b[0].last);
    n = kvq_drift_buckets(17, b);
    CHECK(n == 2 && b[1].first == 17 && b[1].last == 17, "17 positions: %d buckets", n);
}

/* A run of 4 prompts x 20 positions with KLD = prompt + position / 100. */
static void fake_run(kvq_drift_run *r, double *kld, uint8_t *same, int *div) {
    r->n_prompts = 4;
    r->n_gen = 20;
    r->kld = kld;
    r->same_top = same;
    r->first_div = div;
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 20; i++) {
            kld[p * 20 + i] = p + (i + 1) / 100.0;
            same[p * 20 + i] = 1;
        }
    const int d[4] = { 3, 21, 10, 21 };   /* two prompts never diverge */
    for (int p = 0; p < 4; p++) {
        div[p] = d[p];
        if (d[p] <= 20) same[p * 20 + d[p] - 1] = 0;
    }
}

TEST(drift_summary_of_a_known_run) {
    double kld[80];
    uint8_t same[80];
    int div[4];
    kvq_drift_run r;
    fake_run(&r, kld, same, div);
    kvq_drift_summary s;
    kvq_error err = { 0 };
    CHECK(kvq_drift_summarize(&r, &s, &err) == KVQ_OK, "%s", err.msg);
    CHECK(s.n_buckets == 2 && s.bucket[0].n == 64 && s.bucket[1].n == 16, "buckets %d (%zu, %zu)", s.n_buckets,
          s.bucket[0].n, s.bucket[1].n);
    /* bucket 1-16: mean over p of p + mean(1..16)/100 = 1.5 + 0.085 */
    CHECK(fabs(s.bucket[0].mean - 1.585) < 1e-12, "bucket mean %.15g", s.bucket[0].mean);
    CHECK(fabs(s.bucket[1].mean - (1.5 + 0.185)) < 1e-12, "bucket 2 mean %.15g", s.bucket[1].mean);
    CHECK(fabs(s.mean_kld - (1.5 + 0.105)) < 1e-12, "mean %.15g", s.mean_kld);
    CHECK(s.max_kld == 3.2, "max %g", s.max_kld);
    /* first divergences 3, 10, 21, 21: median 15.5, identical half */
    CHECK(s.median_first_div == 15.5 && s.frac_identical == 0.5 && s.min_first_div == 3, "median %g, identical %g, min %d",
          s.median_first_div, s.frac_identical, s.min_first_div);
    /* KLD at divergence: prompt 0 position 3 (0.03), prompt 2 position 10 (2.10) */
    CHECK(fabs(s.mean_kld_at_div - (0.03 + 2.10) / 2) < 1e-12, "KLD at divergence %.15g", s.mean_kld_at_div);
    CHECK(fabs(s.same_top_p - 100.0 * 78 / 80) < 1e-12, "same top %g", s.same_top_p);
    kvq_drift_prompt_stats ps;
    kvq_drift_prompt_summary(&r, 1, &ps);
    CHECK(ps.first_div == 21 && isnan(ps.kld_at_div) && ps.same_top_p == 100.0, "prompt 2: %d %g %g", ps.first_div,
          ps.kld_at_div, ps.same_top_p);
}

TEST(drift_curve_bins_every_position_once) {
    static double kld[3 * 3500];
    static uint8_t same[3 * 3500];
    int div[3] = { 1, 1, 1 };
    for (int i = 0; i < 3 * 3500; i++) kld[i] = 1.0 + (i % 3500);
    kvq_drift_run r = { 3, 3500, kld, same, div };
    int lo[KVQ_DRIFT_CURVE_MAX], hi[KVQ_DRIFT_CURVE_MAX];
    double y[KVQ_DRIFT_CURVE_MAX];
    size_t n = kvq_drift_curve(&r, lo, hi, y, KVQ_DRIFT_CURVE_MAX);
    CHECK(n > 20 && n < KVQ_DRIFT_CURVE_MAX, "%zu bins", n);
    CHECK(lo[0] == 1 && hi[n - 1] == 3500, "bins span %d..%d", lo[0], hi[n - 1]);
    for (size_t k = 0; k < n; k++) {
        CHECK(k == 0 || lo[k] == hi[k - 1] + 1, "bin %zu starts at %d after %d", k, lo[k], hi[k - 1]);
        CHECK(hi[k] >= lo[k], "bin %zu is %d..%d", k, lo[k], hi[k]);
        /* KLD = position, so a bin's mean is the middle of its positions */
        CHECK(fabs(y[k] - (lo[k] + hi[k]) / 2.0) < 1e-9, "bin %zu mean %g", k, y[k]);
    }
    CHECK(hi[7] == 8 && lo[7] == 8, "the first eight positions are bins of their own");
}

TEST(drift_split_prompts) {
    char text[] = "first prompt\r\n\n   \nsecond one\n\t\nthird";
    char **lines = NULL;
    size_t n = 0;
    kvq_error err = { 0 };
    CHECK(kvq_drift_split_prompts(text, strlen(text), &lines, &n, &err) == KVQ_OK, "%s", err.msg);
    CHECK(n == 3, "%zu prompts", n);
    CHECK(!strcmp(lines[0], "first prompt") && !strcmp(lines[1], "second one") && !strcmp(lines[2], "third"),
          "prompts '%s' '%s' '%s'", lines[0], lines[1], lines[2]);
    free(lines);
    char blank[] = "\n  \n\r\n";
    CHECK(kvq_drift_split_prompts(blank, strlen(blank), &lines, &n, &err) == KVQ_OK && n == 0, "blank file: %zu", n);
    free(lines);
}

TEST(drift_plot_one_line_per_series) {
    const int lo[3] = { 1, 2, 3 }, hi[3] = { 1, 2, 10 };
    const double a[3] = { 1e-3, 2e-3, 5e-3 }, zero[3] = { 0, 0, 0 };
    kvq_drift_series s[3] = {
        { "q4_0/q4_0", "q4_0/q4_0", KVQ_DASH_SOLID, lo, hi, a, 3, 2 },
        { "q4_0/q4_0 rot-off <&>", "q4_0/q4_0", KVQ_DASH_DASHED, lo, hi, a, 3, 11 },
        { "f32/f32", "f32/f32", KVQ_DASH_SOLID, lo, hi, zero, 3, 11 },
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f, "open_memstream");
    kvq_error err = { 0 };
    kvq_status st = kvq_plot_drift_write(f, s, 3, 10, NULL, &err);
    fclose(f);
    CHECK(st == KVQ_OK, "%s", err.msg);
    int lines = 0, marks = 0;
    for (const char *p = buf; (p = strstr(p, "<polyline class=\"series\"")); p++) lines++;
    for (const char *p = buf; (p = strstr(p, "class=\"first-divergence\"")); p++) marks++;
    CHECK(lines == 3, "%d series lines", lines);
    CHECK(marks == 1, "%d first-divergence marks (only one series diverges within 10)", marks);
    CHECK(strstr(buf, "rot-off &lt;&amp;&gt;") && !strstr(buf, "<&>"), "label not escaped");
    CHECK(strstr(buf, "&#8804;"), "zeros drawn on the floor without the floor tick saying so");
    CHECK(strstr(buf, "</svg>"), "SVG not closed");
    free(buf);
}

/* ---------------------------------------------------- on the 4k model */

static const char *const PROMPTS[] = {
    "She had three sons before Catherine was born;",
    "The season was full, the room crowded, and",
    "Friendship is certainly the finest balm for the",
    "I assure you, if it had not been",
    "Her plan for the morning thus settled, she",
    "\"Yes, I went to the pump-room as soon",
};
enum { N_PROMPTS = 6, N_GEN = 40 };

typedef struct model_fixture {
    kvq_model *m;
    kvq_drift_ref ref;
    int32_t *tok[N_PROMPTS];
    int n_tok[N_PROMPTS];
    int n_ctx;
} model_fixture;

static kvq_ctx *make_ctx(const model_fixture *fx, kvq_type t, int threads) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.rot.env_disable = p.rot.env_disable_k = p.rot.env_disable_v = false;
    p.type_k = p.type_v = t;
    p.n_ctx = fx->n_ctx;
    p.max_batch = 512;
    kvq_ctx *c = NULL;
    kvq_error err = { 0 };
    if (kvq_ctx_create(fx->m, &p, threads, &c, &err)) fprintf(stderr, "ctx: %s\n", err.msg);
    return c;
}

static void fixture_free(model_fixture *fx) {
    kvq_drift_ref_free(&fx->ref);
    for (int i = 0; i < N_PROMPTS; i++) free(fx->tok[i]);
    kvq_model_free(fx->m);
}

/* Load the model, tokenise the prompts and make the f32 reference;
 * returns false (with why in msg) when the model is absent. */
static bool fixture_make(model_fixture *fx, char *msg, size_t cap) {
    memset(fx, 0, sizeof *fx);
    char path[1024];
    if (!test_shared_path(path, sizeof path, "models/austen-qwen3-h128-4k-q8_0.gguf")) {
        snprintf(msg, cap, "../shared/models/austen-qwen3-h128-4k-q8_0.gguf not found");
        return false;
    }
    kvq_error err = { 0 };
    if (kvq_model_load(path, &fx->m, &err)) { snprintf(msg, cap, "load: %s", err.msg); return false; }
    const kvq_model_info *in = kvq_model_get_info(fx->m);
    int longest = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        fx->tok[i] = malloc(256 * sizeof(int32_t));
        fx->n_tok[i] = kvq_tokenize(fx->m, PROMPTS[i], strlen(PROMPTS[i]), in->add_bos, true, fx->tok[i], 256);
        if (fx->n_tok[i] < 2 || fx->n_tok[i] > 256) { snprintf(msg, cap, "tokenize: %d", fx->n_tok[i]); return false; }
        longest = KVQ_MAX(longest, fx->n_tok[i]);
    }
    fx->n_ctx = longest + N_GEN;
    kvq_ctx *exact = make_ctx(fx, KVQ_TYPE_F32, 1);
    kvq_status st = exact ? kvq_drift_ref_init(&fx->ref, N_PROMPTS, N_GEN, in->n_vocab, in->eos_id, &err) : KVQ_ERR_NOMEM;
    for (int i = 0; !st && i < N_PROMPTS; i++)
        st = kvq_drift_ref_run(&fx->ref, (size_t)i, exact, fx->tok[i], fx->n_tok[i], NULL, NULL, &err);
    kvq_ctx_free(exact);
    if (st) { snprintf(msg, cap, "reference: %s", err.msg); return false; }
    return true;
}

static bool measure(const model_fixture *fx, kvq_type t, int threads, kvq_drift_run *run) {
    kvq_ctx *c = make_ctx(fx, t, threads);
    kvq_error err = { 0 };
    kvq_status st = c ? kvq_drift_measure(c, &fx->ref, NULL, NULL, run, &err) : KVQ_ERR_NOMEM;
    if (st) fprintf(stderr, "measure %s: %s\n", kvq_type_name(t), err.msg);
    kvq_ctx_free(c);
    return st == KVQ_OK;
}

TEST(drift_f32_is_exact_and_q2_diverges_before_q8) {
    model_fixture fx;
    char why[300];
    if (!fixture_make(&fx, why, sizeof why)) { fixture_free(&fx); SKIP("%s", why); }
    kvq_drift_run f32 = { 0 }, q8 = { 0 }, q2 = { 0 };
    bool ok = measure(&fx, KVQ_TYPE_F32, 2, &f32) && measure(&fx, KVQ_TYPE_Q8_0, 1, &q8) &&
              measure(&fx, KVQ_TYPE_Q2_0, 1, &q2);
    kvq_drift_summary s8, s2;
    kvq_error err = { 0 };
    ok = ok && !kvq_drift_summarize(&q8, &s8, &err) && !kvq_drift_summarize(&q2, &s2, &err);
    int bad_f32 = -1, bad_order = -1;
    for (size_t k = 0; ok && k < (size_t)N_PROMPTS * N_GEN && bad_f32 < 0; k++)
        if (f32.kld[k] != 0.0 || !f32.same_top[k]) bad_f32 = (int)k;
    for (int p = 0; ok && p < N_PROMPTS && bad_order < 0; p++)
        if (f32.first_div[p] != N_GEN + 1 || q2.first_div[p] > q8.first_div[p]) bad_order = p;
    const int q2d0 = ok ? q2.first_div[0] : 0, q8d0 = ok ? q8.first_div[0] : 0;
    kvq_drift_run_free(&f32);
    kvq_drift_run_free(&q8);
    kvq_drift_run_free(&q2);
    fixture_free(&fx);
    CHECK(ok, "a measurement failed");
    CHECK(bad_f32 < 0, "f32 cache (2 threads) differs from the f32 reference (1 thread) at cell %d", bad_f32);
    CHECK(bad_order < 0, "prompt %d: f32 divergence or q2_0 after q8_0 (q2_0 %d, q8_0 %d on prompt 1)", bad_order, q2d0,
          q8d0);
    CHECK(s2.median_first_div < s8.median_first_div, "median first divergence q2_0 %g, q8_0 %g", s2.median_first_div,
          s8.median_first_div);
    CHECK(s2.mean_kld > 100 * s8.mean_kld && s8.mean_kld > 0, "mean KLD q2_0 %g, q8_0 %g", s2.mean_kld, s8.mean_kld);
}

/* Free-running greedy decoding with q2_0: the first token that differs
 * from the reference must be where the teacher-forced run says, with
 * the same KLD there (the same computation up to that point). */
TEST(drift_first_divergence_is_free_running) {
    model_fixture fx;
    char why[300];
    if (!fixture_make(&fx, why, sizeof why)) { fixture_free(&fx); SKIP("%s", why); }
    kvq_drift_run tf = { 0 };
    const bool ok = measure(&fx, KVQ_TYPE_Q2_0, 1, &tf);
    const int n_vocab = fx.ref.n_vocab;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    kvq_ctx *c = make_ctx(&fx, KVQ_TYPE_Q2_0, 1);
    int mismatch = -1, free_div = 0, tf_div = 0;
    double kld_free = -1, kld_tf = -2;
    kvq_error err = { 0 };
    for (int p = 0; ok && c && logits && p < N_PROMPTS && mismatch < 0; p++) {
        const kvq_drift_prompt *pr = &fx.ref.prompts[p];
        kvq_cache_clear(kvq_ctx_cache(c));
        kvq_status st = kvq_ctx_eval(c, pr->tokens, pr->n_prompt, 0, logits, true, &err);
        free_div = N_GEN + 1;
        for (int i = 0; !st && i < N_GEN; i++) {
            const int32_t own = kvq_argmax(logits, n_vocab);   /* its own greedy token */
            if (own != pr->tokens[pr->n_prompt + i]) {
                free_div = i + 1;
                /* KL(exact || free-running) at the divergence */
                const float *e = pr->logits + (size_t)i * n_vocab;
                double lse_t = kvq_log_sum_exp(logits, n_vocab), kl = 0;
                for (int k = 0; k < n_vocab; k++) {
                    const double lp_e = e[k] - pr->log_norm[i], lp_t = logits[k] - lse_t;
                    kl += exp(lp_e) * (lp_e - lp_t);
                }
                kld_free = kl;
                break;
            }
            st = kvq_ctx_eval(c, &own, 1, pr->n_prompt + i, logits, true, &err);
        }
        tf_div = tf.first_div[p];
        kld_tf = tf_div <= N_GEN ? tf.kld[(size_t)p * N_GEN + tf_div - 1] : -1;
        if (st || free_div != tf_div || (free_div <= N_GEN && kld_free != kld_tf)) mismatch = p;
    }
    kvq_ctx_free(c);
    free(logits);
    kvq_drift_run_free(&tf);
    fixture_free(&fx);
    CHECK(ok, "teacher-forced run failed");
    CHECK(mismatch < 0, "prompt %d: free-running diverges at %d (KLD %.17g), teacher-forced says %d (KLD %.17g)",
          mismatch, free_div, kld_free, tf_div, kld_tf);
}

/* ------------------------------------------------------------- the CLI */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(drift_cli_bad_input_one_line) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/austen-qwen3-h128-4k-q8_0.gguf"))
        SKIP("../shared/models/austen-qwen3-h128-4k-q8_0.gguf not found");
    char empty[256], blank[256];
    snprintf(empty, sizeof empty, "/tmp/kvq_test_drift_empty_%d.txt", (int)getpid());
    snprintf(blank, sizeof blank, "/tmp/kvq_test_drift_blank_%d.txt", (int)getpid());
    FILE *f = fopen(empty, "w");
    CHECK(f, "cannot write %s", empty);
    fclose(f);
    f = fopen(blank, "w");
    CHECK(f, "cannot write %s", blank);
    fputs("\n   \n\n", f);
    fclose(f);
    static const char *const want[] = { "holds no prompt", "holds no prompt", "do not fit a context", "needs",
                                        "unknown option", "no prompt given", "not both", "--types/--pairs" };
    char cases[8][1400];
    int n = 0;
    snprintf(cases[n++], 1400, "%s drift -m %s --prompts %s", bin, model, empty);
    snprintf(cases[n++], 1400, "%s drift -m %s --prompts %s", bin, model, blank);
    snprintf(cases[n++], 1400, "%s drift -m %s -p 'It was' -n 4096", bin, model);      /* N beyond the context */
    snprintf(cases[n++], 1400, "%s drift -m %s -c 40 -n 30 -p 'It was a truth universally acknowledged, that a single "
             "man in possession of a good fortune, must be in want of a wife.'", bin, model);   /* prompt too long */
    snprintf(cases[n++], 1400, "%s drift -m %s -p 'It was' --bogus", bin, model);
    snprintf(cases[n++], 1400, "%s drift -m %s -n 8", bin, model);
    snprintf(cases[n++], 1400, "%s drift -m %s -n 8 -p a --prompts %s", bin, model, blank);
    snprintf(cases[n++], 1400, "%s drift -m %s -n 8 -p a --types q4_0 -ctk q8_0", bin, model);
    static char out[8192];
    for (int i = 0; i < n; i++) {
        int rc = test_run(cases[i], out, sizeof out);
        if (rc != 1 || count_lines(out) != 1) { remove(empty); remove(blank); }
        CHECK(rc == 1, "'%s' exited %d: %s", cases[i], rc, out);
        CHECK(count_lines(out) == 1 && strstr(out, "error") && strstr(out, want[i]), "'%s' printed %d lines "
              "(want one saying '%s'): %s", cases[i], count_lines(out), want[i], out);
    }
    remove(empty);
    remove(blank);
}

/* Drop every "seconds" value (timings) from a JSON text, in place. */
static void drop_seconds(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, ", \"seconds\": ", 13)) {
            r += 13;
            while (*r && *r != ',' && *r != '}') r++;
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
}

TEST(drift_cli_json_same_for_any_threads_and_jobs) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/austen-qwen3-h128-4k-q8_0.gguf"))
        SKIP("../shared/models/austen-qwen3-h128-4k-q8_0.gguf not found");
    char prompts[256];
    snprintf(prompts, sizeof prompts, "/tmp/kvq_test_drift_prompts_%d.txt", (int)getpid());
    FILE *f = fopen(prompts, "w");
    CHECK(f, "cannot write %s", prompts);
    for (int i = 0; i < 3; i++) fprintf(f, "%s\n", PROMPTS[i]);
    fclose(f);
    static char a[65536], b[65536];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "{ %s drift -m %s --prompts %s -n 24 --types f32,q4_0,kvarn3 --tails 0,16 --json -t 1 "
             "--jobs 1 2>/dev/null; }", bin, model, prompts);
    int rc1 = test_run(cmd, a, sizeof a);
    snprintf(cmd, sizeof cmd, "{ %s drift -m %s --prompts %s -n 24 --types f32,q4_0,kvarn3 --tails 0,16 --json -t 4 "
             "--jobs 2 2>/dev/null; }", bin, model, prompts);
    int rc2 = test_run(cmd, b, sizeof b);
    remove(prompts);
    CHECK(rc1 == 0 && rc2 == 0, "exit %d / %d: %s", rc1, rc2, a);
    CHECK(count_lines(a) >= 4, "%d JSON lines: %s", count_lines(a), a);
    CHECK(strstr(a, "\"cache_k\": \"f32\"") && strstr(a, "\"median_first_divergence\": 25") &&
          strstr(a, "\"frac_identical\": 1,") && strstr(a, "\"mean_kld_generated\": 0,"),
          "the f32 line is not exact: %.600s", a);
    CHECK(strstr(a, "\"cache_k\": \"q4_0\", \"cache_v\": \"q4_0\"") && strstr(a, "\"n_prompts\": 3, \"n_gen\": 24"),
          "q4_0 line or counts missing: %.600s", a);
    drop_seconds(a);
    drop_seconds(b);
    CHECK(!strcmp(a, b), "results depend on threads / jobs:\n%.800s\n---\n%.800s", a, b);
}

/* ------------------------------------------------- the sweep's columns */

static kvq_eval_row ladder_row(const char *label, double size, double median, double first_div, double drift_kld) {
    kvq_eval_row r;
    kvq_eval_row_init(&r);
    kvq_eval_copy_str(r.label, sizeof r.label, label);
    r.size_pct = size;
    r.median_kld = median;
    r.drift_first_div = first_div;
    r.drift_kld = drift_kld;
    r.drift_n_gen = 100;
    return r;
}

TEST(drift_ladder_ranks_by_drift_figures) {
    kvq_eval_row rows[5] = {
        ladder_row("ref", 200, 0, 101, 0),
        ladder_row("a", 50, 0.001, 30, 0.002),    /* median-KLD frontier: a, c; drift: a, b */
        ladder_row("b", 40, 0.002, 60, 0.001),
        ladder_row("c", 20, 0.0015, 10, 0.05),
        ladder_row("d", 60, 0.01, 101, 0.0005),   /* never diverges: first on the first_div ladder */
    };
    rows[0].is_reference = true;
    size_t idx[5];
    size_t n = kvq_ladder_frontier_by(rows, 5, KVQ_RANK_MEDIAN_KLD, idx);
    CHECK(n == 3 && idx[0] == 0 && idx[1] == 1 && idx[2] == 3, "median KLD ladder: %zu rows", n);
    n = kvq_ladder_frontier_by(rows, 5, KVQ_RANK_FIRST_DIV, idx);
    /* by size descending: d (never), b (60), c (10); a (30 at 50%) is beaten by b (60 at 40%) */
    CHECK(n == 4 && idx[1] == 4 && idx[2] == 2 && idx[3] == 3, "first-divergence ladder: %zu rows (%zu %zu %zu)", n,
          idx[1], idx[2], idx[3]);
    n = kvq_ladder_frontier_by(rows, 5, KVQ_RANK_DRIFT_KLD, idx);
    CHECK(n == 4 && idx[1] == 4 && idx[2] == 2 && idx[3] == 3, "drift-KLD ladder: %zu rows", n);
    rows[2].drift_first_div = NAN;   /* not measured: takes no part */
    n = kvq_ladder_frontier_by(rows, 5, KVQ_RANK_FIRST_DIV, idx);
    CHECK(n == 4 && idx[2] == 1, "an unmeasured row stayed on the ladder");
    kvq_ladder_rank r;
    CHECK(kvq_ladder_rank_parse("first_div", &r) && r == KVQ_RANK_FIRST_DIV && !kvq_ladder_rank_parse("x", &r),
          "rank names");
}

static bool read_file(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return true;
}

TEST(drift_cli_sweep_columns_and_errors) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/austen-qwen3-h128-4k-q8_0.gguf"))
        SKIP("../shared/models/austen-qwen3-h128-4k-q8_0.gguf not found");
    char text[1024], dir[256], cmd[4096], path[512];
    if (!test_shared_path(text, sizeof text, "text/austen-northanger-40k.txt")) SKIP("../shared/text not found");
    char prompts[256];
    snprintf(dir, sizeof dir, "/tmp/kvq_test_drift_sweep_%d", (int)getpid());
    snprintf(prompts, sizeof prompts, "/tmp/kvq_test_drift_sweep_prompts_%d.txt", (int)getpid());
    FILE *f = fopen(prompts, "w");
    CHECK(f, "cannot write %s", prompts);
    for (int i = 0; i < 3; i++) fprintf(f, "%s\n", PROMPTS[i]);
    fclose(f);
    static char out[16384], md[16384];
    snprintf(cmd, sizeof cmd, "%s sweep -m %s -f %s -c 256 --chunks 1 --types f32,q2_0,q8_0 --pairs none --rot on "
             "--tails 0 --drift 40 --drift-prompts %s --rank first_div -t 1 -o %s", bin, model, text, prompts, dir);
    int rc = test_run(cmd, out, sizeof out);
    snprintf(path, sizeof path, "%s/table.md", dir);
    const bool have_md = read_file(path, md, sizeof md);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run(cmd, NULL, 0);
    remove(prompts);
    CHECK(rc == 0, "sweep --drift exited %d: %.1500s", rc, out);
    CHECK(have_md && strstr(md, "| first divergence | drift KLD |"), "no drift columns in table.md: %.800s", md);
    CHECK(strstr(md, "| f32/f32 |") && strstr(strstr(md, "| f32/f32 |"), "| never | 0 |"),
          "the f32 row does not read 'never | 0': %.800s", md);
    CHECK(strstr(out, "Pareto frontier of (size %, first divergence)"), "ladder not ranked by first divergence");
    static const char *const bad[][2] = {
        { "--rank first_div", "needs --drift" },
        { "--drift 300", "needs" },            /* 33-token windows + 300 > -c 256 */
        { "--rank fastest --drift 8", "not one of" },
    };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(bad); i++) {
        snprintf(cmd, sizeof cmd, "%s sweep -m %s -f %s -c 256 --types q8_0 -o %s %s", bin, model, text, dir, bad[i][0]);
        rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 1 && count_lines(out) == 1 && strstr(out, bad[i][1]), "'%s' gave %d: %s", bad[i][0], rc, out);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run(cmd, NULL, 0);
}
