/* turbo_avx2.c - AVX2/FMA kernels of the TurboQuant module (compiled with
 * -mavx2 -mfma, installed by turbo.c only after run-time detection).
 *
 *   scalar codes: 8 indices come from one b-byte word by a variable shift;
 *                 the <= 16-entry codebook sits in two registers (permute).
 *   trellis codes: 8 state windows come from one (k+1)-byte word; the
 *                 2^L-entry codebook is read by pairs of values, 4 loads.
 *   Viterbi:      turbo_viterbi.inc at 8 lanes (the same path as
 *                 kvq_turbo_tcq_viterbi_scalar, bit for bit). */
#include "turbo_internal.h"
#include "simd256.h"

#include <immintrin.h>
#include <math.h>

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

#define VF __m256
#define VI __m256i
#define VL 8
#define V_SET1 _mm256_set1_ps
#define V_LOADU _mm256_loadu_ps
#define V_STOREU _mm256_storeu_ps
#define V_SUB _mm256_sub_ps
#define V_FMA _mm256_fmadd_ps
#define V_MIN _mm256_min_ps
#define V_NEED(need, m, k) need_avx2((need), (m), (k))
#define V_TAG(c, j, mask) tag_avx2((c), (j), (mask))
#define V_TAGGED_MIN(a, b) _mm256_min_epu32((a), (b))
#define V_STORE_MIN(min_in, back, best, mask) store_min((min_in), (back), (best), (mask))
#define V_LOADI(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define V_STATE_IF(c, m, s) \
    _mm256_blendv_epi8(_mm256_set1_epi32(-1), (s), _mm256_castps_si256(_mm256_cmp_ps((c), (m), _CMP_EQ_OQ)))
#define V_GATHER_PLAN gather_plan
#define V_GATHER_PLAN_MAKE(p, lay, k) (*(p) = (gather_plan){ (k) })
#define V_GATHER_ALL(dst, base, p) gather64((dst), (base), (p))
#define VITERBI_FN turbo_viterbi_avx2
#define VITERBI2_FN turbo_viterbi2_avx2

/* Only k: the layout's need_from is a function of k alone
 * (turbo_tcq_column).  k = 3's is the identity (never gathered:
 * turbo_viterbi.inc); k = 2's and 4's are transposes of 4 of the 8
 * minima vectors at a time (tcq_transpose2, tcq_transpose4), which took
 * the place of 8-lane gathers (microcoded: on Zen 4 they were ~45 % of
 * the 8-lane Viterbi). */
typedef struct gather_plan { int k; } gather_plan;

/* The 4 x 4 transpose within 128-bit lanes of a, b, c, d: q[i] = {a_i,
 * b_i, c_i, d_i | a_(i+4), b_(i+4), c_(i+4), d_(i+4)}. */
ALWAYS_INLINE void transpose_lanes(__m256 a, __m256 b, __m256 c, __m256 d, __m256 q[4]) {
    const __m256 ab0 = _mm256_unpacklo_ps(a, b), ab1 = _mm256_unpackhi_ps(a, b);
    const __m256 cd0 = _mm256_unpacklo_ps(c, d), cd1 = _mm256_unpackhi_ps(c, d);
    q[0] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab0), _mm256_castps_pd(cd0)));
    q[1] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab0), _mm256_castps_pd(cd0)));
    q[2] = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(ab1), _mm256_castps_pd(cd1)));
    q[3] = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(ab1), _mm256_castps_pd(cd1)));
}

/* k = 2: need vector 4g + o (o < 4) is lanes 2o, 2o + 1 of minima
 * vectors g, g + 2, g + 4, g + 6, value by value. */
ALWAYS_INLINE void tcq_transpose2(float *dst, const float *base) {
    for (int g = 0; g < 2; g++) {
        __m256 q[4];
        transpose_lanes(_mm256_loadu_ps(base + 8 * g), _mm256_loadu_ps(base + 8 * (g + 2)),
                        _mm256_loadu_ps(base + 8 * (g + 4)), _mm256_loadu_ps(base + 8 * (g + 6)), q);
        float *out = dst + 32 * g;
        _mm256_storeu_ps(out, _mm256_permute2f128_ps(q[0], q[1], 0x20));
        _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(q[2], q[3], 0x20));
        _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(q[0], q[1], 0x31));
        _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(q[2], q[3], 0x31));
    }
}

/* k = 4: need vector 2l + g (l < 4) is lanes l and l + 4 of minima
 * vectors 4g .. 4g + 3, in pairs. */
ALWAYS_INLINE void tcq_transpose4(float *dst, const float *base) {
    const __m256i pairs = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < 2; g++) {
        __m256 q[4];
        transpose_lanes(_mm256_loadu_ps(base + 32 * g), _mm256_loadu_ps(base + 32 * g + 8),
                        _mm256_loadu_ps(base + 32 * g + 16), _mm256_loadu_ps(base + 32 * g + 24), q);
        for (int l = 0; l < 4; l++) _mm256_storeu_ps(dst + 8 * (2 * l + g), _mm256_permutevar8x32_ps(q[l], pairs));
    }
}

ALWAYS_INLINE void gather64(float *dst, const float *base, const gather_plan *p) {
    if (p->k == 2) tcq_transpose2(dst, base);
    else tcq_transpose4(dst, base);
}

/* k >= 3: one run of 8 columns shares need[m]; k = 2: two runs of 4. */
ALWAYS_INLINE __m256 need_avx2(const float *need, int m, int k) {
    if (k >= 3) return _mm256_set1_ps(need[m]);
    __m128 pair = _mm_castpd_ps(_mm_load_sd((const double *)(const void *)(need + m)));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(pair), _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

/* The cost's bits with the low ones (mask) replaced by the row j. */
ALWAYS_INLINE __m256i tag_avx2(__m256 c, int j, int mask) {
    return _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(c), _mm256_set1_epi32(~mask)), _mm256_set1_epi32(j));
}

/* The tagged minima as the next arrival costs, their tags as back-pointers. */
ALWAYS_INLINE void store_min(float *min_in, uint8_t *back, __m256i best, int mask) {
    _mm256_storeu_si256((__m256i *)(void *)min_in, best);
    const __m256i arg = _mm256_and_si256(best, _mm256_set1_epi32(mask));
    /* 8 x int32 (values < 16) -> 8 bytes */
    __m128i a16 = _mm_packs_epi32(_mm256_castsi256_si128(arg), _mm256_extracti128_si256(arg, 1));
    _mm_storel_epi64((__m128i *)back, _mm_packus_epi16(a16, a16));
}

#include "turbo_viterbi.inc"

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
    k->viterbi2 = turbo_viterbi2_avx2;
}
