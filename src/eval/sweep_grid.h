/* sweep_grid.h - the configurations a sweep runs (docs/spec/eval.md §4): the exact
 * reference first, then every K/V pair x tail x rotation asked for, each
 * with a human label ("q8_0/q4_0 tail1024 rot-off") and a file-name-safe
 * slug ("q8_0-q4_0_tail1024_rotoff") under which its result is stored.
 *
 * Rules:
 *   - pairs: (t, t) for every t of `types`, in order, then `pairs`;
 *   - rotation: ON for a pair with a block-quantised side (plus OFF with
 *     KVQ_SWEEP_ROT_BOTH, or only OFF with KVQ_SWEEP_ROT_OFF); a pair
 *     without one (KVarN and TurboQuant rotate inside their format, plain
 *     types have nothing to rotate) runs once per tail, AUTO;
 *   - tails: every one asked for, for every pair with a quantised side
 *     (KVarN sides round them up to whole tiles); a tail longer than n_ctx
 *     is an error; a pair of exact types (f32/f16/bf16) runs with tail 0
 *     only (an exact copy of exact rows buys nothing);
 *   - a configuration equal to the reference, or listed twice, runs once;
 *   - what does not apply to a pair is said, one line each, in notes. */
#ifndef KVQ_SWEEP_GRID_H
#define KVQ_SWEEP_GRID_H

#include "eval_row.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
