/* turbo_codebook.c - the Lloyd-Max scalar quantisers of N(0,1) used by
 * turbo2/3/4 (docs/spec/formats.md §4), derived in code rather than typed in.
 *
 * Lloyd's conditions for a Gaussian source have closed forms: the cell
 * boundaries are midpoints of neighbouring centroids, and the centroid of
 * the cell (a, b) is E[X | a < X < b] = (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
 * Iterating the two from an evenly spaced start converges to the unique
 * optimum (the Gaussian is log-concave).  The coordinates of a rotated unit
 * vector in dimension d are close to N(0, 1/d); the kernels work with these
 * unit-variance values and fold 1/sqrt(d) into the block scale. */
#include "turbo_internal.h"

#include <math.h>
#include <pthread.h>

/* turbo2/3/4 use 1..4 bits; the calibrated types (calib_code.c) up to 8. */
#define LLOYD_MAX_BITS 8
#define LLOYD_MAX_ITERS 100000
#define LLOYD_TOL 1e-13

static float  g_centroids[LLOYD_MAX_BITS + 1][1 << LLOYD_MAX_BITS];
static float  g_midpoints[LLOYD_MAX_BITS + 1][1 << LLOYD_MAX_BITS];
static double g_mse[LLOYD_MAX_BITS + 1];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static double gauss_pdf(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static double gauss_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Boundary i of n levels: -inf, midpoints, +inf. */
static double boundary(const double *c, int n, int i) {
    if (i == 0) return -INFINITY;
    if (i == n) return INFINITY;
    return 0.5 * (c[i - 1] + c[i]);
}

/* One Lloyd step; returns the largest centroid move. */
static double lloyd_step(double *c, int n) {
    double next[1 << LLOYD_MAX_BITS], move = 0.0;
    for (int i = 0; i < n; i++) {
        double a = boundary(c, n, i), b = boundary(c, n, i + 1);
        next[i] = (gauss_pdf(a) - gauss_pdf(b)) / (gauss_cdf(b) - gauss_cdf(a));
    }
    for (int i = 0; i < n; i++) {
        move = fmax(move, fabs(next[i] - c[i]));
        c[i] = next[i];
    }
    return move;
}

/* E[(X - Q(X))^2] = 1 - sum_i P(cell i) c_i^2 at the centroid condition. */
static double lloyd_distortion(const double *c, int n) {
    double kept = 0.0;
    for (int i = 0; i < n; i++)
        kept += (gauss_cdf(boundary(c, n, i + 1)) - gauss_cdf(boundary(c, n, i))) * c[i] * c[i];
    return 1.0 - kept;
}

/* x with Phi(x) = p, by bisection (p in (0, 1)). */
static double gauss_quantile(double p) {
    double lo = -40.0, hi = 40.0;
    for (int i = 0; i < 200; i++) {
        const double mid = 0.5 * (lo + hi);
        if (gauss_cdf(mid) < p) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* Solve the tridiagonal system (lo, di, up) x = r in place (Thomas). */
static void solve_tridiagonal(double *lo, double *di, double *up, double *r, int n) {
    for (int i = 1; i < n; i++) {
        const double m = lo[i] / di[i - 1];
        di[i] -= m * up[i - 1];
        r[i] -= m * r[i - 1];
    }
    r[n - 1] /= di[n - 1];
    for (int i = n - 2; i >= 0; i--) r[i] = (r[i] - up[i] * r[i + 1]) / di[i];
}

/* 5-8 bits: plain Lloyd iteration creeps (hundreds of thousands of steps
 * at 256 levels), so the centroid condition c = F(c) is solved by Newton's
 * method instead, from the high-resolution optimum (point density
 * proportional to the cube root of the density: for N(0,1), the quantiles
 * of N(0,3)).  F_i depends on the boundaries a = (c_i-1 + c_i)/2 and
 * b = (c_i + c_i+1)/2 only, dF/da = phi(a)(F - a)/P and dF/db =
 * phi(b)(b - F)/P with P = Phi(b) - Phi(a), so the Jacobian is
 * tridiagonal; a step is halved while it would disorder the levels. */
static void lloyd_newton(double *c, int n) {
    double lo[1 << LLOYD_MAX_BITS], di[1 << LLOYD_MAX_BITS], up[1 << LLOYD_MAX_BITS], r[1 << LLOYD_MAX_BITS];
    for (int i = 0; i < n; i++) c[i] = sqrt(3.0) * gauss_quantile((i + 0.5) / n);
    for (int it = 0; it < 100; it++) {
        double worst = 0.0;
        for (int i = 0; i < n; i++) {
            const double a = boundary(c, n, i), b = boundary(c, n, i + 1);
            const double P = gauss_cdf(b) - gauss_cdf(a), F = (gauss_pdf(a) - gauss_pdf(b)) / P;
            const double dfa = isinf(a) ? 0.0 : gauss_pdf(a) * (F - a) / P;
            const double dfb = isinf(b) ? 0.0 : gauss_pdf(b) * (b - F) / P;
            lo[i] = 0.5 * dfa;
            up[i] = 0.5 * dfb;
            di[i] = 0.5 * (dfa + dfb) - 1.0;
            r[i] = c[i] - F;                      /* J delta = -(F - c) */
            worst = fmax(worst, fabs(F - c[i]));
        }
        if (worst < LLOYD_TOL) return;
        solve_tridiagonal(lo, di, up, r, n);
        for (double step = 1.0; step > 1e-6; step *= 0.5) {
            bool ordered = true;
            for (int i = 1; i < n && ordered; i++) ordered = c[i - 1] + step * r[i - 1] < c[i] + step * r[i];
            if (!ordered) continue;
            for (int i = 0; i < n; i++) c[i] += step * r[i];
            break;
        }
    }
}

static void compute_all(void) {
    for (int bits = 1; bits <= LLOYD_MAX_BITS; bits++) {
        int n = 1 << bits;
        double c[1 << LLOYD_MAX_BITS];
        if (bits <= 4) {   /* the start the turbo types' committed figures were made with */
            for (int i = 0; i < n; i++) c[i] = 4.0 * ((i + 0.5) / n - 0.5) * 2.0;  /* +-4 spread */
            for (int it = 0; it < LLOYD_MAX_ITERS && lloyd_step(c, n) > LLOYD_TOL; it++) {}
        } else {
            lloyd_newton(c, n);
        }
        for (int i = 0; i < n; i++) g_centroids[bits][i] = (float)c[i];
        for (int i = 0; i + 1 < n; i++)
            g_midpoints[bits][i] = 0.5f * (g_centroids[bits][i] + g_centroids[bits][i + 1]);
        g_mse[bits] = lloyd_distortion(c, n);
    }
}

const float *kvq_turbo_lloyd_centroids(int bits) {
    if (bits < 1 || bits > LLOYD_MAX_BITS) return NULL;
    pthread_once(&g_once, compute_all);
    return g_centroids[bits];
}

double kvq_turbo_lloyd_mse(int bits) {
    if (bits < 1 || bits > LLOYD_MAX_BITS) return NAN;
    pthread_once(&g_once, compute_all);
    return g_mse[bits];
}

const float *turbo_lloyd_midpoints(int bits) {
    if (bits < 1 || bits > LLOYD_MAX_BITS) return NULL;
    pthread_once(&g_once, compute_all);
    return g_midpoints[bits];
}
