/* turbo_avx512.c - the TurboQuant block kernels at 16 lanes (AVX-512 F/BW/
 * VL/DQ; turbo_lanes.inc, the loops shared with the 8-lane AVX2 level),
 * installed by turbo.c only where the CPU has them.
 *
 * A group is 16 values.
 *   scalar codes: the group's 2b bytes come in with one masked load
 *                 (nothing read past them), every 32-bit lane takes the 4
 *                 bytes its value starts in (a byte shuffle) and shifts
 *                 its code to bit 0; the <= 16-entry codebook is one
 *                 register, repeated to 16
 *                 entries, so the permute's low 4 index bits pick the
 *                 value whatever the bits above it hold (no mask);
 *   trellis codes: two halves of 8 states, each from one (k + 1)-byte word,
 *                 the 256-1024 entry codebook read with scalar loads (as
 *                 at AVX2; a 16-lane gather was slower, see tcq_half). */
#include "turbo_internal.h"

#include <immintrin.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define ALWAYS_INLINE static inline __attribute__((always_inline))
typedef enum { FAMILY_SCALAR, FAMILY_TCQ } code_family;

typedef struct lut16 { __m512 v; } LUT;

ALWAYS_INLINE LUT lut_make(code_family f, const float *codebook, const int bits) {
    if (f == FAMILY_TCQ) return (LUT){ _mm512_setzero_ps() };
    float tab[16];
    for (int i = 0; i < 16; i++) tab[i] = codebook[i & ((1 << bits) - 1)];
    return (LUT){ _mm512_loadu_ps(tab) };
}

/* Lane j of 16 holds value j's code (bits j*bits ..) at bit 0, the bits
 * above it unmasked. */
ALWAYS_INLINE __m512i group_codes(const uint8_t *codes, int g, const int bits, const int nbytes) {
#define AT(j) (int)(((unsigned)((j) * bits) >> 3) * 0x01010101u + 0x03020100u)
#define SH(j) (((j) * bits) & 7)
    const __m512i pick = _mm512_setr_epi32(AT(0), AT(1), AT(2), AT(3), AT(4), AT(5), AT(6), AT(7), AT(8), AT(9),
                                           AT(10), AT(11), AT(12), AT(13), AT(14), AT(15));
    const __m512i shift = _mm512_setr_epi32(SH(0), SH(1), SH(2), SH(3), SH(4), SH(5), SH(6), SH(7), SH(8), SH(9),
                                            SH(10), SH(11), SH(12), SH(13), SH(14), SH(15));
#undef AT
#undef SH
    const __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << nbytes) - 1), codes + 2 * g * bits);
    return _mm512_srlv_epi32(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), pick), shift);
}

/* 8 trellis values (states at bit j*k of the k + 1 bytes from byte h*k)
 * by 8 scalar loads: the 16-lane gather of the same entries ran at about
 * a third of their speed in the attention loop here. */
ALWAYS_INLINE __m256 tcq_half(const uint8_t *codes, const float *codebook, int h, const int k) {
    const uint64_t w = turbo_tcq_group(codes, k, h);
    const uint32_t m = (1u << (CTX_BITS + k)) - 1;
    return _mm256_setr_ps(codebook[w & m], codebook[(w >> k) & m], codebook[(w >> 2 * k) & m],
                          codebook[(w >> 3 * k) & m], codebook[(w >> 4 * k) & m], codebook[(w >> 5 * k) & m],
                          codebook[(w >> 6 * k) & m], codebook[(w >> 7 * k) & m]);
}

ALWAYS_INLINE __m512 group_values(code_family f, const LUT *l, const uint8_t *codes, const float *codebook, int g,
                                  const int bits) {
    if (f == FAMILY_SCALAR) return _mm512_permutexvar_ps(group_codes(codes, g, bits, 2 * bits), l->v);
    return _mm512_insertf32x8(_mm512_castps256_ps512(tcq_half(codes, codebook, 2 * g, bits)),
                              tcq_half(codes, codebook, 2 * g + 1, bits), 1);
}

/* Lane sums of 4 vectors in one tree: the 128-bit quarters of a and b
 * folded pairwise (q0 + q2, q1 + q3), of c and d the same, then the two
 * halves of each, then the 4 lanes of each quarter; every position summed
 * alike. */
ALWAYS_INLINE __m128 lanes_reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
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

#define LN 16
#define LF __m512
#define lf_zero _mm512_setzero_ps
#define lf_load _mm512_loadu_ps
#define lf_store _mm512_storeu_ps
#define lf_fma _mm512_fmadd_ps
#define lf_set1 _mm512_set1_ps
#define HEADS_PER_PASS 4     /* 4 keys x 4 heads accumulators + 4 queries: 24 of 32 registers */
#define LANES_NAME(x) x##_avx512
#include "turbo_lanes.inc"

void turbo_install_avx512(turbo_kernels *k) {
    install_blocks_avx512(k);
    k->viterbi = turbo_viterbi_avx512;
}
