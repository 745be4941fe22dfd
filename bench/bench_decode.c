/*
 * bench_decode.c - one decode step of attention over a deep cache, per
 * cache type and kernel level, against the memory-bandwidth bound.
 *
 *   kvq-bench decode [-c CTX] [--kv-heads N] [--gqa G] [--head-dim D]
 *                    [--types LIST] [--levels LIST] [--query int16|int8]
 *                    [--layout lanes|rows|both] [--caches flushed|warm]
 *                    [-t THREADS] [-r ROUNDS]
 *
 * Default: the qwen3-0.6B attention shape (8 KV heads x 128, GQA 2) at
 * 16384 cached tokens, types f16 q8_0 q4_0, every kernel level this CPU
 * runs but scalar.  All (type, level) configurations are timed round-robin, ROUNDS
 * times, and the best step of all rounds is printed (the machine is
 * shared: the fastest step is the one least disturbed), with the median
 * of all steps last (what a model's tokens/s, a mean over its steps,
 * compares with).  Before every
 * step the CPU caches are flushed (bench_evict_caches): in a model the
 * other layers' reads evict a layer's cache rows, and one layer's q4_0
 * rows at 16384 tokens (19 MB) would otherwise stay in a 32 MB L3 between
 * repeats while f16's (67 MB) do not.  `--caches warm` skips the flush,
 * which leaves the kernels' compute where the rows fit the caches: the
 * step's time with nothing to wait for in memory (its "% bound" then
 * exceeds what memory could give).  Times: the thread's CPU
 * time with 1 thread (waiting for a core is not counted), wall clock with
 * THREADS > 1.  "% bound" = (the K and V bytes the step reads, exact
 * rows included, kvq_cache_query_bytes_all / the read bandwidth measured
 * with the same threads) / step time.  --layout (or --k-layout): the
 * bodies of the types that have a lanes layout (cache_lanes.h: K in
 * lanes, q4_0's V in pairs) in it (the default), in rows (what ran before
 * it), or both side by side ("q4_0/rows").
 */
#include "bench.h"
#include "attn_block.h"
#include "cache.h"
#include "cache_lanes.h"
#include "../tools/bench_bound.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_CFG = 64, DISTINCT = 256 };

typedef struct decode_opts {
    int n_ctx, kv_heads, gqa, head_dim, threads, rounds;
    const char *types, *levels;
    bool q8;   /* --query int8: kvq_attend_opts.int8_query */
    int layouts;   /* --layout: bit 0 lanes, bit 1 rows */
    bool warm;     /* --caches warm: no flush before a step */
} decode_opts;


/* One layer holding n_ctx positions, written as the engine writes them
 * (bench_written_cache: quantising every row costs seconds for the
 * trellis types, nothing next to the timed rounds). */
static kvq_cache *make_cache(const decode_opts *o, kvq_type t, bool lanes) {
    kvq_cache_set_lanes(lanes);
    kvq_cache_set_pairs(lanes);
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_head_kv = o->kv_heads;
    p.head_dim_k = p.head_dim_v = o->head_dim;
    p.n_ctx = o->n_ctx;
    p.max_batch = DISTINCT;
    p.type_k = p.type_v = t;
    kvq_cache *c = bench_written_cache("decode", &p, o->n_ctx);
    kvq_cache_set_lanes(true);
    kvq_cache_set_pairs(true);
    return c;
}

enum { STEPS_PER_ROUND = 5, MAX_ROUNDS = 100 };

typedef struct decode_cfg {
    kvq_type type;
    bool rows;   /* bodies with a lanes layout kept in rows (--layout) */
    const attn_block_kernels *level;
    kvq_cache *cache;
    double best;
    double median;   /* of every timed step: what a model's mean over tokens compares with */
} decode_cfg;

/* One decode step's time in seconds, or -1 after an error line. */
static double step(const decode_opts *o, decode_cfg *c, const float *q, float *out, kvq_pool *pool) {
    const kvq_attend_loop loop = { KVQ_PASS_CHUNKED, c->level, false };
    const kvq_attend_opts opts = { NULL, 0, o->q8 };
    double (*clock)(void) = pool ? bench_now : bench_cpu_now;
    kvq_error err;
    const double t0 = clock();
    const kvq_status st = kvq_cache_attend_loop(c->cache, 0, o->n_ctx - 1, 1, o->kv_heads * o->gqa, q,
                                                1.0f / sqrtf((float)o->head_dim), out, pool, &opts, &loop, &err);
    const double t = clock() - t0;
    if (st == KVQ_OK) return t;
    fprintf(stderr, "decode: %s at %s: %s\n", kvq_type_name(c->type), c->level->level, err.msg);
    return -1;
}

static int parse(decode_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-c")) ok = bench_flag_int("decode", a, v, 1, 1 << 20, &o->n_ctx);
        else if (!strcmp(a, "--kv-heads")) ok = bench_flag_int("decode", a, v, 1, 64, &o->kv_heads);
        else if (!strcmp(a, "--gqa")) ok = bench_flag_int("decode", a, v, 1, 16, &o->gqa);
        else if (!strcmp(a, "--head-dim")) ok = bench_flag_int("decode", a, v, 8, KVQ_MAX_HEAD_DIM, &o->head_dim);
        else if (!strcmp(a, "-t")) ok = bench_flag_int("decode", a, v, 1, 256, &o->threads);
        else if (!strcmp(a, "-r")) ok = bench_flag_int("decode", a, v, 1, MAX_ROUNDS, &o->rounds);
        else if (!strcmp(a, "--query")) ok = bench_flag_query("decode", v, &o->q8);
        else if (!strcmp(a, "--layout") || !strcmp(a, "--k-layout")) {
            o->layouts = !v ? 0 : !strcmp(v, "lanes") ? 1 : !strcmp(v, "rows") ? 2 : !strcmp(v, "both") ? 3 : 0;
            if (!o->layouts) { fprintf(stderr, "decode: --layout wants lanes, rows or both\n"); return 1; }
        } else if (!strcmp(a, "--caches")) {
            if (!v || (strcmp(v, "warm") && strcmp(v, "flushed"))) {
                fprintf(stderr, "decode: --caches wants flushed or warm\n");
                return 1;
            }
            o->warm = !strcmp(v, "warm");
        } else if (!strcmp(a, "--types") || !strcmp(a, "--levels")) {
            if (!v) { fprintf(stderr, "decode: %s needs a value\n", a); return 1; }
            *(a[2] == 't' ? &o->types : &o->levels) = v;
        } else { fprintf(stderr, "decode: unknown flag %s\n", a); return 1; }
        if (!ok) return 1;
    }
    return 0;
}

static void free_caches(decode_cfg *cfg, int n) {
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) first &= cfg[j].cache != cfg[i].cache;
        if (first) kvq_cache_free(cfg[i].cache);
    }
}

/* Every configuration timed round-robin, the best step of each and the
 * median of its steps kept; false after an error line. */
static bool time_all(const decode_opts *o, decode_cfg *cfg, int n, kvq_pool *pool) {
    const int n_head = o->kv_heads * o->gqa, per_cfg = o->rounds * STEPS_PER_ROUND;
    float *q = malloc((size_t)n_head * o->head_dim * sizeof *q), *out = malloc((size_t)n_head * o->head_dim * sizeof *out);
    double *times = malloc((size_t)n * (size_t)per_cfg * sizeof *times);   /* [config][round x step] */
    bool ok = q && out && times;
    if (!ok) fprintf(stderr, "decode: out of memory\n");
    uint64_t seed = 7;
    for (int i = 0; ok && i < n_head * o->head_dim; i++) q[i] = bench_gauss(&seed);
    for (int r = 0; ok && r < o->rounds; r++)
        for (int i = 0; ok && i < n; i++)
            for (int s = 0; ok && s <= STEPS_PER_ROUND; s++) {   /* a warm-up step, then the timed ones */
                if (!o->warm && !bench_evict_caches("decode")) { ok = false; break; }
                const double t = step(o, &cfg[i], q, out, pool);
                ok = t >= 0;
                if (!ok || s == 0) continue;
                cfg[i].best = fmin(cfg[i].best, t);
                times[(size_t)i * per_cfg + (size_t)r * STEPS_PER_ROUND + (size_t)(s - 1)] = t;
            }
    for (int i = 0; ok && i < n; i++) cfg[i].median = bench_median(times + (size_t)i * per_cfg, per_cfg);
    free(q);
    free(out);
    free(times);
    return ok;
}

int bench_decode_step(int argc, char **argv) {
    decode_opts o = { 16384, 8, 2, 128, 1, 3, "f16,q8_0,q4_0", NULL, false, 1, false };
    if (parse(&o, argc, argv)) return 1;
    static const char *const all_levels[] = { "scalar", "avx2-tile", "avx2", "avx512-tile", "avx512", "avx512-vnni" };
    const char *levels[KVQ_ARRAY_LEN(all_levels)];
    const int n_levels = bench_levels("decode", o.levels, all_levels, (int)KVQ_ARRAY_LEN(all_levels), levels);
    if (n_levels < 0) return 1;
    kvq_type types[KVQ_TYPE_COUNT];
    const int n_types = bench_parse_types("decode", o.types, types, KVQ_TYPE_COUNT);
    if (n_types < 0) return 1;
    if (!n_types) { fprintf(stderr, "decode: --types names no type\n"); return 1; }
    if (n_types * n_levels > MAX_CFG) {
        fprintf(stderr, "decode: %d types x %d levels: at most %d configurations\n", n_types, n_levels, MAX_CFG);
        return 1;
    }
    decode_cfg cfg[MAX_CFG];
    int n = 0;
    for (int ti = 0; ti < n_types; ti++)
        for (int rows = 0; rows < 2; rows++) {   /* one cache per type and layout, shared by its levels */
            const bool has_lanes = kvq_cache_type_has_layout(types[ti], o.head_dim);
            if (has_lanes ? !(o.layouts >> rows & 1) : rows) continue;
            if (n + n_levels > MAX_CFG) { fprintf(stderr, "decode: at most %d configurations\n", MAX_CFG); break; }
            kvq_cache *cache = make_cache(&o, types[ti], !rows);
            if (!cache) { free_caches(cfg, n); return 1; }
            for (int l = 0; l < n_levels; l++)
                cfg[n++] = (decode_cfg){ types[ti], has_lanes && rows, attn_block_level(levels[l]), cache, INFINITY, 0.0 };
        }
    kvq_pool *pool = o.threads > 1 ? kvq_pool_create(o.threads) : NULL;
    if (o.threads > 1 && !pool) {
        fprintf(stderr, "decode: cannot start %d threads\n", o.threads);
        free_caches(cfg, n);
        return 1;
    }
    const double gbs = bench_read_bandwidth(o.threads);
    const bool ok = time_all(&o, cfg, n, pool);
    if (ok) {
        printf("## decode attention: %d KV heads x %d, GQA %d, %d cached tokens, %d thread%s, best of %d rounds x %d steps, %s\n\n"
               "Read bandwidth %.1f GB/s (%d threads).  ms, GB/s, %% bound and vs f16 are of each configuration's best\n"
               "step; the median of its steps is last (a model's tokens/s is a mean over steps).\n\n"
               "| type | level | ms | GB/s | %% bound | vs f16 (same level) | median ms |\n"
               "|---|---|---:|---:|---:|---:|---:|\n",
               o.kv_heads, o.head_dim, o.gqa, o.n_ctx, o.threads, o.threads == 1 ? "" : "s", o.rounds, STEPS_PER_ROUND,
               o.warm ? "CPU caches warm (not flushed: the kernels' compute)" : "CPU caches flushed before each", gbs,
               o.threads);
        for (int i = 0; i < n; i++) {
            const double bytes = kvq_cache_query_bytes_all(cfg[i].cache, o.n_ctx - 1);   /* K and V, exact rows too */
            double f16 = 0;
            for (int j = 0; j < n; j++)
                if (cfg[j].type == KVQ_TYPE_F16 && cfg[j].level == cfg[i].level) f16 = cfg[j].best;
            printf("| %s%s | %s | %.3f | %.1f | ", kvq_type_name(cfg[i].type), cfg[i].rows ? "/rows" : "", cfg[i].level->level, 1e3 * cfg[i].best,
                   bytes / cfg[i].best * 1e-9);
            if (gbs > 0) printf("%.0f%% | ", 100.0 * bytes / (gbs * 1e9) / cfg[i].best);
            else printf("- | ");
            if (f16 > 0) printf("%.2f | ", f16 / cfg[i].best);
            else printf("- | ");
            printf("%.3f |\n", 1e3 * cfg[i].median);
        }
    }
    free_caches(cfg, n);
    kvq_pool_free(pool);
    return ok ? 0 : 1;
}
