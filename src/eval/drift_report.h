/* drift_report.h - kvq drift's results: one row per cache configuration
 * (its identity, size, run and summary) and the writers of its tables,
 * JSON and per-prompt CSV (docs/drift.md, "Outputs").
 *
 *   markdown   the summary table (first divergence, identical fraction,
 *              same-top-1, mean KLD, KLD at divergence, size), then mean,
 *              median and 99th-percentile KLD per position bucket, and
 *              optionally the per-prompt table of every configuration;
 *   JSON       one object per configuration (keys in docs/drift.md; the
 *              first divergence is n_gen + 1 for a prompt that never
 *              diverges; unknown numbers are null);
 *   CSV        one line per configuration and prompt. */
#ifndef KVQ_DRIFT_REPORT_H
#define KVQ_DRIFT_REPORT_H

#include "drift.h"
#include "eval_row.h"

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

kvq_status kvq_drift_write_md(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                              bool per_prompt, kvq_error *err);
/* One JSON object (one line, newline-terminated) for row r. */
kvq_status kvq_drift_write_json_row(FILE *f, const kvq_drift_row *r, const kvq_drift_meta *meta, kvq_error *err);
/* {"kvq_version", "model", "prompts", "n_ctx", "configs": [objects]}. */
kvq_status kvq_drift_write_json(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                                kvq_error *err);
kvq_status kvq_drift_write_prompts_csv(FILE *f, const kvq_drift_row *rows, size_t n, kvq_error *err);

#endif
