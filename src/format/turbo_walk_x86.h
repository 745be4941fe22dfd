/* turbo_walk_x86.h - one step of the trellis search's walk back from what
 * a search kept instead of back-pointers (turbo_internal.h,
 * turbo_tcq_kept), on 16 lanes (k = 4), 8 (k = 3) or 4 (k = 2) with AVX2.  Included
 * by the AVX2 and AVX-512 searches (turbo_avx2.c,
 * turbo_viterbi_avx512.c), both built with at least AVX2, as their
 * W_KEPT_STEP (turbo_viterbi16.inc). */
#ifndef KVQ_TURBO_WALK_X86_H
#define KVQ_TURBO_WALK_X86_H

#include "turbo_internal.h"

#include <immintrin.h>

/* in + sq(X, C) (turbo_internal.h: E = X - C saturated, E^2 rounded to
 * its top 16 bits, the sum saturated at 65535), on 16 and 8 lanes */
static inline __attribute__((always_inline)) __m256i turbo_cost16_avx2(__m256i in, __m256i X, __m256i C) {
    const __m256i e = _mm256_subs_epi16(X, C);
    return _mm256_adds_epu16(in, _mm256_mulhrs_epi16(e, e));
}
static inline __attribute__((always_inline)) __m128i turbo_cost8_sse(__m128i in, __m128i X, __m128i C) {
    const __m128i e = _mm_subs_epi16(X, C);
    return _mm_adds_epu16(in, _mm_mulhrs_epi16(e, e));
}

/* The predecessor of state s at step t (t >= 1): at step t the state's
 * context is ctx = s mod 64; its predecessor (ctx << k) | j has the first
 * j whose step-(t-1) cost sat(in[t-1][((ctx mod R) << k) + j] +
 * sq(X[t-1], cstate[(ctx << k) + j])) (R = 64 / 2^k) equals that step's
 * minimum, in[t][ctx] + floor[t-1]: the 2^k candidates' costs in one
 * vector.  The same state as back-pointers would give. */
static inline __attribute__((always_inline)) int turbo_kept_step(const int k, const turbo_tcq_kept *kept,
                                                                 const int16_t *X, const int16_t *cstate, int t,
                                                                 int s) {
    const int n_ctx = 1 << KVQ_TURBO_TCQ_CONTEXT;
    const int ctx = s & (n_ctx - 1), R = n_ctx >> k;
    const uint16_t *in = kept->in[t - 1] + ((ctx & (R - 1)) << k);
    const int16_t *c = cstate + (ctx << k);
    const int best = kept->in[t][ctx] + kept->floor[t - 1];
    unsigned eq;
    if (k == 4) {
        const __m256i cost = turbo_cost16_avx2(_mm256_loadu_si256((const __m256i *)(const void *)in),
                                               _mm256_set1_epi16(X[t - 1]),
                                               _mm256_loadu_si256((const __m256i *)(const void *)c));
        eq = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi16(cost, _mm256_set1_epi16((short)best)));
    } else if (k == 3) {
        const __m128i cost = turbo_cost8_sse(_mm_loadu_si128((const __m128i *)(const void *)in),
                                             _mm_set1_epi16(X[t - 1]),
                                             _mm_loadu_si128((const __m128i *)(const void *)c));
        eq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(cost, _mm_set1_epi16((short)best)));
    } else {   /* k = 2: 4 candidates, the low 8 bytes (the other lanes masked off) */
        const __m128i cost = turbo_cost8_sse(_mm_loadl_epi64((const __m128i *)(const void *)in),
                                             _mm_set1_epi16(X[t - 1]),
                                             _mm_loadl_epi64((const __m128i *)(const void *)c));
        eq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(cost, _mm_set1_epi16((short)best))) & 0xFFu;
    }
    return ctx << k | (eq ? __builtin_ctz(eq) >> 1 : 0);   /* eq != 0: the minimum is one of the candidates */
}

#endif
