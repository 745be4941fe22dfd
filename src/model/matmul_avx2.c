/* matmul_avx2.c - the gemm tile kernel with AVX2 + FMA (8 lanes): 4 weight
 * rows x 3 tokens = 12 accumulators + 3 x + 1 w = the 16 ymm registers. */
#include "matmul.h"

#include <immintrin.h>

#define VF __m256
#define VL 8
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define TILE_ROWS 4
#define TILE_TOKS 3
#define TILE_FN tile_avx2

static inline float vhsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#include "gemm_tile.inc"

kvq_gemm_tile kvq_gemm_tile_avx2(void) { return (kvq_gemm_tile){ tile_avx2, TILE_ROWS, TILE_TOKS }; }
