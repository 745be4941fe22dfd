/* test_kvarn_lanes.c - KVarN's normalisation on lanes (kvarn_sigma.inc at
 * the scalar, AVX2 and AVX-512 widths this CPU runs) against the scalar
 * reference: the same scales and imbalance, and the same record bytes,
 * for both orientations, widths 64 and 128, every bit width, 0/1/16
 * iterations, on planted, plain, degenerate and non-finite tiles. */
#include "test.h"
#include "kvarn.h"

#include <string.h>

enum { T = KVQ_KVARN_TILE };

/* The kernel levels this CPU runs. */
static int levels(const kvq_kvarn_kernels **out) {
    const char *names[] = { "scalar", "avx2", "avx512" };
    int n = 0;
    for (int i = 0; i < 3; i++)
        if ((out[n] = kvq_kvarn_kernels_level(names[i]))) n++;
    return n;
}

/* kind 0: per-token and per-channel scales log-uniform in [1e-2, 1e2];
 * 1: unit Gaussians with one outlier channel; 2: constant rows and columns
 * of zeros (sigma 0, clamped); 3: kind 1 with one inf and one NaN. */
static void make_tile(float *x, int width, int kind, uint64_t seed) {
    test_rng r = { seed, 0, 0 };
    float tok[T], ch[128];
    for (int t = 0; t < T; t++) tok[t] = kind == 0 ? (float)pow(10.0, 4.0 * test_rng_uniform(&r) - 2.0) : 1.0f;
    for (int c = 0; c < width; c++) ch[c] = kind == 0 ? (float)pow(10.0, 4.0 * test_rng_uniform(&r) - 2.0) : 1.0f;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < width; c++) {
            float v = (float)test_rng_gauss(&r) * tok[t] * ch[c] * (c == 5 ? 9.0f : 1.0f);
            if (kind == 2) v = t % 7 == 3 ? 0.0f : c % 5 == 1 ? 0.0f : v;
            x[t * width + c] = v;
        }
    if (kind == 3) { x[17 * width + 3] = INFINITY; x[90 * width + 1] = NAN; }
}

TEST(kvarn_lane_normalisation_matches_reference) {
    static float A[T * 128], AT[T * 128], work[T * 128 * 2];
    float r_ref[128], c_ref[128], r_new[128], c_new[128];
    const kvq_kvarn_kernels *lv[3];
    const int nl = levels(lv);
    const int shapes[][2] = { { 128, 128 }, { 64, 128 }, { 128, 64 } };
    const int iters[] = { 0, 1, 16 };
    for (size_t si = 0; si < 3; si++)
        for (int kind = 0; kind < 4; kind++)
            for (size_t ii = 0; ii < 3; ii++) {
                const int rows = shapes[si][0], cols = shapes[si][1];
                make_tile(A, cols, kind, 100 + si * 10 + (uint64_t)kind);
                for (int r = 0; r < rows; r++)      /* the transpose given or made inside */
                    for (int c = 0; c < cols; c++) AT[c * rows + r] = A[r * cols + c];
                const double ref = kvq_kvarn_normalise(A, rows, cols, iters[ii], r_ref, c_ref, NULL);
                for (int l = 0; l < 2 * nl; l++) {      /* every level, transpose made and given */
                    CHECK(kvq_kvarn_normalise_work_floats(rows, cols) <= sizeof work / sizeof *work, "work size");
                    const double got = kvq_kvarn_normalise_lanes(A, l % 2 ? AT : NULL, rows, cols, iters[ii], r_new,
                                                                 c_new, work, lv[l / 2]);
                    CHECK(memcmp(&got, &ref, sizeof got) == 0 || (isnan(got) && isnan(ref)),
                          "%s %dx%d kind %d iters %d: imbalance %.17g vs reference %.17g", lv[l / 2]->name, rows, cols,
                          kind, iters[ii], got, ref);
                    CHECK(!memcmp(r_new, r_ref, (size_t)rows * sizeof *r_new) &&
                          !memcmp(c_new, c_ref, (size_t)cols * sizeof *c_new),
                          "%s %dx%d kind %d iters %d: scales differ from the reference", lv[l / 2]->name, rows, cols,
                          kind, iters[ii]);
                }
            }
}

TEST(kvarn_lane_records_match_reference) {
    static float x[T * 128];
    static uint8_t want[2048 * 8 + 768], got[2048 * 8 + 768];
    const kvq_kvarn_kernels *lv[3];
    const int nl = levels(lv);
    const int bits[] = { 2, 3, 4, 5, 6, 8 };
    for (int width = 64; width <= 128; width += 64)
        for (int side = 0; side < 2; side++)
            for (int bi = 0; bi < 6; bi++) {
                const kvq_kvarn_shape s = { width, bits[bi], side == 0 };
                const size_t bytes = kvq_kvarn_record_bytes(s);
                const int kind = bi % 4;
                make_tile(x, width, kind, 7 + (uint64_t)bi);
                CHECK(kvq_kvarn_quantize_ref(s, x, KVQ_KVARN_ITERS, want, NULL) == KVQ_OK, "reference");
                for (int l = 0; l < nl; l++) {
                    memset(got, 0xa5, bytes);
                    CHECK(kvq_kvarn_quantize_with(s, x, KVQ_KVARN_ITERS, got, NULL, lv[l]) == KVQ_OK, "quantize");
                    CHECK(!memcmp(got, want, bytes), "%s width %d %s %d bits (tile kind %d): record differs",
                          lv[l]->name, width, side ? "V" : "K", bits[bi], kind);
                }
                memset(got, 0xa5, bytes);
                CHECK(kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, got, NULL) == KVQ_OK && !memcmp(got, want, bytes),
                      "default level: record differs");
            }
}

/* One sweep's sigmas at every level this CPU runs against the scalar
 * width, bit for bit, on both sides of the row count up to which the
 * first pass's products are kept for the second (128: a tile's tokens, a
 * head of up to 128 channels; beyond, as for heads of 256 and 512, they
 * are computed again). */
TEST(kvarn_lane_sigmas_kept_and_recomputed) {
    static float M[300 * 64];
    double mul[300], k[64], want[64], got[64];
    const kvq_kvarn_kernels *lv[3];
    const int nl = levels(lv);
    test_rng r = { 17, 0, 0 };
    for (int i = 0; i < 300 * 64; i++) M[i] = (float)test_rng_gauss(&r) * (i % 64 == 9 ? 20.0f : 1.0f);
    for (int i = 0; i < 300; i++) mul[i] = 0.5 + test_rng_uniform(&r);
    for (int j = 0; j < 64; j++) k[j] = 0.25 + test_rng_uniform(&r);
    static const int rows[] = { 2, 127, 128, 129, 300 };
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        lv[0]->sigmas(M, rows[ri], 64, mul, k, want);
        CHECK(want[9] > 3 * want[10] && want[10] > 0.1, "%d rows: sigmas %g %g not of the data", rows[ri], want[9],
              want[10]);
        for (int l = 1; l < nl; l++) {
            lv[l]->sigmas(M, rows[ri], 64, mul, k, got);
            CHECK(!memcmp(got, want, sizeof want), "%s, %d rows: sigmas differ from the scalar width's", lv[l]->name,
                  rows[ri]);
        }
    }
}
