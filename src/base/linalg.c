/* linalg.c - symmetric eigendecomposition by cyclic Jacobi rotations, and
 * matrix functions built on it (linalg.h).
 *
 * Jacobi: each rotation J(p, q, theta) zeroes a_pq of A <- J^T A J; the sum
 * of squares of the off-diagonal entries drops by 2 a_pq^2 each time, so
 * sweeping over all pairs converges (quadratically once the off-diagonal
 * part is small).  For the n <= 256 of KV heads a sweep costs about 6 n^3
 * flops and 6-10 sweeps suffice: milliseconds.  Chosen over Householder +
 * QL for its simplicity and its accuracy on small eigenvalues (it finds
 * them to high relative accuracy), which matter here: the smallest
 * eigenvalues of a covariance decide which coefficients get 0 bits. */
#include "linalg.h"

#include <math.h>
#include <stdlib.h>

enum { MAX_SWEEPS = 60 };

/* One rotation in the (p, q) plane: a <- J^T a J, v <- v J. */
static void rotate_pair(double *a, double *v, int n, int p, int q) {
    const double apq = a[p * n + q];
    if (apq == 0.0) return;
    const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
    /* the smaller root of t^2 + 2 t theta - 1 = 0: rotation angle <= pi/4 */
    const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
    const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (int k = 0; k < n; k++) {                 /* columns p, q */
        const double akp = a[k * n + p], akq = a[k * n + q];
        a[k * n + p] = c * akp - s * akq;
        a[k * n + q] = s * akp + c * akq;
    }
    for (int k = 0; k < n; k++) {                 /* rows p, q */
        const double apk = a[p * n + k], aqk = a[q * n + k];
        a[p * n + k] = c * apk - s * aqk;
        a[q * n + k] = s * apk + c * aqk;
    }
    a[p * n + q] = a[q * n + p] = 0.0;            /* exactly, not rounding noise */
    for (int k = 0; k < n; k++) {
        const double vkp = v[k * n + p], vkq = v[k * n + q];
        v[k * n + p] = c * vkp - s * vkq;
        v[k * n + q] = s * vkp + c * vkq;
    }
}

static double off_diagonal(const double *a, int n, double *total) {
    double off = 0.0, all = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const double x = a[i * n + j] * a[i * n + j];
            all += x;
            if (i != j) off += x;
        }
    *total = all;
    return off;
}

/* Sort eigenpairs by descending eigenvalue (insertion sort: stable, n is
 * small) and give each eigenvector its fixed sign; v holds them as
 * columns, vecs receives rows. */
static void sort_pairs(const double *a, const double *v, int n, double *evals, double *vecs, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && a[order[j] * n + order[j]] > a[order[j - 1] * n + order[j - 1]]; j--) {
            const int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    for (int j = 0; j < n; j++) {
        const int c = order[j];
        evals[j] = a[c * n + c];
        int big = 0;
        for (int i = 1; i < n; i++)
            if (fabs(v[i * n + c]) > fabs(v[big * n + c])) big = i;
        const double sign = v[big * n + c] < 0 ? -1.0 : 1.0;
        for (int i = 0; i < n; i++) vecs[j * n + i] = sign * v[i * n + c];
    }
}

kvq_status kvq_eig_sym(const double *a_in, int n, double *evals, double *vecs, kvq_error *err) {
    if (n < 1 || n > KVQ_LINALG_MAX_N)
        return kvq_fail(err, KVQ_ERR_ARG, "eig: size %d outside 1..%d", n, KVQ_LINALG_MAX_N);
    const size_t nn = (size_t)n * (size_t)n;
    double *a = kvq_malloc_n(nn, sizeof *a), *v = kvq_malloc_n(nn, sizeof *v);
    int *order = kvq_malloc_n((size_t)n, sizeof *order);
    if (!a || !v || !order) {
        free(a); free(v); free(order);
        return kvq_fail(err, KVQ_ERR_NOMEM, "eig: out of memory for %d x %d", n, n);
    }
    for (int i = 0; i < n; i++)                    /* symmetric copy of the upper triangle */
        for (int j = 0; j < n; j++) {
            const double x = i <= j ? a_in[i * n + j] : a_in[j * n + i];
            a[i * n + j] = x;
            v[i * n + j] = i == j ? 1.0 : 0.0;
        }
    kvq_status st = KVQ_OK;
    double total;
    const double off0 = off_diagonal(a, n, &total);
    if (!isfinite(off0) || !isfinite(total)) {
        st = kvq_fail(err, KVQ_ERR_ARG, "eig: the matrix has non-finite entries");
        goto done;
    }
    /* Converged when the off-diagonal part is at rounding level of the whole. */
    for (int sweep = 0; sweep < MAX_SWEEPS && off_diagonal(a, n, &total) > 1e-30 * total; sweep++)
        for (int p = 0; p < n - 1; p++)
            for (int q = p + 1; q < n; q++) rotate_pair(a, v, n, p, q);
    sort_pairs(a, v, n, evals, vecs, order);
done:
    free(a); free(v); free(order);
    return st;
}

kvq_status kvq_sym_sqrt(const double *a, int n, double rel_floor, double *s, double *s_inv, kvq_error *err) {
    if (!(rel_floor > 0)) return kvq_fail(err, KVQ_ERR_ARG, "sym_sqrt: the floor must be positive");
    const size_t nn = (size_t)n * (size_t)n;
    double *ev = kvq_calloc((size_t)KVQ_MAX(n, 1), sizeof *ev), *u = kvq_calloc(KVQ_MAX(nn, 1), sizeof *u);
    if (!ev || !u) { free(ev); free(u); return kvq_fail(err, KVQ_ERR_NOMEM, "sym_sqrt: out of memory"); }
    kvq_status st = kvq_eig_sym(a, n, ev, u, err);
    if (st == KVQ_OK && !(ev[0] > 0))
        st = kvq_fail(err, KVQ_ERR_ARG, "sym_sqrt: the matrix has no positive eigenvalue");
    if (st == KVQ_OK) {
        const double floor = rel_floor * ev[0];
        for (int j = 0; j < n; j++) ev[j] = sqrt(ev[j] > floor ? ev[j] : floor);
        for (int i = 0; i < n; i++)                /* sum_j u_j,i f(e_j) u_j,k */
            for (int k = 0; k < n; k++) {
                double p = 0.0, m = 0.0;
                for (int j = 0; j < n; j++) {
                    const double uu = u[j * n + i] * u[j * n + k];
                    p += uu * ev[j];
                    m += uu / ev[j];
                }
                s[i * n + k] = p;
                s_inv[i * n + k] = m;
            }
    }
    free(ev);
    free(u);
    return st;
}

void kvq_mat_mul(const double *a, const double *b, double *c, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
}

void kvq_mat_sandwich(const double *a, const double *b, double *c, double *scratch, int n) {
    kvq_mat_mul(a, b, scratch, n);
    kvq_mat_mul(scratch, a, c, n);
}

double kvq_mat_max_diff(const double *a, const double *b, int n) {
    double m = 0.0;
    for (size_t i = 0; i < (size_t)n * (size_t)n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}
