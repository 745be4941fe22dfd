/* chunks.h - the perplexity/KLD protocol of docs/spec/eval.md §1: evaluate a token
 * stream in chunks of n_ctx tokens, each from an empty cache in batches of
 * n_batch, BOS replacing each chunk's first token (as llama.cpp does when
 * the vocabulary adds BOS), and hand each scored position (n_ctx/2 ..
 * n_ctx-2, predicting the next token) to a callback. */
#ifndef KVQ_CHUNKS_H
#define KVQ_CHUNKS_H

#include "kvq_internal.h"

/* Tokens per evaluation batch when none is asked for: llama.cpp's
 * physical batch (-ub) default.  kvq has one batch size (-b), the one
 * that sizes the scratch memory, so it takes -ub's value rather than
 * -b's 2048: memory then stays flat as -c grows. */
enum { KVQ_EVAL_BATCH_DEFAULT = 512 };

/* The batch of a run: requested (0 = default), never above n_ctx. */
static inline int kvq_eval_batch(int requested, int n_ctx) {
    const int b = requested > 0 ? requested : KVQ_EVAL_BATCH_DEFAULT;
    return b < n_ctx ? b : n_ctx;
}

typedef struct kvq_chunk_run {
    const int32_t *tokens;   /* n_ctx * n_chunk tokens                   */
    int n_ctx, n_chunk, n_batch;
    int bos;                 /* id replacing each chunk's first token, -1: none */
} kvq_chunk_run;

/* First scored position of a chunk (docs/spec/eval.md §1). */
static inline int kvq_chunk_first_scored(int n_ctx) { return n_ctx / 2; }

/* index counts scored positions from 0 across all chunks. */
typedef kvq_status (*kvq_scored_fn)(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err);

/* seconds (may be NULL) receives the time spent in kvq_ctx_eval. */
kvq_status kvq_eval_chunks(kvq_ctx *ctx, const kvq_chunk_run *run, kvq_scored_fn fn, void *ud,
                           double *seconds, kvq_error *err);

double kvq_now_seconds(void);  /* monotonic clock */

#endif
