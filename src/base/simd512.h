/*
 * simd512.h - the 16-float (AVX-512 F/BW/VL/DQ) primitives every
 * *_avx512.c file uses, written once (see simd256.h for the 8-float set).
 * Include only from files compiled with the AVX-512 flags.
 */
#ifndef KVQ_SIMD512_H
#define KVQ_SIMD512_H

#if defined(__AVX512F__)
#include <immintrin.h>
#include <stdint.h>

static inline float kvq_v16_hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
static inline float kvq_v16_hmax(__m512 v) { return _mm512_reduce_max_ps(v); }

/* 16 fp16 / bf16 values at p as floats (both exact). */
static inline __m512 kvq_v16_load_f16(const void *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512 kvq_v16_load_bf16(const void *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

/* 16 floats at p, lanes >= n read as 0 and not touched (no fault past the end). */
static inline __m512 kvq_v16_load_below(const float *p, int n) {
    if (n >= 16) return _mm512_loadu_ps(p);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (n > 0 ? n : 0)) - 1u), p);
}

#endif
#endif
