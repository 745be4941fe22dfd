/* turbo_traits.h - the TurboQuant types as rows of the trait table
 * (src/format/types.c): per-type kernels in the format's rotated domain, built
 * on src/format/turbo.h (see turbo_traits.c). */
#ifndef KVQ_TURBO_TRAITS_H
#define KVQ_TURBO_TRAITS_H

#include "kvq_internal.h"
#include "turbo.h"

#define KVQ_TURBO_TRAIT_DECL(K)                                                      \
    size_t kvq_##K##_row_bytes(int64_t n);                                           \
    void kvq_##K##_quantize_scalar(const float *x_rot, void *dst, int64_t n);        \
    void kvq_##K##_quantize(const float *x_rot, void *dst, int64_t n);               \
    void kvq_##K##_dequantize(const void *src, float *y_rot, int64_t n);             \
    void kvq_##K##_dequantize_active(const void *src, float *y_rot, int64_t n);      \
    float kvq_##K##_dot_scalar(const void *row, const float *x_rot, int64_t n);      \
    float kvq_##K##_dot(const void *row, const float *x_rot, int64_t n);             \
    void kvq_##K##_axpy_scalar(float w, const void *row, float *y_rot, int64_t n);   \
    void kvq_##K##_axpy(float w, const void *row, float *y_rot, int64_t n);

KVQ_TURBO_TRAIT_DECL(turbo2)
KVQ_TURBO_TRAIT_DECL(turbo3)
KVQ_TURBO_TRAIT_DECL(turbo4)
KVQ_TURBO_TRAIT_DECL(turbo2_tcq)
KVQ_TURBO_TRAIT_DECL(turbo3_tcq)
KVQ_TURBO_TRAIT_DECL(turbo4_tcq)

/* Replace the turbo rows' scalar kernels by the dispatching ones (AVX2
 * where the CPU has it, decided inside src/format/turbo.c). */
void kvq_turbo_install_active(kvq_type_traits *table);

/* The turbo type of a table row (KVQ_TURBO_COUNT for the others). */
kvq_turbo_type kvq_turbo_of(kvq_type ty);

/* n_rows rows of a trellis type, in its rotated domain, together (the
 * active level's search for rows in pairs, kvq_turbo_quantize_rows): the
 * bytes of n_rows quantize calls.  False, nothing written, where that
 * does not apply (not a trellis type, n not a whole row of blocks,
 * n_rows < 1, a level without it). */
bool kvq_turbo_quantize_rot_rows(kvq_type ty, int n_rows, const float *const *x_rot, void *const *dst, int64_t n);

/* The cache's rotation of a turbo side: x[head_dim] -> out[rot_dim], and
 * acc[rot_dim] -> out[head_dim] (the inverse). */
int  kvq_turbo_store_dim(int head_dim);
void kvq_turbo_rotate_row(const float *x, float *out, int head_dim);
void kvq_turbo_unrotate_row(const float *acc, float *out, int head_dim);

#endif
