/*
 * bench_attention.c - decode attention over the quantised cache: one query
 * row per head (32 query heads, 8 KV heads x 128, GQA 4) over 4096 and
 * 32768 cached tokens, for every cache type (K and V of the same type).
 *
 * Printed per type and context, for the chunked key loop (the default,
 * src/cache/attn_block.h): time per decode step with 1 thread (CPU time of the
 * thread: the machines are shared) and with 2 threads (wall clock: CPU
 * time would add both threads), GB/s of cache rows read (K + V bodies of
 * every key), the speed relative to f16 (f16 time / this type's time) for
 * both, and the per-key reference loop's 1-thread time (what attention
 * ran before the chunked loop) with the chunked loop's speed-up over it;
 * then, where the level has fused packed-row kernels (AVX-512), the same
 * chunked loop without them ("tile": every type unpacked to an f32 tile,
 * what ran before them) and the fused kernels' speed-up over it, the two
 * measured alternately (twice each, the smaller median) so that a loaded
 * machine's drift cancels.
 *
 * Each figure is the median of at least 5 timed steps, each after the
 * CPU caches are flushed (bench_evict_caches: a 4096-token cache would
 * otherwise be read from the L3 on every repeat).  Timings live here,
 * never in tests.
 */
#include "bench.h"
#include "attn_block.h"
#include "cache.h"
#include "../tools/bench_bound.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { BENCH_HEADS_KV = 8, BENCH_GQA = 4, BENCH_HEAD_DIM = 128, BENCH_DISTINCT = 256 };


/* A cache of n_ctx tokens written as the engine writes them
 * (bench_written_cache). */
static kvq_cache *make_cache(kvq_type t, int n_ctx) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_head_kv = BENCH_HEADS_KV;
    p.head_dim_k = p.head_dim_v = BENCH_HEAD_DIM;
    p.n_ctx = n_ctx;
    p.max_batch = BENCH_DISTINCT;
    p.type_k = p.type_v = t;
    return bench_written_cache("attention", &p, n_ctx);
}

/* bench_decode_median with the given key loop and kernels. */
static double time_decode(kvq_cache *c, int n_ctx, const float *q, float *out, kvq_pool *pool,
                          kvq_attend_pass pass, const attn_block_kernels *block) {
    const kvq_attend_loop loop = { pass, block, false };
    return bench_decode_median("attention", c, n_ctx, BENCH_HEADS_KV * BENCH_GQA, BENCH_HEAD_DIM, q, out, pool, &loop);
}

int bench_attention(int argc, char **argv) {
    (void)argv;
    if (argc > 1) { fprintf(stderr, "attention: takes no flags\n"); return 1; }
    static const int contexts[] = { 4096, 32768 };
    const int n_head = BENCH_HEADS_KV * BENCH_GQA;
    float q[BENCH_HEADS_KV * BENCH_GQA * BENCH_HEAD_DIM], out[BENCH_HEADS_KV * BENCH_GQA * BENCH_HEAD_DIM];
    uint64_t seed = 7;
    for (int i = 0; i < n_head * BENCH_HEAD_DIM; i++) q[i] = bench_gauss(&seed);
    kvq_pool *pool2 = kvq_pool_create(2);
    printf("attention decode: %d KV heads x %d, GQA %d, simd %s\n", BENCH_HEADS_KV, BENCH_HEAD_DIM, BENCH_GQA,
           kvq_simd_level());
    printf("streaming read from memory, 1 thread: %.2f GB/s (bench_read_bandwidth, kvq bench's probe: the memory\n"
           "bound of a 1T step; the CPU caches are flushed before every timed step, so each reads its cache rows\n"
           "from memory, as in a model)\n",
           bench_read_bandwidth(1));
    /* The f32-tile path of the same level (no fused kernels): AVX-512 only. */
    const attn_block_kernels *best = attn_block_best(), *tile = best->fused ? attn_block_level("avx512-tile") : NULL;
    printf("chunked key loop (%s): ms(1T) CPU time, ms(2T) wall; per-key: the reference loop, 1T CPU time;\n"
           "tile: the chunked loop without the fused kernels (%s), 1T, measured alternately with ms(1T)\n",
           best->level, tile ? tile->level : "none at this level");
    printf("%-8s %6s %8s %8s %6s %6s %8s %6s %6s %9s %6s %8s %6s\n", "type", "ctx", "B/token", "ms(1T)", "GB/s",
           "vs f16", "ms(2T)", "GB/s", "vs f16", "per-key", "gain", "tile", "fused");
    for (size_t ci = 0; ci < KVQ_ARRAY_LEN(contexts); ci++) {
        const int n_ctx = contexts[ci];
        double t1[KVQ_TYPE_COUNT] = { 0 }, t2[KVQ_TYPE_COUNT] = { 0 }, tk[KVQ_TYPE_COUNT] = { 0 };
        double tt[KVQ_TYPE_COUNT] = { 0 };
        for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
            const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)t);
            /* tile types (KVarN): bench group cachefmt */
            kvq_cache *c = tr && tr->is_cache_type && tr->layout == KVQ_LAYOUT_ROWS && !tr->calib_rate
                               ? make_cache((kvq_type)t, n_ctx) : NULL;   /* calibrated: need a model */
            if (!c) continue;
            /* default and tile alternately, twice: the smaller median of each
             * (a loaded machine drifts between seconds) */
            t1[t] = tt[t] = INFINITY;
            for (int r = 0; r < (tile ? 2 : 1); r++) {
                t1[t] = fmin(t1[t], time_decode(c, n_ctx, q, out, NULL, KVQ_PASS_CHUNKED, NULL));
                if (tile) tt[t] = fmin(tt[t], time_decode(c, n_ctx, q, out, NULL, KVQ_PASS_CHUNKED, tile));
            }
            if (!tile) tt[t] = t1[t];
            t2[t] = pool2 ? time_decode(c, n_ctx, q, out, pool2, KVQ_PASS_CHUNKED, NULL) : t1[t];
            tk[t] = time_decode(c, n_ctx, q, out, NULL, KVQ_PASS_PER_KEY, NULL);
            kvq_cache_free(c);
        }
        for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
            if (t1[t] == 0.0) continue;   /* not a row type this bench runs */
            if (t1[t] < 0.0 || t2[t] < 0.0 || tk[t] < 0.0 || tt[t] < 0.0) {
                printf("%-8s %6d failed (a refused attention call)\n", kvq_type_name((kvq_type)t), n_ctx);
                continue;
            }
            const size_t per_token = 2 * kvq_cache_row_bytes((kvq_type)t, BENCH_HEADS_KV, BENCH_HEAD_DIM);
            const double bytes = (double)per_token * n_ctx;
            printf("%-8s %6d %8zu %8.3f %6.2f %6.2f %8.3f %6.2f %6.2f %9.3f %6.2f %8.3f %6.2f\n",
                   kvq_type_name((kvq_type)t), n_ctx, per_token, 1e3 * t1[t], bytes / t1[t] * 1e-9,
                   t1[KVQ_TYPE_F16] > 0.0 ? t1[KVQ_TYPE_F16] / t1[t] : 0.0, 1e3 * t2[t], bytes / t2[t] * 1e-9,
                   t2[KVQ_TYPE_F16] > 0.0 ? t2[KVQ_TYPE_F16] / t2[t] : 0.0, 1e3 * tk[t], tk[t] / t1[t], 1e3 * tt[t],
                   tt[t] / t1[t]);
        }
    }
    kvq_pool_free(pool2);
    return 0;
}
