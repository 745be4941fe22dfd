/* eval_row.h - one result row of an evaluation sweep (docs/spec/eval.md §3-4): a
 * cache configuration with its size, KLD statistics, PPL and speed.
 *
 * The ladder (ladder.h), the plot (plot_svg.h) and the table/CSV/JSON
 * writers (report.h) all read this one struct, so a sweep fills it once
 * per configuration.  Unknown numbers are NAN (written as empty / null). */
#ifndef KVQ_EVAL_ROW_H
#define KVQ_EVAL_ROW_H

#include "kvq_internal.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
