/* calib_run.c - `kvq calibrate`'s measurement and fit behind one public
 * call (kvq_eval.h, "calibration"): the model reads every chunk with the
 * statistics observer attached (calib_stats.h), then the transforms and
 * allocations of every rate are fitted (calib_build.h). */
#include "calib_build.h"
#include "chunks.h"
#include "model.h"

#include <stdlib.h>

/* Every chunk from an empty cache, BOS first (the KLD protocol); each
 * chunk's received attention is folded in at its end. */
static kvq_status measure(kvq_ctx *ctx, kvq_calib_stats *s, const kvq_calib_run *r, kvq_error *err) {
    kvq_calib_observer ob = { s, ctx };
    kvq_ctx_set_observer(ctx, kvq_calib_observe, &ob);
    int32_t *chunk = kvq_malloc_n((size_t)r->n_ctx, sizeof *chunk);
    kvq_status st = chunk ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    if (!st && r->progress) r->progress(r->progress_ud, 0, r->n_chunk);
    for (int c = 0; !st && c < r->n_chunk; c++) {
        memcpy(chunk, r->tokens + (size_t)c * r->n_ctx, (size_t)r->n_ctx * sizeof *chunk);
        if (r->bos >= 0) chunk[0] = r->bos;
        kvq_cache_clear(kvq_ctx_cache(ctx));
        for (int start = 0; !st && start < r->n_ctx; start += r->n_batch)
            st = kvq_ctx_eval(ctx, chunk + start, KVQ_MIN(r->n_batch, r->n_ctx - start), start, NULL, false, err);
        if (!st) st = kvq_calib_stats_end_chunk(s, ctx, err);
        if (!st && r->progress) r->progress(r->progress_ud, c + 1, r->n_chunk);
    }
    kvq_ctx_set_observer(ctx, NULL, NULL);
    free(chunk);
    return st;
}

kvq_status kvq_calibrate(kvq_ctx *ctx, const kvq_calib_run *run, kvq_calib **out, double **pred_db,
                         long long *n_positions, kvq_error *err) {
    *out = NULL;
    if (pred_db) *pred_db = NULL;
    if (!ctx || !run || !run->tokens || run->n_ctx < 1 || run->n_chunk < 1 || run->n_batch < 1)
        return kvq_fail(err, KVQ_ERR_ARG, "calibration: no context, no tokens or an empty run");
    const kvq_model *m = kvq_ctx_model(ctx);
    const kvq_model_info *in = kvq_model_get_info(m);
    kvq_calib_stats stats = { 0 };
    const size_t n_pred = (size_t)in->n_layer * in->n_head_kv * 2 * KVQ_CALIB_N_RATES;
    double *pred = kvq_malloc_n(n_pred, sizeof *pred);
    kvq_status st = pred ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    if (!st) st = kvq_calib_stats_init(&stats, in, run->n_ctx, err);
    if (!st) st = measure(ctx, &stats, run, err);
    if (!st)
        st = kvq_calib_build(&stats, m, kvq_model_hash(m), run->query_mix, KVQ_CALIB_N_RATES, kvq_calib_rates, out,
                             pred, err);
    if (!st && n_positions) *n_positions = stats.n_tokens;
    kvq_calib_stats_free(&stats);
    if (!st && pred_db) *pred_db = pred;
    else free(pred);
    return st;
}
