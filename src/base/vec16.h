/* vec16.h - the kernel templates' primitive set with AVX-512 F/BW/VL/DQ
 * (16 floats; the set is described in vec1.h).  Include only from files
 * compiled with the AVX-512 flags. */
#ifndef KVQ_VEC16_H
#define KVQ_VEC16_H

#include "simd512.h"

#define VF __m512
#define VL 16
#define VPB 2
#define vzero() _mm512_setzero_ps()
#define vset1(f) _mm512_set1_ps(f)
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vadd(a, b) _mm512_add_ps(a, b)
#define vsub(a, b) _mm512_sub_ps(a, b)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmin_hi(hi, x) _mm512_min_ps(hi, x)        /* second operand on NaN */
#define vmax_skip(x, m) _mm512_max_ps(x, m)
#define vzero_below(x, lo, y) _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y)
#define vpow2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define vhsum(v) kvq_v16_hsum(v)
#define vhmax(v) kvq_v16_hmax(v)
#define vload_h(p) kvq_v16_load_f16(p)
#define vload_bf(p) kvq_v16_load_bf16(p)
#define vload_w(p, n) kvq_v16_load_below(p, n)

#endif
