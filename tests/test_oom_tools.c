/* test_oom_tools.c - the out-of-memory loop (tests/oom.h) over what the
 * CLI's other commands run: the calibration pipeline, the planner, the
 * reports, ladder and plot, the sweep's grid, a llama.cpp-format base, the
 * sampler, a thread pool (made on the calling thread), drift, the
 * formats' own tools (KVarN without scratch, calibrated rows, trellis
 * training) and reading a stream. */
#include "calib.h"
#include "calib_build.h"
#include "calib_stats.h"
#include "drift.h"
#include "file_read.h"
#include "kld.h"
#include "kld_ref.h"
#include "kvarn.h"
#include "ladder.h"
#include "model.h"
#include "oom.h"
#include "planner.h"
#include "plot_svg.h"
#include "report.h"
#include "sampler.h"
#include "sweep_grid.h"
#include "turbo.h"

#include <string.h>

/* ---------------------------------------------------------- calibration */

typedef struct calib_job {
    const kvq_model *m;
    const char *path;
    int32_t tokens[OOM_CTX];
    uint64_t checksum;
} calib_job;

/* kvq calibrate's pipeline on one chunk: the statistics gathered by the
 * forward pass's observer, the calibration fitted, written and read back. */
static kvq_status job_calibrate(void *ud, kvq_error *err) {
    calib_job *j = ud;
    const kvq_model_info *in = kvq_model_get_info(j->m);
    const uint64_t hash = kvq_model_hash(j->m);
    double pred[64 * KVQ_CALIB_N_RATES];
    if (in->n_layer * in->n_head_kv * 2 > 64) return kvq_fail(err, KVQ_ERR_ARG, "test model too large");
    kvq_calib_stats s;
    kvq_status st = kvq_calib_stats_init(&s, in, OOM_CTX, err);
    if (st != KVQ_OK) return st;
    kvq_ctx *ctx = NULL;
    kvq_calib *c = NULL, *back = NULL;
    st = oom_ctx(j->m, KVQ_TYPE_F32, &ctx, err);
    if (st == KVQ_OK) {
        kvq_calib_observer ob = { &s, ctx };
        kvq_ctx_set_observer(ctx, kvq_calib_observe, &ob);
        for (int start = 0; st == KVQ_OK && start < OOM_CTX; start += 16)
            st = kvq_ctx_eval(ctx, j->tokens + start, 16, start, NULL, false, err);
        if (st == KVQ_OK) st = kvq_calib_stats_end_chunk(&s, ctx, err);
        kvq_ctx_set_observer(ctx, NULL, NULL);
    }
    static const int rates[] = { 300 };   /* one of the six: each rate repeats the same allocations */
    if (st == KVQ_OK) st = kvq_calib_build(&s, j->m, hash, 0.5, 1, rates, &c, pred, err);
    if (st == KVQ_OK) st = kvq_calib_write(c, j->path, err);
    if (st == KVQ_OK) st = kvq_calib_load_for(j->path, hash, &back, err);
    if (st == KVQ_OK) j->checksum = back->checksum;
    kvq_calib_free(back);
    kvq_calib_free(c);
    kvq_ctx_free(ctx);
    kvq_calib_stats_free(&s);
    return st;
}

TEST(oom_calibrate) {
    char path[128], out[128];
    static kvq_model *m;
    m = oom_load_tiny(path, sizeof path, 1, 32);   /* one layer, head_dim 16: the fit is O(d^3) */
    remove(path);
    CHECK(m, "cannot load the tiny model");
    oom_tmp_path(out, sizeof out, "calib.kvqc");
    static calib_job ref, j;
    ref.m = m;
    ref.path = out;
    test_rng r = { 11, 0, 0 };
    for (int i = 0; i < OOM_CTX; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_calibrate(&ref, &err) == KVQ_OK, "calibrate: %s", err.msg);
    j = ref;
    j.checksum = 0;
    oom_count c = { 0 };
    OOM_CHECK(job_calibrate, &j, &c, 40);
    CHECK(j.checksum == ref.checksum && ref.checksum, "calibration %llx after the loop, want %llx",
          (unsigned long long)j.checksum, (unsigned long long)ref.checksum);
    remove(out);
    kvq_model_free(m);
}

/* ------------------------------------------------------------- planner */

typedef struct plan_job {
    const kvq_model *m;
    int32_t tokens[OOM_CTX];
    kvq_type k0, v0;
    double predicted;
} plan_job;

/* kvq plan on one chunk: the in-memory reference, the sensitivity table
 * of one candidate type, the knapsack's choice at 40% of bf16. */
static kvq_status job_plan(void *ud, kvq_error *err) {
    plan_job *j = ud;
    kvq_kld_base *base = NULL;
    kvq_status st = kvq_plan_reference(j->m, j->tokens, OOM_CTX, 1, 1, &base, err);
    if (st != KVQ_OK) return st;
    kvq_kld_ref ref;
    kvq_kld_ref_from_llama(&ref, base);
    kvq_plan_setup s;
    kvq_plan_setup_init(&s, j->m, &ref);
    s.n_threads = 1;
    memset(&s.cache.rot, 0, sizeof s.cache.rot);
    const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0 };
    kvq_plan_table t = { 0 };
    kvq_plan p = { 0 };
    st = kvq_plan_sensitivities(&s, types, 2, &t, err);
    const kvq_model_info *in = kvq_model_get_info(j->m);
    if (st == KVQ_OK) st = kvq_plan_choose(&t, kvq_plan_budget_pct(in, 40.0), &p, err);
    if (st == KVQ_OK) {
        j->k0 = p.types_k[0];
        j->v0 = p.types_v[0];
        j->predicted = p.predicted_kld;
    }
    kvq_plan_free(&p);
    kvq_plan_table_free(&t);
    kvq_kld_base_free(base);
    return st;
}

TEST(oom_plan) {
    char path[128];
    static kvq_model *m;
    m = oom_load_tiny(path, sizeof path, 1, 64);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    static plan_job ref, j;
    ref.m = m;
    test_rng r = { 13, 0, 0 };
    for (int i = 0; i < OOM_CTX; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_plan(&ref, &err) == KVQ_OK, "plan: %s", err.msg);
    j = ref;
    j.predicted = -1;
    oom_count c = { 0 };
    OOM_CHECK(job_plan, &j, &c, 40);
    CHECK(j.predicted == ref.predicted && j.k0 == ref.k0 && j.v0 == ref.v0, "the plan differs after the loop");
    kvq_model_free(m);
}

/* ------------------------------------------------- reports, ladder, plot */

typedef struct report_job {
    const char *dir;
    kvq_eval_row rows[4];
    size_t n_read;
    double kld_read[4];
} report_job;

static kvq_status job_report(void *ud, kvq_error *err) {
    report_job *j = ud;
    char path[256];
    const kvq_report_meta meta = { "tiny.gguf", "text.txt", OOM_CTX, 1, NULL };
    const kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    kvq_plot_opts o;
    kvq_plot_opts_default(&o);
    static const kvq_report_kind kinds[] = { KVQ_REPORT_MD, KVQ_REPORT_JSON, KVQ_REPORT_CSV };
    kvq_status st = KVQ_OK;
    for (size_t k = 0; st == KVQ_OK && k < KVQ_ARRAY_LEN(kinds); k++) {
        snprintf(path, sizeof path, "%s.%zu", j->dir, k);
        st = kvq_report_save(path, kinds[k], j->rows, 4, &meta, err);
    }
    snprintf(path, sizeof path, "%s.svg", j->dir);
    if (st == KVQ_OK) st = kvq_plot_svg_save(path, j->rows, 4, &th, &o, err);
    FILE *f = st == KVQ_OK ? fopen("/dev/null", "w") : NULL;
    if (f) {
        st = kvq_ladder_write_md(f, j->rows, 4, &th, err);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s.2", j->dir);
    f = st == KVQ_OK ? fopen(path, "r") : NULL;
    kvq_eval_row *back = NULL;
    if (f) {
        st = kvq_report_read_csv(f, &back, &j->n_read, err);
        fclose(f);
    }
    for (size_t i = 0; st == KVQ_OK && i < j->n_read && i < 4; i++) j->kld_read[i] = back[i].mean_kld;
    free(back);
    return st;
}

TEST(oom_reports) {
    static report_job ref, j;
    char dir[128];
    oom_tmp_path(dir, sizeof dir, "report");
    ref.dir = dir;
    static const char *const types[] = { "f16", "q8_0", "q4_0", "kvarn3" };
    for (int i = 0; i < 4; i++) {
        kvq_eval_row *r = &ref.rows[i];
        kvq_eval_row_init(r);
        snprintf(r->label, sizeof r->label, "%s/%s", types[i], types[i]);
        snprintf(r->cache_k, sizeof r->cache_k, "%s", types[i]);
        snprintf(r->cache_v, sizeof r->cache_v, "%s", types[i]);
        r->is_reference = i == 0;
        r->n_tokens = 15;
        r->kv_bytes = 1000.0 / (i + 1);
        r->kv_bytes_bf16 = 1000.0;
        r->size_pct = 100.0 / (i + 1);
        r->mib = 0.5 / (i + 1);
        r->mean_kld = r->median_kld = r->p99_9_kld = r->max_kld = 0.001 * i * i;
        r->same_top_p = 100.0 - i;
        r->ppl_q = 10.0 + i;
    }
    kvq_eval_rows_precision(ref.rows, 4);
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_report(&ref, &err) == KVQ_OK, "reports: %s", err.msg);
    CHECK(ref.n_read == 4, "%zu rows read back", ref.n_read);
    j = ref;
    memset(j.kld_read, 0, sizeof j.kld_read);
    oom_count c = { 0 };
    OOM_CHECK(job_report, &j, &c, 6);
    CHECK(j.n_read == 4 && !memcmp(j.kld_read, ref.kld_read, sizeof ref.kld_read), "rows read back differ");
    const char *ext[] = { ".0", ".1", ".2", ".svg" };
    for (int i = 0; i < 4; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", dir, ext[i]);
        remove(p);
    }
}

/* ------------------------------------------------------------- sampler */

typedef struct sample_job { int picks[8]; } sample_job;

/* kvq_sample answers -1 when out of memory (sampler.h). */
static kvq_status job_sample(void *ud, kvq_error *err) {
    sample_job *j = ud;
    float logits[300];
    for (int i = 0; i < 300; i++) logits[i] = (float)((i * 37) % 101) / 10.0f;
    kvq_sampler_params p;
    kvq_sampler_params_default(&p);
    p.seed = 5;
    kvq_sampler *s = NULL;
    kvq_status st = kvq_sampler_create(&p, &s, err);
    for (int k = 0; st == KVQ_OK && k < 8; k++)
        if ((j->picks[k] = kvq_sample(s, logits, 100 + 25 * k)) < 0) st = kvq_fail(err, KVQ_ERR_NOMEM, "sample: -1");
    kvq_sampler_free(s);
    return st;
}

TEST(oom_sampler) {
    sample_job ref, j;
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_sample(&ref, &err) == KVQ_OK, "sample: %s", err.msg);
    oom_count c = { 0 };
    OOM_CHECK(job_sample, &j, &c, 4);
    CHECK(!memcmp(ref.picks, j.picks, sizeof ref.picks), "picks differ after the loop");
}

/* ------------------------------------------- sweep grid, llama base, pool */

typedef struct grid_job { size_t n_cfg; char last[KVQ_EVAL_LABEL_MAX]; } grid_job;

/* kvq sweep's lists parsed and its grid built. */
static kvq_status job_grid(void *ud, kvq_error *err) {
    grid_job *j = ud;
    kvq_type *types = NULL;
    kvq_sweep_pair *pairs = NULL;
    int *tails = NULL;
    kvq_sweep_config *cfg = NULL;
    size_t nt = 0, np = 0, ntl = 0;
    kvq_status st = kvq_sweep_parse_types("q8_0,q4_0,kvarn3,turbo3_tcq", &types, &nt, err);
    if (st == KVQ_OK) st = kvq_sweep_parse_pairs("q8_0/q4_0,f16/kvarn2", &pairs, &np, err);
    if (st == KVQ_OK) st = kvq_sweep_parse_tails("0,128", &tails, &ntl, err);
    if (st == KVQ_OK) {
        const kvq_sweep_spec spec = { KVQ_TYPE_F32, types, nt, pairs, np,
                                      tails, ntl, KVQ_SWEEP_ROT_BOTH, 512, NULL, 0 };
        st = kvq_sweep_grid(&spec, &cfg, &j->n_cfg, err);
    }
    if (st == KVQ_OK) snprintf(j->last, sizeof j->last, "%s", cfg[j->n_cfg - 1].label);
    free(types);
    free(pairs);
    free(tails);
    free(cfg);
    return st;
}

TEST(oom_sweep_grid) {
    grid_job ref = { 0, "" }, j = { 0, "" };
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_grid(&ref, &err) == KVQ_OK && ref.n_cfg > 10, "grid: %s (%zu configurations)", err.msg, ref.n_cfg);
    oom_count c = { 0 };
    OOM_CHECK(job_grid, &j, &c, 8);
    CHECK(j.n_cfg == ref.n_cfg && !strcmp(j.last, ref.last), "the grid differs after the loop");
}

typedef struct llama_base_job { const char *path; int n_vocab; size_t n_pos; uint16_t first; } llama_base_job;

/* A llama.cpp-format KLD base written and read back (kld.h). */
static kvq_status job_llama_base(void *ud, kvq_error *err) {
    llama_base_job *j = ud;
    int32_t toks[OOM_CTX];
    float logits[320];
    for (int i = 0; i < OOM_CTX; i++) toks[i] = i;
    for (int i = 0; i < j->n_vocab; i++) logits[i] = (float)(i % 17) * 0.25f;
    kvq_kld_writer *w = NULL;
    kvq_status st = kvq_kld_writer_open(j->path, OOM_CTX, j->n_vocab, 1, toks, &w, err);
    for (int p = 0; st == KVQ_OK && p < kvq_kld_scored_per_chunk(OOM_CTX); p++) st = kvq_kld_writer_add(w, logits, err);
    kvq_error cerr = { KVQ_OK, "" };
    kvq_status cst = w ? kvq_kld_writer_close(w, &cerr) : KVQ_OK;
    if (st == KVQ_OK && cst != KVQ_OK) {
        st = cst;
        *err = cerr;
    }
    kvq_kld_base *b = NULL;
    if (st == KVQ_OK) st = kvq_kld_base_read(j->path, &b, err);
    if (st == KVQ_OK) {
        j->n_pos = b->n_pos;
        j->first = kvq_kld_base_record(b, 0)[0];
    }
    kvq_kld_base_free(b);
    return st;
}

TEST(oom_llama_base) {
    char path[128];
    oom_tmp_path(path, sizeof path, "base.kld");
    llama_base_job ref = { path, 300, 0, 0 }, j = ref;
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_llama_base(&ref, &err) == KVQ_OK, "base: %s", err.msg);
    j.n_pos = 0;
    oom_count c = { 0 };
    OOM_CHECK(job_llama_base, &j, &c, 4);
    CHECK(j.n_pos == ref.n_pos && j.first == ref.first && ref.n_pos > 0, "the base differs after the loop");
    remove(path);
}

/* The pool is made on the calling thread, so its allocations are counted
 * in order even though its workers then run. */
static int g_pool_sum;
static void pool_task(void *ctx, int i, int thread) {
    (void)ctx;
    (void)thread;
    __atomic_fetch_add(&g_pool_sum, i + 1, __ATOMIC_RELAXED);
}

static kvq_status job_pool(void *ud, kvq_error *err) {
    (void)ud;
    kvq_pool *p = kvq_pool_create(3);
    if (!p) return kvq_fail(err, KVQ_ERR_NOMEM, "kvq_pool_create: NULL");
    g_pool_sum = 0;
    kvq_pool_run(p, pool_task, NULL, 10);
    kvq_pool_free(p);
    return g_pool_sum == 55 ? KVQ_OK : kvq_fail(err, KVQ_ERR_ARG, "tasks summed to %d", g_pool_sum);
}

TEST(oom_pool) {
    oom_count c = { 0 };
    OOM_CHECK(job_pool, NULL, &c, 2);
}

/* --------------------------------------------------------------- drift */

typedef struct drift_job { const kvq_model *m; double mean_kld; double median_first_div; } drift_job;

/* kvq drift on two prompts of 4 tokens, 6 generated: the exact reference,
 * a q4_0 run teacher-forced against it, the summary. */
static kvq_status job_drift(void *ud, kvq_error *err) {
    drift_job *j = ud;
    char text[] = "the cat sat\n\n  \na big red dog\n";
    char **lines = NULL;
    size_t n_lines = 0;
    kvq_drift_ref ref = { 0 };
    kvq_drift_run run = { 0 };
    kvq_ctx *exact = NULL, *ctx = NULL;
    kvq_drift_summary sum;
    const int nv = kvq_model_get_info(j->m)->n_vocab;
    kvq_status st = kvq_drift_split_prompts(text, sizeof text - 1, &lines, &n_lines, err);
    if (st == KVQ_OK) st = kvq_drift_ref_init(&ref, n_lines, 6, nv, 2, err);
    if (st == KVQ_OK) st = oom_ctx(j->m, KVQ_TYPE_F32, &exact, err);
    for (size_t p = 0; st == KVQ_OK && p < n_lines; p++) {
        int32_t toks[16];
        const int n = kvq_tokenize(j->m, lines[p], strlen(lines[p]), true, false, toks, 16);
        if (n < 0) st = kvq_fail(err, KVQ_ERR_NOMEM, "tokenize failed");   /* -1: its only error here */
        else if (n == 0 || n > 16) st = kvq_fail(err, KVQ_ERR_ARG, "tokenize: %d tokens", n);
        else st = kvq_drift_ref_run(&ref, p, exact, toks, n, NULL, NULL, err);
    }
    if (st == KVQ_OK) st = oom_ctx(j->m, KVQ_TYPE_Q4_0, &ctx, err);
    if (st == KVQ_OK) st = kvq_drift_measure(ctx, &ref, NULL, NULL, &run, err);
    if (st == KVQ_OK) st = kvq_drift_summarize(&run, &sum, err);
    if (st == KVQ_OK) {
        j->mean_kld = sum.mean_kld;
        j->median_first_div = sum.median_first_div;
    }
    kvq_drift_run_free(&run);
    kvq_ctx_free(ctx);
    kvq_ctx_free(exact);
    kvq_drift_ref_free(&ref);
    free(lines);
    return st;
}

TEST(oom_drift) {
    char path[128];
    static kvq_model *m;
    m = oom_load_tiny(path, sizeof path, 1, 64);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    drift_job ref = { m, -1, -1 }, j = ref;
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_drift(&ref, &err) == KVQ_OK, "drift: %s", err.msg);
    CHECK(ref.mean_kld > 0 && ref.median_first_div >= 1, "mean KLD %g, first divergence %g", ref.mean_kld,
          ref.median_first_div);
    oom_count c = { 0 };
    OOM_CHECK(job_drift, &j, &c, 30);
    CHECK(j.mean_kld == ref.mean_kld && j.median_first_div == ref.median_first_div, "the drift differs after the loop");
    kvq_model_free(m);
}

/* ------------------------------------------- the formats' own allocations */

typedef struct format_job {
    uint8_t kvarn[70000];
    float codebook[1 << 12], x[128 * 64];
    double mse[2];
} format_job;

/* What kvq quant-test and kvq turbo-train call: a KVarN tile quantised
 * without caller scratch, a calibrated code fitted to plain rows, a
 * trellis codebook trained. */
static kvq_status job_formats(void *ud, kvq_error *err) {
    format_job *j = ud;
    const kvq_kvarn_shape shape = { 64, 3, true };
    if (kvq_kvarn_record_bytes(shape) > sizeof j->kvarn) return kvq_fail(err, KVQ_ERR_ARG, "record too large");
    kvq_status st = kvq_kvarn_quantize(shape, j->x, 4, j->kvarn, NULL);
    if (st != KVQ_OK) return kvq_fail(err, st, "kvarn quantize failed");
    kvq_calib_rows rows;
    st = kvq_calib_fit_rows(j->x, 128, 16, 300, &rows, err);
    kvq_calib_rows_free(&rows);
    if (st == KVQ_OK) st = kvq_turbo_tcq_train(2, 64, 1, 3, j->codebook, j->mse, err);
    return st;
}

TEST(oom_format_tools) {
    static format_job ref, j;
    test_rng r = { 17, 0, 0 };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(ref.x); i++) ref.x[i] = (float)test_rng_gauss(&r);
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_formats(&ref, &err) == KVQ_OK, "formats: %s", err.msg);
    memcpy(j.x, ref.x, sizeof ref.x);
    oom_count c = { 0 };
    OOM_CHECK(job_formats, &j, &c, 10);
    CHECK(!memcmp(j.kvarn, ref.kvarn, sizeof ref.kvarn) && !memcmp(j.codebook, ref.codebook, sizeof ref.codebook) &&
          !memcmp(j.mse, ref.mse, sizeof ref.mse), "results differ after the loop");
}

/* ------------------------------------------------------ reading a stream */

typedef struct stream_job { const char *path; size_t len; uint64_t sum; } stream_job;

/* A stream read whole: the buffer starts small and doubles (standard
 * input's path; a regular file is read at its size at once). */
static kvq_status job_stream(void *ud, kvq_error *err) {
    stream_job *j = ud;
    FILE *f = fopen(j->path, "rb");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "cannot open %s", j->path);
    char *buf = NULL;
    kvq_status st = kvq_read_stream(f, "test stream", (size_t)1 << 24, &buf, &j->len, err);
    fclose(f);
    j->sum = 0;
    for (size_t i = 0; st == KVQ_OK && i < j->len; i++) j->sum = j->sum * 31 + (uint8_t)buf[i];
    free(buf);
    return st;
}

TEST(oom_read_stream) {
    char path[128];
    oom_tmp_path(path, sizeof path, "stream.txt");
    CHECK(tm_save_text(path, 40000, 3), "cannot write %s", path);
    stream_job ref = { path, 0, 0 }, j = ref;
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_stream(&ref, &err) == KVQ_OK && ref.len > 100000, "read: %s (%zu bytes)", err.msg, ref.len);
    oom_count c = { 0 };
    OOM_CHECK(job_stream, &j, &c, 4);
    remove(path);
    CHECK(j.len == ref.len && j.sum == ref.sum, "the bytes differ after the loop");
}
