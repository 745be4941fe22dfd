/* kquants_xperm_x86.h - what the AVX2 and AVX-512 kernels on laid-out
 * activations (kquants_xperm_avx2.c, kquants_xperm_avx512.c) share: the
 * q4_K super-block scales decoded with vector operations.  Include only
 * from files compiled with AVX2 or wider (the Makefile's ISA flags). */
#ifndef KVQ_KQUANTS_XPERM_X86_H
#define KVQ_KQUANTS_XPERM_X86_H

#include <immintrin.h>

/* The 6-bit sc_0..7 (bytes 0-7) and m_0..7 (bytes 8-15) of the q4_K block
 * at b, by kvq_kq_scales_words's rule on the three words w0-w2 of
 * `scales`, as four 32-bit lanes at once:
 *   sc_0..3 = w0 & 0x3f..      sc_4..7 = (w2 & 0x0f..) | (w0 >> 6 & 3..) << 4
 *   m_0..3  = w1 & 0x3f..      m_4..7  = (w2 >> 4 & 0x0f..) | (w1 >> 6 & 3..) << 4
 * ((w >> 6 & 3) << 4 is (w >> 2) & 0x30 per byte). */
static inline __m128i kq_q4_K_scale_bytes(const uint8_t *b) {
    const __m128i v = _mm_loadu_si128((const __m128i *)b);   /* d|dmin, w0, w1, w2 */
    const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4)),
                                      _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)), 2),
                                      _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm_or_si128(low, top);
}

/* The fp16 value at p as a float (F16C: no branches per block). */
static inline float kq_half_at(const uint8_t *p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(kvq_rd16(p)))); }

/* d and dmin of the q4_K block at b as floats 0 and 1 (F16C). */
static inline __m128 kq_q4_K_d_dmin(const uint8_t *b) {
    return _mm_cvtph_ps(_mm_cvtsi32_si128((int)kvq_rd32(b)));
}

#endif
