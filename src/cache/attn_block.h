/*
 * attn_block.h - the chunked key loop of attention over the cache
 * (attention.c, docs/spec/attention.md §4).
 *
 * A chunk of up to ATTN_BLOCK_KEYS keys of one KV head is processed for
 * all G query heads of its GQA group at once:
 *
 *   1. scores S[G][keys] = scale * Q . K: rows of f32, f16 and bf16 are
 *      read in place (converted in registers) by a register-blocked tile
 *      kernel (heads x keys, one accumulator per score, reduced all at
 *      once by a transposing add tree); rows of the 32-value block types
 *      (q8_0 ... q2_1, iq4_nl) by the fused integer kernels
 *      (attn_codes.inc): each block's codes decoded once into integers and
 *      multiplied with the query rounded to int16 per block (below), the
 *      integer sums exact, one float multiply-add per block;
 *   2. the online softmax takes one max and one rescale per chunk and
 *      head, with a vectorised exp (attn_block_exp, error bound below);
 *   3. V rows are added, weighted, into all G accumulators in one pass:
 *      f32/f16/bf16 in place, block types by their codes decoded once
 *      per key and block with the block scale folded into each head's
 *      weight (keys x heads -> head_dim, accumulators in registers).
 *   TurboQuant rows are scored and summed from their codes in the rotated
 *   domain (attn_turbo.c), KVarN records from their codes with the column
 *   scale folded into the query (attn_kvarn.inc, through cache_tiles.c).  Rows of other types (a caller's trait table)
 *   are unpacked into an f32 tile first with the type's dequantize (the
 *   default hooks, row_hooks.h); each type's row says which reads it.
 *
 * The query in integers (block-type K rows only): each 32-value block b of
 * a rotated query row is rounded once per call to qi = round(q / s_b),
 * s_b = max|q_b| / 32767 (attn_block_round_query), so that a score is
 *   sum_b d_kb s_b (sum_i c_i qi_i - off sum_i qi_i) [+ m_kb s_b sum_i qi_i]
 * with the integer sums exact (|sum| < 32 * 128 * 32767 < 2^31).  The
 * error this adds to a score is at most sum_b (s_b / 2) sum_{i in b} |k_i|,
 * i.e. a relative 1.5e-5 of the largest |q| of the block: about float
 * rounding (docs/cache.md measures it); the per-key reference pass can
 * score with the same rounded query (kvq_attend_loop.round_query), which
 * is what tests compare against.
 *
 * Every output's summation order depends only on the shapes (head_dim,
 * G, where the chunk starts), never on the thread count or on the tile's
 * position, so results stay bitwise independent of threads.
 *
 * The per-key pass (the type's dot and axpy per key and head) stays in
 * attention.c as the reference this path is tested against.
 *
 * exp: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2), e^r by its
 * degree-7 Taylor polynomial (truncation < 7.5e-9 relative), times 2^n
 * built in the exponent bits.  Error: at most 2 ulp of float (relative
 * 2.4e-7; measured over [-87, 0]: 0.93 ulp with FMA, 1.19 ulp scalar;
 * tests/test_attn_block.c checks 2 ulp), i.e.
 * the order of expf's own rounding.  x < -87 gives 0 (e^-87 < 1.7e-38:
 * the softmax's largest weight is 1, so this changes no sum), NaN stays
 * NaN, -inf gives 0.
 */
#ifndef KVQ_ATTN_BLOCK_H
#define KVQ_ATTN_BLOCK_H

#include "kvq_internal.h"

enum { ATTN_BLOCK_KEYS = 64 };     /* the most keys per call of the block types' kernels */
/* Keys per call of hooks that name no max_keys (kvq_row_hooks): K and V
 * tiles of 128-wide heads = 32 KiB.  The fused kernels of codes of 4 bits
 * or fewer take ATTN_BLOCK_KEYS (docs/performance.md, "64-key chunks for
 * the narrow block types"). */
enum { ATTN_CHUNK_KEYS = 32 };
/* The most keys of one chunk: record types' hooks may take runs this long
 * (kvq_row_hooks.max_keys: KVarN's, where the per-run work, the block
 * kernels' per-chunk glue plus a record's scales, halves; and the block
 * types' of 4-bit codes or fewer, ATTN_BLOCK_KEYS), every other row's
 * hooks ATTN_CHUNK_KEYS. */
enum { ATTN_RUN_KEYS = 64 };

/* The bytes from each of a chunk's nk rows to the next, when they are
 * evenly spaced at most 4 KiB apart (one KV head's rows, the usual case:
 * the decode prefetch fetches the next chunk's at that step), else 0. */
static inline uintptr_t attn_rows_step(const void *const *rows, int nk) {
    if (nk < 2 || !rows[0] || !rows[1] || !rows[nk - 1]) return 0;
    const uintptr_t first = (uintptr_t)rows[0], step = (uintptr_t)rows[1] - first;
    if (step == 0 || step > 4096 || (uintptr_t)rows[nk - 1] - first != step * (uintptr_t)(nk - 1)) return 0;
    return step;
}
enum { ATTN_FUSED_MAX_BLOCKS = 16 };  /* fused kernels: rows of at most 16 blocks (512 values) */

/* The query rows of one GQA group for the fused integer kernels: G heads,
 * head g at q + g*stride (floats), qi + g*stride (int16 codes), and its
 * block b's scale and code sum at scale/sum[g*(stride/32) + b]. */
typedef struct attn_query {
    const float *q;
    const int16_t *qi;
    const float *scale;
    const int32_t *sum;
    int stride;
    bool q8;    /* qi rounded to int8 (attn_block_round_query8, |qi| <= 127):
                   the kernels may multiply it as bytes (the same sums) */
    const int8_t *qb;   /* q8: qi as bytes (attn_block_query_bytes, head g at
                           qb + g*stride), read by the q4_0/q4_1 lanes
                           kernels; NULL: they multiply qi as int16 */
} attn_query;

/* Round one query row of len values (whole 32-blocks) to int16 per block,
 * the one rounding every level uses: scale[b] = max|q_b| / 32767 (0 for a
 * zero block, NaN for a block holding NaN or inf), qi = q * (32767 /
 * max|q_b|) rounded to nearest (ties away from 0; within an ulp of
 * q / scale[b]), sum[b] = sum of qi over b. */
void attn_block_round_query(const float *q, int64_t len, int16_t *qi, float *scale, int32_t *sum);
/* The values the integer kernels score with: qhat[i] = scale[b] * qi[i]. */
void attn_block_rounded_values(const float *q, int64_t len, float *qhat);
/* The same rounding to int8 levels, stored in int16 (the option
 * kvq_attend_opts.int8_query, llama.cpp's rounding of the query for a
 * quantised K): scale[b] = max|q_b| / 127, |qi| <= 127; and its values.
 * The error it adds to a score is at most sum_b (s_b / 2) sum_{i in b}
 * |k_i|, s_b = max|q_b| / 127: a relative 0.4 % of the block's largest
 * |q| per unit of |k|, 258x the int16 rounding's. */
void attn_block_round_query8(const float *q, int64_t len, int16_t *qi, float *scale, int32_t *sum);
/* Int8 levels (|qi| <= 127) as the bytes the lanes kernels multiply with
 * a block's 4-bit codes (attn_codes.inc lanes_nib_sums8): within each 8
 * values the order 0 4 1 5 2 6 3 7, a code dword's low nibbles then its
 * high ones.  Once per query row (attention.c) or folded query (KVarN). */
void attn_block_query_bytes(const int16_t *qi, int64_t len, int8_t *qb);
void attn_block_rounded_values8(const float *q, int64_t len, float *qhat);
/* Types whose rows the fused integer kernels score (the 32-value block
 * types): their scores use the rounded query at every level. */
bool attn_block_int_type(kvq_type t);
/* The K types whose kernels multiply an int8 query as bytes, where
 * kvq_attend_opts.int8_query rounds the query to int8: q4_0 and q4_1
 * (attn_codes.inc lanes_nib_sums8, int8_pays), kvarn4, whose folded
 * query is rounded to 127 levels and read by the same lanes kernel
 * (attn_kvarn_kernels.fold_query), and the trellis types (turbo*_tcq:
 * the query rounded per TurboQuant block, attn_turbo.c, their looked-up
 * codebook bytes multiplied by it, kvq_turbo_chunk_scores8).  For the
 * other types the byte kernels were slower than their int16 ones, or
 * would need VNNI, so the query keeps int16 and its accuracy. */
bool attn_block_int8_type(kvq_type t);

/* Fused kernels for packed rows of one 32-value block type: scores and
 * V sums straight from the blocks, each block decoded once and used by
 * every head (no f32 tile).  Same contracts as the kernels below with
 * packed rows of `len` values and the query as attn_query; accumulate
 * skips NULL rows. */
typedef struct attn_block_fused {
    int block_bytes;                        /* bytes per block; 0: no fused kernel */
    bool has_min;                           /* fp16 header d, m (else d alone)     */
    void (*scores)(const uint8_t *const *k, int nk, const attn_query *q, int G, int64_t len, float scale,
                   float *w, int ldw);
    void (*accumulate)(const uint8_t *const *v, int nk, const float *w, int ldw, int G, float *acc,
                       int acc_stride, int64_t len);
    /* scores of keys key0..key0+nk-1 of one KV head's K body stored in
     * lanes (cache_lanes.h; `head` its first group): the same scores,
     * bit for bit, as `scores` on those rows; NULL for types without
     * that layout */
    void (*scores_lanes)(const uint8_t *head, int key0, int nk, const attn_query *q, int G, int64_t len,
                         float scale, float *w, int ldw);
    /* acc_g += sum_t w[g*ldw + t] v_t for keys key0..key0+nk-1 of one KV
     * head's V body stored in pairs (cache_lanes.h; `head` its first
     * group), the weights rounded to int16 per chunk and head (within
     * 4 nk s of `accumulate`, attn_codes.inc); false, nothing added, when
     * a weight or scale is not finite; NULL for types without that layout */
    bool (*accumulate_pairs)(const uint8_t *head, int key0, int nk, const float *w, int ldw, int G, float *acc,
                             int acc_stride, int64_t len);
} attn_block_fused;

/* Fused kernels for KVarN records (attn_kvarn.inc, docs/kvarn.md): one
 * slice of `w` channels (64 or 128) of a run of nk <= ATTN_BLOCK_KEYS
 * tokens of one tile, b-bit codes read straight from the record
 * (token-major, `codes` = the run's first token), nothing unpacked to an
 * f32 row.
 *   fold_query: per head g < G, qs_c = q_c S_c rounded to int16 per
 *     32-channel block (qi[g*w + c] = round(qs_c / qscale[g*(w/32) + b]),
 *     qscale = max|qs_b| / top, top = 32767, or 127 with `q8` (the int8
 *     query, kvq_attend_opts.int8_query); NaN for a head whose qs holds
 *     inf or NaN, 0 for a block below KVARN_Q_TINY), qsub = off * sum_b qi,
 *     qz[g] = sum_c q_c Z_c + off * sum_c qs_c (off: the codes' centre,
 *     2^(b-1), so the rounding error multiplies code - off, not code);
 *     qi in channel order for `lanes`, else in the order the level's K
 *     decoder yields a block's codes; qb not NULL (`q8`, `lanes` and
 *     4-bit codes: what scores_lanes reads as bytes): also qb[g*w + ..],
 *     each block's 32 levels as bytes in the lanes' nibble order;
 *   scores: w[g*ldw + t] += O_t (sum_b qscale_gb (sum_{c in b} qi_gc code_tc
 *     - qsub_gb) + qz_g), the integer sums exact;
 *   values: acc[g*acc_stride + c] += O_c (sum_t ps[g*lds + t] code_tc
 *     + pz_g) for the tokens whose codes rows[t] is not NULL, added in
 *     order t = 0..nk-1. */
#define KVARN_Q_TINY 1e-30f
typedef struct attn_kvarn_kernels {
    void (*fold_query)(const float *q, int q_stride, int G, const float *S, const float *Z, int w, int bits,
                       bool lanes, bool q8, int16_t *qi, int8_t *qb, float *qscale, int32_t *qsub, float *qz);
    void (*scores)(int bits, const uint8_t *codes, int w, int nk, const int16_t *qi, const float *qscale,
                   const int32_t *qsub, const float *qz, const float *O, int G, float *wts, int ldw);
    void (*values)(int bits, const uint8_t *const *rows, int nk, int w, const float *ps, int lds, int G,
                   const float *O, const float *pz, float *acc, int acc_stride);
    /* records kept in lanes (K) and pairs (V) in the cache
     * (cache_tiles_layout.h; `payload` the record's first byte, tokens
     * t0 .. t0 + nk - 1 of its tile):
     *   scores_lanes: as scores, the same bits, with qi folded in channel
     *     order (fold_query's `lanes`); qb not NULL (4-bit codes, the int8
     *     query): the same sums from fold_query's bytes;
     *   values_pairs: acc[g*acc_stride + c] += O_c (sum_t p_gt S_t (code_tc
     *     - m) + pz_g), m = 2^(bits-1), p the softmax weights wts[g*ldw +
     *     t], S_t and Z_t the run's row scales and zeros, pz_g = sum_t
     *     p_gt (Z_t + m S_t) in floats; the weights p_gt S_t rounded to
     *     int16 per chunk and head (attn_kvarn.inc); false, nothing added,
     *     when a weight, S_t or Z_t is not finite;
     *   ahead (both): the next run's codes' first byte (cache_tiles.c
     *     next_run_ahead), fetched into L2 as this run's are read, a
     *     vector's keys' share (K) or a group (V) at a time; 0: none. */
    void (*scores_lanes)(int bits, const uint8_t *payload, int w, int t0, int nk, const int16_t *qi,
                         const int8_t *qb, const float *qscale, const int32_t *qsub, const float *qz, const float *O,
                         int G, float *wts, int ldw, uintptr_t ahead);
    bool (*values_pairs)(int bits, const uint8_t *payload, int w, int t0, int nk, const float *S, const float *Z,
                         const float *wts, int ldw, int G, const float *O, float *acc, int acc_stride,
                         uintptr_t ahead);
} attn_kvarn_kernels;

/* Rows the tile kernels read in place, converted in registers. */
typedef enum attn_row_kind { ATTN_ROW_F32 = 0, ATTN_ROW_F16, ATTN_ROW_BF16, ATTN_ROW_KINDS } attn_row_kind;

/* Whether the in-place kernels fetch the next chunk's rows of this kind
 * themselves (f16, bf16: a few lines at a time as they read this chunk's;
 * one burst of a chunk's 64 lines before the kernel stalled on the fetches
 * in flight, docs/performance.md), or the hook fetches them before the
 * call (f32: such rows may be an unpacked tile, attn_block.c
 * decode_scores, not the cache's evenly spaced rows). */
static inline bool attn_row_kind_fetched_in_kernel(int kind) { return kind != ATTN_ROW_F32; }

/* The kernels of one ISA level. */
typedef struct attn_block_kernels {
    const char *level;                      /* "scalar", "avx2", "avx512"        */
    kvq_isa isa;                            /* the level's ISA: the formats' hooks
                                               run their kernels of this level   */
    /* w[g*ldw + t] = scale * sum_d q[g*q_stride + d] * k[t][d], g < G, t < nk,
     * d < len; every score's summation order depends only on len. */
    void (*scores)(const float *const *k, int nk, const float *q, int G, int q_stride, int64_t len, float scale,
                   float *w, int ldw);
    /* acc[g*acc_stride + d] += sum_t w[g*ldw + t] * v[t][d] for g < G, t < nk,
     * d < len; per output the keys are added in order t = 0..nk-1. */
    void (*accumulate)(const float *const *v, int nk, const float *w, int ldw, int G, float *acc,
                       int acc_stride, int64_t len);
    /* max of x[0..n), NaN entries skipped; -inf when there is none. */
    float (*max)(const float *x, int n);
    /* x[i] = exp(x[i] - shift); returns sum x[i] (a fixed order for each n). */
    float (*exp_sum)(float *x, int n, float shift);
    /* [KVQ_TYPE_COUNT], indexed by type (entries with block_bytes 0 have
     * none); NULL when the level has no fused kernels. */
    const attn_block_fused *fused;
    /* scores / accumulate over rows stored as f16 or bf16 (the pointers
     * passed as const float * are rows of that storage); [ATTN_ROW_F32]
     * is the two above.  NULL entries: the level unpacks such rows. */
    void (*scores_as[ATTN_ROW_KINDS])(const float *const *k, int nk, const float *q, int G, int q_stride,
                                      int64_t len, float scale, float *w, int ldw);
    void (*accumulate_as[ATTN_ROW_KINDS])(const float *const *v, int nk, const float *w, int ldw, int G,
                                          float *acc, int acc_stride, int64_t len);
    /* KVarN records read from their codes; NULL: the level unpacks a
     * run's codes into f32 rows and uses the tile kernels */
    const attn_kvarn_kernels *kvarn;
} attn_block_kernels;

/* The widest level this CPU runs (scalar when KVQ_FORCE_SCALAR=1;
 * "avx512-vnni" where the AVX-512 level runs and the CPU has AVX512_VNNI). */
const attn_block_kernels *attn_block_best(void);
/* One level by name ("scalar", "avx2", "avx512", "avx512-vnni"; "scalar-tile",
 * "avx2-tile", "avx512-tile": the same without fused or in-place
 * converting kernels, every row but f32 unpacked into an f32 tile and
 * scored with the float query, what ran before them; for measurements
 * and tests); NULL when unknown or not runnable here. */
const attn_block_kernels *attn_block_level(const char *level);
/* Per-ISA instances (attn_block_avx2.c, attn_block_avx512.c): call only
 * after kvq_isa_best() allowed them. */
const attn_block_kernels *attn_block_avx2(void);
const attn_block_kernels *attn_block_avx2_tile(void);
const attn_block_kernels *attn_block_avx512(void);
const attn_block_kernels *attn_block_avx512_tile(void);
const attn_block_kernels *attn_block_avx512_vnni(void);   /* attn_block_avx512_vnni.c: needs AVX512_VNNI */

/* Scalar exp with the same algorithm and bound as the vector ones. */
float attn_block_exp(float x);
/* roundf(x) for |x| < 2^22 by vectorisable operations (the query's
 * rounding; equal to roundf as an integer: a zero's sign may differ) */
float attn_block_round_half_away(float x);

/* What a record type's hooks keep between the chunks of one run of keys
 * (KVarN: the query folded with a tile's column scales S and Z, and the
 * K record's per-token scales O; the V record's column scales O and its
 * per-token scales S and zeros Z: each the same for the tile's four
 * chunks, converted from fp16 once).  The pass gives each task one and
 * empties it (k_rec = v_rec = NULL) wherever the query vectors change
 * (attend_keys), so an entry is only ever reused for the same record and
 * the same queries. */
enum { ATTN_MEMO_HEADS = 16, ATTN_MEMO_WIDTH = 128, ATTN_MEMO_KEYS = 128 };
enum { ATTN_MEMO_TURBO_VALUES = 64 * 128,     /* a prefill group of 64 vectors of 128 */
       ATTN_MEMO_TURBO_FLOATS = 4 * 256 };     /* a decode's GQA group of 4 vectors of 256 */
typedef struct attn_run_memo {
    const void *k_rec;                                 /* the record qi..k_o belong to
                                                          (a trellis K: the query t_m, t_s
                                                          were rounded from) */
    int k_heads;                                       /* and their query vectors    */
    int16_t qi[ATTN_MEMO_HEADS * ATTN_MEMO_WIDTH];
    int8_t qb[ATTN_MEMO_HEADS * ATTN_MEMO_WIDTH];      /* fold_query's bytes (q8)    */
    float qscale[ATTN_MEMO_HEADS * ATTN_MEMO_WIDTH / 32];
    int32_t qsub[ATTN_MEMO_HEADS * ATTN_MEMO_WIDTH / 32];
    float qz[ATTN_MEMO_HEADS];
    float k_o[ATTN_MEMO_KEYS + ATTN_RUN_KEYS];         /* zeros after the tile's      */
    /* a trellis K's rounded query (attn_turbo.c), for the vectors k_rec:
     * vector g's levels at t_m + g*len (int8,
     * every group size) or t_m16 + g*len (int16, a decode's few vectors),
     * and as floats at t_f + g*len (for the levels without an integer
     * kernel, where a decode's few vectors fit), its blocks' scales at
     * t_s + g*nb */
    int8_t t_m[ATTN_MEMO_TURBO_VALUES];
    int16_t t_m16[ATTN_MEMO_TURBO_FLOATS];
    float t_f[ATTN_MEMO_TURBO_FLOATS];
    float t_s[ATTN_MEMO_TURBO_VALUES / 64];
    const void *v_rec;                                 /* the record o, v_s, v_z belong to */
    float o[ATTN_MEMO_WIDTH], v_s[ATTN_MEMO_KEYS], v_z[ATTN_MEMO_KEYS];
} attn_run_memo;

/* One chunk of keys of one copy (body, ring, sink, stage) of a side, as
 * the row hooks (row_hooks.h) read it. */
typedef struct attn_block_rows {
    const kvq_type_traits *tr;   /* the rows' traits: its dequantize unpacks them */
    kvq_type type;               /* the rows' type (its fused kernels at a level)  */
    bool f32;                    /* f32 rows: read in place, nothing unpacked   */
    int64_t len;                 /* values per row (whole blocks)                */
    float *tile;                 /* ATTN_BLOCK_KEYS x len floats of scratch      */
    const float *zero;           /* len zeros: the row of a key of weight 0      */
    /* record types (tiles, calibrated rows): where the chunk's keys are */
    const struct kvq_cache_side *sd;
    int kv_head, key0;
    const uint8_t *lanes;        /* a K body in lanes or V body in pairs: this KV
                                    head's groups; NULL: rows */
    attn_run_memo *memo;         /* NULL: none (the hooks compute per chunk)     */
} attn_block_rows;

/* The level's fused kernels for these rows (a 32-value block type of at
 * most ATTN_FUSED_MAX_BLOCKS blocks), or NULL. */
const attn_block_fused *attn_block_fused_for(const attn_block_kernels *kr, const attn_block_rows *src);

/* Whether every one of G heads gives every one of nk keys a nonzero
 * weight (w[g*ldw + t]; NaN counts as nonzero): the usual chunk, whose V
 * rows then need no per-key check for keys to set aside. */
bool attn_block_all_weighted(const float *w, int ldw, int G, int nk);

/* The level's in-place kernel kind for these rows (f32, or f16/bf16 rows
 * at a level that converts them), or -1: unpack. */
int attn_block_row_kind(const attn_block_kernels *kr, const attn_block_rows *src);

/* w[g*ldw + t] = scale * (K row t . q_g) for the chunk's nk K rows,
 * through the hooks of the rows' type (row_hooks.h): fused from the
 * packed rows where the level has kernels for them (with the rounded
 * query q->qi), in place for f32/f16/bf16, else unpacked (float query). */
void attn_block_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows,
                       int nk, const attn_query *q, int G, float scale, float *w, int ldw);

/* acc_g += sum_t w[g*ldw + t] * V row t for the chunk's nk V rows, through
 * the hooks of the rows' type; a key whose weight is 0 for every head is
 * not unpacked (nor added: a non-finite V row of weight 0 does not poison
 * the sum, as in the per-key pass). */
void attn_block_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows,
                       int nk, const float *w, int ldw, int G, float *acc, int acc_stride);

#endif
