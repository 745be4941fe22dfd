/*
 * simd_x86_codes.h - decoders from a block's packed codes to its 32 codes
 * as signed bytes in element order (one __m256i), for every 32-value block
 * layout of quant_block.c / quant_iq4nl.c.  Shared by the AVX2 and AVX-512
 * files (both compiled with AVX2 enabled): the row kernels'
 * (simd_x86_kernels.h) and the attention's fused ones (their plane reads,
 * src/cache/attn_codes_x86.h), so each plane is decoded by one function.
 *
 * A q*_0 code is returned with its offset removed (q - 2^(bits-1)), an
 * iq4_nl index as its codebook value, so that every block reads
 *   value_j = d * code_j  (+ m for the q*_1 types).
 */
#ifndef KVQ_SIMD_X86_CODES_H
#define KVQ_SIMD_X86_CODES_H

#include "quant_block.h"

#include <immintrin.h>
#include <string.h>

static inline __m256i codes_join(__m128i lo, __m128i hi) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* 4-bit plane, 16 bytes: byte j = code[j] | code[j+16] << 4. */
static inline __m256i plane4(const uint8_t *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p), low = _mm_set1_epi8(0x0f);
    return codes_join(_mm_and_si128(b, low), _mm_and_si128(_mm_srli_epi16(b, 4), low));
}

/* 2-bit plane, 8 bytes: element i is bits 2*(i/8) of byte i%8. */
static inline __m256i plane2(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    const __m256i all = _mm256_set1_epi64x(v);                  /* quarter q holds bytes 0..7 */
    const __m256i shifted = _mm256_srlv_epi64(all, _mm256_setr_epi64x(0, 2, 4, 6));
    return _mm256_and_si256(shifted, _mm256_set1_epi8(3));
}

/* 1-bit plane, little-endian uint32, bit j = element j; returns `value`
 * in the bytes whose bit is set, 0 elsewhere. */
static inline __m256i plane1(const uint8_t *p, char value) {
    int32_t v;
    memcpy(&v, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(v),   /* byte i <- byte i/8 */
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL); /* bit i%8 */
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(value));
}

static inline __m256i center(__m256i codes, int bits) {
    return _mm256_sub_epi8(codes, _mm256_set1_epi8((char)(1 << (bits - 1))));
}

/* Block layouts: header (2 bytes d, or 4 bytes d and m), then the planes
 * narrowest first, the widest plane holding the low bits. */
static inline __m256i codes6(const uint8_t *p) { return _mm256_or_si256(_mm256_slli_epi16(plane2(p), 4), plane4(p + 8)); }
static inline __m256i codes5(const uint8_t *p) { return _mm256_or_si256(plane1(p, 0x10), plane4(p + 4)); }
static inline __m256i codes3(const uint8_t *p) { return _mm256_or_si256(plane1(p, 0x04), plane2(p + 4)); }

static inline __m256i codes_q8_0(const uint8_t *b) { return _mm256_loadu_si256((const __m256i *)(b + 2)); }
static inline __m256i codes_q6_0(const uint8_t *b) { return center(codes6(b + 2), 6); }
static inline __m256i codes_q6_1(const uint8_t *b) { return codes6(b + 4); }
static inline __m256i codes_q5_0(const uint8_t *b) { return center(codes5(b + 2), 5); }
static inline __m256i codes_q5_1(const uint8_t *b) { return codes5(b + 4); }
static inline __m256i codes_q4_0(const uint8_t *b) { return center(plane4(b + 2), 4); }
static inline __m256i codes_q4_1(const uint8_t *b) { return plane4(b + 4); }
static inline __m256i codes_q3_0(const uint8_t *b) { return center(codes3(b + 2), 3); }
static inline __m256i codes_q3_1(const uint8_t *b) { return codes3(b + 4); }
static inline __m256i codes_q2_0(const uint8_t *b) { return center(plane2(b + 2), 2); }
static inline __m256i codes_q2_1(const uint8_t *b) { return plane2(b + 4); }
static inline __m256i codes_iq4_nl(const uint8_t *b) {
    const __m256i book = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvq_iq4nl_values));
    return _mm256_shuffle_epi8(book, plane4(b + 2));
}

#endif
