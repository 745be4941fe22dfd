/* act8_vnni512.c - the VNNI int8-activation dots (act8_dot.inc) with the
 * integer work of the K-quant decode dots in 512-bit registers: each
 * instruction takes two 32-value sub-blocks, the lower 256 bits the even
 * one and the upper the odd one, and the super-block's 16 int32 lanes are
 * folded to the 8 the float side uses by exact integer adds (lane l of
 * both halves is lane l of a 32-value step, and the scalar S_l sums all
 * steps in int32, so the order of the adds changes nothing).  The float
 * side, the prefill and the q8_0 kernels are act8_dot.inc's as they
 * stand (q4_0's too, but for the integers of a pair of blocks below), so
 * every output has the bits of the other levels.  Compiled with
 * -mavx512vnni (the Makefile's *_vnni*.c rule); reached only when
 * kvq_cpu_features() has avx512 (F, BW, VL, DQ) and avx512vnni. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline __m256i a8_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
static inline __m256i a8_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

/* act8_dot.inc's kernels, with the K-quant integer parts defined below */
#define A8_KQ_LANES
#define A8_PAIR_Q4_0
#define A8_INSTALL kvq_act8_install_vnni512
#include "act8_dot.inc"

/* 32 bytes at p in both halves. */
static inline __m512i a8_bcast32(const uint8_t *p) { return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)); }

/* The 16 int32 lanes of two steps folded to one step's 8 (exact). */
static inline __m256i a8_fold(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* Q4_0, two blocks: each one's 16 bytes in two 128-bit lanes, the upper
 * one shifted by 4, give its codes u = c + 8 (0..15, a8_codes_q4_0's
 * order); a lane's sum of (u - 8) * x is vpdpbusd(u, x) - vpdpbusd(8, x),
 * both exact. */
static inline void a8_pair_q4_0(const uint8_t *b, const kvq_xq32 *x, __m256i l[2]) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2)))),
                                         _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + 2 + KVQ_BYTES_Q4_0))), 1);
    const __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(q, (__mmask32)0xff00ff00u, q, 4), _mm512_set1_epi8(0x0f));
    const __m512i xv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[0].q)),
                                          _mm256_loadu_si256((const __m256i *)x[1].q), 1);
    const __m512i zero = _mm512_setzero_si512();
    const __m512i v = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, u, xv), _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), xv));
    l[0] = _mm512_castsi512_si256(v);
    l[1] = _mm512_extracti64x4_epi64(v, 1);
}

/* The 12 scale bytes of a Q4_K / Q5_K super-block as 16: sc0..3, m0..3,
 * sc4..7, m4..7 (kvq_kq_scales_words's rule on two 64-bit words: the low
 * 6 bits of bytes 0..7, then the nibbles of bytes 8..11 with the top two
 * bits of bytes 0..7 above them). */
static inline __m128i a8_scales_q45_K(const uint8_t *b) {
    uint64_t w01;
    uint32_t w2;
    memcpy(&w01, b + 4, sizeof w01);
    memcpy(&w2, b + 12, sizeof w2);
    const uint64_t lo = w01 & 0x3f3f3f3f3f3f3f3fu;
    const uint64_t hi = (((uint64_t)w2 | (uint64_t)w2 << 28) & 0x0f0f0f0f0f0f0f0fu) | ((w01 >> 6) & 0x0303030303030303u) << 4;
    return _mm_set_epi64x((long long)hi, (long long)lo);
}

/* pshufb indices into a8_scales_q45_K's 16 bytes (in every 128-bit lane)
 * making int16 words (0x80: a zero high byte): k_pick45[p] sub-block
 * 2p's scale in the lower 256 bits, 2p + 1's in the upper; k_mins45 the
 * min of sub-block g/2 in word g (what multiplies x->sum[g]).  Loaded
 * from memory, not rebuilt in registers on every call. */
#define A8_W16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
static const _Alignas(64) uint16_t k_pick45[4][32] = {
    { A8_W16(0x8000), A8_W16(0x8001) }, { A8_W16(0x8002), A8_W16(0x8003) },
    { A8_W16(0x8008), A8_W16(0x8009) }, { A8_W16(0x800a), A8_W16(0x800b) },
};
static const _Alignas(32) uint16_t k_mins45[16] = { 0x8004, 0x8004, 0x8005, 0x8005, 0x8006, 0x8006, 0x8007, 0x8007,
                                                    0x800c, 0x800c, 0x800d, 0x800d, 0x800e, 0x800e, 0x800f, 0x800f };

/* Q4_K / Q5_K: qs chunk c = s/2 holds sub-block s in its low nibbles and
 * s + 1 in its high ones, so the chunk in both halves, the upper half
 * shifted by 4, gives steps s, s + 1 (kq_codes32_q45_K's codes); Q5_K's
 * bit 4 of sub-block s is bit s of qh. */
static inline __m256i a8_kq_lanes_q45_K(const uint8_t *b, bool has_qh, const kvq_xq256 *x, int32_t *M) {
    const __m128i sc = a8_scales_q45_K(b);
    const __m512i sc4 = _mm512_broadcast_i32x4(sc);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i qh = has_qh ? a8_bcast32(b + 16) : _mm512_setzero_si512();
    __m512i S0, S1;
    KVQ_UNROLL_N(4)
    for (int s = 0; s < 8; s += 2) {
        const __m512i q = a8_bcast32(b + (has_qh ? 48 : 16) + 16 * s);
        __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(q, (__mmask32)0xffff0000u, q, 4), low4);
        if (has_qh) {
            const __m512i m = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << s)), _mm256_set1_epi8((char)(2 << s)), 1);
            u = _mm512_or_si512(u, _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(qh, m), _mm512_set1_epi8(0x10)));
        }
        const __m512i p = _mm512_maddubs_epi16(u, _mm512_loadu_si512((const void *)(x->q + 32 * s)));
        const __m512i w = _mm512_shuffle_epi8(sc4, _mm512_load_si512((const void *)k_pick45[s / 2]));
        if (s < 4) *(s ? &S1 : &S0) = _mm512_madd_epi16(p, w);   /* the chains' first terms: no zero to copy */
        else if (s & 2) S1 = _mm512_dpwssd_epi32(S1, p, w);
        else S0 = _mm512_dpwssd_epi32(S0, p, w);
    }
    const __m256i mins = _mm256_shuffle_epi8(_mm512_castsi512_si256(sc4), _mm256_load_si256((const __m256i *)k_mins45));
    *M = a8_isum(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)x->sum)));
    return a8_fold(_mm512_add_epi32(S0, S1));
}

/* Q6_K: steps s, s + 1 (s even, half n = s/4, k = s%4 in {0, 2}) take
 * ql bytes 64n..64n+63 as they lie (low nibbles for k = 0, high for 2)
 * and qh's 32 bytes of the half in both halves, bits 2k, 2k + 2 moved to
 * bits 4-5 (kq_codes32_q6_K_u's codes).  Each 128-bit lane is one group
 * of 16 with its own int8 scale: groups 2s..2s+3. */
static inline __m256i a8_kq_lanes_q6_K(const uint8_t *b, const int8_t *xq) {
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)(b + 192));
    const __m512i sc_lo = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(sc8));
    const __m512i sc_hi = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    const __m512i low4 = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
    /* words 0..3 (even steps) or 4..7 (odd) of the 8 int16 scales, one per 128-bit lane */
    const __m512i pick_even = _mm512_set_epi64(0x0706070607060706, 0x0706070607060706, 0x0504050405040504,
                                               0x0504050405040504, 0x0302030203020302, 0x0302030203020302,
                                               0x0100010001000100, 0x0100010001000100);
    const __m512i pick_odd = _mm512_add_epi8(pick_even, _mm512_set1_epi8(8));
    __m512i S0, S1;
    KVQ_UNROLL_N(4)
    for (int s = 0; s < 8; s += 2) {
        const int n = s / 4, k = s % 4;
        const __m512i ql = _mm512_loadu_si512((const void *)(b + 64 * n)), qh = a8_bcast32(b + 128 + 32 * n);
        const __m512i nib = _mm512_and_si512(k ? _mm512_srli_epi16(ql, 4) : ql, low4);
        /* k = 0: qh << 4 | qh << 2; k = 2: qh | qh >> 2 */
        const __m512i top = k ? _mm512_mask_srli_epi16(qh, (__mmask32)0xffff0000u, qh, 2)
                              : _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
        const __m512i u = _mm512_or_si512(nib, _mm512_and_si512(top, bits45));
        const __m512i p = _mm512_maddubs_epi16(u, _mm512_loadu_si512((const void *)(xq + 32 * s)));
        const __m512i sc = _mm512_shuffle_epi8(s < 4 ? sc_lo : sc_hi, s % 4 ? pick_odd : pick_even);
        if (s < 4) *(s ? &S1 : &S0) = _mm512_madd_epi16(p, sc);
        else if (s & 2) S1 = _mm512_dpwssd_epi32(S1, p, sc);
        else S0 = _mm512_dpwssd_epi32(S0, p, sc);
    }
    return a8_fold(_mm512_add_epi32(S0, S1));
}
