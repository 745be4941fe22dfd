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

/* Which base format a file holds, from its first 8 bytes. */
typedef enum kvq_base_format { KVQ_BASE_UNKNOWN = 0, KVQ_BASE_LLAMA, KVQ_BASE_KVQ } kvq_base_format;
kvq_base_format kvq_base_sniff(const char *path);

/* Hash identifying a model file without reading all of it:
 *   hash64 over  [file size as uint64 LE]
 *                [the first min(size, 16 MiB) bytes: GGUF header, metadata
 *                 (vocabulary included) and tensor directory, and for small
 *                 models the whole file]
 *                [when size > 16 MiB: 1024 samples of 4096 bytes at offsets
 *                 16 MiB + i*(size - 16 MiB - 4096)/1023, i = 0..1023]
 * about 20 MiB read for any size.  A re-quantised or different model
 * differs in size, metadata or sampled tensor bytes. */
kvq_status kvq_model_file_hash(const char *path, uint64_t *hash, kvq_error *err);

/* ------------------------------------------------------------- writing */

typedef struct kvq_base_kvq_writer kvq_base_kvq_writer;

/* Creates path and writes the tokens (n_ctx*n_chunk of them). */
kvq_status kvq_base_kvq_writer_open(const char *path, uint64_t model_hash, int n_ctx, int n_vocab,
                                    int n_chunk, const int32_t *tokens, kvq_base_kvq_writer **out,
                                    kvq_error *err);
/* One scored position, in order: the raw logits (log-softmax taken here). */
kvq_status kvq_base_kvq_writer_add(kvq_base_kvq_writer *w, const float *logits, kvq_error *err);
/* Completes the header; a file short of positions is an error (and stays
 * unreadable).  Frees w in every case. */
kvq_status kvq_base_kvq_writer_close(kvq_base_kvq_writer *w, kvq_error *err);

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

/* Opens, validates and checksums path (memory-mapped, read-only): header,
 * exact size, payload hash, tokens in the vocabulary, every log-prob
 * finite and at most 0. */
kvq_status kvq_base_kvq_open(const char *path, kvq_base_kvq **out, kvq_error *err);
/* The same over size bytes at data (4-byte aligned; name is used in
 * messages); data must outlive the base, which does not own it. */
kvq_status kvq_base_kvq_open_memory(const void *data, size_t size, const char *name, kvq_base_kvq **out,
                                    kvq_error *err);
void kvq_base_kvq_close(kvq_base_kvq *b);
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

/* The base must have been made with this model: a clear error otherwise. */
kvq_status kvq_base_kvq_check_model(const kvq_base_kvq *b, uint64_t model_hash, kvq_error *err);
/* ... and from this text at this context: tokens are the run's first
 * n_ctx*n_chunk tokens (n_tokens of them available). */
kvq_status kvq_base_kvq_check_tokens(const kvq_base_kvq *b, const int32_t *tokens, size_t n_tokens,
                                     int n_ctx, int n_chunk, kvq_error *err);

#endif
