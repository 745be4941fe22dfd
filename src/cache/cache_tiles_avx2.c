/*
 * cache_tiles_avx2.c - AVX2/F16C helpers of the KVarN record kernels
 * (compiled with -mavx2 -mf16c; reached only through cache_tiles.c after
 * run-time detection).  Both give exactly the scalar path's floats: codes
 * are small integers and fp16 -> f32 is exact.
 *
 * Codes: eight b-bit codes fill exactly b bytes (little-endian bit stream,
 * value j at bits j*b).  Value j lies in the 32-bit window starting at
 * byte (j*b)/8, shifted right by (j*b)%8 (offset + b <= 15 bits).  One
 * group: broadcast 16 bytes from the group start into both lanes, gather
 * each value's window with a byte shuffle, shift per lane, mask, convert.
 * The 16-byte load reads past the group's b bytes: inside a record the
 * payload is always followed by its fp16 metadata (>= 320 bytes), so the
 * load never leaves the record.
 */
#include "cache_tiles_simd.h"

#if defined(__AVX2__)
#include "simd256.h"

typedef struct group_code { __m256i shuffle, shift, mask; } group_code;

static group_code group_code_for(int bits) {
    int8_t shuf[32];
    int32_t shift[8];
    for (int j = 0; j < 8; j++) {
        const int byte = j * bits / 8;
        for (int k = 0; k < 4; k++) shuf[4 * j + k] = (int8_t)(byte + k);   /* same in both 128-bit lanes */
        shift[j] = j * bits % 8;
    }
    group_code g;
    g.shuffle = _mm256_loadu_si256((const __m256i *)(const void *)shuf);
    g.shift = _mm256_loadu_si256((const __m256i *)(const void *)shift);
    g.mask = _mm256_set1_epi32((1 << bits) - 1);
    return g;
}

void kvq_tiles_codes_avx2(const uint8_t *tok, int width, int bits, float *out) {
    if (bits == 8) {
        for (int i = 0; i < width; i += 8) {
            const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(tok + i));
            _mm256_storeu_ps(out + i, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)));
        }
        return;
    }
    const group_code g = group_code_for(bits);
    for (int grp = 0; grp < width / 8; grp++) {
        const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(tok + grp * bits)));
        const __m256i win = _mm256_shuffle_epi8(bytes, g.shuffle);
        const __m256i v = _mm256_and_si256(_mm256_srlv_epi32(win, g.shift), g.mask);
        _mm256_storeu_ps(out + 8 * grp, _mm256_cvtepi32_ps(v));
    }
}

void kvq_tiles_halves_avx2(const uint8_t *src, int n, float *out) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, kvq_v8_load_f16(src + 2 * i));
    for (; i < n; i++) out[i] = kvq_half_to_float(kvq_rd16(src + 2 * i));
}

#else
void kvq_tiles_codes_avx2(const uint8_t *tok, int width, int bits, float *out) {
    (void)tok; (void)width; (void)bits; (void)out;
}
void kvq_tiles_halves_avx2(const uint8_t *src, int n, float *out) { (void)src; (void)n; (void)out; }
#endif
