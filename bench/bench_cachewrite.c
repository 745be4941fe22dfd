/*
 * bench_cachewrite.c - what writing the cache costs next to the prefill
 * that writes it (issue 11, "cache writes keep up"):
 *
 *   kvq-bench cachewrite [-m MODEL] [-n TOKENS] [-b BATCH] [-t THREADS] [-r ROUNDS] [--types LIST]
 *
 * Per cache type: TOKENS positions (default 1024) written into every layer
 * of a cache of the model's attention shape (without -m: qwen3-0.6B, 28
 * layers x 8 KV heads x 128), BATCH at a time (default 128, as a prefill
 * writes them; 1: as decode steps write them),
 * rows of unit Gaussians; wall-clock ms per token (all layers), best of
 * ROUNDS, wall clock and process CPU time, into a cache whose memory an
 * untimed pass has already touched (as the prefill's has).  With -m, the same run times
 * the model's prefill (pp128 at depth 0, f16 cache, best of ROUNDS: the
 * fastest prefill, so the strictest denominator) and prints write time /
 * prefill time: wall against wall (THREADS each), and the 1-thread write's
 * CPU time against the prefill's CPU time (the work, on a loaded machine).  Types, threads and
 * rounds alternate so that every figure sees the same machine load.
 */
#include "bench.h"
#include "cache.h"
#include "../tools/cache_fill.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 128, MAX_TYPES = 16 };

typedef struct shape { int n_layer, n_head_kv, head_dim; } shape;

/* Wall and process CPU seconds (all threads: on a shared machine the
 * work done, without the time spent waiting for a core). */
typedef struct span { double wall, cpu; } span;

static double process_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static span span_start(void) { return (span){ bench_now(), process_cpu_now() }; }
static span span_since(span s0, double per) {
    return (span){ (bench_now() - s0.wall) / per, (process_cpu_now() - s0.cpu) / per };
}
static void keep_best(span *best, span s) {
    if (s.wall < 0) { *best = s; return; }
    best->wall = fmin(best->wall, s.wall);
    best->cpu = fmin(best->cpu, s.cpu);
}

static float unit_gauss(uint64_t *s) {          /* splitmix64 + Box-Muller */
    uint64_t a = (*s += 0x9e3779b97f4a7c15ull), b = (*s += 0x9e3779b97f4a7c15ull);
    a = (a ^ (a >> 31)) * 0xbf58476d1ce4e5b9ull;
    b = (b ^ (b >> 31)) * 0x94d049bb133111ebull;
    const double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, v = (double)(b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* n_tok positions of every layer, 128 per call, as a prefill writes
 * them; false after an error line. */
static bool write_all(kvq_cache *c, shape sh, int n_tok, int batch, const float *kv, kvq_pool *pool) {
    const size_t half = (size_t)BATCH * sh.n_head_kv * sh.head_dim;
    kvq_error err;
    if (cli_fill_cache(c, sh.n_layer, n_tok, batch, kv, kv + half, false, pool, &err) == KVQ_OK) return true;
    fprintf(stderr, "cachewrite: %s\n", err.msg);
    return false;
}

/* A cache of the shape for type t, its memory touched by one untimed pass
 * of the writes: the timed passes, like the prefill they are set against
 * (which runs on a cache it has written before), write into mapped pages,
 * so the first touch of fresh memory is not counted as the format's
 * cost.  NULL after an error line. */
static kvq_cache *warm_cache(shape sh, kvq_type t, int n_tok, const float *kv) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = sh.n_layer;
    p.n_head_kv = sh.n_head_kv;
    p.head_dim_k = p.head_dim_v = sh.head_dim;
    p.n_ctx = n_tok;
    p.max_batch = BATCH;
    p.type_k = p.type_v = t;
    p.tail_type = KVQ_TYPE_F16;
    kvq_cache *c = NULL;
    kvq_error err;
    if (kvq_cache_create(&p, &c, &err) != KVQ_OK) {
        fprintf(stderr, "cachewrite: %s: %s\n", kvq_type_name(t), err.msg);
        return NULL;
    }
    if (!write_all(c, sh, n_tok, BATCH, kv, NULL)) {
        kvq_cache_free(c);
        return NULL;
    }
    return c;
}

/* Seconds per token to write n_tok positions of every layer into c,
 * emptied first; -1 after an error line. */
static span time_writes(kvq_cache *c, shape sh, int n_tok, int batch, const float *kv, kvq_pool *pool) {
    kvq_cache_clear(c);
    const span t0 = span_start();
    if (!write_all(c, sh, n_tok, batch, kv, pool)) return (span){ -1.0, -1.0 };
    return span_since(t0, n_tok);
}

/* Seconds per token of one 128-token prompt at depth 0, f16 cache. */
static span time_prefill(kvq_ctx *ctx, int n_vocab, int32_t *tokens) {
    for (int i = 0; i < BATCH; i++) tokens[i] = (int32_t)(((unsigned)i * 7919u + 3u) % (unsigned)n_vocab);
    kvq_cache_clear(kvq_ctx_cache(ctx));
    kvq_error err;
    const span t0 = span_start();
    if (kvq_ctx_eval(ctx, tokens, BATCH, 0, NULL, false, &err) != KVQ_OK) {
        fprintf(stderr, "cachewrite: prefill: %s\n", err.msg);
        return (span){ -1.0, -1.0 };
    }
    return span_since(t0, BATCH);
}

int bench_cachewrite(int argc, char **argv) {
    const char *model_path = NULL, *types_arg = "f16,q4_0,iq4_nl,kvarn4,turbo3_tcq,turbo4_tcq";
    int n_tok = 1024, batch = BATCH, threads = 2, rounds = 2;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-n")) ok = bench_flag_int("cachewrite", a, v, BATCH, 1 << 16, &n_tok);
        else if (!strcmp(a, "-b")) ok = bench_flag_int("cachewrite", a, v, 1, BATCH, &batch);
        else if (!strcmp(a, "-t")) ok = bench_flag_int("cachewrite", a, v, 1, 256, &threads);
        else if (!strcmp(a, "-r")) ok = bench_flag_int("cachewrite", a, v, 1, 100, &rounds);
        else if (!strcmp(a, "-m") || !strcmp(a, "--types")) {
            if (!v) { fprintf(stderr, "cachewrite: %s needs a value\n", a); return 1; }
            *(a[1] == 'm' ? &model_path : &types_arg) = v;
        } else { fprintf(stderr, "cachewrite: unknown flag %s\n", a); return 1; }
        if (!ok) return 1;
    }
    kvq_type types[MAX_TYPES];
    const int nt = bench_parse_types("cachewrite", types_arg, types, MAX_TYPES);
    if (nt < 0) return 1;
    if (!nt) { fprintf(stderr, "cachewrite: --types names no type\n"); return 1; }

    shape sh = { 28, 8, 128 };
    kvq_model *m = NULL;
    kvq_ctx *ctx = NULL;
    int32_t tokens[BATCH];
    kvq_error err;
    if (model_path) {
        kvq_cache_params p;
        kvq_cache_params_default(&p);
        if (kvq_model_load(model_path, &m, &err) != KVQ_OK) { fprintf(stderr, "cachewrite: %s\n", err.msg); return 1; }
        const kvq_model_info *in = kvq_model_get_info(m);
        sh = (shape){ in->n_layer, in->n_head_kv, in->head_dim_k };
        p.n_layer = in->n_layer;
        p.n_head_kv = in->n_head_kv;
        p.head_dim_k = in->head_dim_k;
        p.head_dim_v = in->head_dim_v;
        p.n_ctx = BATCH;
        p.max_batch = BATCH;
        if (kvq_ctx_create(m, &p, threads, &ctx, &err) != KVQ_OK) {
            fprintf(stderr, "cachewrite: %s\n", err.msg);
            kvq_model_free(m);
            return 1;
        }
        if (time_prefill(ctx, in->n_vocab, tokens).wall < 0) {   /* warm-up */
            kvq_ctx_free(ctx);
            kvq_model_free(m);
            return 1;
        }
    }
    const size_t n_kv = 2u * BATCH * sh.n_head_kv * sh.head_dim;
    float *kv = malloc(n_kv * sizeof *kv);
    kvq_pool *pool = threads > 1 ? kvq_pool_create(threads) : NULL;
    if (!kv || (threads > 1 && !pool)) { fprintf(stderr, "cachewrite: out of memory\n"); return 1; }
    uint64_t seed = 9;
    for (size_t i = 0; i < n_kv; i++) kv[i] = unit_gauss(&seed);

    span w1[MAX_TYPES], wt[MAX_TYPES], pp = { INFINITY, INFINITY };
    kvq_cache *caches[MAX_TYPES] = { NULL };
    bool ok = true;
    for (int i = 0; i < nt; i++) {
        w1[i] = wt[i] = pp;
        ok = ok && (caches[i] = warm_cache(sh, types[i], n_tok, kv)) != NULL;
    }
    for (int r = 0; ok && r < rounds; r++) {
        if (ctx) {
            keep_best(&pp, time_prefill(ctx, kvq_model_get_info(m)->n_vocab, tokens));
            ok = pp.wall >= 0;
        }
        for (int i = 0; ok && i < nt; i++) {
            keep_best(&w1[i], time_writes(caches[i], sh, n_tok, batch, kv, NULL));
            if (pool) keep_best(&wt[i], time_writes(caches[i], sh, n_tok, batch, kv, pool));
            ok = w1[i].wall >= 0 && (!pool || wt[i].wall >= 0);
        }
    }
    for (int i = 0; i < nt; i++) kvq_cache_free(caches[i]);
    if (!ok) {
        free(kv);
        kvq_pool_free(pool);
        kvq_ctx_free(ctx);
        kvq_model_free(m);
        return 1;
    }
    printf("## Cache writes: %d tokens x %d layers x %d KV heads x %d (K and V), %d per call (simd %s)\n\n",
           n_tok, sh.n_layer, sh.n_head_kv, sh.head_dim, batch, kvq_simd_level());
    printf("ms per token, all layers, best of %d; CPU = process CPU time (all threads).\n", rounds);
    if (ctx) printf("Prefill (pp128, depth 0, f16 cache, %d threads): wall %.3f ms, CPU %.3f ms per token.\n",
                    threads, 1e3 * pp.wall, 1e3 * pp.cpu);
    printf("\n| type | wall 1T | CPU 1T | wall %dT | %dT speed-up | fill 16384 tokens, s (%dT) | wall %% of prefill wall | CPU 1T %% of prefill CPU |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|\n", threads, threads, threads);
    for (int i = 0; i < nt; i++) {
        const span w = pool ? wt[i] : w1[i];
        printf("| %s | %.3f | %.3f | %.3f | %.2f | %.1f | ", kvq_type_name(types[i]), 1e3 * w1[i].wall, 1e3 * w1[i].cpu,
               1e3 * w.wall, w1[i].wall / w.wall, 16384 * w.wall);
        if (ctx) printf("%.1f%% | %.1f%% |\n", 100.0 * w.wall / pp.wall, 100.0 * w1[i].cpu / pp.cpu);
        else printf("- | - |\n");
    }
    printf("\n");
    free(kv);
    kvq_pool_free(pool);
    kvq_ctx_free(ctx);
    kvq_model_free(m);
    return 0;
}
