/* simd_avx512.c - AVX-512 kernels (compiled with -mavx512f/bw/vl/dq,
 * called only after run-time detection).  The 16-float primitive set is
 * vec16.h; this file adds the format kernels' own (code bytes to floats,
 * fp16/bf16 stores, q8 rounding); the kernels are simd_x86_kernels.h. */
#include "simd.h"
#include "vec16.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>


static inline void vcodes_float(__m256i c, VF out[VPB]) {
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(c)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(c, 1)));
}

/* q8_0's 32 code bytes at p as floats, converted straight from memory. */
static inline void vcodes_q8_0(const uint8_t *p, VF out[VPB]) {
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
}

/* The fp16 value at p in every lane (broadcast as fp16, converted once). */
static inline VF vscale_h(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_set1_epi16((short)kvq_rd16(p))); }

static inline void vstore_h(uint8_t *p, VF v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* kvq_float_to_bfloat on 16 lanes: round to nearest even on the top 16
 * bits, NaN kept quiet (| 0x40). */
static inline void vstore_bf(uint8_t *p, VF v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i h = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
    const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                     _mm512_set1_epi32(0x7f800000));
    h = _mm512_mask_or_epi32(h, is_nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(h));
}

static inline float vabs_max(const VF v[VPB]) {
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
}

/* roundf (halves away from zero), NaN -> 0, clamp to [-127, 127]: the
 * scalar kvq_code_clamp(roundf(t), -127, 127, 0). */
static inline VF q8_round_code(VF t) {
    VF r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 half_or_more = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), vset1(0.5f), _CMP_GE_OQ);
    const VF away = _mm512_or_ps(_mm512_and_ps(t, vset1(-0.0f)), vset1(1.0f)); /* copysign(1, t) */
    r = _mm512_mask_add_ps(r, half_or_more, r, away);
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_ORD_Q), r);
    return _mm512_min_ps(_mm512_max_ps(r, vset1(-127.0f)), vset1(127.0f));
}

static inline void q8_codes_store(const VF v[VPB], float id, uint8_t *dst) {
    for (int k = 0; k < VPB; k++) {
        const __m512i q = _mm512_cvtps_epi32(q8_round_code(vmul(v[k], vset1(id))));
        _mm_storeu_si128((__m128i *)(dst + 16 * k), _mm512_cvtepi32_epi8(q));
    }
}

#include "simd_x86_kernels.h"

void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]) { simd_install_kernels(table); }
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx512(void) { return &simd_iq4nl_ops; }

#else
void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]) { (void)table; }
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx512(void) { return NULL; }
#endif
