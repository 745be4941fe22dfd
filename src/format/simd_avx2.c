/* simd_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c,
 * called only after run-time detection).  This file defines the 8-float
 * vector primitives; the kernels themselves are simd_x86_kernels.h. */
#include "simd.h"
#include "simd256.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

typedef __m256 vf;
enum { VF_LANES = 8, VF_PER_BLOCK = 4 };

static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float f) { return _mm256_set1_ps(f); }
static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }

static inline float vf_hsum(vf v) { return kvq_v8_hsum(v); }

static inline vf bytes8_to_float(__m128i b) { return kvq_v8_s8_to_f32(b); }
static inline void vf_codes_to_float(__m256i c, vf out[VF_PER_BLOCK]) {
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    out[0] = bytes8_to_float(lo);
    out[1] = bytes8_to_float(_mm_srli_si128(lo, 8));
    out[2] = bytes8_to_float(hi);
    out[3] = bytes8_to_float(_mm_srli_si128(hi, 8));
}

static inline vf vf_load_f16(const uint8_t *p) { return kvq_v8_load_f16(p); }
static inline void vf_store_f16(uint8_t *p, vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
static inline vf vf_load_bf16(const uint8_t *p) { return kvq_v8_load_bf16(p); }

/* kvq_float_to_bfloat on 8 lanes: round to nearest even on the top 16
 * bits, NaN kept quiet (| 0x40). */
static inline void vf_store_bf16(uint8_t *p, vf v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet, is_nan);           /* 8 x 16 bits in 32 */
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128((__m128i *)p, packed);
}

static inline vf vf_abs(vf v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline float vf_abs_max(const vf v[VF_PER_BLOCK]) {
    vf m = _mm256_max_ps(_mm256_max_ps(vf_abs(v[0]), vf_abs(v[1])), _mm256_max_ps(vf_abs(v[2]), vf_abs(v[3])));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* roundf (halves away from zero), NaN -> 0, clamp to [-127, 127]: the
 * scalar kvq_code_clamp(roundf(t), -127, 127, 0). */
static inline vf q8_round_code(vf t) {
    vf r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const vf half_or_more = _mm256_cmp_ps(vf_abs(_mm256_sub_ps(t, r)), vf_set1(0.5f), _CMP_GE_OQ);
    const vf away = _mm256_or_ps(_mm256_and_ps(t, vf_set1(-0.0f)), vf_set1(1.0f)); /* copysign(1, t) */
    r = _mm256_add_ps(r, _mm256_and_ps(half_or_more, away));
    r = _mm256_and_ps(r, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
    return _mm256_min_ps(_mm256_max_ps(r, vf_set1(-127.0f)), vf_set1(127.0f));
}

static inline void q8_codes_store(const vf v[VF_PER_BLOCK], float id, uint8_t *dst) {
    __m256i q[VF_PER_BLOCK];
    for (int k = 0; k < VF_PER_BLOCK; k++) q[k] = _mm256_cvtps_epi32(q8_round_code(vf_mul(v[k], vf_set1(id))));
    /* packs work per 128-bit lane: undo the interleave with one permute */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

#include "simd_x86_kernels.h"

void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]) { simd_install_kernels(table); }

#else
void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]) { (void)table; }
#endif
