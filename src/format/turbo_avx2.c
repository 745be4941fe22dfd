/* turbo_avx2.c - AVX2/FMA kernels of the TurboQuant module (compiled with
 * -mavx2 -mfma, installed by turbo.c only after run-time detection).
 *
 *   scalar codes: 8 indices come from one b-byte word by a variable shift;
 *                 the <= 16-entry codebook sits in two registers (permute).
 *   trellis codes: 8 state windows come from one (k+1)-byte word; the
 *                 2^L-entry codebook is read by pairs of values, 4 loads.
 *   Viterbi:      turbo_viterbi16.inc at 16 lanes (the same path as
 *                 kvq_turbo_tcq_viterbi_scalar, bit for bit). */
#include "turbo_internal.h"
#include "simd256.h"
#include "turbo_walk_x86.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define N_CTX (1 << CTX_BITS)

/* The kernels below are written once for both code families and every
 * bit width; each public kernel calls them with compile-time constants, so
 * the compiler emits one specialised loop per (family, bits): the byte
 * loops that assemble a group's word unroll and the shifts become
 * immediates. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))
typedef enum { FAMILY_SCALAR, FAMILY_TCQ } code_family;

/* ------------------------------------------------------- scalar codes */

typedef struct scalar_lut { __m256 lo, hi; } scalar_lut;

/* The codebook repeated to 16 entries (entry i = codebook[i mod 2^bits]),
 * so that an index's bits above its code select the same value: the
 * permute reads the low 3 bits, the blend bit 3, and no mask is needed. */
ALWAYS_INLINE scalar_lut scalar_lut_make(const float *codebook, const int bits) {
    float tab[16];
    for (int i = 0; i < 16; i++) tab[i] = codebook[i & ((1 << bits) - 1)];
    return (scalar_lut){ _mm256_loadu_ps(tab), _mm256_loadu_ps(tab + 8) };
}

/* The 8 codebook values of group g of a scalar stream. */
ALWAYS_INLINE __m256 scalar_values(const scalar_lut *l, const uint8_t *codes, int g, const int bits) {
    __m256i w = _mm256_set1_epi32((int)turbo_scalar_group(codes, bits, g));
    __m256i shifts = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits, 6 * bits, 7 * bits);
    __m256i idx = _mm256_srlv_epi32(w, shifts);
    __m256 v = _mm256_permutevar8x32_ps(l->lo, idx);
    if (bits == 4) {     /* index bit 3 selects the upper eight entries */
        __m256 upper = _mm256_permutevar8x32_ps(l->hi, idx);
        v = _mm256_blendv_ps(v, upper, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
    return v;
}

/* ------------------------------------------------------ trellis codes */

/* The 8 codebook values of group g of a trellis stream: states are the
 * L-bit windows at bit j*k of the group word; values 2i and 2i+1 come
 * together from the pair table (turbo_tcq_pairs: the L + k bit window at
 * bit 2i*k indexes both), one 64-bit load each: 4 loads and 3 inserts for
 * 8 values.  Measured on Zen 5, a decode step's attention over 16384
 * keys: one scalar load per value (8 loads, 7 inserts) took 1.4x (k = 2)
 * to 1.8x (k = 3) as long; an 8-lane gather of the single entries took
 * 1.7x as long as those scalar loads.  The values are the same. */
ALWAYS_INLINE __m256 tcq_values(const uint8_t *codes, const float *pairs, int g, const int k) {
    const uint64_t w = turbo_tcq_group(codes, k, g);
    const uint32_t m = (1u << (CTX_BITS + 2 * k)) - 1;
#define PAIR(i) _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)(const void *)(pairs + 2 * ((w >> (2 * (i) * k)) & m)))
#define PAIR_HI(lo, i) _mm_loadh_pi(lo, (const __m64 *)(const void *)(pairs + 2 * ((w >> (2 * (i) * k)) & m)))
    const __m128 lo = PAIR_HI(PAIR(0), 1), hi = PAIR_HI(PAIR(2), 3);
#undef PAIR
#undef PAIR_HI
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}

/* ------------------------------------------------ the block kernels */

/* What a group's values are read from besides the codes: the scalar
 * codes' codebook in registers, the trellis codebook's pair table. */
typedef struct lanes_lut { scalar_lut s; const float *pairs; } lanes_lut;
typedef lanes_lut LUT;
ALWAYS_INLINE lanes_lut lut_make(code_family f, const float *codebook, const int bits) {
    if (f == FAMILY_SCALAR) return (lanes_lut){ scalar_lut_make(codebook, bits), NULL };
    /* the codebook is the committed one of k (kvq_turbo_tcq_codebook: what turbo.c passes) */
    return (lanes_lut){ { _mm256_setzero_ps(), _mm256_setzero_ps() }, turbo_tcq_pairs(bits) };
}

ALWAYS_INLINE __m256 group_values(code_family f, const lanes_lut *l, const uint8_t *codes,
                                  const float *codebook, int g, const int bits) {
    (void)codebook;
    return f == FAMILY_SCALAR ? scalar_values(&l->s, codes, g, bits) : tcq_values(codes, l->pairs, g, bits);
}

/* Lane sums of 4 vectors in one tree: [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5
 * ...], again, then the halves added; every position summed alike. */
ALWAYS_INLINE __m128 lanes_reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

#define LN 8
#define LF __m256
#define lf_zero _mm256_setzero_ps
#define lf_load _mm256_loadu_ps
#define lf_store _mm256_storeu_ps
#define lf_fma _mm256_fmadd_ps
#define lf_set1 _mm256_set1_ps
#define HEADS_PER_PASS 2     /* 4 keys x 2 heads accumulators + 2 queries: 16 registers */
#define LANES_NAME(x) x##_avx2
#include "turbo_lanes.inc"

/* ------------------------------------------------------------- Viterbi */

/* The 16-bit search (turbo_viterbi16.inc) at 16 lanes. */

/* turbo_tcq_xmax, as turbo_viterbi_avx512.c's xmax_avx512 */
static float xmax_avx2(const float *x, int d) {
    const __m256 inf = _mm256_set1_ps(INFINITY), magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int t = 0;
    for (; t + 8 <= d; t += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + t), magnitude);
        m = _mm256_max_ps(m, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
    }
    float lanes[8], r = 0.0f;
    _mm256_storeu_ps(lanes, m);
    for (int i = 0; i < 8; i++) r = lanes[i] > r ? lanes[i] : r;
    for (; t < d; t++) {
        const float a = fabsf(x[t]);
        if (a > r && isfinite(a)) r = a;
    }
    return r;
}

/* turbo_tcq_fixed of a row, as turbo_viterbi_avx512.c's fixed_row_avx512 */
static void fixed_row_avx2(int16_t *X, const float *x, int d, float scale) {
    const __m256 s = _mm256_set1_ps(scale), hi = _mm256_set1_ps(32767.0f), lo = _mm256_set1_ps(-32767.0f);
    int t = 0;
    for (; t + 8 <= d; t += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + t), s);
        const __m256 num = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
        const __m256i r = _mm256_cvtps_epi32(_mm256_and_ps(num, _mm256_min_ps(_mm256_max_ps(v, lo), hi)));
        _mm_storeu_si128((__m128i *)(void *)(X + t), _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    for (; t < d; t++) X[t] = turbo_tcq_fixed(x[t], scale);
}

/* The arrival costs twice (turbo_internal.h, the layout): in context
 * order in four registers (a step's minima less its floor), where the
 * floor and the kept copies are taken; and in (j, m) order in memory,
 * need[j*R + m] = the arrival into context (m << k) | j, where a row's
 * vector of them is one load (R = 4, 8, 16 words at k = 4, 3, 2:
 * broadcast, broadcast, plain). */
typedef struct viterbi_arr {
    __m256i ctx[4];
    _Alignas(32) uint16_t need[N_CTX];
} viterbi_arr;

ALWAYS_INLINE __m256i need_avx2(const viterbi_arr *a, int j, const int k) {
    const uint16_t *p = a->need + j * (N_CTX >> k);
    if (k == 4) return _mm256_broadcastq_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p));
    if (k == 3) return _mm256_broadcastsi128_si256(_mm_load_si128((const __m128i *)(const void *)p));
    return _mm256_load_si256((const __m256i *)(const void *)p);
}

/* The 16 back-pointers as bytes. */
ALWAYS_INLINE void store_back_avx2(uint8_t *back, __m256i bj) {
    _mm_storeu_si128((__m128i *)(void *)back,
                     _mm_packus_epi16(_mm256_castsi256_si128(bj), _mm256_extracti128_si256(bj, 1)));
}

ALWAYS_INLINE int hmin_avx2(__m256i v) {
    const __m128i q = _mm_min_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return _mm_extract_epi16(_mm_minpos_epu16(q), 0);
}

ALWAYS_INLINE int first_eq_avx2(__m256i v, int m) {
    const unsigned eq = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi16(v, _mm256_set1_epi16((short)m)));
    return eq ? __builtin_ctz(eq) / 2 : -1;
}

/* The 64 arrival costs as a 4 x 4 x 4 cube, index [A B C] (A: the vector,
 * B: the group of 4 words in it, C: the word in the group), reordered
 * (arrive_avx2) by two transposes,
 *   words_4x4:  within one vector, word 4C + B -> 4B + C (a byte shuffle
 *               in each 128-bit lane, then a dword permute);
 *   qwords_4x4: across 4 vectors, qword C of vector A -> qword A of
 *               vector C (unpacks and 128-bit lane moves). */
ALWAYS_INLINE __m256i words_4x4(__m256i v) {
    const __m256i pair = _mm256_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                                          0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);
    return _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, pair), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

ALWAYS_INLINE void qwords_4x4(__m256i v[4]) {
    const __m256i t0 = _mm256_unpacklo_epi64(v[0], v[1]), t1 = _mm256_unpackhi_epi64(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi64(v[2], v[3]), t3 = _mm256_unpackhi_epi64(v[2], v[3]);
    v[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
    v[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
    v[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
    v[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
}

/* An 8 x 8 transpose of words (vector i holds rows 2i and 2i + 1): the
 * rows paired (0, 4), (1, 5), ... by 128-bit moves, words then dwords
 * interleaved, then each vector's qwords in the order 0, 2, 1, 3. */
ALWAYS_INLINE void words_8x8(__m256i v[4]) {
    const __m256i r04 = _mm256_permute2x128_si256(v[0], v[2], 0x20), r15 = _mm256_permute2x128_si256(v[0], v[2], 0x31);
    const __m256i r26 = _mm256_permute2x128_si256(v[1], v[3], 0x20), r37 = _mm256_permute2x128_si256(v[1], v[3], 0x31);
    const __m256i t0 = _mm256_unpacklo_epi16(r04, r15), t1 = _mm256_unpackhi_epi16(r04, r15);
    const __m256i t2 = _mm256_unpacklo_epi16(r26, r37), t3 = _mm256_unpackhi_epi16(r26, r37);
    v[0] = _mm256_permute4x64_epi64(_mm256_unpacklo_epi32(t0, t2), 0xd8);
    v[1] = _mm256_permute4x64_epi64(_mm256_unpackhi_epi32(t0, t2), 0xd8);
    v[2] = _mm256_permute4x64_epi64(_mm256_unpacklo_epi32(t1, t3), 0xd8);
    v[3] = _mm256_permute4x64_epi64(_mm256_unpackhi_epi32(t1, t3), 0xd8);
}

/* The next step's arrival costs: the minima (by context) less low, kept,
 * and put in (j, m) order.  As a 4 x 4 x 4 cube [A B C] of context
 * index 16A + 4B + C, need[B C A] = in[A B C] at k = 4 (m = A, j = 4B +
 * C) and need[C A B] = in[A B C] at k = 2 (m = 4A + B, j = C); at k = 3
 * an 8 x 8 transpose. */
ALWAYS_INLINE void arrive_avx2(viterbi_arr *a, const __m256i best[4], int low, const int k) {
    const __m256i l = _mm256_set1_epi16((short)low);
    __m256i v[4];
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) a->ctx[i] = v[i] = _mm256_sub_epi16(best[i], l);
    if (k == 4) {
        qwords_4x4(v);
        KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) v[i] = words_4x4(v[i]);
    } else if (k == 2) {
        KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) v[i] = words_4x4(v[i]);
        qwords_4x4(v);
    } else {
        words_8x8(v);
    }
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) _mm256_store_si256((__m256i *)(void *)(a->need + 16 * i), v[i]);
}

ALWAYS_INLINE int floor_avx2(const viterbi_arr *a) {
    return hmin_avx2(_mm256_min_epu16(_mm256_min_epu16(a->ctx[0], a->ctx[1]), _mm256_min_epu16(a->ctx[2], a->ctx[3])));
}

ALWAYS_INLINE void zero_avx2(viterbi_arr *a) {
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) a->ctx[i] = _mm256_setzero_si256();
    memset(a->need, 0, sizeof a->need);
}

/* The arrival costs by context: the registers as they are. */
ALWAYS_INLINE void store_context_avx2(const viterbi_arr *a, uint16_t *in) {
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) _mm256_storeu_si256((__m256i *)(void *)(in + 16 * i), a->ctx[i]);
}

#define VW __m256i
#define WL 16
#define W_XMAX(x, d) xmax_avx2((x), (d))
#define W_FIXED_ROW(X, x, d, scale) fixed_row_avx2((X), (x), (d), (scale))
#define W_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define W_STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define W_SET1(x) _mm256_set1_epi16((short)(x))
#define W_ONES() _mm256_set1_epi32(-1)
#define W_COST(in, X, C) turbo_cost16_avx2((in), (X), (C))
#define W_MIN(a, b) _mm256_min_epu16((a), (b))
/* No unsigned 16-bit compare here: b < a exactly where min(a, b)
 * differs from a.  A pair's row is jb plus that compare's -1 where a
 * is kept (ja = jb - 1). */
#define W_PAIR(a, b, ja, jb, m, jv)                                                           \
    do {                                                                                      \
        (m) = _mm256_min_epu16((a), (b));                                                     \
        (jv) = _mm256_add_epi16(_mm256_set1_epi16((short)(jb)), _mm256_cmpeq_epi16((m), (a))); \
    } while (0)
#define W_TAKEV(best, bj, c, jv)                                                   \
    do {                                                                          \
        const __m256i nb_ = _mm256_min_epu16((best), (c));                        \
        (bj) = _mm256_blendv_epi8((jv), (bj), _mm256_cmpeq_epi16(nb_, (best)));   \
        (best) = nb_;                                                             \
    } while (0)
#define W_STORE_BACK(back, bj) store_back_avx2((back), (bj))
#define W_HMIN(v) hmin_avx2(v)
#define W_FIRST_EQ(v, m) first_eq_avx2((v), (m))
#define W_PLAN char   /* nothing to plan */
#define W_PLAN_OF(k) ((void)(k), (const char *)NULL)
#define W_ARR viterbi_arr
#define W_ARR_ZERO(a) zero_avx2(a)
#define W_IN(a, j, col, k, plan) ((void)(col), (void)(plan), need_avx2((a), (j), (k)))
#define W_ARR_FLOOR(a) floor_avx2(a)
#define W_ARR_NEXT(a, best, low, k, plan) ((void)(plan), arrive_avx2((a), (best), (low), (k)))
#define W_ARR_STORE_CONTEXT(a, in, k, plan) ((void)(k), (void)(plan), store_context_avx2((a), (in)))
#define W_KEEPS(k) ((k) >= 3)
#define VITERBI_FN turbo_viterbi_avx2
#define W_KEPT_STEP(k, kept, X, cstate, t, s) turbo_kept_step((k), (kept), (X), (cstate), (t), (s))
#define VITERBI_PAIRS_FN turbo_viterbi_pairs_avx2
#include "turbo_viterbi16.inc"

/* Block scales 8 at a time: the norms converted by F16C (exact, as the
 * scalar conversion) and divided in one vector (the same IEEE quotient). */
static void block_scales_avx2(const uint8_t *const *rows, int nk, size_t at, float root, float *bs) {
    int i = 0;
    for (; i + 8 <= nk; i += 8) {
#define H(j) (short)(rows[i + j] ? kvq_rd16(rows[i + j] + at) : 0)    /* inserted, not stored and reloaded */
        const __m256 v = _mm256_cvtph_ps(_mm_setr_epi16(H(0), H(1), H(2), H(3), H(4), H(5), H(6), H(7)));
#undef H
        _mm256_storeu_ps(bs + i, _mm256_div_ps(v, _mm256_set1_ps(root)));
    }
    for (; i < nk; i++) bs[i] = rows[i] ? kvq_half_to_float(kvq_rd16(rows[i] + at)) / root : 0.0f;
}

void turbo_install_avx2(turbo_kernels *k) {
    install_blocks_avx2(k);
    k->scales = block_scales_avx2;
    k->viterbi = turbo_viterbi_avx2;
    k->viterbi_pairs = turbo_viterbi_pairs_avx2;
}
