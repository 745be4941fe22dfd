/*
 * kvq.h - public API of kvq, a small C library for quantised KV caches.
 *
 * The API has four layers, each usable without the ones above it:
 *   1. value types  : one table of type traits (sizes, quantise, dequantise,
 *                     dot product, accumulate) shared by cache and weights;
 *   2. rotation     : the fast Walsh-Hadamard transform and the rule that
 *                     decides which block size Q/K and V are rotated with;
 *   3. cache        : per layer and KV head, packed K and V rows plus an
 *                     exact tail and sink, and attention that reads them;
 *   4. model        : GGUF models (llama, qwen2, qwen3) evaluated on CPU.
 *
 * Conventions: no global mutable state (the CPU-feature choice is computed
 * once and is read-only afterwards); functions that can fail return a
 * kvq_status and write a message into a caller-provided kvq_error.
 */
#ifndef KVQ_H
#define KVQ_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVQ_VERSION "0.1.0"

/* What libkvq.so exports: the library is built with -fvisibility=hidden,
 * so every function declared here, and nothing else, is marked. */
#if defined(__GNUC__)
#define KVQ_API __attribute__((visibility("default")))
#else
#define KVQ_API
#endif

/* The sources this library was built from, as 16 hex digits of a hash
 * of include/, src/ and tools/ (the Makefile's KVQ_SOURCE_ID): two
 * builds with the same id compute the same numbers.  `kvq sweep` names
 * its stored results by it, so a rebuilt kvq never resumes an older
 * build's figures. */
KVQ_API const char *kvq_source_id(void);

/* ------------------------------------------------------------------ errors */

typedef enum kvq_status {
    KVQ_OK = 0,
    KVQ_ERR_ARG,       /* invalid argument from the caller          */
    KVQ_ERR_IO,        /* file cannot be opened / read / written    */
    KVQ_ERR_FORMAT,    /* file is corrupt, truncated or unsupported */
    KVQ_ERR_NOMEM,     /* allocation failed                          */
    KVQ_ERR_UNSUPPORTED
} kvq_status;

typedef struct kvq_error {
    kvq_status code;
    char msg[256];
} kvq_error;

#if defined(__GNUC__)
#define KVQ_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define KVQ_PRINTF(fmt, args)
#endif

/* Record an error: err (may be NULL) receives code and the formatted
 * message (truncated to fit); returns code, so that a failing path reads
 * `return kvq_fail(err, KVQ_ERR_ARG, "...", ...);`.  For callers' own
 * callbacks (kvq_eval.h) that report through a kvq_error. */
KVQ_API kvq_status kvq_fail(kvq_error *err, kvq_status code, const char *fmt, ...) KVQ_PRINTF(3, 4);

/* ------------------------------------------------------------ value types */

/*
 * Every storage type kvq knows: the cache types of docs/spec/formats.md (plain and
 * 32-value block types §1-2, KVarN tiles §3, TurboQuant rows §4-5) and the
 * weight-only types of GGUF files (K-quants).  The order is kvq's own; the
 * GGUF/ggml numbering is a column of the trait table (ggml_id).
 */
typedef enum kvq_type {
    KVQ_TYPE_F32 = 0,
    KVQ_TYPE_F16,
    KVQ_TYPE_BF16,
    KVQ_TYPE_Q8_0,
    KVQ_TYPE_Q6_0,
    KVQ_TYPE_Q6_1,
    KVQ_TYPE_Q5_0,
    KVQ_TYPE_Q5_1,
    KVQ_TYPE_Q4_0,
    KVQ_TYPE_Q4_1,
    KVQ_TYPE_IQ4_NL,
    KVQ_TYPE_Q3_0,
    KVQ_TYPE_Q3_1,
    KVQ_TYPE_Q2_0,
    KVQ_TYPE_Q2_1,
    /* weight-only types (GGUF K-quants, 256 values per super-block) */
    KVQ_TYPE_Q4_K,
    KVQ_TYPE_Q5_K,
    KVQ_TYPE_Q6_K,
    /* KVarN (docs/spec/formats.md §3): 128-token tiles of 128 (or 64) channels */
    KVQ_TYPE_KVARN2,
    KVQ_TYPE_KVARN3,
    KVQ_TYPE_KVARN4,
    KVQ_TYPE_KVARN5,
    KVQ_TYPE_KVARN6,
    KVQ_TYPE_KVARN8,
    /* TurboQuant (docs/spec/formats.md §4-5): rows of 128- (or 64-) value blocks */
    KVQ_TYPE_TURBO2,
    KVQ_TYPE_TURBO3,
    KVQ_TYPE_TURBO4,
    KVQ_TYPE_TURBO2_TCQ,
    KVQ_TYPE_TURBO3_TCQ,
    KVQ_TYPE_TURBO4_TCQ,
    /* calibrated rows (docs/calibration.md): a transform and bit allocation
     * per layer and KV head fitted by `kvq calibrate`; the name says the
     * bits per value, every scale included (cal325: 3.25) */
    KVQ_TYPE_CAL225,
    KVQ_TYPE_CAL250,
    KVQ_TYPE_CAL300,
    KVQ_TYPE_CAL325,
    KVQ_TYPE_CAL350,
    KVQ_TYPE_CAL425,
    KVQ_TYPE_COUNT
} kvq_type;

/* How a type stores a cache: rows of blocks along head_dim (the plain,
 * block and TurboQuant types of docs/spec/formats.md §1-2 and §4-5, written token by
 * token), or records of 128-token tiles
 * (KVarN: a tile is quantised once, when its 128 tokens exist; the cache
 * keeps the first tile and the incomplete last one exact, docs/kvarn.md).
 * Tile types have no row kernels (quantize..axpy are NULL): the cache
 * reaches them through the hooks of their row (src/format/format_row.h). */
typedef enum kvq_layout { KVQ_LAYOUT_ROWS = 0, KVQ_LAYOUT_TILES } kvq_layout;

/* A rotation that is part of a format (docs/spec/attention.md §1: applied whatever
 * the --attn-rot switches say, never a second time on top). */
typedef enum kvq_format_rot {
    KVQ_FMT_ROT_NONE = 0,   /* the generic rule of kvq_rot_choose applies     */
    KVQ_FMT_ROT_SLICE,      /* normalised Hadamard over each 128 (or 64) slice */
    KVQ_FMT_ROT_TURBO,      /* S2 H S1 per 128 (or 64) block (src/format/turbo.h)     */
    KVQ_FMT_ROT_CALIB,      /* the calibration's transform per layer and KV head */
} kvq_format_rot;

/* Row kernels.  `n` is always a multiple of the type's block size here
 * (any n for types with a row_bytes hook); the kvq_*_row wrappers below
 * accept any n and pad the last block.  Types with format_rot work in the
 * format's rotated domain (TurboQuant: quantize takes R x, dequantize
 * gives R x_hat, dot/axpy take rotated vectors), because that is where
 * the cache keeps rows; their NMSE and dot errors equal the original
 * domain's (R is orthogonal). */
typedef void  (*kvq_quantize_fn)(const float *x, void *dst, int64_t n);
typedef void  (*kvq_dequantize_fn)(const void *src, float *y, int64_t n);
typedef float (*kvq_dot_fn)(const void *row, const float *x, int64_t n);
typedef void  (*kvq_axpy_fn)(float w, const void *row, float *y, int64_t n);
typedef size_t (*kvq_row_bytes_fn)(int64_t n);

typedef struct kvq_type_traits {
    const char *name;        /* "q4_0": the name used by -ctk/-ctv        */
    int block_size;          /* values per block                           */
    int block_bytes;         /* bytes per block                            */
    int ggml_id;             /* GGUF tensor type id, -1 if none            */
    bool is_cache_type;      /* usable as a KV-cache type (-ctk/-ctv)      */
    bool is_block_quant;     /* a quantised block type (rotation applies)  */
    kvq_layout layout;       /* rows of blocks, or 128-token tiles          */
    kvq_format_rot format_rot; /* rotation that is part of the format       */
    int bits;                /* code bits of tile types (0 for row types)   */
    /* NULL: a row is whole blocks of block_size (the last zero-padded).
     * Otherwise the row has its own layout (TurboQuant: 128-blocks, then a
     * 64- or 128-block for the rest): bytes of a row of n values, and the
     * kernels below take any n >= 1 themselves. */
    kvq_row_bytes_fn row_bytes;
    kvq_quantize_fn   quantize;    /* NULL for weight-only types           */
    kvq_dequantize_fn dequantize;
    kvq_dot_fn        dot;         /* sum_i row[i] * x[i]                  */
    kvq_axpy_fn       axpy;        /* y[i] += w * row[i]                   */
    /* Calibrated types: the rate in hundredths of a bit per value (325 for
     * cal325), else 0.  They have no row kernels (a row's layout is its KV
     * head's allocation): the cache reaches them through the hooks of
     * their row (src/format/format_row.h) and needs kvq_cache_params.calib. */
    int calib_rate;
} kvq_type_traits;

/* The active traits: SIMD kernels where the CPU has them, unless the
 * environment variable KVQ_FORCE_SCALAR=1 was set at first use. */
KVQ_API const kvq_type_traits *kvq_type_get(kvq_type t);
/* The scalar reference kernels: the oracle of every test. */
KVQ_API const kvq_type_traits *kvq_type_get_scalar(kvq_type t);
/* Name of the SIMD level in use: "scalar", "avx2", "avx512". */
KVQ_API const char *kvq_simd_level(void);

KVQ_API const char *kvq_type_name(kvq_type t);
/* Returns KVQ_TYPE_COUNT when the name is unknown. */
KVQ_API kvq_type kvq_type_from_name(const char *name);
/* Returns KVQ_TYPE_COUNT when the GGUF id has no kvq equivalent. */
KVQ_API kvq_type kvq_type_from_ggml_id(int ggml_id);
/* Bits per stored value, metadata included (q4_0: 4.5; kvarn4: 4.375 for a
 * 128x128 tile, its block being one tile record). */
KVQ_API double kvq_type_bpv(kvq_type t);

/* Bytes of one row of n values: whole blocks, the last one zero-padded;
 * 0 for tile types (they have no rows: see kvq_cache_row_bytes). */
KVQ_API size_t kvq_row_bytes(kvq_type t, int64_t n);
/* Row operations for any n >= 1 (padding handled).  NaN/Inf inputs are
 * not rejected: plain types store them as they are; a block type stores a
 * block holding one "poisoned" (d and m NaN, codes 0), so the whole block
 * decodes to NaN (docs/formats.md §4); callers that need finite caches
 * check their inputs. */
KVQ_API void  kvq_quantize_row(kvq_type t, const float *x, void *dst, int64_t n);
KVQ_API void  kvq_dequantize_row(kvq_type t, const void *src, float *y, int64_t n);
KVQ_API float kvq_dot_row(kvq_type t, const void *row, const float *x, int64_t n);
KVQ_API void  kvq_axpy_row(kvq_type t, float w, const void *row, float *y, int64_t n);

/* IEEE half and bfloat16 conversions (round to nearest even). */
KVQ_API uint16_t kvq_fp32_to_fp16(float f);
KVQ_API float    kvq_fp16_to_fp32(uint16_t h);
KVQ_API uint16_t kvq_fp32_to_bf16(float f);
KVQ_API float    kvq_bf16_to_fp32(uint16_t h);

/* --------------------------------------------------------------- rotation */

/* In-place normalised fast Walsh-Hadamard transform of n values (n a power
 * of two, 1..4096); H = H^T = H^-1, so applying it twice is the identity. */
KVQ_API void kvq_fwht(float *x, int n);
/* Apply the normalised Hadamard block-diagonally: x has n values, block
 * divides n.  signs (may be NULL) is a +-1 diagonal of `block` entries
 * applied before H (randomised Hadamard); the inverse is
 * kvq_rotate_row_inverse. */
KVQ_API void kvq_rotate_row(float *x, int n, int block, const int8_t *signs);
KVQ_API void kvq_rotate_row_inverse(float *x, int n, int block, const int8_t *signs);
/* Deterministic +-1 signs from a seed (splitmix64 stream). */
KVQ_API void kvq_random_signs(int8_t *signs, int n, uint64_t seed);

typedef enum kvq_rot_mode { KVQ_ROT_AUTO = 0, KVQ_ROT_ON, KVQ_ROT_OFF } kvq_rot_mode;

typedef struct kvq_rot_request {
    int head_dim_k, head_dim_v;
    kvq_type type_k, type_v;
    kvq_rot_mode mode, mode_k, mode_v;   /* command line; AUTO = not given */
    bool env_disable, env_disable_k, env_disable_v; /* LLAMA_ATTN_ROT_*  */
    bool is_mla;                          /* MLA caches are never rotated   */
} kvq_rot_request;

typedef struct kvq_rot_plan {
    int block_k;          /* Hadamard block for Q and K; 0 = no rotation */
    int block_v;          /* Hadamard block for V;       0 = no rotation */
    char reason[320];     /* one line saying what was chosen and why     */
} kvq_rot_plan;

/* Fill a request's env_* fields from the LLAMA_ATTN_ROT_* variables. */
KVQ_API void kvq_rot_request_from_env(kvq_rot_request *req);
/* The rule of docs/spec/attention.md §1 (see src/format/rotation_rule.c for its text). */
KVQ_API kvq_rot_plan kvq_rot_choose(const kvq_rot_request *req);
/* Largest power-of-two block >= min_block dividing n (at most 512), 0 if none. */
KVQ_API int kvq_rot_block_for(int n, int min_block);


/* ---------------------------------------------------------------- threads */

/* A fixed pool of worker threads; the calling thread takes part, so a pool
 * of n threads starts n-1 workers.  kvq_pool_run blocks until every task
 * of the job ran; tasks are handed out dynamically.  kvq's tasks keep
 * their work on the stack (a trellis cache write ~140 KiB): the workers
 * get at least 2 MiB, and a thread of yours that calls kvq needs some
 * hundreds of KiB (musl's 128 KiB default is too little). */
typedef struct kvq_pool kvq_pool;
typedef void (*kvq_task_fn)(void *ctx, int task, int thread);
KVQ_API kvq_pool *kvq_pool_create(int n_threads);          /* NULL on failure   */
KVQ_API void kvq_pool_free(kvq_pool *pool);
KVQ_API int  kvq_pool_threads(const kvq_pool *pool);        /* 1 for a NULL pool */
/* Runs fn(ctx, task, thread) for task in [0, n_tasks); pool may be NULL
 * (runs inline).  thread is in [0, kvq_pool_threads). */
KVQ_API void kvq_pool_run(kvq_pool *pool, kvq_task_fn fn, void *ctx, int n_tasks);

/* ------------------------------------------------------------ calibration */

/*
 * A calibration (docs/calibration.md): per layer and KV head, transforms
 * and bit allocations fitted by `kvq calibrate` on the model's own keys,
 * values and queries, used by the calibrated cache types.  Loading checks
 * the file's version, size and checksum and that it was made for model m
 * (kvq_model_hash: a hash of its GGUF file); each failure is one
 * error.  Read-only once loaded: one calibration may serve many caches.
 */
typedef struct kvq_calib kvq_calib;
typedef struct kvq_model kvq_model;
KVQ_API kvq_status kvq_calib_load(const char *path, const kvq_model *m, kvq_calib **out, kvq_error *err);
KVQ_API void kvq_calib_free(kvq_calib *c);
/* What a calibration holds: its shape, rates (hundredths of a bit per
 * value, ascending) and identity. */
typedef struct kvq_calib_info {
    int n_layer, n_head_kv, head_dim_k, head_dim_v;
    int n_rates, rates[16];
    double query_mix;             /* K's metric: the queries' share         */
    uint64_t checksum;            /* the file's (0 when not read from one)  */
    uint32_t n_tokens;            /* calibration positions per layer        */
} kvq_calib_info;
KVQ_API void kvq_calib_get_info(const kvq_calib *c, kvq_calib_info *out);
/* Write c to path (created or replaced), versioned and checksummed. */
KVQ_API kvq_status kvq_calib_write(const kvq_calib *c, const char *path, kvq_error *err);

/* ------------------------------------------------------------------ cache */

/*
 * The KV cache: per layer and KV head, K and V rows stored in any cache
 * type, rotated as the rotation plan says, plus exact copies of the first
 * sink_tokens positions and of the most recent tail_tokens positions.
 * The stored rows are allocated once, at creation, from n_ctx; attention's
 * working memory is kept by the cache and grows only when a call needs
 * more than any before it, so calls on one cache must not run at the same
 * time (from different threads).
 *
 * Exact rows (docs/cache.md "Exact rows"): a query at position p reads
 * positions p-N+1..p (N = tail_tokens) and 0..S-1 (S = sink_tokens) from
 * exact copies and every other key from the quantised body, whether it is
 * decoded alone or in a prefill batch.  The persistent exact copies are
 * exactly N + S rows per layer and side (KVarN: the first tile, whole tail
 * tiles and the incomplete tile).  A write call's own rows wait in one
 * transient stage shared by all layers until the next write, so a batch's
 * attention must come before the next kvq_cache_write (the forward pass
 * does write, attend per layer); kvq_cache_attend refuses otherwise.
 */
typedef struct kvq_cache kvq_cache;

/* Largest K or V head size the cache holds (its row scratch and the
 * rotation's largest block); the cache and the model loader refuse larger
 * heads with this limit in the message. */
#define KVQ_MAX_HEAD_DIM 512
#define KVQ_KVARN_MAX_ITERS 1000   /* most KVarN iterations a cache accepts */

typedef struct kvq_cache_params {
    int n_layer, n_head_kv;
    int head_dim_k, head_dim_v;
    int n_ctx;                    /* positions the cache can hold          */
    int max_batch;                /* most tokens written by one call       */
    kvq_type type_k, type_v;      /* -ctk / -ctv                           */
    const kvq_type *layer_type_k; /* optional: n_layer overrides, or NULL  */
    const kvq_type *layer_type_v;
    int tail_tokens;              /* exact recent positions, 0..n_ctx (0 = */
                                  /* none; KVarN sides: whole 128-token    */
                                  /* tiles)                                */
    kvq_type tail_type;           /* f32, f16 or bf16                      */
    int sink_tokens;              /* exact first positions, 0..n_ctx (0 =  */
                                  /* none; KVarN sides: whole tiles)       */
    int rollback_tokens;          /* exact rows kept beyond the tail so    */
                                  /* kvq_cache_truncate can drop up to     */
                                  /* this many positions and stay exact    */
                                  /* (0 = none; persistent, counted)       */
    bool kvarn_quantize_first_tile; /* KVarN: quantise the first 128-token */
                                  /* tile too (default false: it is kept   */
                                  /* exact, as KVarN's attention sink)     */
    kvq_rot_request rot;          /* head dims / types are filled in       */
    bool rot_random_signs;        /* randomised Hadamard (fixed seed)      */
    int kvarn_iters;              /* KVarN normalisation iterations T      */
                                  /* (0 = the format's default, 16; at     */
                                  /* most KVQ_KVARN_MAX_ITERS)             */
    const kvq_calib *calib;       /* for calibrated types (cal225 ...): the */
                                  /* model's calibration; the cache copies */
                                  /* what it needs, so it may be freed     */
                                  /* after kvq_cache_create                */
} kvq_cache_params;

/* Defaults: one layer of one 128-wide K/V head, n_ctx 4096, max_batch 512,
 * f16/f16, bf16 exact copies, no tail, no sink, rotation AUTO.  Reads the
 * environment: rot's env_* fields come from LLAMA_ATTN_ROT_DISABLE,
 * LLAMA_ATTN_ROT_K_DISABLE and LLAMA_ATTN_ROT_V_DISABLE
 * (kvq_rot_request_from_env), so the same call can give different
 * parameters in different processes; clear those fields for a fixed plan. */
KVQ_API void kvq_cache_params_default(kvq_cache_params *p);

KVQ_API kvq_status kvq_cache_create(const kvq_cache_params *p, kvq_cache **out, kvq_error *err);
KVQ_API void kvq_cache_free(kvq_cache *c);
KVQ_API void kvq_cache_clear(kvq_cache *c);             /* empty, keep memory */

/* Store n tokens' K and V of one layer at positions pos..pos+n-1 (they
 * must follow the positions already stored, kvq_cache_n_stored).
 * k: [n][n_head_kv][head_dim_k], v: [n][n_head_kv][head_dim_v], after
 * RoPE, not rotated: the cache rotates and quantises them.
 * A failed call stores nothing: KVQ_ERR_ARG for arguments, KVQ_ERR_NOMEM
 * when a larger pool than before needs more tile scratch (everything else
 * a write needs is allocated at creation).  The layer still holds the
 * positions kvq_cache_n_stored says, and the same call can be repeated
 * (tested with failure injection). */
KVQ_API kvq_status kvq_cache_write(kvq_cache *c, int layer, int pos, int n,
                           const float *k, const float *v, kvq_error *err);
/* kvq_cache_write with its work split over the pool's threads (NULL:
 * inline) by KV head and side; the stored bytes are the same for any
 * thread count. */
KVQ_API kvq_status kvq_cache_write_pool(kvq_cache *c, int layer, int pos, int n, const float *k, const float *v,
                                        kvq_pool *pool, kvq_error *err);

/* Causal attention of n query rows at positions pos..pos+n-1 (query i
 * sees keys 0..pos+i) over what layer holds.  q: [n][n_head][head_dim_k]
 * (after RoPE, not rotated), out: [n][n_head][head_dim_v], softmax scale
 * `scale`.  n_head must be a multiple of n_head_kv (GQA). */
KVQ_API kvq_status kvq_cache_attend(kvq_cache *c, int layer, int pos, int n, int n_head,
                            const float *q, float scale, float *out,
                            kvq_pool *pool, kvq_error *err);

/* Memory of a cache, in one definition every tool reports (docs/cache.md):
 * total (kv_bytes) is the persistent cache at n_ctx positions: bodies plus
 * the exact rows the cache keeps at that length, padding included; work
 * (work_bytes) is transient working memory allocated once with it (the
 * write stage, tile quantisation scratch); attention's scratch, grown on
 * demand, is not counted.  allocated is what creation allocates: total +
 * work, plus the capacity of KVarN's incomplete-tile rows where n_ctx is a
 * whole number of tiles (at lengths in between it holds up to 127 rows),
 * plus the calibrated sides' copies of their transforms (docs/calibration.md). */
/* ---------------------------------------------------- editing the cache */

/* Drop positions n and after in every layer (rollback for a retry or
 * rejected speculative tokens); the next write continues at n.  The exact
 * rows the new last positions read (tail, KVarN's incomplete tile) must
 * still be held: the ring keeps rollback_tokens rows beyond the tail for
 * this, and a deeper truncation is refused (KVQ_ERR_ARG) rather than read
 * those keys quantised.  After it, attention equals that of a cache
 * written with positions 0..n-1 only (tested bit for bit). */
KVQ_API kvq_status kvq_cache_truncate(kvq_cache *c, int n, kvq_error *err);

/* The model's RoPE, as a shift needs it: pair i of a head of head_dim_k
 * values turns by pos * freq_scale * base^(-2i/head_dim_k); neox pairs
 * (i, i + head_dim_k/2), otherwise (2i, 2i+1). */
typedef struct kvq_cache_rope {
    float base, freq_scale;
    bool neox;
} kvq_cache_rope;

/* Context shift: drop positions keep_first .. keep_first+n_discard-1 and
 * move every later position down by n_discard, with its stored K turned
 * back by n_discard RoPE positions (dequantise, rotate back, re-RoPE,
 * rotate, quantise again: exact in real arithmetic for exact rows, one
 * more rounding for quantised ones; docs/cache.md "Editing").  keep_first
 * must keep at least the sink rows.  Every layer must hold the same length. */
KVQ_API kvq_status kvq_cache_shift(kvq_cache *c, int n_discard, int keep_first, const kvq_cache_rope *rope, kvq_error *err);

/* --------------------------------------------------- saving the cache */

/* A cache state file (docs/state.md): the cache's settings (types per
 * layer, rotation plan, block sizes, tail, sink, rollback, KVarN tiles),
 * every layer's stored positions, exact rows and tile records, and the
 * tokens they came from, tied to a model hash; versioned and checksummed.
 * Restoring into a cache made with other settings, for another model, or
 * from a truncated or corrupted file is refused with a message naming the
 * difference.  A round trip is bit-exact. */
typedef struct kvq_state_tag {
    uint64_t model_hash;          /* e.g. kvq_model_hash                   */
    const int32_t *tokens;        /* the tokens at positions 0..n-1        */
    int n_tokens;                 /* = the positions the cache holds       */
} kvq_state_tag;
KVQ_API kvq_status kvq_cache_save(const kvq_cache *c, const char *path, const kvq_state_tag *tag, kvq_error *err);
/* Restores into c (created with the same parameters).  *tokens (malloc'ed,
 * the caller frees) and *n_tokens receive the saved tokens. */
KVQ_API kvq_status kvq_cache_load(kvq_cache *c, const char *path, uint64_t model_hash, int32_t **tokens, int *n_tokens,
                          kvq_error *err);

typedef struct kvq_cache_bytes {
    size_t k, v;       /* quantised bodies                             */
    size_t tail, sink; /* exact copies (both sides) kept at n_ctx      */
    size_t total;      /* kv_bytes = k + v + tail + sink               */
    size_t work;       /* work_bytes: transient working memory         */
    size_t allocated;  /* bytes allocated at creation                  */
} kvq_cache_bytes;
KVQ_API void kvq_cache_memory(const kvq_cache *c, kvq_cache_bytes *b);
/* The figures kvq_cache_create would give these parameters (the same
 * layout code), without allocating the cache: sizes at other context
 * lengths, or a size checked before creating. */
KVQ_API kvq_status kvq_cache_plan_bytes(const kvq_cache_params *p, kvq_cache_bytes *out, kvq_error *err);
/* Bytes per token of one side (K or V) of one layer: the quantised body
 * rows of all n_head_kv KV heads at one position; for row types
 * n_head_kv * kvq_row_bytes(t, head_dim) (whole blocks, as the cache pads).
 * Exact copies (tail ring, sink) are not included.
 * Tile types: their quantised records per token (head padded to 64 or whole
 * 128-wide slices; for 64-wide slices the V figure, 1 byte/token above K's);
 * the exact first tile, incomplete tile and tail come on top. */
KVQ_API size_t kvq_cache_row_bytes(kvq_type t, int n_head_kv, int head_dim);
KVQ_API const kvq_rot_plan *kvq_cache_rotation(const kvq_cache *c);

/* ------------------------------------------------------ per-layer types */

/*
 * Per-layer cache types as text, the syntax of kvq's
 * --cache-type-k-layers / --cache-type-v-layers: "0-3:q8_0,4-27:q4_0",
 * entries RANGE:TYPE separated by single commas, a range N or N-M
 * (inclusive, N <= M, decimal digits only), later entries winning, layers
 * not listed keeping the caller's type.  Parsing checks the syntax and
 * the type names; layer numbers are checked against a model's n_layer
 * when the spec is applied.
 */
#define KVQ_LAYER_SPEC_MAX 256        /* entries of one spec */
typedef struct kvq_layer_range { int first, last; kvq_type type; } kvq_layer_range;
typedef struct kvq_layer_spec {
    int n;                            /* entries in r                          */
    kvq_layer_range r[KVQ_LAYER_SPEC_MAX];
} kvq_layer_spec;
/* KVQ_ERR_ARG (with one line naming the entry) for bad syntax or too
 * many entries; KVQ_ERR_UNSUPPORTED for a name that is no cache type
 * (the caller may list kvq_type_name's cache types after the message). */
KVQ_API kvq_status kvq_layer_spec_parse(const char *spec, kvq_layer_spec *out, kvq_error *err);
/* Write the spec's types into types[0..n_layer-1] (filled by the caller
 * with the default type first), in order.  KVQ_ERR_ARG, types untouched,
 * when an entry names a layer >= n_layer.  The result is what
 * kvq_cache_params.layer_type_k / layer_type_v point at. */
KVQ_API kvq_status kvq_layer_spec_apply(const kvq_layer_spec *s, int n_layer, kvq_type *types, kvq_error *err);

/* ------------------------------------------------------------------ model */

typedef struct kvq_model kvq_model;

typedef enum kvq_arch { KVQ_ARCH_LLAMA = 0, KVQ_ARCH_QWEN2, KVQ_ARCH_QWEN3 } kvq_arch;

typedef struct kvq_model_info {
    kvq_arch arch;
    const char *arch_name;
    int n_embd, n_layer, n_head, n_head_kv;
    int head_dim_k, head_dim_v;
    int n_ff, n_vocab, n_ctx_train;
    float rope_base, rms_eps;
    bool rope_neox;               /* half-split pairs (qwen) vs adjacent */
    int bos_id, eos_id;           /* -1 when absent                      */
    bool add_bos;
} kvq_model_info;

KVQ_API kvq_status kvq_model_load(const char *path, kvq_model **out, kvq_error *err);
/* Where the weights live.  KVQ_LOAD_MMAP (what kvq_model_load does): the
 * file is mapped read-only and the weights are read in place from the
 * page cache (instant load, shared between processes).  KVQ_LOAD_READ
 * (llama.cpp's --no-mmap): the file is read whole into private memory
 * first (a load at disk speed, the file's size in private memory).  The
 * results are the same bits; the speed may not be: on some machines
 * decoding from the page cache stalls now and then where private memory
 * does not (docs/engine.md; measured in docs/performance.md). */
typedef enum kvq_load_mode { KVQ_LOAD_MMAP = 0, KVQ_LOAD_READ = 1 } kvq_load_mode;
KVQ_API kvq_status kvq_model_load_ex(const char *path, kvq_load_mode mode, kvq_model **out, kvq_error *err);
KVQ_API void kvq_model_free(kvq_model *m);
KVQ_API const kvq_model_info *kvq_model_get_info(const kvq_model *m);

/* Tokenizer of the model's vocabulary.  Returns the number of tokens (it
 * may exceed cap: then call again with a larger buffer), or -1 on error. */
KVQ_API int kvq_tokenize(const kvq_model *m, const char *text, size_t len, bool add_bos,
                 bool parse_special, int32_t *out, int cap);
/* The bytes a token stands for (byte tokens decoded, ▁ as space); returns
 * the length written (<= cap, not NUL-terminated). */
KVQ_API int kvq_token_to_piece(const kvq_model *m, int32_t token, char *buf, int cap);

/* An evaluation context: a model, its cache, scratch memory and threads. */
typedef struct kvq_ctx kvq_ctx;
KVQ_API kvq_status kvq_ctx_create(const kvq_model *m, const kvq_cache_params *cache,
                          int n_threads, kvq_ctx **out, kvq_error *err);
KVQ_API void kvq_ctx_free(kvq_ctx *ctx);
KVQ_API kvq_cache *kvq_ctx_cache(kvq_ctx *ctx);
/* The context's model, logits per row (n_vocab), threads and most tokens
 * per kvq_ctx_eval (the cache's max_batch). */
KVQ_API const kvq_model *kvq_ctx_model(const kvq_ctx *ctx);
KVQ_API int kvq_ctx_n_vocab(const kvq_ctx *ctx);
KVQ_API int kvq_ctx_threads(const kvq_ctx *ctx);
KVQ_API int kvq_ctx_max_batch(const kvq_ctx *ctx);
/* Activations of the weight products.  KVQ_ACT_F32 (the default): every
 * product multiplies f32 activations.  KVQ_ACT_INT8: the input of each
 * product with q8_0, q4_0, q4_K, q5_K or q6_K weights is rounded once per
 * token to int8 blocks (32 values, or 256 for the K-quants, one float
 * scale each, as llama.cpp does) and multiplied with exact integer sums,
 * and so is the query where it scores a q4_0, q4_1, kvarn4 or trellis
 * (turbo2/3/4_tcq) K cache (int16 blocks, or f32 for the TurboQuant
 * types, otherwise, and for the other cache types, where bytes are not
 * faster): faster, results differ (docs/engine.md gives the KLD it
 * costs); other weight types keep f32.  KVQ_ACT_QUERY8: the attention
 * half alone: f32 weight products, the query of such a K rounded to int8
 * (its KLD is within noise of the unrounded query's on the models
 * measured, docs/performance.md; the K scores take 0.70-0.75x the time
 * for q4_0/q4_1, 0.7-0.85x for the trellis types with AVX-512 VBMI).
 * Each gives the same bits for any thread count.  KVQ_ACT_INT8 allocates
 * the quantised rows on first use (KVQ_ERR_NOMEM). */
typedef enum kvq_act { KVQ_ACT_F32 = 0, KVQ_ACT_INT8 = 1, KVQ_ACT_QUERY8 = 2, KVQ_ACT_COUNT /* not a value */ } kvq_act;
KVQ_API kvq_status kvq_ctx_set_activations(kvq_ctx *ctx, kvq_act act, kvq_error *err);
KVQ_API kvq_act kvq_ctx_activations(const kvq_ctx *ctx);
/* kvq_cache_shift with the model's RoPE. */
KVQ_API kvq_status kvq_ctx_shift(kvq_ctx *ctx, int n_discard, int keep_first, kvq_error *err);
/* A hash of the model file as loaded: its size, metadata, tensor directory
 * and sampled tensor bytes (what state and base files are tied to). */
KVQ_API uint64_t kvq_model_hash(const kvq_model *m);
/* Evaluate n tokens at positions pos..pos+n-1 (n <= cache max_batch).
 * logits: NULL, or [n][n_vocab] (all rows), or with last_only the row of
 * the last token only. */
KVQ_API kvq_status kvq_ctx_eval(kvq_ctx *ctx, const int32_t *tokens, int n, int pos,
                        float *logits, bool last_only, kvq_error *err);

/* ------------------------------------------------------- model queries */

/* The model's RoPE frequency scale (1 / the linear scaling factor of
 * rope.scaling.factor; 1 when the file has none). */
KVQ_API float kvq_model_rope_freq_scale(const kvq_model *m);

/* Weights as the model reads them. */
typedef struct kvq_model_weights {
    kvq_type embd_type;           /* token_embd                             */
    kvq_type output_type;         /* the output projection                  */
    bool output_tied;             /* the output projection is token_embd    */
    double decode_bytes;          /* bytes of weights one decode step reads:
                                     every matrix of every layer and the
                                     output once, one embedding row, the
                                     norm vectors and biases               */
} kvq_model_weights;
KVQ_API void kvq_model_get_weights(const kvq_model *m, kvq_model_weights *out);

/* One tensor of the model's GGUF file.  name is NOT NUL-terminated
 * (name_len bytes) and, like data, points into the model's mapping: valid
 * until kvq_model_free. */
typedef struct kvq_tensor_info {
    const char *name;
    int name_len;
    kvq_type type;
    int n_dims;
    int64_t ne[4];                /* ne[0] = values per row (contiguous)    */
    size_t nbytes;
    const void *data;
} kvq_tensor_info;
/* Number of tensors in the file. */
KVQ_API int64_t kvq_model_n_tensors(const kvq_model *m);
/* Tensor i (0 <= i < kvq_model_n_tensors); KVQ_ERR_ARG outside. */
KVQ_API kvq_status kvq_model_tensor(const kvq_model *m, int64_t i, kvq_tensor_info *out, kvq_error *err);

/* Metadata (the GGUF key/value pairs), by key.  String values are copied
 * into buf NUL-terminated and truncated to cap - 1 bytes; the return is
 * the value's full length (as snprintf: call again with a larger buffer
 * when it is >= cap), or -1 when the key is absent or not a string. */
KVQ_API long kvq_model_meta_str(const kvq_model *m, const char *key, char *buf, size_t cap);
/* An integer value of any width (false when absent, not an integer, or
 * out of int64 range). */
KVQ_API bool kvq_model_meta_int(const kvq_model *m, const char *key, int64_t *out);
/* A float value, float32 or float64 (false when absent or of another
 * type). */
KVQ_API bool kvq_model_meta_float(const kvq_model *m, const char *key, float *out);
/* The chat template (tokenizer.chat_template), as kvq_model_meta_str;
 * -1 when the model has none.  kvq does not apply it: it is the text a
 * caller's template engine needs. */
KVQ_API long kvq_model_chat_template(const kvq_model *m, char *buf, size_t cap);

/* -------------------------------------------------------------- tokenizer */

/*
 * The vocabulary and its tokenizer (SentencePiece- and byte-level-BPE
 * vocabularies of GGUF files, with llama.cpp's results).  Immutable once
 * made: calls on one tokenizer may run at the same time.  A model owns
 * its tokenizer (kvq_model_tokenizer); kvq_tokenizer_open reads one from
 * a GGUF file without its weights, and the caller frees that one.
 */
typedef struct kvq_tokenizer kvq_tokenizer;
KVQ_API kvq_status kvq_tokenizer_open(const char *path, kvq_tokenizer **out, kvq_error *err);
KVQ_API void kvq_tokenizer_free(kvq_tokenizer *t);
/* The model's own tokenizer: valid until kvq_model_free, never freed by
 * the caller. */
KVQ_API const kvq_tokenizer *kvq_model_tokenizer(const kvq_model *m);

/* Tokenize len bytes of text (any bytes: invalid UTF-8 becomes byte
 * tokens).  add_special: add BOS and/or EOS where the vocabulary asks for
 * them; parse_special: recognise control tokens' text (e.g. "<s>").
 * Writes at most cap ids and returns how many there are (may exceed cap:
 * call again with more room), or -1 when out of memory. */
KVQ_API int kvq_tokenizer_encode(const kvq_tokenizer *t, const char *text, size_t len, bool add_special,
                                 bool parse_special, int32_t *out, int cap);
/* The bytes token id stands for (control tokens: none; "▁" as a space,
 * byte tokens as their byte).  Writes at most cap bytes, not
 * NUL-terminated, and returns how many (<= cap), or -1 for an id outside
 * the vocabulary. */
KVQ_API int kvq_tokenizer_piece(const kvq_tokenizer *t, int32_t id, char *buf, int cap);
/* The text of n tokens: their pieces one after another (so a
 * SentencePiece vocabulary's text starts with the space it prepends),
 * NUL-terminated in buf (truncated to cap - 1 bytes; cap may be 0 with
 * buf NULL).  Returns the full length (as snprintf), or -1 when an id is
 * outside the vocabulary or memory runs out. */
KVQ_API long kvq_tokenizer_decode(const kvq_tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap);

KVQ_API int32_t kvq_tokenizer_n_vocab(const kvq_tokenizer *t);
KVQ_API int32_t kvq_tokenizer_bos(const kvq_tokenizer *t);  /* -1 when none */
KVQ_API int32_t kvq_tokenizer_eos(const kvq_tokenizer *t);  /* -1 when none */
KVQ_API bool kvq_tokenizer_add_bos(const kvq_tokenizer *t); /* the vocabulary's default */

/* Token types as GGUF stores them (tokenizer.ggml.token_type). */
typedef enum kvq_token_type {
    KVQ_TOKEN_UNDEFINED = 0, KVQ_TOKEN_NORMAL = 1, KVQ_TOKEN_UNKNOWN = 2, KVQ_TOKEN_CONTROL = 3,
    KVQ_TOKEN_USER_DEFINED = 4, KVQ_TOKEN_UNUSED = 5, KVQ_TOKEN_BYTE = 6
} kvq_token_type;
/* The type of token id; KVQ_TOKEN_UNDEFINED outside the vocabulary. */
KVQ_API kvq_token_type kvq_tokenizer_token_type(const kvq_tokenizer *t, int32_t id);
/* A special token: control, user-defined or unknown (the ones matched in
 * raw text with parse_special); false outside the vocabulary. */
KVQ_API bool kvq_tokenizer_is_special(const kvq_tokenizer *t, int32_t id);
/* The end-of-text token (EOS), where a generation stops. */
KVQ_API bool kvq_tokenizer_is_eos(const kvq_tokenizer *t, int32_t id);

/* ---------------------------------------------------------------- sampler */

/*
 * Choosing the next token from a row of logits.  temp <= 0: greedy (the
 * highest logit, lowest id on ties).  Otherwise, in llama.cpp's order:
 * keep the top_k highest logits (top_k <= 0: all), then the smallest set
 * of those whose probabilities (softmax at temperature 1) sum to at least
 * top_p (top_p >= 1: all), then draw from the softmax of the survivors'
 * logits / temp.  The random numbers come from the sampler's own
 * splitmix64 generator: the same seed gives the same choices on every
 * platform.  NaN logits count as -inf.
 */
typedef struct kvq_sampler_params {
    float temp;        /* <= 0: greedy                        */
    int top_k;         /* <= 0: no limit                      */
    float top_p;       /* >= 1: no limit                      */
    uint64_t seed;
} kvq_sampler_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95; seed 0. */
KVQ_API void kvq_sampler_params_default(kvq_sampler_params *p);
/* A fresh seed in 0..2^32-1 (so that a run can be replayed with it): 8
 * bytes of /dev/urandom, or the clock and process id when that cannot be
 * read. */
KVQ_API uint64_t kvq_sampler_random_seed(void);

typedef struct kvq_sampler kvq_sampler;
/* KVQ_ERR_ARG when temp or top_p is NaN, KVQ_ERR_NOMEM; the caller
 * frees *out with kvq_sampler_free. */
KVQ_API kvq_status kvq_sampler_create(const kvq_sampler_params *p, kvq_sampler **out, kvq_error *err);
KVQ_API void kvq_sampler_free(kvq_sampler *s);
/* Restart the random sequence from a seed. */
KVQ_API void kvq_sampler_reseed(kvq_sampler *s, uint64_t seed);
/* The chosen token id, or -1 for bad input (no logits, n_vocab < 1) or
 * when out of memory.  Not thread-safe per sampler (it advances its
 * generator and reuses scratch memory). */
KVQ_API int kvq_sample(kvq_sampler *s, const float *logits, int n_vocab);

/* ------------------------------------------------------- cache queries */

/* The cache's parameters as created (a copy kept by the cache; its
 * layer_type_k/v point into the cache and hold every layer's type). */
KVQ_API const kvq_cache_params *kvq_cache_get_params(const kvq_cache *c);
/* The body type of one layer's K (is_v false) or V side; KVQ_TYPE_COUNT
 * for a layer outside 0..n_layer-1. */
KVQ_API kvq_type kvq_cache_layer_type(const kvq_cache *c, int layer, bool is_v);
/* The most exact first positions any layer and side keeps (the sink,
 * rounded up to KVarN's first tile): kvq_cache_shift's keep_first must be
 * at least this. */
KVQ_API int kvq_cache_sink_rows(const kvq_cache *c);
/* Positions layer holds (the next write starts there); -1 for a NULL
 * cache or a layer outside 0..n_layer-1. */
KVQ_API int kvq_cache_n_stored(const kvq_cache *c, int layer);
/* Bytes one query row at position qp reads from the cache, over every
 * layer: for each side and KV head the row of every key 0..qp from the
 * copy it is read from (exact sink and tail rows, body rows; a tile
 * body's key costs its tile's records / 128).  For bandwidth bounds. */
KVQ_API double kvq_cache_query_bytes_all(const kvq_cache *c, int qp);

/* ------------------------------------------------------------ utilities */

/* Texts (-f, -p @file, tokenize): 256 MiB is far above any evaluation
 * text and low enough that tokenising it cannot exhaust memory. */
#define KVQ_TEXT_CAP ((size_t)256 << 20)
/* Read a whole file: only regular files (a directory, /dev/zero or a FIFO
 * is refused by its type, before any allocation), never more than cap
 * bytes (a clear error instead of a huge allocation).  On success *buf
 * (malloc'ed, the caller frees) holds *len bytes plus a NUL; `what`
 * ("text file") names the file in messages. */
KVQ_API kvq_status kvq_read_file(const char *path, const char *what, size_t cap, char **buf, size_t *len,
                                 kvq_error *err);
/* The rest of an open stream (standard input), at most cap bytes, the
 * same way; name is used in messages. */
KVQ_API kvq_status kvq_read_stream(FILE *f, const char *name, size_t cap, char **buf, size_t *len, kvq_error *err);
/* Seconds of a monotonic clock (differences are elapsed time). */
KVQ_API double kvq_now_seconds(void);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
