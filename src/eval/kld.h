/* kld.h - llama.cpp's --kl-divergence-base file (docs/spec/eval.md §2) and the
 * comparison of one position's logits against a stored base row.
 *
 * File: "_logits_", uint32 n_ctx, int32 n_vocab, int32 n_chunk,
 * n_ctx*n_chunk int32 tokens, then per scored position (n_ctx - 1 - n_ctx/2
 * per chunk) a record of 4 + 2*((n_vocab+1)/2) uint16: float scale, float
 * min_log_prob, then log-prob codes q with log p = min_log_prob + scale*q. */
#ifndef KVQ_KLD_H
#define KVQ_KLD_H

#include "kvq_internal.h"
#include "kvq_eval.h"

typedef struct kvq_kld_base {
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    int32_t *tokens;          /* [n_ctx * n_chunk]                   */
    uint16_t *records;        /* [n_pos][record_len]                 */
    size_t n_pos;             /* scored positions in the file        */
    size_t record_len;        /* uint16 per record                   */
} kvq_kld_base;


/* Largest base file read into memory (a 150k vocabulary at 64k scored
 * positions is 19 GiB); larger is refused before any allocation. */
#define KVQ_BASE_FILE_CAP ((size_t)64 << 30)

/* The same over len bytes in memory (name is used in messages): sizes
 * must match the header exactly, tokens lie in the vocabulary and every
 * record's scale and minimum are what an encoder can write. */
kvq_status kvq_kld_base_parse(const void *data, size_t len, const char *name, kvq_kld_base **out, kvq_error *err);
const uint16_t *kvq_kld_base_record(const kvq_kld_base *b, size_t pos);

/* Encode one position's logits as a base record (rec has record_len). */
void kvq_kld_encode(const float *logits, int n_vocab, uint16_t *rec);


kvq_kld_token kvq_kld_compare(const float *logits, int n_vocab, const uint16_t *rec, int next_token);


#endif
