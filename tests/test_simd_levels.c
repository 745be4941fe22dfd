/* test_simd_levels.c - every SIMD level this CPU has, not only the widest
 * one the table picks: the K-quant kernels of each level against the
 * scalar reference, and each gemm tile kernel against double sums. */
#include "test.h"
#include "kvq.h"
#include "matmul.h"
#include "simd.h"
#include "kquants_xperm.h"

#include <string.h>

typedef struct level {
    const char *name;
    kvq_gemm_tile (*tile)(void);
    bool available;
} level;

static int levels(level out[3]) {
    const kvq_cpu *cpu = kvq_cpu_features();
    int n = 0;
    out[n++] = (level){ "scalar", kvq_gemm_tile_scalar, true };
#if defined(__x86_64__)
    out[n++] = (level){ "avx2", kvq_gemm_tile_avx2, cpu->avx2 };
    out[n++] = (level){ "avx512", kvq_gemm_tile_avx512, cpu->avx512 };
#else
    (void)cpu;
#endif
    return n;
}

/* n_blocks random super-blocks with finite, modest fp16 scales. */
static void random_kquant_row(kvq_type ty, test_rng *rng, uint8_t *dst, int n_blocks) {
    const int bytes = kvq_type_get_scalar(ty)->block_bytes;
    for (int i = 0; i < n_blocks * bytes; i++) dst[i] = (uint8_t)test_rng_u64(rng);
    for (int b = 0; b < n_blocks; b++) {
        uint8_t *blk = dst + b * bytes;
        uint16_t d = kvq_fp32_to_fp16((float)(0.005 + 0.02 * test_rng_uniform(rng)));
        uint16_t m = kvq_fp32_to_fp16((float)(0.01 * test_rng_uniform(rng)));
        if (ty == KVQ_TYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
        }
    }
}

TEST(kquant_simd_levels_match_scalar) {
    level lv[3];
    const int nl = levels(lv);
    const kvq_type types[] = { KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };
    enum { NB = 4, N = NB * 256 };
    static uint8_t row[NB * 210];
    static float x[N], ref[N], got[N], yref[N], ygot[N];
    test_rng rng = { 9, 0, 0 };
    int tested = 0;
    for (int l = 1; l < nl; l++) {
        if (!lv[l].available) continue;
        kvq_type_traits table[KVQ_TYPE_COUNT];
        CHECK(kvq_simd_table(lv[l].name, table), "no %s table", lv[l].name);
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            const kvq_type ty = types[i];
            const kvq_type_traits *sc = kvq_type_get_scalar(ty), *simd = &table[ty];
            CHECK(simd->dot != sc->dot, "%s: %s kernels not installed", lv[l].name, sc->name);
            for (int rep = 0; rep < 20; rep++) {
                random_kquant_row(ty, &rng, row, NB);
                for (int k = 0; k < N; k++) x[k] = (float)test_rng_gauss(&rng);
                sc->dequantize(row, ref, N);
                simd->dequantize(row, got, N);
                for (int k = 0; k < N; k++)
                    CHECK(got[k] == ref[k], "%s %s dequantize value %d: %g vs scalar %g", lv[l].name,
                          sc->name, k, got[k], ref[k]);
                double want = 0, mag = 0;
                for (int k = 0; k < N; k++) { want += (double)ref[k] * x[k]; mag += fabs((double)ref[k] * x[k]); }
                float dot = simd->dot(row, x, N);
                CHECK(fabs(dot - want) <= 1e-5 * mag, "%s %s dot %g vs %g", lv[l].name, sc->name, dot, want);
                for (int k = 0; k < N; k++) yref[k] = ygot[k] = x[k];
                sc->axpy(0.7f, row, yref, N);
                simd->axpy(0.7f, row, ygot, N);
                for (int k = 0; k < N; k++)
                    CHECK(fabsf(ygot[k] - yref[k]) <= 1e-6f * (fabsf(yref[k]) + 1.0f),
                          "%s %s axpy value %d: %g vs %g", lv[l].name, sc->name, k, ygot[k], yref[k]);
            }
            tested++;
        }
    }
    if (!tested) SKIP("no SIMD level on this CPU");
}

/* The decode dots on laid-out activations (kquants_xperm.h), each level
 * this CPU has, against double sums of the scalar dequantised rows: the
 * layout, the code-to-float step and the x-sum corrections all show in
 * the dot.  x has a mean (activations do), so the corrections matter.
 * Rows are dotted in one call of 5 (pairs and an odd one out), then one
 * by one at other offsets: a row's dot must have the same bits either way. */
TEST(kquant_xperm_dots_match_scalar) {
    const kvq_type types[] = { KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };
    enum { NB = 4, N = NB * 256, ROWS = 5 };
    static uint8_t rows[ROWS][NB * 210];
    static float x[N], xp[N + N / 16], ref[N];
    float y[ROWS], y1[ROWS];
    test_rng rng = { 21, 0, 0 };
    CHECK(kvq_kq_xperm_floats(N) == N + N / 16, "xperm floats %zu", kvq_kq_xperm_floats(N));
    CHECK(!kvq_kq_xperm(KVQ_TYPE_F16, x, N, xp) && !kvq_kq_xperm(KVQ_TYPE_Q8_0, x, N, xp),
          "xperm accepted a type it has no layout for");
    CHECK(!kvq_kq_xperm(KVQ_TYPE_Q4_K, x, 255, xp), "xperm accepted a partial super-block");
    CHECK(!kvq_kq_xrows_level(KVQ_TYPE_Q4_K, KVQ_ISA_SCALAR), "a scalar xperm kernel replaces the reference");
    int tested = 0;
    for (int isa = KVQ_ISA_AVX2; isa < KVQ_ISA_COUNT; isa++)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            const kvq_type ty = types[i];
            const kvq_kq_xrows_fn dot = kvq_kq_xrows_level(ty, (kvq_isa)isa);
            if (!dot) continue;
            const char *lv = kvq_isa_name((kvq_isa)isa), *tn = kvq_type_name(ty);
            const size_t rb = (size_t)NB * (size_t)kvq_type_get_scalar(ty)->block_bytes;
            for (int rep = 0; rep < 12; rep++) {
                for (int r = 0; r < ROWS; r++) random_kquant_row(ty, &rng, rows[r], NB);
                const double mean = rep % 2 ? 0.0 : 0.5 * test_rng_gauss(&rng);
                for (int k = 0; k < N; k++) x[k] = (float)(mean + test_rng_gauss(&rng));
                CHECK(kvq_kq_xperm(ty, x, N, xp), "xperm refused %s", tn);
                dot(rows, sizeof rows[0], ROWS, xp, N, y);
                for (int r = 0; r < ROWS; r++) {
                    kvq_type_get_scalar(ty)->dequantize(rows[r], ref, N);
                    double want = 0, mag = 0;
                    for (int k = 0; k < N; k++) { want += (double)ref[k] * x[k]; mag += fabs((double)ref[k] * x[k]); }
                    CHECK(fabs(y[r] - want) <= 1e-5 * mag, "%s %s xperm row %d: %.9g vs %.9g (mag %g)", lv, tn, r,
                          y[r], want, mag);
                    dot(rows[r], rb, 1, xp, N, &y1[r]);
                    CHECK(memcmp(&y1[r], &y[r], sizeof y[r]) == 0, "%s %s row %d alone %.9g, in a pair %.9g", lv,
                          tn, r, y1[r], y[r]);
                }
                dot(rows[1], sizeof rows[0], 2, xp, N, y1);   /* rows 1, 2 as a pair, not 0-1 / 2-3 */
                CHECK(!memcmp(&y1[0], &y[1], sizeof y[1]) && !memcmp(&y1[1], &y[2], sizeof y[2]),
                      "%s %s rows 1-2 paired differently changed bits", lv, tn);
            }
            x[77] = NAN;
            CHECK(kvq_kq_xperm(ty, x, N, xp), "xperm refused %s", tn);
            dot(rows, sizeof rows[0], 1, xp, N, y);
            CHECK(isnan(y[0]), "%s %s: a NaN in x gave %g", lv, tn, y[0]);
            tested++;
        }
    if (!tested) SKIP("no SIMD level on this CPU");
}

/* Each tile kernel, full and padded tiles, k with and without a tail. */
TEST(gemm_tiles_all_levels) {
    level lv[3];
    const int nl = levels(lv);
    const int64_t ks[] = { 1, 7, 16, 33, 100 };
    test_rng rng = { 3, 0, 0 };
    static float wbuf[8][100], xbuf[8][100];
    for (int r = 0; r < 8; r++)
        for (int k = 0; k < 100; k++) {
            wbuf[r][k] = (float)test_rng_gauss(&rng);
            xbuf[r][k] = (float)test_rng_gauss(&rng);
        }
    for (int l = 0; l < nl; l++) {
        if (!lv[l].available) continue;
        const kvq_gemm_tile tile = lv[l].tile();
        CHECK(tile.rows >= 1 && tile.rows <= 8 && tile.toks >= 1 && tile.toks <= 8,
              "%s tile %dx%d out of range", lv[l].name, tile.rows, tile.toks);
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const float *w[8], *x[8];
            float out[64];
            for (int r = 0; r < tile.rows; r++) w[r] = wbuf[(r * 3) % 8];
            for (int j = 0; j < tile.toks; j++) x[j] = xbuf[(j * 5 + 1) % 8];
            tile.fn(w, x, ks[ki], out);
            for (int j = 0; j < tile.toks; j++)
                for (int r = 0; r < tile.rows; r++) {
                    double s = 0, m = 0;
                    for (int64_t k = 0; k < ks[ki]; k++) {
                        s += (double)w[r][k] * x[j][k];
                        m += fabs((double)w[r][k] * x[j][k]);
                    }
                    CHECK(fabs(out[j * tile.rows + r] - s) <= 1e-5 * m + 1e-30,
                          "%s tile k=%lld (row %d, tok %d): %g vs %g", lv[l].name, (long long)ks[ki], r, j,
                          out[j * tile.rows + r], s);
                }
        }
    }
}
