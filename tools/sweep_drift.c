/* sweep_drift.c - the drift columns of kvq sweep (sweep_drift.h). */
#include "sweep_drift.h"
#include "cli.h"

#include <stdlib.h>

int sweep_drift_run(const sweep_drift_spec *s, kvq_eval_row *rows) {
    drift_config *cfg = calloc(s->n_cfg ? s->n_cfg : 1, sizeof *cfg);
    kvq_drift_row *dr = calloc(s->n_cfg ? s->n_cfg : 1, sizeof *dr);
    if (!cfg || !dr) { free(cfg); free(dr); return cli_error(s->cmd, "out of memory"); }
    for (size_t i = 0; i < s->n_cfg; i++) {
        s->params(s->ud, &s->cfg[i], &cfg[i].cache);
        kvq_eval_copy_str(cfg[i].label, sizeof cfg[i].label, s->cfg[i].label);
        cfg[i].rot_off = s->cfg[i].rot == KVQ_ROT_OFF;
    }
    const drift_job_spec js = { s->cmd, s->m, (const int32_t *const *)s->prompts->tokens, s->prompts->n_tokens,
                                s->prompts->n, s->n_gen, s->n_ctx, s->n_threads, s->n_jobs, cfg, s->n_cfg, false };
    int threads = 0;
    const int rc = drift_run_jobs(&js, dr, &threads);
    for (size_t i = 0; i < s->n_cfg; i++) {
        if (!dr[i].done) continue;
        rows[i].drift_first_div = dr[i].sum.median_first_div;
        rows[i].drift_kld = dr[i].sum.mean_kld;
        rows[i].drift_n_gen = s->n_gen;
        kvq_drift_run_free(&dr[i].run);
    }
    free(dr);
    free(cfg);
    return rc;
}
