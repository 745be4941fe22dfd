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
kvq_status kvq_sweep_grid(const kvq_sweep_spec *spec, kvq_sweep_config **out, size_t *n, kvq_error *err);

/* Comma-separated lists; unknown names / bad numbers are KVQ_ERR_ARG with
 * the offending item named.  Outputs are malloc'ed. */
kvq_status kvq_sweep_parse_types(const char *list, kvq_type **out, size_t *n, kvq_error *err);
kvq_status kvq_sweep_parse_pairs(const char *list, kvq_sweep_pair **out, size_t *n, kvq_error *err);
kvq_status kvq_sweep_parse_tails(const char *list, int **out, size_t *n, kvq_error *err);

#endif
