/*
 * row_hooks.h - how the cache stores and attention reads one storage type:
 * the hooks of its row (src/format/format_row.h), installed once at
 * start-up by row_hooks.c.
 *
 * Attention (attention.c) calls a copy's hooks for every chunk of keys
 * and never asks which format it reads:
 *   score       w[g*ldw + t] = scale * (key t . q_g) for the chunk's nk
 *               keys and the G query heads of a GQA group;
 *   accumulate  acc_g += sum_t w[g*ldw + t] * value t;
 * both at the kernel level the caller chose (attn_block_kernels), so a
 * format's fused code runs at the same ISA level as the rest of the pass.
 * The chunk (attn_block_rows) gives row types their packed rows and
 * traits, record types (tiles, calibrated rows) their side, KV head and
 * first key (and rows NULL).
 *
 * Record types also store through their row: shape (stored width, record
 * bytes), the scratch a tile quantisation needs, quantise a completed
 * tile, read a row back.  For row types these are NULL: the cache writes
 * and reads rows with the traits' kernels.
 *
 * Types with no hooks of their own get the defaults built from decode
 * (attn_hooks_decode: rows unpacked with the traits' dequantize into an
 * f32 tile, scored and summed by the level's tile kernels).
 */
#ifndef KVQ_ROW_HOOKS_H
#define KVQ_ROW_HOOKS_H

#include "attn_block.h"

struct kvq_cache_side;

typedef struct kvq_row_hooks {
    const char *name;                 /* what reads the rows (tests, docs) */
    void (*score)(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows, int nk,
                  const attn_query *q, int G, float scale, float *w, int ldw);
    /* a key weighted 0 by every head is not read; a non-finite value is
     * added only where it is weighted (0 * inf would poison the sum) */
    void (*accumulate)(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows, int nk,
                       const float *w, int ldw, int G, float *acc, int acc_stride);
    /* scores of keys k->key0..+nk of a K body stored in lanes (k->lanes,
     * cache_lanes.h) read in place; false: not at this level or query
     * (the caller then unpacks the chunk's rows and calls score); NULL
     * for types without that layout */
    bool (*score_lanes)(const attn_block_kernels *kr, const attn_block_rows *k, int nk, const attn_query *q, int G,
                        float scale, float *w, int ldw);
    /* V sums of keys v->key0..+nk of a V body stored in pairs (v->lanes,
     * cache_lanes.h) read in place; false: not at this level, or a
     * weight or scale not finite (the caller then unpacks the rows and
     * calls accumulate); NULL for types without that layout */
    bool (*accumulate_lanes)(const attn_block_kernels *kr, const attn_block_rows *v, int nk, const float *w, int ldw,
                             int G, float *acc, int acc_stride);
    /* bytes of one KV head's rows per call in a decode step these hooks
     * run best with (0: as many keys as max_keys, whatever their bytes) */
    int chunk_bytes;
    /* the most keys one call takes (0: ATTN_CHUNK_KEYS; at most
     * ATTN_RUN_KEYS) */
    int max_keys;
    /* query vectors (rows x GQA heads) a prefill group should hold where
     * these hooks read a body: a chunk's rows are read once per group,
     * so types that unpack each chunk at a cost want more rows to share
     * it (0: the default, attention.c's GROUP_VECTORS) */
    int group_vectors;
    /* record types (else NULL / 0) */
    int run_keys;                     /* chunks of keys never cross a multiple of this (a tile) */
    void (*shape)(struct kvq_cache_side *sd, bool is_v);
    size_t (*scratch_floats)(const struct kvq_cache_side *sd);
    /* tile `tile` of KV head `head` from its exact rows, once, when its
     * last token is written; heads run on any thread at once, each with
     * its own scratch (scratch_floats), so it reads only that head's rows */
    kvq_status (*quantize)(const kvq_cache *c, const struct kvq_cache_side *sd, int head, int tile, float *scratch,
                           kvq_error *err);
    void (*read_row)(const struct kvq_cache_side *sd, int head, int pos, float *out);
} kvq_row_hooks;

/* The most keys one call of h takes: its max_keys (at most
 * ATTN_RUN_KEYS), or ATTN_CHUNK_KEYS where it names none. */
static inline int kvq_row_hooks_keys(const kvq_row_hooks *h) {
    return h->max_keys > 0 ? KVQ_MIN(h->max_keys, (int)ATTN_RUN_KEYS) : ATTN_CHUNK_KEYS;
}

/* The hooks of type t (installed on first use); NULL for a type that is
 * not a cache type. */
const kvq_row_hooks *kvq_row_hooks_of(kvq_type t);

/* The generic hooks, built from a table's kernels: decode (dequantize
 * into an f32 tile, the default) and the per-key reference (dot and axpy
 * per key and head, what the chunked kernels are tested against). */
extern const kvq_row_hooks attn_hooks_decode;
extern const kvq_row_hooks attn_hooks_per_key;

/* Registration: each file of hooks installs its types' rows (row_hooks.c
 * calls these once). */
void attn_block_register(void);
void kvq_kvarn_register(void);
void kvq_calib_register(void);
void kvq_turbo_register(void);

#endif
