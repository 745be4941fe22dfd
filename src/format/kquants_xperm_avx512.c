/* kquants_xperm_avx512.c - the K-quant decode dots on activations laid out
 * by kvq_kq_xperm (kquants_xperm.h), 16 lanes: one vector is a pair of
 * runs, and a code becomes a float with a shift and a vpternlogd, with no
 * shuffle per value (the row dots of kquants_avx512.c use six per 64). */
#include "kquants_xperm.h"
#include "quant_kquants.h"

#include "kquants_xperm_x86.h"

#include <immintrin.h>

#define ONE_BITS 0x3f800000   /* 1.0f */

/* (a & mask) | ONE_BITS: the field under mask becomes 1.0f's mantissa bits. */
static inline __m512 field_float(__m512i a, int mask) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(a, _mm512_set1_epi32(mask), _mm512_set1_epi32(ONE_BITS), 0xEA));
}

/* Shift left by `by` bits, right when `by` is negative (a constant). */
static inline __m512i shift_by(__m512i v, int by) {
    return by >= 0 ? _mm512_slli_epi32(v, (unsigned)by) : _mm512_srli_epi32(v, (unsigned)-by);
}

/* The `bits`-bit code at bit `at` + 8b of each lane (byte b of the
 * lane's four values) as 1 + q/2^bits: moved to the mantissa's top bits,
 * 23 - bits .. 22, the rest masked off. */
static inline __m512 code_float(__m512i v, int at, int bits, int b) {
    return field_float(shift_by(v, 23 - bits - at - 8 * b), ((1 << bits) - 1) << (23 - bits));
}

/* A pair's two partial sums over bytes b = 0..3: t0 of the codes `lo`
 * (at bit lo_at of each byte; x's first 64 floats), t1 of `hi` (at hi_at;
 * x + 64), each sum_b f_b * x_b. */
static inline void pair_partials(__m512i lo, int lo_at, __m512i hi, int hi_at, int bits, const float *x, __m512 *t0,
                                 __m512 *t1) {
    __m512 a = _mm512_mul_ps(code_float(lo, lo_at, bits, 0), _mm512_loadu_ps(x));
    __m512 c = _mm512_mul_ps(code_float(hi, hi_at, bits, 0), _mm512_loadu_ps(x + 64));
    for (int b = 1; b < 4; b++) {
        a = _mm512_fmadd_ps(code_float(lo, lo_at, bits, b), _mm512_loadu_ps(x + 16 * b), a);
        c = _mm512_fmadd_ps(code_float(hi, hi_at, bits, b), _mm512_loadu_ps(x + 64 + 16 * b), c);
    }
    *t0 = a;
    *t1 = c;
}

/* Lane indexes into a vector of scales.  q4_K (scales in lanes 0-7):
 * pair p's runs (r0, r1) take lanes 0-7 -> r0, 8-15 -> r1.  q6_K (16
 * scales, one per 16 values): pair p's lane l takes 4p + l/4. */
static const int32_t q4_K_pair_lanes[4][16] = {
    { 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2 }, { 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3 },
    { 4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6 }, { 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7 },
};
static const int32_t q6_K_pair_lanes[4][16] = {
    { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3 }, { 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7 },
    { 8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11 },
    { 12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15 },
};
static inline __m512 lanes_of(const int32_t idx[16], __m512 scales) {
    return _mm512_permutexvar_ps(_mm512_loadu_si512((const void *)idx), scales);
}

/* q4_K's (q5_K's) super-block scales in one vector: lanes 0-7
 * 16*d*sc_j (32*d*sc_j), lanes 8-15 dmin*m_j (kquants_xperm_x86.h
 * decodes the 6-bit values). */
static inline __m512 q45_K_scales(const uint8_t *b, float steps) {
    const __m512 codes = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(kq_q4_K_scale_bytes(b)));
    const __m512 dm = _mm512_castps128_ps512(_mm_mul_ps(kq_q4_K_d_dmin(b), _mm_setr_ps(steps, 1, 0, 0)));
    return _mm512_mul_ps(codes, _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), dm));
}
static inline __m512 q4_K_scales(const uint8_t *b) { return q45_K_scales(b, 16.0f); }
static inline __m512 q5_K_scales(const uint8_t *b) { return q45_K_scales(b, 32.0f); }

/* 64 bytes of codes as two 32-byte loads.  Blocks are 144 or 210 bytes,
 * so one 64-byte load mostly straddles two cache lines; from memory that
 * halved the q4_K dot's rate (10 against 17 GB/s on one Zen 5 core,
 * docs/performance.md), in the cache it made no difference. */
static inline __m512i load_64(const uint8_t *p) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)(p + 32)), 1);
}

/* A row's partial sums: even and odd pairs' scaled partials, and the
 * scales times the x sums (subtracted once at the end). */
typedef struct row_acc { __m512 acc0, acc1, corr; } row_acc;

static inline row_acc row_acc_zero(void) {
    return (row_acc){ _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
}

/* q4_K, half u of the super-block at b: the 64 bytes of qs at 64u hold pair 2u
 * (low nibbles, runs 4u, 4u+2) and pair 2u+1 (high nibbles, runs 4u+1,
 * 4u+3); x holds their activations, pair 2u's for bytes 0..3, then
 * pair 2u+1's. */
static inline row_acc q4_K_half(const uint8_t *b, const float *x, __m512 scale, int u, row_acc r) {
    __m512i q = load_64(b + 16 + 64 * u);
    __asm__("" : "+v"(q));   /* one register: as a memory operand the compiler reloads it for each shift */
    __m512 t0, t1;
    pair_partials(q, 0, q, 4, 4, x, &t0, &t1);   /* low nibbles, high nibbles */
    r.acc0 = _mm512_fmadd_ps(t0, lanes_of(q4_K_pair_lanes[2 * u], scale), r.acc0);
    r.acc1 = _mm512_fmadd_ps(t1, lanes_of(q4_K_pair_lanes[2 * u + 1], scale), r.acc1);
    return r;
}

/* q5_K, half u: q4_K's nibbles (qs at 48) plus bit j of qh[l] as bit 4
 * of run j's code, assembled bytewise like q6_K's (bits 5-7 of a byte
 * may be garbage: the float step reads five).  qh2 = qh in lanes 0-7,
 * qh >> 2 in lanes 8-15, so that runs 4u+h (lanes 0-7) and 4u+2+h
 * (lanes 8-15) both find their bit at 4u+h. */
static inline row_acc q5_K_half(const uint8_t *b, const float *x, __m512 scale, int u, row_acc r) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i qs = load_64(b + 48 + 64 * u);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi32(qh, 2), 1);
    const __m512i lo = _mm512_ternarylogic_epi32(qs, shift_by(qh2, 4 - 4 * u), nib, 0xE4);   /* nib ? a : b */
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(qs, 4), shift_by(qh2, 3 - 4 * u), nib, 0xE4);
    __m512 t0, t1;
    pair_partials(lo, 0, hi, 0, 5, x, &t0, &t1);
    r.acc0 = _mm512_fmadd_ps(t0, lanes_of(q4_K_pair_lanes[2 * u], scale), r.acc0);
    r.acc1 = _mm512_fmadd_ps(t1, lanes_of(q4_K_pair_lanes[2 * u + 1], scale), r.acc1);
    return r;
}

/* q6_K, half h of the super-block at b: ql's 64 bytes hold runs 4h, 4h+1 in their low nibbles
 * (pair 2h) and 4h+2, 4h+3 in the high ones (pair 2h+1); run k of the
 * half takes bits 2k..2k+1 of qh.  qh2 = qh in lanes 0-7, qh >> 2 in
 * lanes 8-15, puts each pair's two bits at the same place in both halves.
 * Codes are assembled bytewise (bits 6-7 of a byte may be garbage: the
 * float step reads six bits). */
static inline row_acc q6_K_half(const uint8_t *b, const float *x, __m512 scale, int h, row_acc r) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i ql = load_64(b + 64 * h);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi32(qh, 2), 1);
    /* nib ? ql : qh bits: 0xE4 is "c ? a : b" */
    const __m512i lo = _mm512_ternarylogic_epi32(ql, _mm512_slli_epi32(qh2, 4), nib, 0xE4);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(ql, 4), qh2, nib, 0xE4);
    __m512 t0, t1;
    pair_partials(lo, 0, hi, 0, 6, x, &t0, &t1);
    r.acc0 = _mm512_fmadd_ps(t0, lanes_of(q6_K_pair_lanes[2 * h], scale), r.acc0);
    r.acc1 = _mm512_fmadd_ps(t1, lanes_of(q6_K_pair_lanes[2 * h + 1], scale), r.acc1);
    return r;
}

/* q6_K's 16 group scales times 64*d. */
static inline __m512 q6_K_scales(const uint8_t *b) {
    const float d = kq_half_at(b + 208);
    const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192)));
    return _mm512_mul_ps(_mm512_set1_ps(64.0f * d), _mm512_cvtepi32_ps(sc));
}

/* The row's dot from its partial sums: q4_K and q5_K subtract the
 * corrections as they are, q6_K 1.5 times them (96 = 1.5 * 64, kquants_xperm.h). */
static inline float q4_K_finish(row_acc r) {
    return _mm512_reduce_add_ps(_mm512_sub_ps(_mm512_add_ps(r.acc0, r.acc1), r.corr));
}
static inline float q5_K_finish(row_acc r) { return q4_K_finish(r); }
static inline float q6_K_finish(row_acc r) {
    return _mm512_reduce_add_ps(_mm512_fnmadd_ps(r.corr, _mm512_set1_ps(1.5f), _mm512_add_ps(r.acc0, r.acc1)));
}

/* Rows one at a time, each one sequential stream.  Two rows at once
 * (sharing the loads of x) were faster in the cache but not from memory:
 * no faster with two streams far apart, 3x slower with two neighbouring
 * rows interleaved (docs/performance.md). */
#define XROWS(T, BYTES)                                                                            \
    static void T##_xrows(const void *W, size_t row_bytes, int64_t rows, const float *xp, int64_t n, \
                          float *y) {                                                              \
        const float *xsum = xp + n;                                                                \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const uint8_t *b = (const uint8_t *)W + (size_t)r * row_bytes;                         \
            row_acc a = row_acc_zero();                                                            \
            for (int64_t s = 0; s < n / KVQ_QK_K; s++, b += (BYTES)) {                             \
                const __m512 scale = T##_scales(b);                                                \
                a.corr = _mm512_fmadd_ps(scale, _mm512_loadu_ps(xsum + 16 * s), a.corr);           \
                const float *x = xp + KVQ_QK_K * s;                                                \
                a = T##_half(b, x, scale, 0, a);                                                   \
                a = T##_half(b, x + 128, scale, 1, a);                                             \
            }                                                                                      \
            y[r] = T##_finish(a);                                                                  \
        }                                                                                          \
    }

XROWS(q4_K, KVQ_Q4_K_BYTES)
XROWS(q5_K, KVQ_Q5_K_BYTES)
XROWS(q6_K, KVQ_Q6_K_BYTES)

void kvq_kq_xperm_install_avx512(kvq_kq_xrows_fn table[KVQ_TYPE_COUNT]) {
    table[KVQ_TYPE_Q4_K] = q4_K_xrows;
    table[KVQ_TYPE_Q5_K] = q5_K_xrows;
    table[KVQ_TYPE_Q6_K] = q6_K_xrows;
}
