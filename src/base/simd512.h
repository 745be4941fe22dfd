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

/* The lane sums of 4 vectors in one tree, lane i of the result = vector
 * i's: the 128-bit quarters of a and b folded pairwise (q0 + q2, q1 +
 * q3), of c and d the same, then the two halves of each, then the 4
 * lanes of each quarter, in pairs ((x0 + x1) + (x2 + x3)); every position
 * summed alike (a scalar twin: src/format/turbo_tcq64.c, lanes_sum). */
static inline __m128 kvq_v16_hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(first, s));
}

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
