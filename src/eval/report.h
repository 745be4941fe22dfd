/* report.h - the sweep's result files (docs/spec/eval.md §4) and its progress line.
 *
 *   table.md      BeeLlama's columns: cache, size %, MiB, mean KLD, mean
 *                 precision, median KLD, 99.9% KLD, 99.9% precision,
 *                 same-top, PPL, pp t/s, tg t/s
 *   results.csv   every field of kvq_eval_row, one row per configuration
 *                 (RFC 4180 quoting; unknown numbers are empty fields)
 *   results.json  {"kvq_version", "model", "text", "n_ctx", "n_chunks",
 *                  "rows": [ {every field of kvq_eval_row}, ... ]}
 *                 (unknown numbers are null; keys and units as `kvq kld
 *                 --json`: same_top_p in percent, rot_k/rot_v block sizes)
 *
 * Precision columns are written as the rows hold them: call
 * kvq_eval_rows_precision first.  The CSV reader takes any column order
 * and ignores unknown columns, so files of newer versions still load. */
#ifndef KVQ_REPORT_H
#define KVQ_REPORT_H

#include "eval_row.h"

/* What the rows were measured on (any field may be NULL / 0). */
typedef struct kvq_report_meta {
    const char *model, *text;
    int n_ctx, n_chunks;
} kvq_report_meta;

kvq_status kvq_report_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                               const kvq_report_meta *meta, kvq_error *err);
kvq_status kvq_report_write_csv(FILE *f, const kvq_eval_row *rows, size_t n, kvq_error *err);
kvq_status kvq_report_write_json(FILE *f, const kvq_eval_row *rows, size_t n,
                                 const kvq_report_meta *meta, kvq_error *err);

/* Reads a CSV written by kvq_report_write_csv; *rows is malloc'ed (caller
 * frees).  A malformed file is KVQ_ERR_FORMAT with the line number. */
kvq_status kvq_report_read_csv(FILE *f, kvq_eval_row **rows, size_t *n, kvq_error *err);

typedef enum kvq_report_kind { KVQ_REPORT_MD, KVQ_REPORT_CSV, KVQ_REPORT_JSON } kvq_report_kind;
/* Write one of the files to path (created or replaced). */
kvq_status kvq_report_save(const char *path, kvq_report_kind kind, const kvq_eval_row *rows,
                           size_t n, const kvq_report_meta *meta, kvq_error *err);

/* s as a JSON string: quoted, '"' '\\' and control characters escaped. */
void kvq_json_write_str(FILE *f, const char *s);

/* "42s", "1m20s", "2h05m"; "?" for a negative or non-finite time. */
void kvq_format_duration(char *buf, size_t cap, double seconds);

/* The progress line "[3/12] q4_0/q4_0 ... eta 1m20s" for configuration
 * `index` (1-based) of `total`, about to start.  The ETA extrapolates the
 * runs finished in this process (n_done runs in elapsed_s seconds) to the
 * configurations left, this one included; "eta ?" before the first. */
void kvq_progress_format(char *buf, size_t cap, int index, int total, const char *label,
                         double elapsed_s, int n_done);

#endif
