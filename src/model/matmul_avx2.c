/* matmul_avx2.c - the gemm tile kernel with AVX2 + FMA (8 lanes): 4 weight
 * rows x 3 tokens = 12 accumulators + 3 x + 1 w = the 16 ymm registers. */
#include "matmul.h"
#include "vec8.h"

#include <immintrin.h>

#define TILE_ROWS 4
#define TILE_TOKS 3
#define TILE_FN tile_avx2

#include "gemm_tile.inc"

kvq_gemm_tile kvq_gemm_tile_avx2(void) { return (kvq_gemm_tile){ tile_avx2, TILE_ROWS, TILE_TOKS }; }
