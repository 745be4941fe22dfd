/*
 * kvarn.h - KVarN tiles (Huawei, arXiv:2606.03458; docs/spec/formats.md §3).
 *
 * A tile holds 128 tokens of one KV head slice (width 128, or 64 for heads
 * of 64), already Hadamard-rotated by the caller.  It is normalised along
 * both axes in the log domain, then quantised per row of the oriented
 * matrix A with b-bit round-to-nearest:
 *   K: A = [channels x tokens]  -> one scale/zero per channel
 *   V: A = [tokens x channels]  -> one scale/zero per token
 * Record: payload[128*width*b/8], fp16 S[rows], Z[rows], O[cols] (rows and
 * cols of A), reconstruction x = (q*S_r + Z_r) * O_c.
 * The payload is stored token-major whatever the orientation (one token's
 * `width` codes contiguous, b-bit little-endian bit stream), because both
 * attention loops walk tokens: scores need one key token at a time, and the
 * V accumulation weights one token at a time.
 */
#ifndef KVQ_KVARN_H
#define KVQ_KVARN_H

#include "kvq_internal.h"

#define KVQ_KVARN_TILE 128         /* tokens per tile                   */
#define KVQ_KVARN_ITERS 16         /* default normalisation iterations  */
/* KVQ_KVARN_MAX_ITERS, the most a cache accepts: kvq.h */

typedef struct kvq_kvarn_shape {
    int width;       /* channels of the slice: 64 or 128              */
    int bits;        /* 2, 3, 4, 5, 6 or 8                            */
    bool is_key;     /* orientation: K per-channel, V per-token rows  */
} kvq_kvarn_shape;

/* Bytes of one record: 128*width*b/8 + 2*(2*rows + cols). */
size_t kvq_kvarn_record_bytes(kvq_kvarn_shape s);
bool kvq_kvarn_bits_valid(int bits);

/*
 * Two-axis log-domain variance normalisation of A (rows x cols, row-major),
 * `iters` iterations.  Writes the chosen scales (s_row = e^w, s_col = e^u)
 * of the iteration with the least imbalance (start: all ones).  If trace
 * is non-NULL it receives iters+1 imbalance values: trace[0] of A itself,
 * trace[i] after iteration i.  Returns the chosen imbalance (>= 0, NaN
 * for a tile with NaN values; -1 when out of memory: the scales are then
 * all ones).
 */
double kvq_kvarn_normalise(const float *A, int rows, int cols, int iters,
                           float *s_row, float *s_col, double *trace);

/* Lane kernels of the quantiser (src/format/kvarn_sigma.inc, built at
 * the scalar, AVX2 and AVX-512 widths; tests compare each with the
 * reference):
 *   sigmas: for each lane j < lanes the sample sigma of
 *           M[i*lanes + j] * mul[i] * k[j] over i < n (lanes a multiple of
 *           KVQ_KVARN_LANES);
 *   row_codes: one row of A (cols <= 128, a multiple of 16) normalised by
 *           sr * s_col[c] and rounded to codes q[c] in 0..qmax between its
 *           minimum (*lo) and maximum; returns the step delta. */
#define KVQ_KVARN_LANES 32
typedef struct kvq_kvarn_kernels {
    const char *name;
    void (*sigmas)(const float *M, int n, int lanes, const double *mul, const double *k, double *out);
    float (*row_codes)(const float *a, int cols, float sr, const float *s_col, int qmax, float *lo, int32_t *q);
} kvq_kvarn_kernels;
/* "scalar", "avx2", "avx512": NULL when the CPU lacks it (or the name is
 * unknown); _best: the widest this CPU runs (KVQ_FORCE_* obeyed), AVX2 on
 * cores that issue 512-bit operations as halves (kvq_cpu.avx512_halves). */
const kvq_kvarn_kernels *kvq_kvarn_kernels_level(const char *name);
const kvq_kvarn_kernels *kvq_kvarn_kernels_best(void);
void kvq_kvarn_sigmas_avx2(const float *M, int n, int lanes, const double *mul, const double *k, double *out);
void kvq_kvarn_sigmas_avx512(const float *M, int n, int lanes, const double *mul, const double *k, double *out);
float kvq_kvarn_row_codes_avx2(const float *a, int cols, float sr, const float *s_col, int qmax, float *lo, int32_t *q);
float kvq_kvarn_row_codes_avx512(const float *a, int cols, float sr, const float *s_col, int qmax, float *lo, int32_t *q);

/* kvq_kvarn_normalise on lanes: the same scales and imbalance bit for bit
 * (no trace), for rows and cols multiples of KVQ_KVARN_LANES.  AT: A's
 * transpose (cols x rows) where the caller has it, or NULL (made in work).
 * work: kvq_kvarn_normalise_work_floats(rows, cols) floats, 8-byte aligned. */
size_t kvq_kvarn_normalise_work_floats(int rows, int cols);
double kvq_kvarn_normalise_lanes(const float *A, const float *AT, int rows, int cols, int iters, float *s_row,
                                 float *s_col, float *work, const kvq_kvarn_kernels *k);

/* Imbalance of A / (s_row s_col): max/min column sigma + max/min row sigma. */
double kvq_kvarn_imbalance(const float *A, int rows, int cols, const float *s_row, const float *s_col);

/* Quantise a tile of 128 token rows x width (row-major, x[t*width + c])
 * into `record` (kvq_kvarn_record_bytes).  Deterministic.  scratch must
 * hold kvq_kvarn_scratch_floats(s) floats, 8-byte aligned (NULL:
 * allocated internally).  _ref is the scalar reference (kvq_kvarn_normalise,
 * one value at a time); kvq_kvarn_quantize writes the same bytes with the
 * best kernels this CPU runs, _with with the ones given. */
size_t kvq_kvarn_scratch_floats(kvq_kvarn_shape s);
kvq_status kvq_kvarn_quantize(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch);
kvq_status kvq_kvarn_quantize_ref(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch);
kvq_status kvq_kvarn_quantize_with(kvq_kvarn_shape s, const float *x, int iters, uint8_t *record, float *scratch,
                                   const kvq_kvarn_kernels *k);
/* Reconstruct the tile: y[t*width + c]. */
void kvq_kvarn_dequantize(kvq_kvarn_shape s, const uint8_t *record, float *y);

/* Codes of tokens t0..t0+n-1 of a record: codes[i*width + ch]; and the
 * inverse, those codes (each < 2^bits) packed into the record's tokens. */
void kvq_kvarn_unpack(kvq_kvarn_shape s, const uint8_t *record, int t0, int n, uint8_t *codes);
void kvq_kvarn_pack(kvq_kvarn_shape s, const uint8_t *codes, int t0, int n, uint8_t *record);
/* The record's fp16 metadata: S[rows], Z[rows], O[cols] of A (K: rows are
 * channels, cols tokens; V the reverse). */
typedef struct kvq_kvarn_meta { const uint8_t *S, *Z, *O; } kvq_kvarn_meta;
kvq_kvarn_meta kvq_kvarn_meta_of(kvq_kvarn_shape s, const uint8_t *record);

/* Attention straight from a record (no dequantised copy of the tile):
 * K: scores[t] += scale * q . k_t for t < n_tok;  V: out[c] += sum_t p[t] v_t[c]. */
void kvq_kvarn_scores(kvq_kvarn_shape s, const uint8_t *record, const float *q, float scale,
                      int n_tok, float *scores);
void kvq_kvarn_accumulate(kvq_kvarn_shape s, const uint8_t *record, const float *p, int n_tok, float *out);

#endif
