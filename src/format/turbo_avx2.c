/* turbo_avx2.c - AVX2/FMA kernels of the TurboQuant module (compiled with
 * -mavx2 -mfma, installed by turbo.c only after run-time detection).
 *
 *   scalar codes: 8 indices come from one b-byte word by a variable shift;
 *                 the <= 16-entry codebook sits in two registers (permute).
 *   trellis codes: 8 state windows come from one (k+1)-byte word; the
 *                 2^L-entry codebook is read with a gather.
 *   Viterbi:      the same recursion as kvq_turbo_tcq_viterbi_scalar with
 *                 the same float operations (so the same path, bit for
 *                 bit), on states stored in a column-permuted order in
 *                 which arrival costs are broadcasts and each step's
 *                 costs fold straight into the next step's minimum (see
 *                 the Viterbi section). */
#include "turbo_internal.h"
#include "simd256.h"

#include <immintrin.h>
#include <math.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define N_CTX (1 << CTX_BITS)

#define hsum(v) kvq_v8_hsum(v)

/* The kernels below are written once for both code families and every
 * bit width; each public kernel calls them with compile-time constants, so
 * the compiler emits one specialised loop per (family, bits): the byte
 * loops that assemble a group's word unroll and the shifts become
 * immediates. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
typedef enum { FAMILY_SCALAR, FAMILY_TCQ } code_family;

/* ------------------------------------------------------- scalar codes */

typedef struct scalar_lut { __m256 lo, hi; } scalar_lut;

ALWAYS_INLINE scalar_lut scalar_lut_make(const float *codebook, const int bits) {
    float tab[16] = { 0 };
    memcpy(tab, codebook, sizeof(float) << bits);
    return (scalar_lut){ _mm256_loadu_ps(tab), _mm256_loadu_ps(tab + 8) };
}

/* The 8 codebook values of group g of a scalar stream. */
ALWAYS_INLINE __m256 scalar_values(const scalar_lut *l, const uint8_t *codes, int g, const int bits) {
    __m256i w = _mm256_set1_epi32((int)turbo_scalar_group(codes, bits, g));
    __m256i shifts = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits, 7 * bits);
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(w, shifts), _mm256_set1_epi32((1 << bits) - 1));
    __m256 v = _mm256_permutevar8x32_ps(l->lo, idx);
    if (bits == 4) {     /* index bit 3 selects the upper eight entries */
        __m256 upper = _mm256_permutevar8x32_ps(l->hi, idx);
        v = _mm256_blendv_ps(v, upper, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return v;
}

/* ------------------------------------------------------ trellis codes */

/* The 8 codebook values of group g of a trellis stream: states are the
 * L-bit windows at bit j*k of the group word; lanes 4..7 read the word
 * shifted by 4k so that every window fits a 32-bit lane. */
ALWAYS_INLINE __m256 tcq_values(const uint8_t *codes, const float *codebook, int g, const int k) {
    uint64_t w = turbo_tcq_group(codes, k, g);
    int lo = (int)(uint32_t)w, hi = (int)(uint32_t)(w >> (4 * k));
    __m256i words = _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi);
    __m256i shifts = _mm256_setr_epi32(0, k, 2 * k, 3 * k, 0, k, 2 * k, 3 * k);
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(words, shifts),
                                   _mm256_set1_epi32((1 << (CTX_BITS + k)) - 1));
    return _mm256_i32gather_ps(codebook, idx, 4);
}

/* ---------------------------------------------------- dot and axpy */

ALWAYS_INLINE __m256 group_values(code_family f, const scalar_lut *l, const uint8_t *codes,
                                  const float *codebook, int g, const int bits) {
    return f == FAMILY_SCALAR ? scalar_values(l, codes, g, bits) : tcq_values(codes, codebook, g, bits);
}

/* Two accumulators (d is 64 or 128: an even number of groups) so that
 * consecutive FMAs do not wait for each other. */
ALWAYS_INLINE float dot_fixed(code_family f, const uint8_t *codes, const float *codebook,
                              const int bits, const float *q_rot, int d) {
    scalar_lut l = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    if (f == FAMILY_SCALAR) l = scalar_lut_make(codebook, bits);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int g = 0; g < d / 8; g += 2) {
        acc0 = _mm256_fmadd_ps(group_values(f, &l, codes, codebook, g, bits), _mm256_loadu_ps(q_rot + 8 * g), acc0);
        acc1 = _mm256_fmadd_ps(group_values(f, &l, codes, codebook, g + 1, bits),
                               _mm256_loadu_ps(q_rot + 8 * g + 8), acc1);
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

ALWAYS_INLINE void axpy_fixed(code_family f, const uint8_t *codes, const float *codebook,
                              const int bits, float w_scale, float *acc_rot, int d) {
    scalar_lut l = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    if (f == FAMILY_SCALAR) l = scalar_lut_make(codebook, bits);
    __m256 w = _mm256_set1_ps(w_scale);
    for (int g = 0; g < d / 8; g++) {
        __m256 y = _mm256_loadu_ps(acc_rot + 8 * g);
        _mm256_storeu_ps(acc_rot + 8 * g, _mm256_fmadd_ps(w, group_values(f, &l, codes, codebook, g, bits), y));
    }
}

/* Dispatch on the bit width: bits is 2, 3 or 4 for every turbo type. */
#define BITS_SWITCH(bits, call2, call3, call4) \
    switch (bits) { case 2: return call2; case 3: return call3; default: return call4; }

static float scalar_dot_avx2(const uint8_t *codes, const float *c, int bits, const float *q, int d) {
    BITS_SWITCH(bits, dot_fixed(FAMILY_SCALAR, codes, c, 2, q, d), dot_fixed(FAMILY_SCALAR, codes, c, 3, q, d),
                dot_fixed(FAMILY_SCALAR, codes, c, 4, q, d))
}
static float tcq_dot_avx2(const uint8_t *codes, const float *c, int k, const float *q, int d) {
    BITS_SWITCH(k, dot_fixed(FAMILY_TCQ, codes, c, 2, q, d), dot_fixed(FAMILY_TCQ, codes, c, 3, q, d),
                dot_fixed(FAMILY_TCQ, codes, c, 4, q, d))
}
static void scalar_axpy_avx2(const uint8_t *codes, const float *c, int bits, float w, float *acc, int d) {
    BITS_SWITCH(bits, axpy_fixed(FAMILY_SCALAR, codes, c, 2, w, acc, d), axpy_fixed(FAMILY_SCALAR, codes, c, 3, w, acc, d),
                axpy_fixed(FAMILY_SCALAR, codes, c, 4, w, acc, d))
}
static void tcq_axpy_avx2(const uint8_t *codes, const float *c, int k, float w, float *acc, int d) {
    BITS_SWITCH(k, axpy_fixed(FAMILY_TCQ, codes, c, 2, w, acc, d), axpy_fixed(FAMILY_TCQ, codes, c, 3, w, acc, d),
                axpy_fixed(FAMILY_TCQ, codes, c, 4, w, acc, d))
}

/* ------------------------------------------------------------- Viterbi */

/*
 * Layout.  Write a state as s = (a << k) | j: a = its top 6 bits (the
 * context its successors see), j = its low k bits.  With K = 2^k and
 * R = 64 / K, context a = q*R + m (m = a mod R) is stored in row j at
 * column sigma(a) = m*K + q.  Then
 *   - the cost of state (row j, column sigma(a)) at step t is
 *     best_in[(m << k) | j] + (x_t - c)^2: its context s & 63 = (m << k) | j
 *     depends only on (j, m), so every run of K columns with the same m
 *     needs one broadcast arrival cost;
 *   - the best arrival into context a at step t+1 is the minimum over the
 *     K rows at column sigma(a): element-wise over rows, ties to the
 *     smallest j as in the scalar code.
 * So one step computes the costs of a column chunk row by row and folds
 * them straight into the running minimum: the 2^L costs never go to
 * memory, except at the last step, where the final state is chosen by
 * state number.  Back-pointers are kept by column; the path is the scalar
 * code's path bit for bit (same float operations, same tie rules).
 */
typedef struct viterbi_work {
    float cpos[TURBO_MAX_STATES];      /* codebook by position j*64 + sigma(a) */
    float min_in[N_CTX];               /* best arrival cost, by column    */
    float need[16][16];                /* need[j][m] = arrival into context (m << k) | j */
    uint8_t back[KVQ_TURBO_BLOCK][N_CTX];   /* by column                  */
    uint8_t column[N_CTX];             /* sigma(a)                        */
} viterbi_work;

static void viterbi_layout(viterbi_work *w, int k, const float *c) {
    int K = 1 << k, R = N_CTX >> k;
    for (int a = 0; a < N_CTX; a++) w->column[a] = (uint8_t)((a % R) * K + a / R);
    for (int s = 0; s < (N_CTX << k); s++) w->cpos[(s & (K - 1)) * N_CTX + w->column[s >> k]] = c[s];
}

/* Arrival costs of this step, by (j, m); all zero at t = 0 (free start). */
static void viterbi_gather_need(viterbi_work *w, int k, bool first) {
    for (int j = 0; j < (1 << k); j++)
        for (int m = 0; m < (N_CTX >> k); m++)
            w->need[j][m] = first ? 0.0f : w->min_in[w->column[(m << k) | j]];
}

/* Costs of the 8 states at row j, columns col..col+7. */
ALWAYS_INLINE __m256 state_costs(const viterbi_work *w, int k, int j, int col, __m256 x) {
    int m = col >> k;
    const float *need = w->need[j];
    __m256 in;
    if (k >= 3) {                                    /* one run covers 8 columns */
        in = _mm256_set1_ps(need[m]);
    } else {                                         /* two runs of 4: need[m] x4, need[m+1] x4 */
        __m128 pair = _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(need + m)));
        in = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(pair), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    }
    __m256 e = _mm256_sub_ps(x, _mm256_loadu_ps(w->cpos + j * N_CTX + col));
    return _mm256_add_ps(in, _mm256_mul_ps(e, e));
}

ALWAYS_INLINE void keep_smaller(__m256 *best, __m256i *arg, __m256 cur, __m256i j) {
    __m256 lt = _mm256_cmp_ps(cur, *best, _CMP_LT_OQ);       /* ties keep the smaller j */
    *best = _mm256_blendv_ps(*best, cur, lt);
    *arg = _mm256_blendv_epi8(*arg, j, _mm256_castps_si256(lt));
}

ALWAYS_INLINE void store_min(viterbi_work *w, uint8_t *back, int col, __m256 best, __m256i arg) {
    _mm256_storeu_ps(w->min_in + col, best);
    /* 8 x int32 (values < 16) -> 8 bytes */
    __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(arg), _mm256_extracti128_si256(arg, 1));
    _mm_storel_epi64((__m128i *)(back + col), _mm_packus_epi16(a16, a16));
}

/* One step: costs at x_t folded into the best arrival of step t+1.  32
 * columns at a time, rows inside: four independent compare/blend chains. */
ALWAYS_INLINE void viterbi_step_fixed(viterbi_work *w, const int k, float xt, uint8_t *back_next) {
    __m256 x = _mm256_set1_ps(xt);
    for (int col = 0; col < N_CTX; col += 32) {
        __m256 b0 = state_costs(w, k, 0, col, x), b1 = state_costs(w, k, 0, col + 8, x);
        __m256 b2 = state_costs(w, k, 0, col + 16, x), b3 = state_costs(w, k, 0, col + 24, x);
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (int j = 1; j < (1 << k); j++) {
            __m256i jv = _mm256_set1_epi32(j);
            keep_smaller(&b0, &a0, state_costs(w, k, j, col, x), jv);
            keep_smaller(&b1, &a1, state_costs(w, k, j, col + 8, x), jv);
            keep_smaller(&b2, &a2, state_costs(w, k, j, col + 16, x), jv);
            keep_smaller(&b3, &a3, state_costs(w, k, j, col + 24, x), jv);
        }
        store_min(w, back_next, col, b0, a0);
        store_min(w, back_next, col + 8, b1, a1);
        store_min(w, back_next, col + 16, b2, a2);
        store_min(w, back_next, col + 24, b3, a3);
    }
}

static void viterbi_step(viterbi_work *w, int k, float xt, uint8_t *back_next) {
    switch (k) {
    case 2: viterbi_step_fixed(w, 2, xt, back_next); break;
    case 3: viterbi_step_fixed(w, 3, xt, back_next); break;
    default: viterbi_step_fixed(w, 4, xt, back_next); break;
    }
}

/* Last step: every state's cost; the smallest wins, lowest state number
 * on ties (the scalar rule).  Returns the state, its cost in *err. */
static int viterbi_last(viterbi_work *w, int k, float xt, double *err) {
    float cost[TURBO_MAX_STATES] = { 0 };   /* (initialised: the compiler cannot see k <= 4) */
    __m256 x = _mm256_set1_ps(xt);
    for (int j = 0; j < (1 << k); j++)
        for (int col = 0; col < N_CTX; col += 8)
            _mm256_storeu_ps(cost + j * N_CTX + col, state_costs(w, k, j, col, x));
    const int jmask = (1 << k) - 1;
#define POS(s) (((s) & jmask) * N_CTX + w->column[(s) >> k])
    int last = 0;
    for (int s = 1; s < (N_CTX << k); s++)
        if (cost[POS(s)] < cost[POS(last)]) last = s;
    *err = cost[POS(last)];
#undef POS
    return last;
}

static double viterbi_avx2(int k, const float *c, const float *x, int d, uint16_t *states) {
    viterbi_work w;
    viterbi_layout(&w, k, c);
    for (int t = 0; t + 1 < d; t++) {
        viterbi_gather_need(&w, k, t == 0);
        viterbi_step(&w, k, x[t], w.back[t + 1]);
    }
    viterbi_gather_need(&w, k, d == 1);
    double err;
    int last = viterbi_last(&w, k, x[d - 1], &err);
    turbo_tcq_backtrack(k, (const uint8_t (*)[N_CTX])w.back, w.column, d, last, states);
    return err;
}

void turbo_install_avx2(turbo_kernels *k) {
    k->scalar_dot = scalar_dot_avx2;
    k->scalar_axpy = scalar_axpy_avx2;
    k->tcq_dot = tcq_dot_avx2;
    k->tcq_axpy = tcq_axpy_avx2;
    k->viterbi = viterbi_avx2;
}
