/* eval_row.h - one result row of an evaluation sweep (docs/spec/eval.md §3-4): a
 * cache configuration with its size, KLD statistics, PPL and speed.
 *
 * The ladder (ladder.h), the plot (plot_svg.h) and the table/CSV/JSON
 * writers (report.h) all read this one struct, so a sweep fills it once
 * per configuration.  Unknown numbers are NAN (written as empty / null). */
#ifndef KVQ_EVAL_ROW_H
#define KVQ_EVAL_ROW_H

#include "kvq_internal.h"

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
void kvq_eval_row_init(kvq_eval_row *r);

/* Index of the reference row: the first row with is_reference, or -1. */
long kvq_eval_rows_reference(const kvq_eval_row *rows, size_t n);

/* precision (%) = 100 * exp(-(KLD_row - KLD_reference)) for the mean and
 * the 99.9th percentile.  Without a reference row the reference KLD is 0
 * (the exact cache compared with itself). */
void kvq_eval_rows_precision(kvq_eval_row *rows, size_t n);

/* printf one number into buf (cap bytes) for a human table; "-" when it
 * is NAN (not measured).  Returns buf. */
const char *kvq_eval_fmt(char *buf, size_t cap, const char *fmt, double v);

/* Does any row carry drift figures (drift_n_gen > 0)? */
bool kvq_eval_rows_have_drift(const kvq_eval_row *rows, size_t n);
/* The median first divergence for a table: "-" when not measured,
 * "never" when it is past drift_n_gen. */
const char *kvq_eval_fmt_first_div(char *buf, size_t cap, const kvq_eval_row *r);

/* Write text into a markdown table cell: '|' escaped, newlines as spaces. */
void kvq_eval_write_md_text(FILE *f, const char *s);

/* Copy a string into a fixed field, truncating (always NUL-terminated). */
void kvq_eval_copy_str(char *dst, size_t cap, const char *src);

#endif
