/*
 * bench_chunk.c - the chunk kernels alone: one chunk's K scores and V sums
 * (attn_block_scores / attn_block_values, the path the decode step takes)
 * per cache type and kernel level, over rows that stay in L1.
 *
 *   kvq-bench chunk [--types LIST] [--levels LIST] [--gqa G]
 *                   [--head-dim D] [--rows N] [--query int16|int8] [-r ROUNDS]
 *
 * Why: the decode step (`kvq-bench decode`) reads a cache of megabytes, so
 * on a shared machine its time moves with what the neighbours do to the
 * L3 and the memory bus; a kernel change of a few % is lost in that.
 * Here the same kernels run on N rows (default 64: two chunks, a few KiB)
 * read over and over, so the figure is the kernels' own work: ns per key
 * for the scores of the GQA group and for the V sums, the thread's CPU
 * time, best of ROUNDS (the levels and K and V alternated within each
 * round); for the types whose K bodies the cache keeps in lanes
 * (cache_lanes.h) the scores from the same rows in that layout too, the K
 * that main runs, and for those whose V bodies it keeps in pairs the V
 * sums from that layout; and K+V (lanes and pairs where the type has
 * them) in cycles at the clock bench_clock_hz estimates (to set
 * against `kvq-bench vecops`' instructions per cycle).  The rows are
 * followed by padding, so the
 * kernels' software prefetch (a few chunks ahead) reads mapped memory
 * as it does in a cache.  Not a bound, not a model: a kernel's cost.
 */
#include "bench.h"
#include "attn_block.h"
#include "cache_lanes.h"
#include "format_row.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK = ATTN_BLOCK_KEYS, PAD_CHUNKS = 8, MAX_DIM = 512, MAX_GQA = 8, MAX_LEVELS = 4 };

typedef struct chunk_opts {
    const char *types, *levels;
    int gqa, head_dim, rows, rounds;
    bool q8;   /* --query int8: the query rounded to int8 (kvq_attend_opts.int8_query) */
} chunk_opts;

typedef struct chunk_run {
    const attn_block_kernels *kr;
    attn_block_rows src;
    const uint8_t *const *rows;   /* every row, then padding               */
    int n_rows;                   /* a multiple of CHUNK                   */
    int gqa, len;
    const attn_query *q;
    float *w, *acc;
    const uint8_t *lanes;         /* the same rows in lanes, or NULL       */
    const uint8_t *pairs;         /* the same rows in V pairs, or NULL     */
} chunk_run;

static void run_scores(void *ctx) {
    const chunk_run *r = ctx;
    for (int c = 0; c < r->n_rows; c += CHUNK)
        attn_block_scores(r->kr, &r->src, r->rows + c, CHUNK, r->q, r->gqa, 0.1f, r->w, CHUNK);
}

static void run_lanes(void *ctx) {
    const chunk_run *r = ctx;
    for (int c = 0; c < r->n_rows; c += CHUNK)
        r->kr->fused[r->src.type].scores_lanes(r->lanes, c, CHUNK, r->q, r->gqa, r->len, 0.1f, r->w, CHUNK);
}

static void run_values(void *ctx) {
    const chunk_run *r = ctx;
    for (int c = 0; c < r->n_rows; c += CHUNK)
        attn_block_values(r->kr, &r->src, r->rows + c, CHUNK, r->w, CHUNK, r->gqa, r->acc, r->len);
}

static void run_pairs(void *ctx) {
    const chunk_run *r = ctx;
    for (int c = 0; c < r->n_rows; c += CHUNK)
        r->kr->fused[r->src.type].accumulate_pairs(r->pairs, c, CHUNK, r->w, CHUNK, r->gqa, r->acc, r->len, r->len);
}

static int parse(chunk_opts *o, int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--gqa")) ok = bench_flag_int("chunk", a, v, 1, MAX_GQA, &o->gqa);
        else if (!strcmp(a, "--head-dim")) ok = bench_flag_int("chunk", a, v, 32, MAX_DIM, &o->head_dim);
        else if (!strcmp(a, "--rows")) ok = bench_flag_int("chunk", a, v, 1, 1 << 16, &o->rows);
        else if (!strcmp(a, "-r")) ok = bench_flag_int("chunk", a, v, 1, 100, &o->rounds);
        else if (!strcmp(a, "--query")) ok = bench_flag_query("chunk", v, &o->q8);
        else if (!strcmp(a, "--types") || !strcmp(a, "--levels")) {
            if (!v) { fprintf(stderr, "chunk: %s needs a value\n", a); return 1; }
            *(a[2] == 't' ? &o->types : &o->levels) = v;
        } else { fprintf(stderr, "chunk: unknown flag %s\n", a); return 1; }
        if (!ok) return 1;
    }
    if (o->head_dim % 32) {
        fprintf(stderr, "chunk: --head-dim %d is not a multiple of 32\n", o->head_dim);
        return 1;
    }
    return 0;
}

/* The types whose rows a chunk's hooks read by themselves: f32, f16,
 * bf16 and the 32-value block types (KVarN records and TurboQuant rows,
 * written through a cache's rotation and tiles, are timed by `decode`,
 * whose cache writes them as the engine does). */
static bool chunk_type(kvq_type ty) {
    const kvq_type_traits *tr = kvq_type_get(ty);
    return tr && tr->is_cache_type && tr->quantize && !tr->row_bytes;
}

/* One type at every chosen level: a table row per level. */
static int bench_type(const chunk_opts *o, kvq_type ty, const char *const *levels, int n_levels, double hz) {
    const kvq_type_traits *tr = kvq_type_get(ty);
    const int len = o->head_dim, G = o->gqa;
    const int n_rows = (o->rows + CHUNK - 1) / CHUNK * CHUNK, total = n_rows + PAD_CHUNKS * CHUNK;
    const size_t rb = kvq_row_bytes(ty, len);
    uint8_t *packed = malloc((size_t)total * rb);
    const uint8_t **rows = malloc((size_t)total * sizeof *rows);
    float *x = malloc((size_t)len * sizeof *x), *tile = malloc((size_t)CHUNK * len * sizeof *tile);
    float *zero = calloc((size_t)len, sizeof *zero);
    static float q[MAX_GQA * MAX_DIM], acc[MAX_GQA * MAX_DIM], w[MAX_GQA * CHUNK], qscale[MAX_GQA * MAX_DIM / 32];
    static int16_t qi[MAX_GQA * MAX_DIM];
    static int8_t qb[MAX_GQA * MAX_DIM];
    static int32_t qsum[MAX_GQA * MAX_DIM / 32];
    const bool has_lanes = kvq_lanes_type(ty, len);
    uint8_t *lanes = has_lanes ? malloc((size_t)total / KVQ_LANES * kvq_lanes_group_bytes(kvq_lanes_spec_of(ty), len)) : NULL;
    const bool has_pairs = kvq_vpairs_type(ty, len);
    uint8_t *pairs = has_pairs ? malloc((size_t)total * rb) : NULL;   /* the same bytes as the rows */
    int status = !packed || !rows || !x || !tile || !zero || (has_lanes && !lanes) || (has_pairs && !pairs);
    uint64_t seed = 11;
    for (int t = 0; !status && t < total; t++) {
        for (int d = 0; d < len; d++) x[d] = bench_gauss(&seed);
        tr->quantize(x, packed + (size_t)t * rb, len);
        rows[t] = packed + (size_t)t * rb;
        if (has_lanes) kvq_lanes_put_row(ty, lanes, len, t, rows[t]);
        if (has_pairs) kvq_vpairs_put_row(ty, pairs, len, t, rows[t]);
    }
    for (int i = 0; i < G * len; i++) q[i] = bench_gauss(&seed), acc[i] = 0.0f;
    for (int g = 0; g < G; g++)
        (o->q8 ? attn_block_round_query8 : attn_block_round_query)(q + g * len, len, qi + g * len, qscale + g * len / 32,
                                                                  qsum + g * len / 32);
    for (int i = 0; i < G * CHUNK; i++) w[i] = 0.01f + 0.5f * fabsf(bench_gauss(&seed));   /* weights, all nonzero */
    if (o->q8) attn_block_query_bytes(qi, (int64_t)G * len, qb);   /* as attention.c does once per token */
    const attn_query aq = { q, qi, qscale, qsum, len, o->q8, o->q8 ? qb : NULL };
    double k_best[MAX_LEVELS], v_best[MAX_LEVELS], lanes_best[MAX_LEVELS], pairs_best[MAX_LEVELS];
    for (int l = 0; l < n_levels; l++) k_best[l] = v_best[l] = lanes_best[l] = pairs_best[l] = INFINITY;
    /* rounds outermost, the levels and K and V alternated within each, the
     * best of each kept: a shared host's drift spreads over all of them */
    for (int round = 0; !status && round < o->rounds; round++)
        for (int l = 0; l < n_levels; l++) {
            chunk_run r = { attn_block_level(levels[l]),
                            { .tr = tr, .type = ty, .f32 = ty == KVQ_TYPE_F32, .len = len, .tile = tile, .zero = zero },
                            rows, n_rows, G, len, &aq, w, acc, lanes, pairs };
            k_best[l] = fmin(k_best[l], bench_time(run_scores, &r, 3, 0.02));
            if (has_lanes && r.kr->fused && r.kr->fused[ty].scores_lanes)
                lanes_best[l] = fmin(lanes_best[l], bench_time(run_lanes, &r, 3, 0.02));
            v_best[l] = fmin(v_best[l], bench_time(run_values, &r, 3, 0.02));
            if (has_pairs && r.kr->fused && r.kr->fused[ty].accumulate_pairs)
                pairs_best[l] = fmin(pairs_best[l], bench_time(run_pairs, &r, 3, 0.02));
        }
    for (int l = 0; !status && l < n_levels; l++) {
        const double rows_ns = k_best[l] * 1e9 / n_rows, v_ns = v_best[l] * 1e9 / n_rows;
        const double lanes_ns = lanes_best[l] * 1e9 / n_rows, k_ns = isfinite(lanes_ns) ? lanes_ns : rows_ns;
        const double pairs_ns = pairs_best[l] * 1e9 / n_rows, vv_ns = isfinite(pairs_ns) ? pairs_ns : v_ns;
        printf("| %s | %s | %.2f | ", tr->name, levels[l], rows_ns);
        if (isfinite(lanes_ns)) printf("%.2f | ", lanes_ns);
        else printf("- | ");
        printf("%.2f | ", v_ns);
        if (isfinite(pairs_ns)) printf("%.2f | ", pairs_ns);
        else printf("- | ");
        printf("%.2f | %.2f | ", k_ns + vv_ns, (k_ns + vv_ns) / G);
        if (hz > 0) printf("%.0f |\n", (k_ns + vv_ns) * 1e-9 * hz);
        else printf("- |\n");
    }
    bench_consume(acc[0] + w[0]);
    free(packed);
    free(lanes);
    free(pairs);
    free(rows);
    free(x);
    free(tile);
    free(zero);
    if (status) fprintf(stderr, "chunk: out of memory\n");
    return status;
}

int bench_chunk(int argc, char **argv) {
    chunk_opts o = { "f16,q8_0,q4_0,iq4_nl,q3_0", NULL, 2, 128, 2 * CHUNK, 3, false };
    if (parse(&o, argc, argv)) return 1;
    static const char *const all_levels[MAX_LEVELS] = { "scalar", "avx2", "avx512", "avx512-vnni" };
    const char *levels[MAX_LEVELS];
    const int n_levels = bench_levels("chunk", o.levels, all_levels, MAX_LEVELS, levels);
    if (n_levels < 0) return 1;
    kvq_type types[KVQ_TYPE_COUNT];
    const int n_types = bench_parse_types("chunk", o.types, types, KVQ_TYPE_COUNT);
    if (n_types < 0) return 1;
    if (!n_types) { fprintf(stderr, "chunk: --types names no type\n"); return 1; }
    for (int i = 0; i < n_types; i++)
        if (!chunk_type(types[i])) {
            fprintf(stderr, "chunk: %s is not read by the chunk kernels alone (f32, f16, bf16 and the 32-value block types are)\n",
                    kvq_type_name(types[i]));
            return 1;
        }
    const double hz = bench_clock_hz();
    char clock[64];
    printf("## chunk kernels alone: GQA %d, head_dim %d, %d rows in L1, %s query, 1 thread, CPU time, best of %d "
           "rounds; %s\n\n"
           "| type | level | K scores (rows) ns/key | K scores (lanes) ns/key | V sums (rows) ns/key | V sums (pairs) ns/key "
           "| K+V ns/key | per query head | K+V cycles/key |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
           o.gqa, o.head_dim, (o.rows + CHUNK - 1) / CHUNK * CHUNK, o.q8 ? "int8" : "int16", o.rounds,
           bench_clock_text(hz, clock, sizeof clock));
    int status = 0;
    for (int i = 0; i < n_types && !status; i++) status = bench_type(&o, types[i], levels, n_levels, hz);
    return status;
}
