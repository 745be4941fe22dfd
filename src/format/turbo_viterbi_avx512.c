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

/* The cost's bits with the low ones (mask) replaced by the row j: one
 * vpternlogd, (c & ~mask) | j. */
ALWAYS_INLINE __m512i tag_avx512(__m512 c, int j, int mask) {
    return _mm512_ternarylogic_epi32(_mm512_castps_si512(c), _mm512_set1_epi32(~mask), _mm512_set1_epi32(j), 0xEA);
}

/* The tagged minima as the next arrival costs (their tags: store_back). */
ALWAYS_INLINE void store_min(float *min_in, __m512i best) { _mm512_storeu_si512(min_in, best); }

/* The tags of the 4 vectors of column minima as 64 bytes in column
 * order: masked, packed within 128-bit lanes (dword 4L + v of the packs
 * holds columns 16v + 4L .. + 3), then the dwords put in column order.
 * One and per vector, three packs, a permute and one store, where a
 * vpmovdb (two operations) and a store went per vector: turbo3_tcq's
 * write 0.97x the time, k = 2 and 4 the same (80c9264's message). */
ALWAYS_INLINE void store_back(uint8_t *back, const __m512i best[4], int mask) {
    const __m512i m = _mm512_set1_epi32(mask);
    const __m512i w01 = _mm512_packus_epi32(_mm512_and_si512(best[0], m), _mm512_and_si512(best[1], m));
    const __m512i w23 = _mm512_packus_epi32(_mm512_and_si512(best[2], m), _mm512_and_si512(best[3], m));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(back, _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23)));
}

/* need_from as 4 index vectors, and the lanes of each that read the
 * upper 32 floats. */
typedef struct gather_plan {
    __m512i idx[4];
    __mmask16 upper[4];
} gather_plan;

ALWAYS_INLINE void gather_plan_make(gather_plan *p, const int32_t *need_from) {
    for (int i = 0; i < 4; i++) {
        p->idx[i] = _mm512_loadu_si512(need_from + 16 * i);
        p->upper[i] = _mm512_test_epi32_mask(p->idx[i], _mm512_set1_epi32(32));
    }
}

/* dst[i] = base[need_from[i]] from the 64 floats of base, loaded once, by
 * two-register permutes (a gather instruction is microcoded and slower
 * here). */
ALWAYS_INLINE void gather64(float *dst, const float *base, const gather_plan *p) {
    const __m512 b0 = _mm512_loadu_ps(base), b1 = _mm512_loadu_ps(base + 16);
    const __m512 b2 = _mm512_loadu_ps(base + 32), b3 = _mm512_loadu_ps(base + 48);
    for (int i = 0; i < 4; i++) {
        const __m512 lo = _mm512_permutex2var_ps(b0, p->idx[i], b1), hi = _mm512_permutex2var_ps(b2, p->idx[i], b3);
        _mm512_storeu_ps(dst + 16 * i, _mm512_mask_blend_ps(p->upper[i], lo, hi));
    }
}

#define VF __m512
#define VI __m512i
#define VL 16
#define V_SET1 _mm512_set1_ps
#define V_LOADU _mm512_loadu_ps
#define V_STOREU _mm512_storeu_ps
#define V_SUB _mm512_sub_ps
#define V_FMA _mm512_fmadd_ps
#define V_MIN _mm512_min_ps
#define V_NEED(need, m, k) need_avx512((need), (m), (k))
#define V_TAG(c, j, mask) tag_avx512((c), (j), (mask))
#define V_TAGGED_MIN(a, b) _mm512_min_epu32((a), (b))
#define V_STORE_MIN(min_in, back, best, mask) store_min((min_in), (best))
#define V_STORE_BACK_ALL(back, best, mask) store_back((back), (best), (mask))
#define V_LOADI(p) _mm512_loadu_si512((const void *)(p))
#define V_STATE_IF(c, m, s) _mm512_mask_mov_epi32(_mm512_set1_epi32(-1), _mm512_cmp_ps_mask((c), (m), _CMP_EQ_OQ), (s))
#define V_GATHER_PLAN gather_plan
#define V_GATHER_PLAN_MAKE(p, lay, k) gather_plan_make((p), (lay)->need_from)
#define V_GATHER_ALL(dst, base, p) gather64((dst), (base), (p))
#define VITERBI_FN turbo_viterbi_avx512
#define VITERBI2_FN turbo_viterbi2_avx512
#include "turbo_viterbi.inc"
