/* quant_block.h - scalar reference kernels of every cache type, declared
 * for the trait table (src/format/types.c) and the SIMD files' fallbacks. */
#ifndef KVQ_QUANT_BLOCK_H
#define KVQ_QUANT_BLOCK_H

#include "kvq_internal.h"

#include <math.h>
#include <stdbool.h>

#define KVQ_BLOCK 32   /* values per block of every q*_0 / q*_1 / iq4_nl type */

/* A 32-value block's bytes, derived once from its description (fp16 d, an
 * fp16 m for the q*_1 types, then `bits` bits per code): every table and
 * kernel takes its block sizes from these, never from a literal.  The
 * ggml-compatible sizes are checked in src/format/types.c. */
#define KVQ_BLOCK_HEADER(HAS_MIN) ((HAS_MIN) ? 4 : 2)
#define KVQ_BLOCK_BYTES(BITS, HAS_MIN) (KVQ_BLOCK_HEADER(HAS_MIN) + (BITS) * KVQ_BLOCK / 8)
enum {
    KVQ_BYTES_Q8_0 = KVQ_BLOCK_BYTES(8, 0),   KVQ_BYTES_Q6_0 = KVQ_BLOCK_BYTES(6, 0),
    KVQ_BYTES_Q6_1 = KVQ_BLOCK_BYTES(6, 1),   KVQ_BYTES_Q5_0 = KVQ_BLOCK_BYTES(5, 0),
    KVQ_BYTES_Q5_1 = KVQ_BLOCK_BYTES(5, 1),   KVQ_BYTES_Q4_0 = KVQ_BLOCK_BYTES(4, 0),
    KVQ_BYTES_Q4_1 = KVQ_BLOCK_BYTES(4, 1),   KVQ_BYTES_IQ4_NL = KVQ_BLOCK_BYTES(4, 0),
    KVQ_BYTES_Q3_0 = KVQ_BLOCK_BYTES(3, 0),   KVQ_BYTES_Q3_1 = KVQ_BLOCK_BYTES(3, 1),
    KVQ_BYTES_Q2_0 = KVQ_BLOCK_BYTES(2, 0),   KVQ_BYTES_Q2_1 = KVQ_BLOCK_BYTES(2, 1),
};

/* One row of the trait table's kernels per name, e.g. kvq_q4_0_quantize. */
#define KVQ_DECLARE_KERNELS(name)                                                 \
    void  kvq_##name##_quantize(const float *x, void *dst, int64_t n);            \
    void  kvq_##name##_dequantize(const void *src, float *y, int64_t n);          \
    float kvq_##name##_dot(const void *row, const float *x, int64_t n);           \
    void  kvq_##name##_axpy(float w, const void *row, float *y, int64_t n);

KVQ_DECLARE_KERNELS(f32)
KVQ_DECLARE_KERNELS(f16)
KVQ_DECLARE_KERNELS(bf16)
KVQ_DECLARE_KERNELS(q8_0)
KVQ_DECLARE_KERNELS(q6_0)
KVQ_DECLARE_KERNELS(q6_1)
KVQ_DECLARE_KERNELS(q5_0)
KVQ_DECLARE_KERNELS(q5_1)
KVQ_DECLARE_KERNELS(q4_0)
KVQ_DECLARE_KERNELS(q4_1)
KVQ_DECLARE_KERNELS(iq4_nl)
KVQ_DECLARE_KERNELS(q3_0)
KVQ_DECLARE_KERNELS(q3_1)
KVQ_DECLARE_KERNELS(q2_0)
KVQ_DECLARE_KERNELS(q2_1)

/* Non-finite input (docs/formats.md): a block that holds a NaN or +-inf is
 * stored "poisoned" -- every fp16 field (d, m) is NaN and every code is 0 --
 * so it decodes to NaN everywhere instead of to plausible finite values. */
#define KVQ_HALF_NAN 0x7e00u
static inline bool kvq_block_is_finite(const float *x) {
    uint32_t worst = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) worst = KVQ_MAX(worst, kvq_f32_bits(x[j]) & 0x7fffffffu);
    return worst < 0x7f800000u;
}

/* A float code value -> integer code in [lo, hi]; the conversion is done
 * only on in-range values (C leaves out-of-range conversions undefined),
 * NaN (0 * inf in a denormal block) becomes `nan_code`. */
static inline int kvq_code_clamp(float v, int lo, int hi, int nan_code) {
    if (v != v) return nan_code;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* roundf(x) (halves away from zero) for |x| < 2^22, in operations a
 * compiler keeps in vector registers (roundf itself is a libm call per
 * value: ~3 % of a q4_0 decode step at 4096 keys): r = |x| rounded to
 * nearest even (KVQ_ROUND_MAGIC), |x| - r exact; one more where |x| lay
 * half-way above r; x's sign put back (selects, no branch). */
static inline float kvq_round_half_away(float x) {
    const float a = fabsf(x);
    float r = (a + KVQ_ROUND_MAGIC) - KVQ_ROUND_MAGIC;
    r += a - r == 0.5f ? 1.0f : 0.0f;
    return copysignf(r, x);
}

/* The rounding of attention's query (attention's int16 / int8 query per
 * 32-block, a trellis K's int8 query per TurboQuant block): the n values
 * of x to integers q in [-top, top], q = round(x * (top / max|x|)),
 * halves away from zero.  Returns the scale max|x| / top: 0 for a zero
 * block, NaN for a block holding NaN or inf (its q all 0, so every score
 * it enters is NaN, never a plausible number). */
static inline float kvq_round_levels(const float *x, int n, int top, int16_t *q) {
    /* max |x| and finiteness from the bits (|x|'s bits order as its
     * values do, and inf / NaN are the patterns from 0x7f800000 up), in
     * integer operations the compiler keeps in vectors.  With a float
     * compare per value and branches in the rounding below, a decode
     * step's query (16 heads x 128) took 6.1 us per layer, 3 ns a value;
     * as written, 2.7-2.8 us (Zen 4, gcc 12 -O2, the x86-64 baseline;
     * kvq_round_half_away called here costs 1.03x an inlined copy of it). */
    uint32_t top_bits = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t b = kvq_f32_bits(x[i]) & 0x7fffffffu;
        top_bits = b > top_bits ? b : top_bits;
    }
    const bool finite = top_bits < 0x7f800000u;
    float amax;
    memcpy(&amax, &top_bits, sizeof amax);
    const float inv = amax > 0.0f ? (float)top / amax : 0.0f;
    if (!finite) {
        for (int i = 0; i < n; i++) q[i] = 0;
    } else if (!isfinite(inv)) {
        /* amax below ~1e-34 overflows inv (and 0 * inf is NaN): such a
         * block is scaled in double instead */
        for (int i = 0; i < n; i++)
            q[i] = (int16_t)kvq_code_clamp(roundf((float)((double)x[i] / amax * top)), -top, top, 0);
    } else {
        /* |x * inv| <= top up to rounding: the clamp keeps it there (a
         * select each way, so that the loop stays in vectors) */
        const float hi = (float)top;
        for (int i = 0; i < n; i++) {
            float v = kvq_round_half_away(x[i] * inv);
            v = v > hi ? hi : v;
            v = v < -hi ? -hi : v;
            q[i] = (int16_t)(int)v;
        }
    }
    return finite ? amax / (float)top : NAN;
}

/* The iq4_nl codebook (docs/spec/formats.md §2; ggml's kvalues_iq4nl) and
 * the 15 midpoints between neighbouring entries, then +inf. */
extern const int8_t kvq_iq4nl_values[16];
extern const float kvq_iq4nl_mids[16];

/* iq4_nl's scale search (quant_iq4nl.c): 16 candidate scales in lanes, one
 * pass over the block per refinement, the steps written once per vector
 * width (iq4nl_search.inc).  ad: each candidate's |d| (an fp16 value, 0 for
 * a lane set aside); sg: its sign (+-1), one for lanes 0-7 and the other
 * for lanes 8-15 until `keep` moves lanes; best_*: the lane's lowest error
 * so far, its signed scale and the pass that found it. */
#define KVQ_IQ4NL_LANES 16
#define KVQ_IQ4NL_KEEP 8    /* lanes the passes after the first refine */
typedef struct kvq_iq4nl_lanes {
    float ad[KVQ_IQ4NL_LANES], sg[KVQ_IQ4NL_LANES];
    float best_sse[KVQ_IQ4NL_LANES], best_d[KVQ_IQ4NL_LANES], best_pass[KVQ_IQ4NL_LANES];
} kvq_iq4nl_lanes;

/* A level's steps of the search, each giving the same floats and bytes at
 * every level:
 *   pass:    the sums of every lane's candidate over the block, the lane's
 *            best updated with them (pass p) and, when refine, its scale
 *            moved to the least-squares one (fp16); a lane of scale 0 is
 *            no candidate (set aside) and stays as it is;
 *   keep:    the KVQ_IQ4NL_KEEP lanes of least best_sse (ties: the earlier
 *            lane; every best_sse finite or +inf, never NaN) moved to
 *            lanes 0.. in their order, the others set aside: ad 0, sg 1,
 *            best_sse +inf, best_d 0, best_pass 0;
 *   pass_pair: pass on two blocks whose lanes past KVQ_IQ4NL_KEEP are set
 *            aside, in one go (the same floats); NULL where a level's
 *            vector holds one block's kept lanes or fewer;
 *   scales:  ad[i] = want[i] rounded to its fp16 value (the largest finite
 *            one above that range), 0 where want[i] is not > 0: the lanes'
 *            first scales;
 *   indices: idx[j] = the entry nearest to x[j] / d (d != 0, an fp16
 *            value), the block's 32 stored indices. */
typedef struct kvq_iq4nl_ops {
    void (*pass)(const float *x, kvq_iq4nl_lanes *lanes, int p, bool refine);
    void (*keep)(kvq_iq4nl_lanes *lanes);
    void (*pass_pair)(const float *x0, const float *x1, kvq_iq4nl_lanes *lanes0, kvq_iq4nl_lanes *lanes1, int p,
                      bool refine);
    void (*scales)(const float *want, float *ad);
    void (*indices)(const float *x, float d, uint8_t *idx);
} kvq_iq4nl_ops;

/* The scalar level's steps (every SIMD level's give the same floats). */
const kvq_iq4nl_ops *kvq_iq4nl_ops_scalar(void);

/* The encoder with a level's steps (every level stores the same bytes). */
void kvq_iq4nl_quantize_with(const float *x, void *dst, int64_t n, const kvq_iq4nl_ops *ops);
/* The exact scale search: the fp16 scale of least squared error, 3-6x
 * slower than the search at AVX2/AVX-512; the search's yardstick (tests, kvq-bench) and its fallback for
 * blocks whose float sums would overflow. */
void kvq_iq4_nl_quantize_exact(const float *x, void *dst, int64_t n);

#endif
