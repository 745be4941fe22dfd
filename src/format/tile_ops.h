/*
 * tile_ops.h - the hooks of a tile format: the trait table's `tile` column
 * (include/kvq.h) for types with layout KVQ_LAYOUT_TILES.  The cache
 * (src/cache/cache.c, src/cache/attention.c) reaches a tile format only through these,
 * so adding a tile format is a trait row pointing at its hooks.  KVarN's
 * are in src/cache/cache_tiles.c.
 */
#ifndef KVQ_TILE_OPS_H
#define KVQ_TILE_OPS_H

#include "kvq_internal.h"

struct kvq_cache_side;

struct kvq_tile_ops {
    /* Fill a tile side's shape: stored width (head_dim padded to whole
     * slices), slices, record bytes, tile orientation. */
    void (*shape)(struct kvq_cache_side *sd, bool is_v);
    /* Floats of scratch one tile quantisation needs. */
    size_t (*scratch_floats)(const struct kvq_cache_side *sd);
    /* Quantise tile `tile` of KV head `head` from its exact rows (ring and
     * stage, kvq_cache_exact_row) into its records (called once, when the
     * tile's last token is written; heads run on any thread at once, each
     * with its own scratch, so it reads only that head's rows). */
    kvq_status (*quantize)(const kvq_cache *c, const struct kvq_cache_side *sd, int head, int tile, float *scratch,
                           kvq_error *err);
    /* Dequantised (rotated) row of position pos of a quantised tile. */
    void (*read_row)(const struct kvq_cache_side *sd, int head, int pos, float *out);
    /* Attention straight from the records, keys key0..key0+nk-1 of one tile
     * (nk <= ATTN_BLOCK_KEYS, one chunk of the attention loop):
     *   score: w[j*w_stride + t] = scale * q_j . k_t for the G query heads
     *          q_j = q + j*q_stride (rotated, stored width);
     *   accumulate: acc_j[d] += sum_t w[j*w_stride + t] v_t[d]. */
    void (*score)(const struct kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                  int q_stride, float scale, float *w, int w_stride);
    void (*accumulate)(const struct kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                       int w_stride, float *acc, int acc_stride);
};

extern const struct kvq_tile_ops kvq_kvarn_tile_ops;
/* Calibrated rows (src/cache_calib.c) use read_row, score and accumulate
 * only: their body is rows (layout KVQ_LAYOUT_ROWS), written one by one,
 * but each KV head's rows have that head's layout, which these hooks
 * know through the side (shape, scratch_floats and quantize are NULL). */
extern const struct kvq_tile_ops kvq_calib_row_ops;

#endif
