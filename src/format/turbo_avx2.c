/* turbo_avx2.c - AVX2/FMA kernels of the TurboQuant module (compiled with
 * -mavx2 -mfma, installed by turbo.c only after run-time detection).
 *
 *   scalar codes: 8 indices come from one b-byte word by a variable shift;
 *                 the <= 16-entry codebook sits in two registers (permute).
 *   trellis codes: 8 state windows come from one (k+1)-byte word; the
 *                 2^L-entry codebook is read with 8 scalar loads.
 *   Viterbi:      turbo_viterbi.inc at 8 lanes (the same path as
 *                 kvq_turbo_tcq_viterbi_scalar, bit for bit). */
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
 * L-bit windows at bit j*k of the group word, each looked up with a scalar
 * load (measured: the 8-lane gather of the same entries took 1.7x as long
 * per row on AMD Zen 5, 3.6 ns each; the values are the same). */
ALWAYS_INLINE __m256 tcq_values(const uint8_t *codes, const float *codebook, int g, const int k) {
    const uint64_t w = turbo_tcq_group(codes, k, g);
    const uint32_t m = (1u << (CTX_BITS + k)) - 1;
    return _mm256_setr_ps(codebook[w & m], codebook[(w >> k) & m], codebook[(w >> 2 * k) & m],
                          codebook[(w >> 3 * k) & m], codebook[(w >> 4 * k) & m], codebook[(w >> 5 * k) & m],
                          codebook[(w >> 6 * k) & m], codebook[(w >> 7 * k) & m]);
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

/* ------------------------------------------ attention: heads and keys */

enum { HEADS_PER_PASS = 4 };   /* 2 accumulators per head in registers */

/* nh (1..4) heads against the blocks of nk keys: each group's values
 * decoded once and used by every head; each head summed as dot_fixed
 * sums it (two accumulators, even and odd groups), so its score is
 * dot_fixed's. */
ALWAYS_INLINE void dot_heads_fixed(code_family f, const uint8_t *const *codes, int nk, const float *codebook,
                                   const int bits, const float *q_rot, const int nh, int q_stride, int d, float *out) {
    scalar_lut l = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    if (f == FAMILY_SCALAR) l = scalar_lut_make(codebook, bits);
    for (int t = 0; t < nk; t++) {
        if (!codes[t]) {
            for (int h = 0; h < nh; h++) out[h * nk + t] = 0.0f;
            continue;
        }
        __m256 acc0[HEADS_PER_PASS], acc1[HEADS_PER_PASS];
        for (int h = 0; h < nh; h++) acc0[h] = acc1[h] = _mm256_setzero_ps();
        for (int g = 0; g < d / 8; g += 2) {
            const __m256 v0 = group_values(f, &l, codes[t], codebook, g, bits);
            const __m256 v1 = group_values(f, &l, codes[t], codebook, g + 1, bits);
            for (int h = 0; h < nh; h++) {
                const float *q = q_rot + (size_t)h * q_stride + 8 * g;
                acc0[h] = _mm256_fmadd_ps(v0, _mm256_loadu_ps(q), acc0[h]);
                acc1[h] = _mm256_fmadd_ps(v1, _mm256_loadu_ps(q + 8), acc1[h]);
            }
        }
        for (int h = 0; h < nh; h++) out[h * nk + t] = hsum(_mm256_add_ps(acc0[h], acc1[h]));
    }
}

ALWAYS_INLINE void dot_heads_all(code_family f, const uint8_t *const *codes, int nk, const float *codebook,
                                 const int bits, const float *q_rot, int G, int q_stride, int d, float *out) {
    int h = 0;
    for (; h + HEADS_PER_PASS <= G; h += HEADS_PER_PASS)
        dot_heads_fixed(f, codes, nk, codebook, bits, q_rot + (size_t)h * q_stride, HEADS_PER_PASS, q_stride, d,
                        out + h * nk);
    const float *q = q_rot + (size_t)h * q_stride;
    switch (G - h) {
    case 1: dot_heads_fixed(f, codes, nk, codebook, bits, q, 1, q_stride, d, out + h * nk); break;
    case 2: dot_heads_fixed(f, codes, nk, codebook, bits, q, 2, q_stride, d, out + h * nk); break;
    case 3: dot_heads_fixed(f, codes, nk, codebook, bits, q, 3, q_stride, d, out + h * nk); break;
    default: break;
    }
}

/* nh (1..4) heads' accumulators of one group of 8 values stay in registers
 * while the nk keys are added in order, each key's group decoded once:
 * per output acc = fma(coef, value, acc) key after key, as axpy_fixed
 * does per key (a coefficient of 0 adds 0). */
ALWAYS_INLINE void axpy_keys_fixed(code_family f, const uint8_t *const *codes, int nk, const float *codebook,
                                   const int bits, const float *coef, const int nh, float *acc_rot, int acc_stride,
                                   int d) {
    scalar_lut l = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    if (f == FAMILY_SCALAR) l = scalar_lut_make(codebook, bits);
    for (int g = 0; g < d / 8; g++) {
        __m256 acc[HEADS_PER_PASS];
        for (int h = 0; h < nh; h++) acc[h] = _mm256_loadu_ps(acc_rot + (size_t)h * acc_stride + 8 * g);
        for (int t = 0; t < nk; t++) {
            if (!codes[t]) continue;
            const __m256 v = group_values(f, &l, codes[t], codebook, g, bits);
            for (int h = 0; h < nh; h++) acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(coef[h * nk + t]), v, acc[h]);
        }
        for (int h = 0; h < nh; h++) _mm256_storeu_ps(acc_rot + (size_t)h * acc_stride + 8 * g, acc[h]);
    }
}

ALWAYS_INLINE void axpy_keys_all(code_family f, const uint8_t *const *codes, int nk, const float *codebook,
                                 const int bits, const float *coef, int G, float *acc_rot, int acc_stride, int d) {
    int h = 0;
    for (; h + HEADS_PER_PASS <= G; h += HEADS_PER_PASS)
        axpy_keys_fixed(f, codes, nk, codebook, bits, coef + h * nk, HEADS_PER_PASS, acc_rot + (size_t)h * acc_stride,
                        acc_stride, d);
    float *a = acc_rot + (size_t)h * acc_stride;
    switch (G - h) {
    case 1: axpy_keys_fixed(f, codes, nk, codebook, bits, coef + h * nk, 1, a, acc_stride, d); break;
    case 2: axpy_keys_fixed(f, codes, nk, codebook, bits, coef + h * nk, 2, a, acc_stride, d); break;
    case 3: axpy_keys_fixed(f, codes, nk, codebook, bits, coef + h * nk, 3, a, acc_stride, d); break;
    default: break;
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

#define BITS_SWITCH_VOID(bits, fn, ...) \
    switch (bits) { case 2: fn(__VA_ARGS__, 2); break; case 3: fn(__VA_ARGS__, 3); break; default: fn(__VA_ARGS__, 4); }

#define DOT_HEADS(fam, b) dot_heads_all(fam, codes, nk, c, b, q, G, qs, d, out)
#define DOT_HEADS_S(x, b) DOT_HEADS(FAMILY_SCALAR, b)
#define DOT_HEADS_T(x, b) DOT_HEADS(FAMILY_TCQ, b)
static void scalar_dot_heads_avx2(const uint8_t *const *codes, int nk, const float *c, int bits, const float *q, int G,
                                  int qs, int d, float *out) {
    BITS_SWITCH_VOID(bits, DOT_HEADS_S, 0)
}
static void tcq_dot_heads_avx2(const uint8_t *const *codes, int nk, const float *c, int k, const float *q, int G,
                               int qs, int d, float *out) {
    BITS_SWITCH_VOID(k, DOT_HEADS_T, 0)
}
#define AXPY_KEYS(fam, b) axpy_keys_all(fam, codes, nk, c, b, coef, G, acc, as, d)
#define AXPY_KEYS_S(x, b) AXPY_KEYS(FAMILY_SCALAR, b)
#define AXPY_KEYS_T(x, b) AXPY_KEYS(FAMILY_TCQ, b)
static void scalar_axpy_keys_avx2(const uint8_t *const *codes, int nk, const float *c, int bits, const float *coef,
                                  int G, float *acc, int as, int d) {
    BITS_SWITCH_VOID(bits, AXPY_KEYS_S, 0)
}
static void tcq_axpy_keys_avx2(const uint8_t *const *codes, int nk, const float *c, int k, const float *coef, int G,
                               float *acc, int as, int d) {
    BITS_SWITCH_VOID(k, AXPY_KEYS_T, 0)
}

/* ------------------------------------------------------------- Viterbi */

#define VF __m256
#define VI __m256i
#define VL 8
#define V_SET1 _mm256_set1_ps
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_ADD _mm256_add_ps
#define V_SUB _mm256_sub_ps
#define V_MUL _mm256_mul_ps
#define V_ISET1 _mm256_set1_epi32
#define V_IZERO _mm256_setzero_si256()
#define V_NEED(need, m, k) need_avx2((need), (m), (k))
#define V_KEEP_SMALLER(best, arg, cur, jv) keep_smaller(&(best), &(arg), (cur), (jv))
#define V_STORE_MIN(min_in, back, best, arg) store_min((min_in), (back), (best), (arg))
#define V_GATHER(dst, base, idx) \
    _mm256_storeu_ps((dst), _mm256_i32gather_ps((base), _mm256_loadu_si256((const __m256i *)(const void *)(idx)), 4))
#define VITERBI_FN turbo_viterbi_avx2

/* k >= 3: one run of 8 columns shares need[m]; k = 2: two runs of 4. */
ALWAYS_INLINE __m256 need_avx2(const float *need, int m, int k) {
    if (k >= 3) return _mm256_set1_ps(need[m]);
    __m128 pair = _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(need + m)));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(pair), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

ALWAYS_INLINE void keep_smaller(__m256 *best, __m256i *arg, __m256 cur, __m256i j) {
    __m256 lt = _mm256_cmp_ps(cur, *best, _CMP_LT_OQ);       /* ties keep the smaller j */
    *best = _mm256_blendv_ps(*best, cur, lt);
    *arg = _mm256_blendv_epi8(*arg, j, _mm256_castps_si256(lt));
}

ALWAYS_INLINE void store_min(float *min_in, uint8_t *back, __m256 best, __m256i arg) {
    _mm256_storeu_ps(min_in, best);
    /* 8 x int32 (values < 16) -> 8 bytes */
    __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(arg), _mm256_extracti128_si256(arg, 1));
    _mm_storel_epi64((__m128i *)back, _mm_packus_epi16(a16, a16));
}

#include "turbo_viterbi.inc"

void turbo_install_avx2(turbo_kernels *k) {
    k->scalar_dot = scalar_dot_avx2;
    k->scalar_axpy = scalar_axpy_avx2;
    k->tcq_dot = tcq_dot_avx2;
    k->tcq_axpy = tcq_axpy_avx2;
    k->viterbi = turbo_viterbi_avx2;
    k->scalar_dot_heads = scalar_dot_heads_avx2;
    k->tcq_dot_heads = tcq_dot_heads_avx2;
    k->scalar_axpy_keys = scalar_axpy_keys_avx2;
    k->tcq_axpy_keys = tcq_axpy_keys_avx2;
}
