/* attn_kvarn_x86.h - attn_kvarn.inc's code decoder with AVX2 (16 codes
 * of a block in one 256-bit register of int16), shared by the AVX2 and
 * AVX-512 instances (attn_block_avx2.c, attn_block_avx512.c).
 *
 * Code j of a token (b-bit little-endian bit stream) lies in the 16-bit
 * window starting at byte (j*b)/8, at bit offset o = (j*b)%8, and
 * o + b <= 15.  One half-block of 16 codes (2b bytes): its 16 bytes are
 * broadcast into both 128-bit lanes, a byte shuffle gathers each code's
 * window into its 16-bit lane, a multiply by 2^(16-b-o) shifts the code
 * to the top of the lane (dropping the bits above it) and a shift right
 * by 16-b brings it down: 4 instructions per 16 codes, any b.  8-bit codes
 * are bytes, zero-extended. */
#ifndef KVQ_ATTN_KVARN_X86_H
#define KVQ_ATTN_KVARN_X86_H

#include "attn_codes_x86.h"

typedef struct kvd_x86 { __m256i shuffle, mul; } kvd_x86;
#define KVD kvd_x86

static inline __attribute__((always_inline)) kvd_x86 kvd_make(const int bits) {
    int8_t shuf[32];
    int16_t mul[16];
    for (int j = 0; j < 16; j++) {
        const int byte = j * bits / 8, off = j * bits % 8;
        shuf[2 * j] = (int8_t)byte;          /* the lanes of the high half index the */
        shuf[2 * j + 1] = (int8_t)(byte + 1); /* same 16 bytes, broadcast            */
        mul[j] = (int16_t)(1 << (16 - bits - off));
    }
    kvd_x86 d;
    d.shuffle = _mm256_loadu_si256((const __m256i *)(const void *)shuf);
    d.mul = _mm256_loadu_si256((const __m256i *)(const void *)mul);
    return d;
}

static inline __attribute__((always_inline)) __m256i kvarn_half(const kvd_x86 *d, const uint8_t *p, const int bits) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i win = _mm256_shuffle_epi8(bytes, d->shuffle);
    return _mm256_srli_epi16(_mm256_mullo_epi16(win, d->mul), 16 - bits);
}

static inline __attribute__((always_inline)) vw_x86 vw_kvarn(const kvd_x86 *d, const uint8_t *p, const int bits) {
    vw_x86 c;
    if (bits == 8) {
        c.lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
        c.hi = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 16)));
        return c;
    }
    c.lo = kvarn_half(d, p, bits);
    c.hi = kvarn_half(d, p + 2 * bits, bits);
    return c;
}

/* For the K dot products 4-bit codes come nibble-wise (vw_nib: byte j's
 * low nibble, channel 2j, in lane j, its high nibble in lane 16 + j):
 * 3 instructions per block instead of 8; fold_query places qi alike. */
#define KVARN_NIB4 1
static inline __attribute__((always_inline)) vw_x86 vw_kvarn_k(const kvd_x86 *d, const uint8_t *p, const int bits) {
    return bits == 4 ? vw_nib(p) : vw_kvarn(d, p, bits);
}

#endif
