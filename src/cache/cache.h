/*
 * cache.h - internals of the KV cache (src/cache/cache.c) shared with the
 * attention kernel (src/cache/attention.c), the hooks of the formats' rows
 * (row_hooks.h) and the tests.
 *
 * Layout (all memory allocated once, at creation, from n_ctx), per layer
 * and side (K, V), each side with its own type, layout and exact regions:
 *
 *   body  rows layout:  [n_head_kv][n_ctx][row_bytes]
 *         one head's row = head_dim values quantised in whole blocks of
 *         the layer's type, the last block zero-padded (padding counted);
 *         a K body of q4_0 holds the same bytes in groups of 16 keys side
 *         by side, n_ctx rounded up to whole groups (cache_lanes.h);
 *         tiles layout (KVarN): [n_head_kv][n_tiles][n_slices][record_bytes]
 *         one record per complete 128-token tile from first_tile on;
 *   ring  [n_head_kv][ring_rows][exact_row_bytes]
 *         persistent exact copies (tail_type) of recent positions, position
 *         p in slot p % ring_rows.  Rows: ring_rows = the tail N, exactly;
 *         tiles: the tail in whole tiles + the incomplete tile (< 128 rows).
 *   sink  [n_head_kv][sink_rows][exact_row_bytes]
 *         exact copies of positions 0..sink_rows-1 (tiles: whole tiles, the
 *         first tile by default).
 *   stage (one per cache, transient): exact copies of the rows of the last
 *         write call, [side][n_head_kv][max_batch][stage row bytes].  A
 *         batch's queries need exact rows the ring cannot hold at once (the
 *         first query's tail reaches back before the batch, the last one's
 *         covers the batch), so the batch's rows wait here and are copied
 *         into the layer's ring at the next write (any layer).  Attention
 *         on a batch must therefore come before the next write; it checks
 *         that and refuses otherwise (check_attend).
 *
 * Every stored row is rotated (when the plan or the format says so) and
 * has store_dim values (head_dim, or padded to the format's whole slices
 * or blocks: KVarN, TurboQuant); body, ring and sink hold the same rotated
 * values, so one rotated Q serves all three.
 */
#ifndef KVQ_CACHE_H
#define KVQ_CACHE_H

#include "kvq_internal.h"
#include "kvarn.h"
#include "row_hooks.h"

/* Where a stored row lives (which copy). */
typedef enum kvq_cache_part { KVQ_PART_BODY = 0, KVQ_PART_RING, KVQ_PART_SINK, KVQ_PART_STAGE, KVQ_PART_COUNT } kvq_cache_part;

/* One side (K or V) of one layer. */
typedef struct kvq_cache_side {
    kvq_type type;          /* body type of this layer and side            */
    const kvq_type_traits *body_tr, *tail_tr; /* active kernels of type and tail_type,
                               looked up once at creation for the write/read paths */
    kvq_layout layout;      /* rows of blocks or 128-token tiles           */
    const kvq_row_hooks *records; /* record types (tiles, calibrated rows):
                               the hooks of the row that store and read
                               the body; NULL for plain row types         */
    int head_dim;           /* values per head (the model's)               */
    int store_dim;          /* values per stored row (>= head_dim, padded) */
    kvq_format_rot rot_kind;/* NONE: the plan's Hadamard (rot_block, signs);
                               SLICE: Hadamard per tile slice; TURBO: S2 H S1 */
    int rot_block;          /* Hadamard block of this side, 0 = none       */
    const int8_t *rot_signs;/* randomised diagonal (generic plan) or NULL  */
    const int8_t *mix_signs;/* padded rows: H.D.H over the padded row, or NULL */
    /* body */
    size_t row_bytes;       /* rows: one head's body row; tiles: 0         */
    bool lanes;             /* rows stored in groups of 16 keys (cache_lanes.h):
                               K side by side (lanes), V two keys per lane
                               (pairs); rows go in and out through
                               kvq_cache_body_put / get                      */
    kvq_kvarn_shape tile;   /* tiles: slice width, bits, orientation       */
    bool tile_layout;       /* tiles: the records' codes in lanes (K) or
                               pairs (V) in memory, token-major in files
                               (cache_tiles_layout.h)                        */
    int n_slices;           /* tiles: store_dim / tile.width               */
    size_t record_bytes;    /* tiles: one slice's record                   */
    int first_tile;         /* tiles: first tile with a record             */
    int n_tiles;            /* tiles: records per head and slice           */
    uint8_t *body;
    size_t body_head_bytes; /* bytes per KV head in body                   */
    /* exact copies */
    int tail_tokens;        /* tiles: rounded up to whole tiles            */
    int ring_rows, sink_rows; /* 0 = no ring / no sink                     */
    size_t exact_row_bytes; /* one head's row of store_dim values in tail_type */
    int side_index;         /* 0 = K, 1 = V: its rows' place in the stage  */
    int ring_lo;            /* no ring row below this position is valid
                               (raised by commits and truncation)          */
    const struct kvq_calib_head *calib; /* calibrated sides: [n_head_kv]   */
                            /* each KV head's transform and row layout     */
    uint8_t *ring;          /* [n_head_kv][ring_rows][exact_row_bytes]     */
    uint8_t *sink;          /* [n_head_kv][sink_rows][exact_row_bytes]     */
} kvq_cache_side;

/* The exact rows of the last write call (see the layout above). */
typedef struct kvq_cache_stage {
    int layer;              /* layer they belong to; -1: none pending      */
    int pos, n;             /* positions pos..pos+n-1                      */
    int cap;                /* rows per KV head: min(max_batch, n_ctx)     */
    uint8_t *rows[2];       /* K, V: [n_head_kv][max_batch][row_bytes[s]]  */
    size_t row_bytes[2];    /* widest exact row of that side over layers   */
} kvq_cache_stage;

struct kvq_cache {
    kvq_cache_params p;     /* copy; layer_type_* point into types_k/v     */
    kvq_type *types_k, *types_v;
    kvq_rot_plan plan;
    int8_t *signs_k, *signs_v; /* randomised Hadamard diagonals, or NULL   */
    int8_t mix_signs[KVQ_MAX_HEAD_DIM]; /* D of the padded-row mixing H.D.H  */
    kvq_cache_side *k, *v;  /* [n_layer]                                   */
    int *n_stored;          /* [n_layer]: positions 0..n_stored-1 written  */
    uint8_t *mem[5];        /* K bodies, V bodies, rings, sinks, stage,    */
    void *mem_block[5];     /* each on a page (kvq_calloc_paged; freed)    */
    size_t mem_bytes[5];    /* their sizes                                 */
    kvq_cache_stage stage;
    float *tile_scratch;    /* tile quantisation, tile_scratch_floats per  */
    size_t tile_scratch_floats; /* thread of the widest write so far (NULL */
    int tile_scratch_threads;   /* without tile sides)                     */
    float *attend_scratch;  /* attention's working memory (kvq_cache_attend_scratch) */
    size_t attend_scratch_floats;
    kvq_cache_bytes bytes;
    struct kvq_calib_head *calib_heads; /* calibrated sides' heads (cache_calib.c) */
    float *calib_mem;       /* the transforms they copied                  */
    uint32_t calib_hash;    /* of calib_mem (0: no calibrated side)         */
};

/* Calibrated sides (src/cache_calib.c): copy each one's transforms and
 * row layouts from p.calib, once the layout is planned; one clear error
 * when a side's type needs a calibration the parameters lack, the
 * calibration does not fit the cache's shape, or lacks the side's rate. */
kvq_status kvq_cache_calib_bind(kvq_cache *c, kvq_error *err);
/* Bytes those copies take (counted in kvq_cache_bytes.allocated). */
size_t kvq_cache_calib_bytes(const kvq_cache *c);
/* A calibrated body's reads (behind the score and accumulate hooks of
 * its row, row_hooks.h): scalar, and fused AVX2 (call only where
 * kvq_isa_best() >= KVQ_ISA_AVX2); tests compare the two. */
void kvq_calib_score_scalar(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                            int q_stride, float scale, float *w, int w_stride);
void kvq_calib_accumulate_scalar(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                                 int w_stride, float *acc, int acc_stride);
void kvq_calib_score_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                          int q_stride, float scale, float *w, int w_stride);
void kvq_calib_accumulate_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                               int w_stride, float *acc, int acc_stride);

/* At least `floats` floats of working memory for one attention call, kept
 * by the cache and reused, so that decoding allocates only when a call
 * needs more than any before it (the first prefill, a longer context's key
 * splits).  NULL when out of memory.  Attention calls on one cache must
 * not overlap (they never do: writes to it do not either). */
float *kvq_cache_attend_scratch(kvq_cache *c, size_t floats);

/* Which copy the keys of a query at position qp are read from, for one
 * side: [0, sink_end) sink, [sink_end, ring_start) body, [ring_start,
 * stage_start) ring, [stage_start, qp] stage.  Rows: the first sink_rows
 * keys and the query's own last tail_tokens keys are exact.  Tiles: also
 * every key of a tile that is not complete within 0..qp, and the tail
 * counts whole complete tiles back from there (docs/kvarn.md).  Which keys
 * are exact is a function of (qp, key) only, so prefill reads exactly what
 * decode would; stage_pos (the first position of the pending batch of this
 * layer, INT_MAX when none) only says where those exact rows are kept. */
typedef struct kvq_key_split { int sink_end, ring_start, stage_start; } kvq_key_split;
kvq_key_split kvq_cache_side_split(const kvq_cache_side *sd, int qp, int stage_pos);
/* The first position of layer's pending batch in the stage, INT_MAX when
 * the stage holds another layer's rows or none. */
int kvq_cache_stage_pos(const kvq_cache *c, int layer);
/* The copy key `key` is read from by a query at qp (key <= qp); tests. */
kvq_cache_part kvq_cache_key_part(const kvq_cache *c, int layer, bool is_v, int qp, int key);
/* One head's exact row of position pos (stage or ring); the caller checks
 * that pos is still held (kvq_cache_exact_from). */
const uint8_t *kvq_cache_exact_row(const kvq_cache *c, const kvq_cache_side *sd, int head, int pos);
/* The oldest position from which every exact row of layer up to the last
 * stored one is still held (ring and stage together). */
int kvq_cache_exact_from(const kvq_cache *c, int layer, const kvq_cache_side *sd);
/* kvq_cache_load from a buffer (the fuzz target's entry). */
kvq_status kvq_cache_load_memory(kvq_cache *c, const uint8_t *data, size_t size, uint64_t model_hash,
                                 int32_t **tokens, int *n_tokens, kvq_error *err);
/* Move the pending batch's rows into its layer's rings (every write does
 * this first; editing and saving the cache too). */
void kvq_cache_commit_stage(kvq_cache *c);

/* Rotate one row of KV head `head` the way a side stores it:
 * x[head_dim] -> out[store_dim] (zero-padded, then the side's Hadamard;
 * calibrated sides: that head's transform T (x - mean)); a query the way
 * the K side reads it (the same, except calibrated: T^-T q); and back:
 * acc[store_dim] -> acc rotated back in place (its first head_dim values
 * are the result). */
void kvq_cache_side_rotate(const kvq_cache_side *sd, int head, const float *x, float *out);
void kvq_cache_side_rotate_query(const kvq_cache_side *sd, int head, const float *q, float *out);
void kvq_cache_side_unrotate(const kvq_cache_side *sd, int head, float *acc);


/* Whether K bodies are stored in lanes, and V bodies in pairs, where
 * their type has that layout (cache_lanes.h; default true).  Read when a
 * cache is created: tests and benchmarks compare the layouts (the same
 * values, bit for bit; K's scores the same bits, V's sums within the
 * pairs kernel's rounding). */
void kvq_cache_set_lanes(bool on);
void kvq_cache_set_pairs(bool on);
/* Whether those switches change how a body of type t with heads of
 * head_dim values is kept (K lanes / V pairs, either side, or KVarN's
 * records, cache_tiles_layout.h). */
bool kvq_cache_type_has_layout(kvq_type t, int head_dim);

/* A tile side's record (record_bytes) as files hold it, the codes
 * token-major, from the body's copy at `rec` / into it. */
void kvq_tiles_record_out(const kvq_cache_side *sd, const uint8_t *rec, uint8_t *out);
void kvq_tiles_record_in(const kvq_cache_side *sd, const uint8_t *in, uint8_t *rec);
enum { KVQ_TILES_RECORD_MAX = KVQ_KVARN_TILE * 128 + 2 * 3 * 128 };   /* 8-bit codes, width 128 */

/* Store / read row `pos` of one head of a rows-layout body in the type's
 * row format (row_bytes), whichever way the body keeps it (sd->lanes). */
void kvq_cache_body_put(const kvq_cache_side *sd, int head, int pos, const uint8_t *row);
void kvq_cache_body_get(const kvq_cache_side *sd, int head, int pos, uint8_t *row);

/* Dequantise one stored row (rotated values, as the kernel reads them) of
 * one head into out[store_dim]; for tests and tools. */
kvq_status kvq_cache_read_row(const kvq_cache *c, int layer, bool is_v, kvq_cache_part part,
                              int head, int pos, float *out, kvq_error *err);

/* Attention with explicit kernels: `table` is a whole trait table
 * (indexed by kvq_type, e.g. one filled by kvq_simd_table) whose row
 * kernels are used, NULL for the active one (kvq_type_get); key_splits > 0
 * asks for that many key ranges (merged by log-sum-exp; at most one per
 * key, and equal ranges can make fewer), 0 lets the pass choose them from
 * the shapes (never the thread count: the same bits for any threads). */
typedef struct kvq_attend_opts {
    const kvq_type_traits *table;
    int key_splits;
    /* score q4_0/q4_1 K rows with the query rounded to int8 per block
     * instead of int16 (attn_block_round_query8, attn_block_int8_type; the
     * forward pass with KVQ_ACT_INT8), a kvarn4 K with its folded query
     * rounded to 127 levels (attn_kvarn_kernels.fold_query), and a
     * trellis K (turbo*_tcq) with its rotated query rounded to int8 per
     * TurboQuant block (attn_turbo.c, kvq_turbo_chunk_scores8) instead
     * of the default, int16 levels of 1023 steps in decode
     * (kvq_turbo_chunk_scores16) and the float query in a prefill
     * group: the kernels multiply bytes, the scores move by up to 0.4 %
     * of a block's largest |q| per unit |k| (the default's 0.05 %) */
    bool int8_query;
} kvq_attend_opts;

kvq_status kvq_cache_attend_opts(kvq_cache *c, int layer, int pos, int n, int n_head,
                                 const float *q, float scale, float *out, kvq_pool *pool,
                                 const kvq_attend_opts *opts, kvq_error *err);

/* Which key loop attention runs (src/cache/attention.c). */
typedef enum kvq_attend_pass {
    KVQ_PASS_DEFAULT = 0,  /* chunked without a table; per key with one (its dot/axpy) */
    KVQ_PASS_PER_KEY,      /* the reference: the type's dot and axpy per key and head */
    KVQ_PASS_CHUNKED,      /* chunks of keys through the row hooks (fused, in place, records or f32 tiles), attn_block.h */
} kvq_attend_pass;

struct attn_block_kernels;

/* The key loop and, for the chunked one, its kernels (attn_block_level(),
 * NULL: the best the CPU runs); for tests and benches. */
typedef struct kvq_attend_loop {
    kvq_attend_pass pass;
    const struct attn_block_kernels *block;
    /* per-key pass: score body rows of the 32-value block types with the
     * query rounded to int16 per block, as the chunked pass's integer
     * kernels do (attn_block.h), so that the two can be compared closely */
    bool round_query;
} kvq_attend_loop;

/* kvq_cache_attend_opts with the key loop chosen (loop NULL: default). */
kvq_status kvq_cache_attend_loop(kvq_cache *c, int layer, int pos, int n, int n_head,
                                 const float *q, float scale, float *out, kvq_pool *pool,
                                 const kvq_attend_opts *opts, const kvq_attend_loop *loop,
                                 kvq_error *err);

#endif
