/* bench_run.c - one timed run of `kvq bench` (see bench_run.h). */
#include "bench_run.h"
#include "bench_bound.h"
#include "cache_fill.h"
#include "cli.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of every thread of the process: on a shared machine this is
 * the work done, without the time spent waiting for a core. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A fixed, spread-out token sequence: speed does not depend on the ids. */
static int32_t bench_token(int i, int n_vocab) { return (int32_t)(((unsigned)i * 7919u + 3u) % (unsigned)n_vocab); }

static void fill_tokens(int32_t *buf, int first, int n, int n_vocab) {
    for (int i = 0; i < n; i++) buf[i] = bench_token(first + i, n_vocab);
}

/* The first `depth` positions of every layer from one block of random
 * rows, written `batch` positions at a time; the run's threads share the
 * writes, as in a prefill (the bytes do not depend on it; the quantisers
 * of iq4_nl and the trellis types are what makes a deep fill take
 * minutes). */
static kvq_status fill_synthetic(kvq_ctx *ctx, const kvq_model_info *in, int depth, int batch, kvq_error *err) {
    if (depth == 0) return KVQ_OK;
    const size_t k_row = (size_t)in->n_head_kv * in->head_dim_k, v_row = (size_t)in->n_head_kv * in->head_dim_v;
    float *k = malloc((size_t)batch * (k_row + v_row) * sizeof(float));
    if (!k) return kvq_fail(err, KVQ_ERR_NOMEM, "bench: out of memory for %d synthetic cache rows", batch);
    cli_fill_noise(k, (size_t)batch * (k_row + v_row), 42);
    kvq_pool *pool = kvq_ctx_threads(ctx) > 1 ? kvq_pool_create(kvq_ctx_threads(ctx)) : NULL;
    const kvq_status st = cli_fill_cache(kvq_ctx_cache(ctx), in->n_layer, depth, batch, k, k + (size_t)batch * k_row,
                                         false, pool, err);
    kvq_pool_free(pool);
    free(k);
    return st;
}

/* The first `depth` positions by the model's own prefill. */
static kvq_status fill_model(kvq_ctx *ctx, const kvq_model_info *in, int depth, int batch, int32_t *buf,
                             kvq_error *err) {
    kvq_status st = KVQ_OK;
    for (int start = 0; !st && start < depth; start += batch) {
        const int n = CLI_MIN(batch, depth - start);
        fill_tokens(buf, start, n, in->n_vocab);
        st = kvq_ctx_eval(ctx, buf, n, start, NULL, false, err);
    }
    return st;
}

/* Greedy next token: the argmax of the logits fed back. */
static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

/* One context being measured: the last logits feed the next step. */
typedef struct session {
    kvq_ctx *ctx;
    const kvq_model_info *in;
    int32_t *buf;
    float *logits;
    int pos;                 /* next position to evaluate */
} session;

static void session_close(session *s) {
    free(s->buf);
    free(s->logits);
    kvq_ctx_free(s->ctx);
}

/* Create the context, warm it up and fill it to `depth` (all untimed). */
static kvq_status session_open(session *s, const kvq_model *m, const kvq_cache_params *cache, const bench_run_opts *o,
                               int depth, kvq_rot_plan *plan, kvq_error *err) {
    *s = (session){ .in = kvq_model_get_info(m) };
    if (depth < 0 || o->n_prompt < 1 || o->n_gen < 0 || (int64_t)depth + o->n_prompt + o->n_gen > o->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "bench: depth %d + %d prompt + %d generated tokens exceed the context %d",
                        depth, o->n_prompt, o->n_gen, o->n_ctx);
    kvq_cache_params p = *cache;
    p.n_ctx = o->n_ctx;
    p.max_batch = CLI_MAX(o->n_prompt, o->fill_batch);
    kvq_status st = kvq_ctx_create(m, &p, o->n_threads, &s->ctx, err);
    if (!st) st = kvq_ctx_set_activations(s->ctx, o->act, err);
    if (st) { session_close(s); return st; }
    s->buf = malloc((size_t)p.max_batch * sizeof *s->buf);
    s->logits = malloc((size_t)s->in->n_vocab * sizeof *s->logits);
    if (!s->buf || !s->logits) st = kvq_fail(err, KVQ_ERR_NOMEM, "bench: out of memory");
    if (!st && plan) *plan = *kvq_cache_rotation(kvq_ctx_cache(s->ctx));
    /* warm-up: the first prompt touches the scratch buffers and wakes the
     * workers, so that the timed prompt pays for neither */
    if (!st) {
        fill_tokens(s->buf, 0, o->n_prompt, s->in->n_vocab);
        st = kvq_ctx_eval(s->ctx, s->buf, o->n_prompt, 0, s->logits, true, err);
        kvq_cache_clear(kvq_ctx_cache(s->ctx));
    }
    const int batch = CLI_MIN(p.max_batch, CLI_MAX(depth, 1));
    if (!st) st = o->fill == BENCH_FILL_MODEL ? fill_model(s->ctx, s->in, depth, batch, s->buf, err)
                                              : fill_synthetic(s->ctx, s->in, depth, batch, err);
    s->pos = depth;
    if (st) session_close(s);
    return st;
}

/* Zeroed times and the bytes of the steps to come: the prompt fills
 * positions pos..pos+n_prompt-1, then step i's query sits at
 * pos+n_prompt+i. */
static void session_times(const session *s, const kvq_model *m, const bench_run_opts *o, bench_times *t) {
    *t = (bench_times){ 0 };
    t->tg_weight_bytes = bench_decode_weight_bytes(m);
    t->tg_cache_bytes = bench_decode_cache_bytes(kvq_ctx_cache(s->ctx), s->pos + o->n_prompt, o->n_gen);
}

/* The timed prompt: n_prompt tokens in one batch. */
static kvq_status session_prompt(session *s, int n_prompt, bench_times *t, kvq_error *err) {
    fill_tokens(s->buf, s->pos, n_prompt, s->in->n_vocab);
    const double t0 = wall_now(), c0 = cpu_now();
    kvq_status st = kvq_ctx_eval(s->ctx, s->buf, n_prompt, s->pos, s->logits, true, err);
    t->pp_s = wall_now() - t0;
    t->pp_cpu_s = cpu_now() - c0;
    s->pos += n_prompt;
    return st;
}

/* One timed generation step (greedy), added to t's tg times. */
static kvq_status session_step(session *s, bench_times *t, kvq_error *err) {
    int32_t tok = argmax(s->logits, s->in->n_vocab);
    const double t0 = wall_now(), c0 = cpu_now();
    kvq_status st = kvq_ctx_eval(s->ctx, &tok, 1, s->pos++, s->logits, true, err);
    t->tg_s += wall_now() - t0;
    t->tg_cpu_s += cpu_now() - c0;
    return st;
}

kvq_status bench_run_once(const kvq_model *m, const kvq_cache_params *cache, const bench_run_opts *o, int depth,
                          bench_times *t, kvq_rot_plan *plan, kvq_error *err) {
    session s;
    kvq_status st = session_open(&s, m, cache, o, depth, plan, err);
    if (st) return st;
    session_times(&s, m, o, t);
    st = session_prompt(&s, o->n_prompt, t, err);
    for (int i = 0; !st && i < o->n_gen; i++) st = session_step(&s, t, err);
    session_close(&s);
    return st;
}

kvq_status bench_run_pair(const kvq_model *m, const kvq_cache_params *cache_a, const kvq_cache_params *cache_b,
                          const bench_run_opts *o, int depth, bench_times *ta, bench_times *tb, kvq_rot_plan *plan_a,
                          kvq_rot_plan *plan_b, kvq_error *err) {
    session a, b;
    kvq_status st = session_open(&a, m, cache_a, o, depth, plan_a, err);
    if (st) return st;
    st = session_open(&b, m, cache_b, o, depth, plan_b, err);
    if (st) { session_close(&a); return st; }
    session_times(&a, m, o, ta);
    session_times(&b, m, o, tb);
    st = session_prompt(&a, o->n_prompt, ta, err);
    if (!st) st = session_prompt(&b, o->n_prompt, tb, err);
    for (int i = 0; !st && i < o->n_gen; i++) {
        st = session_step(&a, ta, err);
        if (!st) st = session_step(&b, tb, err);
    }
    session_close(&a);
    session_close(&b);
    return st;
}
