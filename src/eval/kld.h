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

typedef struct kvq_kld_base {
    uint32_t n_ctx;
    int32_t n_vocab, n_chunk;
    int32_t *tokens;          /* [n_ctx * n_chunk]                   */
    uint16_t *records;        /* [n_pos][record_len]                 */
    size_t n_pos;             /* scored positions in the file        */
    size_t record_len;        /* uint16 per record                   */
} kvq_kld_base;

/* Positions scored per chunk: n_ctx/2 .. n_ctx-2. */
static inline int kvq_kld_first_scored(int n_ctx) { return n_ctx / 2; }
static inline int kvq_kld_scored_per_chunk(int n_ctx) { return n_ctx - 1 - n_ctx / 2; }
static inline size_t kvq_kld_record_len(int n_vocab) { return 4 + 2 * (((size_t)n_vocab + 1) / 2); }

/* Largest base file read into memory (a 150k vocabulary at 64k scored
 * positions is 19 GiB); larger is refused before any allocation. */
#define KVQ_BASE_FILE_CAP ((size_t)64 << 30)

kvq_status kvq_kld_base_read(const char *path, kvq_kld_base **out, kvq_error *err);
/* The same over len bytes in memory (name is used in messages): sizes
 * must match the header exactly, tokens lie in the vocabulary and every
 * record's scale and minimum are what an encoder can write. */
kvq_status kvq_kld_base_parse(const void *data, size_t len, const char *name, kvq_kld_base **out, kvq_error *err);
void kvq_kld_base_free(kvq_kld_base *b);
const uint16_t *kvq_kld_base_record(const kvq_kld_base *b, size_t pos);

/* Encode one position's logits as a base record (rec has record_len). */
void kvq_kld_encode(const float *logits, int n_vocab, uint16_t *rec);

/* Writer: header and tokens at open, one record per scored position. */
typedef struct kvq_kld_writer kvq_kld_writer;
kvq_status kvq_kld_writer_open(const char *path, int n_ctx, int n_vocab, int n_chunk,
                               const int32_t *tokens, kvq_kld_writer **out, kvq_error *err);
kvq_status kvq_kld_writer_add(kvq_kld_writer *w, const float *logits, kvq_error *err);
/* Closes and frees; reports a short file (fewer records than announced). */
kvq_status kvq_kld_writer_close(kvq_kld_writer *w, kvq_error *err);

/* One position compared: test logits against a base record. */
typedef struct kvq_kld_token {
    double kld;        /* KL(base || test), nats                        */
    double nll;        /* -log p_test(next token)                       */
    double nll_base;   /* -log p_base(next token)                       */
    double dp;         /* p_test(next) - p_base(next)                   */
    bool same_top;     /* argmax of test == argmax of base              */
} kvq_kld_token;
kvq_kld_token kvq_kld_compare(const float *logits, int n_vocab, const uint16_t *rec, int next_token);

/* log sum_i exp(x[i]), the log-softmax's normaliser: the maximum taken
 * out first, the sum of exp(x[i] - max) in double.  Every log-softmax in
 * kvq (base writers, comparisons, NLL) goes through this one function. */
double kvq_log_sum_exp(const float *x, int n);

/* Index of the largest value (the first on ties). */
int kvq_argmax(const float *x, int n);

/* -log softmax(logits)[tok], with the sum of exponentials in double. */
double kvq_nll(const float *logits, int n_vocab, int tok);

#endif
