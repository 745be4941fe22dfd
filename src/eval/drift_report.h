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
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
