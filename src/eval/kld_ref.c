/* kld_ref.c - either base format behind one view (kld_ref.h). */
#include "kld_ref.h"

#include <stdlib.h>

void kvq_kld_ref_from_llama(kvq_kld_ref *r, const kvq_kld_base *b) {
    memset(r, 0, sizeof *r);
    r->format = KVQ_BASE_LLAMA;
    r->llama = b;
    r->n_ctx = (int)b->n_ctx;
    r->n_vocab = b->n_vocab;
    r->n_chunk = b->n_chunk;
    r->tokens = b->tokens;
    r->n_pos = b->n_pos;
}

void kvq_kld_ref_from_exact(kvq_kld_ref *r, const kvq_base_kvq *b) {
    memset(r, 0, sizeof *r);
    r->format = KVQ_BASE_KVQ;
    r->exact = b;
    r->n_ctx = b->n_ctx;
    r->n_vocab = b->n_vocab;
    r->n_chunk = b->n_chunk;
    r->tokens = b->tokens;
    r->n_pos = b->n_pos;
}

kvq_status kvq_kld_ref_open(const char *path, kvq_kld_ref *r, kvq_error *err) {
    memset(r, 0, sizeof *r);
    if (kvq_base_sniff(path) == KVQ_BASE_KVQ) {
        kvq_base_kvq *b = NULL;
        kvq_status st = kvq_base_kvq_open(path, &b, err);
        if (st) return st;
        kvq_kld_ref_from_exact(r, b);
        r->own_exact = b;
        return KVQ_OK;
    }
    kvq_kld_base *b = NULL;
    kvq_status st = kvq_kld_base_read(path, &b, err);
    if (st) return st;
    kvq_kld_ref_from_llama(r, b);
    r->own_llama = b;
    return KVQ_OK;
}

void kvq_kld_ref_close(kvq_kld_ref *r) {
    if (!r) return;
    kvq_kld_base_free(r->own_llama);
    kvq_base_kvq_close(r->own_exact);
    memset(r, 0, sizeof *r);
}

kvq_status kvq_kld_ref_check_model(const kvq_kld_ref *r, const char *model_path, const kvq_model_info *in,
                                   kvq_error *err) {
    if (r->n_vocab != in->n_vocab)
        return kvq_fail(err, KVQ_ERR_ARG, "the KLD base has a vocabulary of %d, the model %d: it was made with "
                        "another model", r->n_vocab, in->n_vocab);
    if (r->format != KVQ_BASE_KVQ) return KVQ_OK;
    uint64_t hash = 0;
    kvq_status st = kvq_model_file_hash(model_path, &hash, err);
    return st ? st : kvq_base_kvq_check_model(r->exact, hash, err);
}

kvq_status kvq_kld_ref_check_tokens(const kvq_kld_ref *r, const int32_t *tokens, size_t n_tokens, int n_chunk,
                                    kvq_error *err) {
    if (r->format == KVQ_BASE_KVQ)
        return kvq_base_kvq_check_tokens(r->exact, tokens, n_tokens, r->n_ctx, n_chunk, err);
    const size_t need = (size_t)r->n_ctx * (size_t)n_chunk;
    if (n_chunk > r->n_chunk)
        return kvq_fail(err, KVQ_ERR_ARG, "the KLD base holds %d chunks, this run asks for %d", r->n_chunk, n_chunk);
    if (n_tokens < need)
        return kvq_fail(err, KVQ_ERR_ARG, "the text has %zu tokens, the KLD base's %d chunks of %d hold %zu", n_tokens,
                        n_chunk, r->n_ctx, need);
    for (size_t i = 0; i < need; i++)
        if (tokens[i] != r->tokens[i])
            return kvq_fail(err, KVQ_ERR_ARG, "the text differs from the KLD base's at token %zu (id %d, base %d): "
                            "the base was made from another text or tokenizer", i, (int)tokens[i], (int)r->tokens[i]);
    return KVQ_OK;
}

kvq_status kvq_kld_ref_compare(const kvq_kld_ref *r, size_t pos, const float *logits, int next, kvq_kld_token *out,
                               kvq_error *err) {
    if (pos >= r->n_pos)
        return kvq_fail(err, KVQ_ERR_ARG, "scored position %zu is past the KLD base's %zu", pos, r->n_pos);
    if (next < 0 || next >= r->n_vocab)
        return kvq_fail(err, KVQ_ERR_ARG, "token %d is outside the KLD base's vocabulary of %d", next, r->n_vocab);
    *out = r->format == KVQ_BASE_KVQ
               ? kvq_base_kvq_compare(logits, r->n_vocab, kvq_base_kvq_row(r->exact, pos), next)
               : kvq_kld_compare(logits, r->n_vocab, kvq_kld_base_record(r->llama, pos), next);
    return KVQ_OK;
}

void kvq_kld_acc_init(kvq_kld_acc *a, const kvq_kld_ref *ref) {
    a->ref = ref;
    kvq_tokstats_init(&a->stats);
}

void kvq_kld_acc_free(kvq_kld_acc *a) { kvq_tokstats_free(&a->stats); }

kvq_status kvq_kld_acc_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    kvq_kld_acc *a = ud;
    kvq_kld_token t;
    kvq_status st = kvq_kld_ref_compare(a->ref, index, logits, next, &t, err);
    return st ? st : kvq_tokstats_add(&a->stats, &t, err);
}
