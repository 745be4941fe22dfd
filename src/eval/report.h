/* report.h - the sweep's result files (docs/spec/eval.md §4) and its progress line.
 *
 *   table.md      BeeLlama's columns: cache, size %, MiB, mean KLD, mean
 *                 precision, median KLD, 99.9% KLD, 99.9% precision,
 *                 same-top, PPL, pp t/s, tg t/s
 *   results.csv   every field of kvq_eval_row, one row per configuration
 *                 (RFC 4180 quoting; unknown numbers are empty fields)
 *   results.json  {"kvq_version", "kvq_source_id", "model", "text", "n_ctx", "n_chunks",
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
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
