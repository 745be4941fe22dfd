/*
 * cache.h - internals of the KV cache (src/cache.c) shared with the
 * attention kernel (src/attention.c) and the tests.
 *
 * Layout (all memory allocated once, at creation, from n_ctx):
 *
 *   body  per layer and side: [n_head_kv][n_ctx][row_bytes]
 *         one head's row = head_dim values quantised in whole blocks of
 *         the layer's type, the last block zero-padded (padding counted);
 *   ring  per layer and side: [n_head_kv][ring_rows][exact_row_bytes]
 *         exact copies (tail_type) of recent positions, position p in slot
 *         p % ring_rows; ring_rows = min(tail_tokens + max_batch, n_ctx),
 *         so that a batch of max_batch new tokens never overwrites a row a
 *         query of the same batch still reads;
 *   sink  per layer and side: [n_head_kv][sink_rows][exact_row_bytes]
 *         exact copies of positions 0..sink_rows-1.
 *
 * Every row is stored rotated (when the plan says so); body, ring and sink
 * hold the same rotated values, so one rotated Q serves all three.
 */
#ifndef KVQ_CACHE_H
#define KVQ_CACHE_H

#include "kvq_internal.h"

/* Where a stored row lives (which copy). */
typedef enum kvq_cache_part { KVQ_PART_BODY = 0, KVQ_PART_RING, KVQ_PART_SINK } kvq_cache_part;

/* One side (K or V) of one layer. */
typedef struct kvq_cache_side {
    kvq_type type;          /* body type of this layer and side            */
    int head_dim;
    size_t row_bytes;       /* one head's body row (whole blocks)          */
    uint8_t *body;          /* [n_head_kv][n_ctx][row_bytes]               */
    uint8_t *ring;          /* [n_head_kv][ring_rows][exact_row_bytes]     */
    uint8_t *sink;          /* [n_head_kv][sink_rows][exact_row_bytes]     */
    size_t exact_row_bytes; /* one head's row in tail_type                 */
} kvq_cache_side;

struct kvq_cache {
    kvq_cache_params p;     /* copy; layer_type_* point into types_k/v     */
    kvq_type *types_k, *types_v;
    int ring_rows;          /* 0 when tail_tokens == 0                     */
    int sink_rows;          /* 0 when sink_tokens == 0                     */
    kvq_rot_plan plan;
    int8_t *signs_k, *signs_v; /* randomised Hadamard diagonals, or NULL   */
    kvq_cache_side *k, *v;  /* [n_layer]                                   */
    int *n_stored;          /* [n_layer]: positions 0..n_stored-1 written  */
    uint8_t *mem[4];        /* K bodies, V bodies, rings, sinks            */
    kvq_cache_bytes bytes;
};

/* Dequantise one stored row (rotated values, as the kernel reads them) of
 * one head into out[head_dim]; for tests and tools. */
kvq_status kvq_cache_read_row(const kvq_cache *c, int layer, bool is_v, kvq_cache_part part,
                              int head, int pos, float *out, kvq_error *err);

/* Attention with explicit kernels: `table` is a whole trait table
 * (indexed by kvq_type, e.g. one filled by kvq_simd_table) whose row
 * kernels are used, NULL for the active one (kvq_type_get); key_splits > 0
 * forces that many key ranges (merged by log-sum-exp), 0 lets the kernel
 * choose from the thread count. */
typedef struct kvq_attend_opts {
    const kvq_type_traits *table;
    int key_splits;
} kvq_attend_opts;

kvq_status kvq_cache_attend_opts(kvq_cache *c, int layer, int pos, int n, int n_head,
                                 const float *q, float scale, float *out, kvq_pool *pool,
                                 const kvq_attend_opts *opts, kvq_error *err);

/* Which key loop attention runs (src/attention.c). */
typedef enum kvq_attend_pass {
    KVQ_PASS_DEFAULT = 0,  /* chunked without a table; per key with one (its dot/axpy) */
    KVQ_PASS_PER_KEY,      /* the reference: the type's dot and axpy per key and head */
    KVQ_PASS_CHUNKED,      /* chunks of keys: the type's dequantize into f32 tiles, attn_block.h */
} kvq_attend_pass;

struct attn_block_kernels;

/* The key loop and, for the chunked one, its kernels (attn_block_level(),
 * NULL: the best the CPU runs); for tests and benches. */
typedef struct kvq_attend_loop {
    kvq_attend_pass pass;
    const struct attn_block_kernels *block;
} kvq_attend_loop;

/* kvq_cache_attend_opts with the key loop chosen (loop NULL: default). */
kvq_status kvq_cache_attend_loop(kvq_cache *c, int layer, int pos, int n, int n_head,
                                 const float *q, float scale, float *out, kvq_pool *pool,
                                 const kvq_attend_opts *opts, const kvq_attend_loop *loop,
                                 kvq_error *err);

#endif
