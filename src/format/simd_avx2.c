/* simd_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c,
 * called only after run-time detection).  The 8-float primitive set is
 * vec8.h; this file adds the format kernels' own (code bytes to floats,
 * fp16/bf16 stores, q8 rounding); the kernels are simd_x86_kernels.h. */
#include "simd.h"
#include "vec8.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

static inline VF bytes8_to_float(__m128i b) { return kvq_v8_s8_to_f32(b); }
static inline void vcodes_float(__m256i c, VF out[VPB]) {
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    out[0] = bytes8_to_float(lo);
    out[1] = bytes8_to_float(_mm_srli_si128(lo, 8));
    out[2] = bytes8_to_float(hi);
    out[3] = bytes8_to_float(_mm_srli_si128(hi, 8));
}

/* q8_0's 32 code bytes at p as floats, converted straight from memory. */
static inline void vcodes_q8_0(const uint8_t *p, VF out[VPB]) {
    out[0] = bytes8_to_float(_mm_loadl_epi64((const __m128i *)p));
    out[1] = bytes8_to_float(_mm_loadl_epi64((const __m128i *)(p + 8)));
    out[2] = bytes8_to_float(_mm_loadl_epi64((const __m128i *)(p + 16)));
    out[3] = bytes8_to_float(_mm_loadl_epi64((const __m128i *)(p + 24)));
}

/* The fp16 value at p in every lane (broadcast as fp16, converted once). */
static inline VF vscale_h(const uint8_t *p) { return _mm256_cvtph_ps(_mm_set1_epi16((short)kvq_rd16(p))); }

static inline void vstore_h(uint8_t *p, VF v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* kvq_float_to_bfloat on 8 lanes: round to nearest even on the top 16
 * bits, NaN kept quiet (| 0x40). */
static inline void vstore_bf(uint8_t *p, VF v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i h = _mm256_blendv_epi8(rounded, quiet, is_nan);           /* 8 x 16 bits in 32 */
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128((__m128i *)p, packed);
}

static inline VF vabs(VF v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline float vabs_max(const VF v[VPB]) {
    VF m = _mm256_max_ps(_mm256_max_ps(vabs(v[0]), vabs(v[1])), _mm256_max_ps(vabs(v[2]), vabs(v[3])));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* roundf (halves away from zero), NaN -> 0, clamp to [-127, 127]: the
 * scalar kvq_code_clamp(roundf(t), -127, 127, 0). */
static inline VF q8_round_code(VF t) {
    VF r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const VF half_or_more = _mm256_cmp_ps(vabs(_mm256_sub_ps(t, r)), vset1(0.5f), _CMP_GE_OQ);
    const VF away = _mm256_or_ps(_mm256_and_ps(t, vset1(-0.0f)), vset1(1.0f)); /* copysign(1, t) */
    r = _mm256_add_ps(r, _mm256_and_ps(half_or_more, away));
    r = _mm256_and_ps(r, _mm256_cmp_ps(t, t, _CMP_ORD_Q));
    return _mm256_min_ps(_mm256_max_ps(r, vset1(-127.0f)), vset1(127.0f));
}

static inline void q8_codes_store(const VF v[VPB], float id, uint8_t *dst) {
    __m256i q[VPB];
    for (int k = 0; k < VPB; k++) q[k] = _mm256_cvtps_epi32(q8_round_code(vmul(v[k], vset1(id))));
    /* packs work per 128-bit lane: undo the interleave with one permute */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, p);
}

#include "simd_x86_kernels.h"

void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]) { simd_install_kernels(table); }
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx2(void) { return &simd_iq4nl_ops; }

#else
void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]) { (void)table; }
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx2(void) { return NULL; }
#endif
