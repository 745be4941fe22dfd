/* chunks.c - evaluate a token stream chunk by chunk (see chunks.h). */
#include "chunks.h"
#include "model.h"

#include <stdlib.h>
#include <time.h>

double kvq_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Evaluate one chunk; logits of the scored positions go to fn. */
static kvq_status run_chunk(kvq_ctx *ctx, const kvq_chunk_run *r, int chunk, int32_t *toks, float *logits,
                            int n_vocab, kvq_scored_fn fn, void *ud, size_t *index, double *secs, kvq_error *err) {
    const int n_ctx = r->n_ctx, first = kvq_chunk_first_scored(n_ctx);
    memcpy(toks, r->tokens + (size_t)chunk * n_ctx, (size_t)n_ctx * sizeof *toks);
    if (r->bos >= 0) toks[0] = r->bos;
    kvq_cache_clear(kvq_ctx_cache(ctx));
    for (int start = 0; start < n_ctx; start += r->n_batch) {
        const int n = KVQ_MIN(r->n_batch, n_ctx - start);
        const bool wanted = start + n > first;   /* does this batch hold a scored row? */
        const int row0 = KVQ_MAX(start, first);  /* first scored position in it  */
        double t0 = kvq_now_seconds();
        kvq_status st = kvq_ctx_eval_rows(ctx, toks + start, n, start, wanted ? row0 - start : 0,
                                          wanted ? logits : NULL, err);
        *secs += kvq_now_seconds() - t0;
        if (st) return st;
        for (int j = row0; wanted && j < start + n && j < n_ctx - 1; j++) {
            /* the next token is the original one, never the BOS substitute */
            st = fn(ud, (*index)++, logits + (size_t)(j - row0) * n_vocab, toks[j + 1], err);
            if (st) return st;
        }
    }
    return KVQ_OK;
}

kvq_status kvq_eval_chunks(kvq_ctx *ctx, const kvq_chunk_run *r, kvq_scored_fn fn, void *ud, double *seconds,
                           kvq_error *err) {
    if (!ctx || !r || !r->tokens || !fn || r->n_ctx < 2 || r->n_chunk < 1 || r->n_batch < 1)
        return kvq_fail(err, KVQ_ERR_ARG, "chunks: bad arguments");
    const int n_vocab = kvq_ctx_n_vocab(ctx);
    int32_t *toks = kvq_malloc_n((size_t)r->n_ctx, sizeof *toks);
    /* logits only for the scored rows of one batch: at most the batch,
     * at most the scored half of the chunk */
    const int rows = KVQ_MIN(r->n_batch, r->n_ctx - kvq_chunk_first_scored(r->n_ctx));
    float *logits = kvq_malloc_n((size_t)rows * (size_t)n_vocab, sizeof *logits);
    kvq_status st = toks && logits ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "chunks: out of memory for logits");
    size_t index = 0;
    double secs = 0.0;
    for (int c = 0; !st && c < r->n_chunk; c++)
        st = run_chunk(ctx, r, c, toks, logits, n_vocab, fn, ud, &index, &secs, err);
    free(toks);
    free(logits);
    if (seconds) *seconds = secs;
    return st;
}
