/* attn_block_avx2.c - the chunked attention kernels (attn_block.inc) with
 * AVX2 + FMA (8 lanes). */
#include "attn_block.h"

#include <immintrin.h>
#include <math.h>

#define VF __m256
#define VL 8
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
#define BLOCK_LEVEL "avx2"
#define BLOCK_TILE kvq_gemm_tile_avx2
#define BLOCK_KERNELS g_block_avx2

/* Pairwise halves: a fixed order. */
static inline float vhsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vhmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#include "attn_block.inc"

const attn_block_kernels *attn_block_avx2(void) { return &g_block_avx2; }
