/* bench_run.h - one timed run of `kvq bench`: a model with one cache
 * configuration, the cache filled to a depth (not timed), then a timed
 * prompt batch and timed single-token generation steps. */
#ifndef KVQ_BENCH_RUN_H
#define KVQ_BENCH_RUN_H

#include "kvq.h"

#include <stdbool.h>

/* How the `depth` positions before the timed prompt are filled. */
typedef enum bench_fill {
    /* Random K/V rows written straight into the cache (kvq_cache_write):
     * linear in the depth.  The attention that follows reads the same
     * bytes whatever the values, so the timed part is unchanged. */
    BENCH_FILL_SYNTHETIC = 0,
    /* The model's own prefill in batches of fill_batch tokens: what a
     * real session does, but quadratic in the depth (each batch attends
     * to everything before it). */
    BENCH_FILL_MODEL,
} bench_fill;

typedef struct bench_run_opts {
    int n_prompt, n_gen;     /* timed: one prompt batch, then n_gen steps */
    int n_threads;
    int n_ctx;               /* cache size (>= depth + n_prompt + n_gen)  */
    int fill_batch;          /* tokens per fill write / fill batch        */
    bench_fill fill;
    kvq_act act;             /* activations of the weight products (--act) */
} bench_run_opts;

typedef struct bench_times {
    double pp_s;             /* wall seconds of the prompt batch          */
    double tg_s;             /* wall seconds of the n_gen steps           */
    double pp_cpu_s;         /* CPU seconds of the process (all threads)  */
    double tg_cpu_s;         /*   during each of them                     */
    /* What one generation step reads, averaged over the n_gen steps
     * (tools/bench_bound.h): weights, and the cache at the step's depth. */
    double tg_weight_bytes, tg_cache_bytes;
} bench_times;

/* One run in a fresh context (created and freed here, so that only one
 * cache is in memory at a time).  plan (may be NULL) receives the
 * rotation the cache chose. */
kvq_status bench_run_once(const kvq_model *m, const kvq_cache_params *cache, const bench_run_opts *o, int depth,
                          bench_times *t, kvq_rot_plan *plan, kvq_error *err);

/* Two configurations measured side by side (both caches in memory): the
 * prompts one after the other, then the generation steps alternating
 * a, b, a, b, ..., so that both see the same machine load at the scale of
 * one step.  For small differences such as the cost of rotation. */
kvq_status bench_run_pair(const kvq_model *m, const kvq_cache_params *cache_a, const kvq_cache_params *cache_b,
                          const bench_run_opts *o, int depth, bench_times *ta, bench_times *tb, kvq_rot_plan *plan_a,
                          kvq_rot_plan *plan_b, kvq_error *err);

#endif
