/* turbo_viterbi_avx512.c - the 16-bit trellis search (turbo_viterbi16.inc)
 * at 32 lanes with AVX-512BW; installed by turbo.c where the CPU has
 * AVX-512.  The same path as kvq_turbo_tcq_viterbi_scalar, bit for bit. */
#include "turbo_internal.h"
#include "turbo_walk_x86.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define N_CTX (1 << CTX_BITS)
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* The arrival costs stay in two registers in context order (a step's
 * minima less its floor).  Row j's vector of them, the same at every
 * column chunk (turbo_internal.h, the layout: lane i takes context
 * ((i mod R) << k) | j, and R divides 32), is one two-register word
 * permute: no store and reload between a step's minima and the next
 * step's costs, the chain every step waits on.  (Kept in (j, m) order in
 * memory instead, a row's vector is one broadcast load and no permute:
 * the same speed for two rows at once, where the step's other operations
 * bound it, and 1.1-1.15x the time for one row, where the store and
 * reload join the chain.) */
typedef struct viterbi_arr {
    __m512i m[2];
} viterbi_arr;

/* The permute indices of every row, a function of k alone, made once
 * per k. */
typedef struct viterbi_plan {
    __m512i idx[1 << 4];
} viterbi_plan;

static viterbi_plan g_plans[TURBO_TCQ_WIDTHS];
static pthread_once_t g_plans_once = PTHREAD_ONCE_INIT;

static void make_plans(void) {
    for (int k = 2; k <= 4; k++)
        for (int j = 0; j < (1 << k); j++) {
            int16_t idx[32];
            for (int i = 0; i < 32; i++) idx[i] = (int16_t)((i % (N_CTX >> k)) << k | j);
            g_plans[k - 2].idx[j] = _mm512_loadu_si512(idx);
        }
}

static const viterbi_plan *plan_of(int k) {
    pthread_once(&g_plans_once, make_plans);
    return &g_plans[k - 2];
}

ALWAYS_INLINE __m512i in_avx512(const viterbi_arr *a, int j, const viterbi_plan *p) {
    return _mm512_permutex2var_epi16(a->m[0], p->idx[j], a->m[1]);
}

/* turbo_tcq_xmax: lanes of a non-finite |x| (not below infinity) left out */
static float xmax_avx512(const float *x, int d) {
    const __m512 inf = _mm512_set1_ps(INFINITY);
    __m512 m = _mm512_setzero_ps();
    int t = 0;
    for (; t + 16 <= d; t += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + t));
        m = _mm512_mask_max_ps(m, _mm512_cmp_ps_mask(a, inf, _CMP_LT_OQ), m, a);
    }
    float r = _mm512_reduce_max_ps(m);
    for (; t < d; t++) {
        const float a = fabsf(x[t]);
        if (a > r && isfinite(a)) r = a;
    }
    return r;
}

/* turbo_tcq_fixed of a row: clamped before the rounding (the same
 * integers: the bounds are integers), rounded by the current mode
 * (nearest even, as rintf), NaN lanes 0. */
static void fixed_row_avx512(int16_t *X, const float *x, int d, float scale) {
    const __m512 s = _mm512_set1_ps(scale), hi = _mm512_set1_ps(32767.0f), lo = _mm512_set1_ps(-32767.0f);
    int t = 0;
    for (; t + 16 <= d; t += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + t), s);
        const __mmask16 num = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        const __m512i r = _mm512_maskz_cvtps_epi32(num, _mm512_min_ps(_mm512_max_ps(v, lo), hi));
        _mm256_storeu_si256((__m256i *)(void *)(X + t), _mm512_cvtsepi32_epi16(r));
    }
    for (; t < d; t++) X[t] = turbo_tcq_fixed(x[t], scale);
}

/* in + sq(X, C): E = X - C saturated, E^2 rounded to its top 16 bits
 * (vpmulhrsw: 32768 for E = -32768, read as unsigned), the sum
 * saturated at 65535. */
ALWAYS_INLINE __m512i cost_avx512(__m512i in, __m512i X, __m512i C) {
    const __m512i e = _mm512_subs_epi16(X, C);
    return _mm512_adds_epu16(in, _mm512_mulhrs_epi16(e, e));
}

ALWAYS_INLINE int hmin_avx512(__m512i v) {
    const __m256i h = _mm256_min_epu16(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    const __m128i q = _mm_min_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_extract_epi16(_mm_minpos_epu16(q), 0);
}

ALWAYS_INLINE int first_eq_avx512(__m512i v, int m) {
    const __mmask32 eq = _mm512_cmpeq_epi16_mask(v, _mm512_set1_epi16((short)m));
    return eq ? __builtin_ctz(eq) : -1;
}

ALWAYS_INLINE int floor_avx512(const viterbi_arr *a) { return hmin_avx512(_mm512_min_epu16(a->m[0], a->m[1])); }

ALWAYS_INLINE void next_avx512(viterbi_arr *a, const __m512i best[2], int low) {
    const __m512i l = _mm512_set1_epi16((short)low);
    a->m[0] = _mm512_sub_epi16(best[0], l);
    a->m[1] = _mm512_sub_epi16(best[1], l);
}

/* The arrival costs by context: the registers as they are. */
ALWAYS_INLINE void store_context_avx512(const viterbi_arr *a, uint16_t *in) {
    _mm512_storeu_si512(in, a->m[0]);
    _mm512_storeu_si512(in + 32, a->m[1]);
}

#define VW __m512i
#define WL 32
#define W_XMAX(x, d) xmax_avx512((x), (d))
#define W_FIXED_ROW(X, x, d, scale) fixed_row_avx512((X), (x), (d), (scale))
#define W_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define W_STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define W_SET1(x) _mm512_set1_epi16((short)(x))
#define W_ONES() _mm512_set1_epi32(-1)
#define W_COST(in, X, C) cost_avx512((in), (X), (C))
#define W_MIN(a, b) _mm512_min_epu16((a), (b))
#define W_PAIR(a, b, ja, jb, m, jv)                                                   \
    do {                                                                              \
        const __mmask32 lt_ = _mm512_cmplt_epu16_mask((b), (a));                      \
        (m) = _mm512_min_epu16((a), (b));                                             \
        (jv) = _mm512_mask_blend_epi16(lt_, _mm512_set1_epi16((short)(ja)), _mm512_set1_epi16((short)(jb))); \
    } while (0)
#define W_TAKEV(best, bj, c, jv)                                                       \
    do {                                                                              \
        const __mmask32 lt_ = _mm512_cmplt_epu16_mask((c), (best));                   \
        (best) = _mm512_min_epu16((best), (c));                                       \
        (bj) = _mm512_mask_mov_epi16((bj), lt_, (jv));                                \
    } while (0)
#define W_STORE_BACK(back, bj) _mm256_storeu_si256((__m256i *)(void *)(back), _mm512_cvtepi16_epi8(bj))
#define W_HMIN(v) hmin_avx512(v)
#define W_FIRST_EQ(v, m) first_eq_avx512((v), (m))
#define W_PLAN viterbi_plan
#define W_PLAN_OF(k) plan_of(k)
#define W_ARR viterbi_arr
#define W_ARR_ZERO(a) ((a)->m[0] = (a)->m[1] = _mm512_setzero_si512())
#define W_IN(a, j, col, k, plan) ((void)(col), (void)(k), in_avx512((a), (j), (plan)))
#define W_ARR_FLOOR(a) floor_avx512(a)
#define W_ARR_NEXT(a, best, low, k, plan) ((void)(k), (void)(plan), next_avx512((a), (best), (low)))
#define W_ARR_STORE_CONTEXT(a, in, k, plan) ((void)(k), (void)(plan), store_context_avx512((a), (in)))
#define W_KEEPS(k) ((k) == 4)
#define VITERBI_FN turbo_viterbi_avx512
#define W_KEPT_STEP(k, kept, X, cstate, t, s) turbo_kept_step((k), (kept), (X), (cstate), (t), (s))
#define VITERBI_PAIRS_FN turbo_viterbi_pairs_avx512
#include "turbo_viterbi16.inc"
