/* test_kvarn.c - KVarN tiles: normalisation, record layout, reconstruction
 * against a plain implementation of docs/spec/formats.md §3, fused attention helpers. */
#include "test.h"
#include "kvarn.h"

#include <string.h>

enum { T = KVQ_KVARN_TILE };

/* A tile of 128 tokens x width with planted per-token and per-channel
 * scales, log-uniform in [1e-2, 1e2] (the case normalisation is for). */
static void planted_tile(float *x, int width, uint64_t seed, bool planted) {
    test_rng r = { seed, 0, 0 };
    float tok_scale[T], ch_scale[128];
    for (int t = 0; t < T; t++) tok_scale[t] = planted ? (float)pow(10.0, 4.0 * test_rng_uniform(&r) - 2.0) : 1.0f;
    for (int c = 0; c < width; c++) ch_scale[c] = planted ? (float)pow(10.0, 4.0 * test_rng_uniform(&r) - 2.0) : 1.0f;
    for (int t = 0; t < T; t++)
        for (int c = 0; c < width; c++)
            x[t * width + c] = (float)test_rng_gauss(&r) * tok_scale[t] * ch_scale[c];
}

static double nmse(const float *x, const float *y, int n) {
    double e = 0, s = 0;
    for (int i = 0; i < n; i++) { e += (double)(x[i] - y[i]) * (x[i] - y[i]); s += (double)x[i] * x[i]; }
    return s > 0 ? e / s : e;
}

TEST(kvarn_record_bytes) {
    const int bits[] = { 2, 3, 4, 5, 6, 8 };
    for (int i = 0; i < 6; i++) {
        kvq_kvarn_shape k = { 128, bits[i], true }, v = { 128, bits[i], false };
        CHECK(kvq_kvarn_record_bytes(k) == (size_t)(2048 * bits[i] + 768), "K b=%d: %zu", bits[i], kvq_kvarn_record_bytes(k));
        CHECK(kvq_kvarn_record_bytes(v) == (size_t)(2048 * bits[i] + 768), "V b=%d", bits[i]);
        /* 64-wide: K has 64 channel rows + 128 token columns, V the reverse */
        kvq_kvarn_shape k64 = { 64, bits[i], true }, v64 = { 64, bits[i], false };
        CHECK(kvq_kvarn_record_bytes(k64) == (size_t)(1024 * bits[i] + 2 * (2 * 64 + 128)), "K64 b=%d", bits[i]);
        CHECK(kvq_kvarn_record_bytes(v64) == (size_t)(1024 * bits[i] + 2 * (2 * 128 + 64)), "V64 b=%d", bits[i]);
    }
    CHECK(!kvq_kvarn_bits_valid(7) && !kvq_kvarn_bits_valid(1) && kvq_kvarn_bits_valid(3), "bit widths");
}

/* The chosen scales are the best of the iterations: never worse than the
 * unnormalised tile, equal to the minimum of the trace, and reproduced by
 * recomputing the imbalance from the returned scales.  On planted tiles
 * they remove most of the imbalance. */
TEST(kvarn_normalisation_best_of) {
    static float x[T * 128], A[T * 128];
    float s_row[128], s_col[128];
    double trace[KVQ_KVARN_ITERS + 1];
    for (int seed = 1; seed <= 4; seed++) {
        planted_tile(x, 128, (uint64_t)seed, true);
        for (int tk = 0; tk < T; tk++)                 /* K orientation: channels x tokens */
            for (int c = 0; c < 128; c++) A[c * T + tk] = x[tk * 128 + c];
        double chosen = kvq_kvarn_normalise(A, 128, T, KVQ_KVARN_ITERS, s_row, s_col, trace);
        double minv = trace[0];
        for (int i = 1; i <= KVQ_KVARN_ITERS; i++) minv = fmin(minv, trace[i]);
        CHECK(chosen <= trace[0], "seed %d: chosen %.3g worse than start %.3g", seed, chosen, trace[0]);
        CHECK(chosen == minv, "seed %d: chosen %.6g is not the best iteration %.6g", seed, chosen, minv);
        double again = kvq_kvarn_imbalance(A, 128, T, s_row, s_col);
        CHECK(fabs(again - chosen) <= 1e-3 * chosen, "seed %d: scales give %.6g, reported %.6g", seed, again, chosen);
        CHECK(chosen < trace[0] / 20, "seed %d: imbalance only %.3g -> %.3g", seed, trace[0], chosen);
    }
}

/* Plain per-row min/max RTN of the oriented tile at b bits, no normalisation. */
static void rtn_rows(const float *x, int width, bool is_key, int bits, float *y) {
    const int rows = is_key ? width : T, cols = is_key ? T : width, qmax = (1 << bits) - 1;
    for (int r = 0; r < rows; r++) {
        float lo = INFINITY, hi = -INFINITY;
        for (int c = 0; c < cols; c++) {
            float v = is_key ? x[c * width + r] : x[r * width + c];
            lo = fminf(lo, v); hi = fmaxf(hi, v);
        }
        float d = fmaxf((hi - lo) / qmax, 1e-10f);
        for (int c = 0; c < cols; c++) {
            int idx = is_key ? c * width + r : r * width + c;
            float q = floorf((x[idx] - lo) / d + 0.5f);
            y[idx] = q * d + lo;
        }
    }
}

TEST(kvarn_beats_plain_rtn_3x) {
    static float x[T * 128], y[T * 128], z[T * 128];
    static uint8_t rec[2048 * 8 + 768];
    for (int side = 0; side < 2; side++)
        for (int bits = 2; bits <= 4; bits++) {
            kvq_kvarn_shape s = { 128, bits, side == 0 };
            double e_kv = 0, e_rtn = 0;
            for (int seed = 10; seed < 13; seed++) {
                planted_tile(x, 128, (uint64_t)seed, true);
                CHECK(kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, rec, NULL) == KVQ_OK, "quantize");
                kvq_kvarn_dequantize(s, rec, y);
                rtn_rows(x, 128, s.is_key, bits, z);
                e_kv += nmse(x, y, T * 128);
                e_rtn += nmse(x, z, T * 128);
            }
            CHECK(e_kv * 3 <= e_rtn, "%s b=%d: KVarN NMSE %.4g not 3x below RTN %.4g",
                  s.is_key ? "K" : "V", bits, e_kv / 3, e_rtn / 3);
        }
}

/* ---- an independent, plain implementation of docs/spec/formats.md §3 ---- */
static double plain_sigma(const double *v, int n) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return sqrt(s / (n - 1));
}

static double plain_imbalance(int rows, int cols, double M[128][128]) {
    double col[128], row[128], cmax = 0, cmin = 1e300, rmax = 0, rmin = 1e300;
    for (int c = 0; c < cols; c++) {
        for (int r = 0; r < rows; r++) col[r] = M[r][c];
        double s = plain_sigma(col, rows);
        if (s > cmax) cmax = s;
        if (s < cmin) cmin = s;
    }
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) row[c] = M[r][c];
        double s = plain_sigma(row, cols);
        if (s > rmax) rmax = s;
        if (s < rmin) rmin = s;
    }
    return cmax / (cmin > 1e-8 ? cmin : 1e-8) + rmax / (rmin > 1e-8 ? rmin : 1e-8);
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* y: reconstruction; mag: |q S| + |Z| times O per value (the size of the
 * terms whose fp16 rounding bounds the difference). */
static void plain_kvarn(const float *x, int width, bool is_key, int bits, float *y, float *mag) {
    const int rows = is_key ? width : T, cols = is_key ? T : width, qmax = (1 << bits) - 1;
    static double A[128][128], M[128][128];
    double u[128] = {0}, w[128] = {0}, bu[128] = {0}, bw[128] = {0}, v[128];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) A[r][c] = M[r][c] = is_key ? x[c * width + r] : x[r * width + c];
    double best = plain_imbalance(rows, cols, M);
    for (int it = 0; it < KVQ_KVARN_ITERS; it++) {
        for (int c = 0; c < cols; c++) {
            for (int r = 0; r < rows; r++) v[r] = A[r][c] / (exp(w[r]) * exp(u[c]));
            u[c] = clampd(u[c] + log(clampd(plain_sigma(v, rows), 1e-3, 1e3)), -0.3, 10);
        }
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) v[c] = A[r][c] / (exp(w[r]) * exp(u[c]));
            w[r] = clampd(w[r] + log(clampd(plain_sigma(v, cols), 1e-3, 1e3)), -0.3, 10);
        }
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) M[r][c] = A[r][c] / (exp(w[r]) * exp(u[c]));
        double imb = plain_imbalance(rows, cols, M);
        if (imb < best) { best = imb; memcpy(bu, u, sizeof u); memcpy(bw, w, sizeof w); }
    }
    for (int r = 0; r < rows; r++) {
        double sr = exp(bw[r]), lo = 1e300, hi = -1e300;
        for (int c = 0; c < cols; c++) {
            double b = A[r][c] / (sr * exp(bu[c]));
            if (b < lo) lo = b;
            if (b > hi) hi = b;
        }
        double d = (hi - lo) / qmax > 1e-10 ? (hi - lo) / qmax : 1e-10;
        float S = kvq_fp16_to_fp32(kvq_fp32_to_fp16((float)(sr * d)));
        float Z = kvq_fp16_to_fp32(kvq_fp32_to_fp16((float)(sr * lo)));
        for (int c = 0; c < cols; c++) {
            double q = floor((A[r][c] / (sr * exp(bu[c])) - lo) / d + 0.5);
            q = clampd(q, 0, qmax);
            float O = kvq_fp16_to_fp32(kvq_fp32_to_fp16((float)exp(bu[c])));
            float val = ((float)q * S + Z) * O, m = (fabsf((float)q * S) + fabsf(Z)) * O;
            int idx = is_key ? c * width + r : r * width + c;
            y[idx] = val;
            mag[idx] = m;
        }
    }
}

/* kvq's reconstruction equals the plain one to the precision of the fp16
 * metadata.  The normalisation has a gauge freedom (all column scales x k,
 * row scales / k give the same tile), so once it has converged two correct
 * implementations may keep different, equally good iterations whose scales
 * round differently to fp16: values then agree to ~2^-10 relative, and a
 * code sitting exactly on a rounding boundary may move one step. */
TEST(kvarn_matches_plain_implementation) {
    static float x[T * 128], y[T * 128], z[T * 128], mag[T * 128];
    static uint8_t rec[2048 * 8 + 768];
    const int widths[] = { 128, 64 }, bits_list[] = { 2, 3, 4, 8 };
    for (int wi = 0; wi < 2; wi++)
        for (int side = 0; side < 2; side++)
            for (int bi = 0; bi < 4; bi++) {
                kvq_kvarn_shape s = { widths[wi], bits_list[bi], side == 0 };
                const int n = T * s.width;
                planted_tile(x, s.width, 77 + (uint64_t)bi, bi % 2 == 0);
                CHECK(kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, rec, NULL) == KVQ_OK, "quantize");
                kvq_kvarn_dequantize(s, rec, y);
                plain_kvarn(x, s.width, s.is_key, s.bits, z, mag);
                int off = 0;
                for (int i = 0; i < n; i++)
                    if (fabs((double)y[i] - z[i]) > 3e-3 * mag[i] + 1e-7) off++;
                double e_kvq = nmse(x, y, n), e_plain = nmse(x, z, n);
                CHECK(off <= n / 100, "w=%d %s b=%d: %d of %d values differ from the plain implementation",
                      s.width, s.is_key ? "K" : "V", s.bits, off, n);
                CHECK(fabs(e_kvq - e_plain) <= 0.02 * e_plain, "w=%d %s b=%d: NMSE %.5g vs plain %.5g",
                      s.width, s.is_key ? "K" : "V", s.bits, e_kvq, e_plain);
            }
}

TEST(kvarn_deterministic_bytes) {
    static float x[T * 128];
    static uint8_t a[2048 * 4 + 768], b[2048 * 4 + 768];
    planted_tile(x, 128, 5, true);
    kvq_kvarn_shape s = { 128, 4, false };
    memset(a, 0x11, sizeof a);
    memset(b, 0x22, sizeof b);
    kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, a, NULL);
    kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, b, NULL);
    CHECK(memcmp(a, b, kvq_kvarn_record_bytes(s)) == 0, "two encodings of one tile differ");
}

/* Fused helpers equal dequantise-then-compute, for partial tiles too. */
TEST(kvarn_fused_scores_and_accumulate) {
    static float x[T * 128], y[T * 128];
    static uint8_t rec[2048 * 8 + 768];
    const int bits_list[] = { 2, 3, 4, 5, 6, 8 };
    test_rng r = { 99, 0, 0 };
    for (int wi = 0; wi < 2; wi++)
        for (int bi = 0; bi < 6; bi++)
            for (int side = 0; side < 2; side++) {
                kvq_kvarn_shape s = { wi ? 64 : 128, bits_list[bi], side == 0 };
                planted_tile(x, s.width, 300 + (uint64_t)bi, true);
                kvq_kvarn_quantize(s, x, KVQ_KVARN_ITERS, rec, NULL);
                kvq_kvarn_dequantize(s, rec, y);
                const int n_tok = 100;
                float q[128], p[T], out[128] = {0}, ref_out[128] = {0}, sc[T] = {0};
                for (int c = 0; c < s.width; c++) q[c] = (float)test_rng_gauss(&r);
                for (int tk = 0; tk < T; tk++) p[tk] = tk < n_tok ? (float)test_rng_uniform(&r) : 0.0f;
                if (s.is_key) {
                    kvq_kvarn_scores(s, rec, q, 0.5f, n_tok, sc);
                    for (int tk = 0; tk < n_tok; tk++) {
                        double ref = 0, mag = 0;
                        for (int c = 0; c < s.width; c++) { ref += 0.5 * q[c] * y[tk * s.width + c]; mag += fabs(0.5 * q[c] * y[tk * s.width + c]); }
                        CHECK(fabs(sc[tk] - ref) <= 1e-4 * mag + 1e-6, "b=%d t=%d: score %.6g vs %.6g", s.bits, tk, sc[tk], ref);
                    }
                    CHECK(sc[n_tok] == 0.0f, "wrote past n_tok");
                } else {
                    kvq_kvarn_accumulate(s, rec, p, n_tok, out);
                    for (int tk = 0; tk < n_tok; tk++)
                        for (int c = 0; c < s.width; c++) ref_out[c] += p[tk] * y[tk * s.width + c];
                    for (int c = 0; c < s.width; c++) {
                        double mag = 0;
                        for (int tk = 0; tk < n_tok; tk++) mag += fabs(p[tk] * y[tk * s.width + c]);
                        CHECK(fabs(out[c] - ref_out[c]) <= 1e-4 * mag + 1e-6, "b=%d c=%d: %.6g vs %.6g", s.bits, c, out[c], ref_out[c]);
                    }
                }
            }
}
