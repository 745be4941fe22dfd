/* matmul_avx512.c - the gemm tile kernel with AVX-512 (16 lanes): 4 weight
 * rows x 6 tokens = 24 accumulators + 6 x + 1 w of the 32 zmm registers. */
#include "matmul.h"
#include "vec16.h"

#include <immintrin.h>

#define TILE_ROWS 4
#define TILE_TOKS 6
#define TILE_FN tile_avx512

#include "gemm_tile.inc"

kvq_gemm_tile kvq_gemm_tile_avx512(void) {
    return (kvq_gemm_tile){ tile_avx512, TILE_ROWS, TILE_TOKS };
}
