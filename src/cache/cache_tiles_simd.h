/* cache_tiles_simd.h - SIMD helpers of the KVarN record kernels
 * (src/cache/cache_tiles_avx2.c); call only at kvq_isa_best() >= KVQ_ISA_AVX2
 * (AVX2, FMA and F16C).  The scalar equivalents live in cache_tiles.c. */
#ifndef KVQ_CACHE_TILES_SIMD_H
#define KVQ_CACHE_TILES_SIMD_H

#include "kvq_internal.h"

/* Scalar versions (the reference of the tests). */
void kvq_tiles_codes_scalar(const uint8_t *tok, int width, int bits, float *out);
void kvq_tiles_halves_scalar(const uint8_t *src, int n, float *out);

/* One token's `width` b-bit codes (width a multiple of 8) as floats. */
void kvq_tiles_codes_avx2(const uint8_t *tok, int width, int bits, float *out);
/* n fp16 values as floats. */
void kvq_tiles_halves_avx2(const uint8_t *src, int n, float *out);

#endif
