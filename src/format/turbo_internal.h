/* turbo_internal.h - pieces of the TurboQuant module shared by its scalar,
 * AVX2 and AVX-512 files (not part of any public API). */
#ifndef KVQ_TURBO_INTERNAL_H
#define KVQ_TURBO_INTERNAL_H

#include "kvq_internal.h"
#include "turbo.h"

#include <math.h>

#define TURBO_NORM_BYTES 2
#define TURBO_MAX_STATES (1 << (KVQ_TURBO_TCQ_CONTEXT + 4))   /* k = 4: 1024 */

/* Block kernels: `codes` is the bit stream after the norm, d = 64 or 128,
 * `scale` = norm' / sqrt(d) (the factor that turns unit-variance codebook
 * values into the block's rotated reconstruction). */
typedef float (*turbo_dot_fn)(const uint8_t *codes, const float *codebook, int bits,
                              const float *q_rot, int d);
typedef void (*turbo_axpy_fn)(const uint8_t *codes, const float *codebook, int bits,
                              float w_scale, float *acc_rot, int d);
/* A level's search: the states alone (the callers that want the path's
 * error sum it, turbo_tcq_path_error; a cache write does not). */
typedef void (*turbo_viterbi_fn)(int k, const float *c, const float *x, int d, uint16_t *states);
/* Attention's block kernels (kvq_turbo_chunk_scores / _values), each
 * block's codes decoded once for every head, the block scales bs[t]
 * (norm' / sqrt(d)) applied inside:
 *   dot_heads: sum[g*lds + t] += bs[t] * (codes[t] . q_rot[g*q_stride ..])
 *              for nk keys and G heads, each dot summed exactly as the
 *              level's dot kernel sums it; codes[t] NULL: untouched;
 *   axpy_keys: acc[g*acc_stride ..] += c * values of codes[t], keys in
 *              order t, c = w[g*ldw + t] * bs[t] where both are non-zero,
 *              else 0 (a key and head of c = 0 may be skipped); codes[t]
 *              NULL: key skipped. */
typedef void (*turbo_dot_heads_fn)(const uint8_t *const *codes, int nk, const float *codebook, int bits,
                                   const float *q_rot, int G, int q_stride, int d, const float *bs, float *sum,
                                   int lds);
typedef void (*turbo_axpy_keys_fn)(const uint8_t *const *codes, int nk, const float *codebook, int bits,
                                   const float *w, int ldw, const float *bs, int G, float *acc_rot, int acc_stride,
                                   int d);

/* The int8 query's dots (kvq_turbo_chunk_scores8), trellis codes only:
 * dot_heads's contract with int8 levels for the query,
 *   sum[g*lds + t] += bs[t] * D_gt, D_gt = codes[t] . m_g,
 * m_g the levels at m + g*m_stride (d of them), the codebook's values as
 * their steps n times 2^-TURBO_TCQ_STEP_BITS: D is an integer times 2^-5,
 * exact in a float (|sum n m| <= 128 * 127 * 128 < 2^24), so every kernel
 * and every order of summing gives the same D, and the product and the
 * sum (apart, never fused) the same bits: those of dot_heads on the
 * levels as floats.  codes[t] NULL: untouched. */
typedef void (*turbo_dot_heads8_fn)(const uint8_t *const *codes, int nk, const int8_t *m, int G, int m_stride, int d,
                                    const float *bs, float *sum, int lds);
/* The int16 query's dots (kvq_turbo_chunk_scores16): dot_heads8's
 * contract with levels |m| <= KVQ_TURBO_QUERY16_TOP (1023) in int16; D is
 * as exact (|sum n m| <= 128 * 1023 * 128 < 2^24), so the same bits as
 * dot_heads on the levels as floats. */
typedef void (*turbo_dot_heads16_fn)(const uint8_t *const *codes, int nk, const int16_t *m, int G, int m_stride,
                                     int d, const float *bs, float *sum, int lds);

/* The scales of nk blocks at byte `at` of their rows: bs[i] = norm' /
 * root (root = sqrt(d)), 0 for a NULL row. */
typedef void (*turbo_scales_fn)(const uint8_t *const *rows, int nk, size_t at, float root, float *bs);

/* A level's kernels.  The trellis kernels are per k (index k - 2): a
 * level may read some widths one way and others another (AVX-512 with
 * VBMI: table look-ups for k = 2, 3, scalar loads for k = 4). */
enum { TURBO_TCQ_WIDTHS = 3 };
/* Rows in pairs: x[2p] and x[2p + 1] searched together (their steps
 * interleaved), and each pair's walk back beside the next pair's
 * search: states[i] are those of one call of the one-row form per row. */
typedef void (*turbo_viterbi_pairs_fn)(int k, const float *c, int n_pairs, const float *const *x, int d,
                                       uint16_t *const *states);

typedef struct turbo_kernels {
    turbo_dot_fn  scalar_dot, tcq_dot[TURBO_TCQ_WIDTHS];
    turbo_axpy_fn scalar_axpy, tcq_axpy[TURBO_TCQ_WIDTHS];
    turbo_viterbi_fn viterbi;
    turbo_viterbi_pairs_fn viterbi_pairs;   /* NULL: one row at a time only */
    turbo_dot_heads_fn scalar_dot_heads, tcq_dot_heads[TURBO_TCQ_WIDTHS];
    turbo_axpy_keys_fn scalar_axpy_keys, tcq_axpy_keys[TURBO_TCQ_WIDTHS];
    turbo_scales_fn scales;
    turbo_dot_heads8_fn tcq_dot_heads8[TURBO_TCQ_WIDTHS];   /* NULL: tcq_dot_heads on the levels as floats */
    turbo_dot_heads16_fn tcq_dot_heads16[TURBO_TCQ_WIDTHS]; /* NULL: likewise */
    /* a trellis V's sums on its coefficients c rounded to int16 per
     * call (<= 32 keys) and head: W = rint(c * (32767 / max|c|)), ties
     * to even, the scale S = max|c| / 32767 (the rule of the block
     * types' V pairs, attn_codes.inc pairs_round_weights); the integer
     * sums exact, acc += (S 2^-TURBO_TCQ_STEP_BITS) * sum per output.  A
     * pass of heads with a coefficient not finite, or a max|c| too small
     * for 32767 / max|c| to be finite: tcq_axpy_keys's float sums.
     * NULL: the caller (turbo.c tcq_values_rounded) rounds alike and
     * runs tcq_axpy_keys on S * W */
    turbo_axpy_keys_fn tcq_axpy_keys16[TURBO_TCQ_WIDTHS];
} turbo_kernels;

/* A key's V-sum coefficient for one head: the weight times the block
 * scale, 0 where either is 0 (0 * inf would poison the sums). */
static inline float turbo_value_coef(float w, float bs) { return w != 0.0f && bs != 0.0f ? w * bs : 0.0f; }

/* The keys t0..t0+n-1 that add something to nh heads' V sums, in order
 * (keys[u]), and their coefficients (cf[u * cf_stride + h]); a NULL key,
 * or one whose coefficients are all 0, is left out.  Returns how many. */
static inline int turbo_live_keys(const uint8_t *const *codes, int t0, int n, const float *w, int ldw, const float *bs,
                                  int nh, float *cf, int cf_stride, int *keys) {
    int nu = 0;
    for (int t = t0; t < t0 + n; t++) {
        if (!codes[t]) continue;
        bool any = false;
        for (int h = 0; h < nh; h++) {
            cf[nu * cf_stride + h] = turbo_value_coef(w[(size_t)h * ldw + t], bs[t]);
            any |= cf[nu * cf_stride + h] != 0.0f;
        }
        if (any) keys[nu++] = t;
    }
    return nu;
}

/* The kernels in use (the best level this CPU runs, kvq_isa_best). */
const turbo_kernels *turbo_active_kernels(void);
/* The kernels of one level (clamped to kvq_isa_best). */
const turbo_kernels *turbo_level_kernels(kvq_isa isa);

/* The block kernels of turbo_lanes.inc at 8 lanes (src/format/turbo_avx2.c)
 * and 16 (src/format/turbo_avx512.c), with their level's Viterbi; call only
 * at kvq_isa_best() >= that level. */
void turbo_install_avx2(turbo_kernels *k);
void turbo_install_avx512(turbo_kernels *k);
/* The 16-bit search of turbo_viterbi16.inc at 16 lanes (AVX2) and 32
 * (AVX-512, src/format/turbo_viterbi_avx512.c): call only where the CPU
 * has them; the same states as kvq_turbo_tcq_viterbi_scalar. */
void turbo_viterbi_avx2(int k, const float *c, const float *x, int d, uint16_t *states);
void turbo_viterbi_avx512(int k, const float *c, const float *x, int d, uint16_t *states);
/* The scalar level's search: kvq_turbo_tcq_viterbi_scalar's states. */
void turbo_tcq_search_scalar(int k, const float *c, const float *x, int d, uint16_t *states);
void turbo_viterbi_pairs_avx2(int k, const float *c, int n_pairs, const float *const *x, int d,
                              uint16_t *const *states);
void turbo_viterbi_pairs_avx512(int k, const float *c, int n_pairs, const float *const *x, int d,
                                uint16_t *const *states);

/* Scalar reference kernels (src/format/turbo.c, src/format/turbo_tcq.c). */
float turbo_scalar_dot_ref(const uint8_t *codes, const float *codebook, int bits,
                           const float *q_rot, int d);
void  turbo_scalar_axpy_ref(const uint8_t *codes, const float *codebook, int bits,
                            float w_scale, float *acc_rot, int d);
float turbo_tcq_dot_ref(const uint8_t *codes, const float *codebook, int k,
                        const float *q_rot, int d);
void  turbo_tcq_axpy_ref(const uint8_t *codes, const float *codebook, int k,
                         float w_scale, float *acc_rot, int d);
/* Encode d unit-variance rotated targets into the code stream; returns
 * sum of squares of the chosen unit-variance reconstruction values. */
double turbo_tcq_encode(int k, const float *x, int d, uint8_t *codes, turbo_viterbi_fn viterbi);
/* A path's bit stream into codes (zeroed) and sum c[s_t]^2: the second
 * half of turbo_tcq_encode, for paths found elsewhere (two rows at once). */
double turbo_tcq_store(int k, const uint16_t *states, int d, uint8_t *codes);
/* turbo_tcq_store of two rows (the same bytes and sums), their sums of
 * squares in sumsq[0..1]. */
void turbo_tcq_store2(int k, const uint16_t *const states[2], int d, uint8_t *const codes[2], double sumsq[2]);

/* The committed trellis codebook of k (2..4) by pairs of neighbouring
 * values: entry i = { c[i & (2^L - 1)], c[i >> k] } for the L + k bit
 * window i of a stream at value t's bit (L = 6 + k): the states of values
 * t and t+1.  One 64-bit load gives both floats (the 8-lane kernels read
 * the codebook this way: half the loads and inserts of one per value).
 * 8 / 32 / 128 KiB, made once (thread-safe). */
const float *turbo_tcq_pairs(int k);

/* The trellis search in 16-bit integers (turbo_tcq.c has the scalar
 * form, turbo_viterbi16.inc the vector ones; docs/turbo.md, "The
 * encoder's search").  A row's targets and the codebook are put on one
 * fixed-point grid, v -> round(v 2^a) in [-32767, 32767] (NaN -> 0), a
 * = turbo_tcq_shift: 13 while every value is below 4 in magnitude (the
 * committed codebooks reach 3.7; unit-variance targets pass 4 about once
 * in 16,000 values), one less for each doubling beyond.  A state's cost
 * at a step is its arrival cost plus
 *     sq(X, C) = (E^2 + 2^14) >> 15,  E = X - C saturated to int16,
 * (vpmulhrsw: e^2 in units of 2^(15 - 2a), 1/2048 at a = 13), added with
 * unsigned saturation at 65535.  Each step's minima become the next
 * step's arrival costs less a floor, the least arrival cost of the step
 * (no cost of the step is below it, and it is known before the step), so
 * the best path stays near 0 and a path 32 units worse saturates (it
 * cannot come back).  16-bit lanes hold twice
 * the states of float ones; the path's squared error is within 0.02 %
 * of the float search's on unit-variance rows (k = 4; less at k = 2, 3)
 * and the test turbo_viterbi16_near_exact bounds it row by row. */
enum { TURBO_TCQ_TOP_SHIFT = 13, TURBO_TCQ_MIN_SHIFT = -24, TURBO_TCQ_CACHED_SHIFTS = 4 };
/* the largest finite |x_t| (0 if none; of a row, or of a codebook), and
 * the grid's a for a codebook's and a row's */
float turbo_tcq_xmax(const float *x, int d);
int turbo_tcq_shift(float cmax, float xmax);
/* round(v scale) clamped to [-32767, 32767], scale = 2^a (exact), to
 * nearest even; NaN -> 0.  Inline: in the vector files' units it is a
 * multiply and a round instruction, where the scalar unit calls rintf. */
static inline int16_t turbo_tcq_fixed(float v, float scale) {
    if (isnan(v)) return 0;
    const float r = rintf(v * scale);
    return (int16_t)(r > 32767.0f ? 32767 : r < -32767.0f ? -32767 : (int)r);
}
/* A state's cost: in + sq(X, C), saturated at 65535 (the definition
 * every level computes). */
static inline uint16_t turbo_tcq_cost16(uint16_t in, int16_t X, int16_t C) {
    int e = (int)X - (int)C;
    e = e < -32768 ? -32768 : e > 32767 ? 32767 : e;
    const unsigned v = in + (unsigned)((e * e + 16384) >> 15);
    return (uint16_t)(v > 65535u ? 65535u : v);
}

/* The codebook on a row's grid (shift a), laid out for the vector search.
 * Write a state as s = (a << k) | j: a = its top 6 bits (the context its
 * successors see), j = its low k bits.  With K = 2^k and R = 64 / K, a =
 * q*R + m (m = a mod R).  cpos holds C of state (a << k) | j at row j,
 * column a.  The cost of that state at a step is in[(m << k) | j] +
 * sq(X_t, C), and the best arrival into context a at the next step is the
 * minimum over the K rows at column a, lane-wise: the minima come out in
 * context order.  Along a row the arrival costs a state reads repeat with
 * period R (they depend on m alone), so a row's vector of them is the R
 * values in[(m << k) | j], m = 0..R-1, repeated, the same for all the
 * row's column chunks: one broadcast load where the arrival costs are
 * kept in (j, m) order (AVX2), one word permute where they are kept in
 * registers by context (AVX-512). */
typedef struct turbo_tcq_layout {
    int16_t cpos[TURBO_MAX_STATES];                    /* C by position j*64 + a */
    int16_t cstate[TURBO_MAX_STATES];                  /* C by state */
    int shift;                                         /* a */
    float scale;                                       /* 2^a */
} turbo_tcq_layout;
/* The layout of codebook c at shift a into *own; for the committed
 * codebook of k (kvq_turbo_tcq_codebook) at the top shifts the one made
 * once (thread-safe) instead: a cache write's rows all use those. */
const turbo_tcq_layout *turbo_tcq_layout_of(int k, const float *c, int shift, turbo_tcq_layout *own);
/* The layout for a row whose largest finite magnitude is xmax: at
 * turbo_tcq_shift of it and c's largest magnitude (found once for the
 * committed codebooks). */
const turbo_tcq_layout *turbo_tcq_row_layout(int k, const float *c, float xmax, turbo_tcq_layout *own);
/* sum (x_t - c[s_t])^2 of a path, in double: what the searches return */
double turbo_tcq_path_error(const float *c, const float *x, const uint16_t *states, int d);
/* Tagged costs (the float search, kvq_turbo_tcq_viterbi_exact).  A
 * step's best arrival into a context is the smallest of its 2^k
 * predecessors' costs, the first of them on ties.  Every cost is
 * a sum of squares, so >= 0 (or NaN), and for such floats the order of
 * the bit patterns as unsigned integers is the order of the values.  Each
 * cost's low k bits are replaced by its predecessor's index j (the tag),
 * and the unsigned minimum of the tagged patterns is then the best cost
 * and its j in one: costs that differ above the low k bits keep their
 * order; costs that agree there (a tie, or within 2^k ulp) go to the
 * smaller j.  The tagged minimum is the arrival cost the next step adds
 * to (a change of at most 2^k - 1 ulp per step), its tag the back-pointer.
 * A NaN cost (a NaN in x) never beats a number (NaNs order among
 * themselves by their bit patterns). */
static inline uint32_t turbo_tcq_tag(float cost, int j, uint32_t mask) {
    return (kvq_f32_bits(cost) & ~mask) | (uint32_t)j;
}

/* Viterbi back-pointers -> states: back[t][ctx] is the low k bits of the
 * best predecessor of any state with context ctx at step t. */
void turbo_tcq_backtrack(int k, const uint8_t (*back)[1 << KVQ_TURBO_TCQ_CONTEXT], int d, int last,
                         uint16_t *states);
/* What a vector search keeps for its walk back instead of back-pointers
 * where it keeps no rows (turbo_viterbi16.inc, W_KEEPS): every step's
 * arrival costs by context (in[0] = 0, the free initial bits; in[t + 1]
 * = step t's minima less its floor) and floors; the walk's step from
 * them is turbo_walk_x86.h's turbo_kept_step. */
typedef struct turbo_tcq_kept {
    uint16_t in[KVQ_TURBO_BLOCK][1 << KVQ_TURBO_TCQ_CONTEXT];
    uint16_t floor[KVQ_TURBO_BLOCK];
} turbo_tcq_kept;

/* The 2^bits - 1 cell boundaries of kvq_turbo_lloyd_centroids(bits):
 * midpoints of neighbouring centroids, ascending. */
const float *turbo_lloyd_midpoints(int bits);

/* The trained tables (turbo_tcq_tables.c, generated); the codebook the
 * format uses is theirs rounded to multiples of 2^-TURBO_TCQ_STEP_BITS
 * (kvq_turbo_tcq_codebook), turbo_tcq_codebook_steps its values in those
 * steps (value = steps * 2^-TURBO_TCQ_STEP_BITS; k = 2..4, else NULL). */
enum { TURBO_TCQ_STEP_BITS = 5 };
const int8_t *turbo_tcq_codebook_steps(int k);
extern const float kvq_turbo_tcq_table2[1 << 8];
extern const float kvq_turbo_tcq_table3[1 << 9];
extern const float kvq_turbo_tcq_table4[1 << 10];
/* their training error per unit-variance value (the distortion D) */
extern const double kvq_turbo_tcq_mse2, kvq_turbo_tcq_mse3, kvq_turbo_tcq_mse4;

/* ---- bit streams: groups of 8 values ----
 * Group g of a scalar b-bit stream is the b bytes at g*b: value j of the
 * group is bits j*b..j*b+b-1 of their little-endian word. */
/* n = 2..5 bytes at p as a little-endian integer, as the 2- and 4-byte
 * reads kvq_rd16 / kvq_rd32 (which compile to one load each) plus a byte:
 * the bytewise form of 3 and 5 bytes compiled to one byte load, shift and
 * or per byte, a third of a 3-bit group's decode in the TurboQuant lanes. */
static inline uint64_t turbo_read_le(const uint8_t *p, const int n) {
    if (n >= 4) return (uint64_t)kvq_rd32(p) | (n == 5 ? (uint64_t)p[4] << 32 : 0u);
    return (uint64_t)kvq_rd16(p) | (n == 3 ? (uint64_t)p[2] << 16 : 0u);
}

/* Group g of a scalar code stream (values 8g..8g+7: bits each). */
static inline uint32_t turbo_scalar_group(const uint8_t *codes, int bits, int g) {
    return (uint32_t)turbo_read_le(codes + g * bits, bits);     /* bits = 2..4 */
}

/* Group g of a trellis stream (values 8g..8g+7): the state of value 8g+j
 * is bits j*k .. j*k+5+k of the k+1 bytes starting at byte g*k. */
static inline uint64_t turbo_tcq_group(const uint8_t *codes, int k, int g) {
    return turbo_read_le(codes + g * k, k + 1);   /* k = 2..4: k + 1 = 3..5 bytes */
}

/* splitmix64 + Box-Muller for training data (deterministic everywhere). */
typedef struct turbo_rng { uint64_t s; int has_spare; double spare; } turbo_rng;
double turbo_rng_gauss(turbo_rng *r);

#endif
