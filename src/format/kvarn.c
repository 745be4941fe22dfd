/*
 * kvarn.c - KVarN tile normalisation, quantisation and fused attention
 * helpers (docs/spec/formats.md §3; layout notes in kvarn.h).
 */
#include "kvarn.h"

#include <math.h>
#include <stdlib.h>

bool kvq_kvarn_bits_valid(int bits) { return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8; }

/* Rows and columns of the oriented matrix A. */
static int a_rows(kvq_kvarn_shape s) { return s.is_key ? s.width : KVQ_KVARN_TILE; }
static int a_cols(kvq_kvarn_shape s) { return s.is_key ? KVQ_KVARN_TILE : s.width; }
static size_t payload_bytes(kvq_kvarn_shape s) { return (size_t)KVQ_KVARN_TILE * s.width * s.bits / 8; }

size_t kvq_kvarn_record_bytes(kvq_kvarn_shape s) {
    return payload_bytes(s) + 2 * (size_t)(2 * a_rows(s) + a_cols(s));
}

/* ------------------------------------------------------- normalisation */

/* Sample standard deviation (n-1) of n values at stride, scaled per element
 * by a[i*stride] * mul[i] * k — all the normalisation loops are this. */
static double sigma_strided(const float *a, int n, int stride, const double *mul, double k) {
    double mean = 0.0;
    for (int i = 0; i < n; i++) mean += a[(size_t)i * stride] * mul[i] * k;
    mean /= n;
    double ss = 0.0;
    for (int i = 0; i < n; i++) {
        double d = a[(size_t)i * stride] * mul[i] * k - mean;
        ss += d * d;
    }
    return n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

/* Imbalance of M = A * inv_r[r] * inv_c[c]: max/min sigma over columns plus
 * the same over rows. */
static double imbalance_inv(const float *A, int rows, int cols, const double *inv_r, const double *inv_c) {
    double cmax = 0.0, cmin = INFINITY, rmax = 0.0, rmin = INFINITY;
    for (int c = 0; c < cols; c++) {
        double s = sigma_strided(A + c, rows, cols, inv_r, inv_c[c]);
        cmax = fmax(cmax, s);
        cmin = fmin(cmin, s);
    }
    for (int r = 0; r < rows; r++) {
        double s = sigma_strided(A + (size_t)r * cols, cols, 1, inv_c, inv_r[r]);
        rmax = fmax(rmax, s);
        rmin = fmin(rmin, s);
    }
    return cmax / fmax(cmin, 1e-8) + rmax / fmax(rmin, 1e-8);
}

/* One axis update: log-scale += ln(clamp(sigma)), then clamp the log-scale. */
static double update_log_scale(double logscale, double sigma) {
    logscale += log(fmin(fmax(sigma, 1e-3), 1e3));
    return fmin(fmax(logscale, -0.3), 10.0);
}

double kvq_kvarn_normalise(const float *A, int rows, int cols, int iters,
                           float *s_row, float *s_col, double *trace) {
    double *w = kvq_calloc((size_t)rows, sizeof *w), *u = kvq_calloc((size_t)cols, sizeof *u);
    double *inv_r = kvq_malloc_n((size_t)rows, sizeof *inv_r), *inv_c = kvq_malloc_n((size_t)cols, sizeof *inv_c);
    double *best_w = kvq_calloc((size_t)rows, sizeof *best_w), *best_u = kvq_calloc((size_t)cols, sizeof *best_u);
    double best = INFINITY;
    if (!w || !u || !inv_r || !inv_c || !best_w || !best_u) { best = -1.0; goto done; }   /* out of memory */

    for (int r = 0; r < rows; r++) inv_r[r] = 1.0;
    for (int c = 0; c < cols; c++) inv_c[c] = 1.0;
    best = imbalance_inv(A, rows, cols, inv_r, inv_c);
    if (trace) trace[0] = best;

    for (int it = 1; it <= iters; it++) {
        for (int c = 0; c < cols; c++) {     /* columns first, M with current scales */
            double sc = sigma_strided(A + c, rows, cols, inv_r, inv_c[c]);
            u[c] = update_log_scale(u[c], sc);
        }
        for (int c = 0; c < cols; c++) inv_c[c] = exp(-u[c]);
        for (int r = 0; r < rows; r++) {     /* then rows, M recomputed */
            double sr = sigma_strided(A + (size_t)r * cols, cols, 1, inv_c, inv_r[r]);
            w[r] = update_log_scale(w[r], sr);
        }
        for (int r = 0; r < rows; r++) inv_r[r] = exp(-w[r]);
        double imb = imbalance_inv(A, rows, cols, inv_r, inv_c);
        if (trace) trace[it] = imb;
        if (imb < best) {
            best = imb;
            memcpy(best_w, w, (size_t)rows * sizeof *w);
            memcpy(best_u, u, (size_t)cols * sizeof *u);
        }
    }
done:
    for (int r = 0; r < rows; r++) s_row[r] = best_w ? (float)exp(best_w[r]) : 1.0f;
    for (int c = 0; c < cols; c++) s_col[c] = best_u ? (float)exp(best_u[c]) : 1.0f;
    free(w); free(u); free(inv_r); free(inv_c); free(best_w); free(best_u);
    return best;
}

/* A rounded value's code, clamp(trunc(f), 0, qmax), as the SIMD levels
 * compute it (cvttps then integer clamps): NaN and values outside int32
 * convert to INT_MIN there, so code 0 (here without the undefined float
 * to int conversion; a NaN or infinite value in a tile gives them). */
static int code_of(float f, int qmax) {
    if (!(f > -2147483648.0f && f < 2147483648.0f)) return 0;
    const int q = (int)f;
    return q < 0 ? 0 : q > qmax ? qmax : q;
}

/* ------------------------------------------ normalisation on lanes */

#define VD double
#define VW 1
#define VD_LOADF(p) ((double)*(p))
#define VD_LOAD(p) (*(p))
#define VD_STORE(p, v) (*(p) = (v))
#define VD_SET1(x) (x)
#define VD_ADD(a, b) ((a) + (b))
#define VD_SUB(a, b) ((a) - (b))
#define VD_MUL(a, b) ((a) * (b))
#define VD_DIV(a, b) ((a) / (b))
#define VD_SQRT sqrt
#define VF float
#define VFW 1
#define VF_LOAD(p) (*(p))
#define VF_STORE(p, v) (*(p) = (v))
#define VF_SET1(x) (x)
#define VF_ADD(a, b) ((a) + (b))
#define VF_SUB(a, b) ((a) - (b))
#define VF_MUL(a, b) ((a) * (b))
#define VF_DIV(a, b) ((a) / (b))
#define VF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VF_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VF_FLOOR floorf
#define VF_CODES(p, v, qmax) (*(p) = code_of((v), (qmax)))
#define SIGMA_FN sigmas_scalar
#define ROWS_FN row_codes_scalar
#include "kvarn_sigma.inc"

static const kvq_kvarn_kernels g_scalar = { "scalar", sigmas_scalar, row_codes_scalar };
static const kvq_kvarn_kernels g_avx2 = { "avx2", kvq_kvarn_sigmas_avx2, kvq_kvarn_row_codes_avx2 };
static const kvq_kvarn_kernels g_avx512 = { "avx512", kvq_kvarn_sigmas_avx512, kvq_kvarn_row_codes_avx512 };

static const kvq_kvarn_kernels *const g_levels[KVQ_ISA_COUNT] = { &g_scalar, &g_avx2, &g_avx512 };

/* By name, for tests and benchmarks: NULL for a level this CPU lacks. */
const kvq_kvarn_kernels *kvq_kvarn_kernels_level(const char *name) {
    for (int i = 0; i < KVQ_ISA_COUNT; i++)
        if (!strcmp(name, g_levels[i]->name)) return i <= (int)kvq_isa_best() ? g_levels[i] : NULL;
    return NULL;
}

/* The level every kernel table uses (kvq_isa_best: decided once), but
 * AVX2's on a core that issues 512-bit operations as two halves
 * (kvq_cpu.avx512_halves, Zen 4), where the 8-lane sweeps took 0.85x the
 * 16-lane ones' time when this was chosen (7044a6f).  Since decfccf the
 * 16-lane sweeps alone take 0.8x the 8-lane time there, but a whole cache
 * write takes the same time either way (docs/performance.md, "Tried"),
 * so the choice stands.  Every level gives the same records. */
const kvq_kvarn_kernels *kvq_kvarn_kernels_best(void) {
    const kvq_isa isa = kvq_isa_best();
    if (isa == KVQ_ISA_AVX512 && kvq_cpu_features()->avx512_halves) return g_levels[KVQ_ISA_AVX2];
    return g_levels[isa];
}

/* fmax / fmin written out: equal to them on these operands (never NaN
 * in the first, never -0 anywhere: sigmas are sqrt of sums from +0, log
 * scales start at +0), without a library call each. */
static double max_of(double a, double b) { return b > a ? b : a; }
static double min_of(double a, double b) { return b < a ? b : a; }

/* The reference's imbalance from its sigmas. */
static double imbalance_of(const double *sc, int cols, const double *sr, int rows) {
    double cmax = 0.0, cmin = INFINITY, rmax = 0.0, rmin = INFINITY;
    for (int c = 0; c < cols; c++) { cmax = max_of(cmax, sc[c]); cmin = min_of(cmin, sc[c]); }
    for (int r = 0; r < rows; r++) { rmax = max_of(rmax, sr[r]); rmin = min_of(rmin, sr[r]); }
    return cmax / max_of(cmin, 1e-8) + rmax / max_of(rmin, 1e-8);
}

/* update_log_scale with max_of / min_of. */
static double next_log_scale(double logscale, double sigma) {
    logscale += log(min_of(max_of(1e-3, sigma), 1e3));
    return min_of(max_of(logscale, -0.3), 10.0);
}

size_t kvq_kvarn_normalise_work_floats(int rows, int cols) {
    return (size_t)rows * cols + 2 * (size_t)(4 * rows + 4 * cols);
}

/* The reference's iteration with its sweeps on lanes.  Column sigmas of A
 * are one sweep over A, row sigmas one over its transpose.  The reference
 * computes the column sigmas of iteration i+1's update with the same
 * scales as iteration i's imbalance, so they are computed once here:
 * three sweeps per iteration instead of four, same numbers. */
double kvq_kvarn_normalise_lanes(const float *A, const float *AT, int rows, int cols, int iters, float *s_row,
                                 float *s_col, float *work, const kvq_kvarn_kernels *k) {
    void (*sig)(const float *, int, int, const double *, const double *, double *) = k->sigmas;
    double *w = (double *)(work + (size_t)rows * cols), *u = w + rows, *inv_r = u + cols, *inv_c = inv_r + rows;
    double *best_w = inv_c + cols, *best_u = best_w + rows, *sc = best_u + cols, *sr = sc + cols;
    if (!AT) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) work[(size_t)c * rows + r] = A[(size_t)r * cols + c];
        AT = work;
    }
    for (int r = 0; r < rows; r++) { w[r] = best_w[r] = 0.0; inv_r[r] = 1.0; }
    for (int c = 0; c < cols; c++) { u[c] = best_u[c] = 0.0; inv_c[c] = 1.0; }
    sig(A, rows, cols, inv_r, inv_c, sc);
    sig(AT, cols, rows, inv_c, inv_r, sr);
    double best = imbalance_of(sc, cols, sr, rows);
    for (int it = 1; it <= iters; it++) {
        for (int c = 0; c < cols; c++) u[c] = next_log_scale(u[c], sc[c]);
        for (int c = 0; c < cols; c++) inv_c[c] = exp(-u[c]);
        sig(AT, cols, rows, inv_c, inv_r, sr);
        for (int r = 0; r < rows; r++) w[r] = next_log_scale(w[r], sr[r]);
        for (int r = 0; r < rows; r++) inv_r[r] = exp(-w[r]);
        sig(A, rows, cols, inv_r, inv_c, sc);
        sig(AT, cols, rows, inv_c, inv_r, sr);
        const double imb = imbalance_of(sc, cols, sr, rows);
        if (imb < best) {
            best = imb;
            memcpy(best_w, w, (size_t)rows * sizeof *w);
            memcpy(best_u, u, (size_t)cols * sizeof *u);
        }
    }
    for (int r = 0; r < rows; r++) s_row[r] = (float)exp(best_w[r]);
    for (int c = 0; c < cols; c++) s_col[c] = (float)exp(best_u[c]);
    return best;
}

double kvq_kvarn_imbalance(const float *A, int rows, int cols, const float *s_row, const float *s_col) {
    double *inv_r = kvq_malloc_n((size_t)rows, sizeof *inv_r), *inv_c = kvq_malloc_n((size_t)cols, sizeof *inv_c);
    double v = INFINITY;
    if (inv_r && inv_c) {
        for (int r = 0; r < rows; r++) inv_r[r] = 1.0 / s_row[r];
        for (int c = 0; c < cols; c++) inv_c[c] = 1.0 / s_col[c];
        v = imbalance_inv(A, rows, cols, inv_r, inv_c);
    }
    free(inv_r); free(inv_c);
    return v;
}

/* ------------------------------------------------------------- packing */

/* Codes of one token: `width` b-bit values, little-endian bit stream. */
static void pack_token(const uint8_t *codes, int width, int bits, uint8_t *out) {
    memset(out, 0, (size_t)width * bits / 8);
    for (int i = 0, bit = 0; i < width; i++, bit += bits) {
        uint32_t v = (uint32_t)codes[i] << (bit & 7);
        for (int k = bit >> 3; v; k++, v >>= 8) out[k] |= (uint8_t)v;
    }
}

/* Eight b-bit codes occupy exactly b bytes: group g of a token is the
 * little-endian word of bytes g*b..g*b+b-1, value j at bits j*b. */
static void unpack_token(const uint8_t *in, int width, int bits, uint8_t *codes) {
    if (bits == 8) { memcpy(codes, in, (size_t)width); return; }
    const uint64_t mask = (1u << bits) - 1;
    for (int g = 0; g < width / 8; g++) {
        const uint8_t *p = in + g * bits;
        uint64_t word = 0;
        for (int k = 0; k < bits; k++) word |= (uint64_t)p[k] << (8 * k);
        for (int j = 0; j < 8; j++) codes[8 * g + j] = (uint8_t)((word >> (j * bits)) & mask);
    }
}

/* Widths are multiples of 8 (64 or 128), so a token is whole groups. */
void kvq_kvarn_unpack(kvq_kvarn_shape s, const uint8_t *record, int t0, int n, uint8_t *codes) {
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    for (int i = 0; i < n; i++)
        unpack_token(record + (size_t)(t0 + i) * tok_bytes, s.width, s.bits, codes + (size_t)i * s.width);
}

kvq_kvarn_meta kvq_kvarn_meta_of(kvq_kvarn_shape s, const uint8_t *record) {
    kvq_kvarn_meta m;
    m.S = record + payload_bytes(s);
    m.Z = m.S + 2 * a_rows(s);
    m.O = m.Z + 2 * a_rows(s);
    return m;
}

/* --------------------------------------------------------- quantisation */

size_t kvq_kvarn_scratch_floats(kvq_kvarn_shape s) {
    const size_t tile = (size_t)KVQ_KVARN_TILE * s.width;
    /* A, s_row, s_col, the normalisation's work, the codes (bytes) */
    return tile + (size_t)a_rows(s) + (size_t)a_cols(s) + kvq_kvarn_normalise_work_floats(a_rows(s), a_cols(s)) +
           tile / sizeof(float);
}

/* Codes of one token packed a group of 8 at a time: group g is the
 * little-endian word of bytes g*b..g*b+b-1 (the stream pack_token writes). */
static void pack_token_groups(const uint8_t *codes, int width, int bits, uint8_t *out) {
    if (bits == 8) { memcpy(out, codes, (size_t)width); return; }
    for (int g = 0; g < width / 8; g++, codes += 8, out += bits) {
        uint64_t word = 0;
        for (int j = 0; j < 8; j++) word |= (uint64_t)codes[j] << (j * bits);
        for (int k = 0; k < bits; k++) out[k] = (uint8_t)(word >> (8 * k));
    }
}

void kvq_kvarn_pack(kvq_kvarn_shape s, const uint8_t *codes, int t0, int n, uint8_t *record) {
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    for (int i = 0; i < n; i++)
        pack_token_groups(codes + (size_t)i * s.width, s.width, s.bits, record + (size_t)(t0 + i) * tok_bytes);
}

/* Row r of A quantised b-bit round-to-nearest between its minimum and
 * maximum after normalisation; codes in token-major order.  k NULL: the
 * reference, one value at a time; else its row_codes kernel (same bytes). */
static void quantize_rows(kvq_kvarn_shape s, const float *A, const float *s_row, const float *s_col,
                          uint8_t *record, uint8_t *tok_codes, const kvq_kvarn_kernels *k) {
    const int rows = a_rows(s), cols = a_cols(s), qmax = (1 << s.bits) - 1;
    uint8_t *S = record + payload_bytes(s), *Z = S + 2 * rows, *O = Z + 2 * rows;
    const bool lanes = k && cols % 16 == 0 && cols <= 128;
    for (int r = 0; r < rows; r++) {
        float lo = INFINITY, hi = -INFINITY, delta;
        if (lanes) {
            int32_t q[128];
            delta = k->row_codes(A + (size_t)r * cols, cols, s_row[r], s_col, qmax, &lo, q);
            if (s.is_key) for (int c = 0; c < cols; c++) tok_codes[(size_t)c * s.width + r] = (uint8_t)q[c];
            else for (int c = 0; c < cols; c++) tok_codes[(size_t)r * s.width + c] = (uint8_t)q[c];
        } else {
            for (int c = 0; c < cols; c++) {
                float b = A[(size_t)r * cols + c] / (s_row[r] * s_col[c]);
                lo = b < lo ? b : lo;      /* NaN skipped */
                hi = b > hi ? b : hi;
            }
            lo += 0.0f;                    /* a zero extreme is +0, whichever zero came first */
            hi += 0.0f;
            delta = fmaxf((hi - lo) / (float)qmax, 1e-10f);
            for (int c = 0; c < cols; c++) {
                float b = A[(size_t)r * cols + c] / (s_row[r] * s_col[c]);
                const int q = code_of(floorf((b - lo) / delta + 0.5f), qmax);
                int t = s.is_key ? c : r, ch = s.is_key ? r : c;
                tok_codes[(size_t)t * s.width + ch] = (uint8_t)q;
            }
        }
        kvq_wr16(S + 2 * r, kvq_float_to_half(s_row[r] * delta));
        kvq_wr16(Z + 2 * r, kvq_float_to_half(s_row[r] * lo));
    }
    for (int c = 0; c < cols; c++) kvq_wr16(O + 2 * c, kvq_float_to_half(s_col[c]));
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    for (int t = 0; t < KVQ_KVARN_TILE; t++)
        (k ? pack_token_groups : pack_token)(tok_codes + (size_t)t * s.width, s.width, s.bits, record + t * tok_bytes);
}

/* k NULL: the reference normalisation and rounding. */
static kvq_status quantize_tile(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch,
                                const kvq_kvarn_kernels *k) {
    if (!kvq_kvarn_bits_valid(s.bits) || s.width <= 0 || s.width % 8) return KVQ_ERR_ARG;
    const int rows = a_rows(s), cols = a_cols(s);
    float *own = NULL;
    if (!scratch) {
        scratch = own = kvq_malloc_n(kvq_kvarn_scratch_floats(s), sizeof(float));
        if (!own) return KVQ_ERR_NOMEM;
    }
    float *A = scratch, *s_row = A + (size_t)rows * cols, *s_col = s_row + rows, *work = s_col + cols;
    uint8_t *tok_codes = (uint8_t *)(work + kvq_kvarn_normalise_work_floats(rows, cols));
    for (int t = 0; t < KVQ_KVARN_TILE; t++)     /* orient: K is channels x tokens */
        for (int c = 0; c < s.width; c++) {
            float v = x[(size_t)t * s.width + c];
            if (s.is_key) A[(size_t)c * cols + t] = v; else A[(size_t)t * cols + c] = v;
        }
    /* K's A is x transposed, so x is A's transpose: no second transpose */
    if (k && rows % KVQ_KVARN_LANES == 0 && cols % KVQ_KVARN_LANES == 0)
        kvq_kvarn_normalise_lanes(A, s.is_key ? x : NULL, rows, cols, iters, s_row, s_col, work, k);
    else if (kvq_kvarn_normalise(A, rows, cols, iters, s_row, s_col, NULL) < 0.0) {   /* out of memory */
        free(own);
        return KVQ_ERR_NOMEM;
    }
    quantize_rows(s, A, s_row, s_col, record, tok_codes, k);
    free(own);
    return KVQ_OK;
}

kvq_status kvq_kvarn_quantize_ref(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch) {
    return quantize_tile(s, x, iters, record, scratch, NULL);
}

kvq_status kvq_kvarn_quantize_with(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch,
                                   const kvq_kvarn_kernels *k) {
    return quantize_tile(s, x, iters, record, scratch, k);
}

kvq_status kvq_kvarn_quantize(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch) {
    return quantize_tile(s, x, iters, record, scratch, kvq_kvarn_kernels_best());
}

/* fp16 metadata of a record, decoded once. */
typedef struct tile_meta { float S[KVQ_KVARN_TILE], Z[KVQ_KVARN_TILE], O[KVQ_KVARN_TILE]; } tile_meta;

static void read_meta(kvq_kvarn_shape s, const uint8_t *record, tile_meta *m) {
    const int rows = a_rows(s), cols = a_cols(s);
    const uint8_t *S = record + payload_bytes(s), *Z = S + 2 * rows, *O = Z + 2 * rows;
    for (int r = 0; r < rows; r++) {
        m->S[r] = kvq_half_to_float(kvq_rd16(S + 2 * r));
        m->Z[r] = kvq_half_to_float(kvq_rd16(Z + 2 * r));
    }
    for (int c = 0; c < cols; c++) m->O[c] = kvq_half_to_float(kvq_rd16(O + 2 * c));
}

void kvq_kvarn_dequantize(kvq_kvarn_shape s, const uint8_t *record, float *y) {
    tile_meta m;
    read_meta(s, record, &m);
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    uint8_t codes[KVQ_KVARN_TILE];
    for (int t = 0; t < KVQ_KVARN_TILE; t++) {
        unpack_token(record + t * tok_bytes, s.width, s.bits, codes);
        for (int ch = 0; ch < s.width; ch++) {
            int r = s.is_key ? ch : t, c = s.is_key ? t : ch;
            y[(size_t)t * s.width + ch] = ((float)codes[ch] * m.S[r] + m.Z[r]) * m.O[c];
        }
    }
}

/* K: score_t = scale * O_t * (sum_ch (q_ch S_ch) code + sum_ch q_ch Z_ch). */
void kvq_kvarn_scores(kvq_kvarn_shape s, const uint8_t *record, const float *q, float scale,
                      int n_tok, float *scores) {
    tile_meta m;
    read_meta(s, record, &m);
    float qs[KVQ_KVARN_TILE];
    float qz = 0.0f;
    for (int ch = 0; ch < s.width; ch++) { qs[ch] = q[ch] * m.S[ch]; qz += q[ch] * m.Z[ch]; }
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    uint8_t codes[KVQ_KVARN_TILE];
    for (int t = 0; t < n_tok; t++) {
        unpack_token(record + t * tok_bytes, s.width, s.bits, codes);
        float acc = qz;
        for (int ch = 0; ch < s.width; ch++) acc += qs[ch] * (float)codes[ch];
        scores[t] += scale * m.O[t] * acc;
    }
}

/* V: out_ch += O_ch * (sum_t (p_t S_t) code + sum_t p_t Z_t). */
void kvq_kvarn_accumulate(kvq_kvarn_shape s, const uint8_t *record, const float *p, int n_tok, float *out) {
    tile_meta m;
    read_meta(s, record, &m);
    float acc[KVQ_KVARN_TILE] = {0};
    float pz = 0.0f;
    const size_t tok_bytes = (size_t)s.width * s.bits / 8;
    uint8_t codes[KVQ_KVARN_TILE];
    for (int t = 0; t < n_tok; t++) {
        if (p[t] == 0.0f) continue;
        const float ps = p[t] * m.S[t];
        pz += p[t] * m.Z[t];
        unpack_token(record + t * tok_bytes, s.width, s.bits, codes);
        for (int ch = 0; ch < s.width; ch++) acc[ch] += ps * (float)codes[ch];
    }
    for (int ch = 0; ch < s.width; ch++) out[ch] += m.O[ch] * (acc[ch] + pz);
}
