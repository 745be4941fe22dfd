/*
 * turbo.h - TurboQuant vector formats (docs/spec/formats.md §4-5), a standalone
 * module: turbo2/3/4 (rotation + per-coordinate Lloyd-Max quantiser, the
 * MSE variant of arXiv:2504.19874) and turbo2/3/4_tcq (the same rotation
 * and norm, coordinates coded jointly by a bit-shift trellis).
 *
 * A row is one head's vector of head_dim values.  It is cut into blocks:
 * full 128-value slices, then a remainder r (if any) that takes a 64-block
 * when r <= 64 and a 128-block otherwise; the missing values of the last
 * block are zeros (counted in the size).  Heads of 64, 128, 256 therefore
 * use exactly one 64-block, one 128-block, two 128-blocks.
 *
 * Every block, all six types (layout is kvq's own, sizes are the spec's):
 *   bytes 0-1  fp16 norm' = ||x|| / ||c_hat||, where c_hat is the vector
 *              of chosen reconstruction values at N(0, 1/d) scale, so that
 *              the decoded block has exactly the input's norm (up to fp16)
 *   bytes 2-   code bit stream, LSB first:
 *              scalar: value i's b-bit index at bit i*b;
 *              trellis: 6 initial-state bits, then value t's k-bit output
 *              o_t at bit 6 + t*k; state s_t is the L = 6+k bit window of
 *              the stream starting at bit t*k; zero padding to the size.
 *   turbo2 34, turbo3 50, turbo4 66 bytes per 128 (18/26/34 per 64);
 *   turbo2_tcq 36, turbo3_tcq 52, turbo4_tcq 68 per 128 (20/28/36 per 64).
 *
 * Rotation (per block of d values): y = S2 * H * S1 * u with H the
 * normalised Sylvester Hadamard (kvq_fwht) and S1, S2 the +-1 diagonals
 * kvq_random_signs(d, KVQ_TURBO_SEED_S1 / _S2).  Attention works in the
 * rotated domain: rotate the query once (kvq_turbo_rotate_query), take
 * kvq_turbo_dot_rot against every key row, accumulate value rows with
 * kvq_turbo_axpy_rot into a rotated accumulator, rotate it back once
 * (kvq_turbo_unrotate).  No per-key rotation.
 *
 * The kernels pick AVX2 or AVX-512 at run time (kvq_isa_best); the *_scalar
 * entry points are the reference the tests compare against.
 */
#ifndef KVQ_TURBO_H
#define KVQ_TURBO_H

#include "kvq.h"
#include "kvq_eval.h"
#include "kvq_internal.h"  /* kvq_isa */   /* the public calls of turbo-train and turbo-bench */

typedef enum kvq_turbo_type {
    KVQ_TURBO2 = 0,
    KVQ_TURBO3,
    KVQ_TURBO4,
    KVQ_TURBO2_TCQ,
    KVQ_TURBO3_TCQ,
    KVQ_TURBO4_TCQ,
    KVQ_TURBO_COUNT
} kvq_turbo_type;

#define KVQ_TURBO_BLOCK 128          /* the regular block width           */
#define KVQ_TURBO_SMALL_BLOCK 64     /* heads of 64 and short remainders  */
/* KVQ_TURBO_TCQ_CONTEXT, the state bits carried between steps: kvq_eval.h */

/* Seeds of the sign diagonals S1 (before H) and S2 (after H).  Fixed: the
 * stored codes of every cache depend on them. ("turboS1\0", "turboS2\0") */
#define KVQ_TURBO_SEED_S1 0x0031536F62727574ULL
#define KVQ_TURBO_SEED_S2 0x0032536F62727574ULL

const char *kvq_turbo_name(kvq_turbo_type t);
/* KVQ_TURBO_COUNT when the name is unknown. */
kvq_turbo_type kvq_turbo_from_name(const char *name);
int  kvq_turbo_bits(kvq_turbo_type t);        /* b (scalar) or k (trellis) */
bool kvq_turbo_is_tcq(kvq_turbo_type t);

/* Padded length of a row's blocks (what q_rot / acc_rot hold): 64 for
 * head_dim <= 64, otherwise head_dim rounded up as described above;
 * 0 when head_dim < 1 or > 65536. */
int kvq_turbo_rot_dim(int head_dim);
/* Bytes of one block of d = 64 or 128 values (0 for other d). */
size_t kvq_turbo_block_bytes(kvq_turbo_type t, int d);
/* Bytes of one row of head_dim values; 0 when head_dim is unsupported. */
size_t kvq_turbo_row_bytes(kvq_turbo_type t, int head_dim);
/* Bits per value of a row, metadata and padding included. */
double kvq_turbo_bpv(kvq_turbo_type t, int head_dim);

/* Quantise / reconstruct one row.  Fails (KVQ_ERR_ARG) only for an unknown
 * type or unsupported head_dim.  NaN/Inf inputs give a NaN/Inf norm. */
kvq_status kvq_turbo_quantize(kvq_turbo_type t, const float *x, void *dst, int head_dim,
                              kvq_error *err);
kvq_status kvq_turbo_dequantize(kvq_turbo_type t, const void *src, float *y, int head_dim,
                                kvq_error *err);

/* Rotated-domain kernels.  q_rot / acc_rot hold kvq_turbo_rot_dim(head_dim)
 * floats; the caller validated head_dim once (row_bytes != 0); an unknown
 * type gives NaN (dot) or does nothing (axpy).
 *   rotate_query: q_rot = R q (zero-padded q, per block)
 *   dot_rot:      returns q . x_hat  (= q_rot . R x_hat)
 *   axpy_rot:     acc_rot += w * R x_hat
 *   unrotate:     out = first head_dim values of R^T acc_rot */
void  kvq_turbo_rotate_query(const float *q, float *q_rot, int head_dim);
float kvq_turbo_dot_rot(kvq_turbo_type t, const void *row, const float *q_rot, int head_dim);
void  kvq_turbo_axpy_rot(kvq_turbo_type t, float w, const void *row, float *acc_rot, int head_dim);
void  kvq_turbo_unrotate(const float *acc_rot, float *out, int head_dim);

/* Attention over a chunk of nk rows of type t (the cache's row hooks),
 * with the kernels of level isa (scalar, AVX2, AVX-512; a level above
 * kvq_isa_best runs the best), each
 * block's codes decoded once for all G heads, no f32 row per key:
 *   chunk_scores: w[g*ldw + i] = scale * (row i . q_rot[g*q_stride ..]),
 *                 each score the ops of kvq_turbo_dot_rot at that level;
 *   chunk_values: acc_rot[g*acc_stride ..] += w[g*ldw + i] * R x_hat_i,
 *                 keys added in order i, a NULL row or a weight of 0 (or a
 *                 zero norm) adding nothing (as kvq_turbo_axpy_rot per key
 *                 and head, skipping zero weights, would).  The scalar
 *                 codes' sums are that per-key loop's bits.  A trellis
 *                 V's coefficients (w times each block's scale) are first
 *                 rounded to int16 per head, block and 32 keys of the
 *                 chunk on one scale S = max |coefficient| / 32767, every
 *                 level alike (AVX-512 with VBMI and VNNI then sums the
 *                 codes' bytes in integers; docs/turbo.md "V sums on
 *                 integer weights"): an output is off the per-key loop by
 *                 at most (S / 2) sum_i |codebook values| per 32 keys and
 *                 block, plus the float sums' rounding; where a
 *                 coefficient is not finite the float weights are kept
 *                 (the sums show it). */
void kvq_turbo_chunk_scores(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *q_rot,
                            int G, int q_stride, int head_dim, float scale, float *w, int ldw);
void kvq_turbo_chunk_values(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *w,
                            int ldw, int G, float *acc_rot, int acc_stride, int head_dim);

/* The rounded query of a trellis K (kvq_turbo_is_tcq: the trellis
 * types, whose codebook values are bytes n times 2^-5; not the scalar
 * codebooks): by default a decode's scores use int16 levels of 1023
 * steps, with kvq_attend_opts.int8_query int8 ones (attn_turbo.c):
 *   round_query8:  each block b of the rotated row (kvq_turbo_blocks of
 *                  them, 128 or 64 values) to int8 levels: s[b] =
 *                  max|q_b| / 127 (0 for a zero block, NaN for one holding
 *                  NaN or inf), m = round(q / s[b]) (halves away from 0),
 *                  |m| <= 127;
 *   round_query16: the same with KVQ_TURBO_QUERY16_TOP for 127, in int16:
 *                  the largest top for which every dot below stays exact
 *                  in a float (|sum n m| < 128 * 128 * 1024 = 2^24);
 *   chunk_scores8, chunk_scores16:
 *                  w[g*ldw + i] = sum_b (s[g*nb + b] * scale) * (bs_ib *
 *                  (codes_ib . m_g)), nb blocks in order, bs_ib block b's
 *                  scale (a block of zero norm gives 0 times the factor),
 *                  m_g at m + g*m_stride; mf, if not NULL, the same
 *                  levels as floats at the same places (what the levels
 *                  without an integer kernel multiply: given once per
 *                  run, they are not converted per call).
 *                  The dot is an integer times 2^-5, exact: every level
 *                  gives the same bits (AVX-512 with VBMI and VNNI by byte
 *                  look-ups and vpdpbusd / vpdpwssd, the others by their
 *                  float kernels on the levels).  The error against the
 *                  float query: at most sum_b bs_ib (s_b / 2) sum
 *                  |codebook values| per score (s_b = max|q_b| / top). */
enum { KVQ_TURBO_QUERY16_TOP = 1023 };
int  kvq_turbo_blocks(int head_dim);
void kvq_turbo_round_query8(const float *q, int head_dim, int8_t *m, float *s);
void kvq_turbo_round_query16(const float *q, int head_dim, int16_t *m, float *s);
void kvq_turbo_chunk_scores8(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int8_t *m,
                             const float *mf, const float *s, int G, int m_stride, int head_dim, float scale, float *w,
                             int ldw);
void kvq_turbo_chunk_scores16(kvq_isa isa, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int16_t *m,
                              const float *mf, const float *s, int G, int m_stride, int head_dim, float scale,
                              float *w, int ldw);

/* The chunk kernels above with the trellis types' look-up kernels
 * (src/format/turbo_tcq64.inc: 64 values per table look-up, what the
 * AVX-512 level runs for turbo2_tcq and turbo3_tcq where the CPU has
 * VBMI): vbmi false runs their scalar instance (every machine, every
 * trellis type), true the VBMI one, which gives the same bits; false is
 * returned, and nothing done, for a type the instance does not read
 * (scalar codes; turbo4_tcq with VBMI) or where the CPU lacks VBMI. */
bool kvq_turbo_tcq64_scores(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *q_rot,
                            int G, int q_stride, int head_dim, float scale, float *w, int ldw);
bool kvq_turbo_tcq64_scores8(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int8_t *m,
                             const float *mf, const float *s, int G, int m_stride, int head_dim, float scale, float *w,
                             int ldw);
bool kvq_turbo_tcq64_scores16(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const int16_t *m,
                              const float *mf, const float *s, int G, int m_stride, int head_dim, float scale,
                              float *w, int ldw);
bool kvq_turbo_tcq64_values(bool vbmi, kvq_turbo_type t, const uint8_t *const *rows, int nk, const float *w,
                            int ldw, int G, float *acc_rot, int acc_stride, int head_dim);

/* The same kernels without SIMD (test oracle, KVQ_FORCE_SCALAR path). */
kvq_status kvq_turbo_quantize_scalar(kvq_turbo_type t, const float *x, void *dst, int head_dim,
                                     kvq_error *err);
/* n_rows rows of a trellis type (turboK_tcq) together: the bytes of
 * n_rows kvq_turbo_quantize calls, faster where the level has a search
 * for rows in pairs (turbo_viterbi16.inc: two rows' steps interleaved,
 * and each pair's walk back beside the next pair's search; AVX-512 on
 * Zen 4, k = 4: ~0.7x the time of one row at a time).  False, with
 * nothing written, for the other types, a bad head_dim, n_rows < 1, or a
 * level without that search (the caller then quantises one row at a
 * time). */
bool kvq_turbo_quantize_rows(kvq_turbo_type t, int n_rows, const float *const *x, void *const *dst, int head_dim);
/* The same from rotated rows (kvq_turbo_rot_dim(head_dim) values of R x,
 * as kvq_turbo_rotate_query makes them and the cache keeps them): no
 * transform back and forth; ||R x|| stands for ||x||, so a norm may differ
 * from kvq_turbo_quantize's in its last bits. */
kvq_status kvq_turbo_quantize_rot(kvq_turbo_type t, const float *x_rot, void *dst, int head_dim, kvq_error *err);
kvq_status kvq_turbo_quantize_rot_scalar(kvq_turbo_type t, const float *x_rot, void *dst, int head_dim,
                                         kvq_error *err);
bool kvq_turbo_quantize_rows_rot(kvq_turbo_type t, int n_rows, const float *const *x_rot, void *const *dst,
                                 int head_dim);
float kvq_turbo_dot_rot_scalar(kvq_turbo_type t, const void *row, const float *q_rot, int head_dim);
void  kvq_turbo_axpy_rot_scalar(kvq_turbo_type t, float w, const void *row, float *acc_rot,
                                int head_dim);
/* The row kernels of one level (what the chunk kernels of that level are
 * tested against; a level above kvq_isa_best runs the best). */
float kvq_turbo_dot_rot_at(kvq_isa isa, kvq_turbo_type t, const void *row, const float *q_rot, int head_dim);
void  kvq_turbo_axpy_rot_at(kvq_isa isa, kvq_turbo_type t, float w, const void *row, float *acc_rot, int head_dim);

/* Inner-product gain of the format on isotropic data: E[q.x_hat] =
 * gain * q.x.  The MSE-optimal codes shrink a vector towards zero
 * (E[c_hat . u] = ||c_hat||^2 = 1 - D for a Lloyd codebook of distortion
 * D); storing norm' = ||x||/||c_hat|| restores the length but not the
 * direction, leaving gain = cos(u, c_hat) ~ sqrt(1 - D) = 1 - NMSE/2:
 * 0.939 / 0.983 / 0.995 for turbo2/3/4.  Dividing scores by it removes the
 * bias in expectation (it is a softmax temperature, not a per-key error). */
double kvq_turbo_ip_gain(kvq_turbo_type t);

/* ---- codebooks ---- */

/* Lloyd-Max quantiser of N(0,1) with 2^bits levels (bits 1..8; turbo uses
 * 1..4, the calibrated types up to 8), computed
 * once (thread-safe): ascending centroids, and its mean squared error. */
const float *kvq_turbo_lloyd_centroids(int bits);
double kvq_turbo_lloyd_mse(int bits);
/* The committed trellis codebook of k = 2..4 bits: 2^(6+k) unit-variance
 * reconstruction values indexed by state. */
const float *kvq_turbo_tcq_codebook(int k);

/* Trellis encoding of d unit-variance targets x (d <= 128) with codebook
 * c of 2^(6+k) values: writes states s_0..s_{d-1} and returns their error
 * sum (x_t - c[s_t])^2.
 *   viterbi        the search the cache writes with: the Viterbi on 16-bit
 *                  integer costs (turbo_internal.h), at the best vector
 *                  level this CPU has; its path's error is within a
 *                  rounding bound of the least (0.02 % on average at k = 4)
 *   viterbi_scalar the same search in plain C: every level's oracle, the
 *                  same states bit for bit
 *   viterbi_exact  the float search: the states of least error (ties to
 *                  the first predecessor, tagged costs), the reference
 *                  the integer search is measured against
 *   greedy         each step's best branch alone (the scalar choice a
 *                  degenerate trellis would reduce to). */
double kvq_turbo_tcq_viterbi(int k, const float *c, const float *x, int d, uint16_t *states);
double kvq_turbo_tcq_viterbi_scalar(int k, const float *c, const float *x, int d, uint16_t *states);
double kvq_turbo_tcq_viterbi_exact(int k, const float *c, const float *x, int d, uint16_t *states);
double kvq_turbo_tcq_greedy(int k, const float *c, const float *x, int d, uint16_t *states);

/* Generalised Lloyd training of a trellis codebook (tools: kvq
 * turbo-train): n_vectors training vectors of d = 128 Gaussian values
 * scaled to norm sqrt(128) (the distribution of sqrt(d) * R u), drawn from
 * splitmix64(seed) + Box-Muller; the codebook starts as 2^L further N(0,1)
 * draws of the same stream, then `iters` rounds of {Viterbi-encode all
 * vectors, set every state's value to the mean of the targets it coded}.
 * mse[i] (optional, iters+1 entries) gets the per-value error before each
 * round and after the last. */
kvq_status kvq_turbo_tcq_train(int k, int n_vectors, int iters, uint64_t seed, float *codebook,
                               double *mse, kvq_error *err);

#endif
