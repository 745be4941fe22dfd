/*
 * attn_ref.h - helpers of the cache and attention tests: random inputs,
 * and two references written plainly, in double:
 *   attn_ref_plain  the attention formula over the raw K/V written;
 *   attn_ref_cache  the same formula over the values the cache holds
 *                   (dequantised body, exact tail ring and sink chosen by
 *                   the rule of docs/spec/attention.md §3, in rotated space), so a
 *                   kernel is checked independently of quantisation error;
 *                   body rows of the 32-value block types are scored with
 *                   the query rounded to int8 per block, as the default
 *                   (chunked) pass's integer kernels score them
 *                   (attn_block.h).
 */
#ifndef KVQ_ATTN_REF_H
#define KVQ_ATTN_REF_H

#include "cache.h"
#include "test.h"

/* A cache's inputs: every token's K and V rows of one layer, and Q. */
typedef struct attn_data {
    int n_tok, n_head, n_head_kv, hd_k, hd_v;
    float *k, *v;   /* [n_tok][n_head_kv][hd]            */
    float *q;       /* [n_tok][n_head][hd_k]             */
} attn_data;

/* Gaussian K, V, Q (K with a few outlier channels, as real caches have). */
bool attn_data_make(attn_data *d, int n_tok, int n_head, int n_head_kv, int hd_k, int hd_v, uint64_t seed);
void attn_data_free(attn_data *d);

/* A synthetic calibration (every rate) for n_layer x n_head_kv heads of
 * hd_k / hd_v values: random non-orthogonal transforms T (T^-1 exact),
 * random means, descending importances.  Made once per shape and kept
 * for the process (the tests share it read-only). */
const kvq_calib *attn_test_calib(int n_layer, int n_head_kv, int hd_k, int hd_v);

/* Parameters with rotation fully explicit (environment ignored); a
 * calibrated type gets attn_test_calib's calibration. */
void attn_params(kvq_cache_params *p, int n_head_kv, int hd_k, int hd_v, int n_ctx, kvq_type tk,
                 kvq_type tv, kvq_rot_mode rot);

/* Write tokens [0, n_tok) in batches of `batch`; false on error. */
bool attn_fill(kvq_cache *c, const attn_data *d, int batch);
/* Write tokens [0, from) in batches of `batch`, then [from, n_tok) in one
 * write, so that queries from..n_tok-1 can be attended as that one batch
 * (a batch's attention comes before the next write; kvq.h). */
bool attn_fill_upto(kvq_cache *c, const attn_data *d, int batch, int from);

/* References for queries pos..pos+n-1: out [n][n_head][hd_v]. */
void attn_ref_plain(const attn_data *d, int pos, int n, float scale, float *out);
bool attn_ref_cache(const kvq_cache *c, const attn_data *d, int pos, int n, float scale, float *out);

/* A one-layer cache of d's shape (n_ctx 256, rotation auto) with K in
 * lanes and V in pairs where their types have those layouts and the
 * flags allow (cache_lanes.h), the given sink and tail; NULL on failure. */
kvq_cache *attn_layout_cache(kvq_type tk, kvq_type tv, bool k_lanes, bool v_pairs, int sink, int tail,
                             const attn_data *d);
/* Body rows of layer 0 (K or V side) of a and b at positions 0, step,
 * 2 step .. < n_pos of every KV head: -1 when each reads back (as
 * floats) the same in both, else h * n_pos + pos of the first that does
 * not (or fails to read). */
int attn_body_rows_differ(const kvq_cache *a, const kvq_cache *b, bool v, int n_pos, int step);
/* Rows pos .. pos + n - 1 of d's queries against layer 0 of c. */
bool attn_attend_rows(kvq_cache *c, const attn_data *d, int pos, int n, float *out);

/* max |a-b| / max |b| */
double attn_rel_err(const float *a, const float *b, size_t n);

/* Keys per call of type t's hooks in a decode chunk (their max_keys, or
 * ATTN_CHUNK_KEYS): the weights of V sums in pairs are rounded on one
 * scale per chunk, so their error grows with it. */
int attn_chunk_keys(kvq_type t);
/* The attn_rel_err allowed between the chunked pass and a float
 * reference with V of type tv in rows of head_dim_v: float rounding,
 * 1e-5; or, where the cache may keep such a V body in pairs
 * (cache_lanes.h; the head padded to whole blocks or not), the rounding
 * of its weights to int16 (attn_codes.inc
 * pairs_accumulate: at most 4 nk s per chunk of nk keys, s = max w max |d|
 * / 32767; 6-8e-5 of the largest output on these tests' random data),
 * 3e-4 per 32 keys of the type's chunk (attn_chunk_keys); 6e-4 for the
 * KVarN types, whose V records are kept in pairs too, in runs of 64
 * (cache_tiles_layout.h).  test_cache_pairs.c checks that kernel against
 * its exact bound.
 * A trellis K (tk) scored in decode with its query rounded to
 * KVQ_TURBO_QUERY16_TOP levels per block (attn_turbo.c; the reference
 * scores with the float query): a score moves by up to max|q_b| / 2046
 * per unit |k|, which reached 1.3e-3 of the outputs on these tests'
 * random data (near-uniform weights: small outputs), 3e-3.
 * test_turbo.c checks those scores against their exact bound. */
double attn_tolerance(kvq_type tk, kvq_type tv, int head_dim_v);
/* sum (a-b)^2 */
double attn_sq_err(const float *a, const float *b, size_t n);

#endif
