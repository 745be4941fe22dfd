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

/* Q4_K by table look-up: the 16 values scale*q + bias (q = 0..15) of a
 * sub-block are one vector, made with the same fused multiply-add as
 * codes32_dot_acc's, and vpermps picks each value by its nibble (it reads
 * only the index's low 4 bits, so the low nibble needs no mask): one
 * permute replaces the sign extension, conversion and multiply-add per 16
 * values.  Same values, same order per accumulator, same bits. */
static inline kq_acc q4_K_sb_lookup(const uint8_t *b, const float *x, kq_acc a) {
    float scale[16], bias[16];
    kq_scales_q45_K(b, scale, bias);
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++) {     /* sub-blocks 2c (low nibbles), 2c+1 (high) */
        const __m512 t_lo = _mm512_fmadd_ps(iota, _mm512_set1_ps(scale[4 * c]), _mm512_set1_ps(bias[4 * c]));
        const __m512 t_hi = _mm512_fmadd_ps(iota, _mm512_set1_ps(scale[4 * c + 2]), _mm512_set1_ps(bias[4 * c + 2]));
        const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * c)));
        const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 32 * c + 16)));
        const float *xc = x + 64 * c;
        a.a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(q0, t_lo), _mm512_loadu_ps(xc), a.a0);
        a.a1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(q1, t_lo), _mm512_loadu_ps(xc + 16), a.a1);
        a.a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q0, 4), t_hi), _mm512_loadu_ps(xc + 32), a.a0);
        a.a1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q1, 4), t_hi), _mm512_loadu_ps(xc + 48), a.a1);
    }
    return a;
}
#define KQ_SB_q4_K q4_K_sb_lookup

#define KQ_INSTALL kvq_kquants_install_avx512
#include "kquants_table.inc"
