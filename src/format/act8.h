/* act8.h - int8 activations for the products of quantised weights (the
 * option kvq_ctx_set_activations(ctx, KVQ_ACT_INT8), default off).
 *
 * An activation row x of n values is quantised once per product into
 * blocks of the weight type's width:
 *   q8_0, q4_0 (32-value blocks):  kvq_xq32  { d, q[32] }
 *   q4_K, q5_K, q6_K (256):        kvq_xq256 { d, sum[16], q[256] }
 * with x[i] ~ d * q[i], d = max|x| / 127, q = round(x / d) in [-127, 127]
 * (ties to even), sum[g] = the sum of q over values 16g..16g+15 (what the
 * K-quant mins and q6_K's -32 offset multiply).  A block whose largest
 * |x| is below KVQ_ACT8_TINY is all zeros with d = 0; a block holding a
 * NaN or an infinity has d = NaN and zero codes, so every dot it enters
 * is NaN, never a plausible finite number.
 *
 * The dot of a weight row with such a row sums code x int8 products
 * exactly in int32, then combines them in float in one fixed order that
 * every kernel level shares, so scalar, AVX2 and AVX-512 (VNNI) give the
 * same bits.  The order (act8.c, scalar_* are its definition): 8 float
 * partials acc[0..7]; lane l of a 32-value step takes the exact int32 sum
 * of its values 4l..4l+3 (what pmaddubsw+pmaddwd and vpdpbusd both make);
 *   32-blocks: per block, acc[l] = acc[l] + (dw * dx) * (float)lane_l;
 *   K-quants:  per super-block the lanes of all its sub-blocks, each
 *              weighted by its integer sub-scale, add up in int32 to S_l,
 *              the min / offset terms to one int32 M;
 *              acc[l] = acc[l] + (d * dx) * (float)S_l,
 *              macc = macc + (dmin * dx) * (float)M   (q6_K: (d * dx) * 32M');
 * result = hsum(acc) - macc with hsum the halving order of kvq_v8_hsum:
 * ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).  Products and sums are separate
 * roundings (no fused multiply-add) at every level.
 *
 * Error against the f32 dot: each x[i] moves by at most d/2 (rounding to
 * the nearest of 255 levels), so |dot8 - dot32| <= sum_i |w_i| * d_i / 2
 * plus float rounding (a few ulp of sum |w_i x_i|); tests/test_act8.c
 * checks that bound. */
#ifndef KVQ_ACT8_H
#define KVQ_ACT8_H

#include "kvq_internal.h"
#include "quant_kquants.h"   /* kvq_kq_scales_words */

#define KVQ_ACT8_TINY 1e-30f

typedef struct kvq_xq32 { float d; int8_t q[32]; } kvq_xq32;
typedef struct kvq_xq256 { float d; int16_t sum[16]; int8_t q[256]; } kvq_xq256;

/* The kernel levels of the int8 dots, in order; VNNI is the AVX-512 level
 * on a CPU with AVX512_VNNI (vpdpbusd / vpdpwssd) on 256-bit vectors,
 * VNNI512 the same with the integer work of the K-quant and q4_0 decode
 * dots in 512-bit registers (the one a VNNI CPU runs; VNNI stays as a second kernel the
 * tests compare).  An AVX-512 CPU without VNNI runs the AVX2 kernels. */
typedef enum kvq_act8_level {
    KVQ_ACT8_SCALAR = 0, KVQ_ACT8_AVX2, KVQ_ACT8_VNNI, KVQ_ACT8_VNNI512, KVQ_ACT8_LEVELS
} kvq_act8_level;
const char *kvq_act8_level_name(kvq_act8_level level);

/* Dot of a weight row (n values, whole blocks) with a quantised row. */
typedef float (*kvq_act8_dot_fn)(const void *row, const void *xq, int64_t n);

/* Values per activation block for weights of type t: 32, 256, or 0 when
 * t has no int8 path (it keeps f32 activations). */
int kvq_act8_block(kvq_type t);
/* Bytes of a quantised row of n values for weights of type t (0: none);
 * kvq_act8_row_bytes_max: the most any covered type needs. */
size_t kvq_act8_row_bytes(kvq_type t, int64_t n);
size_t kvq_act8_row_bytes_max(int64_t n);
/* x (n values, a whole number of t's blocks) into xq; the same bytes at
 * every level (one scalar routine). */
void kvq_act8_quantize(kvq_type t, const float *x, int64_t n, void *xq);
/* The dot of the level this process runs (KVQ_FORCE_SCALAR / _AVX2
 * honoured), NULL when t is not covered. */
kvq_act8_dot_fn kvq_act8_dot(kvq_type t);
/* The dot of a given level; NULL when t is not covered or this CPU lacks
 * the level (tests compare every level it has with the scalar one). */
kvq_act8_dot_fn kvq_act8_dot_level(kvq_type t, kvq_act8_level level);
kvq_act8_level kvq_act8_level_best(void);

/* Prefill: one weight row against 4 quantised token rows, out[t] with the
 * bits of the level's dot(row, xq[t], n) (the row's codes are made once
 * for the 4).  NULL where a level has none: call the dot per token. */
typedef void (*kvq_act8_dot4_fn)(const void *row, const void *const *xq, int64_t n, float *out);
kvq_act8_dot4_fn kvq_act8_dot4(kvq_type t);
kvq_act8_dot4_fn kvq_act8_dot4_level(kvq_type t, kvq_act8_level level);

/* The SIMD tables (act8_avx2.c, act8_vnni.c, act8_vnni512.c): kernels per type. */
void kvq_act8_install_avx2(kvq_act8_dot_fn table[KVQ_TYPE_COUNT], kvq_act8_dot4_fn table4[KVQ_TYPE_COUNT]);
void kvq_act8_install_vnni(kvq_act8_dot_fn table[KVQ_TYPE_COUNT], kvq_act8_dot4_fn table4[KVQ_TYPE_COUNT]);
void kvq_act8_install_vnni512(kvq_act8_dot_fn table[KVQ_TYPE_COUNT], kvq_act8_dot4_fn table4[KVQ_TYPE_COUNT]);

/* The fixed final sum of the 8 partials (kvq_v8_hsum's order). */
static inline float kvq_act8_hsum(const float a[8]) {
    const float h0 = a[0] + a[4], h1 = a[1] + a[5], h2 = a[2] + a[6], h3 = a[3] + a[7];
    const float g0 = h0 + h2, g1 = h1 + h3;
    return g0 + g1;
}

#endif
