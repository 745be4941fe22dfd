/* kquants_xperm.h - f32 activations laid out once per product for the
 * K-quant decode dots (q4_K, q5_K, q6_K).
 *
 * A decode product multiplies every weight row by the same activation
 * row x.  The row dots of kquants_table.inc spend their time turning codes
 * into floats (sign extensions, look-up shuffles, a multiply-add for the
 * scale and bias of each value), not reading memory.  Here x is
 * rearranged once per product so that each 32-bit lane of a code vector
 * meets its own four x values, and a code becomes a float with one shift
 * and one bitwise operation:
 *
 *   code q (4, 5 or 6 bits) placed in the top bits of 1.0f's mantissa is
 *   f = 1 + q/16 (q4_K), 1 + q/32 (q5_K) or 1 + q/64 (q6_K), exactly;
 *   q4_K sub-block j (32 values), w = d*sc_j*q - dmin*m_j:
 *     sum w*x = 16*d*sc_j * sum f*x - (16*d*sc_j + dmin*m_j) * sum x
 *   (q5_K the same with 32 for 16)
 *   q6_K group g (16 values), w = d*sc_g*(q - 32):
 *     sum w*x = 64*d*sc_g * sum f*x - 96*d*sc_g * sum x
 * so a row's dot is sum(scale * partial) - sum(correction * sum x), with
 * the sums of x made here once.
 *
 * Layout: a super-block (256 values) is 8 runs of 32 (run r = values
 * 32r..32r+31), taken in pairs (r0, r1) that a 64-byte load of the codes
 * holds, per type:
 *   q4_K, q5_K: (0,2) (1,3) (4,6) (5,7): qs chunk c's low nibbles are
 *         run 2c, the high ones 2c+1, and a 64-byte load holds chunks
 *         c, c+1;
 *   q6_K: (0,1) (2,3) (4,5) (6,7): ql's 64 bytes of half h give runs 4h,
 *         4h+1 (low nibbles) and 4h+2, 4h+3 (high).
 * Byte b of 32-bit lane l of a run's codes is value 4l + b of the run, so
 *   xp[256s + 64p + 16b + 8g + l] = x[256s + 32*run(p, g) + 4l + b]
 * (super-block s, pair p 0..3, b 0..3, g 0..1 which run of the pair,
 * l 0..7): an AVX-512 vector of 16 lanes (the pair) or an AVX2 vector of
 * 8 (one run) reads its x for byte b contiguously.  After the n permuted
 * values, n/16 sums of x: q6_K, of each 16 values; q4_K and q5_K, each
 * super-block's 8 run sums twice (to meet both halves of a vector of 8
 * scales and 8 mins).
 *
 * Error: the products f*x carry up to ~1.5x the magnitude of the exact
 * code's, and the x sums cancel part of them, so a dot is a few ulp of
 * sum |w x| further from the exact sum than the row dot's (tests compare
 * both with double sums: tests/test_simd_levels.c). */
#ifndef KVQ_KQUANTS_XPERM_H
#define KVQ_KQUANTS_XPERM_H

#include "kvq_internal.h"

/* The dots of `rows` weight rows (row_bytes apart, n values each, whole
 * super-blocks) with x laid out by kvq_kq_xperm, into y[0..rows-1].  A
 * row's dot has the same bits whichever rows share the call. */
typedef void (*kvq_kq_xrows_fn)(const void *W, size_t row_bytes, int64_t rows, const float *xp, int64_t n,
                                float *y);

/* Floats kvq_kq_xperm writes for n values of any covered type. */
size_t kvq_kq_xperm_floats(int64_t n);
/* x (n values, whole super-blocks) laid out for weights of type t into xp;
 * false (nothing written) when t is not covered. */
bool kvq_kq_xperm(kvq_type t, const float *x, int64_t n, float *xp);
/* The dot of the level this process runs (KVQ_FORCE_* honoured); NULL when
 * t is not covered or the level has none (scalar: the row dot is the
 * reference, so it is not replaced there). */
kvq_kq_xrows_fn kvq_kq_xrows(kvq_type t);
/* The dot of a given level; NULL when t is not covered or this CPU lacks
 * the level (tests compare each level it has with the scalar row dot). */
kvq_kq_xrows_fn kvq_kq_xrows_level(kvq_type t, kvq_isa isa);

/* The SIMD tables (kquants_xperm_avx2.c, kquants_xperm_avx512.c). */
void kvq_kq_xperm_install_avx2(kvq_kq_xrows_fn table[KVQ_TYPE_COUNT]);
void kvq_kq_xperm_install_avx512(kvq_kq_xrows_fn table[KVQ_TYPE_COUNT]);

#endif
