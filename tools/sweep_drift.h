/* sweep_drift.h - `kvq sweep --drift N` (docs/drift.md): after the KLD
 * runs, every configuration of the grid generates N tokens per drift
 * prompt (tools/drift_jobs.h), and its median first divergence and mean
 * KLD over the generated positions join its result row.  The figures are
 * not resumed: each sweep with --drift measures them again. */
#ifndef KVQ_SWEEP_DRIFT_H
#define KVQ_SWEEP_DRIFT_H

#include "drift_jobs.h"
#include "kvq_eval.h"

/* Prompts cut from the sweep's text when no --drift-prompts is given. */
enum { SWEEP_DRIFT_WINDOWS = 16, SWEEP_DRIFT_WINDOW_TOKENS = 32 };

/* The cache flags of a configuration, as the sweep makes them. */
typedef void (*sweep_params_fn)(const void *ud, const kvq_sweep_config *c, cache_flags *cf);

typedef struct sweep_drift_spec {
    const char *cmd;
    const kvq_model *m;
    const drift_prompts *prompts;
    int n_gen, n_ctx, n_threads, n_jobs;
    const kvq_sweep_config *cfg;
    size_t n_cfg;
    sweep_params_fn params;
    const void *ud;
} sweep_drift_spec;

/* Fills drift_first_div, drift_kld and drift_n_gen of rows[i] for every
 * configuration that ran; 0, or 1 after the errors were printed. */
int sweep_drift_run(const sweep_drift_spec *s, kvq_eval_row *rows);

#endif
