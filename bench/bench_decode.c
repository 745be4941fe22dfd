/*
 * bench_decode.c - one decode step of attention over a deep cache, per
 * cache type and kernel level, against the memory-bandwidth bound.
 *
 *   kvq-bench decode [-c CTX] [--kv-heads N] [--gqa G] [--head-dim D]
 *                    [--types LIST] [--levels LIST] [-t THREADS] [-r ROUNDS]
 *
 * Default: the qwen3-0.6B attention shape (8 KV heads x 128, GQA 2) at
 * 16384 cached tokens, types f16 q8_0 q4_0, every kernel level this CPU
 * runs.  All (type, level) configurations are timed round-robin, ROUNDS
 * times, and the best step of all rounds is printed (the machine is
 * shared: the fastest step is the one least disturbed); the thread's CPU
 * time with 1 thread (waiting for a core is not counted), wall clock with
 * THREADS > 1.  "% bound" = (K + V body bytes of every key / the
 * read bandwidth measured with the same threads) / step time.
 */
#include "bench.h"
#include "attn_block.h"
#include "cache.h"
#include "../tools/bench_bound.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_CFG = 64, DISTINCT = 256 };

typedef struct decode_opts {
    int n_ctx, kv_heads, gqa, head_dim, threads, rounds;
    const char *types, *levels;
} decode_opts;


/* DISTINCT written rows repeated to n_ctx (quantising every row would
 * dominate; attention reads the same bytes either way). */
static kvq_cache *make_cache(const decode_opts *o, kvq_type t) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_head_kv = o->kv_heads;
    p.head_dim_k = p.head_dim_v = o->head_dim;
    p.n_ctx = o->n_ctx;
    p.max_batch = DISTINCT;
    p.type_k = p.type_v = t;
    kvq_cache *c = NULL;
    kvq_error err;
    if (kvq_cache_create(&p, &c, &err)) { fprintf(stderr, "decode: %s\n", err.msg); return NULL; }
    const size_t n = (size_t)DISTINCT * o->kv_heads * o->head_dim;
    float *kv = malloc(2 * n * sizeof(float));
    uint64_t seed = 1;
    for (size_t i = 0; kv && i < 2 * n; i++) kv[i] = bench_gauss(&seed);
    if (!kv || kvq_cache_write(c, 0, 0, DISTINCT, kv, kv + n, &err)) { free(kv); kvq_cache_free(c); return NULL; }
    free(kv);
    const kvq_cache_side *sides[2] = { &c->k[0], &c->v[0] };
    for (int s = 0; s < 2; s++)
        for (int h = 0; h < o->kv_heads; h++) {
            uint8_t *head = sides[s]->body + (size_t)h * o->n_ctx * sides[s]->row_bytes;
            for (int p0 = DISTINCT; p0 < o->n_ctx; p0 += DISTINCT)
                memcpy(head + (size_t)p0 * sides[s]->row_bytes, head,
                       (size_t)KVQ_MIN(DISTINCT, o->n_ctx - p0) * sides[s]->row_bytes);
        }
    c->n_stored[0] = o->n_ctx;
    return c;
}

typedef struct decode_cfg {
    kvq_type type;
    const attn_block_kernels *level;
    kvq_cache *cache;
    double best;
} decode_cfg;

static double step(const decode_opts *o, decode_cfg *c, const float *q, float *out, kvq_pool *pool) {
    const kvq_attend_loop loop = { KVQ_PASS_CHUNKED, c->level, false };
    double (*clock)(void) = pool ? bench_now : bench_cpu_now;
    const double t0 = clock();
    kvq_cache_attend_loop(c->cache, 0, o->n_ctx - 1, 1, o->kv_heads * o->gqa, q, 1.0f / sqrtf((float)o->head_dim),
                          out, pool, NULL, &loop, NULL);
    return clock() - t0;
}

static int parse(decode_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *dst = !strcmp(a, "-c") ? &o->n_ctx : !strcmp(a, "--kv-heads") ? &o->kv_heads
                 : !strcmp(a, "--gqa") ? &o->gqa : !strcmp(a, "--head-dim") ? &o->head_dim
                 : !strcmp(a, "-t") ? &o->threads : !strcmp(a, "-r") ? &o->rounds : NULL;
        if (!v) { fprintf(stderr, "decode: %s needs a value\n", a); return 1; }
        if (dst) *dst = atoi(v);
        else if (!strcmp(a, "--types")) o->types = v;
        else if (!strcmp(a, "--levels")) o->levels = v;
        else { fprintf(stderr, "decode: unknown flag %s\n", a); return 1; }
    }
    if (o->n_ctx < 1 || o->kv_heads < 1 || o->gqa < 1 || o->head_dim < 8 || o->threads < 1 || o->rounds < 1) {
        fprintf(stderr, "decode: bad sizes\n");
        return 1;
    }
    return 0;
}

int bench_decode_step(int argc, char **argv) {
    decode_opts o = { 16384, 8, 2, 128, 1, 3, "f16,q8_0,q4_0", NULL };
    if (parse(&o, argc, argv)) return 1;
    static const char *all_levels[] = { "scalar", "avx2-tile", "avx2", "avx512-tile", "avx512" };
    decode_cfg cfg[MAX_CFG];
    int n = 0;
    kvq_type types[KVQ_TYPE_COUNT];
    const int n_types = bench_parse_types("decode", o.types, types, KVQ_TYPE_COUNT);
    if (n_types < 0) return 1;
    for (int ti = 0; ti < n_types; ti++) {
        const kvq_type t = types[ti];
        for (size_t l = 0; l < KVQ_ARRAY_LEN(all_levels); l++) {
            const attn_block_kernels *k = attn_block_level(all_levels[l]);
            if (!k || (o.levels ? !bench_in_list(o.levels, all_levels[l]) : !strcmp(all_levels[l], "scalar"))) continue;
            if (n == MAX_CFG) break;
            cfg[n++] = (decode_cfg){ t, k, NULL, INFINITY };
        }
    }
    kvq_pool *pool = o.threads > 1 ? kvq_pool_create(o.threads) : NULL;
    const double gbs = bench_read_bandwidth(o.threads);
    for (int i = 0; i < n; i++) {
        int same = -1;
        for (int j = 0; j < i && same < 0; j++) same = cfg[j].type == cfg[i].type ? j : -1;
        cfg[i].cache = same >= 0 ? cfg[same].cache : make_cache(&o, cfg[i].type);
        if (!cfg[i].cache) return 1;
    }
    const int n_head = o.kv_heads * o.gqa;
    float *q = malloc((size_t)n_head * o.head_dim * sizeof *q), *out = malloc((size_t)n_head * o.head_dim * sizeof *out);
    uint64_t seed = 7;
    for (int i = 0; i < n_head * o.head_dim; i++) q[i] = bench_gauss(&seed);
    for (int r = 0; r < o.rounds; r++)
        for (int i = 0; i < n; i++) {
            step(&o, &cfg[i], q, out, pool);   /* warm */
            for (int s = 0; s < 5; s++) cfg[i].best = fmin(cfg[i].best, step(&o, &cfg[i], q, out, pool));
        }
    printf("## decode attention: %d KV heads x %d, GQA %d, %d cached tokens, %d thread%s, best of %d rounds x 5 steps\n\n"
           "Read bandwidth %.1f GB/s (%d threads).\n\n| type | level | ms | GB/s | %% bound | vs f16 (same level) |\n"
           "|---|---|---:|---:|---:|---:|\n",
           o.kv_heads, o.head_dim, o.gqa, o.n_ctx, o.threads, o.threads == 1 ? "" : "s", o.rounds, gbs, o.threads);
    for (int i = 0; i < n; i++) {
        const double bytes = 2.0 * (double)kvq_cache_row_bytes(cfg[i].type, o.kv_heads, o.head_dim) * o.n_ctx;
        double f16 = 0;
        for (int j = 0; j < n; j++)
            if (cfg[j].type == KVQ_TYPE_F16 && cfg[j].level == cfg[i].level) f16 = cfg[j].best;
        printf("| %s | %s | %.3f | %.1f | %.0f%% | %s%.2f |\n", kvq_type_name(cfg[i].type), cfg[i].level->level,
               1e3 * cfg[i].best, bytes / cfg[i].best * 1e-9, 100.0 * bytes / (gbs * 1e9) / cfg[i].best,
               f16 > 0 ? "" : "-", f16 > 0 ? f16 / cfg[i].best : 0.0);
    }
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) first &= cfg[j].cache != cfg[i].cache;
        if (first) kvq_cache_free(cfg[i].cache);
    }
    free(q);
    free(out);
    kvq_pool_free(pool);
    return 0;
}
