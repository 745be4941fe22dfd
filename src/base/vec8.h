/* vec8.h - the kernel templates' primitive set with AVX2 + FMA + F16C
 * (8 floats; the set is described in vec1.h).  Include only from files
 * compiled with the AVX2 flags. */
#ifndef KVQ_VEC8_H
#define KVQ_VEC8_H

#include "simd256.h"

#define VF __m256
#define VL 8
#define VPB 4
#define vzero() _mm256_setzero_ps()
#define vset1(f) _mm256_set1_ps(f)
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vadd(a, b) _mm256_add_ps(a, b)
#define vsub(a, b) _mm256_sub_ps(a, b)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmin_hi(hi, x) _mm256_min_ps(hi, x)        /* second operand on NaN */
#define vmax_skip(x, m) _mm256_max_ps(x, m)
#define vzero_below(x, lo, y) _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y)
#define vpow2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define vhsum(v) kvq_v8_hsum(v)
#define vhmax(v) kvq_v8_hmax(v)
#define vload_h(p) kvq_v8_load_f16(p)
#define vload_bf(p) kvq_v8_load_bf16(p)
#define vload_w(p, n) kvq_v8_load_below(p, n)

#endif
