/* kquants_xperm_avx2.c - the K-quant decode dots on activations laid out
 * by kvq_kq_xperm (kquants_xperm.h), 8 lanes: one vector is one run of 32
 * values, and a code becomes a float with a shift, an and and an or (no
 * sign extension, no conversion). */
#include "kquants_xperm.h"
#include "quant_kquants.h"
#include "kquants_xperm_x86.h"
#include "simd256.h"

#include <immintrin.h>

#define ONE_BITS 0x3f800000   /* 1.0f */

/* (a & mask) | ONE_BITS: the field under mask becomes 1.0f's mantissa bits. */
static inline __m256 field_float(__m256i a, int mask) {
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(mask)), _mm256_set1_epi32(ONE_BITS)));
}

/* Shift left by `by` bits, right when `by` is negative (a constant). */
static inline __m256i shift_by(__m256i v, int by) {
    return by >= 0 ? _mm256_slli_epi32(v, by) : _mm256_srli_epi32(v, -by);
}

/* The `bits`-bit code at bit `at` + 8b of each lane (byte b of the
 * lane's four values) as 1 + q/2^bits, in the mantissa's top bits. */
static inline __m256 code_float(__m256i v, int at, int bits, int b) {
    return field_float(shift_by(v, 23 - bits - at - 8 * b), ((1 << bits) - 1) << (23 - bits));
}

/* A run's partial sum over bytes b = 0..3, sum_b f_b * x_b (the vector is
 * run g of pair p, xb = xp + 64p + 8g: byte b's x at xb + 16b). */
static inline __m256 run_partial(__m256i v, int at, int bits, const float *xb) {
    __m256 t = _mm256_mul_ps(code_float(v, at, bits, 0), _mm256_loadu_ps(xb));
    for (int b = 1; b < 4; b++) t = _mm256_fmadd_ps(code_float(v, at, bits, b), _mm256_loadu_ps(xb + 16 * b), t);
    return t;
}

/* q4_K and q5_K: qs chunk c = 2u + g (32 bytes) holds run 2c (low
 * nibbles, xp's pair 2u) and 2c + 1 (high, pair 2u + 1), as lane group g.
 * q5_K adds bit j of qh[l] as bit 4 of run j's codes, assembled bytewise
 * (bits 5-7 of a byte may be garbage: the float step reads five). */
static inline float q45_K_xdot(const uint8_t *b, const float *xp, int64_t n, bool five) {
    const float *xsum = xp + n;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const int bytes = five ? KVQ_Q5_K_BYTES : KVQ_Q4_K_BYTES, qs_at = five ? 48 : 16;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
    float scale[8];
    for (int64_t i = 0; i < n; i += KVQ_QK_K, b += bytes, xp += KVQ_QK_K, xsum += 16) {
        const __m128i sc_m = kq_q4_K_scale_bytes(b);
        const __m128 dm = kq_q4_K_d_dmin(b);
        const float steps = five ? 32.0f : 16.0f;
        const __m256 scale8 = _mm256_mul_ps(_mm256_set1_ps(steps * _mm_cvtss_f32(dm)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc_m)));
        const __m256 min8 = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dm), _mm256_set1_epi32(1)),
                                          _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sc_m, 8))));
        corr = _mm256_fmadd_ps(_mm256_add_ps(scale8, min8), _mm256_loadu_ps(xsum), corr);
        _mm256_storeu_ps(scale, scale8);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(b + 16)) : _mm256_setzero_si256();
        KVQ_UNROLL_N(4)
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b + qs_at + 32 * c));
            const float *xb = xp + 128 * (c / 2) + 8 * (c % 2);
            __m256 t0, t1;
            if (five) {   /* bits 2c, 2c+1 of qh to bit 4 */
                /* the shifted qh keeps out of the nibble (its bits cross bytes) */
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), _mm256_andnot_si256(low4, shift_by(qh, 4 - 2 * c)));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(q, 4), low4),
                                                   _mm256_andnot_si256(low4, shift_by(qh, 3 - 2 * c)));
                t0 = run_partial(lo, 0, 5, xb);
                t1 = run_partial(hi, 0, 5, xb + 64);
            } else {
                t0 = run_partial(q, 0, 4, xb);   /* low nibbles */
                t1 = run_partial(q, 4, 4, xb + 64);   /* high nibbles */
            }
            acc0 = _mm256_fmadd_ps(t0, _mm256_set1_ps(scale[2 * c]), acc0);
            acc1 = _mm256_fmadd_ps(t1, _mm256_set1_ps(scale[2 * c + 1]), acc1);
        }
    }
    return kvq_v8_hsum(_mm256_add_ps(acc0, acc1)) - kvq_v8_hsum(corr);
}

/* Lanes 0-3 take scales[at], lanes 4-7 scales[at + 1]. */
static inline __m256 scale_quads(__m256 scales, int at) {
    return _mm256_permutevar8x32_ps(scales, _mm256_setr_epi32(at, at, at, at, at + 1, at + 1, at + 1, at + 1));
}

/* q6_K: half h's ql bytes 32g.. hold run 4h + g (low nibbles, xp's pair
 * 2h) and 4h + 2 + g (high, pair 2h + 1), with bits 2g..2g+1 and
 * 4+2g..5+2g of qh; codes are assembled bytewise (bits 6-7 of a byte may
 * be garbage: the float step reads six bits). */
static float q6_K_xdot(const void *row, const float *xp, int64_t n) {
    const uint8_t *b = row;
    const float *xsum = xp + n;
    const __m256i low4 = _mm256_set1_epi8(0x0f), high4 = _mm256_set1_epi8((char)0xf0);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), corr = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += KVQ_QK_K, b += KVQ_Q6_K_BYTES, xp += KVQ_QK_K, xsum += 16) {
        const __m256 d64 = _mm256_set1_ps(64.0f * kq_half_at(b + 208));
        const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
        const __m256 scales[2] = { _mm256_mul_ps(d64, kvq_v8_s8_to_f32(sc)),
                                   _mm256_mul_ps(d64, kvq_v8_s8_to_f32(_mm_srli_si128(sc, 8))) };
        corr = _mm256_fmadd_ps(scales[0], _mm256_loadu_ps(xsum), corr);
        corr = _mm256_fmadd_ps(scales[1], _mm256_loadu_ps(xsum + 8), corr);
        for (int h = 0; h < 2; h++) {
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
            for (int g = 0; g < 2; g++) {
                const __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * g));
                const __m256i qhg = g ? _mm256_srli_epi32(qh, 2) : qh;
                const __m256i lo = _mm256_or_si256(_mm256_and_si256(ql, low4),
                                                   _mm256_and_si256(_mm256_slli_epi32(qhg, 4), high4));
                const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(ql, 4), low4),
                                                   _mm256_and_si256(qhg, high4));
                const float *xb = xp + 128 * h + 8 * g;
                acc0 = _mm256_fmadd_ps(run_partial(lo, 0, 6, xb), scale_quads(scales[h], 2 * g), acc0);
                acc1 = _mm256_fmadd_ps(run_partial(hi, 0, 6, xb + 64), scale_quads(scales[h], 4 + 2 * g), acc1);
            }
        }
    }
    return kvq_v8_hsum(_mm256_add_ps(acc0, acc1)) - 1.5f * kvq_v8_hsum(corr);
}

/* Rows one at a time, each one sequential stream (two at once were no
 * faster from memory: kquants_xperm_avx512.c). */
#define XROWS(name, DOT)                                                                            \
    static void name##_xrows(const void *W, size_t row_bytes, int64_t rows, const float *xp, int64_t n, \
                             float *y) {                                                            \
        for (int64_t r = 0; r < rows; r++) y[r] = DOT((const uint8_t *)W + (size_t)r * row_bytes, xp, n); \
    }
#define Q4_K_DOT(b, xp, n) q45_K_xdot(b, xp, n, false)
#define Q5_K_DOT(b, xp, n) q45_K_xdot(b, xp, n, true)
XROWS(q4_K, Q4_K_DOT)
XROWS(q5_K, Q5_K_DOT)
XROWS(q6_K, q6_K_xdot)

void kvq_kq_xperm_install_avx2(kvq_kq_xrows_fn table[KVQ_TYPE_COUNT]) {
    table[KVQ_TYPE_Q4_K] = q4_K_xrows;
    table[KVQ_TYPE_Q5_K] = q5_K_xrows;
    table[KVQ_TYPE_Q6_K] = q6_K_xrows;
}
