/* turbo_viterbi_avx512.c - the TCQ Viterbi (turbo_viterbi.inc) at 16 lanes
 * with AVX-512 compare masks; installed by turbo.c where the CPU has
 * AVX-512.  The same path as kvq_turbo_tcq_viterbi_scalar, bit for bit. */
#include "turbo_internal.h"

#include <immintrin.h>
#include <math.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define N_CTX (1 << CTX_BITS)
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Lane i of the 16 columns from m << k on: need[m + (i >> k)]. */
ALWAYS_INLINE __m512 need_avx512(const float *need, int m, int k) {
    if (k >= 4) return _mm512_set1_ps(need[m]);
    const __m128 runs = k == 3 ? _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(need + m)))
                               : _mm_loadu_ps(need + m);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_permutexvar_ps(_mm512_srli_epi32(lane, (unsigned)k), _mm512_castps128_ps512(runs));
}

ALWAYS_INLINE void keep_smaller(__m512 *best, __m512i *arg, __m512 cur, __m512i j) {
    const __mmask16 lt = _mm512_cmp_ps_mask(cur, *best, _CMP_LT_OQ);   /* ties keep the smaller j */
    *best = _mm512_mask_blend_ps(lt, *best, cur);
    *arg = _mm512_mask_blend_epi32(lt, *arg, j);
}

ALWAYS_INLINE void store_min(float *min_in, uint8_t *back, __m512 best, __m512i arg) {
    _mm512_storeu_ps(min_in, best);
    _mm_storeu_si128((__m128i *)back, _mm512_cvtepi32_epi8(arg));    /* values < 16 */
}

/* dst[i] = base[idx[i]] from the 64 floats of base by two-register
 * permutes (a gather instruction is microcoded and slower here). */
ALWAYS_INLINE void gather64(float *dst, const float *base, const int32_t *idx) {
    const __m512i ix = _mm512_loadu_si512(idx);
    const __m512 lo = _mm512_permutex2var_ps(_mm512_loadu_ps(base), ix, _mm512_loadu_ps(base + 16));
    const __m512 hi = _mm512_permutex2var_ps(_mm512_loadu_ps(base + 32), ix, _mm512_loadu_ps(base + 48));
    const __mmask16 upper = _mm512_test_epi32_mask(ix, _mm512_set1_epi32(32));
    _mm512_storeu_ps(dst, _mm512_mask_blend_ps(upper, lo, hi));
}

#define VF __m512
#define VI __m512i
#define VL 16
#define V_SET1 _mm512_set1_ps
#define V_LOADU _mm512_loadu_ps
#define V_STOREU _mm512_storeu_ps
#define V_ADD _mm512_add_ps
#define V_SUB _mm512_sub_ps
#define V_MUL _mm512_mul_ps
#define V_MIN _mm512_min_ps
#define V_ISET1 _mm512_set1_epi32
#define V_IZERO _mm512_setzero_si512()
#define V_NEED(need, m, k) need_avx512((need), (m), (k))
#define V_KEEP_SMALLER(best, arg, cur, jv) keep_smaller(&(best), &(arg), (cur), (jv))
#define V_STORE_MIN(min_in, back, best, arg) store_min((min_in), (back), (best), (arg))
#define V_GATHER(dst, base, idx) gather64((dst), (base), (idx))
#define VITERBI_FN turbo_viterbi_avx512
#define VITERBI2_FN turbo_viterbi2_avx512
#include "turbo_viterbi.inc"
