/*
 * bench_cachefmt.c - the format cache types (KVarN tiles, TurboQuant rows)
 * against q4_0 and f16:
 *   1. decode attention (one query row per head, 8 KV heads x 128, GQA 4)
 *      over 32768 cached tokens, 1 and 2 threads, ratio to f16 and q4_0;
 *   2. KVarN tile quantisation: one 128-token x 128-channel tile (K and V
 *      orientation), cost per token and head slice;
 *   3. TurboQuant encode: one 128-value row (rotated input, as the cache
 *      writes it), per type; iq4_nl's scale search against its exact
 *      search (cost per row, and the search's error over the optimum's).
 * Times: the calling thread's CPU time (1-thread decode; bench_time:
 * quantisation, encode) or wall-clock medians (2-thread decode); the
 * decode steps each read the cache from memory (bench_evict_caches); the
 * machine may be shared, so the numbers are noisy, the wall-clock ones most.
 */
#include "bench.h"
#include "cache.h"
#include "kvarn.h"
#include "quant_block.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEADS_KV = 8, GQA = 4, HEAD_DIM = 128, DISTINCT = 256, CTX = 32768 };

static float gauss(uint64_t *s) {          /* splitmix64 + Box-Muller */
    uint64_t a = (*s += 0x9e3779b97f4a7c15ull), b = (*s += 0x9e3779b97f4a7c15ull);
    a = (a ^ (a >> 31)) * 0xbf58476d1ce4e5b9ull;
    b = (b ^ (b >> 31)) * 0x94d049bb133111ebull;
    const double u = ((double)(a >> 11) + 0.5) / 9007199254740992.0, v = (double)(b >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* CTX positions written as the engine writes them (bench_written_cache). */
static kvq_cache *make_cache(kvq_type t) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_head_kv = HEADS_KV;
    p.head_dim_k = p.head_dim_v = HEAD_DIM;
    p.n_ctx = CTX;
    p.max_batch = DISTINCT;
    p.type_k = p.type_v = t;
    p.tail_type = KVQ_TYPE_F16;
    return bench_written_cache("cachefmt", &p, CTX);
}

static void bench_decode(void) {
    static const kvq_type types[] = {
        KVQ_TYPE_F16, KVQ_TYPE_Q4_0, KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, KVQ_TYPE_TURBO4, KVQ_TYPE_TURBO3,
        KVQ_TYPE_TURBO2, KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO2_TCQ,
    };
    enum { NT = sizeof types / sizeof types[0] };
    float q[HEADS_KV * GQA * HEAD_DIM], out[HEADS_KV * GQA * HEAD_DIM];
    uint64_t seed = 7;
    for (int i = 0; i < HEADS_KV * GQA * HEAD_DIM; i++) q[i] = gauss(&seed);
    kvq_pool *pool2 = kvq_pool_create(2);
    double t1[NT], t2[NT];
    size_t bytes[NT];
    for (int i = 0; i < NT; i++) {
        kvq_cache *c = make_cache(types[i]);
        /* 1 thread: its CPU time; 2: wall clock */
        t1[i] = c ? bench_decode_median("cachefmt", c, CTX, HEADS_KV * GQA, HEAD_DIM, q, out, NULL, NULL) : -1.0;
        t2[i] = c && pool2 ? bench_decode_median("cachefmt", c, CTX, HEADS_KV * GQA, HEAD_DIM, q, out, pool2, NULL)
                           : -1.0;
        kvq_cache_bytes b;
        kvq_cache_memory(c, &b);
        bytes[i] = b.k + b.v;
        kvq_cache_free(c);
    }
    printf("## Decode attention, %d tokens, %d KV heads x %d, GQA %d\n\n", CTX, HEADS_KV, HEAD_DIM, GQA);
    printf("1T: the calling thread's CPU time; 2T: wall clock; medians of steps each read from memory (CPU caches\n"
           "flushed before each).\n\n");
    printf("| type | K+V body MiB | ms 1T (CPU) | ms 2T (wall) | f16 / type (1T) | q4_0 / type (1T) | f16 / type (2T) |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < NT; i++) {
        if (t1[i] <= 0.0) { printf("| %s | failed |\n", kvq_type_name(types[i])); continue; }
        printf("| %s | %.2f | %.3f | ", kvq_type_name(types[i]), bytes[i] / 1048576.0, 1e3 * t1[i]);
        if (t2[i] > 0) printf("%.3f | ", 1e3 * t2[i]);
        else printf("- | ");
        if (t1[0] > 0) printf("%.2f | ", t1[0] / t1[i]);   /* types[0]: f16, types[1]: q4_0 */
        else printf("- | ");
        if (t1[1] > 0) printf("%.2f | ", t1[1] / t1[i]);
        else printf("- | ");
        if (t2[0] > 0 && t2[i] > 0) printf("%.2f |\n", t2[0] / t2[i]);
        else printf("- |\n");
    }
    printf("\n");
    kvq_pool_free(pool2);
}

typedef struct tile_job { kvq_kvarn_shape s; const float *x; uint8_t *rec; float *scratch; const kvq_kvarn_kernels *k; } tile_job;
static void tile_once(void *ctx) {
    tile_job *j = ctx;
    if (j->k) kvq_kvarn_quantize_with(j->s, j->x, KVQ_KVARN_ITERS, j->rec, j->scratch, j->k);
    else kvq_kvarn_quantize_ref(j->s, j->x, KVQ_KVARN_ITERS, j->rec, j->scratch);
    bench_consume(j->rec[0]);
}

/* The reference (one value at a time) against the lane sweeps of each
 * level this CPU runs: same bytes, different speed. */
static void bench_tiles(void) {
    static float x[128 * 128];
    static uint8_t rec[2048 * 8 + 768];
    const struct { const char *name; const kvq_kvarn_kernels *fn; bool ok; } lv[] = {
        { "reference", NULL, true }, { "lanes scalar", kvq_kvarn_kernels_level("scalar"), true },
        { "lanes avx2", kvq_kvarn_kernels_level("avx2"), kvq_kvarn_kernels_level("avx2") != NULL },
        { "lanes avx512", kvq_kvarn_kernels_level("avx512"), kvq_kvarn_kernels_level("avx512") != NULL },
    };
    uint64_t seed = 3;
    for (int i = 0; i < 128 * 128; i++) x[i] = gauss(&seed) * (i % 128 == 5 ? 8.0f : 1.0f);
    printf("## KVarN tile quantisation (128 tokens x 128 channels, %d iterations), ms / tile, 1 thread\n\n", KVQ_KVARN_ITERS);
    printf("| bits | side |");
    for (size_t l = 0; l < KVQ_ARRAY_LEN(lv); l++) if (lv[l].ok) printf(" %s |", lv[l].name);
    printf(" best / reference |\n|---|---|");
    for (size_t l = 0; l < KVQ_ARRAY_LEN(lv); l++) if (lv[l].ok) printf("---:|");
    printf("---:|\n");
    const int bits[] = { 3, 4, 8 };
    for (int b = 0; b < 3; b++)
        for (int side = 0; side < 2; side++) {
            const kvq_kvarn_shape s = { 128, bits[b], side == 0 };
            float *scratch = malloc(kvq_kvarn_scratch_floats(s) * sizeof *scratch);
            if (!scratch) return;
            double ref = 0.0, best = INFINITY;
            printf("| %d | %s |", bits[b], side ? "V" : "K");
            for (size_t l = 0; l < KVQ_ARRAY_LEN(lv); l++) {
                if (!lv[l].ok) continue;
                tile_job j = { s, x, rec, scratch, lv[l].fn };
                const double t = bench_time(tile_once, &j, 5, 0.1);
                if (!lv[l].fn) ref = t; else best = fmin(best, t);
                printf(" %.3f |", 1e3 * t);
            }
            printf(" %.1fx |\n", ref / best);
            free(scratch);
        }
    printf("\n");
}

typedef struct row_job { kvq_type t; const float *x; uint8_t *row; } row_job;
static void row_once(void *ctx) {
    row_job *j = ctx;
    kvq_quantize_row(j->t, j->x, j->row, HEAD_DIM);
    bench_consume(j->row[2]);
}

static void bench_turbo_encode(void) {
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_IQ4_NL, KVQ_TYPE_TURBO2, KVQ_TYPE_TURBO3, KVQ_TYPE_TURBO4,
                                      KVQ_TYPE_TURBO2_TCQ, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4_TCQ };
    float x[HEAD_DIM];
    uint8_t row[256];
    uint64_t seed = 5;
    for (int i = 0; i < HEAD_DIM; i++) x[i] = gauss(&seed);
    printf("## Encode one %d-value row (rotated input, as the cache writes)\n\n", HEAD_DIM);
    printf("| type | us / row | ns / value |\n|---|---|---|\n");
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        row_job j = { types[i], x, row };
        const double t = bench_time(row_once, &j, 5, 0.1);
        printf("| %s | %.3f | %.1f |\n", kvq_type_name(types[i]), 1e6 * t, 1e9 * t / HEAD_DIM);
    }
    printf("\n");
}

/* iq4_nl: the cache's scale search against the exact search, on ROWS
 * distinct Gaussian rows (one row repeated would let the exact search's
 * branches be learnt), cost and error (docs/formats.md). */
enum { IQ4_ROWS = 2000 };
typedef struct iq4_job { const float *x; uint8_t *out; bool exact; } iq4_job;
static void iq4_rows_once(void *ctx) {
    const iq4_job *j = ctx;
    const int64_t n = (int64_t)IQ4_ROWS * HEAD_DIM;
    if (j->exact) kvq_iq4_nl_quantize_exact(j->x, j->out, n);
    else kvq_quantize_row(KVQ_TYPE_IQ4_NL, j->x, j->out, n);
    bench_consume(j->out[2]);
}

static double iq4_row_sse(const float *x, const uint8_t *row) {
    float y[HEAD_DIM];
    kvq_dequantize_row(KVQ_TYPE_IQ4_NL, row, y, HEAD_DIM);
    double e = 0;
    for (int i = 0; i < HEAD_DIM; i++) e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
    return e;
}

static void bench_iq4_search(void) {
    enum { ROW_BYTES = KVQ_BYTES_IQ4_NL * HEAD_DIM / KVQ_BLOCK };
    float *x = malloc(sizeof(float) * IQ4_ROWS * HEAD_DIM);
    uint8_t *a = malloc((size_t)IQ4_ROWS * ROW_BYTES), *b = malloc((size_t)IQ4_ROWS * ROW_BYTES);
    if (!x || !a || !b) {
        fprintf(stderr, "kvq-bench cachefmt: out of memory\n");
        free(x); free(a); free(b);
        return;
    }
    uint64_t seed = 9;
    for (int i = 0; i < IQ4_ROWS * HEAD_DIM; i++) x[i] = gauss(&seed);
    iq4_job js = { x, a, false }, je = { x, b, true };
    const double ts = bench_time(iq4_rows_once, &js, 3, 0.1), te = bench_time(iq4_rows_once, &je, 3, 0.1);
    double ratio = 0, worst = 1;
    int optimum = 0;
    for (int r = 0; r < IQ4_ROWS; r++) {
        const double sa = iq4_row_sse(x + r * HEAD_DIM, a + r * ROW_BYTES), sb = iq4_row_sse(x + r * HEAD_DIM, b + r * ROW_BYTES);
        ratio += sa / sb;
        worst = fmax(worst, sa / sb);
        optimum += sa <= sb * (1 + 1e-9);
    }
    printf("## iq4_nl: the scale search (cache writes) against the exact search, %d Gaussian rows of %d\n\n",
           IQ4_ROWS, HEAD_DIM);
    printf("| encoder | us / row | row error / the optimum's, mean | worst row | rows at the optimum |\n");
    printf("|---|---:|---:|---:|---:|\n");
    printf("| search (%s) | %.3f | %.5f | %.4f | %.1f %% |\n", kvq_simd_level(), 1e6 * ts / IQ4_ROWS, ratio / IQ4_ROWS,
           worst, 100.0 * optimum / IQ4_ROWS);
    printf("| exact | %.3f | 1 | 1 | 100 %% |\n\n", 1e6 * te / IQ4_ROWS);
    free(x); free(a); free(b);
}

/* kvq-bench cachefmt [decode|tiles|encode]: all parts, or the one named. */
int bench_cachefmt(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    if (argc > 2 || (only && strcmp(only, "decode") && strcmp(only, "tiles") && strcmp(only, "encode"))) {
        fprintf(stderr, "kvq-bench cachefmt: error: one part at most: decode, tiles or encode\n");
        return 1;
    }
    printf("# Format cache types (simd %s)\n\n", kvq_simd_level());
    if (!only || !strcmp(only, "decode")) bench_decode();
    if (!only || !strcmp(only, "tiles")) bench_tiles();
    if (!only || !strcmp(only, "encode")) {
        bench_turbo_encode();
        bench_iq4_search();
    }
    return 0;
}
