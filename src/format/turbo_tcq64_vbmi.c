/* turbo_tcq64_vbmi.c - the trellis codes' look-up kernels (turbo_tcq64.inc)
 * with AVX-512 VBMI: vpermb spreads the codes, vpmultishiftqb cuts the
 * windows, vpermi2b looks up 64 bytes in a 128-entry table.  Compiled
 * with the AVX-512, VBMI and VNNI flags (the int8 query's dot and the V
 * sums on integer weights take vpdpbusd / vpdpwssd); installed by turbo.c
 * at the AVX-512 level only where the CPU has VBMI and VNNI (Ice Lake,
 * Zen 4 and later; not Cannon Lake, VBMI without VNNI, which keeps the
 * 8-lane pair loads, so no instruction of this file can meet a CPU
 * without one of its flags).  Its
 * scalar instance (turbo_tcq64.c) gives the same bits on any machine. */
#include "turbo_tcq64.h"
#include "simd512.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
/* Loops unrolled so their vectors stay in registers, except in sanitizer
 * builds, which check the logic, not the speed: clang's ASan + UBSan took
 * 2.5 minutes over the unrolled file, 15 s without. */
#if defined(__SANITIZE_ADDRESS__)
#define UNROLL64
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNROLL64
#endif
#endif
#ifndef UNROLL64
#define UNROLL64 KVQ_UNROLL_N(8)
#endif

#define BV __m512i
#define BM __mmask64
#define bv_load(p) _mm512_load_si512((const void *)(p))
#define bv_load_n(p, n) _mm512_maskz_loadu_epi8((__mmask64)(((uint64_t)1 << (n)) - 1), (p))
#define bv_permute(idx, a) _mm512_permutexvar_epi8(idx, a)
#define bv_multishift(c, a) _mm512_multishift_epi64_epi8(c, a)
#define bv_lookup2(t0, idx, t1) _mm512_permutex2var_epi8(t0, idx, t1)
#define bv_test(a, bit) _mm512_test_epi8_mask(a, _mm512_set1_epi8(bit))
#define bv_blend(m, a, b) _mm512_mask_blend_epi8(m, a, b)

#define bv_loadu(p) _mm512_loadu_si512((const void *)(p))
#define bv_zero _mm512_setzero_si512
#define bv_unpacklo8(a, b) _mm512_unpacklo_epi8(a, b)
#define bv_unpackhi8(a, b) _mm512_unpackhi_epi8(a, b)
#define bv_set1_pair(p) _mm512_set1_epi32((int)kvq_rd32((const uint8_t *)(const void *)(p)))

#define LI __m512i
#define li_zero _mm512_setzero_si512
#define li_dpbusd(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
#define li_dpwssd(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define li_set1 _mm512_set1_epi32
#define li_sub _mm512_sub_epi32
#define li_add _mm512_add_epi32
#define li_hsum _mm512_reduce_add_epi32
#define li_store_i16(p, a) _mm256_store_si256((__m256i *)(void *)(p), _mm512_cvtepi32_epi16(a))
#define lf_round(a) _mm512_cvtps_epi32(a)
#define lf_load_m(p, m) _mm512_maskz_loadu_ps((__mmask16)(m), p)
/* w * bs where both are non-zero, else 0 (turbo_value_coef) */
ALWAYS_INLINE __m512 lf_coef(__m512 w, __m512 bs) {
    const __mmask16 nz = _mm512_cmpneq_ps_mask(w, _mm512_setzero_ps()) & _mm512_cmpneq_ps_mask(bs, _mm512_setzero_ps());
    return _mm512_maskz_mul_ps(nz, w, bs);
}
/* a lane x is finite where x - x is 0 (inf - inf and NaN give NaN) */
ALWAYS_INLINE bool lf_finite(__m512 a) {
    return _mm512_cmp_ps_mask(_mm512_sub_ps(a, a), _mm512_setzero_ps(), _CMP_EQ_OQ) == 0xFFFF;
}
ALWAYS_INLINE float lf_absmax(__m512 a) { return _mm512_reduce_max_ps(_mm512_abs_ps(a)); }
#define li_to_lf(a) _mm512_cvtepi32_ps(a)

#define LF __m512
#define lf_zero _mm512_setzero_ps
#define lf_load _mm512_loadu_ps
#define lf_store _mm512_storeu_ps
#define lf_set1 _mm512_set1_ps
#define lf_fma _mm512_fmadd_ps
#define lf_mul _mm512_mul_ps
#define lf_add _mm512_add_ps

/* The signed bytes 16L + 4m + j of p as the floats n 2^24 of lane 4L + j
 * of v[m]: each byte unpacked to the top of a dword (two unpacks with
 * zero, within 128-bit lanes) and converted (exact: 8 significant bits). */
ALWAYS_INLINE void lf_from_steps(BV p, LF *v) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i wl = _mm512_unpacklo_epi8(z, p), wh = _mm512_unpackhi_epi8(z, p);
    v[0] = _mm512_cvtepi32_ps(_mm512_unpacklo_epi16(z, wl));
    v[1] = _mm512_cvtepi32_ps(_mm512_unpackhi_epi16(z, wl));
    v[2] = _mm512_cvtepi32_ps(_mm512_unpacklo_epi16(z, wh));
    v[3] = _mm512_cvtepi32_ps(_mm512_unpackhi_epi16(z, wh));
}

/* Quarter Q of v[m] <-> quarter m of v[Q]: pairs of quarters first, then
 * the pairs. */
ALWAYS_INLINE void lf_transpose4(LF *v) {
    const __m512 t0 = _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 t1 = _mm512_shuffle_f32x4(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 t2 = _mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 t3 = _mm512_shuffle_f32x4(v[2], v[3], _MM_SHUFFLE(3, 2, 3, 2));
    v[0] = _mm512_shuffle_f32x4(t0, t2, _MM_SHUFFLE(2, 0, 2, 0));
    v[1] = _mm512_shuffle_f32x4(t0, t2, _MM_SHUFFLE(3, 1, 3, 1));
    v[2] = _mm512_shuffle_f32x4(t1, t3, _MM_SHUFFLE(2, 0, 2, 0));
    v[3] = _mm512_shuffle_f32x4(t1, t3, _MM_SHUFFLE(3, 1, 3, 1));
}

/* Lane sums of 4 vectors in one tree (simd512.h; the scalar instance's
 * lanes_sum is its twin). */
typedef struct f4_vbmi { float f[4]; } F4;
ALWAYS_INLINE F4 lanes_reduce4(LF a, LF b, LF c, LF d) {
    F4 r;
    _mm_storeu_ps(r.f, kvq_v16_hsum4(a, b, c, d));
    return r;
}

#define TCQ64_NAME(x) tcq64_##x##_vbmi
#include "turbo_tcq64.inc"
