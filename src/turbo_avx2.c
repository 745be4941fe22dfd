/* turbo_avx2.c - AVX2/FMA kernels of the TurboQuant module (compiled with
 * -mavx2 -mfma, installed by turbo.c only after run-time detection).
 *
 *   scalar codes: 8 indices come from one b-byte word by a variable shift;
 *                 the <= 16-entry codebook sits in two registers (permute).
 *   trellis codes: 8 state windows come from one (k+1)-byte word; the
 *                 2^L-entry codebook is read with a gather.
 *   Viterbi:      the same recursion as kvq_turbo_tcq_viterbi_scalar with
 *                 the same float operations (so the same path, bit for
 *                 bit), on a cost array stored in a permuted order that
 *                 makes both the per-context minimum and the update
 *                 vertical (see viterbi_avx2). */
#include "turbo_internal.h"

#include <immintrin.h>
#include <math.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define N_CTX (1 << CTX_BITS)

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ------------------------------------------------------- scalar codes */

typedef struct scalar_lut { __m256 lo, hi; __m256i shifts, mask; int bits; } scalar_lut;

static scalar_lut scalar_lut_make(const float *codebook, int bits) {
    float tab[16] = { 0 };
    memcpy(tab, codebook, sizeof(float) << bits);
    scalar_lut l;
    l.lo = _mm256_loadu_ps(tab);
    l.hi = _mm256_loadu_ps(tab + 8);
    l.shifts = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bits));
    l.mask = _mm256_set1_epi32((1 << bits) - 1);
    l.bits = bits;
    return l;
}

/* The 8 codebook values of group g. */
static inline __m256 scalar_values(const scalar_lut *l, const uint8_t *codes, int g) {
    __m256i w = _mm256_set1_epi32((int)turbo_scalar_group(codes, l->bits, g));
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(w, l->shifts), l->mask);
    __m256 v = _mm256_permutevar8x32_ps(l->lo, idx);
    if (l->bits == 4) {     /* index bit 3 selects the upper eight entries */
        __m256 upper = _mm256_permutevar8x32_ps(l->hi, idx);
        v = _mm256_blendv_ps(v, upper, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return v;
}

static float scalar_dot_avx2(const uint8_t *codes, const float *codebook, int bits,
                             const float *q_rot, int d) {
    scalar_lut l = scalar_lut_make(codebook, bits);
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < d / 8; g++)
        acc = _mm256_fmadd_ps(scalar_values(&l, codes, g), _mm256_loadu_ps(q_rot + 8 * g), acc);
    return hsum(acc);
}

static void scalar_axpy_avx2(const uint8_t *codes, const float *codebook, int bits,
                             float w_scale, float *acc_rot, int d) {
    scalar_lut l = scalar_lut_make(codebook, bits);
    __m256 w = _mm256_set1_ps(w_scale);
    for (int g = 0; g < d / 8; g++) {
        __m256 y = _mm256_loadu_ps(acc_rot + 8 * g);
        _mm256_storeu_ps(acc_rot + 8 * g, _mm256_fmadd_ps(w, scalar_values(&l, codes, g), y));
    }
}

/* ------------------------------------------------------ trellis codes */

/* The 8 codebook values of group g: states are the L-bit windows at bit
 * j*k of the group word; lanes 4..7 read the word shifted by 4k so that
 * every window fits a 32-bit lane. */
static inline __m256 tcq_values(const uint8_t *codes, const float *codebook, int k, int g) {
    uint64_t w = turbo_tcq_group(codes, k, g);
    int lo = (int)(uint32_t)w, hi = (int)(uint32_t)(w >> (4 * k));
    __m256i words = _mm256_setr_epi32(lo, lo, lo, lo, hi, hi, hi, hi);
    __m256i shifts = _mm256_setr_epi32(0, k, 2 * k, 3 * k, 0, k, 2 * k, 3 * k);
    __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(words, shifts),
                                   _mm256_set1_epi32((1 << (CTX_BITS + k)) - 1));
    return _mm256_i32gather_ps(codebook, idx, 4);
}

static float tcq_dot_avx2(const uint8_t *codes, const float *codebook, int k,
                          const float *q_rot, int d) {
    __m256 acc = _mm256_setzero_ps();
    for (int g = 0; g < d / 8; g++)
        acc = _mm256_fmadd_ps(tcq_values(codes, codebook, k, g), _mm256_loadu_ps(q_rot + 8 * g), acc);
    return hsum(acc);
}

static void tcq_axpy_avx2(const uint8_t *codes, const float *codebook, int k,
                          float w_scale, float *acc_rot, int d) {
    __m256 w = _mm256_set1_ps(w_scale);
    for (int g = 0; g < d / 8; g++) {
        __m256 y = _mm256_loadu_ps(acc_rot + 8 * g);
        _mm256_storeu_ps(acc_rot + 8 * g, _mm256_fmadd_ps(w, tcq_values(codes, codebook, k, g), y));
    }
}

/* ------------------------------------------------------------- Viterbi */

/*
 * Layout: state s = (a << k) | j (a: its top 6 bits, j: its low k bits)
 * lives at position j*64 + a.  Then
 *   - the best predecessor of context a is min over j of cost[j*64 + a]:
 *     an element-wise minimum of the 2^k rows (first j wins ties, as in
 *     the scalar code);
 *   - the new cost at position j*64 + a is min_in[s & 63] + (x - c[s])^2
 *     with s & 63 = ((a mod R) << k) | j, R = 64 >> k: a row of R values
 *     repeated along a, read from `rep` (each row repeated to 16 lanes so
 *     that an 8-lane load at 8v mod 16 always finds the right pattern).
 */
typedef struct viterbi_work {
    float cost[TURBO_MAX_STATES];      /* by position                     */
    float cpos[TURBO_MAX_STATES];      /* codebook by position            */
    float min_in[N_CTX];
    float rep[16][16];                 /* rep[j][i] = min_in[((i % R) << k) | j] */
    uint8_t back[KVQ_TURBO_BLOCK][N_CTX];
} viterbi_work;

static void viterbi_first(viterbi_work *w, int n_states, float x0) {
    __m256 x = _mm256_set1_ps(x0);
    for (int p = 0; p < n_states; p += 8) {
        __m256 e = _mm256_sub_ps(x, _mm256_loadu_ps(w->cpos + p));
        _mm256_storeu_ps(w->cost + p, _mm256_mul_ps(e, e));
    }
}

static void viterbi_min(viterbi_work *w, int k, uint8_t *back) {
    for (int a = 0; a < N_CTX; a += 8) {
        __m256 best = _mm256_loadu_ps(w->cost + a);
        __m256i arg = _mm256_setzero_si256();
        for (int j = 1; j < (1 << k); j++) {
            __m256 cur = _mm256_loadu_ps(w->cost + j * N_CTX + a);
            __m256 lt = _mm256_cmp_ps(cur, best, _CMP_LT_OQ);
            best = _mm256_blendv_ps(best, cur, lt);
            arg = _mm256_blendv_epi8(arg, _mm256_set1_epi32(j), _mm256_castps_si256(lt));
        }
        _mm256_storeu_ps(w->min_in + a, best);
        int32_t args[8];
        _mm256_storeu_si256((__m256i *)args, arg);
        for (int i = 0; i < 8; i++) back[a + i] = (uint8_t)args[i];
    }
}

static void viterbi_update(viterbi_work *w, int k, float xt) {
    int period_mask = (N_CTX >> k) - 1;
    for (int j = 0; j < (1 << k); j++)
        for (int i = 0; i < 16; i++) w->rep[j][i] = w->min_in[((i & period_mask) << k) | j];
    __m256 x = _mm256_set1_ps(xt);
    for (int j = 0; j < (1 << k); j++)
        for (int a = 0; a < N_CTX; a += 8) {
            int p = j * N_CTX + a;
            __m256 e = _mm256_sub_ps(x, _mm256_loadu_ps(w->cpos + p));
            __m256 m = _mm256_loadu_ps(w->rep[j] + (a & 15));
            _mm256_storeu_ps(w->cost + p, _mm256_add_ps(m, _mm256_mul_ps(e, e)));
        }
}

static double viterbi_avx2(int k, const float *c, const float *x, int d, uint16_t *states) {
    viterbi_work w;
    const int n_states = 1 << (CTX_BITS + k), jmask = (1 << k) - 1;
    for (int s = 0; s < n_states; s++) w.cpos[(s & jmask) * N_CTX + (s >> k)] = c[s];
    viterbi_first(&w, n_states, x[0]);
    for (int t = 1; t < d; t++) {
        viterbi_min(&w, k, w.back[t]);
        viterbi_update(&w, k, x[t]);
    }
    /* final state: smallest cost, lowest state number on ties */
    int last = 0;
    for (int s = 1; s < n_states; s++)
        if (w.cost[(s & jmask) * N_CTX + (s >> k)] < w.cost[(last & jmask) * N_CTX + (last >> k)]) last = s;
    turbo_tcq_backtrack(k, (const uint8_t (*)[N_CTX])w.back, d, last, states);
    return w.cost[(last & jmask) * N_CTX + (last >> k)];
}

void turbo_install_avx2(turbo_kernels *k) {
    k->scalar_dot = scalar_dot_avx2;
    k->scalar_axpy = scalar_axpy_avx2;
    k->tcq_dot = tcq_dot_avx2;
    k->tcq_axpy = tcq_axpy_avx2;
    k->viterbi = viterbi_avx2;
}
