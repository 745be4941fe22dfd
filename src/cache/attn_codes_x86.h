/* attn_codes_x86.h - attn_codes.inc's integer code primitives with AVX2
 * (a block's 32 codes in one 256-bit register), shared by the AVX2 and
 * AVX-512 instances (attn_block_avx2.c, attn_block_avx512.c, both built
 * with AVX2); the code planes are the row kernels' (simd_x86_codes.h). */
#ifndef KVQ_ATTN_CODES_X86_H
#define KVQ_ATTN_CODES_X86_H

#include "simd_x86_codes.h"

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define VB __m256i

static inline __m256i vb_load(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }

/* The code planes are read by the block kernels' decoders (one set for
 * every AVX2 file, src/format/simd_x86_codes.h): 4-bit plane (low nibbles
 * in the low half, high in the high half), 2-bit plane (byte j of 64-bit
 * lane k holds bits 2k.. of byte j), 1-bit plane (code j = bit j). */
#define vb_nib(p) plane4(p)
#define vb_crumb(p) plane2(p)
#define vb_bit(p) plane1(p, 1)

/* b's codes are below 2^(8-s): the 16-bit shift carries nothing across bytes. */
#define vb_or_shl(a, b, s) _mm256_or_si256((a), _mm256_slli_epi16((b), (s)))
#define vb_sub(a, k) _mm256_sub_epi8((a), _mm256_set1_epi8((char)(k)))

static inline __m256i vb_lut(__m256i a, const int8_t *tbl) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)tbl)), a);
}

/* The codes as int16: 16 in each of two registers. */
typedef struct vw_x86 { __m256i lo, hi; } vw_x86;
#define VW vw_x86
static inline vw_x86 vb_widen(__m256i c) {
    const vw_x86 w = { _mm256_cvtepi8_epi16(_mm256_castsi256_si128(c)), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(c, 1)) };
    return w;
}

/* A 4-bit plane widened to int16 in one step: the bytes zero-extended,
 * then the low nibble masked and the high one shifted down. */
static inline vw_x86 vw_nib(const uint8_t *p) {
    const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    const vw_x86 w = { _mm256_and_si256(x, _mm256_set1_epi16(15)), _mm256_srli_epi16(x, 4) };
    return w;
}
static inline vw_x86 vw_s8(const uint8_t *p) {
    const vw_x86 w = { _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p)),
                       _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 16))) };
    return w;
}

/* The int8 query (attn_query.q8): a block's 32 values, int8 levels
 * stored as int16, packed to 32 int8 in order. */
static inline __m256i vb_query8(const int16_t *q) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)q);
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(q + 16));
    return _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}

/* 8 int32 partial sums of one key (pairs of int16 products by madd:
 * |pair| <= 2 * 128 * 32767 fits int32). */
static inline __m256i vw_partial(vw_x86 c, __m256i q_lo, __m256i q_hi) {
    return _mm256_add_epi32(_mm256_madd_epi16(c.lo, q_lo), _mm256_madd_epi16(c.hi, q_hi));
}

/* The 4 keys' sums by a transposing add tree: two levels of hadd leave
 * keys 0-3 in each 128-bit lane, lane 0 their low halves' sums, lane 1
 * their high halves'; the lanes are then added. */
static inline void vw_dot4(const vw_x86 *c, const int16_t *qi, int32_t sub, int32_t *s) {
    const __m256i q_lo = _mm256_loadu_si256((const __m256i *)(const void *)qi);
    const __m256i q_hi = _mm256_loadu_si256((const __m256i *)(const void *)(qi + 16));
    const __m256i a = _mm256_hadd_epi32(vw_partial(c[0], q_lo, q_hi), vw_partial(c[1], q_lo, q_hi));
    const __m256i b = _mm256_hadd_epi32(vw_partial(c[2], q_lo, q_hi), vw_partial(c[3], q_lo, q_hi));
    const __m256i e = _mm256_hadd_epi32(a, b);
    const __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(e), _mm256_extracti128_si256(e, 1));
    _mm_storeu_si128((__m128i *)(void *)s, _mm_sub_epi32(sum, _mm_set1_epi32(sub)));
}

#endif
