/* turbo_avx512.c - the TurboQuant block kernels at 16 lanes (AVX-512 F/BW/
 * VL/DQ; turbo_lanes.inc, the loops shared with the 8-lane AVX2 level),
 * installed by turbo.c only where the CPU has them.
 *
 * A group is 16 values.
 *   scalar codes: the group's 2b bytes come in with one masked load
 *                 (nothing read past them), every 32-bit lane takes the 4
 *                 bytes its value starts in (a byte shuffle) and shifts
 *                 its code to bit 0; the <= 16-entry codebook is one
 *                 register, repeated to 16
 *                 entries, so the permute's low 4 index bits pick the
 *                 value whatever the bits above it hold (no mask);
 * The trellis codes keep the 8-lane kernels of the AVX2 level (turbo.c
 * installs them at this level too, and the VBMI look-ups of
 * turbo_tcq64_vbmi.c over them where the CPU has VBMI): their cost is the 256-1024
 * entry codebook look-up, and every 16-lane form measured here ran slower
 * than 8 scalar loads per 8 values, the AVX2 kernels' way before they read
 * pairs of values (two such halves and an insert: 1.05-1.4x the time; the
 * state windows taken apart in one vector, stored and loaded back: 1.7x;
 * a 16-lane gather: about 2.5x). */
#include "turbo_internal.h"
#include "simd512.h"

#include <immintrin.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define ALWAYS_INLINE static inline __attribute__((always_inline))
typedef enum { FAMILY_SCALAR, FAMILY_TCQ } code_family;

typedef struct lut16 { __m512 v; } LUT;

ALWAYS_INLINE LUT lut_make(code_family f, const float *codebook, const int bits) {
    (void)f;
    float tab[16];
    for (int i = 0; i < 16; i++) tab[i] = codebook[i & ((1 << bits) - 1)];
    return (LUT){ _mm512_loadu_ps(tab) };
}

/* Lane j of 16 holds value j's code (bits j*bits .. of the group's nbytes
 * bytes) at bit 0, the bits above it unmasked. */
ALWAYS_INLINE __m512i group_codes(const uint8_t *codes, int g, const int bits, const int nbytes) {
#define AT(j) (int)(((unsigned)((j) * bits) >> 3) * 0x01010101u + 0x03020100u)
#define SH(j) (((j) * bits) & 7)
    const __m512i pick = _mm512_setr_epi32(AT(0), AT(1), AT(2), AT(3), AT(4), AT(5), AT(6), AT(7), AT(8), AT(9),
                                           AT(10), AT(11), AT(12), AT(13), AT(14), AT(15));
    const __m512i shift = _mm512_setr_epi32(SH(0), SH(1), SH(2), SH(3), SH(4), SH(5), SH(6), SH(7), SH(8), SH(9),
                                            SH(10), SH(11), SH(12), SH(13), SH(14), SH(15));
#undef AT
#undef SH
    const __m128i b = _mm_maskz_loadu_epi8((__mmask16)((1u << nbytes) - 1), codes + 2 * g * bits);
    return _mm512_srlv_epi32(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), pick), shift);
}

ALWAYS_INLINE __m512 group_values(code_family f, const LUT *l, const uint8_t *codes, const float *codebook, int g,
                                  const int bits) {
    (void)f;
    (void)codebook;
    return _mm512_permutexvar_ps(group_codes(codes, g, bits, 2 * bits), l->v);
}

/* Lane sums of 4 vectors in one tree (simd512.h). */
ALWAYS_INLINE __m128 lanes_reduce4(__m512 a, __m512 b, __m512 c, __m512 d) { return kvq_v16_hsum4(a, b, c, d); }

/* The scalar codes' scores of 128-blocks (below, after the shared loops). */
static void dot128_scores(const uint8_t *const *codes, int nk, const float *codebook, int bits, const float *q_rot,
                          int G, int q_stride, const float *bs, float *sum, int lds);
#define LANES_DOT128(cb, b) dot128_scores(codes, nk, cb, b, q, G, qs, bs, sum, lds)
/* and their V sums */
static void axpy128_values(const uint8_t *const *codes, int nk, const float *codebook, int bits, const float *w,
                           int ldw, const float *bs, int G, float *acc_rot, int acc_stride);
#define LANES_AXPY128(cb, b) axpy128_values(codes, nk, cb, b, w, ldw, bs, G, acc, as)

#define LN 16
#define LF __m512
#define lf_zero _mm512_setzero_ps
#define lf_load _mm512_loadu_ps
#define lf_store _mm512_storeu_ps
#define lf_fma _mm512_fmadd_ps
#define lf_set1 _mm512_set1_ps
#define HEADS_PER_PASS 4     /* 4 keys x 4 heads accumulators + 4 queries: 24 of 32 registers */
#define LANES_NAME(x) x##_avx512
#define LANES_SCALAR_ONLY      /* the trellis codes: see above */
#include "turbo_lanes.inc"

/* ---------------------------------------- scores of 128-value blocks */

/* The 16 groups of 8 scalar codes of a 128-block, group m in lane m (its
 * 8b bits at bit 0): turbo4's 64 bytes as they are, turbo2's 32 widened
 * from 16 bits, turbo3's 48 (a masked load: nothing past them) moved 12
 * bytes per quarter and then 3 bytes per lane. */
ALWAYS_INLINE __m512i block_words(const uint8_t *codes, const int bits) {
    if (bits == 4) return _mm512_loadu_si512((const void *)codes);
    if (bits == 2) return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)codes));
    const __m512i raw = _mm512_maskz_loadu_epi8((__mmask64)0xFFFFFFFFFFFFull, codes);
    const __m512i quarters = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 3, 4, 5, 6, 6, 7, 8, 9, 9, 10, 11, 12), raw);
    return _mm512_shuffle_epi8(quarters, _mm512_set4_epi32((int)0x800B0A09u, (int)0x80080706u, (int)0x80050403u,
                                                           (int)0x80020100u));
}

/* Value j of every group: lane m = value 8m + j (the codebook's 16
 * repeated entries make the bits above the code harmless). */
ALWAYS_INLINE __m512 block_values(__m512i words, const LUT *l, int j, const int bits) {
    return _mm512_permutexvar_ps(_mm512_srli_epi32(words, (unsigned)(bits * j)), l->v);
}

enum { DOT128_HEADS = 2 };   /* 2 heads' 8 query vectors + 4 x 2 accumulators: 27 registers */

/* nh (1, 2) heads against nk keys' 128-blocks, in the order the words
 * give: per key and head sum_j (value j of each group) * (q at 8m + j),
 * then the 16 lanes in lanes_reduce4; the query is regrouped once per
 * call and stays in registers. */
ALWAYS_INLINE void dot128_fixed(const uint8_t *const *codes, int nk, const float *codebook, const int bits,
                                const float *q_rot, const int nh, int q_stride, const float *bs, float *sum, int lds) {
    const LUT l = lut_make(FAMILY_SCALAR, codebook, bits);
    __m512 qp[DOT128_HEADS][8];
    KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) {
        float tq[8][16];
        const float *q = q_rot + (size_t)h * q_stride;
        for (int m = 0; m < 16; m++)
            for (int j = 0; j < 8; j++) tq[j][m] = q[8 * m + j];
        KVQ_UNROLL_N(8) for (int j = 0; j < 8; j++) qp[h][j] = _mm512_loadu_ps(tq[j]);
    }
    for (int t0 = 0; t0 < nk; t0 += 4) {
        const uint8_t *c[4];
        for (int i = 0; i < 4; i++) c[i] = t0 + i < nk && codes[t0 + i] ? codes[t0 + i] : g_zero_codes;
        __m512 acc[4][DOT128_HEADS];
        KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++) {
            const __m512i words = block_words(c[i], bits);
            KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) acc[i][h] = _mm512_mul_ps(block_values(words, &l, 0, bits), qp[h][0]);
            KVQ_UNROLL_N(8) for (int j = 1; j < 8; j++) {
                const __m512 v = block_values(words, &l, j, bits);
                KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) acc[i][h] = _mm512_fmadd_ps(v, qp[h][j], acc[i][h]);
            }
        }
        KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++)
            lanes_add_scores(lanes_reduce4(acc[0][h], acc[1][h], acc[2][h], acc[3][h]), codes + t0, nk - t0, bs + t0,
                             sum + (size_t)h * lds + t0);
    }
}

#define dot128_all(codes, nk, codebook, bits) dot128_heads(codes, nk, codebook, bits, q_rot, G, q_stride, bs, sum, lds)
ALWAYS_INLINE void dot128_heads(const uint8_t *const *codes, int nk, const float *codebook, const int bits,
                                const float *q_rot, int G, int q_stride, const float *bs, float *sum, int lds) {
    int h = 0;
    for (; h + 2 <= G; h += 2)
        dot128_fixed(codes, nk, codebook, bits, q_rot + (size_t)h * q_stride, 2, q_stride, bs, sum + (size_t)h * lds, lds);
    if (h < G) dot128_fixed(codes, nk, codebook, bits, q_rot + (size_t)h * q_stride, 1, q_stride, bs, sum + (size_t)h * lds, lds);
}
static void dot128_scores(const uint8_t *const *codes, int nk, const float *codebook, int bits, const float *q_rot,
                          int G, int q_stride, const float *bs, float *sum, int lds) {
    LANES_BITS(bits, dot128_all, codes, nk, codebook)
}

/* ------------------------------------------ V sums of 128-value blocks */

/* The accumulators of a 128-block in the words' order: A[j] lane m holds
 * acc[8m + j], from the 8 vectors of 16 in memory order (R[r] lane l holds
 * acc[16r + l]).  Position 8m + j has bits m3 m2 m1 m0 j2 j1 j0: three
 * stages each swap one vector-index bit with one lane bit (m1 with j0, m2
 * with j1, m3 with j2: vector pairs r, r ^ 1 / 2 / 4), leaving the lanes
 * in the order m0 m3 m2 m1, which one permute puts right.  Every stage is
 * its own inverse, so the way back is the permute's inverse and the stages
 * in reverse. */
#define SW0(l, b) ((l) & (b) ? 16 + ((l) & ~(b)) : (l))    /* the pair's output with vector bit 0 */
#define SW1(l, b) ((l) & (b) ? 16 + (l) : ((l) | (b)))     /* ... with vector bit 1 */
#define IDX16(F, b) _mm512_setr_epi32(F(0, b), F(1, b), F(2, b), F(3, b), F(4, b), F(5, b), F(6, b), F(7, b), \
                                      F(8, b), F(9, b), F(10, b), F(11, b), F(12, b), F(13, b), F(14, b), F(15, b))
#define TO_M(l, b) ((((l) & 1) << 3) | ((l) >> 1))          /* lane m of the result: lane m0 m3 m2 m1 */
#define FROM_M(l, b) ((((l) & 7) << 1) | ((l) >> 3))

/* Swap bit vb of the vector index with the same bit of the lane (the
 * pairs' lanes with that bit clear go to the first, set to the second). */
ALWAYS_INLINE void swap_bits(__m512 *v, const int vb) {
    const __m512i i0 = vb == 1 ? IDX16(SW0, 1) : vb == 2 ? IDX16(SW0, 2) : IDX16(SW0, 4);
    const __m512i i1 = vb == 1 ? IDX16(SW1, 1) : vb == 2 ? IDX16(SW1, 2) : IDX16(SW1, 4);
    KVQ_UNROLL_N(8) for (int r = 0; r < 8; r++) {
        if (r & vb) continue;
        const __m512 x = v[r], y = v[r | vb];
        v[r] = _mm512_permutex2var_ps(x, i0, y);
        v[r | vb] = _mm512_permutex2var_ps(x, i1, y);
    }
}

ALWAYS_INLINE void acc_to_words(const float *acc, __m512 *a) {
    KVQ_UNROLL_N(8) for (int r = 0; r < 8; r++) a[r] = _mm512_loadu_ps(acc + 16 * r);
    swap_bits(a, 1);
    swap_bits(a, 2);
    swap_bits(a, 4);
    const __m512i to_m = IDX16(TO_M, 0);
    KVQ_UNROLL_N(8) for (int j = 0; j < 8; j++) a[j] = _mm512_permutexvar_ps(to_m, a[j]);
}

ALWAYS_INLINE void words_to_acc(__m512 *a, float *acc) {
    const __m512i from_m = IDX16(FROM_M, 0);
    KVQ_UNROLL_N(8) for (int j = 0; j < 8; j++) a[j] = _mm512_permutexvar_ps(from_m, a[j]);
    swap_bits(a, 4);
    swap_bits(a, 2);
    swap_bits(a, 1);
    KVQ_UNROLL_N(8) for (int r = 0; r < 8; r++) _mm512_storeu_ps(acc + 16 * r, a[r]);
}

/* nh (1, 2) heads' accumulators of a 128-block in registers (in the
 * words' order) while the nk keys are added in order: per output the
 * same chain of FMAs as the generic loop, so the same bits. */
ALWAYS_INLINE void axpy128_fixed(const uint8_t *const *codes, int nk, const float *codebook, const int bits,
                                 const float *w, int ldw, const float *bs, const int nh, float *acc_rot,
                                 int acc_stride) {
    const LUT l = lut_make(FAMILY_SCALAR, codebook, bits);
    __m512 a[DOT128_HEADS][8];
    KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) acc_to_words(acc_rot + (size_t)h * acc_stride, a[h]);
    for (int t = 0; t < nk; t++) {
        if (!codes[t]) continue;
        float c[DOT128_HEADS];
        bool any = false;
        KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) {
            c[h] = turbo_value_coef(w[(size_t)h * ldw + t], bs[t]);
            any |= c[h] != 0.0f;
        }
        if (!any) continue;
        __m512 cf[DOT128_HEADS];
        KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) cf[h] = _mm512_set1_ps(c[h]);
        const __m512i words = block_words(codes[t], bits);
        KVQ_UNROLL_N(8) for (int j = 0; j < 8; j++) {
            const __m512 v = block_values(words, &l, j, bits);
            KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) a[h][j] = _mm512_fmadd_ps(cf[h], v, a[h][j]);
        }
    }
    KVQ_UNROLL_N(4) for (int h = 0; h < nh; h++) words_to_acc(a[h], acc_rot + (size_t)h * acc_stride);
}

#define axpy128_all(codes, nk, codebook, bits) axpy128_heads(codes, nk, codebook, bits, w, ldw, bs, G, acc_rot, acc_stride)
ALWAYS_INLINE void axpy128_heads(const uint8_t *const *codes, int nk, const float *codebook, const int bits,
                                 const float *w, int ldw, const float *bs, int G, float *acc_rot, int acc_stride) {
    int h = 0;
    for (; h + 2 <= G; h += 2)
        axpy128_fixed(codes, nk, codebook, bits, w + (size_t)h * ldw, ldw, bs, 2, acc_rot + (size_t)h * acc_stride,
                      acc_stride);
    if (h < G)
        axpy128_fixed(codes, nk, codebook, bits, w + (size_t)h * ldw, ldw, bs, 1, acc_rot + (size_t)h * acc_stride,
                      acc_stride);
}
static void axpy128_values(const uint8_t *const *codes, int nk, const float *codebook, int bits, const float *w,
                           int ldw, const float *bs, int G, float *acc_rot, int acc_stride) {
    LANES_BITS(bits, axpy128_all, codes, nk, codebook)
}

/* Over the AVX2 level's kernels: the scalar codes' block kernels and the
 * 16-lane Viterbi. */
void turbo_install_avx512(turbo_kernels *k) {
    install_blocks_avx512(k);
    k->viterbi = turbo_viterbi_avx512;
    k->viterbi_pairs = turbo_viterbi_pairs_avx512;
}
