/* kquants_avx512.c - K-quant kernels with AVX-512: the shared unpackers of
 * kquants_unpack.inc plus the 16-lane float side (one group per vector). */
#include "kquants_simd.h"

#include "kquants_unpack.inc"

static inline __m512 group_floats(const kq_unpacked *u, int g) {
    const __m128i c = _mm_loadu_si128((const __m128i *)(u->codes + 16 * g));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c));
}

/* Two accumulators (even and odd groups) halve the FMA dependency chain;
 * named registers (an array indexed by g & 1 was kept on the stack, a
 * store and a reload in every step's chain). */
typedef struct kq_acc { __m512 a0, a1; } kq_acc;
static inline kq_acc kq_acc_zero(void) { return (kq_acc){ _mm512_setzero_ps(), _mm512_setzero_ps() }; }
static inline float kq_acc_sum(kq_acc a) { return _mm512_reduce_add_ps(_mm512_add_ps(a.a0, a.a1)); }

/* Values 32s..32s+31 (groups 2s, 2s+1) into the even/odd accumulators,
 * w = scale*code + bias fused then w*x: the operations, and their order
 * per accumulator, of the unpack-to-memory kernel this replaced, so the
 * dot's bits did not change. */
static inline kq_acc codes32_dot_acc(__m256i codes, const float *scale, const float *bias, const float *x,
                                     kq_acc a) {
    const __m512 c0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(codes)));
    const __m512 c1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(codes, 1)));
    const __m512 w0 = _mm512_fmadd_ps(c0, _mm512_set1_ps(scale[0]), _mm512_set1_ps(bias[0]));
    const __m512 w1 = _mm512_fmadd_ps(c1, _mm512_set1_ps(scale[1]), _mm512_set1_ps(bias[1]));
    a.a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), a.a0);
    a.a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), a.a1);
    return a;
}

/* scale*code then + bias as two roundings, like the scalar reference. */
static void codes_dequant(const kq_unpacked *u, float *y) {
    for (int g = 0; g < KVQ_QK_K / 16; g++)
        _mm512_storeu_ps(y + 16 * g, _mm512_add_ps(_mm512_mul_ps(group_floats(u, g), _mm512_set1_ps(u->scale[g])),
                                                   _mm512_set1_ps(u->bias[g])));
}

#define KQ_INSTALL kvq_kquants_install_avx512
#include "kquants_table.inc"
