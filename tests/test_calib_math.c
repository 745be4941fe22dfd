/* test_calib_math.c - the mathematics of the calibrated caches: Jacobi
 * eigendecomposition, matrix square roots, the fitted transforms, reverse
 * water-filling and the integer bit allocation (src/linalg.c,
 * src/calib_fit.c). */
#include "calib.h"
#include "linalg.h"
#include "turbo.h"
#include "test.h"

/* A = Q diag(ev) Q^T with a random orthogonal Q (Gram-Schmidt of
 * Gaussian vectors); q receives Q's columns as rows. */
static void random_spd(test_rng *r, int n, const double *ev, double *a, double *q) {
    for (int j = 0; j < n; j++) {
        double *v = q + (size_t)j * n;
        for (int i = 0; i < n; i++) v[i] = test_rng_gauss(r);
        for (int k = 0; k < j; k++) {
            double d = 0;
            for (int i = 0; i < n; i++) d += v[i] * q[(size_t)k * n + i];
            for (int i = 0; i < n; i++) v[i] -= d * q[(size_t)k * n + i];
        }
        double nn = 0;
        for (int i = 0; i < n; i++) nn += v[i] * v[i];
        for (int i = 0; i < n; i++) v[i] /= sqrt(nn);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            double s = 0;
            for (int j = 0; j < n; j++) s += q[(size_t)j * n + i] * ev[j] * q[(size_t)j * n + k];
            a[(size_t)i * n + k] = s;
        }
}

TEST(linalg_eig_recovers_known_spectrum) {
    test_rng r = { 11, 0, 0 };
    const int sizes[] = { 1, 2, 7, 64, 128 };
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const int n = sizes[si];
        double *a = malloc(sizeof(double) * n * n), *q = malloc(sizeof(double) * n * n);
        double *vecs = malloc(sizeof(double) * n * n), *ev = malloc(sizeof(double) * n), *got = malloc(sizeof(double) * n);
        for (int j = 0; j < n; j++) ev[j] = pow(10.0, -6.0 * j / (n > 1 ? n - 1 : 1)) * (j % 3 == 2 ? 1.0 : 2.0);
        /* descending reference order */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && ev[j] > ev[j - 1]; j--) { double x = ev[j]; ev[j] = ev[j - 1]; ev[j - 1] = x; }
        random_spd(&r, n, ev, a, q);
        kvq_error err;
        CHECK(kvq_eig_sym(a, n, got, vecs, &err) == KVQ_OK, "n=%d: %s", n, err.msg);
        double worst_ev = 0, worst_res = 0, worst_orth = 0;
        for (int j = 0; j < n; j++) {
            worst_ev = fmax(worst_ev, fabs(got[j] - ev[j]) / ev[0]);
            if (j) CHECK(got[j] <= got[j - 1], "n=%d: eigenvalues not descending at %d", n, j);
            for (int i = 0; i < n; i++) {          /* (A v_j)_i - ev_j v_j,i */
                double s = 0;
                for (int k = 0; k < n; k++) s += a[(size_t)i * n + k] * vecs[(size_t)j * n + k];
                worst_res = fmax(worst_res, fabs(s - got[j] * vecs[(size_t)j * n + i]));
            }
            for (int k = 0; k < n; k++) {
                double d = 0;
                for (int i = 0; i < n; i++) d += vecs[(size_t)j * n + i] * vecs[(size_t)k * n + i];
                worst_orth = fmax(worst_orth, fabs(d - (j == k)));
            }
        }
        CHECK(worst_ev < 1e-12 && worst_res < 1e-12 && worst_orth < 1e-12, "n=%d: eigenvalue %.2e residual %.2e orth %.2e",
              n, worst_ev, worst_res, worst_orth);
        free(a); free(q); free(vecs); free(ev); free(got);
    }
}

TEST(linalg_eig_refuses_bad_input) {
    double a[4] = { 1, NAN, NAN, 1 }, ev[2], v[4];
    kvq_error err;
    CHECK(kvq_eig_sym(a, 2, ev, v, &err) == KVQ_ERR_ARG && strstr(err.msg, "non-finite"), "NaN accepted: %s", err.msg);
    CHECK(kvq_eig_sym(a, 0, ev, v, &err) == KVQ_ERR_ARG, "n=0 accepted");
    CHECK(kvq_eig_sym(a, KVQ_LINALG_MAX_N + 1, ev, v, &err) == KVQ_ERR_ARG, "n too large accepted");
}

TEST(linalg_sym_sqrt_squares_back) {
    test_rng r = { 5, 0, 0 };
    enum { N = 24 };
    double ev[N], a[N * N], q[N * N], s[N * N], si[N * N], p[N * N], eye[N * N];
    for (int j = 0; j < N; j++) ev[j] = 5.0 / (1 + j);
    random_spd(&r, N, ev, a, q);
    kvq_error err;
    CHECK(kvq_sym_sqrt(a, N, 1e-12, s, si, &err) == KVQ_OK, "%s", err.msg);
    kvq_mat_mul(s, s, p, N);
    CHECK(kvq_mat_max_diff(p, a, N) < 1e-12, "S S != A: %.2e", kvq_mat_max_diff(p, a, N));
    for (int i = 0; i < N * N; i++) eye[i] = i % (N + 1) == 0;
    kvq_mat_mul(s, si, p, N);
    CHECK(kvq_mat_max_diff(p, eye, N) < 1e-12, "S S^-1 != I: %.2e", kvq_mat_max_diff(p, eye, N));
    /* a singular matrix: the floor keeps S^-1 finite and S S^-1 = I */
    ev[N - 1] = 0.0;
    random_spd(&r, N, ev, a, q);
    CHECK(kvq_sym_sqrt(a, N, 1e-9, s, si, &err) == KVQ_OK, "%s", err.msg);
    kvq_mat_mul(s, si, p, N);
    CHECK(kvq_mat_max_diff(p, eye, N) < 1e-6, "singular: S S^-1 != I: %.2e", kvq_mat_max_diff(p, eye, N));
}

/* The fitted transform whitens the data (T C T^T = I), inverts exactly,
 * and puts the metric on the diagonal (T^-T G T^-1 = diag(importance)). */
TEST(calib_transform_whitens_and_diagonalises_the_metric) {
    test_rng r = { 9, 0, 0 };
    enum { D = 32 };
    static double ev[D], c[D * D], g[D * D], q[D * D], fwd[D * D], inv[D * D], imp[D], p[D * D], t2[D * D];
    for (int j = 0; j < D; j++) ev[j] = exp(-0.3 * j);
    random_spd(&r, D, ev, c, q);
    for (int j = 0; j < D; j++) ev[j] = 1.0 + (j % 5);
    random_spd(&r, D, ev, g, q);
    kvq_error err;
    for (int with_metric = 0; with_metric < 2; with_metric++) {
        const double *metric = with_metric ? g : NULL;
        CHECK(kvq_calib_fit_transform(c, metric, D, fwd, inv, imp, &err) == KVQ_OK, "%s", err.msg);
        double worst_cov = 0, worst_inv = 0, worst_metric = 0;
        for (int i = 0; i < D; i++)
            for (int j = 0; j < D; j++) {
                double tc = 0, ti = 0, mg = 0;
                for (int k = 0; k < D; k++)
                    for (int l = 0; l < D; l++) {
                        tc += fwd[i * D + k] * c[k * D + l] * fwd[j * D + l];
                        mg += inv[k * D + i] * (metric ? g[k * D + l] : (k == l)) * inv[l * D + j];
                    }
                for (int k = 0; k < D; k++) ti += fwd[i * D + k] * inv[k * D + j];
                worst_cov = fmax(worst_cov, fabs(tc - (i == j)));
                worst_inv = fmax(worst_inv, fabs(ti - (i == j)));
                worst_metric = fmax(worst_metric, fabs(mg - (i == j ? imp[i] : 0.0)) / imp[0]);
            }
        CHECK(worst_cov < 1e-9 && worst_inv < 1e-9 && worst_metric < 1e-9,
              "metric %d: T C T^T - I %.2e, T T^-1 - I %.2e, T^-T G T^-1 - diag %.2e", with_metric, worst_cov,
              worst_inv, worst_metric);
        for (int i = 1; i < D; i++) CHECK(imp[i] <= imp[i - 1], "importance not descending at %d", i);
    }
    /* without a metric the importances are the covariance's eigenvalues */
    CHECK(kvq_calib_fit_transform(c, NULL, D, fwd, inv, imp, &err) == KVQ_OK, "%s", err.msg);
    for (int j = 0; j < D; j++) CHECK(fabs(imp[j] - exp(-0.3 * j)) < 1e-12, "importance %d: %g", j, imp[j]);
    (void)p; (void)t2;
}

TEST(calib_reverse_waterfill_is_the_gaussian_optimum) {
    const double var[6] = { 16, 4, 1, 0.25, 0.01, 0 };
    double rates[6];
    const double theta = kvq_reverse_waterfill(var, 6, 7.0, rates);
    double sum = 0;
    for (int i = 0; i < 6; i++) sum += rates[i];
    CHECK(fabs(sum - 7.0) < 1e-9, "rates sum to %g, not 7", sum);
    /* every coefficient above the water level ends at distortion theta,
     * those below get no bits */
    for (int i = 0; i < 6; i++) {
        if (var[i] > theta) CHECK(fabs(var[i] * pow(2.0, -2 * rates[i]) - theta) < 1e-9 * var[0], "coef %d", i);
        else CHECK(rates[i] == 0.0, "coef %d below the water level got %g bits", i, rates[i]);
    }
    CHECK(rates[4] == 0 && rates[5] == 0 && rates[3] > 0, "theta %g: rates %g %g %g", theta, rates[3], rates[4], rates[5]);
}

static double alloc_cost(const double *imp, const uint8_t *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += imp[i] * kvq_calib_distortion(b[i]);
    return s;
}

/* Exhaustive search over descending allocations of d <= 5 coefficients. */
static double best_alloc(const double *imp, int d, int code_bits, uint8_t *b, int i, int cap) {
    if (i == d) return kvq_calib_code_bits(b, d) <= code_bits ? alloc_cost(imp, b, d) : INFINITY;
    double best = INFINITY;
    for (int v = 0; v <= cap; v++) {
        b[i] = (uint8_t)v;
        best = fmin(best, best_alloc(imp, d, code_bits, b, i + 1, v));
    }
    return best;
}

TEST(calib_allocation_is_the_exact_optimum) {
    test_rng r = { 3, 0, 0 };
    for (int trial = 0; trial < 80; trial++) {
        const int d = 1 + trial % 5, code_bits = (int)(test_rng_uniform(&r) * 7.0 * d) + (trial % 3 ? 6 : 0);
        double imp[5];
        for (int i = 0; i < d; i++) imp[i] = exp(3.0 * test_rng_gauss(&r));
        for (int i = 1; i < d; i++)
            for (int j = i; j > 0 && imp[j] > imp[j - 1]; j--) { double x = imp[j]; imp[j] = imp[j - 1]; imp[j - 1] = x; }
        uint8_t g[5], b[5];
        kvq_error err;
        CHECK(kvq_calib_allocate(imp, d, code_bits, g, &err) == KVQ_OK, "%s", err.msg);
        CHECK(kvq_calib_code_bits(g, d) <= code_bits, "over budget: %d > %d", kvq_calib_code_bits(g, d), code_bits);
        for (int i = 1; i < d; i++) CHECK(g[i] <= g[i - 1], "not descending");
        const double opt = best_alloc(imp, d, code_bits, b, 0, KVQ_CALIB_MAX_BITS), got = alloc_cost(imp, g, d);
        CHECK(fabs(got - opt) <= 1e-12 * opt, "trial %d (d=%d, %d bits): cost %.9g, optimum %.9g", trial, d,
              code_bits, got, opt);
    }
}

/* Heads longer than 128: a trellis count may need two runs (12 start bits). */
TEST(calib_allocation_long_rows_fit) {
    enum { D = 256 };
    double imp[D];
    for (int i = 0; i < D; i++) imp[i] = 1.0 - 1e-4 * i;
    uint8_t b[D];
    kvq_error err;
    CHECK(kvq_calib_allocate(imp, D, 3 * D + 12, b, &err) == KVQ_OK, "%s", err.msg);
    for (int i = 0; i < D; i++) CHECK(b[i] == 3, "b[%d] = %d", i, b[i]);
    CHECK(kvq_calib_code_bits(b, D) == 3 * D + 12, "stream %d bits", kvq_calib_code_bits(b, D));
    CHECK(kvq_calib_allocate(imp, D, 3 * D + 11, b, &err) == KVQ_OK, "%s", err.msg);
    CHECK(kvq_calib_code_bits(b, D) <= 3 * D + 11 && b[D - 1] < 3, "stream %d bits", kvq_calib_code_bits(b, D));
}

TEST(calib_allocation_gives_no_bits_to_what_carries_nothing) {
    enum { D = 64 };
    double imp[D];
    for (int i = 0; i < D; i++) imp[i] = i < 16 ? 1.0 / (1 + i) : 1e-7;
    uint8_t b[D];
    kvq_error err;
    CHECK(kvq_calib_allocate(imp, D, 2 * D, b, &err) == KVQ_OK, "%s", err.msg);
    int used = 0;
    for (int i = 0; i < D; i++) used += b[i];
    CHECK(used >= 16 && used <= 2 * D, "%d value bits for %d channels", used, D);
    CHECK(b[15] > 0 && b[16] == 0 && b[D - 1] == 0, "b[15]=%d b[16]=%d", b[15], b[16]);
    CHECK(kvq_calib_code_bits(b, D) <= 2 * D && kvq_calib_code_bits(b, D) > 2 * D - 8, "stream %d of %d bits",
          kvq_calib_code_bits(b, D), 2 * D);
    /* equal importances: (almost) the same bits everywhere */
    for (int i = 0; i < D; i++) imp[i] = 1.0;
    CHECK(kvq_calib_allocate(imp, D, 3 * D + 6, b, &err) == KVQ_OK, "%s", err.msg);
    for (int i = 0; i < D; i++) CHECK(b[i] == 3, "flat: b[%d] = %d", i, b[i]);
    /* a spread of variances gets a spread of bits, and the code's
     * distortion sits above the Gaussian rate-distortion bound of that
     * spectrum at the same bits (reverse water-filling: sum min(v, theta)),
     * within the codes' gap: about 1 dB for the 2-4 bit trellis, up to
     * 4.3 dB for fixed-rate Lloyd-Max at 5-8 bits (2.72 4^-b vs 4^-b) */
    for (int i = 0; i < D; i++) imp[i] = exp(-0.12 * i);
    CHECK(kvq_calib_allocate(imp, D, 4 * D, b, &err) == KVQ_OK && b[0] > b[D - 1] + 3, "no spread");
    double rates[D], bound = 0, code = 0;
    const double theta = kvq_reverse_waterfill(imp, D, kvq_calib_code_bits(b, D), rates);
    for (int i = 0; i < D; i++) {
        bound += fmin(imp[i], theta);
        code += imp[i] * kvq_calib_distortion(b[i]);
    }
    CHECK(code > bound && code < 2.7 * bound, "code distortion %.4g, rate-distortion bound %.4g", code, bound);
    imp[3] = 2.0;
    CHECK(kvq_calib_allocate(imp, D, 4 * D, b, &err) == KVQ_ERR_ARG, "unsorted importance accepted");
}

/* The 5-8 bit Lloyd-Max quantisers of N(0,1) (solved by Newton's method):
 * each level is the mean of its cell, and the distortion approaches the
 * high-resolution figure (pi sqrt(3) / 2) 4^-b from below. */
TEST(calib_lloyd_max_5_to_8_bits) {
    for (int b = 5; b <= 8; b++) {
        const int n = 1 << b;
        const float *c = kvq_turbo_lloyd_centroids(b);
        CHECK(c, "no %d-bit table", b);
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const double lo = i ? 0.5 * ((double)c[i - 1] + c[i]) : -INFINITY;
            const double hi = i + 1 < n ? 0.5 * ((double)c[i] + c[i + 1]) : INFINITY;
            const double pa = isinf(lo) ? 0 : exp(-0.5 * lo * lo), pb = isinf(hi) ? 0 : exp(-0.5 * hi * hi);
            const double mass = 0.5 * (erfc(-hi / sqrt(2.0)) - erfc(-lo / sqrt(2.0)));
            const double mean = (pa - pb) / sqrt(2 * M_PI) / mass;
            worst = fmax(worst, fabs(mean - c[i]) / (1e-3 + fabs(c[i])));
            if (i) CHECK(c[i] > c[i - 1], "%d bits: levels not ascending at %d", b, i);
        }
        CHECK(worst < 1e-5, "%d bits: a level is %.2e from its cell's mean", b, worst);
        const double hr = M_PI * sqrt(3.0) / 2.0 * pow(4.0, -b), D = kvq_turbo_lloyd_mse(b);
        CHECK(D < hr && D > 0.9 * hr, "%d bits: D = %.3g, high-resolution %.3g", b, D, hr);
    }
}
