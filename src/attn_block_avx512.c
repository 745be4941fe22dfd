/* attn_block_avx512.c - the chunked attention kernels (attn_block.inc)
 * with AVX-512 (16 lanes). */
#include "attn_block.h"

#include <immintrin.h>
#include <math.h>

#define VF __m512
#define VL 16
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
#define vhsum(v) _mm512_reduce_add_ps(v)
#define vhmax(v) _mm512_reduce_max_ps(v)
#define BLOCK_LEVEL "avx512"
#define BLOCK_TILE kvq_gemm_tile_avx512
#define BLOCK_KERNELS g_block_avx512

#include "attn_block.inc"

const attn_block_kernels *attn_block_avx512(void) { return &g_block_avx512; }
