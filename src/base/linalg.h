/* linalg.h - the small dense linear algebra calibration needs (double
 * precision, row-major n x n matrices, n <= KVQ_LINALG_MAX_N): the
 * eigendecomposition of a symmetric matrix (cyclic Jacobi) and what is
 * built on it.  Deterministic: the same input gives the same bits on every
 * machine (plain loops in a fixed order, only +, *, /, sqrt). */
#ifndef KVQ_LINALG_H
#define KVQ_LINALG_H

#include "kvq_internal.h"

#define KVQ_LINALG_MAX_N 512

/* A = U diag(evals) U^T for symmetric a[n*n] (only the upper triangle is
 * read).  evals[n] descending; vecs[n*n] holds the eigenvectors as ROWS
 * (vecs[j*n + i] = component i of eigenvector j), so vecs is U^T, the
 * KLT.  Each eigenvector's largest-magnitude component is positive (a
 * fixed sign, so results do not depend on rounding noise).  Fails only for
 * n outside 1..KVQ_LINALG_MAX_N, non-finite input or out of memory. */
kvq_status kvq_eig_sym(const double *a, int n, double *evals, double *vecs, kvq_error *err);

/* S = A^(1/2) and S_inv = A^(-1/2) of a symmetric positive semi-definite
 * a (U diag(e^(+-1/2)) U^T), the eigenvalues first raised to at least
 * rel_floor times the largest (> 0), so that S S_inv = I holds and S_inv
 * stays finite for a singular a. */
kvq_status kvq_sym_sqrt(const double *a, int n, double rel_floor, double *s, double *s_inv, kvq_error *err);

/* c[n*n] = a * b (c may not alias a or b). */
void kvq_mat_mul(const double *a, const double *b, double *c, int n);
/* c[n*n] = a * b * a (scratch: n*n doubles; nothing may alias). */
void kvq_mat_sandwich(const double *a, const double *b, double *c, double *scratch, int n);
/* Largest |a_ij - b_ij|. */
double kvq_mat_max_diff(const double *a, const double *b, int n);

#endif
