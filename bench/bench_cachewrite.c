/*
 * bench_cachewrite.c - what writing the cache costs next to the prefill
 * that writes it (issue 11, "cache writes keep up"):
 *
 *   kvq-bench cachewrite [-m MODEL] [-n TOKENS] [-t THREADS] [-r ROUNDS] [--types LIST]
 *
 * Per cache type: TOKENS positions (default 1024) written into every layer
 * of a cache of the model's attention shape (without -m: qwen3-0.6B, 28
 * layers x 8 KV heads x 128), 128 at a time as a prefill writes them,
 * rows of unit Gaussians; wall-clock ms per token (all layers), best of
 * ROUNDS.  With -m, the same run times the model's prefill (pp128 at depth
 * 0, f16 cache, best of ROUNDS: the fastest prefill, so the strictest
 * denominator) and prints write time / prefill time.  Types, threads and
 * rounds alternate so that every figure sees the same machine load.
 */
#include "bench.h"
#include "cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 128, MAX_TYPES = 16 };

typedef struct shape { int n_layer, n_head_kv, head_dim; } shape;

static float unit_gauss(uint64_t *s) {          /* splitmix64 + Box-Muller */
    uint64_t a = (*s += 0x9e3779b97f4a7c15ull), b = (*s += 0x9e3779b97f4a7c15ull);
    a = (a ^ (a >> 31)) * 0xbf58476d1ce4e5b9ull;
    b = (b ^ (b >> 31)) * 0x94d049bb133111ebull;
    const double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, v = (double)(b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Seconds to write n_tok positions of every layer, 128 at a time. */
static double time_writes(shape sh, kvq_type t, int n_tok, const float *kv, kvq_pool *pool) {
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
        return -1.0;
    }
    const size_t half = (size_t)BATCH * sh.n_head_kv * sh.head_dim;
    const double t0 = bench_now();
    for (int pos = 0; pos < n_tok; pos += BATCH)
        for (int l = 0; l < sh.n_layer; l++)
            if (kvq_cache_write_pool(c, l, pos, KVQ_MIN(BATCH, n_tok - pos), kv, kv + half, pool, &err) != KVQ_OK) {
                fprintf(stderr, "cachewrite: %s\n", err.msg);
                kvq_cache_free(c);
                return -1.0;
            }
    const double dt = bench_now() - t0;
    kvq_cache_free(c);
    return dt;
}

/* Seconds of one 128-token prompt at depth 0 with an f16 cache. */
static double time_prefill(kvq_ctx *ctx, int n_vocab, int32_t *tokens) {
    for (int i = 0; i < BATCH; i++) tokens[i] = (int32_t)(((unsigned)i * 7919u + 3u) % (unsigned)n_vocab);
    kvq_cache_clear(kvq_ctx_cache(ctx));
    const double t0 = bench_now();
    if (kvq_ctx_eval(ctx, tokens, BATCH, 0, NULL, false, NULL) != KVQ_OK) return -1.0;
    return bench_now() - t0;
}

int bench_cachewrite(int argc, char **argv) {
    const char *model_path = NULL, *types_arg = "f16,q4_0,iq4_nl,kvarn4,turbo3_tcq,turbo4_tcq";
    int n_tok = 1024, threads = 2, rounds = 2;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "cachewrite: %s needs a value\n", a); return 1; }
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-n")) n_tok = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "-r")) rounds = atoi(v);
        else if (!strcmp(a, "--types")) types_arg = v;
        else { fprintf(stderr, "cachewrite: unknown flag %s\n", a); return 1; }
    }
    if (n_tok < BATCH || threads < 1 || rounds < 1) { fprintf(stderr, "cachewrite: bad -n/-t/-r\n"); return 1; }
    kvq_type types[MAX_TYPES];
    int nt = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", types_arg);
    for (char *sv = NULL, *tok = strtok_r(buf, ",", &sv); tok && nt < MAX_TYPES; tok = strtok_r(NULL, ",", &sv))
        if ((types[nt++] = kvq_type_from_name(tok)) == KVQ_TYPE_COUNT) {
            fprintf(stderr, "cachewrite: unknown type %s\n", tok);
            return 1;
        }

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
        time_prefill(ctx, in->n_vocab, tokens);      /* warm-up */
    }
    const size_t n_kv = 2u * BATCH * sh.n_head_kv * sh.head_dim;
    float *kv = malloc(n_kv * sizeof *kv);
    kvq_pool *pool = threads > 1 ? kvq_pool_create(threads) : NULL;
    if (!kv || (threads > 1 && !pool)) { fprintf(stderr, "cachewrite: out of memory\n"); return 1; }
    uint64_t seed = 9;
    for (size_t i = 0; i < n_kv; i++) kv[i] = unit_gauss(&seed);

    double w1[MAX_TYPES], wt[MAX_TYPES], pp = INFINITY;
    for (int i = 0; i < nt; i++) w1[i] = wt[i] = INFINITY;
    for (int r = 0; r < rounds; r++) {
        if (ctx) pp = fmin(pp, time_prefill(ctx, kvq_model_get_info(m)->n_vocab, tokens) / BATCH);
        for (int i = 0; i < nt; i++) {
            w1[i] = fmin(w1[i], time_writes(sh, types[i], n_tok, kv, NULL) / n_tok);
            if (pool) wt[i] = fmin(wt[i], time_writes(sh, types[i], n_tok, kv, pool) / n_tok);
        }
    }
    printf("## Cache writes: %d tokens x %d layers x %d KV heads x %d (K and V), 128 per call (simd %s)\n\n",
           n_tok, sh.n_layer, sh.n_head_kv, sh.head_dim, kvq_simd_level());
    if (ctx) printf("Prefill (pp128, depth 0, f16 cache, %d threads): %.3f ms / token.\n\n", threads, 1e3 * pp);
    printf("| type | write ms/token 1T | write ms/token %dT | %dT / 1T | fill of 16384 tokens, s (%dT) | %% of prefill (%dT) |\n"
           "|---|---:|---:|---:|---:|---:|\n", threads, threads, threads, threads);
    for (int i = 0; i < nt; i++) {
        const double w = pool ? wt[i] : w1[i];
        if (w1[i] < 0 || w < 0) { printf("| %s | failed |\n", kvq_type_name(types[i])); continue; }
        printf("| %s | %.3f | %.3f | %.2f | %.1f | ", kvq_type_name(types[i]), 1e3 * w1[i], 1e3 * w, w1[i] / w,
               16384 * w);
        if (ctx) printf("%.1f%% |\n", 100.0 * w / pp); else printf("- |\n");
    }
    printf("\n");
    free(kv);
    kvq_pool_free(pool);
    kvq_ctx_free(ctx);
    kvq_model_free(m);
    return 0;
}
