/*
 * kvq_eval.h - public API of kvq's evaluation layer, on top of kvq.h: the
 * perplexity/KLD protocol over a token stream, KLD base files (llama.cpp's
 * 16-bit one and kvq's exact one), per-token statistics and their summary,
 * result rows and their files (table, CSV, JSON, ladder, plots), the
 * sweep's grid, generation drift, the budget planner, calibration, and
 * the small entry points of kvq's developer commands.  What every `kvq`
 * subcommand is built from (tools/ compile against include/ alone).
 *
 * Conventions as kvq.h: calls that can fail return a kvq_status and fill
 * a caller's kvq_error (NULL allowed); a pointer returned through `out`
 * is the caller's to free with the matching _free/_close call; structs
 * declared here with fields are plain data the caller may read and fill;
 * handles without fields are opaque.  The formats and definitions are
 * in docs/spec/eval.md.
 */
#ifndef KVQ_EVAL_H
#define KVQ_EVAL_H

#include "kvq.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------- the evaluation protocol (src/model/chunks.c) */

/* Tokens per evaluation batch when none is asked for: llama.cpp's
 * physical batch (-ub) default.  kvq has one batch size (-b), the one
 * that sizes the scratch memory, so it takes -ub's value rather than
 * -b's 2048: memory then stays flat as -c grows. */
enum { KVQ_EVAL_BATCH_DEFAULT = 512 };

/* The batch of a run: requested (0 = default), never above n_ctx. */
static inline int kvq_eval_batch(int requested, int n_ctx) {
    const int b = requested > 0 ? requested : KVQ_EVAL_BATCH_DEFAULT;
    return b < n_ctx ? b : n_ctx;
}

typedef struct kvq_chunk_run {
    const int32_t *tokens;   /* n_ctx * n_chunk tokens                   */
    int n_ctx, n_chunk, n_batch;
    int bos;                 /* id replacing each chunk's first token, -1: none */
} kvq_chunk_run;

/* First scored position of a chunk (docs/spec/eval.md §1). */
static inline int kvq_chunk_first_scored(int n_ctx) { return n_ctx / 2; }

/* index counts scored positions from 0 across all chunks. */
typedef kvq_status (*kvq_scored_fn)(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err);

/* seconds (may be NULL) receives the time spent in kvq_ctx_eval. */
KVQ_API kvq_status kvq_eval_chunks(kvq_ctx *ctx, const kvq_chunk_run *run, kvq_scored_fn fn, void *ud,
                                   double *seconds, kvq_error *err);

/* ---- llama.cpp's KLD base file and per-token comparisons (src/eval/kld.c) */

/* Positions scored per chunk: n_ctx/2 .. n_ctx-2. */
static inline int kvq_kld_first_scored(int n_ctx) { return n_ctx / 2; }
static inline int kvq_kld_scored_per_chunk(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }
static inline size_t kvq_kld_record_len(int n_vocab) { return 4 + 2 * (((size_t)n_vocab + 1) / 2); }
/* A llama.cpp base file read into memory (opaque). */
typedef struct kvq_kld_base kvq_kld_base;
KVQ_API kvq_status kvq_kld_base_read(const char *path, kvq_kld_base **out, kvq_error *err);
KVQ_API void kvq_kld_base_free(kvq_kld_base *b);
/* Writer: header and tokens at open, one record per scored position. */
typedef struct kvq_kld_writer kvq_kld_writer;
KVQ_API kvq_status kvq_kld_writer_open(const char *path, int n_ctx, int n_vocab, int n_chunk,
                                       const int32_t *tokens, kvq_kld_writer **out, kvq_error *err);
KVQ_API kvq_status kvq_kld_writer_add(kvq_kld_writer *w, const float *logits, kvq_error *err);
/* Closes and frees; reports a short file (fewer records than announced). */
KVQ_API kvq_status kvq_kld_writer_close(kvq_kld_writer *w, kvq_error *err);
/* One position compared: test logits against a base record. */
typedef struct kvq_kld_token {
    double kld;        /* KL(base || test), nats                        */
    double nll;        /* -log p_test(next token)                       */
    double nll_base;   /* -log p_base(next token)                       */
    double dp;         /* p_test(next) - p_base(next)                   */
    bool same_top;     /* argmax of test == argmax of base              */
} kvq_kld_token;
/* log sum_i exp(x[i]), the log-softmax's normaliser: the maximum taken
 * out first, the sum of exp(x[i] - max) in double.  Every log-softmax in
 * kvq (base writers, comparisons, NLL) goes through this one function. */
KVQ_API double kvq_log_sum_exp(const float *x, int n);

/* Index of the largest value (the first on ties). */
KVQ_API int kvq_argmax(const float *x, int n);

/* -log softmax(logits)[tok], with the sum of exponentials in double. */
KVQ_API double kvq_nll(const float *logits, int n_vocab, int tok);

/* ------------------- kvq's exact KLD base file (src/eval/base_kvq.c) */

/* Which base format a file holds, from its first 8 bytes. */
typedef enum kvq_base_format { KVQ_BASE_UNKNOWN = 0, KVQ_BASE_LLAMA, KVQ_BASE_KVQ } kvq_base_format;
KVQ_API kvq_base_format kvq_base_sniff(const char *path);
/* Hash identifying a model file without reading all of it:
 *   hash64 over  [file size as uint64 LE]
 *                [the first min(size, 16 MiB) bytes: GGUF header, metadata
 *                 (vocabulary included) and tensor directory, and for small
 *                 models the whole file]
 *                [when size > 16 MiB: 1024 samples of 4096 bytes at offsets
 *                 16 MiB + i*(size - 16 MiB - 4096)/1023, i = 0..1023]
 * about 20 MiB read for any size.  A re-quantised or different model
 * differs in size, metadata or sampled tensor bytes. */
KVQ_API kvq_status kvq_model_file_hash(const char *path, uint64_t *hash, kvq_error *err);
/* ------------------------------------------------------------- writing */

typedef struct kvq_base_kvq_writer kvq_base_kvq_writer;

/* Creates path and writes the tokens (n_ctx*n_chunk of them). */
KVQ_API kvq_status kvq_base_kvq_writer_open(const char *path, uint64_t model_hash, int n_ctx, int n_vocab,
                                            int n_chunk, const int32_t *tokens, kvq_base_kvq_writer **out,
                                            kvq_error *err);
/* One scored position, in order: the raw logits (log-softmax taken here). */
KVQ_API kvq_status kvq_base_kvq_writer_add(kvq_base_kvq_writer *w, const float *logits, kvq_error *err);
/* Completes the header; a file short of positions is an error (and stays
 * unreadable).  Frees w in every case. */
KVQ_API kvq_status kvq_base_kvq_writer_close(kvq_base_kvq_writer *w, kvq_error *err);
/* Opens, validates and checksums path (memory-mapped, read-only): header,
 * exact size, payload hash, tokens in the vocabulary, every log-prob
 * finite and at most 0. */
/* An open kvq base file (opaque; memory-mapped, read-only). */
typedef struct kvq_base_kvq kvq_base_kvq;
KVQ_API kvq_status kvq_base_kvq_open(const char *path, kvq_base_kvq **out, kvq_error *err);
KVQ_API void kvq_base_kvq_close(kvq_base_kvq *b);
/* What an open base holds. */
typedef struct kvq_base_info {
    uint64_t model_hash, token_hash;
    int n_ctx, n_vocab, n_chunk;
    size_t n_pos;               /* scored positions                     */
} kvq_base_info;
KVQ_API void kvq_base_kvq_get_info(const kvq_base_kvq *b, kvq_base_info *out);
/* The base must have been made with this model: a clear error otherwise. */
KVQ_API kvq_status kvq_base_kvq_check_model(const kvq_base_kvq *b, uint64_t model_hash, kvq_error *err);
/* ... and from this text at this context: tokens are the run's first
 * n_ctx*n_chunk tokens (n_tokens of them available). */
KVQ_API kvq_status kvq_base_kvq_check_tokens(const kvq_base_kvq *b, const int32_t *tokens, size_t n_tokens,
                                             int n_ctx, int n_chunk, kvq_error *err);

/* -------------- per-token statistics of a KLD run (src/eval/stats.c) */

typedef struct kvq_tokstats {
    double *kld, *nll, *nll_base, *dp;
    size_t n, cap, n_same_top;
} kvq_tokstats;

KVQ_API void kvq_tokstats_init(kvq_tokstats *s);
KVQ_API void kvq_tokstats_free(kvq_tokstats *s);
KVQ_API kvq_status kvq_tokstats_add(kvq_tokstats *s, const kvq_kld_token *tok, kvq_error *err);
/* The percentile levels reported (fractions), in the order of p_kld/p_dp. */
enum { KVQ_N_PCT = 8 };
typedef struct kvq_kld_summary {
    size_t n;
    double ppl_q, ppl_q_se, ppl_base, ppl_base_se;
    double ln_ratio, ln_ratio_se;         /* mean of ln p_base - ln p_test   */
    double ppl_diff_se;                   /* se of PPL(Q) - PPL(base)        */
    double cor;                           /* corr(nll, nll_base)             */
    double mean_kld, mean_kld_se, median_kld, min_kld, max_kld;
    double p_kld[KVQ_N_PCT];
    double same_top, same_top_se;         /* fractions (0..1)                */
    double mean_dp, mean_dp_se, rms_dp, rms_dp_se, min_dp, max_dp, median_dp;
    double p_dp[KVQ_N_PCT];
} kvq_kld_summary;

/* Fails (KVQ_ERR_ARG) with fewer than 2 tokens or on allocation failure. */
KVQ_API kvq_status kvq_kld_summarize(const kvq_tokstats *s, kvq_kld_summary *out, kvq_error *err);
/* PPL of a run from its per-token NLLs: exp(mean) and llama.cpp's ±. */
KVQ_API void kvq_ppl_from_nll(const double *nll, size_t n, double *ppl, double *ppl_se);

/* ------------- a KLD reference of either format (src/eval/kld_ref.c) */

/* A view of a base of either format, filled by kvq_kld_ref_open (which
 * owns what it opened: kvq_kld_ref_close frees it) or by the _from_ calls
 * (a view of the caller's base, nothing owned).  The fields are read-only
 * for the caller; own_* are the view's private bookkeeping. */
typedef struct kvq_kld_ref {
    kvq_base_format format;        /* KVQ_BASE_LLAMA or KVQ_BASE_KVQ        */
    const kvq_kld_base *llama;     /* the base, for KVQ_BASE_LLAMA          */
    const kvq_base_kvq *exact;     /* the base, for KVQ_BASE_KVQ            */
    int n_ctx, n_vocab, n_chunk;
    const int32_t *tokens;         /* [n_ctx * n_chunk]                     */
    size_t n_pos;                  /* scored positions                      */
    kvq_kld_base *own_llama;       /* owned when opened from a file         */
    kvq_base_kvq *own_exact;
} kvq_kld_ref;

/* Views of bases the caller keeps (nothing is owned). */
KVQ_API void kvq_kld_ref_from_llama(kvq_kld_ref *r, const kvq_kld_base *b);
KVQ_API void kvq_kld_ref_from_exact(kvq_kld_ref *r, const kvq_base_kvq *b);

/* Opens either format, chosen by the file's magic; a file of neither
 * gets the llama reader's message (it names the missing magic). */
KVQ_API kvq_status kvq_kld_ref_open(const char *path, kvq_kld_ref *r, kvq_error *err);
KVQ_API void kvq_kld_ref_close(kvq_kld_ref *r);

/* The reference must belong to this model: the vocabulary size for both
 * formats, and for kvq's format the model-file hash (kvq_model_file_hash
 * of model_path).  llama.cpp files carry no model hash. */
KVQ_API kvq_status kvq_kld_ref_check_model(const kvq_kld_ref *r, const char *model_path, const kvq_model_info *in,
                                           kvq_error *err);
/* ... and to this text: the first n_ctx*n_chunk of tokens (n_tokens of
 * them available) are the reference's. */
KVQ_API kvq_status kvq_kld_ref_check_tokens(const kvq_kld_ref *r, const int32_t *tokens, size_t n_tokens, int n_chunk,
                                            kvq_error *err);

/* Scored position pos: test logits against the reference (KVQ_ERR_ARG
 * when pos is past the reference's positions). */
KVQ_API kvq_status kvq_kld_ref_compare(const kvq_kld_ref *r, size_t pos, const float *logits, int next, kvq_kld_token *out,
                                       kvq_error *err);

/* Per-token statistics of a run against a reference: the kvq_scored_fn
 * (above) of every KLD run; ud is a kvq_kld_acc. */
typedef struct kvq_kld_acc {
    const kvq_kld_ref *ref;
    kvq_tokstats stats;
} kvq_kld_acc;
KVQ_API void kvq_kld_acc_init(kvq_kld_acc *a, const kvq_kld_ref *ref);
KVQ_API void kvq_kld_acc_free(kvq_kld_acc *a);
KVQ_API kvq_status kvq_kld_acc_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err);

/* --------------------------------- result rows (src/eval/eval_row.c) */

enum { KVQ_EVAL_LABEL_MAX = 64, KVQ_EVAL_TYPE_MAX = 16 };

typedef struct kvq_eval_row {
    char label[KVQ_EVAL_LABEL_MAX];     /* "q4_0/q4_0", "q8_0/q4_0 tail1024"  */
    char cache_k[KVQ_EVAL_TYPE_MAX];    /* type names as -ctk / -ctv take them */
    char cache_v[KVQ_EVAL_TYPE_MAX];
    int rot_k, rot_v;                   /* Hadamard block of K / V, 0 = none   */
    int tail_tokens, sink_tokens;
    bool is_reference;                  /* the exact-cache row of the sweep    */

    double n_tokens;                    /* scored tokens                       */
    double kv_bytes, kv_bytes_bf16;     /* at the evaluation context (kvq.h:   */
                                        /* persistent cache, exact rows too)   */
    double work_bytes;                  /* transient working memory with it    */
    double size_pct;                    /* 100 * kv_bytes / kv_bytes_bf16      */
    double mib;                         /* MiB at the model's trained context  */

    double mean_kld, mean_kld_se, median_kld;
    double p90_kld, p99_kld, p99_9_kld, max_kld;
    double same_top_p, same_top_se;     /* percent, as `kvq kld --json`        */
    double rms_dp;                      /* RMS of delta-p of the true token, percent */
    double ppl_q, ppl_q_se, ppl_base;
    double pp_tps, tg_tps;              /* prompt / generated tokens per second */

    /* Derived by kvq_eval_rows_precision (percent, docs/spec/eval.md §3). */
    double mean_precision, p99_9_precision;

    /* kvq sweep --drift N (docs/drift.md): the median over the drift
     * prompts of the first generated position whose greedy token differs
     * from the exact cache's (drift_n_gen + 1 = never), and the mean KLD
     * over every generated position; NAN (and drift_n_gen 0) when not run. */
    double drift_first_div, drift_kld;
    int drift_n_gen;
} kvq_eval_row;

/* A row with every number NAN, flags false, strings empty. */
KVQ_API void kvq_eval_row_init(kvq_eval_row *r);

/* Index of the reference row: the first row with is_reference, or -1. */
KVQ_API long kvq_eval_rows_reference(const kvq_eval_row *rows, size_t n);

/* precision (%) = 100 * exp(-(KLD_row - KLD_reference)) for the mean and
 * the 99.9th percentile.  Without a reference row the reference KLD is 0
 * (the exact cache compared with itself). */
KVQ_API void kvq_eval_rows_precision(kvq_eval_row *rows, size_t n);

/* printf one number into buf (cap bytes) for a human table; "-" when it
 * is NAN (not measured).  Returns buf. */
KVQ_API const char *kvq_eval_fmt(char *buf, size_t cap, const char *fmt, double v);

/* Does any row carry drift figures (drift_n_gen > 0)? */
KVQ_API bool kvq_eval_rows_have_drift(const kvq_eval_row *rows, size_t n);
/* The median first divergence for a table: "-" when not measured,
 * "never" when it is past drift_n_gen. */
KVQ_API const char *kvq_eval_fmt_first_div(char *buf, size_t cap, const kvq_eval_row *r);

/* Write text into a markdown table cell: '|' escaped, newlines as spaces. */
KVQ_API void kvq_eval_write_md_text(FILE *f, const char *s);

/* Copy a string into a fixed field, truncating (always NUL-terminated). */
KVQ_API void kvq_eval_copy_str(char *dst, size_t cap, const char *src);

/* ---------------------- the sweep's result files (src/eval/report.c) */

/* What the rows were measured on (any field may be NULL / 0). */
typedef struct kvq_report_meta {
    const char *model, *text;
    int n_ctx, n_chunks;
    const char *activations;      /* of the weight products: NULL = "f32" */
} kvq_report_meta;

KVQ_API kvq_status kvq_report_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                                       const kvq_report_meta *meta, kvq_error *err);
KVQ_API kvq_status kvq_report_write_csv(FILE *f, const kvq_eval_row *rows, size_t n, kvq_error *err);
KVQ_API kvq_status kvq_report_write_json(FILE *f, const kvq_eval_row *rows, size_t n,
                                         const kvq_report_meta *meta, kvq_error *err);

/* Reads a CSV written by kvq_report_write_csv; *rows is malloc'ed (caller
 * frees).  A malformed file is KVQ_ERR_FORMAT with the line number. */
KVQ_API kvq_status kvq_report_read_csv(FILE *f, kvq_eval_row **rows, size_t *n, kvq_error *err);

typedef enum kvq_report_kind { KVQ_REPORT_MD, KVQ_REPORT_CSV, KVQ_REPORT_JSON } kvq_report_kind;
/* Write one of the files to path (created or replaced). */
KVQ_API kvq_status kvq_report_save(const char *path, kvq_report_kind kind, const kvq_eval_row *rows,
                                   size_t n, const kvq_report_meta *meta, kvq_error *err);

/* s as a JSON string: quoted, '"' '\\' and control characters escaped. */
KVQ_API void kvq_json_write_str(FILE *f, const char *s);

/* "42s", "1m20s", "2h05m"; "?" for a negative or non-finite time. */
KVQ_API void kvq_format_duration(char *buf, size_t cap, double seconds);

/* The progress line "[3/12] q4_0/q4_0 ... eta 1m20s" for configuration
 * `index` (1-based) of `total`, about to start.  The ETA extrapolates the
 * runs finished in this process (n_done runs in elapsed_s seconds) to the
 * configurations left, this one included; "eta ?" before the first. */
KVQ_API void kvq_progress_format(char *buf, size_t cap, int index, int total, const char *label,
                                 double elapsed_s, int n_done);

/* --------------------- the recommendation ladder (src/eval/ladder.c) */

typedef enum kvq_tier {
    KVQ_TIER_REFERENCE = 0,
    KVQ_TIER_HIGH_FIDELITY,
    KVQ_TIER_BALANCED,
    KVQ_TIER_COMPACT,
    KVQ_TIER_EMERGENCY,
    KVQ_TIER_COUNT
} kvq_tier;

/* Upper bounds (inclusive) on median KLD, in nats, of the tiers below the
 * reference; above `compact` a configuration is "emergency". */
typedef struct kvq_ladder_thresholds {
    double high_fidelity, balanced, compact;
} kvq_ladder_thresholds;

/* 0.001 / 0.01 / 0.05 nats: a median token keeps >= 99.9% / 99% / 95%
 * "precision" (exp(-KLD)); beyond 0.05 quality loss is usually visible. */
KVQ_API kvq_ladder_thresholds kvq_ladder_default_thresholds(void);

KVQ_API const char *kvq_tier_name(kvq_tier t);   /* "high fidelity", ...     */
KVQ_API kvq_tier kvq_tier_of(const kvq_eval_row *row, const kvq_ladder_thresholds *th);

/* Writes the frontier's row indices, reference first, into idx (room for
 * n entries) and returns how many; 0 when no row qualifies. */
KVQ_API size_t kvq_ladder_frontier(const kvq_eval_row *rows, size_t n, size_t *idx);

/* What the frontier weighs against size (kvq sweep --rank): median KLD
 * (the default, everything above), or with kvq sweep --drift the mean
 * KLD over the generated positions, or the median first divergence
 * (later is better).  The same rule with that measure in place of median
 * KLD; rows without it take no part.  Tiers stay by median KLD. */
typedef enum kvq_ladder_rank { KVQ_RANK_MEDIAN_KLD = 0, KVQ_RANK_DRIFT_KLD, KVQ_RANK_FIRST_DIV } kvq_ladder_rank;
KVQ_API const char *kvq_ladder_rank_name(kvq_ladder_rank r);           /* "median KLD", ... */
/* "median_kld", "drift_kld", "first_div"; false for anything else. */
KVQ_API bool kvq_ladder_rank_parse(const char *s, kvq_ladder_rank *out);
KVQ_API size_t kvq_ladder_frontier_by(const kvq_eval_row *rows, size_t n, kvq_ladder_rank rank, size_t *idx);

/* ladder.md: the thresholds line, then a markdown table of the frontier
 * (tier, cache, size %, MiB, median KLD, mean KLD, 99.9% KLD, same-top). */
KVQ_API kvq_status kvq_ladder_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                                       const kvq_ladder_thresholds *th, kvq_error *err);
/* The same ranked by `rank`; with drift figures in the rows two more
 * columns (first divergence, drift KLD). */
KVQ_API kvq_status kvq_ladder_write_md_by(FILE *f, const kvq_eval_row *rows, size_t n, const kvq_ladder_thresholds *th,
                                          kvq_ladder_rank rank, kvq_error *err);

/* ---------------------------- the sweep's plot (src/eval/plot_svg.c) */

typedef struct kvq_plot_opts {
    int width, height;          /* pixels (800 x 500)                      */
    const char *title;          /* heading; NULL for the default           */
    double kld_floor;           /* lowest decade drawn is at least this    */
} kvq_plot_opts;

KVQ_API void kvq_plot_opts_default(kvq_plot_opts *o);

KVQ_API kvq_status kvq_plot_svg_write(FILE *f, const kvq_eval_row *rows, size_t n,
                                      const kvq_ladder_thresholds *th, const kvq_plot_opts *o,
                                      kvq_error *err);
KVQ_API kvq_status kvq_plot_svg_save(const char *path, const kvq_eval_row *rows, size_t n,
                                     const kvq_ladder_thresholds *th, const kvq_plot_opts *o,
                                     kvq_error *err);

/* Write s with XML's five special characters as entities; control
 * characters XML 1.0 cannot hold become '?'. */
KVQ_API void kvq_xml_write_escaped(FILE *f, const char *s);

/* ---------------- the sweep's configurations (src/eval/sweep_grid.c) */

typedef enum kvq_sweep_rot { KVQ_SWEEP_ROT_ON = 0, KVQ_SWEEP_ROT_OFF, KVQ_SWEEP_ROT_BOTH } kvq_sweep_rot;

typedef struct kvq_sweep_config {
    kvq_type type_k, type_v;
    int tail_tokens;
    kvq_rot_mode rot;                     /* ON, OFF, or AUTO for exact pairs */
    bool is_reference;
    char label[KVQ_EVAL_LABEL_MAX];
    char slug[KVQ_EVAL_LABEL_MAX];
} kvq_sweep_config;

typedef struct kvq_sweep_pair { kvq_type k, v; } kvq_sweep_pair;

typedef struct kvq_sweep_spec {
    kvq_type reference;                   /* exact cache of the reference run */
    const kvq_type *types;
    size_t n_types;
    const kvq_sweep_pair *pairs;
    size_t n_pairs;
    const int *tails;
    size_t n_tails;
    kvq_sweep_rot rot;
    int n_ctx;
    char *notes;                          /* optional: lines about what did not apply */
    size_t notes_cap;
} kvq_sweep_spec;

/* *out (malloc'ed, caller frees) receives the reference then the grid. */
KVQ_API kvq_status kvq_sweep_grid(const kvq_sweep_spec *spec, kvq_sweep_config **out, size_t *n, kvq_error *err);

/* Comma-separated lists; unknown names / bad numbers are KVQ_ERR_ARG with
 * the offending item named.  Outputs are malloc'ed. */
KVQ_API kvq_status kvq_sweep_parse_types(const char *list, kvq_type **out, size_t *n, kvq_error *err);
KVQ_API kvq_status kvq_sweep_parse_pairs(const char *list, kvq_sweep_pair **out, size_t *n, kvq_error *err);
KVQ_API kvq_status kvq_sweep_parse_tails(const char *list, int **out, size_t *n, kvq_error *err);

/* -------------------------- kvq drift's plot (src/eval/plot_drift.c) */

typedef enum kvq_dash { KVQ_DASH_SOLID = 0, KVQ_DASH_DASHED, KVQ_DASH_DOTTED, KVQ_DASH_DASHDOT } kvq_dash;

typedef struct kvq_drift_series {
    const char *label;            /* legend text                           */
    const char *colour_key;       /* lines with equal keys share a colour  */
    kvq_dash dash;
    const int *lo, *hi;           /* bins of generated positions (1-based) */
    const double *y;              /* mean KLD of each bin, nats            */
    size_t n;
    double median_first_div;      /* marked when within 1..n_gen           */
} kvq_drift_series;

KVQ_API kvq_status kvq_plot_drift_write(FILE *f, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                                        kvq_error *err);
KVQ_API kvq_status kvq_plot_drift_save(const char *path, const kvq_drift_series *s, size_t n, int n_gen, const char *title,
                                       kvq_error *err);

/* ---- drift: errors of generated tokens (src/eval/drift.c, drift_stats.c) */

/* One prompt's exact run. */
typedef struct kvq_drift_prompt {
    int32_t *tokens;     /* n_prompt prompt tokens, then the n_gen generated ones */
    int n_prompt;
    float *logits;       /* [n_gen][n_vocab]: exact logits of generated positions 1..n_gen */
    double *log_norm;    /* [n_gen]: their log-sum-exp (kvq_log_sum_exp)              */
    int n_eos;           /* end-of-text tokens among the generated ones              */
} kvq_drift_prompt;

typedef struct kvq_drift_ref {
    int n_gen, n_vocab, eos_id;
    size_t n_prompts;
    kvq_drift_prompt *prompts;   /* [n_prompts]; a slot is filled by kvq_drift_ref_run */
} kvq_drift_ref;

/* Steps evaluated since the last call (prefill tokens and decoding
 * steps); called every few dozen steps and at the end of each prompt.
 * May be NULL. */
typedef void (*kvq_drift_progress_fn)(void *ud, int64_t steps);

/* Memory the reference of n_prompts prompts keeps (logits dominate). */
KVQ_API double kvq_drift_ref_bytes(size_t n_prompts, int n_gen, int n_vocab);

/* A reference of n_prompts empty slots for n_gen generated tokens each. */
KVQ_API kvq_status kvq_drift_ref_init(kvq_drift_ref *ref, size_t n_prompts, int n_gen, int n_vocab, int eos_id,
                                      kvq_error *err);
/* Generate n_gen tokens greedily from prompt with ctx (the exact cache;
 * its cache is cleared first) into slot `index`.  The context must hold
 * n_prompt + n_gen positions.  Different slots may be filled at the same
 * time from different threads, each with its own context. */
KVQ_API kvq_status kvq_drift_ref_run(kvq_drift_ref *ref, size_t index, kvq_ctx *exact, const int32_t *prompt, int n_prompt,
                                     kvq_drift_progress_fn progress, void *ud, kvq_error *err);
KVQ_API void kvq_drift_ref_free(kvq_drift_ref *ref);

/* One cache configuration against a reference. */
typedef struct kvq_drift_run {
    size_t n_prompts;
    int n_gen;
    double *kld;         /* [n_prompts][n_gen]: KLD at generated position i (row i-1) */
    uint8_t *same_top;   /* [n_prompts][n_gen]: tested argmax == the reference's token */
    int *first_div;      /* [n_prompts]: 1..n_gen, n_gen + 1 = never                  */
} kvq_drift_run;

/* Teacher-forced run of ctx (its cache cleared per prompt) over every
 * prompt of ref (all slots filled); *out is allocated (kvq_drift_run_free).
 * Several runs may read one reference at the same time. */
KVQ_API kvq_status kvq_drift_measure(kvq_ctx *ctx, const kvq_drift_ref *ref, kvq_drift_progress_fn progress, void *ud,
                                     kvq_drift_run *out, kvq_error *err);
KVQ_API void kvq_drift_run_free(kvq_drift_run *r);

/* ------------------------------------------------------------ statistics */

/* Position buckets 1-16, 17-64, 65-256, 257-1024, 1025-4096, ... (each 4x
 * the last), the final one cut at n_gen. */
enum { KVQ_DRIFT_MAX_BUCKETS = 16 };

typedef struct kvq_drift_bucket {
    int first, last;                 /* generated positions, inclusive      */
    size_t n;                        /* (prompt, position) pairs             */
    double mean, median, p99;        /* KLD, nats                            */
} kvq_drift_bucket;

typedef struct kvq_drift_summary {
    size_t n_prompts;
    int n_gen;
    double mean_kld, median_kld, p99_kld, max_kld;  /* over every generated position */
    double same_top_p;               /* percent of generated positions       */
    double median_first_div;         /* over prompts; n_gen + 1 = never      */
    double q1_first_div, q3_first_div; /* quartiles of the same              */
    int min_first_div;
    double frac_identical;           /* prompts never diverging within n_gen */
    double mean_kld_at_div;          /* KLD at the first divergence, mean over
                                        the prompts that diverge; NAN if none */
    int n_buckets;
    kvq_drift_bucket bucket[KVQ_DRIFT_MAX_BUCKETS];
} kvq_drift_summary;

/* The bucket bounds for n_gen (n_buckets returned; first/last filled). */
KVQ_API int kvq_drift_buckets(int n_gen, kvq_drift_bucket *b);
KVQ_API kvq_status kvq_drift_summarize(const kvq_drift_run *r, kvq_drift_summary *out, kvq_error *err);

/* One prompt of a run. */
typedef struct kvq_drift_prompt_stats {
    int first_div;                   /* n_gen + 1 = never                     */
    double kld_at_div;               /* NAN when it never diverges            */
    double mean_kld, max_kld;
    double same_top_p;               /* percent                               */
} kvq_drift_prompt_stats;
KVQ_API void kvq_drift_prompt_summary(const kvq_drift_run *r, size_t prompt, kvq_drift_prompt_stats *out);

/* Mean KLD over prompts of log-spaced position bins (1, 2, ..., 8 alone,
 * then 4 bins per doubling), for the plot: bin k covers positions
 * lo[k]..hi[k] and its mean is y[k].  Room for cap bins (KVQ_DRIFT_CURVE_MAX
 * cover any n_gen up to 2^24); returns the number written. */
enum { KVQ_DRIFT_CURVE_MAX = 96 };
KVQ_API size_t kvq_drift_curve(const kvq_drift_run *r, int *lo, int *hi, double *y, size_t cap);

/* ------------------------------------------------------------- prompts */

/* Prompt files: one prompt per line; lines of only blanks are skipped and
 * a trailing CR is dropped.  text is modified in place (line ends become
 * NUL); *lines (malloc'ed) points into it.  *n may be 0: the caller
 * refuses an empty file with its own message.  text[len] must exist (a
 * NUL, as kvq_read_file leaves it). */
KVQ_API kvq_status kvq_drift_split_prompts(char *text, size_t len, char ***lines, size_t *n, kvq_error *err);

/* --------------------- kvq drift's results (src/eval/drift_report.c) */

typedef struct kvq_drift_row {
    char label[KVQ_EVAL_LABEL_MAX];       /* "q4_0/q4_0 tail128 rot-off"       */
    char colour_key[KVQ_EVAL_LABEL_MAX];  /* the K/V pair: one colour per pair */
    char cache_k[KVQ_EVAL_TYPE_MAX], cache_v[KVQ_EVAL_TYPE_MAX];
    int rot_k, rot_v;                     /* Hadamard blocks, 0 = none         */
    int tail_tokens, sink_tokens;
    bool rot_off;                         /* rotation switched off on request  */
    double kv_bytes, size_pct;            /* at the run's context; % of bf16   */
    double seconds;                       /* time of the measurement           */
    bool done;                            /* run and sum are filled            */
    kvq_drift_run run;
    kvq_drift_summary sum;
} kvq_drift_row;

typedef struct kvq_drift_meta {
    const char *model, *prompts;          /* prompt file, or NULL for -p       */
    int n_ctx;                            /* positions of the contexts         */
    int threads;
} kvq_drift_meta;

KVQ_API kvq_status kvq_drift_write_md(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                                      bool per_prompt, kvq_error *err);
/* One JSON object (one line, newline-terminated) for row r. */
KVQ_API kvq_status kvq_drift_write_json_row(FILE *f, const kvq_drift_row *r, const kvq_drift_meta *meta, kvq_error *err);
/* {"kvq_version", "model", "prompts", "n_ctx", "configs": [objects]}. */
KVQ_API kvq_status kvq_drift_write_json(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                                        kvq_error *err);
KVQ_API kvq_status kvq_drift_write_prompts_csv(FILE *f, const kvq_drift_row *rows, size_t n, kvq_error *err);

/* ---- the KV-cache budget planner (src/eval/planner.c, plan_choose.c) */

enum { KVQ_PLAN_MAX_TYPES = 32 };

/* Called after every KLD run of the sensitivity pass: run `done` of
 * `total`, which (layer, side 0 = K / 1 = V, type) and its mean KLD. */
typedef void (*kvq_plan_progress_fn)(void *ud, int done, int total, int layer, int side, kvq_type type,
                                     double mean_kld);

typedef struct kvq_plan_setup {
    const kvq_model *model;
    const kvq_kld_ref *reference;  /* tokens and exact log-probs (either format) */
    int n_chunk;                   /* chunks used, 1..reference->n_chunk        */
    int n_batch;                   /* tokens per evaluation (<= n_ctx)          */
    int n_threads;                 /* 0: online cores                           */
    kvq_cache_params cache;        /* rotation request; types are set per run   */
    kvq_type exact_type;           /* "all else exact" (f32)                    */
    kvq_plan_progress_fn progress; /* may be NULL                               */
    void *progress_ud;
} kvq_plan_setup;

/* Defaults: f32 exact, batch kvq_eval_batch(0, n_ctx), every chunk. */
KVQ_API void kvq_plan_setup_init(kvq_plan_setup *s, const kvq_model *m, const kvq_kld_ref *reference);

/* The exact cache's logits over n_chunk chunks of n_ctx tokens, held in
 * memory in the base-file encoding (llama.cpp's 16-bit records), so that every comparison
 * reads the same thing as with a file made by llama.cpp. */
KVQ_API kvq_status kvq_plan_reference(const kvq_model *m, const int32_t *tokens, int n_ctx, int n_chunk, int n_threads,
                                      kvq_kld_base **out, kvq_error *err);

/* One real KLD run of a configuration (types_k/types_v: n_layer each). */
typedef struct kvq_plan_measurement {
    kvq_kld_summary kld;
    size_t kv_bytes;        /* the cache at the reference's context            */
    size_t work_bytes;      /* its transient working memory                    */
    size_t kv_bytes_bf16;   /* a bf16 cache of the same shape and context      */
    double size_pct;        /* 100 * kv_bytes / kv_bytes_bf16                  */
} kvq_plan_measurement;
KVQ_API kvq_status kvq_plan_measure(const kvq_plan_setup *s, const kvq_type *types_k, const kvq_type *types_v,
                                    kvq_plan_measurement *out, kvq_error *err);

/* Sensitivity table of a model for a list of candidate types. */
typedef struct kvq_plan_table {
    int n_layer, n_types;
    kvq_type types[KVQ_PLAN_MAX_TYPES];
    size_t row_bytes[2][KVQ_PLAN_MAX_TYPES]; /* per token, one layer: [K/V][type] */
    size_t bf16_bytes_per_token;             /* all layers, both sides           */
    double floor_kld;                        /* mean KLD of the all-exact cache  */
    double *measured;                        /* [n_layer][2][n_types] mean KLD   */
    double *sens;                            /* same shape: max(0, measured - floor) */
} kvq_plan_table;

/* Runs 1 + 2 * n_layer * n_types KLD runs. */
KVQ_API kvq_status kvq_plan_sensitivities(const kvq_plan_setup *s, const kvq_type *types, int n_types,
                                          kvq_plan_table *out, kvq_error *err);
KVQ_API void kvq_plan_table_free(kvq_plan_table *t);
static inline size_t kvq_plan_table_index(const kvq_plan_table *t, int layer, int side, int type) {
    return ((size_t)layer * 2 + (size_t)side) * (size_t)t->n_types + (size_t)type;
}

/* Byte budgets in bytes per token (all layers, both sides). */
KVQ_API size_t kvq_plan_budget_pct(const kvq_model_info *in, double pct);
/* MiB at the model's trained context; 0 when n_ctx_train is unknown. */
KVQ_API size_t kvq_plan_budget_mib(const kvq_model_info *in, double mib);
KVQ_API size_t kvq_plan_bf16_bytes_per_token(const kvq_model_info *in);
/* Bytes per token of the smallest plan the candidates allow (each side in
 * its lightest type): checked before any measuring. */
KVQ_API size_t kvq_plan_smallest_bytes(const kvq_model_info *in, const kvq_type *types, int n_types);

typedef struct kvq_plan {
    int n_layer;
    kvq_type *types_k, *types_v;  /* [n_layer], owned                    */
    double predicted_kld;         /* floor + sum of the picked sensitivities */
    size_t bytes_per_token;       /* all layers, both sides               */
    size_t budget_bytes_per_token;
    bool exact;                   /* the knapsack's optimum (src/eval/knapsack.h says when) */
} kvq_plan;

/* The plan with the least predicted KLD within the budget; KVQ_ERR_ARG
 * (with the smallest possible size in the message) when nothing fits. */
KVQ_API kvq_status kvq_plan_choose(const kvq_plan_table *t, size_t budget_bytes_per_token, kvq_plan *out, kvq_error *err);
/* Prediction of any per-layer configuration whose types are in the table
 * (-1 when some type is not a candidate). */
KVQ_API double kvq_plan_predict(const kvq_plan_table *t, const kvq_type *types_k, const kvq_type *types_v);
KVQ_API void kvq_plan_free(kvq_plan *p);

/* The plan as cache flags for kvq run / kvq kld:
 *   "-ctk q4_0 -ctv q4_0 --cache-type-k-layers 0:q8_0 --cache-type-v-layers 1-2:q5_0"
 * (-ctk/-ctv: each side's most used type; runs of other layers as ranges).
 * Returns the length it needs (as snprintf). */
KVQ_API size_t kvq_plan_format_flags(const kvq_type *types_k, const kvq_type *types_v, int n_layer, char *buf, size_t cap);

/* ------------------------------------------------------------ calibration */

/* Called before the first chunk (done 0) and after each one. */
typedef void (*kvq_calib_progress_fn)(void *ud, int done, int total);

typedef struct kvq_calib_run {
    const int32_t *tokens;        /* n_chunk * n_ctx tokens                  */
    int n_ctx, n_chunk, n_batch;  /* chunk length, chunks, tokens per batch  */
    int bos;                      /* replaces each chunk's first token; -1: none */
    double query_mix;             /* the queries' share in K's error metric, */
                                  /* 0..1 (docs/calibration.md: 0.2)        */
    kvq_calib_progress_fn progress; /* may be NULL                          */
    void *progress_ud;
} kvq_calib_run;

/* `kvq calibrate` (docs/calibration.md): ctx's model reads every chunk
 * (ctx must hold an exact, unrotated cache of n_ctx positions: f32, rot
 * off), its keys, values and queries are measured, and a calibration of
 * every rate is fitted.  *out: the caller frees it (kvq_calib_free); it
 * is tied to the model (kvq_model_hash) and can be written with
 * kvq_calib_write.  pred_db (may be NULL): *pred_db (malloc'ed, the
 * caller frees) receives [n_layer][n_head_kv][2 (K, V)][n_rates] the
 * predicted gain in dB of the fitted code over an isotropic one of the
 * same bits.  n_positions (may be NULL): positions measured per layer. */
KVQ_API kvq_status kvq_calibrate(kvq_ctx *ctx, const kvq_calib_run *run, kvq_calib **out, double **pred_db,
                                 long long *n_positions, kvq_error *err);

/* ----------------------------------------------------------------- codecs */

/*
 * Rows coded and decoded the way a cache stores one KV head's rows, to
 * measure a format's error on a caller's data (`kvq quant-test`):
 *   - row types (plain and block): each row alone; with rot_block > 0
 *     rotated by the block-diagonal normalised Hadamard (kvq_rotate_row)
 *     first and rotated back after;
 *   - TurboQuant: the format's own rotation R (rot_block is ignored);
 *   - KVarN (tile types): groups of 128 rows, one tile per slice (64
 *     wide for dim <= 64, else 128; rows zero-padded to whole slices),
 *     rotated by the normalised Hadamard over the slice, quantised as a K
 *     tile (one scale per channel), decoded and rotated back;
 *   - calibrated types: a code fitted at creation to n_train training
 *     rows (plain squared error), dim at most KVQ_MAX_HEAD_DIM.
 */
typedef struct kvq_codec kvq_codec;
typedef struct kvq_codec_opts {
    int rot_block;                /* row types: Hadamard block, 0 = none   */
    const float *train;           /* calibrated types: n_train rows of dim */
    int n_train;
} kvq_codec_opts;
/* KVQ_ERR_ARG for a type that is no cache type, dim < 1, or a calibrated
 * type without training rows; the fit's error otherwise.  The caller
 * frees *out with kvq_codec_free. */
KVQ_API kvq_status kvq_codec_create(kvq_type t, int dim, const kvq_codec_opts *o, kvq_codec **out, kvq_error *err);
KVQ_API void kvq_codec_free(kvq_codec *c);
/* Rows coded together: 128 for tile types, else 1. */
KVQ_API int kvq_codec_group(const kvq_codec *c);
/* y (n * dim values) = the n rows of x coded and decoded; n must be a
 * multiple of kvq_codec_group.  Not thread-safe per codec (scratch). */
KVQ_API kvq_status kvq_codec_round_trip(kvq_codec *c, const float *x, int n, float *y, kvq_error *err);

/* ------------------------------------------------------------- TurboQuant */

/* State bits the trellis carries between steps (docs/turbo.md): a
 * codebook of k bits has 2^(KVQ_TURBO_TCQ_CONTEXT + k) entries. */
#define KVQ_TURBO_TCQ_CONTEXT 6
/* Generalised Lloyd training of the k-bit (2..4) trellis codebook on
 * n_vectors seeded unit-Gaussian vectors (`kvq turbo-train`): codebook
 * gets 2^(KVQ_TURBO_TCQ_CONTEXT + k) values, mse (iters + 1 values) the
 * mean squared error per value before each round and after the last. */
KVQ_API kvq_status kvq_turbo_tcq_train(int k, int n_vectors, int iters, uint64_t seed, float *codebook, double *mse,
                                       kvq_error *err);
/* Mean squared error of the Lloyd-Max quantiser of N(0, 1) with 2^bits
 * levels (bits 1..8): the scalar TurboQuant types' per-value error. */
KVQ_API double kvq_turbo_lloyd_mse(int bits);

/* One TurboQuant type measured on unit-Gaussian vectors (`kvq
 * turbo-bench`, docs/turbo.md). */
typedef struct kvq_turbo_bench_row {
    kvq_type type;                /* KVQ_TYPE_TURBO2 ... KVQ_TYPE_TURBO4_TCQ */
    int bits;                     /* b (scalar) or k (trellis)              */
    bool tcq;                     /* a trellis type                         */
    double bpv;                   /* bits per value of a row of d           */
    double nmse;                  /* round trip: |x - x_hat|^2 / |x|^2      */
    double paper;                 /* |x/|x| - x_hat/norm'|^2 (the paper's)  */
    double ip_gain;               /* E[q.x_hat] / q.x on isotropic data     */
    double enc_us, enc_scalar_us; /* encode time per 128 values, SIMD and scalar */
    double dot_ns, axpy_ns;       /* rotated-domain dot and axpy per 128 values */
} kvq_turbo_bench_row;
enum { KVQ_TURBO_BENCH_ROWS = 6 };
/* Every TurboQuant type on the n vectors of d values (1..128) at x, with
 * the rotated query q_rot (d rounded up to 64 or 128 values) for the dot
 * and axpy timings: rows gets KVQ_TURBO_BENCH_ROWS results in the order
 * turbo2, turbo3, turbo4, then the trellis ones.  Each time is the best
 * over a few passes of the mean over 25 consecutive rows (the machine
 * may be shared).  KVQ_ERR_ARG for d outside 1..128 or n < 1. */
KVQ_API kvq_status kvq_turbo_bench(const float *x, int n, int d, const float *q_rot, kvq_turbo_bench_row *rows,
                                   kvq_error *err);
/* Values the rotated query of a row of head_dim holds: 64 for
 * head_dim <= 64, else whole 128-blocks plus 64 or 128 for the rest. */
KVQ_API int kvq_turbo_rot_dim(int head_dim);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_EVAL_H */
