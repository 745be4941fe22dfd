/* drift.h - how quantisation errors accumulate while the model writes its
 * own tokens (docs/spec/eval.md §7, docs/drift.md).
 *
 * The reference: for every prompt, the exact cache (f32) generates n_gen
 * tokens greedily (argmax, first on ties; end-of-text does not stop it,
 * so every prompt contributes exactly n_gen positions).  Its logits at
 * every generated position are kept in memory.
 *
 * A tested cache is then run teacher-forced: the prompt is prefilled in
 * the same batches, then the reference's tokens are fed one decoding step
 * at a time, exactly as a generation would feed them, and at generated
 * position i (1-based: the distribution of the i-th generated token) the
 * tested next-token distribution is compared with the reference's:
 * KL(exact || tested), over the whole vocabulary, in double.
 *
 * Free-running greedy decoding with the tested cache is the same
 * computation up to and including the first position where its greedy
 * token differs from the reference's (the same tokens in, the same cache
 * contents, the same logits).  So the first divergence (the first i whose
 * tested argmax is not the reference's token; n_gen + 1 when there is
 * none) and the KLD there come out of the teacher-forced run;
 * tests/test_drift.c checks that against a real free-running decode.
 *
 * Both contexts must evaluate the same way: the same max_batch (the
 * prompt's prefill batches) and enough positions for the longest prompt
 * plus n_gen.  With an f32 tested cache the logits are bit-identical to
 * the reference's and every KLD is exactly 0. */
#ifndef KVQ_DRIFT_H
#define KVQ_DRIFT_H

#include "kvq_internal.h"

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
double kvq_drift_ref_bytes(size_t n_prompts, int n_gen, int n_vocab);

/* A reference of n_prompts empty slots for n_gen generated tokens each. */
kvq_status kvq_drift_ref_init(kvq_drift_ref *ref, size_t n_prompts, int n_gen, int n_vocab, int eos_id,
                              kvq_error *err);
/* Generate n_gen tokens greedily from prompt with ctx (the exact cache;
 * its cache is cleared first) into slot `index`.  The context must hold
 * n_prompt + n_gen positions.  Different slots may be filled at the same
 * time from different threads, each with its own context. */
kvq_status kvq_drift_ref_run(kvq_drift_ref *ref, size_t index, kvq_ctx *exact, const int32_t *prompt, int n_prompt,
                             kvq_drift_progress_fn progress, void *ud, kvq_error *err);
void kvq_drift_ref_free(kvq_drift_ref *ref);

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
kvq_status kvq_drift_measure(kvq_ctx *ctx, const kvq_drift_ref *ref, kvq_drift_progress_fn progress, void *ud,
                             kvq_drift_run *out, kvq_error *err);
void kvq_drift_run_free(kvq_drift_run *r);

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
int kvq_drift_buckets(int n_gen, kvq_drift_bucket *b);
kvq_status kvq_drift_summarize(const kvq_drift_run *r, kvq_drift_summary *out, kvq_error *err);

/* One prompt of a run. */
typedef struct kvq_drift_prompt_stats {
    int first_div;                   /* n_gen + 1 = never                     */
    double kld_at_div;               /* NAN when it never diverges            */
    double mean_kld, max_kld;
    double same_top_p;               /* percent                               */
} kvq_drift_prompt_stats;
void kvq_drift_prompt_summary(const kvq_drift_run *r, size_t prompt, kvq_drift_prompt_stats *out);

/* Mean KLD over prompts of log-spaced position bins (1, 2, ..., 8 alone,
 * then 4 bins per doubling), for the plot: bin k covers positions
 * lo[k]..hi[k] and its mean is y[k].  Room for cap bins (KVQ_DRIFT_CURVE_MAX
 * cover any n_gen up to 2^24); returns the number written. */
enum { KVQ_DRIFT_CURVE_MAX = 96 };
size_t kvq_drift_curve(const kvq_drift_run *r, int *lo, int *hi, double *y, size_t cap);

/* ------------------------------------------------------------- prompts */

/* Prompt files: one prompt per line; lines of only blanks are skipped and
 * a trailing CR is dropped.  text is modified in place (line ends become
 * NUL); *lines (malloc'ed) points into it.  *n may be 0: the caller
 * refuses an empty file with its own message.  text[len] must exist (a
 * NUL, as kvq_read_file leaves it). */
kvq_status kvq_drift_split_prompts(char *text, size_t len, char ***lines, size_t *n, kvq_error *err);

#endif
