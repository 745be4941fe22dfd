/* tok_load.c - a tokenizer from a GGUF file's tokenizer.ggml.* keys, with
 * llama.cpp's defaults where a key is absent. */
#include "tok_internal.h"

#include <math.h>

static kvq_status tok_kind_from_gguf(const gguf_file *f, kvq_tok_kind *kind, kvq_error *err) {
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return kvq_fail(err, KVQ_ERR_FORMAT, "GGUF has no tokenizer (tokenizer.ggml.model missing)");
    if (gguf_str_eq(model, "llama")) { *kind = KVQ_TOK_SPM; return KVQ_OK; }
    if (gguf_str_eq(model, "gpt2")) { *kind = KVQ_TOK_BPE; return KVQ_OK; }
    return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "unsupported tokenizer.ggml.model '%.*s' (supported: llama, gpt2)",
                    (int)KVQ_MIN(model.len, 64), model.ptr);
}

/* tokenizer.ggml.pre: only BPE vocabularies use it. */
static kvq_status tok_pre_from_gguf(const gguf_file *f, kvq_tok_pre *pre, kvq_error *err) {
    static const struct { const char *name; kvq_tok_pre pre; } names[] = {
        {"default", KVQ_PRE_GPT2}, {"gpt2", KVQ_PRE_GPT2},
        {"llama3", KVQ_PRE_LLAMA3}, {"llama-v3", KVQ_PRE_LLAMA3}, {"llama-bpe", KVQ_PRE_LLAMA3},
        {"qwen2", KVQ_PRE_QWEN2}, {"deepseek-r1-qwen", KVQ_PRE_QWEN2},
    };
    gguf_str s;
    *pre = KVQ_PRE_GPT2;
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &s)) return KVQ_OK;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(names); i++)
        if (gguf_str_eq(s, names[i].name)) { *pre = names[i].pre; return KVQ_OK; }
    return kvq_fail(err, KVQ_ERR_UNSUPPORTED,
                    "unsupported tokenizer.ggml.pre '%.*s' (supported: default, gpt2, llama3, llama-bpe, qwen2)",
                    (int)KVQ_MIN(s.len, 64), s.ptr);
}

/* The special-token id keys (tokenizer.ggml.bos_token_id, eos_, unk_,
 * padding_, and every other "*_token_id": sep, cls, mask, eot, fim...).
 * Absent keeps the default; -1 or 0xFFFFFFFF (llama.cpp's "no token",
 * LLAMA_TOKEN_NULL) means none; any other value outside the vocabulary is
 * an error naming the key.  (llama.cpp warns and falls back to its
 * default id there; kvq refuses, since either reading of such a file is
 * a guess: docs/engine.md.) */
static kvq_status tok_id_from_kv(const gguf_file *f, const gguf_kv *kv, int32_t n_vocab, int32_t *id,
                                 kvq_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%.*s", (int)KVQ_MIN(kv->key.len, sizeof key - 1), kv->key.ptr);
    int64_t v;
    if (!gguf_get_i64(f, key, &v))
        return kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer: '%s' is not an integer", key);
    if (v == -1 || v == 0xFFFFFFFFll) { *id = -1; return KVQ_OK; }
    if (v < 0 || v >= n_vocab)
        return kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer: '%s' = %lld is outside the vocabulary of %d tokens", key,
                        (long long)v, (int)n_vocab);
    *id = (int32_t)v;
    return KVQ_OK;
}

static bool str_ends_with(gguf_str s, const char *suffix) {
    const size_t n = strlen(suffix);
    return s.len >= n && !memcmp(s.ptr + s.len - n, suffix, n);
}

static kvq_status tok_ids_from_gguf(const gguf_file *f, kvq_tokenizer_desc *d, kvq_error *err) {
    static const char PREFIX[] = "tokenizer.ggml.";
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kvs[i];
        if (kv->key.len < sizeof PREFIX || memcmp(kv->key.ptr, PREFIX, sizeof PREFIX - 1) != 0 ||
            !str_ends_with(kv->key, "_token_id"))
            continue;
        int32_t id = -1;
        kvq_status st = tok_id_from_kv(f, kv, d->n_vocab, &id, err);
        if (st) return st;
        const gguf_str name = { kv->key.ptr + sizeof PREFIX - 1, kv->key.len - (sizeof PREFIX - 1) };
        if (gguf_str_eq(name, "bos_token_id")) d->bos = id;
        else if (gguf_str_eq(name, "eos_token_id")) d->eos = id;
        else if (gguf_str_eq(name, "unknown_token_id")) d->unk = id;
        else if (gguf_str_eq(name, "padding_token_id")) d->pad = id;
    }
    return KVQ_OK;
}

static kvq_status tok_flags_from_gguf(const gguf_file *f, kvq_tokenizer_desc *d, kvq_error *err) {
    if (d->kind == KVQ_TOK_SPM) { d->unk = 0; d->bos = 1; d->eos = 2; }   /* llama.cpp's SPM defaults */
    if (d->bos >= d->n_vocab) d->bos = -1;           /* defaults past a tiny vocabulary */
    if (d->eos >= d->n_vocab) d->eos = -1;
    if (d->unk >= d->n_vocab) d->unk = -1;
    gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &d->add_bos);
    gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &d->add_eos);
    gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &d->add_space_prefix);
    return tok_ids_from_gguf(f, d, err);
}

/* An optional per-token array must have one value per token. */
static kvq_status tok_check_count(kvq_status st, const char *key, uint64_t n, uint64_t n_vocab, kvq_error *err) {
    if (st == KVQ_OK && n != n_vocab)
        return kvq_fail(err, KVQ_ERR_FORMAT, "%s has %llu values for %llu tokens", key,
                        (unsigned long long)n, (unsigned long long)n_vocab);
    return st == KVQ_ERR_ARG ? KVQ_OK : st;          /* absent is fine */
}

kvq_status kvq_tokenizer_load(const gguf_file *f, kvq_tokenizer **out, kvq_error *err) {
    *out = NULL;
    kvq_tokenizer_desc d;
    kvq_tok_kind kind = KVQ_TOK_SPM;
    kvq_tok_pre pre = KVQ_PRE_GPT2;
    kvq_status st = tok_kind_from_gguf(f, &kind, err);
    if (st == KVQ_OK && kind == KVQ_TOK_BPE) st = tok_pre_from_gguf(f, &pre, err);
    if (st != KVQ_OK) return st;
    kvq_tokenizer_desc_default(&d, kind, pre);

    gguf_str *tokens = NULL, *merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    uint64_t n_tok = 0, n_scores = 0, n_types = 0, n_merges = 0;
    st = gguf_get_str_array(f, "tokenizer.ggml.tokens", &tokens, &n_tok, err);
    if (st == KVQ_OK && (n_tok == 0 || n_tok > INT32_MAX))
        st = kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)n_tok);
    if (st == KVQ_OK) {
        st = gguf_get_f32_array(f, "tokenizer.ggml.scores", &scores, &n_scores, err);
        st = tok_check_count(st, "tokenizer.ggml.scores", n_scores, n_tok, err);
        for (uint64_t i = 0; st == KVQ_OK && scores && i < n_scores; i++)
            if (isnan(scores[i]))   /* merges are ordered by score: NaN would order them at random */
                st = kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer.ggml.scores[%llu] is not a number",
                              (unsigned long long)i);
    }
    if (st == KVQ_OK) {
        st = gguf_get_i32_array(f, "tokenizer.ggml.token_type", &types, &n_types, err);
        st = tok_check_count(st, "tokenizer.ggml.token_type", n_types, n_tok, err);
    }
    if (st == KVQ_OK && kind == KVQ_TOK_BPE) {
        st = gguf_get_str_array(f, "tokenizer.ggml.merges", &merges, &n_merges, err);
        if (st == KVQ_OK && n_merges > (1u << 24))   /* ranks must stay exact as floats */
            st = kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer.ggml.merges: too many (%llu)", (unsigned long long)n_merges);
    }
    if (st == KVQ_OK) {
        d.n_vocab = (int32_t)n_tok;
        d.tokens = tokens;
        d.scores = scores;
        d.token_types = types;
        d.n_merges = (int32_t)n_merges;
        d.merges = merges;
        st = tok_flags_from_gguf(f, &d, err);
        if (st == KVQ_OK) st = kvq_tokenizer_create(&d, out, err);
    }
    free(tokens);
    free(merges);
    free(scores);
    free(types);
    return st;
}
