/* simd_avx512.c - AVX-512 kernels (compiled with -mavx512f/bw/vl/dq,
 * called only after run-time detection).  This file defines the 16-float
 * vector primitives; the kernels themselves are simd_x86_kernels.h. */
#include "simd.h"
#include "simd512.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

typedef __m512 vf;
enum { VF_LANES = 16, VF_PER_BLOCK = 2 };

static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float f) { return _mm512_set1_ps(f); }
static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float vf_hsum(vf v) { return kvq_v16_hsum(v); }

static inline void vf_codes_to_float(__m256i c, vf out[VF_PER_BLOCK]) {
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(c)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(c, 1)));
}

static inline vf vf_load_f16(const uint8_t *p) { return kvq_v16_load_f16(p); }
static inline void vf_store_f16(uint8_t *p, vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline vf vf_load_bf16(const uint8_t *p) { return kvq_v16_load_bf16(p); }

/* kvq_float_to_bfloat on 16 lanes: round to nearest even on the top 16
 * bits, NaN kept quiet (| 0x40). */
static inline void vf_store_bf16(uint8_t *p, vf v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                     _mm512_set1_epi32(0x7f800000));
    h = _mm512_mask_or_epi32(h, is_nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(h));
}

static inline float vf_abs_max(const vf v[VF_PER_BLOCK]) {
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
}

/* roundf (halves away from zero), NaN -> 0, clamp to [-127, 127]: the
 * scalar kvq_code_clamp(roundf(t), -127, 127, 0). */
static inline vf q8_round_code(vf t) {
    vf r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 half_or_more = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), vf_set1(0.5f), _CMP_GE_OQ);
    const vf away = _mm512_or_ps(_mm512_and_ps(t, vf_set1(-0.0f)), vf_set1(1.0f)); /* copysign(1, t) */
    r = _mm512_mask_add_ps(r, half_or_more, r, away);
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), r);
    return _mm512_min_ps(_mm512_max_ps(r, vf_set1(-127.0f)), vf_set1(127.0f));
}

static inline void q8_codes_store(const vf v[VF_PER_BLOCK], float id, uint8_t *dst) {
    for (int k = 0; k < VF_PER_BLOCK; k++) {
        const __m512i q = _mm512_cvtps_epi32(q8_round_code(vf_mul(v[k], vf_set1(id))));
        _mm_storeu_si128((__m128i *)(dst + 16 * k), _mm512_cvtepi32_epi8(q));
    }
}

#include "simd_x86_kernels.h"

void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]) { simd_install_kernels(table); }

#else
void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]) { (void)table; }
#endif
