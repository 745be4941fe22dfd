/* turbo.c - TurboQuant rows: block layout, rotation, norm, the scalar
 * (per-coordinate Lloyd-Max) code, and the rotated-domain row kernels for
 * all six types.  The trellis code lives in turbo_tcq.c, the SIMD kernels
 * in turbo_avx2.c and turbo_avx512.c (turbo_lanes.inc).  Formats: see turbo.h and docs/turbo.md. */
#include "turbo_internal.h"
#include "quant_block.h"
#include "hadamard.h"
#include "turbo_tcq64.h"

#include <math.h>
#include <pthread.h>

typedef struct turbo_format {
    const char *name;
    int bits;       /* b bits per value (scalar) or k (trellis) */
    bool tcq;
} turbo_format;

static const turbo_format g_formats[KVQ_TURBO_COUNT] = {
    [KVQ_TURBO2]     = { "turbo2",     2, false },
    [KVQ_TURBO3]     = { "turbo3",     3, false },
    [KVQ_TURBO4]     = { "turbo4",     4, false },
    [KVQ_TURBO2_TCQ] = { "turbo2_tcq", 2, true },
    [KVQ_TURBO3_TCQ] = { "turbo3_tcq", 3, true },
    [KVQ_TURBO4_TCQ] = { "turbo4_tcq", 4, true },
};

#define FP16_MAX 65504.0

static bool valid_type(kvq_turbo_type t) { return (unsigned)t < KVQ_TURBO_COUNT; }
/* A trellis type's slot in the kernels' per-k arrays (turbo_kernels). */
static int tcq_width(kvq_turbo_type t) { return g_formats[t].bits - 2; }

const char *kvq_turbo_name(kvq_turbo_type t) { return valid_type(t) ? g_formats[t].name : "?"; }
int kvq_turbo_bits(kvq_turbo_type t) { return valid_type(t) ? g_formats[t].bits : 0; }
bool kvq_turbo_is_tcq(kvq_turbo_type t) { return valid_type(t) && g_formats[t].tcq; }

kvq_turbo_type kvq_turbo_from_name(const char *name) {
    for (int t = 0; t < KVQ_TURBO_COUNT && name; t++)
        if (!strcmp(name, g_formats[t].name)) return (kvq_turbo_type)t;
    return KVQ_TURBO_COUNT;
}

/* ------------------------------------------------------------ block layout */

#define MAX_HEAD_DIM 65536

/* Width of the block that starts at value `off` of a head_dim row. */
static int block_dim_at(int head_dim, int off) {
    int left = head_dim - off;
    return left > KVQ_TURBO_SMALL_BLOCK ? KVQ_TURBO_BLOCK : KVQ_TURBO_SMALL_BLOCK;
}

int kvq_turbo_rot_dim(int head_dim) {
    if (head_dim < 1 || head_dim > MAX_HEAD_DIM) return 0;
    int total = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off))
        total += block_dim_at(head_dim, off);
    return total;
}

size_t kvq_turbo_block_bytes(kvq_turbo_type t, int d) {
    if (!valid_type(t) || (d != KVQ_TURBO_BLOCK && d != KVQ_TURBO_SMALL_BLOCK)) return 0;
    int bits = g_formats[t].bits;
    if (!g_formats[t].tcq) return TURBO_NORM_BYTES + (size_t)d * bits / 8;
    /* 6 initial-state bits + d*k output bits, padded to whole fp16 words */
    size_t stream = ((size_t)KVQ_TURBO_TCQ_CONTEXT + (size_t)d * bits + 7) / 8;
    return (TURBO_NORM_BYTES + stream + 1) & ~(size_t)1;
}

size_t kvq_turbo_row_bytes(kvq_turbo_type t, int head_dim) {
    if (!valid_type(t) || !kvq_turbo_rot_dim(head_dim)) return 0;
    size_t bytes = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off))
        bytes += kvq_turbo_block_bytes(t, block_dim_at(head_dim, off));
    return bytes;
}

double kvq_turbo_bpv(kvq_turbo_type t, int head_dim) {
    size_t bytes = kvq_turbo_row_bytes(t, head_dim);
    return bytes ? 8.0 * (double)bytes / head_dim : 0.0;
}

/* ---------------------------------------------------------------- rotation */

/* The diagonals S1, S2 of the 128- and 64-blocks as sign-bit masks
 * (0x80000000 where the sign is -1: XOR-ed into a float, the negation),
 * made once. */
typedef struct turbo_signs { uint32_t s1_128[128], s2_128[128], s1_64[64], s2_64[64]; } turbo_signs;
static turbo_signs g_signs;
static pthread_once_t g_signs_once = PTHREAD_ONCE_INIT;

static void sign_masks(uint32_t *mask, int n, uint64_t seed) {
    int8_t s[128];
    kvq_random_signs(s, n, seed);
    for (int i = 0; i < n; i++) mask[i] = s[i] < 0 ? 0x80000000u : 0u;
}

static void make_signs(void) {
    sign_masks(g_signs.s1_128, 128, KVQ_TURBO_SEED_S1);
    sign_masks(g_signs.s2_128, 128, KVQ_TURBO_SEED_S2);
    sign_masks(g_signs.s1_64, 64, KVQ_TURBO_SEED_S1);
    sign_masks(g_signs.s2_64, 64, KVQ_TURBO_SEED_S2);
}

static void signs_for(int d, const uint32_t **s1, const uint32_t **s2) {
    pthread_once(&g_signs_once, make_signs);
    *s1 = d == 128 ? g_signs.s1_128 : g_signs.s1_64;
    *s2 = d == 128 ? g_signs.s2_128 : g_signs.s2_64;
}

/* v <- S2 H S1 x (one block of d values; x == v: in place) */
static void rotate_block_from(const float *x, float *v, int d) {
    const uint32_t *s1, *s2;
    signs_for(d, &s1, &s2);
    kvq_fwht_signed(x, v, d, s1, s2);
}

static void rotate_block(float *v, int d) { rotate_block_from(v, v, d); }

/* v <- S1 H S2 v, the inverse (H and the diagonals are involutions) */
static void unrotate_block(float *v, int d) {
    const uint32_t *s1, *s2;
    signs_for(d, &s1, &s2);
    kvq_fwht_signed(v, v, d, s2, s1);
}

/* y <- R x for a block of width d holding n <= d real values (the rest
 * zero): a whole block read where it lies, a short one copied and
 * padded first. */
static void rotate_padded(const float *x, int n, float *y, int d) {
    if (n == d) { rotate_block_from(x, y, d); return; }
    memcpy(y, x, (size_t)n * sizeof *y);
    for (int i = n; i < d; i++) y[i] = 0.0f;
    rotate_block(y, d);
}

void kvq_turbo_rotate_query(const float *q, float *q_rot, int head_dim) {
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off);
        rotate_padded(q + off, KVQ_MIN(d, head_dim - off), q_rot + off, d);
    }
}

void kvq_turbo_unrotate(const float *acc_rot, float *out, int head_dim) {
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off), n = KVQ_MIN(d, head_dim - off);
        float v[KVQ_TURBO_BLOCK];
        memcpy(v, acc_rot + off, (size_t)d * sizeof *v);
        unrotate_block(v, d);
        memcpy(out + off, v, (size_t)n * sizeof *v);
    }
}

/* -------------------------------------------------------- the scalar code */

/* Index of the nearest centroid: the number of cell boundaries below x
 * (branch-free: the data are random, a search would mispredict). */
static int nearest_centroid(const float *midpoints, int levels, float x) {
    int idx = 0;
    for (int i = 0; i + 1 < levels; i++) idx += x > midpoints[i];
    return idx;
}

/* Nearest Lloyd-Max centroid of each unit-variance target, written group
 * by group (8 indices = `bits` bytes); returns the sum of squares of the
 * chosen centroids. */
static double scalar_encode(int bits, const float *x, int d, uint8_t *codes) {
    const float *c = kvq_turbo_lloyd_centroids(bits), *mid = turbo_lloyd_midpoints(bits);
    double sumsq = 0.0;
    for (int g = 0; g < d / 8; g++) {
        uint32_t w = 0;
        for (int j = 0; j < 8; j++) {
            int idx = nearest_centroid(mid, 1 << bits, x[8 * g + j]);
            w |= (uint32_t)idx << (j * bits);
            sumsq += (double)c[idx] * c[idx];
        }
        for (int i = 0; i < bits; i++) codes[g * bits + i] = (uint8_t)(w >> (8 * i));
    }
    return sumsq;
}

float turbo_scalar_dot_ref(const uint8_t *codes, const float *codebook, int bits,
                           const float *q_rot, int d) {
    uint32_t mask = (1u << bits) - 1;
    float sum = 0.0f;
    for (int g = 0; g < d / 8; g++) {
        uint32_t w = turbo_scalar_group(codes, bits, g);
        for (int j = 0; j < 8; j++) sum += codebook[(w >> (j * bits)) & mask] * q_rot[8 * g + j];
    }
    return sum;
}

void turbo_scalar_axpy_ref(const uint8_t *codes, const float *codebook, int bits,
                           float w_scale, float *acc_rot, int d) {
    uint32_t mask = (1u << bits) - 1;
    for (int g = 0; g < d / 8; g++) {
        uint32_t w = turbo_scalar_group(codes, bits, g);
        for (int j = 0; j < 8; j++) acc_rot[8 * g + j] += w_scale * codebook[(w >> (j * bits)) & mask];
    }
}

/* ------------------------------------------------------- kernel dispatch */

/* The scalar block kernels of attention: the dot and axpy per head and
 * key (what the per-key reference pass does). */

static void scalar_dot_heads_ref(const uint8_t *const *codes, int nk, const float *codebook, int bits,
                                 const float *q_rot, int G, int q_stride, int d, const float *bs, float *sum, int lds) {
    for (int t = 0; t < nk; t++)
        for (int g = 0; g < G; g++)
            if (codes[t]) {    /* product and sum apart, as dot_with */
                const float p = bs[t] * turbo_scalar_dot_ref(codes[t], codebook, bits, q_rot + (size_t)g * q_stride, d);
                sum[g * lds + t] += p;
            }
}
static void tcq_dot_heads_ref(const uint8_t *const *codes, int nk, const float *codebook, int k, const float *q_rot,
                              int G, int q_stride, int d, const float *bs, float *sum, int lds) {
    for (int t = 0; t < nk; t++)
        for (int g = 0; g < G; g++)
            if (codes[t]) {
                const float p = bs[t] * turbo_tcq_dot_ref(codes[t], codebook, k, q_rot + (size_t)g * q_stride, d);
                sum[g * lds + t] += p;
            }
}
static void scalar_axpy_keys_ref(const uint8_t *const *codes, int nk, const float *codebook, int bits,
                                 const float *w, int ldw, const float *bs, int G, float *acc_rot, int acc_stride, int d) {
    for (int t = 0; t < nk; t++)
        for (int g = 0; g < G; g++) {
            const float c = codes[t] ? turbo_value_coef(w[g * ldw + t], bs[t]) : 0.0f;
            if (c != 0.0f) turbo_scalar_axpy_ref(codes[t], codebook, bits, c, acc_rot + (size_t)g * acc_stride, d);
        }
}
static void tcq_axpy_keys_ref(const uint8_t *const *codes, int nk, const float *codebook, int k,
                              const float *w, int ldw, const float *bs, int G, float *acc_rot, int acc_stride, int d) {
    for (int t = 0; t < nk; t++)
        for (int g = 0; g < G; g++) {
            const float c = codes[t] ? turbo_value_coef(w[g * ldw + t], bs[t]) : 0.0f;
            if (c != 0.0f) turbo_tcq_axpy_ref(codes[t], codebook, k, c, acc_rot + (size_t)g * acc_stride, d);
        }
}

static void block_scales_ref(const uint8_t *const *rows, int nk, size_t at, float root, float *bs) {
    for (int i = 0; i < nk; i++) bs[i] = rows[i] ? kvq_half_to_float(kvq_rd16(rows[i] + at)) / root : 0.0f;
}

static const turbo_kernels g_scalar_kernels = {
    turbo_scalar_dot_ref, { turbo_tcq_dot_ref, turbo_tcq_dot_ref, turbo_tcq_dot_ref },
    turbo_scalar_axpy_ref, { turbo_tcq_axpy_ref, turbo_tcq_axpy_ref, turbo_tcq_axpy_ref },
    turbo_tcq_search_scalar, NULL,
    scalar_dot_heads_ref, { tcq_dot_heads_ref, tcq_dot_heads_ref, tcq_dot_heads_ref },
    scalar_axpy_keys_ref, { tcq_axpy_keys_ref, tcq_axpy_keys_ref, tcq_axpy_keys_ref },
    block_scales_ref,
    { NULL, NULL, NULL },
    { NULL, NULL, NULL },
    { NULL, NULL, NULL },
};
static turbo_kernels g_level_kernels[KVQ_ISA_COUNT];

static pthread_once_t g_kernels_once = PTHREAD_ONCE_INIT;

/* Every level up to the CPU's best; a level above it is never installed
 * (its kernels would not run here) and reads as the best. */
static void choose_kernels(void) {
    for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) g_level_kernels[isa] = g_scalar_kernels;
    const kvq_isa best = kvq_isa_best();
    if (best >= KVQ_ISA_AVX2) turbo_install_avx2(&g_level_kernels[KVQ_ISA_AVX2]);
    if (best >= KVQ_ISA_AVX512) {      /* over the AVX2 kernels: the trellis codes stay 8-lane ... */
        g_level_kernels[KVQ_ISA_AVX512] = g_level_kernels[KVQ_ISA_AVX2];
        turbo_install_avx512(&g_level_kernels[KVQ_ISA_AVX512]);
        /* ... where VBMI's byte look-ups read the codebook instead: one
         * 128-entry look-up per 64 values and table since the codebook is a
         * byte per value (turbo_tcq64.inc), 0.67-0.72x the pair loads' time
         * for k = 3 and 4 on Zen 4, whose 512-bit permutes run as halves
         * (docs/performance.md); with VNNI too, which its int8-query dot
         * and integer V sums take (every VBMI CPU but Cannon Lake) */
        if (kvq_cpu_features()->avx512vbmi && kvq_cpu_features()->avx512vnni) {
            turbo_kernels *lv = &g_level_kernels[KVQ_ISA_AVX512];
            const turbo_axpy_fn pairs_axpy4 = lv->tcq_axpy[4 - 2];
            tcq64_install_vbmi(lv);
            /* One row's axpy at k = 4 (a row's decode: prefill's tiles)
             * stays with the pair loads, 23 against 36-39 ns per 128 values
             * (kvq turbo-bench): 8 tables for one key cost more than its
             * 32 pair loads.  Each output of an axpy is one FMA of the same
             * operands either way (the look-ups' 2^29 is a power of two), so
             * the float chunk sums give this row axpy's bits (a chunk's V
             * sums are the integer ones, tcq_axpy_keys16). */
            lv->tcq_axpy[4 - 2] = pairs_axpy4;
        }
    }
}

const turbo_kernels *turbo_level_kernels(kvq_isa isa) {
    pthread_once(&g_kernels_once, choose_kernels);
    const kvq_isa best = kvq_isa_best();
    return &g_level_kernels[(unsigned)isa > (unsigned)best ? best : isa];
}

const turbo_kernels *turbo_active_kernels(void) { return turbo_level_kernels(kvq_isa_best()); }

static const float *codebook_of(kvq_turbo_type t) {
    return g_formats[t].tcq ? kvq_turbo_tcq_codebook(g_formats[t].bits)
                            : kvq_turbo_lloyd_centroids(g_formats[t].bits);
}

/* Distortion D per unit-variance value of the type's codebook. */
static double codebook_distortion(kvq_turbo_type t) {
    if (!g_formats[t].tcq) return kvq_turbo_lloyd_mse(g_formats[t].bits);
    switch (g_formats[t].bits) {
    case 2: return kvq_turbo_tcq_mse2;
    case 3: return kvq_turbo_tcq_mse3;
    default: return kvq_turbo_tcq_mse4;
    }
}

double kvq_turbo_ip_gain(kvq_turbo_type t) {
    return valid_type(t) ? sqrt(1.0 - codebook_distortion(t)) : NAN;
}

/* --------------------------------------------------------------- encoding */

/* The sum of squares of the n real values, in doubles, in order (the
 * padding adds nothing). */
static double sum_squares(const float *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

/* The targets of one block of width d (n real values, zero-padded) from
 * its sum of squares norm2: sqrt(d) R x / ||x|| in y, unit variance, and
 * ||x||.  `rotated`: x is already R x (n = d; the cache keeps its rows
 * rotated), and ||R x|| is ||x||.  A block with no direction (zero, NaN
 * or Inf) is stored as its norm alone here, and false returned. */
static bool targets_of(const float *x, int n, int d, bool rotated, double norm2, float *y, double *norm, uint8_t *blk,
                       size_t bytes) {
    memset(blk, 0, bytes);
    *norm = sqrt(norm2);
    if (!(*norm > 0.0) || !isfinite(*norm)) {          /* zero, NaN or Inf: no direction */
        kvq_wr16(blk, kvq_float_to_half((float)*norm));
        return false;
    }
    const float *src = x;   /* R x: x itself, or rotated into y */
    if (!rotated) {
        rotate_padded(x, n, y, d);
        src = y;
    }
    float to_unit = (float)(sqrt((double)d) / *norm);
    for (int i = 0; i < d; i++) y[i] = src[i] * to_unit;
    return true;
}

/* targets_of with the block's own sum of squares. */
static bool block_targets(const float *x, int n, int d, bool rotated, float *y, double *norm, uint8_t *blk,
                          size_t bytes) {
    return targets_of(x, n, d, rotated, sum_squares(x, n), y, norm, blk, bytes);
}

/* The block's scale: ||c_hat|| at N(0,1/d) scale is sqrt(sumsq / d), so
 * norm' = ||x|| / ||c_hat||. */
static void block_finish(uint8_t *blk, double norm, double sumsq, int d) {
    double norm_prime = sumsq > 0.0 ? norm / sqrt(sumsq / d) : 0.0;
    kvq_wr16(blk, kvq_float_to_half((float)fmin(norm_prime, FP16_MAX)));
}

/* Quantise the n real values of one block of width d into blk. */
static void encode_block(kvq_turbo_type t, const float *x, int n, int d, bool rotated, uint8_t *blk,
                         const turbo_kernels *kern) {
    float y[KVQ_TURBO_BLOCK];
    double norm;
    if (!block_targets(x, n, d, rotated, y, &norm, blk, kvq_turbo_block_bytes(t, d))) return;
    uint8_t *codes = blk + TURBO_NORM_BYTES;
    int bits = g_formats[t].bits;
    double sumsq = g_formats[t].tcq ? turbo_tcq_encode(bits, y, d, codes, kern->viterbi)
                                    : scalar_encode(bits, y, d, codes);
    block_finish(blk, norm, sumsq, d);
}

/* The most rows encoded together: a batch's targets and states stay on
 * the stack (12 KiB), and its pairs' walks back all but the last run
 * beside the next pair's search (turbo_viterbi16.inc). */
enum { TURBO_ROWS_BATCH = 16 };

/* The sums of squares of n rows' first len values, two rows in each loop:
 * each sum in its own order (sum_squares' value), two chains of dependent
 * adds side by side. */
static void sums_squares(const float *const *x, int n, int len, double *sums) {
    int r = 0;
    for (; r + 1 < n; r += 2) {
        double s0 = 0.0, s1 = 0.0;
        for (int i = 0; i < len; i++) {
            s0 += (double)x[r][i] * x[r][i];
            s1 += (double)x[r + 1][i] * x[r + 1][i];
        }
        sums[r] = s0;
        sums[r + 1] = s1;
    }
    if (r < n) sums[r] = sum_squares(x[r], len);
}

/* One block of each of n rows (n <= TURBO_ROWS_BATCH) of a trellis
 * type: the rows with a direction in pairs through the level's pairs
 * search (the same paths as one row at a time), an odd one out the
 * one-row way; a row without one is written by targets_of. */
static void encode_block_rows(kvq_turbo_type t, int n_rows, const float *const *x, int n, int d, bool rotated,
                              uint8_t *const *blk, const turbo_kernels *kern) {
    float y[TURBO_ROWS_BATCH][KVQ_TURBO_BLOCK];
    uint16_t states[TURBO_ROWS_BATCH][KVQ_TURBO_BLOCK];
    double norm[TURBO_ROWS_BATCH], sumsq[TURBO_ROWS_BATCH];
    const float *ys[TURBO_ROWS_BATCH];
    uint16_t *ss[TURBO_ROWS_BATCH];
    int row_of[TURBO_ROWS_BATCH], m = 0;   /* the rows searched, in order */
    const size_t bytes = kvq_turbo_block_bytes(t, d);
    const int k = g_formats[t].bits;
    sums_squares(x, n_rows, n, sumsq);
    for (int r = 0; r < n_rows; r++)
        if (targets_of(x[r], n, d, rotated, sumsq[r], y[r], &norm[r], blk[r], bytes)) {
            ys[m] = y[r];
            ss[m] = states[m];
            row_of[m++] = r;
        }
    const int paired = m & ~1;
    kern->viterbi_pairs(k, kvq_turbo_tcq_codebook(k), paired / 2, ys, d, ss);
    for (int i = 0; i < paired; i += 2) {
        const uint16_t *const paths[2] = { ss[i], ss[i + 1] };
        uint8_t *const codes[2] = { blk[row_of[i]] + TURBO_NORM_BYTES, blk[row_of[i + 1]] + TURBO_NORM_BYTES };
        double path_sq[2];
        turbo_tcq_store2(k, paths, d, codes, path_sq);
        for (int h = 0; h < 2; h++) block_finish(blk[row_of[i + h]], norm[row_of[i + h]], path_sq[h], d);
    }
    if (m > paired) {
        const int r = row_of[paired];
        block_finish(blk[r], norm[r], turbo_tcq_encode(k, y[r], d, blk[r] + TURBO_NORM_BYTES, kern->viterbi), d);
    }
}

static kvq_status check_row(kvq_turbo_type t, int head_dim, kvq_error *err) {
    if (!valid_type(t)) return kvq_fail(err, KVQ_ERR_ARG, "unknown turbo type %d", (int)t);
    if (!kvq_turbo_rot_dim(head_dim))
        return kvq_fail(err, KVQ_ERR_ARG, "%s: head size %d out of range 1..%d",
                        g_formats[t].name, head_dim, MAX_HEAD_DIM);
    return KVQ_OK;
}

/* A row of head_dim values, or (rotated) its kvq_turbo_rot_dim(head_dim)
 * rotated values: every block then whole. */
static kvq_status quantize_with(const turbo_kernels *kern, kvq_turbo_type t, const float *x, bool rotated,
                                void *dst, int head_dim, kvq_error *err) {
    kvq_status st = check_row(t, head_dim, err);
    if (st != KVQ_OK) return st;
    uint8_t *blk = dst;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off);
        encode_block(t, x + off, rotated ? d : KVQ_MIN(d, head_dim - off), d, rotated, blk, kern);
        blk += kvq_turbo_block_bytes(t, d);
    }
    return KVQ_OK;
}

kvq_status kvq_turbo_quantize(kvq_turbo_type t, const float *x, void *dst, int head_dim,
                              kvq_error *err) {
    return quantize_with(turbo_active_kernels(), t, x, false, dst, head_dim, err);
}

kvq_status kvq_turbo_quantize_scalar(kvq_turbo_type t, const float *x, void *dst, int head_dim,
                                     kvq_error *err) {
    return quantize_with(&g_scalar_kernels, t, x, false, dst, head_dim, err);
}

kvq_status kvq_turbo_quantize_rot(kvq_turbo_type t, const float *x_rot, void *dst, int head_dim, kvq_error *err) {
    return quantize_with(turbo_active_kernels(), t, x_rot, true, dst, head_dim, err);
}

kvq_status kvq_turbo_quantize_rot_scalar(kvq_turbo_type t, const float *x_rot, void *dst, int head_dim,
                                         kvq_error *err) {
    return quantize_with(&g_scalar_kernels, t, x_rot, true, dst, head_dim, err);
}

static bool quantize_rows_with(kvq_turbo_type t, int n_rows, const float *const *x, bool rotated, void *const *dst,
                               int head_dim) {
    const turbo_kernels *kern = turbo_active_kernels();
    if (!valid_type(t) || !g_formats[t].tcq || !kern->viterbi_pairs || n_rows < 1 ||
        check_row(t, head_dim, NULL) != KVQ_OK)
        return false;
    for (int b = 0; b < n_rows; b += TURBO_ROWS_BATCH) {
        const int nb = KVQ_MIN(TURBO_ROWS_BATCH, n_rows - b);
        uint8_t *blk[TURBO_ROWS_BATCH];
        for (int r = 0; r < nb; r++) blk[r] = dst[b + r];
        for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
            const int d = block_dim_at(head_dim, off);
            const float *xs[TURBO_ROWS_BATCH];
            for (int r = 0; r < nb; r++) xs[r] = x[b + r] + off;
            encode_block_rows(t, nb, xs, rotated ? d : KVQ_MIN(d, head_dim - off), d, rotated, blk, kern);
            for (int r = 0; r < nb; r++) blk[r] += kvq_turbo_block_bytes(t, d);
        }
    }
    return true;
}

bool kvq_turbo_quantize_rows(kvq_turbo_type t, int n_rows, const float *const *x, void *const *dst, int head_dim) {
    return quantize_rows_with(t, n_rows, x, false, dst, head_dim);
}

bool kvq_turbo_quantize_rows_rot(kvq_turbo_type t, int n_rows, const float *const *x_rot, void *const *dst,
                                 int head_dim) {
    return quantize_rows_with(t, n_rows, x_rot, true, dst, head_dim);
}

/* --------------------------------------------------- rotated-domain rows */

/* norm' / sqrt(d): unit-variance codebook values -> rotated reconstruction */
static float block_scale(const uint8_t *blk, int d) {
    return kvq_half_to_float(kvq_rd16(blk)) / sqrtf((float)d);
}

static float dot_with(const turbo_kernels *kern, kvq_turbo_type t, const void *row,
                      const float *q_rot, int head_dim) {
    const uint8_t *blk = row;
    const float *c = codebook_of(t);
    turbo_dot_fn dot = g_formats[t].tcq ? kern->tcq_dot[tcq_width(t)] : kern->scalar_dot;
    float sum = 0.0f;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off);
        float scale = block_scale(blk, d);
        if (scale != 0.0f) {   /* product and sum apart: no compiler fuses them (the chunk kernels do not) */
            const float p = scale * dot(blk + TURBO_NORM_BYTES, c, g_formats[t].bits, q_rot + off, d);
            sum += p;
        }
        blk += kvq_turbo_block_bytes(t, d);
    }
    return sum;
}

static void axpy_with(const turbo_kernels *kern, kvq_turbo_type t, float w, const void *row,
                      float *acc_rot, int head_dim) {
    const uint8_t *blk = row;
    const float *c = codebook_of(t);
    turbo_axpy_fn axpy = g_formats[t].tcq ? kern->tcq_axpy[tcq_width(t)] : kern->scalar_axpy;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off);
        float scale = block_scale(blk, d);
        if (scale != 0.0f) axpy(blk + TURBO_NORM_BYTES, c, g_formats[t].bits, w * scale, acc_rot + off, d);
        blk += kvq_turbo_block_bytes(t, d);
    }
}

/* The row kernels trust head_dim (validated once by the caller through
 * kvq_turbo_row_bytes) but not the type: an unknown type would index past
 * the format table, so it gives NaN / no-op instead. */
float kvq_turbo_dot_rot(kvq_turbo_type t, const void *row, const float *q_rot, int head_dim) {
    return valid_type(t) ? dot_with(turbo_active_kernels(), t, row, q_rot, head_dim) : NAN;
}
float kvq_turbo_dot_rot_scalar(kvq_turbo_type t, const void *row, const float *q_rot, int head_dim) {
    return valid_type(t) ? dot_with(&g_scalar_kernels, t, row, q_rot, head_dim) : NAN;
}
void kvq_turbo_axpy_rot(kvq_turbo_type t, float w, const void *row, float *acc_rot, int head_dim) {
    if (valid_type(t)) axpy_with(turbo_active_kernels(), t, w, row, acc_rot, head_dim);
}
void kvq_turbo_axpy_rot_scalar(kvq_turbo_type t, float w, const void *row, float *acc_rot,
                               int head_dim) {
    if (valid_type(t)) axpy_with(&g_scalar_kernels, t, w, row, acc_rot, head_dim);
}
float kvq_turbo_dot_rot_at(kvq_isa isa, kvq_turbo_type t, const void *row, const float *q_rot, int head_dim) {
    return valid_type(t) ? dot_with(turbo_level_kernels(isa), t, row, q_rot, head_dim) : NAN;
}
void kvq_turbo_axpy_rot_at(kvq_isa isa, kvq_turbo_type t, float w, const void *row, float *acc_rot, int head_dim) {
    if (valid_type(t)) axpy_with(turbo_level_kernels(isa), t, w, row, acc_rot, head_dim);
}

/* ------------------------------------------------ attention over chunks */

enum { CHUNK_KEYS = 32 };   /* keys per pass (stack arrays); every head in each */

/* The nk (<= CHUNK_KEYS) scales of the blocks at byte `at` of the rows
 * (block_scale's value, the same bits at every level; 0 for a NULL row),
 * and their codes (NULL where the row is NULL or the scale 0: such a block
 * adds nothing). */
static void block_scales(const turbo_kernels *kern, const uint8_t *const *rows, int nk, size_t at, int d, float *bs,
                         const uint8_t **codes) {
    kern->scales(rows, nk, at, sqrtf((float)d), bs);
    for (int i = 0; i < nk; i++) codes[i] = bs[i] != 0.0f ? rows[i] + at + TURBO_NORM_BYTES : NULL;
}

/* Keys k0..k0+nk-1 (nk <= CHUNK_KEYS) of the chunk's scores, every head:
 * per key the blocks' scaled dots summed from 0 as dot_with sums them (a
 * block of zero norm skipped), then times scale (as the per-key pass
 * does), straight into w. */
static void chunk_scores_part(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const float *q_rot, int G, int q_stride, int head_dim, float scale, float *w, int ldw) {
    const float *c = codebook_of(t);
    turbo_dot_heads_fn dot = g_formats[t].tcq ? kern->tcq_dot_heads[tcq_width(t)] : kern->scalar_dot_heads;
    float bs[CHUNK_KEYS];
    const uint8_t *codes[CHUNK_KEYS];
    for (int g = 0; g < G; g++)
        for (int i = 0; i < nk; i++) w[(size_t)g * ldw + i] = 0.0f;
    size_t at = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        const int d = block_dim_at(head_dim, off);
        block_scales(kern, rows, nk, at, d, bs, codes);
        dot(codes, nk, c, g_formats[t].bits, q_rot + off, G, q_stride, d, bs, w, ldw);
        at += kvq_turbo_block_bytes(t, d);
    }
    for (int g = 0; g < G; g++)
        kvq_scale_floats(w + (size_t)g * ldw, nk, scale);
}

/* The rows after a chunk of body rows, into the cache while this chunk is
 * read: the next chunk of the same head follows in memory (rows one
 * row_bytes apart), and its first touch otherwise stalls the kernels (each
 * row's norm is read before its codes).  Rows that are not consecutive
 * (ring, sink) prefetch nothing.  A prefetch never faults, so the lines
 * past the end of the body are harmless.  Measured at 16384 keys (8 KV
 * heads x 128, AVX-512, 1 thread): turbo4 1.45x, turbo3 1.35x, turbo3_tcq
 * 1.15x faster; two or three chunks ahead were no better.  Into L2, like
 * every decode prefetch (kvq_prefetch_once): these types are bound by
 * their kernels, and the hint (prefetcht0, prefetchnta, prefetcht1) moved
 * them by 0-10 %. */
static void prefetch_next(const uint8_t *const *rows, int nk, size_t row_bytes) {
    if (nk < 2 || !rows[0] || !rows[nk - 1] ||
        (uintptr_t)rows[nk - 1] - (uintptr_t)rows[0] != (size_t)(nk - 1) * row_bytes)
        return;
    const uintptr_t from = (uintptr_t)rows[nk - 1] + row_bytes, to = from + (size_t)nk * row_bytes;
    kvq_prefetch_once(from, to);
}

static void chunk_scores_with(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const float *q_rot, int G, int q_stride, int head_dim, float scale, float *w, int ldw) {
    if (!valid_type(t)) {
        for (int g = 0; g < G; g++)
            for (int i = 0; i < nk; i++) w[(size_t)g * ldw + i] = NAN;
        return;
    }
    prefetch_next(rows, nk, kvq_turbo_row_bytes(t, head_dim));
    for (int i = 0; i < nk; i += CHUNK_KEYS)
        chunk_scores_part(kern, t, rows + i, KVQ_MIN(CHUNK_KEYS, nk - i), q_rot, G, q_stride, head_dim, scale, w + i,
                          ldw);
}

void kvq_turbo_chunk_scores(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *q_rot,
                            int G, int q_stride, int head_dim, float scale, float *w, int ldw) {
    chunk_scores_with(turbo_level_kernels(isa), t, rows, nk, q_rot, G, q_stride, head_dim, scale, w, ldw);
}

/* ------------------------------------- scores of a rounded query (int8, int16) */

int kvq_turbo_blocks(int head_dim) {
    int n = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) n++;
    return n;
}

void kvq_turbo_round_query8(const float *q, int head_dim, int8_t *m, float *s) {
    int b = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off), b++) {
        const int d = block_dim_at(head_dim, off);
        int16_t levels[KVQ_TURBO_BLOCK];
        s[b] = kvq_round_levels(q + off, d, 127, levels);
        for (int i = 0; i < d; i++) m[off + i] = (int8_t)levels[i];
    }
}

void kvq_turbo_round_query16(const float *q, int head_dim, int16_t *m, float *s) {
    int b = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off), b++)
        s[b] = kvq_round_levels(q + off, block_dim_at(head_dim, off), KVQ_TURBO_QUERY16_TOP, m + off);
}

/* A rounded query's levels for kvq_turbo_chunk_scores8 / 16: the int8 or
 * the int16 ones (one of m8, m16), as floats too where the caller has
 * them (mf, else NULL), head g's at g * stride. */
typedef struct query_levels {
    const int8_t *m8;
    const int16_t *m16;
    const float *mf;
    int stride;
} query_levels;

/* The levels of heads h.. from value `at` on. */
static query_levels levels_at(const query_levels *ql, int h, int at) {
    const size_t i = (size_t)h * (size_t)ql->stride + (size_t)at;
    query_levels r = *ql;
    r.m8 = ql->m8 ? ql->m8 + i : NULL;
    r.m16 = ql->m16 ? ql->m16 + i : NULL;
    r.mf = ql->mf ? ql->mf + i : NULL;
    return r;
}

/* The dots of nh (<= HEADS8) heads' levels with one block of codes (the
 * turbo_dot_heads8_fn contract): the level's integer kernel for them, or
 * its float kernel on the levels as floats (exact, so the same sums; mf's,
 * or converted here), every head in one call, each block's codes decoded
 * once for all of them. */
enum { HEADS8 = 4 };
static void dot_levels(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *codes, int nk,
                       const query_levels *ql, int nh, int d, const float *bs, float *sum, int lds) {
    const int w = tcq_width(t);
    if (ql->m8 && kern->tcq_dot_heads8[w]) {
        kern->tcq_dot_heads8[w](codes, nk, ql->m8, nh, ql->stride, d, bs, sum, lds);
        return;
    }
    if (ql->m16 && kern->tcq_dot_heads16[w]) {
        kern->tcq_dot_heads16[w](codes, nk, ql->m16, nh, ql->stride, d, bs, sum, lds);
        return;
    }
    float qf[HEADS8 * KVQ_TURBO_BLOCK];
    if (!ql->mf)   /* d is 64 or 128: loops of fixed counts, which compilers vectorize */
        for (int g = 0; g < nh; g++)
            for (int i0 = 0; i0 < d; i0 += 64) {
                const size_t at = (size_t)g * ql->stride + i0;
                if (ql->m8) for (int i = 0; i < 64; i++) qf[g * d + i0 + i] = (float)ql->m8[at + i];
                else for (int i = 0; i < 64; i++) qf[g * d + i0 + i] = (float)ql->m16[at + i];
            }
    kern->tcq_dot_heads[w](codes, nk, codebook_of(t), g_formats[t].bits, ql->mf ? ql->mf : qf, nh,
                           ql->mf ? ql->stride : d, d, bs, sum, lds);
}

/* Keys k0..k0+nk-1 (nk <= CHUNK_KEYS) of a rounded query's scores, heads
 * h0..h0+nh-1 (nh <= HEADS8; ql and s at h0): w = sum_b c_b E_b, c_b =
 * s_b * scale, E_b = bs * D (dot_levels), the first block's term
 * written, not added to 0, so that a one-block row (head_dim <= 128)
 * costs the float query's passes: its dots straight into w, then one
 * multiply. */
static void chunk_levels_part(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const query_levels *ql, const float *s, int nh, int head_dim, float scale, float *w,
                              int ldw) {
    const int nb = kvq_turbo_blocks(head_dim);
    float bs[CHUNK_KEYS], E[HEADS8 * CHUNK_KEYS];
    const uint8_t *codes[CHUNK_KEYS];
    size_t at = 0;
    int b = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off), b++) {
        const int d = block_dim_at(head_dim, off);
        float *dst = b == 0 ? w : E;     /* block 0's dots go to w, scaled there */
        const int ld = b == 0 ? ldw : CHUNK_KEYS;
        block_scales(kern, rows, nk, at, d, bs, codes);
        for (int g = 0; g < nh; g++)
            for (int i = 0; i < nk; i++) dst[(size_t)g * ld + i] = 0.0f;
        const query_levels lb = levels_at(ql, 0, off);
        dot_levels(kern, t, codes, nk, &lb, nh, d, bs, dst, ld);
        for (int g = 0; g < nh; g++) {
            const float c = s[g * nb + b] * scale;
            float *wg = w + (size_t)g * ldw;
            if (b == 0) {
                kvq_scale_floats(wg, nk, c);
            } else {
                for (int i = 0; i < nk; i++) {
                    const float p = c * E[g * CHUNK_KEYS + i];
                    wg[i] += p;
                }
            }
        }
        at += kvq_turbo_block_bytes(t, d);
    }
}

static void chunk_levels_with(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const query_levels *ql, const float *s, int G, int head_dim, float scale, float *w,
                              int ldw) {
    if (!kvq_turbo_is_tcq(t)) {
        for (int g = 0; g < G; g++)
            for (int i = 0; i < nk; i++) w[(size_t)g * ldw + i] = NAN;
        return;
    }
    const int nb = kvq_turbo_blocks(head_dim);
    prefetch_next(rows, nk, kvq_turbo_row_bytes(t, head_dim));
    for (int i = 0; i < nk; i += CHUNK_KEYS)
        for (int g = 0; g < G; g += HEADS8) {
            const query_levels lg = levels_at(ql, g, 0);
            chunk_levels_part(kern, t, rows + i, KVQ_MIN(CHUNK_KEYS, nk - i), &lg, s + g * nb,
                              KVQ_MIN(HEADS8, G - g), head_dim, scale, w + (size_t)g * ldw + i, ldw);
        }
}

void kvq_turbo_chunk_scores8(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int8_t *m,
                             const float *mf, const float *s, int G, int m_stride, int head_dim, float scale, float *w,
                             int ldw) {
    const query_levels ql = { .m8 = m, .mf = mf, .stride = m_stride };
    chunk_levels_with(turbo_level_kernels(isa), t, rows, nk, &ql, s, G, head_dim, scale, w, ldw);
}

void kvq_turbo_chunk_scores16(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int16_t *m,
                              const float *mf, const float *s, int G, int m_stride, int head_dim, float scale,
                              float *w, int ldw) {
    const query_levels ql = { .m16 = m, .mf = mf, .stride = m_stride };
    chunk_levels_with(turbo_level_kernels(isa), t, rows, nk, &ql, s, G, head_dim, scale, w, ldw);
}

/* One head's CHUNK_KEYS V coefficients c of a trellis V rounded to int16
 * (turbo_kernels.tcq_axpy_keys16's rule): W = rint(c * (32767 /
 * max|c|)), ties to even; c replaced by S * W, S = max|c| / 32767.
 * False, c untouched, where a c is not finite or 32767 / max|c| is not
 * (max|c| below ~1e-34).  The loops run over all CHUNK_KEYS and reduce
 * in integers (the largest |c| by its bits: for non-negative floats
 * their order), so that the compiler keeps them in vectors. */
static bool round_coefs(float *c) {
    uint32_t top = 0;
    int bad = 0;
    for (int i = 0; i < CHUNK_KEYS; i++) {
        uint32_t b;
        memcpy(&b, &c[i], sizeof b);
        b &= 0x7FFFFFFFu;
        top = b > top ? b : top;
        bad |= b >= 0x7F800000u;        /* inf or NaN */
    }
    float cmax;
    memcpy(&cmax, &top, sizeof cmax);
    const float f = cmax > 0.0f ? 32767.0f / cmax : 0.0f, S = cmax / 32767.0f;
    if (bad || !isfinite(f)) return false;
    for (int i = 0; i < CHUNK_KEYS; i++)   /* |c f| <= 32767: the magic rounds to nearest even */
        c[i] = S * ((c[i] * f + KVQ_ROUND_MAGIC) - KVQ_ROUND_MAGIC);
    return true;
}

/* One block's V sums of a trellis V, nk (<= CHUNK_KEYS) keys, at a level
 * without the integer kernel (tcq_axpy_keys16): its float kernel on the
 * coefficients c = w * bs rounded as that kernel rounds them
 * (round_coefs), S * W as a weight per key with block scale 1, which
 * differs from the integer sums by the float sums' rounding only, so
 * every level rounds alike.  A pass of heads with a coefficient not
 * finite keeps the float coefficients (as the integer kernel does): the
 * sums show it. */
static void tcq_values_rounded(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *codes, int nk,
                               const float *w, int ldw, const float *bs, int G, float *acc_rot, int acc_stride, int d) {
    enum { HEADS = 4 };            /* per pass (stack arrays) */
    const turbo_axpy_keys_fn axpy = kern->tcq_axpy_keys[tcq_width(t)];
    static const float ones[CHUNK_KEYS] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    /* the keys past nk with scale 0 (a NULL key's is 0: block_scales) */
    float bz[CHUNK_KEYS];
    memcpy(bz, bs, (size_t)nk * sizeof *bz);
    memset(bz + nk, 0, (size_t)(CHUNK_KEYS - nk) * sizeof *bz);
    for (int g0 = 0; g0 < G; g0 += HEADS) {
        const int ng = KVQ_MIN(HEADS, G - g0);
        float wf[HEADS * CHUNK_KEYS];
        bool rounded = true;
        for (int g = 0; g < ng && rounded; g++) {
            float *c = wf + g * CHUNK_KEYS;
            memcpy(c, w + (size_t)(g0 + g) * ldw, (size_t)nk * sizeof *c);
            memset(c + nk, 0, (size_t)(CHUNK_KEYS - nk) * sizeof *c);
            for (int i = 0; i < CHUNK_KEYS; i++) {     /* turbo_value_coef: 0 where either is 0 */
                const float p = c[i] * bz[i];
                uint32_t a, b, r;                      /* the test on the bits: no float compare */
                memcpy(&a, &c[i], sizeof a);
                memcpy(&b, &bz[i], sizeof b);
                memcpy(&r, &p, sizeof r);
                r &= 0u - (uint32_t)(((a & 0x7FFFFFFFu) != 0) & ((b & 0x7FFFFFFFu) != 0));
                memcpy(&c[i], &r, sizeof r);
            }
            rounded = round_coefs(c);
        }
        float *acc = acc_rot + (size_t)g0 * acc_stride;
        if (rounded)
            axpy(codes, nk, codebook_of(t), g_formats[t].bits, wf, CHUNK_KEYS, ones, ng, acc, acc_stride, d);
        else
            axpy(codes, nk, codebook_of(t), g_formats[t].bits, w + (size_t)g0 * ldw, ldw, bs, ng, acc, acc_stride, d);
    }
}

/* Keys k0..k0+nk-1 (nk <= CHUNK_KEYS), every head: per block the weights
 * times the key's block scale (0 where the weight or the scale is 0: such
 * a key and head add nothing, as in axpy_with), applied by the kernel; a
 * trellis V's rounded to int16 (tcq_axpy_keys16, or tcq_values_rounded). */
static void chunk_values_part(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const float *w, int ldw, int G, float *acc_rot, int acc_stride, int head_dim) {
    const float *c = codebook_of(t);
    turbo_axpy_keys_fn axpy = g_formats[t].tcq ? kern->tcq_axpy_keys[tcq_width(t)] : kern->scalar_axpy_keys;
    float bs[CHUNK_KEYS];
    const uint8_t *codes[CHUNK_KEYS];
    size_t at = 0;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        const int d = block_dim_at(head_dim, off);
        block_scales(kern, rows, nk, at, d, bs, codes);
        if (!g_formats[t].tcq)
            axpy(codes, nk, c, g_formats[t].bits, w, ldw, bs, G, acc_rot + off, acc_stride, d);
        else if (kern->tcq_axpy_keys16[tcq_width(t)])
            kern->tcq_axpy_keys16[tcq_width(t)](codes, nk, c, g_formats[t].bits, w, ldw, bs, G, acc_rot + off,
                                                acc_stride, d);
        else
            tcq_values_rounded(kern, t, codes, nk, w, ldw, bs, G, acc_rot + off, acc_stride, d);
        at += kvq_turbo_block_bytes(t, d);
    }
}

static void chunk_values_with(const turbo_kernels *kern, kvq_turbo_type t, const uint8_t *const *rows, int nk,
                              const float *w, int ldw, int G, float *acc_rot, int acc_stride, int head_dim) {
    if (!valid_type(t)) return;
    prefetch_next(rows, nk, kvq_turbo_row_bytes(t, head_dim));
    for (int i = 0; i < nk; i += CHUNK_KEYS)
        chunk_values_part(kern, t, rows + i, KVQ_MIN(CHUNK_KEYS, nk - i), w + i, ldw, G, acc_rot, acc_stride,
                          head_dim);
}

void kvq_turbo_chunk_values(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *w,
                            int ldw, int G, float *acc_rot, int acc_stride, int head_dim) {
    chunk_values_with(turbo_level_kernels(isa), t, rows, nk, w, ldw, G, acc_rot, acc_stride, head_dim);
}

/* The scalar level's kernels with the look-up trellis kernels of
 * turbo_tcq64.inc, their scalar or VBMI instance; false where t is not a
 * trellis type or the CPU cannot run the instance. */
static bool tcq64_kernels(bool vbmi, kvq_turbo_type t, turbo_kernels *kern) {
    if (!valid_type(t) || !g_formats[t].tcq ||
        (vbmi && !(kvq_cpu_features()->avx512vbmi && kvq_cpu_features()->avx512vnni)))
        return false;
    *kern = g_scalar_kernels;
    if (vbmi) tcq64_install_vbmi(kern);
    else tcq64_install_scalar(kern);
    return true;
}

bool kvq_turbo_tcq64_scores(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *q_rot,
                            int G, int q_stride, int head_dim, float scale, float *w, int ldw) {
    turbo_kernels kern;
    if (!tcq64_kernels(vbmi, t, &kern)) return false;
    chunk_scores_with(&kern, t, rows, nk, q_rot, G, q_stride, head_dim, scale, w, ldw);
    return true;
}

bool kvq_turbo_tcq64_scores8(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int8_t *m,
                             const float *mf, const float *s, int G, int m_stride, int head_dim, float scale, float *w,
                             int ldw) {
    turbo_kernels kern;
    if (!tcq64_kernels(vbmi, t, &kern)) return false;
    const query_levels ql = { .m8 = m, .mf = mf, .stride = m_stride };
    chunk_levels_with(&kern, t, rows, nk, &ql, s, G, head_dim, scale, w, ldw);
    return true;
}

bool kvq_turbo_tcq64_scores16(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int16_t *m,
                              const float *mf, const float *s, int G, int m_stride, int head_dim, float scale,
                              float *w, int ldw) {
    turbo_kernels kern;
    if (!tcq64_kernels(vbmi, t, &kern)) return false;
    const query_levels ql = { .m16 = m, .mf = mf, .stride = m_stride };
    chunk_levels_with(&kern, t, rows, nk, &ql, s, G, head_dim, scale, w, ldw);
    return true;
}

bool kvq_turbo_tcq64_values(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *w,
                            int ldw, int G, float *acc_rot, int acc_stride, int head_dim) {
    turbo_kernels kern;
    if (!tcq64_kernels(vbmi, t, &kern)) return false;
    chunk_values_with(&kern, t, rows, nk, w, ldw, G, acc_rot, acc_stride, head_dim);
    return true;
}

/* Decoding is axpy with weight 1 into a zeroed rotated buffer, rotated back. */
kvq_status kvq_turbo_dequantize(kvq_turbo_type t, const void *src, float *y, int head_dim,
                                kvq_error *err) {
    kvq_status st = check_row(t, head_dim, err);
    if (st != KVQ_OK) return st;
    const uint8_t *blk = src;
    for (int off = 0; off < head_dim; off += block_dim_at(head_dim, off)) {
        int d = block_dim_at(head_dim, off);
        float v[KVQ_TURBO_BLOCK] = { 0 };
        float norm_prime = kvq_half_to_float(kvq_rd16(blk));
        if (norm_prime != 0.0f && isfinite(norm_prime)) {
            kvq_turbo_axpy_rot_scalar(t, 1.0f, blk, v, d);
            unrotate_block(v, d);
        } else {
            for (int i = 0; i < d; i++) v[i] = norm_prime;     /* NaN/Inf stay visible */
        }
        memcpy(y + off, v, (size_t)KVQ_MIN(d, head_dim - off) * sizeof *v);
        blk += kvq_turbo_block_bytes(t, d);
    }
    return KVQ_OK;
}
