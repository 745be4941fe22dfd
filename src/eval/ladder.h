/* ladder.h - the recommendation ladder of a sweep (docs/spec/eval.md §4): the Pareto
 * frontier of (size %, median KLD), smaller being better on both, from the
 * exact cache down to the smallest configuration, each step labelled with
 * a tier by thresholds on median KLD.
 *
 * Frontier rule (deterministic):
 *   - rows whose size or median KLD is NAN, or whose size is negative, take
 *     no part (a failed run cannot be recommended);
 *   - a row is on the frontier when no other row is at most as large and at
 *     most as far (median KLD) with one of the two strictly smaller;
 *   - rows equal on both coordinates: only the first by label (then by
 *     input order) is kept;
 *   - the reference row (is_reference) always heads the ladder, even when
 *     a configuration dominates it numerically (a run-to-run wobble must
 *     not drop the exact cache); rows as large as the reference or larger
 *     are never listed after it, since they cannot beat the exact cache.
 * The ladder is ordered by size, largest (the reference) first; along it
 * the median KLD strictly increases. */
#ifndef KVQ_LADDER_H
#define KVQ_LADDER_H

#include "eval_row.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
