/* base_kvq.h - kvq's own exact KLD base file (docs/spec/eval.md §2, second bullet):
 * the reference run's full log-softmax, float32, for every scored
 * position, tied to the model and the text it was made from.
 *
 * File layout (little-endian; all offsets in bytes):
 *    0  8  magic "KVQBASE1"
 *    8  4  uint32 version (1)
 *   12  4  uint32 header size (80)
 *   16  8  uint64 model hash   (kvq_model_file_hash of the GGUF file)
 *   24  8  uint64 token hash   (hash64 of the n_ctx*n_chunk int32 tokens)
 *   32  8  uint64 payload hash (hash64 of every byte after the header)
 *   40  8  uint64 n_pos        (scored positions: n_chunk*(n_ctx-1-n_ctx/2))
 *   48  4  uint32 n_ctx
 *   52  4  int32  n_vocab
 *   56  4  int32  n_chunk
 *   60  4  uint32 flags (0)
 *   64  8  uint64 header hash  (hash64 of bytes 0..63)
 *   72  8  reserved (0)
 *   80     int32 tokens[n_ctx*n_chunk]       (chunk after chunk)
 *          float32 logprob[n_pos][n_vocab]   (log-softmax, natural log)
 * hash64 is defined in hash64.h.  The header hash is written last, when
 * every record is in: an interrupted run leaves a file that is rejected.
 * Reading verifies the header, the exact file size and the payload hash
 * (one pass over the file), so any corrupted byte is an error. */
#ifndef KVQ_BASE_KVQ_H
#define KVQ_BASE_KVQ_H

#include "kld.h"
#include "kvq_eval.h"




/* ------------------------------------------------------------- reading */

typedef struct kvq_base_kvq {
    uint64_t model_hash, token_hash;
    int n_ctx, n_vocab, n_chunk;
    size_t n_pos;
    const int32_t *tokens;      /* [n_ctx*n_chunk], inside the mapping  */
    const float *logprobs;      /* [n_pos][n_vocab]                     */
    void *map;                  /* private: the mapped file (NULL: the caller's memory) */
    size_t map_len;
} kvq_base_kvq;

/* The same over size bytes at data (4-byte aligned; name is used in
 * messages); data must outlive the base, which does not own it. */
kvq_status kvq_base_kvq_open_memory(const void *data, size_t size, const char *name, kvq_base_kvq **out,
                                    kvq_error *err);
/* Recompute the payload and header hashes of a base file held in memory
 * (size bytes, at least the header), as if its writer had written what
 * is there: lets tests and the fuzzer reach the checks behind them. */
void kvq_base_kvq_reseal(void *data, size_t size);
/* Log-probs of scored position pos (NULL when out of range). */
const float *kvq_base_kvq_row(const kvq_base_kvq *b, size_t pos);

/* One scored position: test logits against the base's exact log-probs.
 * KL(base||test) is summed over the whole vocabulary in double (no floor:
 * llama.cpp's -16-nat floor exists only because its base is 16-bit). */
kvq_kld_token kvq_base_kvq_compare(const float *logits, int n_vocab, const float *base_logprobs, int next_token);


#endif
