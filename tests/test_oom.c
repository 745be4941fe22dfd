/* test_oom.c - every allocation of the library can fail cleanly, tested
 * the way SQLite tests its out-of-memory paths: a job runs with
 * allocation n failing (src/base/alloc.h), n = 1, 2, 3, ..., until a run
 * makes fewer than n allocations and so runs with no failure at all.
 * Each failing run must end in KVQ_ERR_NOMEM with a message (not success,
 * not another error, not a crash), having freed what it took (make
 * sanitize: LeakSanitizer is asked after every job); the run with no
 * failure must give the result an ordinary run gives.  Each loop runs
 * twice: failing only allocation n (the code after a failure goes on
 * with memory again, so a failure that is ignored is seen) and failing
 * every allocation from n on (so cleanup code that allocates is seen).
 *
 * The jobs: model load (a tiny llama written here; a shared BPE model too
 * when present), tokenising, cache creation + write + attention for a
 * block, a KVarN, a TurboQuant and a calibrated type, a decode step
 * (context, prompt, one token), a sweep cell (reference base written,
 * opened, one configuration's KLD) and the sweep's grid, cache truncate,
 * shift, save and restore, the calibration pipeline, the planner, the
 * reports, ladder and plot, a llama.cpp-format base, the sampler and a
 * thread pool.  One thread everywhere (the pool is made on the calling
 * thread), so "the nth allocation" is the same call in every run. */
#include "attn_ref.h"
#include "base_kvq.h"
#include "calib.h"
#include "chunks.h"
#include "drift.h"
#include "kld.h"
#include "kld_ref.h"
#include "calib_stats.h"
#include "calib_build.h"
#include "ladder.h"
#include "model.h"
#include "model_writer.h"
#include "planner.h"
#include "plot_svg.h"
#include "report.h"
#include "sampler.h"
#include "sweep_grid.h"
#include "test.h"

#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define OOM_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOM_LSAN 1
#endif
#endif
#ifdef OOM_LSAN
int __lsan_do_recoverable_leak_check(void);   /* <sanitizer/lsan_interface.h> */
#endif

typedef kvq_status (*oom_job)(void *ud, kvq_error *err);

typedef struct oom_count {
    long points;   /* allocations that were made to fail, one run each */
} oom_count;

enum { OOM_MAX_RUNS = 20000 };

/* Runs job with allocation n failing (persist: n and every later one),
 * n = 1, 2, ..., until a run has nothing fail; false with msg on the
 * first run that breaks the rules above. */
static bool oom_loop(oom_job job, void *ud, int persist, oom_count *c, char *msg, size_t cap) {
    for (long n = 1; n <= OOM_MAX_RUNS; n++) {
        kvq_error err = { KVQ_OK, "" };
        kvq_alloc_fail_at(n, persist);
        const kvq_status st = job(ud, &err);
        const long failed = kvq_alloc_failed();
        kvq_alloc_fail_at(0, 0);
        if (!failed) {
            c->points += n - 1;
            if (st == KVQ_OK) return true;
            snprintf(msg, cap, "with no allocation failing the job failed: status %d, %s", (int)st, err.msg);
            return false;
        }
        if (st != KVQ_ERR_NOMEM || !err.msg[0]) {
            snprintf(msg, cap, "allocation %ld failing%s: status %d (want %d, KVQ_ERR_NOMEM), message '%s'", n,
                     persist ? " (and every later one)" : "", (int)st, (int)KVQ_ERR_NOMEM, err.msg);
            return false;
        }
    }
    snprintf(msg, cap, "more than %d allocations: the job never finished", OOM_MAX_RUNS);
    return false;
}

/* Both loops; false with msg when either breaks a rule or leaks. */
static bool oom_check(oom_job job, void *ud, oom_count *c, char *msg, size_t cap) {
    if (!oom_loop(job, ud, 0, c, msg, cap) || !oom_loop(job, ud, 1, c, msg, cap)) return false;
#ifdef OOM_LSAN
    if (__lsan_do_recoverable_leak_check()) {
        snprintf(msg, cap, "LeakSanitizer found leaks (report above)");
        return false;
    }
#endif
    return true;
}

#define OOM_CHECK(job, ud, c, min_points)                                                                      \
    do {                                                                                                        \
        char msg_[512] = "";                                                                                    \
        const long before_ = (c)->points;                                                                       \
        bool ok_ = oom_check(job, ud, c, msg_, sizeof msg_);                                                    \
        CHECK(ok_, "%s: %s", #job, msg_);                                                                       \
        CHECK((c)->points - before_ >= (min_points), "%s: only %ld failure points (want >= %d)", #job,          \
              (c)->points - before_, (min_points));                                                             \
    } while (0)

static void tmp_path(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "/tmp/kvq_test_oom_%s_%d", what, (int)getpid());
}

/* ---------------------------------------------------------- model load */

/* head_dim 32 (one KV head), so every cache family fits it. */
static tm_spec oom_spec(void) {
    tm_spec s = tm_spec_default();
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 64;
    return s;
}

typedef struct load_job { const char *path; int n_vocab; } load_job;

static kvq_status job_load(void *ud, kvq_error *err) {
    load_job *j = ud;
    kvq_model *m = NULL;
    kvq_status st = kvq_model_load(j->path, &m, err);
    if (st == KVQ_OK) j->n_vocab = kvq_model_get_info(m)->n_vocab;
    kvq_model_free(m);
    return st;
}

TEST(oom_model_load) {
    char path[128];
    tmp_path(path, sizeof path, "model.gguf");
    tm_spec s = oom_spec();
    CHECK(tm_save_spec(&s, path), "cannot write %s", path);
    load_job j = { path, 0 };
    oom_count c = { 0 };
    OOM_CHECK(job_load, &j, &c, 20);
    remove(path);
    CHECK(j.n_vocab == tm_n_vocab(), "n_vocab %d, want %d", j.n_vocab, tm_n_vocab());
}

/* A shared model with a BPE vocabulary (byte-level merges) when present. */
TEST(oom_model_load_shared) {
    char buf[1024];
    const char *path = test_shared_path(buf, sizeof buf, "models/toy-h64.gguf");
    if (!path) SKIP("../shared/models/toy-h64.gguf not found");
    load_job j = { path, 0 };
    oom_count c = { 0 };
    OOM_CHECK(job_load, &j, &c, 20);
    CHECK(j.n_vocab > 256, "n_vocab %d", j.n_vocab);
}

/* ------------------------------------------------------------ tokenise */

typedef struct tok_job { const kvq_model *m; int n; int32_t ids[64]; } tok_job;

/* kvq_tokenize answers -1 on any error (kvq.h has no status for it). */
static kvq_status job_tokenize(void *ud, kvq_error *err) {
    tok_job *j = ud;
    static const char text[] = "the cat sat on the mat, then a big red dog ran to the sun.";
    j->n = kvq_tokenize(j->m, text, sizeof text - 1, true, false, j->ids, 64);
    if (j->n < 0) return kvq_fail(err, KVQ_ERR_NOMEM, "tokenize failed");
    return j->n <= 64 ? KVQ_OK : kvq_fail(err, KVQ_ERR_ARG, "%d tokens", j->n);
}

static kvq_model *load_tiny_shape(char *path, size_t cap, int n_layer, int n_embd) {
    tmp_path(path, cap, "tiny.gguf");
    tm_spec s = oom_spec();
    s.block_count = s.n_blocks = n_layer;
    s.n_embd = n_embd;
    kvq_model *m = NULL;
    kvq_error err;
    if (tm_save_spec(&s, path) && kvq_model_load(path, &m, &err) != KVQ_OK) m = NULL;
    return m;
}

static kvq_model *load_tiny(char *path, size_t cap) { return load_tiny_shape(path, cap, 2, 64); }

TEST(oom_tokenize) {
    char path[128];
    kvq_model *m = load_tiny(path, sizeof path);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    static tok_job ref, j;
    ref.m = j.m = m;
    kvq_error err;
    CHECK(job_tokenize(&ref, &err) == KVQ_OK, "tokenize: %d", ref.n);
    oom_count c = { 0 };
    OOM_CHECK(job_tokenize, &j, &c, 2);
    CHECK(j.n == ref.n && !memcmp(j.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids), "tokens differ");
    kvq_model_free(m);
}

/* The byte-level BPE tokenizer (and its pre-tokenizer) of a shared qwen3
 * model, when present. */
TEST(oom_tokenize_bpe_shared) {
    char buf[1024];
    const char *path = test_shared_path(buf, sizeof buf, "models/austen-qwen3-h128-q8_0.gguf");
    if (!path) SKIP("../shared/models/austen-qwen3-h128-q8_0.gguf not found");
    kvq_model *m = NULL;
    kvq_error err = { KVQ_OK, "" };
    CHECK(kvq_model_load(path, &m, &err) == KVQ_OK, "%s", err.msg);
    static tok_job ref, j;
    ref.m = j.m = m;
    CHECK(job_tokenize(&ref, &err) == KVQ_OK, "tokenize: %d", ref.n);
    oom_count c = { 0 };
    OOM_CHECK(job_tokenize, &j, &c, 8);
    CHECK(j.n == ref.n && !memcmp(j.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids), "tokens differ");
    kvq_model_free(m);
}

/* --------------------------------------------------------------- cache */

enum { CACHE_TOK = 136, CACHE_HD = 32 };   /* one whole KVarN tile and 8 positions more */

typedef struct cache_job {
    kvq_type tk, tv;
    const attn_data *d;
    float out[CACHE_TOK * 2 * CACHE_HD];
} cache_job;

static kvq_status job_cache(void *ud, kvq_error *err) {
    cache_job *j = ud;
    kvq_cache_params p;
    attn_params(&p, j->d->n_head_kv, CACHE_HD, CACHE_HD, CACHE_TOK, j->tk, j->tv, KVQ_ROT_AUTO);
    p.kvarn_quantize_first_tile = true;
    p.tail_tokens = 8;
    kvq_cache *c = NULL;
    kvq_status st = kvq_cache_create(&p, &c, err);
    if (st == KVQ_OK) st = kvq_cache_write(c, 0, 0, CACHE_TOK, j->d->k, j->d->v, err);
    if (st == KVQ_OK)
        st = kvq_cache_attend(c, 0, 0, CACHE_TOK, j->d->n_head, j->d->q, 1.0f / sqrtf((float)CACHE_HD), j->out, NULL,
                              err);
    kvq_cache_free(c);
    return st;
}

TEST(oom_cache_families) {
    const kvq_type types[][2] = { { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0 },
                                  { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3 },
                                  { KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_TURBO3_TCQ },
                                  { KVQ_TYPE_CAL300, KVQ_TYPE_CAL250 } };
    static attn_data d;
    CHECK(attn_data_make(&d, CACHE_TOK, 2, 1, CACHE_HD, CACHE_HD, 7), "no test data");
    CHECK(attn_test_calib(1, 1, CACHE_HD, CACHE_HD), "no test calibration");   /* made once, before the loops */
    static cache_job ref, j;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        const char *tk = kvq_type_name(types[i][0]), *tv = kvq_type_name(types[i][1]);
        ref.tk = j.tk = types[i][0];
        ref.tv = j.tv = types[i][1];
        ref.d = j.d = &d;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_cache(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_cache, &j, &c, 8);
        CHECK(!memcmp(ref.out, j.out, sizeof ref.out), "%s/%s: attention differs after the loop", tk, tv);
    }
    attn_data_free(&d);
}

/* -------------------------------------------------------- decode step */

enum { DEC_CTX = 32, DEC_PROMPT = 5 };

typedef struct decode_job {
    const kvq_model *m;
    kvq_type tk, tv;
    int n_threads, n_vocab;
    float *logits;
} decode_job;

static const int32_t dec_tokens[DEC_PROMPT + 1] = { 1, 300, 301, 302, 303, 304 };

static kvq_status job_decode(void *ud, kvq_error *err) {
    decode_job *j = ud;
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_ctx = DEC_CTX;
    p.max_batch = 8;
    p.type_k = j->tk;
    p.type_v = j->tv;
    kvq_ctx *ctx = NULL;
    kvq_status st = kvq_ctx_create(j->m, &p, j->n_threads, &ctx, err);
    if (st == KVQ_OK) st = kvq_ctx_eval(ctx, dec_tokens, DEC_PROMPT, 0, NULL, false, err);
    if (st == KVQ_OK) st = kvq_ctx_eval(ctx, dec_tokens + DEC_PROMPT, 1, DEC_PROMPT, j->logits, true, err);
    kvq_ctx_free(ctx);
    return st;
}

TEST(oom_decode_step) {
    char path[128];
    static kvq_model *m;
    m = load_tiny(path, sizeof path);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    const int nv = kvq_model_get_info(m)->n_vocab;
    static float a[1024], b[1024];
    CHECK(nv <= 1024, "n_vocab %d", nv);
    /* and once with a pool of two: its workers allocate nothing, so the
     * order of allocations stays the calling thread's */
    const struct { kvq_type k, v; int threads; } cfg[] = { { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, 1 },
                                                           { KVQ_TYPE_KVARN4, KVQ_TYPE_TURBO3_TCQ, 1 },
                                                           { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, 2 } };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(cfg); i++) {
        const char *tk = kvq_type_name(cfg[i].k), *tv = kvq_type_name(cfg[i].v);
        decode_job ref = { m, cfg[i].k, cfg[i].v, cfg[i].threads, nv, a }, j = ref;
        j.logits = b;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_decode(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_decode, &j, &c, 20);
        CHECK(!memcmp(a, b, (size_t)nv * sizeof *a), "%s/%s: logits differ after the loop", tk, tv);
    }
    kvq_model_free(m);
}

/* ---------------------------------------------------------- sweep cell */

enum { CELL_CTX = 32, CELL_CHUNKS = 2 };

typedef struct cell_job {
    const kvq_model *m;
    const char *base_path;
    int32_t tokens[CELL_CTX * CELL_CHUNKS];
    double mean_kld, ppl;
} cell_job;

static kvq_status make_cell_ctx(const kvq_model *m, kvq_type t, kvq_ctx **ctx, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_ctx = CELL_CTX;
    p.max_batch = 16;
    p.type_k = p.type_v = t;
    return kvq_ctx_create(m, &p, 1, ctx, err);
}

static kvq_status save_row(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    (void)index;
    (void)next;
    return kvq_base_kvq_writer_add(ud, logits, err);
}

/* The reference: the exact cache's logits written as a kvq base file. */
static kvq_status job_reference(void *ud, kvq_error *err) {
    cell_job *j = ud;
    kvq_ctx *ctx = NULL;
    kvq_base_kvq_writer *w = NULL;
    kvq_chunk_run run = { j->tokens, CELL_CTX, CELL_CHUNKS, 16, 1 };
    kvq_status st = make_cell_ctx(j->m, KVQ_TYPE_F32, &ctx, err);
    if (st == KVQ_OK)
        st = kvq_base_kvq_writer_open(j->base_path, kvq_model_hash(j->m), CELL_CTX,
                                      kvq_model_get_info(j->m)->n_vocab, CELL_CHUNKS, j->tokens, &w, err);
    if (st == KVQ_OK) st = kvq_eval_chunks(ctx, &run, save_row, w, NULL, err);
    kvq_error cerr = { KVQ_OK, "" };
    kvq_status cst = w ? kvq_base_kvq_writer_close(w, &cerr) : KVQ_OK;
    if (st == KVQ_OK && cst != KVQ_OK) {
        st = cst;
        *err = cerr;
    }
    kvq_ctx_free(ctx);
    return st;
}

/* One configuration of a sweep: the reference opened, q4_0 evaluated
 * against it, the statistics summarised. */
static kvq_status job_cell(void *ud, kvq_error *err) {
    cell_job *j = ud;
    kvq_kld_ref ref;
    kvq_status st = kvq_kld_ref_open(j->base_path, &ref, err);
    if (st != KVQ_OK) return st;
    kvq_ctx *ctx = NULL;
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, &ref);
    kvq_chunk_run run = { j->tokens, CELL_CTX, CELL_CHUNKS, 16, 1 };
    kvq_kld_summary sum;
    st = make_cell_ctx(j->m, KVQ_TYPE_Q4_0, &ctx, err);
    if (st == KVQ_OK) st = kvq_eval_chunks(ctx, &run, kvq_kld_acc_token, &acc, NULL, err);
    if (st == KVQ_OK) st = kvq_kld_summarize(&acc.stats, &sum, err);
    if (st == KVQ_OK) {
        j->mean_kld = sum.mean_kld;
        j->ppl = sum.ppl_q;
    }
    kvq_kld_acc_free(&acc);
    kvq_ctx_free(ctx);
    kvq_kld_ref_close(&ref);
    return st;
}

TEST(oom_sweep_cell) {
    char path[128], base[128];
    kvq_model *m = load_tiny(path, sizeof path);
    CHECK(m, "cannot load the tiny model");
    tmp_path(base, sizeof base, "base.kvqb");
    static cell_job ref, j;
    ref.m = m;
    ref.base_path = base;
    test_rng r = { 5, 0, 0 };
    for (int i = 0; i < CELL_CTX * CELL_CHUNKS; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
    kvq_error err = { KVQ_OK, "" };
    kvq_status st = job_reference(&ref, &err);
    if (st == KVQ_OK) st = job_cell(&ref, &err);
    j = ref;
    j.mean_kld = j.ppl = -1.0;
    oom_count c = { 0 };
    char msg[512] = "";
    bool ok = st == KVQ_OK && oom_check(job_cell, &j, &c, msg, sizeof msg);
    oom_count cw = { 0 };
    ok = ok && oom_check(job_reference, &j, &cw, msg, sizeof msg);   /* and written again, failing */
    bool same = j.mean_kld == ref.mean_kld && j.ppl == ref.ppl;
    kvq_model_free(m);
    remove(path);
    remove(base);
    CHECK(st == KVQ_OK, "reference/cell: %s", err.msg);
    CHECK(ok, "%s", msg);
    CHECK(ref.mean_kld > 0 && isfinite(ref.ppl), "mean KLD %g, PPL %g", ref.mean_kld, ref.ppl);
    CHECK(same, "the cell after the loop: KLD %g PPL %g, want %g %g", j.mean_kld, j.ppl, ref.mean_kld, ref.ppl);
    CHECK(c.points >= 20 && cw.points >= 20, "only %ld / %ld failure points", c.points, cw.points);
}

/* --------------------------------------------------- cache edit + state */

typedef struct state_job {
    kvq_type tk, tv;
    const attn_data *d;
    const char *path;
    float out[8 * 2 * CACHE_HD];
} state_job;

static kvq_status make_state_cache(const state_job *j, kvq_cache **c, kvq_error *err) {
    kvq_cache_params p;
    attn_params(&p, j->d->n_head_kv, CACHE_HD, CACHE_HD, CACHE_TOK, j->tk, j->tv, KVQ_ROT_AUTO);
    p.tail_tokens = 8;
    p.rollback_tokens = 8;
    p.kvarn_quantize_first_tile = true;   /* else its first tile is a 128-row sink a shift must keep */
    return kvq_cache_create(&p, c, err);
}

/* Write, truncate, shift, save; restore into a second cache and attend. */
static kvq_status job_state(void *ud, kvq_error *err) {
    state_job *j = ud;
    const kvq_cache_rope rope = { 10000.0f, 1.0f, false };
    int32_t toks[CACHE_TOK], *back = NULL;
    for (int i = 0; i < CACHE_TOK; i++) toks[i] = i;
    kvq_cache *a = NULL, *b = NULL;
    int n_back = 0;
    kvq_status st = make_state_cache(j, &a, err);
    if (st == KVQ_OK) st = kvq_cache_write(a, 0, 0, CACHE_TOK - 8, j->d->k, j->d->v, err);
    if (st == KVQ_OK) st = kvq_cache_truncate(a, CACHE_TOK - 12, err);
    if (st == KVQ_OK) st = kvq_cache_shift(a, 4, 2, &rope, err);
    const kvq_state_tag tag = { 42, toks, CACHE_TOK - 16 };
    if (st == KVQ_OK) st = kvq_cache_save(a, j->path, &tag, err);
    if (st == KVQ_OK) st = make_state_cache(j, &b, err);
    if (st == KVQ_OK) st = kvq_cache_load(b, j->path, 42, &back, &n_back, err);
    if (st == KVQ_OK && (n_back != tag.n_tokens || memcmp(back, toks, (size_t)n_back * sizeof *back)))
        st = kvq_fail(err, KVQ_ERR_ARG, "tokens differ after the round trip");
    const int pos = CACHE_TOK - 16, hd = CACHE_HD;
    if (st == KVQ_OK) st = kvq_cache_write(b, 0, pos, 8, j->d->k + (size_t)pos * hd, j->d->v + (size_t)pos * hd, err);
    if (st == KVQ_OK)
        st = kvq_cache_attend(b, 0, pos, 8, j->d->n_head, j->d->q + (size_t)pos * j->d->n_head * hd,
                              1.0f / sqrtf((float)hd), j->out, NULL, err);
    free(back);
    kvq_cache_free(a);
    kvq_cache_free(b);
    return st;
}

TEST(oom_cache_edit_and_state) {
    const kvq_type types[][2] = { { KVQ_TYPE_Q4_0, KVQ_TYPE_TURBO3_TCQ },
                                  { KVQ_TYPE_KVARN4, KVQ_TYPE_CAL300 } };
    static attn_data d;
    CHECK(attn_data_make(&d, CACHE_TOK, 2, 1, CACHE_HD, CACHE_HD, 9), "no test data");
    CHECK(attn_test_calib(1, 1, CACHE_HD, CACHE_HD), "no test calibration");
    char path[128];
    tmp_path(path, sizeof path, "state.kvqs");
    static state_job ref, j;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        const char *tk = kvq_type_name(types[i][0]), *tv = kvq_type_name(types[i][1]);
        ref.tk = j.tk = types[i][0];
        ref.tv = j.tv = types[i][1];
        ref.d = j.d = &d;
        ref.path = j.path = path;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_state(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_state, &j, &c, 20);
        CHECK(!memcmp(ref.out, j.out, sizeof ref.out), "%s/%s: attention differs after the loop", tk, tv);
    }
    remove(path);
    attn_data_free(&d);
}

/* ---------------------------------------------------------- calibration */

typedef struct calib_job {
    const kvq_model *m;
    const char *path;
    int32_t tokens[CELL_CTX];
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
    kvq_status st = kvq_calib_stats_init(&s, in, CELL_CTX, err);
    if (st != KVQ_OK) return st;
    kvq_ctx *ctx = NULL;
    kvq_calib *c = NULL, *back = NULL;
    st = make_cell_ctx(j->m, KVQ_TYPE_F32, &ctx, err);
    if (st == KVQ_OK) {
        kvq_calib_observer ob = { &s, ctx };
        kvq_ctx_set_observer(ctx, kvq_calib_observe, &ob);
        for (int start = 0; st == KVQ_OK && start < CELL_CTX; start += 16)
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
    m = load_tiny_shape(path, sizeof path, 1, 32);   /* one layer, head_dim 16: the fit is O(d^3) */
    remove(path);
    CHECK(m, "cannot load the tiny model");
    tmp_path(out, sizeof out, "calib.kvqc");
    static calib_job ref, j;
    ref.m = m;
    ref.path = out;
    test_rng r = { 11, 0, 0 };
    for (int i = 0; i < CELL_CTX; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
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
    int32_t tokens[CELL_CTX];
    kvq_type k0, v0;
    double predicted;
} plan_job;

/* kvq plan on one chunk: the in-memory reference, the sensitivity table
 * of one candidate type, the knapsack's choice at 40% of bf16. */
static kvq_status job_plan(void *ud, kvq_error *err) {
    plan_job *j = ud;
    kvq_kld_base *base = NULL;
    kvq_status st = kvq_plan_reference(j->m, j->tokens, CELL_CTX, 1, 1, &base, err);
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
    m = load_tiny_shape(path, sizeof path, 1, 64);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    static plan_job ref, j;
    ref.m = m;
    test_rng r = { 13, 0, 0 };
    for (int i = 0; i < CELL_CTX; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
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
    const kvq_report_meta meta = { "tiny.gguf", "text.txt", CELL_CTX, 1 };
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
    tmp_path(dir, sizeof dir, "report");
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
        const kvq_sweep_spec spec = { KVQ_TYPE_F32, types, nt, pairs, np, tails, ntl, KVQ_SWEEP_ROT_BOTH, 512, NULL, 0 };
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
    int32_t toks[CELL_CTX];
    float logits[320];
    for (int i = 0; i < CELL_CTX; i++) toks[i] = i;
    for (int i = 0; i < j->n_vocab; i++) logits[i] = (float)(i % 17) * 0.25f;
    kvq_kld_writer *w = NULL;
    kvq_status st = kvq_kld_writer_open(j->path, CELL_CTX, j->n_vocab, 1, toks, &w, err);
    for (int p = 0; st == KVQ_OK && p < kvq_kld_scored_per_chunk(CELL_CTX); p++) st = kvq_kld_writer_add(w, logits, err);
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
    tmp_path(path, sizeof path, "base.kld");
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
static void pool_task(void *ctx, int i, int thread) { (void)ctx; (void)thread; __atomic_fetch_add(&g_pool_sum, i + 1, __ATOMIC_RELAXED); }

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
    if (st == KVQ_OK) st = make_cell_ctx(j->m, KVQ_TYPE_F32, &exact, err);
    for (size_t p = 0; st == KVQ_OK && p < n_lines; p++) {
        int32_t toks[16];
        const int n = kvq_tokenize(j->m, lines[p], strlen(lines[p]), true, false, toks, 16);
        if (n < 0) st = kvq_fail(err, KVQ_ERR_NOMEM, "tokenize failed");   /* -1: its only error here */
        else if (n == 0 || n > 16) st = kvq_fail(err, KVQ_ERR_ARG, "tokenize: %d tokens", n);
        else st = kvq_drift_ref_run(&ref, p, exact, toks, n, NULL, NULL, err);
    }
    if (st == KVQ_OK) st = make_cell_ctx(j->m, KVQ_TYPE_Q4_0, &ctx, err);
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
    m = load_tiny_shape(path, sizeof path, 1, 64);
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

/* ------------------------------------------------------ the hook itself */

TEST(oom_hook_and_size_checks) {
    CHECK(kvq_mul_size(SIZE_MAX / 2 + 1, 2) == SIZE_MAX && kvq_mul_size(SIZE_MAX, 0) == 0 &&
          kvq_mul_size(1u << 20, 1u << 20) == (size_t)1 << 40, "kvq_mul_size");
    CHECK(kvq_mul_size(kvq_mul_size(SIZE_MAX / 3, 4), 1) == SIZE_MAX, "saturation does not stay saturated");
    void *p = kvq_malloc_n(SIZE_MAX / 4 + 1, 8);
    CHECK(!p, "an overflowing count * size was allocated");
    kvq_alloc_fail_at(2, 0);                       /* the second call fails, the third succeeds */
    void *a = kvq_malloc(8), *b = kvq_calloc(1, 8), *c = kvq_realloc(NULL, 8);
    const long calls = kvq_alloc_calls(), failed = kvq_alloc_failed();
    kvq_alloc_fail_at(1, 1);                       /* every call fails */
    void *d = kvq_malloc(1), *e = kvq_calloc(1, 1);
    const long failed_all = kvq_alloc_failed();
    kvq_alloc_fail_at(0, 0);
    void *f = kvq_malloc(1);
    const long after = kvq_alloc_calls();
    const int got[6] = { a != NULL, b != NULL, c != NULL, d != NULL, e != NULL, f != NULL };
    free(a), free(b), free(c), free(d), free(e), free(f);
    CHECK(got[0] && !got[1] && got[2] && !got[3] && !got[4] && got[5],
          "allocated: fail_at(2) %d %d %d, persist %d %d, disarmed %d", got[0], got[1], got[2], got[3], got[4],
          got[5]);
    CHECK(calls == 3 && failed == 1 && failed_all == 2 && after == 0, "counts %ld %ld %ld %ld", calls, failed,
          failed_all, after);
}
