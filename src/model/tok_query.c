/* tok_query.c - the public tokenizer calls beyond encoding and pieces
 * (kvq.h, "tokenizer"): a vocabulary read without weights, the model's
 * own tokenizer, decoding a token list, and token-type queries. */
#include "model.h"
#include "tok_internal.h"

#include <string.h>

_Static_assert((int)KVQ_TOKEN_CONTROL == KVQ_TOKTYPE_CONTROL && (int)KVQ_TOKEN_BYTE == KVQ_TOKTYPE_BYTE &&
                   (int)KVQ_TOKEN_USER_DEFINED == KVQ_TOKTYPE_USER_DEFINED &&
                   (int)KVQ_TOKEN_UNKNOWN == KVQ_TOKTYPE_UNKNOWN,
               "kvq_token_type mirrors the GGUF token types of tokenizer.h");

kvq_status kvq_tokenizer_open(const char *path, kvq_tokenizer **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "kvq_tokenizer_open: out is NULL");
    *out = NULL;
    if (!path) return kvq_fail(err, KVQ_ERR_ARG, "kvq_tokenizer_open: no path");
    gguf_file *gf = NULL;
    kvq_status st = gguf_open(path, &gf, err);
    if (st != KVQ_OK) return st;
    kvq_error inner = { 0 };
    st = kvq_tokenizer_load(gf, out, &inner);
    gguf_close(gf);    /* the tokenizer copied what it needs */
    if (st != KVQ_OK) return kvq_fail(err, st, "%s: %s", path, inner.msg);
    return KVQ_OK;
}

const kvq_tokenizer *kvq_model_tokenizer(const kvq_model *m) { return m ? m->tok : NULL; }

long kvq_tokenizer_decode(const kvq_tokenizer *t, const int32_t *ids, int n, char *buf, size_t cap) {
    if (!t || n < 0 || (n > 0 && !ids)) return -1;
    if (!buf) cap = 0;
    size_t len = 0;
    char small[64];
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) return -1;
        /* a piece is at most the token's text or 3 bytes long (tokenizer.h) */
        const size_t most = t->tok_len[ids[i]] > 3 ? t->tok_len[ids[i]] : 3;
        const size_t room = cap > len + 1 ? cap - len - 1 : 0;
        char *dst = room >= most ? buf + len : most <= sizeof small ? small : kvq_malloc(most);
        if (!dst) return -1;
        const int got = kvq_tokenizer_piece(t, ids[i], dst, (int)(most < (size_t)INT32_MAX ? most : INT32_MAX));
        if (dst != buf + len) {     /* the end of the buffer: copy what fits */
            if (room) memcpy(buf + len, dst, (size_t)got < room ? (size_t)got : room);
            if (dst != small) free(dst);
        }
        len += (size_t)got;
    }
    if (cap) buf[len < cap ? len : cap - 1] = 0;
    return (long)len;
}

kvq_token_type kvq_tokenizer_token_type(const kvq_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_vocab) return KVQ_TOKEN_UNDEFINED;
    return (kvq_token_type)t->type[id];
}

bool kvq_tokenizer_is_special(const kvq_tokenizer *t, int32_t id) {
    const kvq_token_type ty = kvq_tokenizer_token_type(t, id);
    return ty == KVQ_TOKEN_CONTROL || ty == KVQ_TOKEN_USER_DEFINED || ty == KVQ_TOKEN_UNKNOWN;
}

bool kvq_tokenizer_is_eos(const kvq_tokenizer *t, int32_t id) { return t && id >= 0 && id == t->eos; }
