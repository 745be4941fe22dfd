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
 * The trellis codes keep the 8-lane kernels of the AVX2 level (turbo.c
 * installs them at this level too): their cost is the 256-1024 entry
 * codebook look-up, one per value, and every 16-lane form measured here
 * ran slower than 8 scalar loads per 8 values (two such halves and an
 * insert: 1.05-1.4x the time; the state windows taken apart in one vector,
 * stored and loaded back: 1.7x; a 16-lane gather: about 2.5x). */
#include "turbo_internal.h"

#include <immintrin.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define ALWAYS_INLINE static inline __attribute__((always_inline))
typedef enum { FAMILY_SCALAR, FAMILY_TCQ } code_family;

typedef struct lut16 { __m512 v; } LUT;

ALWAYS_INLINE LUT lut_make(code_family f, const float *codebook, const int bits) {
    (void)f;
    float tab[16];
    for (int i = 0; i < 16; i++) tab[i] = codebook[i & ((1 << bits) - 1)];
    return (LUT){ _mm512_loadu_ps(tab) };
}

/* Lane j of 16 holds value j's code (bits j*bits .. of the group's nbytes
 * bytes) at bit 0, the bits above it unmasked. */
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

ALWAYS_INLINE __m512 group_values(code_family f, const LUT *l, const uint8_t *codes, const float *codebook, int g,
                                  const int bits) {
    (void)f;
    (void)codebook;
    return _mm512_permutexvar_ps(group_codes(codes, g, bits, 2 * bits), l->v);
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
#define LANES_SCALAR_ONLY      /* the trellis codes: see above */
#include "turbo_lanes.inc"

/* Over the AVX2 level's kernels: the scalar codes' block kernels and the
 * 16-lane Viterbi. */
void turbo_install_avx512(turbo_kernels *k) {
    install_blocks_avx512(k);
    k->viterbi = turbo_viterbi_avx512;
}
