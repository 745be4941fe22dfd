/* test_formats.c - round-trip quality, odd row lengths and non-finite
 * input for every cache type (docs/formats.md states the rules tested). */
#include "test.h"
#include "kvq.h"
#include "turbo.h"
#include "quant_block.h"

#include <float.h>
#include <string.h>

/* All cache types: the rows of the trait table that have a quantiser. */
static int cache_types(kvq_type out[KVQ_TYPE_COUNT]) {
    int n = 0;
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)t);
        if (tr && tr->is_cache_type && tr->quantize) out[n++] = (kvq_type)t;
    }
    return n;
}

static void fill_gauss(test_rng *r, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)test_rng_gauss(r);
}

/*
 * Expected NMSE on unit Gaussian rows (derivation: docs/formats.md §3).
 * A uniform quantiser of step D has error variance D^2/12.  Over blocks of
 * 32 unit Gaussians E[max|x|^2] = 5.71 and E[(max-min)^2] = 17.6 (Monte
 * Carlo, 1e5 blocks), so with unit signal variance:
 *   q*_0 (b bits): D = max|x| / 2^(b-1)   -> NMSE = 5.71 / (12 * 4^(b-1))
 *   q*_1 (b bits): D = (max-min)/(2^b-1)  -> NMSE = 17.6 / (12 * (2^b-1)^2)
 *   q8_0:          D = max|x| / 127
 *   iq4_nl:        0.8 x q4_0's figure (same bits; its scale search must beat
 *                  q4_0's uniform grid by 20%)
 *   f16 / bf16:    D <= |x| 2^-10 / 2^-7  -> NMSE <= 2^-20/12, 2^-14/12
 *   f32:           lossless (0)
 */
static double predicted_nmse(kvq_type t) {
    const double amax2 = 5.71, range2 = 17.6;
    switch (t) {
    case KVQ_TYPE_F32: return 0.0;
    case KVQ_TYPE_F16: return ldexp(1.0, -20) / 12;
    case KVQ_TYPE_BF16: return ldexp(1.0, -14) / 12;
    case KVQ_TYPE_Q8_0: return amax2 / (12.0 * 127 * 127);
    case KVQ_TYPE_IQ4_NL: return 0.8 * amax2 / (12.0 * 64);
    default: break;
    }
    /* TurboQuant: the codebook's distortion D per unit-variance value
     * (E[q.x_hat] = sqrt(1 - D) q.x, kvq_turbo_ip_gain); norm' keeps the
     * length, so NMSE ~ D (docs/turbo.md). */
    static const struct { kvq_type t; kvq_turbo_type tt; } turbo[] = {
        { KVQ_TYPE_TURBO2, KVQ_TURBO2 }, { KVQ_TYPE_TURBO3, KVQ_TURBO3 }, { KVQ_TYPE_TURBO4, KVQ_TURBO4 },
        { KVQ_TYPE_TURBO2_TCQ, KVQ_TURBO2_TCQ }, { KVQ_TYPE_TURBO3_TCQ, KVQ_TURBO3_TCQ },
        { KVQ_TYPE_TURBO4_TCQ, KVQ_TURBO4_TCQ },
    };
    for (size_t i = 0; i < sizeof turbo / sizeof turbo[0]; i++) {
        if (turbo[i].t != t) continue;
        const double g = kvq_turbo_ip_gain(turbo[i].tt);
        return 1.0 - g * g;
    }
    static const struct { kvq_type t; int bits; bool has_min; } spec[] = {
        { KVQ_TYPE_Q6_0, 6, false }, { KVQ_TYPE_Q6_1, 6, true }, { KVQ_TYPE_Q5_0, 5, false },
        { KVQ_TYPE_Q5_1, 5, true },  { KVQ_TYPE_Q4_0, 4, false }, { KVQ_TYPE_Q4_1, 4, true },
        { KVQ_TYPE_Q3_0, 3, false }, { KVQ_TYPE_Q3_1, 3, true },  { KVQ_TYPE_Q2_0, 2, false },
        { KVQ_TYPE_Q2_1, 2, true },
    };
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        if (spec[i].t != t) continue;
        const double levels = (double)((1 << spec[i].bits) - 1), half = (double)(1 << (spec[i].bits - 1));
        return spec[i].has_min ? range2 / (12 * levels * levels) : amax2 / (12 * half * half);
    }
    return -1.0;
}

#define NMSE_SAFETY 1.25

TEST(formats_gaussian_nmse_within_step_bound) {
    enum { COLS = 128 };
    const int rows = test_sanitized() ? 32 : 256;
    kvq_type types[KVQ_TYPE_COUNT];
    const int nt = cache_types(types);
    float *x = malloc(sizeof(float) * COLS * (size_t)rows), *y = malloc(sizeof(float) * COLS);
    uint8_t *blk = malloc(kvq_row_bytes(KVQ_TYPE_F32, COLS));
    CHECK(x && y && blk, "out of memory");
    test_rng rng = { 42, 0, 0 };
    fill_gauss(&rng, x, (int64_t)COLS * rows);
    char bad[256] = "";
    for (int ti = 0; ti < nt && !bad[0]; ti++) {
        double err = 0, sig = 0;
        for (int r = 0; r < rows; r++) {
            const float *xr = x + (size_t)r * COLS;
            kvq_quantize_row(types[ti], xr, blk, COLS);
            kvq_dequantize_row(types[ti], blk, y, COLS);
            for (int c = 0; c < COLS; c++) {
                err += ((double)y[c] - xr[c]) * ((double)y[c] - xr[c]);
                sig += (double)xr[c] * xr[c];
            }
        }
        const double nmse = err / sig, bound = NMSE_SAFETY * predicted_nmse(types[ti]);
        if (getenv("KVQ_TEST_VERBOSE"))
            printf("  %-7s nmse %.4g predicted %.4g ratio %.3f\n", kvq_type_name(types[ti]), nmse,
                   predicted_nmse(types[ti]), nmse / predicted_nmse(types[ti]));
        if (!(nmse <= bound))
            snprintf(bad, sizeof bad, "%s: NMSE %.4g above bound %.4g", kvq_type_name(types[ti]), nmse, bound);
    }
    free(x); free(y); free(blk);
    CHECK(!bad[0], "%s", bad);
}

/* ------------------------------------------------------ odd row lengths */

enum { GUARD = 64 };

/* The padded last block must behave as if the row were zero-extended, and
 * no row function may touch memory past kvq_row_bytes (guard bytes here;
 * ASan in `make sanitize` sees the exact-size input and output buffers). */
static void check_odd_length(test_ctx *t, kvq_type ty, int64_t n) {
    const kvq_type_traits *tr = kvq_type_get(ty);
    const size_t rb = kvq_row_bytes(ty, n);
    const int64_t padded = (n + tr->block_size - 1) / tr->block_size * tr->block_size;
    CHECK(rb == (size_t)(padded / tr->block_size * tr->block_bytes), "%s n=%lld: row bytes %zu",
          tr->name, (long long)n, rb);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    float *xpad = calloc((size_t)padded, sizeof(float)), *ypad = malloc(sizeof(float) * (size_t)padded);
    uint8_t *row = malloc(rb + GUARD), *ref = malloc(rb);
    if (!x || !y || !xpad || !ypad || !row || !ref) {
        free(x); free(y); free(xpad); free(ypad); free(row); free(ref);
        CHECK(0, "out of memory");
    }
    test_rng rng = { (uint64_t)n * 977 + (uint64_t)ty, 0, 0 };
    fill_gauss(&rng, x, n);
    memcpy(xpad, x, sizeof(float) * (size_t)n);
    memset(row, 0xa5, rb + GUARD);
    kvq_quantize_row(ty, x, row, n);
    tr->quantize(xpad, ref, padded);                   /* the zero-extended row */
    int guard_ok = 1;
    for (int g = 0; g < GUARD; g++) guard_ok &= row[rb + g] == 0xa5;
    const int same_bytes = memcmp(row, ref, rb) == 0;

    /* the readers get an exact-size copy, so ASan sees any read past it */
    uint8_t *exact = malloc(rb);
    if (!exact) { free(x); free(y); free(xpad); free(ypad); free(row); free(ref); CHECK(0, "out of memory"); }
    memcpy(exact, row, rb);
    kvq_dequantize_row(ty, exact, y, n);
    tr->dequantize(ref, ypad, padded);
    const int same_values = memcmp(y, ypad, sizeof(float) * (size_t)n) == 0;

    double want = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) { want += (double)ypad[i] * x[i]; scale += fabs((double)ypad[i] * x[i]); }
    const double dot = kvq_dot_row(ty, exact, x, n);
    const int dot_ok = fabs(dot - want) <= 1e-5 * scale + 1e-30;

    const float w = 0.75f;
    for (int64_t i = 0; i < n; i++) y[i] = 1.0f;
    kvq_axpy_row(ty, w, exact, y, n);
    int axpy_ok = 1;
    for (int64_t i = 0; i < n; i++)
        axpy_ok &= fabs((double)y[i] - (1.0 + (double)w * ypad[i])) <= 1e-6 * (1.0 + fabs((double)ypad[i]));
    for (int g = 0; g < GUARD; g++) guard_ok &= row[rb + g] == 0xa5;

    free(x); free(y); free(xpad); free(ypad); free(row); free(ref); free(exact);
    CHECK(guard_ok, "%s n=%lld: wrote past kvq_row_bytes", tr->name, (long long)n);
    CHECK(same_bytes, "%s n=%lld: padded block differs from the zero-extended row", tr->name, (long long)n);
    CHECK(same_values, "%s n=%lld: dequantize_row differs from the block kernel", tr->name, (long long)n);
    CHECK(dot_ok, "%s n=%lld: dot %.9g want %.9g", tr->name, (long long)n, dot, want);
    CHECK(axpy_ok, "%s n=%lld: axpy differs", tr->name, (long long)n);
}

TEST(formats_odd_row_lengths) {
    static const int64_t lengths[] = { 1, 31, 33, 100, 129 };
    kvq_type types[KVQ_TYPE_COUNT];
    const int nt = cache_types(types);
    for (int ti = 0; ti < nt; ti++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            /* rows with their own layout (TurboQuant: 64/128-blocks, its
             * kernels pad) are checked in test_turbo.c and the cache tests */
            if (kvq_type_get(types[ti])->row_bytes) continue;
            check_odd_length(t, types[ti], lengths[li]);
            if (t->result != TEST_PASS) return;
        }
}

/* ------------------------------------------------------ non-finite input */

/*
 * docs/formats.md §4: plain types store NaN / +-inf as themselves; a block
 * type stores a block holding any of them "poisoned" (every fp16 field NaN,
 * codes 0), so the whole block decodes to NaN, while the other blocks of
 * the row are exactly what they would be without it.
 */
TEST(formats_nonfinite_input) {
    enum { N = 96 };                          /* 3 blocks: NaN, finite, inf */
    static const float bad_values[] = { NAN, INFINITY, -INFINITY };
    kvq_type types[KVQ_TYPE_COUNT];
    const int nt = cache_types(types);
    test_rng rng = { 7, 0, 0 };
    float x[N], y[N];
    for (int ti = 0; ti < nt; ti++) {
        const kvq_type ty = types[ti];
        const kvq_type_traits *tr = kvq_type_get(ty);
        if (tr->row_bytes) continue;   /* TurboQuant: a non-finite value makes its block's norm NaN/Inf (test_turbo.c) */
        for (size_t bi = 0; bi < sizeof bad_values / sizeof bad_values[0]; bi++) {
            fill_gauss(&rng, x, N);
            x[5] = NAN;
            x[64 + 17] = bad_values[bi];
            uint8_t row[N * 4], alone[4 * 32];
            kvq_quantize_row(ty, x, row, N);
            kvq_dequantize_row(ty, row, y, N);
            if (!tr->is_block_quant) {
                CHECK(isnan(y[5]), "%s: NaN not kept", tr->name);
                CHECK(isnan(bad_values[bi]) ? isnan(y[81]) : y[81] == bad_values[bi], "%s: %g not kept",
                      tr->name, bad_values[bi]);
                continue;
            }
            const size_t bb = (size_t)tr->block_bytes;
            for (int j = 0; j < 32; j++) {
                CHECK(isnan(y[j]), "%s: NaN block decodes [%d] to %g", tr->name, j, y[j]);
                CHECK(isnan(y[64 + j]), "%s: %g block decodes [%d] to %g", tr->name, bad_values[bi], j, y[64 + j]);
            }
            kvq_quantize_row(ty, x + 32, alone, 32);
            CHECK(memcmp(alone, row + bb, bb) == 0, "%s: a finite block changed next to a non-finite one", tr->name);
            float ones[N];
            for (int j = 0; j < N; j++) ones[j] = 1.0f;
            CHECK(isnan(kvq_dot_row(ty, row, ones, N)), "%s: dot over a poisoned block is finite", tr->name);
        }
    }
}

/* ------------------------------------------------------ iq4_nl optimality */

/* Squared error of a block for a stored scale d with the best index per
 * value (exhaustive over the 16 entries), in double. */
static double iq4_sse_for_scale(const float *x, double d) {
    static const int8_t book[16] = { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };
    double sse = 0;
    for (int j = 0; j < 32; j++) {
        double best = INFINITY;
        for (int k = 0; k < 16; k++) {
            double e = x[j] - d * book[k];
            if (e * e < best) best = e * e;
        }
        sse += best;
    }
    return sse;
}

/* The exact encoder's error equals the minimum over every finite fp16
 * scale of either sign (brute force over all 2 x 31743 of them, plus d = 0). */
TEST(formats_iq4_nl_exact_scale_is_optimal) {
    const int blocks = test_sanitized() ? 3 : 12;
    test_rng rng = { 99, 0, 0 };
    for (int b = 0; b < blocks; b++) {
        float x[32], y[32];
        const double scale = b % 3 == 0 ? 1.0 : b % 3 == 1 ? 1e-3 : 300.0;
        for (int j = 0; j < 32; j++) x[j] = (float)(scale * test_rng_gauss(&rng));
        if (b % 4 == 1) x[b % 32] *= 10.0f;                          /* an outlier */
        if (b % 4 == 2) for (int j = 0; j < 32; j++) x[j] = fabsf(x[j]); /* one-signed */
        uint8_t blk[18];
        kvq_iq4_nl_quantize_exact(x, blk, 32);
        kvq_dequantize_row(KVQ_TYPE_IQ4_NL, blk, y, 32);
        double mine = 0;
        for (int j = 0; j < 32; j++) mine += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
        double best = iq4_sse_for_scale(x, 0.0);
        for (uint32_t h = 1; h < 0x7c00u; h++) {
            const double d = kvq_fp16_to_fp32((uint16_t)h);
            best = fmin(best, fmin(iq4_sse_for_scale(x, d), iq4_sse_for_scale(x, -d)));
        }
        CHECK(mine <= best * (1 + 1e-6) + 1e-300, "block %d: encoder SSE %.9g, best fp16 scale gives %.9g", b, mine, best);
    }
}

/* Squared error of a block as stored by `encode`, decoded by the format. */
static double iq4_stored_sse(const float *x, void (*encode)(const float *, void *, int64_t)) {
    uint8_t blk[18];
    float y[32];
    encode(x, blk, 32);
    kvq_dequantize_row(KVQ_TYPE_IQ4_NL, blk, y, 32);
    double sse = 0;
    for (int j = 0; j < 32; j++) sse += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
    return sse;
}
static void iq4_encode_active(const float *x, void *dst, int64_t n) { kvq_quantize_row(KVQ_TYPE_IQ4_NL, x, dst, n); }

/* The cache's encoder (the candidate search, at the active SIMD level):
 * never worse than the reference's rule d = fp16(m / -127) with nearest
 * indices, never better than the exact optimum, and on average within
 * 0.2 % of it on Gaussian, outlier, Laplace and uniform blocks, the
 * optimum itself on most (docs/formats.md has the figures). */
TEST(formats_iq4_nl_search_near_optimal) {
    const int blocks = test_sanitized() ? 60 : 600;
    static const char *const dist[4] = { "gauss", "outlier", "laplace", "uniform" };
    test_rng rng = { 2024, 0, 0 };
    for (int k = 0; k < 4; k++) {
        double ratio_sum = 0, worst = 1;
        int at_optimum = 0, beats_ref = 1;
        for (int b = 0; b < blocks; b++) {
            float x[32];
            for (int j = 0; j < 32; j++) {
                const double g = test_rng_gauss(&rng), u = test_rng_uniform(&rng);
                x[j] = (float)(k == 0 ? g : k == 1 ? (j == b % 32 ? 8 * g : g)
                               : k == 2 ? (u < 0.5 ? -1 : 1) * log(1.0 - test_rng_uniform(&rng)) : 2 * u - 1);
            }
            float vmax = 0.0f;
            for (int j = 0; j < 32; j++) if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
            const double ref = iq4_sse_for_scale(x, kvq_fp16_to_fp32(kvq_fp32_to_fp16(vmax / -127.0f)));
            const double mine = iq4_stored_sse(x, iq4_encode_active);
            const double best = iq4_stored_sse(x, kvq_iq4_nl_quantize_exact);
            CHECK(mine >= best * (1 - 1e-6), "%s block %d: search %.9g below the exact optimum %.9g", dist[k], b, mine, best);
            if (mine > ref * (1 + 1e-6)) beats_ref = 0;
            ratio_sum += mine / best;
            worst = fmax(worst, mine / best);
            at_optimum += mine <= best * (1 + 1e-9);
        }
        const double mean = ratio_sum / blocks;
        CHECK(beats_ref, "%s: the search did worse than the reference rule on a block", dist[k]);
        CHECK(mean <= 1.002, "%s: mean error %.5f x the optimum's (want <= 1.002; worst %.3f)", dist[k], mean, worst);
        CHECK(at_optimum >= blocks * 8 / 10, "%s: the optimum on %d of %d blocks (want >= 80 %%)", dist[k], at_optimum, blocks);
    }
}
