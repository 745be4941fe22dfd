/*
 * turbo_traits.c - TurboQuant as rows of the trait table.
 *
 * The cache keeps every row in its side's rotated domain (one rotated Q
 * serves body, ring and sink), so the table's turbo kernels work there:
 *   quantize(R x)  -> the row of x, encoded from R x as it is
 *                     (kvq_turbo_quantize_rot: no transform back and
 *                     forth);
 *   dequantize     -> R x_hat (axpy with weight 1 into zeros);
 *   dot, axpy      -> kvq_turbo_dot_rot / kvq_turbo_axpy_rot directly.
 * A row of n values holds kvq_turbo_rot_dim(n) rotated values (128-blocks,
 * then a 64- or 128-block for the rest); kernels given fewer (the generic
 * kvq_*_row wrappers with an odd n) zero-pad to that.
 */
#include "turbo_traits.h"
#include "turbo.h"

#include <math.h>
#include <stdlib.h>

int kvq_turbo_store_dim(int head_dim) { return kvq_turbo_rot_dim(head_dim); }
void kvq_turbo_rotate_row(const float *x, float *out, int head_dim) { kvq_turbo_rotate_query(x, out, head_dim); }
void kvq_turbo_unrotate_row(const float *acc, float *out, int head_dim) { kvq_turbo_unrotate(acc, out, head_dim); }

/* A rotated vector of n values as the full rot_dim(n) row: x itself when
 * n is already a whole row, else a zero-padded copy in buf (NULL when n
 * is out of range or memory runs out). */
static const float *whole_row(const float *x, int n, int d, float **buf) {
    *buf = NULL;
    if (d == n) return x;
    if (!d || !(*buf = kvq_calloc((size_t)d, sizeof **buf))) return NULL;
    memcpy(*buf, x, (size_t)n * sizeof **buf);
    return *buf;
}

typedef kvq_status (*turbo_quantize_fn)(kvq_turbo_type, const float *, void *, int, kvq_error *);

enum { STACK_ROW = 512 };   /* heads up to 512 need no allocation */

static void quantize_rot(kvq_turbo_type t, turbo_quantize_fn q, const float *x_rot, void *dst, int64_t n) {
    const int d = kvq_turbo_rot_dim((int)n);
    float *pad;
    const float *full = whole_row(x_rot, (int)n, d, &pad);
    if (d && full) q(t, full, dst, d, NULL);
    free(pad);
}

kvq_turbo_type kvq_turbo_of(kvq_type ty) {
    switch (ty) {
    case KVQ_TYPE_TURBO2: return KVQ_TURBO2;
    case KVQ_TYPE_TURBO3: return KVQ_TURBO3;
    case KVQ_TYPE_TURBO4: return KVQ_TURBO4;
    case KVQ_TYPE_TURBO2_TCQ: return KVQ_TURBO2_TCQ;
    case KVQ_TYPE_TURBO3_TCQ: return KVQ_TURBO3_TCQ;
    case KVQ_TYPE_TURBO4_TCQ: return KVQ_TURBO4_TCQ;
    default: return KVQ_TURBO_COUNT;
    }
}

bool kvq_turbo_quantize_rot_rows(kvq_type ty, int n_rows, const float *const *x_rot, void *const *dst, int64_t n) {
    const kvq_turbo_type t = kvq_turbo_of(ty);
    const int d = kvq_turbo_rot_dim((int)n);
    if (!kvq_turbo_is_tcq(t) || d != n) return false;
    return kvq_turbo_quantize_rows_rot(t, n_rows, x_rot, dst, d);
}

typedef void (*turbo_axpy_rot_fn)(kvq_turbo_type, float, const void *, float *, int);

/* R x_hat: axpy with weight 1 into zeros (exactly the codebook value times
 * the block scale, so the scalar and SIMD axpy give the same bits). */
static void dequantize_rot(kvq_turbo_type t, turbo_axpy_rot_fn axpy, const void *src, float *y_rot, int64_t n) {
    const int d = kvq_turbo_rot_dim((int)n);
    if (!d) return;
    float stack[STACK_ROW], *heap = NULL;
    float *acc = d == n ? y_rot : d <= STACK_ROW ? stack : (heap = kvq_malloc_n((size_t)d, sizeof *acc));
    if (!acc) return;
    memset(acc, 0, (size_t)d * sizeof *acc);
    axpy(t, 1.0f, src, acc, d);
    if (acc != y_rot) memcpy(y_rot, acc, (size_t)n * sizeof *acc);
    free(heap);
}

typedef float (*turbo_dot_rot_fn)(kvq_turbo_type, const void *, const float *, int);

static float dot_rot(kvq_turbo_type t, turbo_dot_rot_fn dot, const void *row, const float *x_rot, int64_t n) {
    const int d = kvq_turbo_rot_dim((int)n);
    float *pad;
    const float *full = whole_row(x_rot, (int)n, d, &pad);
    const float r = full ? dot(t, row, full, d) : NAN;
    free(pad);
    return r;
}

static void axpy_rot(kvq_turbo_type t, turbo_axpy_rot_fn axpy, float w, const void *row, float *y_rot, int64_t n) {
    const int d = kvq_turbo_rot_dim((int)n);
    if (d == n) { axpy(t, w, row, y_rot, d); return; }
    float *acc = d ? kvq_calloc((size_t)d, sizeof *acc) : NULL;
    if (!acc) return;
    axpy(t, w, row, acc, d);
    for (int64_t i = 0; i < n; i++) y_rot[i] += acc[i];
    free(acc);
}

#define KVQ_TURBO_TRAIT_DEF(K, T)                                                                            \
    size_t kvq_##K##_row_bytes(int64_t n) { return n > 0 && n <= 65536 ? kvq_turbo_row_bytes(T, (int)n) : 0; } \
    void kvq_##K##_quantize_scalar(const float *x, void *dst, int64_t n) {                                   \
        quantize_rot(T, kvq_turbo_quantize_rot_scalar, x, dst, n);                                               \
    }                                                                                                        \
    void kvq_##K##_quantize(const float *x, void *dst, int64_t n) { quantize_rot(T, kvq_turbo_quantize_rot, x, dst, n); } \
    void kvq_##K##_dequantize(const void *src, float *y, int64_t n) {                                        \
        dequantize_rot(T, kvq_turbo_axpy_rot_scalar, src, y, n);                                             \
    }                                                                                                        \
    void kvq_##K##_dequantize_active(const void *src, float *y, int64_t n) {                                 \
        dequantize_rot(T, kvq_turbo_axpy_rot, src, y, n);                                                    \
    }                                                                                                        \
    float kvq_##K##_dot_scalar(const void *row, const float *x, int64_t n) {                                 \
        return dot_rot(T, kvq_turbo_dot_rot_scalar, row, x, n);                                              \
    }                                                                                                        \
    float kvq_##K##_dot(const void *row, const float *x, int64_t n) { return dot_rot(T, kvq_turbo_dot_rot, row, x, n); } \
    void kvq_##K##_axpy_scalar(float w, const void *row, float *y, int64_t n) {                              \
        axpy_rot(T, kvq_turbo_axpy_rot_scalar, w, row, y, n);                                                \
    }                                                                                                        \
    void kvq_##K##_axpy(float w, const void *row, float *y, int64_t n) { axpy_rot(T, kvq_turbo_axpy_rot, w, row, y, n); }

KVQ_TURBO_TRAIT_DEF(turbo2, KVQ_TURBO2)
KVQ_TURBO_TRAIT_DEF(turbo3, KVQ_TURBO3)
KVQ_TURBO_TRAIT_DEF(turbo4, KVQ_TURBO4)
KVQ_TURBO_TRAIT_DEF(turbo2_tcq, KVQ_TURBO2_TCQ)
KVQ_TURBO_TRAIT_DEF(turbo3_tcq, KVQ_TURBO3_TCQ)
KVQ_TURBO_TRAIT_DEF(turbo4_tcq, KVQ_TURBO4_TCQ)

void kvq_turbo_install_active(kvq_type_traits *table) {
#define INSTALL(TY, K)                                                                            \
    table[TY].quantize = kvq_##K##_quantize;                                                      \
    table[TY].dequantize = kvq_##K##_dequantize_active;                                           \
    table[TY].dot = kvq_##K##_dot;                                                                \
    table[TY].axpy = kvq_##K##_axpy;
    INSTALL(KVQ_TYPE_TURBO2, turbo2)
    INSTALL(KVQ_TYPE_TURBO3, turbo3)
    INSTALL(KVQ_TYPE_TURBO4, turbo4)
    INSTALL(KVQ_TYPE_TURBO2_TCQ, turbo2_tcq)
    INSTALL(KVQ_TYPE_TURBO3_TCQ, turbo3_tcq)
    INSTALL(KVQ_TYPE_TURBO4_TCQ, turbo4_tcq)
#undef INSTALL
}
