/* chunks.h - the perplexity/KLD protocol of docs/spec/eval.md §1: evaluate a token
 * stream in chunks of n_ctx tokens, each from an empty cache in batches of
 * n_batch, BOS replacing each chunk's first token (as llama.cpp does when
 * the vocabulary adds BOS), and hand each scored position (n_ctx/2 ..
 * n_ctx-2, predicting the next token) to a callback. */
#ifndef KVQ_CHUNKS_H
#define KVQ_CHUNKS_H

#include "kvq_internal.h"
#include "kvq_eval.h"


/* kvq_now_seconds, the monotonic clock, is public (kvq.h). */

#endif
