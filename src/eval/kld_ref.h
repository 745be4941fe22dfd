/* kld_ref.h - a KLD reference of either format (docs/spec/eval.md §2): llama.cpp's
 * 16-bit base file (kld.h) or kvq's exact base (base_kvq.h), behind one
 * view, and the one per-token comparison every KLD run (kvq kld, sweep,
 * plan) uses. */
#ifndef KVQ_KLD_REF_H
#define KVQ_KLD_REF_H

#include "base_kvq.h"
#include "stats.h"

typedef struct kvq_kld_ref {
    kvq_base_format format;        /* KVQ_BASE_LLAMA or KVQ_BASE_KVQ        */
    const kvq_kld_base *llama;     /* the base, for KVQ_BASE_LLAMA          */
    const kvq_base_kvq *exact;     /* the base, for KVQ_BASE_KVQ            */
    int n_ctx, n_vocab, n_chunk;
    const int32_t *tokens;         /* [n_ctx * n_chunk]                     */
    size_t n_pos;                  /* scored positions                      */
    kvq_kld_base *own_llama;       /* owned when opened from a file         */
    kvq_base_kvq *own_exact;
} kvq_kld_ref;

/* Views of bases the caller keeps (nothing is owned). */
void kvq_kld_ref_from_llama(kvq_kld_ref *r, const kvq_kld_base *b);
void kvq_kld_ref_from_exact(kvq_kld_ref *r, const kvq_base_kvq *b);

/* Opens either format, chosen by the file's magic; a file of neither
 * gets the llama reader's message (it names the missing magic). */
kvq_status kvq_kld_ref_open(const char *path, kvq_kld_ref *r, kvq_error *err);
void kvq_kld_ref_close(kvq_kld_ref *r);

/* The reference must belong to this model: the vocabulary size for both
 * formats, and for kvq's format the model-file hash (kvq_model_file_hash
 * of model_path).  llama.cpp files carry no model hash. */
kvq_status kvq_kld_ref_check_model(const kvq_kld_ref *r, const char *model_path, const kvq_model_info *in,
                                   kvq_error *err);
/* ... and to this text: the first n_ctx*n_chunk of tokens (n_tokens of
 * them available) are the reference's. */
kvq_status kvq_kld_ref_check_tokens(const kvq_kld_ref *r, const int32_t *tokens, size_t n_tokens, int n_chunk,
                                    kvq_error *err);

/* Scored position pos: test logits against the reference (KVQ_ERR_ARG
 * when pos is past the reference's positions). */
kvq_status kvq_kld_ref_compare(const kvq_kld_ref *r, size_t pos, const float *logits, int next, kvq_kld_token *out,
                               kvq_error *err);

/* Per-token statistics of a run against a reference: the kvq_scored_fn
 * (chunks.h) of every KLD run; ud is a kvq_kld_acc. */
typedef struct kvq_kld_acc {
    const kvq_kld_ref *ref;
    kvq_tokstats stats;
} kvq_kld_acc;
void kvq_kld_acc_init(kvq_kld_acc *a, const kvq_kld_ref *ref);
void kvq_kld_acc_free(kvq_kld_acc *a);
kvq_status kvq_kld_acc_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err);

#endif
