/* kquants_avx2.c - K-quant kernels with AVX2 + FMA: the shared unpackers
 * of kquants_unpack.inc plus the 8-lane float side.  Activations stay f32. */
#include "kquants_simd.h"
#include "simd256.h"

#include "kquants_unpack.inc"

/* Codes 8h..8h+7 of group g as 8 floats. */
static inline __m256 group_half(const kq_unpacked *u, int g, int h) {
    const __m128i c = _mm_loadl_epi64((const __m128i *)(u->codes + 16 * g + 8 * h));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c));
}

typedef struct kq_acc { __m256 a0, a1; } kq_acc;
static inline kq_acc kq_acc_zero(void) { return (kq_acc){ _mm256_setzero_ps(), _mm256_setzero_ps() }; }
static inline float kq_acc_sum(kq_acc a) {
    return kvq_v8_hsum(_mm256_add_ps(a.a0, a.a1));
}

/* 8 signed codes (bytes 0..7 of v) as floats. */
static inline __m256 codes8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

/* Values 32s..32s+31 (groups 2s, 2s+1): the low halves of both groups into
 * a0, the high halves into a1, w = scale*code + bias fused then w*x: the
 * operations, and their order per accumulator, of the unpack-to-memory
 * kernel this replaced, so the dot's bits did not change. */
static inline kq_acc codes32_dot_acc(__m256i codes, const float *scale, const float *bias, const float *x,
                                     kq_acc a) {
    const __m128i lo = _mm256_castsi256_si128(codes), hi = _mm256_extracti128_si256(codes, 1);
    const __m256 s0 = _mm256_set1_ps(scale[0]), b0 = _mm256_set1_ps(bias[0]);
    const __m256 s1 = _mm256_set1_ps(scale[1]), b1 = _mm256_set1_ps(bias[1]);
    a.a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(codes8(lo), s0, b0), _mm256_loadu_ps(x), a.a0);
    a.a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(codes8(_mm_unpackhi_epi64(lo, lo)), s0, b0), _mm256_loadu_ps(x + 8), a.a1);
    a.a0 = _mm256_fmadd_ps(_mm256_fmadd_ps(codes8(hi), s1, b1), _mm256_loadu_ps(x + 16), a.a0);
    a.a1 = _mm256_fmadd_ps(_mm256_fmadd_ps(codes8(_mm_unpackhi_epi64(hi, hi)), s1, b1), _mm256_loadu_ps(x + 24), a.a1);
    return a;
}

/* scale*code then + bias as two roundings, like the scalar reference. */
static void codes_dequant(const kq_unpacked *u, float *y) {
    for (int g = 0; g < KVQ_QK_K / 16; g++) {
        const __m256 lo = group_half(u, g, 0), hi = group_half(u, g, 1);
        const __m256 s = _mm256_set1_ps(u->scale[g]), b = _mm256_set1_ps(u->bias[g]);
        _mm256_storeu_ps(y + 16 * g, _mm256_add_ps(_mm256_mul_ps(lo, s), b));
        _mm256_storeu_ps(y + 16 * g + 8, _mm256_add_ps(_mm256_mul_ps(hi, s), b));
    }
}

#define KQ_INSTALL kvq_kquants_install_avx2
#include "kquants_table.inc"
