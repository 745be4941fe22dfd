/*
 * vec1.h, vec8.h, vec16.h - the primitive set every kernel template is
 * written in (attn_block.inc, attn_codes.inc, simd_x86_kernels.h), one
 * header per vector width: scalar (1 float, the reference instance that
 * runs on every machine), AVX2 (8), AVX-512 (16).  A file that
 * instantiates a template includes exactly one of them.
 *
 *   VF, VL, VPB              vector type, floats per vector, vectors per
 *                            32-value block
 *   vzero() vset1(f) vload(p) vstore(p, v) vadd vsub vmul
 *   vfma(a, b, c)            a*b + c
 *   vmin_hi(hi, x)           min, x returned when x is NaN
 *   vmax_skip(x, m)          max, m returned when x is NaN
 *   vzero_below(x, lo, y)    x < lo ? 0 : y (NaN x keeps y)
 *   vpow2(n)                 2^n for integral n in [-126, 127] (anything
 *                            else may give any value: callers mask it)
 *   vhsum(v) vhmax(v)        horizontal sum (one fixed order) and max
 *   vload_h(p) vload_bf(p)   VL fp16 / bf16 values at p as floats
 *   vload_w(p, n)            VL floats at p, lanes >= n read as 0 (not touched)
 */
#ifndef KVQ_VEC1_H
#define KVQ_VEC1_H

#include "kvq_internal.h"

#define VF float
#define VL 1
#define VPB 32
#define vzero() 0.0f
#define vset1(f) (f)
#define vload(p) (*(p))
#define vstore(p, v) (*(p) = (v))
#define vadd(a, b) ((a) + (b))
#define vsub(a, b) ((a) - (b))
#define vmul(a, b) ((a) * (b))
#define vfma(a, b, c) ((a) * (b) + (c))
#define vmin_hi(hi, x) ((x) > (hi) ? (hi) : (x))
#define vmax_skip(x, m) ((x) > (m) ? (x) : (m))
#define vzero_below(x, lo, y) ((x) < (lo) ? 0.0f : (y))
#define vhsum(v) (v)
#define vhmax(v) (v)
#define vload_h(p) kvq_half_to_float(*(p))
#define vload_bf(p) kvq_bfloat_to_float(*(p))
#define vload_w(p, n) ((n) > 0 ? *(p) : 0.0f)

/* 2^n from the exponent bits; n outside [-126, 127] (or NaN, which only
 * reaches here with a NaN x) returns 1, whose product is masked or NaN. */
static inline float vpow2(float n) {
    if (!(n >= -126.0f && n <= 127.0f)) return 1.0f;
    return kvq_bits_f32((uint32_t)((int32_t)n + 127) << 23);
}

#endif
