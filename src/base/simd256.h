/*
 * simd256.h - the 8-float (AVX2 + FMA + F16C) primitives every *_avx2.c
 * file uses, written once: horizontal sum and max in one fixed order,
 * fp16 / bf16 / int8 loads as floats, lane masks for partial loads.
 * Include only from files compiled with the AVX2 flags (the Makefile's
 * *_avx2.c / *_avx512.c), reached after run-time detection (kvq_isa_best).
 */
#ifndef KVQ_SIMD256_H
#define KVQ_SIMD256_H

#if defined(__AVX2__)
#include <immintrin.h>
#include <stdint.h>

/* Sum of the 8 lanes by pairwise halves (128, 64, 32 bits): a fixed order,
 * the same wherever it is used. */
static inline float kvq_v8_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Max of the 8 lanes, the same halving order. */
static inline float kvq_v8_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes j < n all ones (n >= 8: every lane). */
static inline __m256i kvq_v8_lanes_below(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 8 floats at p, lanes >= n read as 0 and not touched (no fault past the end). */
static inline __m256 kvq_v8_load_below(const float *p, int n) {
    if (n >= 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, kvq_v8_lanes_below(n));
}

/* 8 fp16 / bf16 values at p as floats (both exact). */
static inline __m256 kvq_v8_load_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256 kvq_v8_load_bf16(const void *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* The low 8 signed bytes of b as floats. */
static inline __m256 kvq_v8_s8_to_f32(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }

#endif
#endif
