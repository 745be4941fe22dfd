/* calib_fit.c - fitting a calibrated side: the transform from the
 * measured moments, and the bits each coefficient gets (calib.h;
 * docs/calibration.md derives both). */
#include "calib.h"
#include "linalg.h"
#include "turbo.h"
#include "turbo_internal.h"

#include <math.h>
#include <stdlib.h>

const int kvq_calib_rates[KVQ_CALIB_N_RATES] = { 225, 250, 300, 325, 350, 425 };

int kvq_calib_rate_index(int rate) {
    for (int i = 0; i < KVQ_CALIB_N_RATES; i++)
        if (kvq_calib_rates[i] == rate) return i;
    return -1;
}

int kvq_calib_row_bytes(int rate, int d) { return (rate * d + 799) / 800; }

/* ------------------------------------------------------------ transform */

/* Eigenvalues below this share of the largest are raised to it: the
 * transform stays finite on rank-deficient data (such coefficients carry
 * nothing and get no bits). */
#define EIG_FLOOR 1e-9

kvq_status kvq_calib_fit_transform(const double *cov, const double *metric, int d, double *fwd, double *inv,
                                   double *importance, kvq_error *err) {
    const size_t dd = (size_t)d * (size_t)d;
    double *s = kvq_malloc_n(dd, sizeof *s), *s_inv = kvq_malloc_n(dd, sizeof *s_inv), *m = kvq_malloc_n(dd, sizeof *m);
    double *tmp = kvq_malloc_n(dd, sizeof *tmp), *w = kvq_malloc_n(dd, sizeof *w), *mu = kvq_malloc_n((size_t)d, sizeof *mu);
    kvq_status st = s && s_inv && m && tmp && w && mu ? KVQ_OK
                                                     : kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    if (st == KVQ_OK && metric) {
        st = kvq_sym_sqrt(metric, d, EIG_FLOOR, s, s_inv, err);
    } else if (st == KVQ_OK) {
        for (size_t i = 0; i < dd; i++) s[i] = s_inv[i] = i % (size_t)(d + 1) == 0 ? 1.0 : 0.0;
    }
    if (st == KVQ_OK) {
        kvq_mat_sandwich(s, cov, m, tmp, d);               /* S C S */
        st = kvq_eig_sym(m, d, mu, w, err);                 /* w = W^T (rows) */
    }
    if (st == KVQ_OK && !(mu[0] > 0))
        st = kvq_fail(err, KVQ_ERR_ARG, "calibration: the rows have no variance (all equal)");
    if (st == KVQ_OK) {
        for (int i = 0; i < d; i++) mu[i] = fmax(mu[i], EIG_FLOOR * mu[0]);
        kvq_mat_mul(w, s, tmp, d);                          /* W^T S */
        for (int i = 0; i < d; i++) {
            importance[i] = mu[i];
            for (int j = 0; j < d; j++) fwd[i * d + j] = tmp[i * d + j] / sqrt(mu[i]);
        }
        for (int i = 0; i < d; i++)                         /* S^-1 W diag(mu)^(1/2) */
            for (int j = 0; j < d; j++) {
                double x = 0.0;
                for (int k = 0; k < d; k++) x += s_inv[i * d + k] * w[j * d + k];
                inv[i * d + j] = x * sqrt(mu[j]);
            }
    }
    free(s); free(s_inv); free(m); free(tmp); free(w); free(mu);
    return st;
}

/* ------------------------------------------------------------ allocation */

double kvq_reverse_waterfill(const double *var, int n, double total_bits, double *rates) {
    double hi = 0.0, lo = INFINITY;
    for (int i = 0; i < n; i++) {
        hi = fmax(hi, var[i]);
        if (var[i] > 0) lo = fmin(lo, var[i]);
    }
    if (!(hi > 0) || !(total_bits > 0)) {
        for (int i = 0; i < n; i++) rates[i] = 0.0;
        return hi;
    }
    /* sum_i max(0, log2(v_i/theta)/2) falls from >= total_bits at
     * theta_lo = min(v) 2^(-2 total/n) to 0 at max(v): bisect log(theta). */
    double a = log(lo) - 2.0 * total_bits / n * log(2.0) - 1.0, b = log(hi);
    for (int it = 0; it < 200; it++) {
        const double mid = 0.5 * (a + b);
        double r = 0.0;
        for (int i = 0; i < n; i++)
            if (var[i] > 0) r += fmax(0.0, 0.5 * (log(var[i]) - mid) / log(2.0));
        if (r > total_bits) a = mid;
        else b = mid;
    }
    const double theta = exp(0.5 * (a + b));
    for (int i = 0; i < n; i++) rates[i] = var[i] > 0 ? fmax(0.0, 0.5 * log2(var[i] / theta)) : 0.0;
    return theta;
}

static bool is_tcq_bits(int b) { return b >= 2 && b <= 4; }

double kvq_calib_distortion(int bits) {
    switch (bits) {
    case 0: return 1.0;
    case 2: return kvq_turbo_tcq_mse2;
    case 3: return kvq_turbo_tcq_mse3;
    case 4: return kvq_turbo_tcq_mse4;
    default: return bits >= 1 && bits <= KVQ_CALIB_MAX_BITS ? kvq_turbo_lloyd_mse(bits) : NAN;
    }
}

double kvq_calib_logit_gain(int bits) { return bits > 0 ? 1.0 / (1.0 - kvq_calib_distortion(bits)) : 1.0; }

/* Trellis start bits of n coefficients at b bits: 6 per run of <= 128. */
static int start_bits(int b, int n) {
    return is_tcq_bits(b) && n > 0 ? KVQ_TURBO_TCQ_CONTEXT * ((n + KVQ_TURBO_BLOCK - 1) / KVQ_TURBO_BLOCK) : 0;
}

int kvq_calib_code_bits(const uint8_t *bits, int d) {
    int count[KVQ_CALIB_MAX_BITS + 1] = { 0 }, total = 0;
    for (int i = 0; i < d; i++) {
        count[bits[i]]++;
        total += bits[i];
    }
    for (int b = 1; b <= KVQ_CALIB_MAX_BITS; b++) total += start_bits(b, count[b]);
    return total;
}

/* ------------------------------------------------- exact allocation
 *
 * With the importances descending, some optimal allocation is descending
 * too (swapping the bits of two coefficients keeps the stream bits and
 * does not raise the cost when the more important one gets more), so an
 * allocation is the lengths of its runs: n_8 coefficients at 8 bits, then
 * n_7 at 7, ..., the rest at 0.  Dynamic programming over those runs
 * ("stages"; a trellis count may have several runs of <= 128, each paying
 * its 6 start bits) on the state (coefficients assigned i, bits used u):
 *
 *   f_s(i, u) = min( f_s+1(i, u),
 *                    min_{1 <= n <= maxn} D_b (P[i+n] - P[i]) + f_s+1(i+n, u + b n + start) )
 *
 * with P the prefix sums of the importances and f_end(i, u) = P[d] - P[i]
 * (the rest uncoded).  Along a line u = w + b i the inner minimum is a
 * sliding-window minimum over j = i + n, kept in a monotone queue, so a
 * stage costs O(d (B + b d)): about 2 M steps for d = 128 at 4.25 bpv. */

typedef struct alloc_stage { int b, start, maxn; } alloc_stage;

static int make_stages(int d, alloc_stage *st) {
    int n = 0;
    for (int b = KVQ_CALIB_MAX_BITS; b >= 1; b--) {
        if (!is_tcq_bits(b)) { st[n++] = (alloc_stage){ b, 0, d }; continue; }
        for (int r = 0; r < (d + KVQ_TURBO_BLOCK - 1) / KVQ_TURBO_BLOCK; r++)
            st[n++] = (alloc_stage){ b, KVQ_TURBO_TCQ_CONTEXT, KVQ_TURBO_BLOCK };
    }
    return n;
}

/* One stage: cur from next; choice[i][u] = the run length chosen. */
static void alloc_stage_solve(const alloc_stage *sg, const double *P, int d, int B, const double *next, double *cur,
                              uint16_t *choice, int *queue, double *qval) {
    const size_t W = (size_t)B + 1;
    const double D = kvq_calib_distortion(sg->b);
    memcpy(cur, next, (size_t)(d + 1) * W * sizeof *cur);            /* n = 0 */
    memset(choice, 0, (size_t)(d + 1) * W * sizeof *choice);
    for (int w = -sg->b * d; w <= B; w++) {
        int head = 0, tail = 0;                                        /* queue[head..tail) */
        for (int i = d; i >= 0; i--) {
            const int j = i + 1;                                       /* newest candidate */
            if (j <= d) {
                const int v = w + sg->b * j + sg->start;
                const double h = v >= 0 && v <= B ? D * P[j] + next[(size_t)j * W + (size_t)v] : INFINITY;
                while (tail > head && qval[tail - 1] >= h) tail--;
                queue[tail] = j;
                qval[tail++] = h;
            }
            while (tail > head && queue[head] > i + sg->maxn) head++;
            const int u = w + sg->b * i;
            if (u < 0 || u > B || tail == head || qval[head] == INFINITY) continue;
            const double c = qval[head] - D * P[i];
            if (c < cur[(size_t)i * W + (size_t)u]) {
                cur[(size_t)i * W + (size_t)u] = c;
                choice[(size_t)i * W + (size_t)u] = (uint16_t)(queue[head] - i);
            }
        }
    }
}

kvq_status kvq_calib_allocate(const double *importance, int d, int code_bits, uint8_t *bits, kvq_error *err) {
    if (d < 1 || d > KVQ_MAX_HEAD_DIM || code_bits < 0 || code_bits > 16 * KVQ_MAX_HEAD_DIM)
        return kvq_fail(err, KVQ_ERR_ARG, "allocate: %d coefficients, %d bits", d, code_bits);
    for (int i = 0; i < d; i++)
        if (!(importance[i] >= 0) || !isfinite(importance[i]) || (i && importance[i] > importance[i - 1]))
            return kvq_fail(err, KVQ_ERR_ARG, "allocate: importance must be finite, >= 0 and descending (at %d)", i);
    alloc_stage st[KVQ_CALIB_MAX_BITS * (KVQ_MAX_HEAD_DIM / KVQ_TURBO_BLOCK + 1)];
    const int n_st = make_stages(d, st), B = code_bits;
    const size_t cells = (size_t)(d + 1) * ((size_t)B + 1);
    double *P = kvq_malloc_n((size_t)(d + 1), sizeof *P), *f = kvq_malloc_n(2 * cells, sizeof *f);
    double *qval = kvq_malloc_n((size_t)(d + 2), sizeof *qval);
    int *queue = kvq_malloc_n((size_t)(d + 2), sizeof *queue);
    uint16_t *choice = kvq_malloc_n((size_t)n_st * cells, sizeof *choice);
    if (!P || !f || !qval || !queue || !choice) {
        free(P); free(f); free(qval); free(queue); free(choice);
        return kvq_fail(err, KVQ_ERR_NOMEM, "allocate: out of memory");
    }
    P[0] = 0.0;
    for (int i = 0; i < d; i++) P[i + 1] = P[i] + importance[i];
    double *next = f, *cur = f + cells;
    for (int i = 0; i <= d; i++)
        for (int u = 0; u <= B; u++) next[(size_t)i * (B + 1) + u] = kvq_calib_distortion(0) * (P[d] - P[i]);
    for (int s = n_st - 1; s >= 0; s--) {
        alloc_stage_solve(&st[s], P, d, B, next, cur, choice + (size_t)s * cells, queue, qval);
        double *t = next; next = cur; cur = t;
    }
    memset(bits, 0, (size_t)d);
    for (int s = 0, i = 0, u = 0; s < n_st; s++) {                 /* follow the choices */
        const int n = choice[(size_t)s * cells + (size_t)i * (B + 1) + u];
        for (int k = 0; k < n; k++) bits[i + k] = (uint8_t)st[s].b;
        if (n) u += st[s].b * n + st[s].start;
        i += n;
    }
    free(P); free(f); free(qval); free(queue); free(choice);
    return KVQ_OK;
}
