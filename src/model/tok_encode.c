/* tok_encode.c - text -> ids: special tokens are cut out of the raw text
 * first (llama.cpp's order: each special token in turn, longest first,
 * over every remaining raw fragment, left to right), then each raw
 * fragment is tokenized by the vocabulary's algorithm. */
#include "tok_internal.h"

/* A piece of the input: raw text [off, off+len), or one special token. */
typedef struct tok_frag { int32_t id; size_t off, len; } tok_frag;   /* id -1: raw */
typedef struct tok_frags { tok_frag *v; size_t n, cap; } tok_frags;

static bool tok_frags_push(tok_frags *f, int32_t id, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        tok_frag *v = kvq_realloc_n(f->v, cap, sizeof *v);
        if (!v) return false;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (tok_frag){id, off, len};
    return true;
}

/* Split every raw fragment of in at each occurrence of token id's text. */
static bool tok_split_on(const kvq_tokenizer *t, int32_t id, const char *text,
                         const tok_frags *in, tok_frags *out) {
    const char *pat = tok_text(t, id);
    size_t plen = t->tok_len[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        tok_frag f = in->v[i];
        if (f.id >= 0 || f.len < plen) {
            if (!tok_frags_push(out, f.id, f.off, f.len)) return false;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        const char *hit;
        while (end - pos >= plen && (hit = memmem(text + pos, end - pos, pat, plen)) != NULL) {
            size_t at = (size_t)(hit - text);
            if (at > pos && !tok_frags_push(out, -1, pos, at - pos)) return false;
            if (!tok_frags_push(out, id, at, plen)) return false;
            pos = at + plen;
        }
        if (pos < end && !tok_frags_push(out, -1, pos, end - pos)) return false;
    }
    return true;
}

/* Control and unknown tokens are only recognised with parse_special;
 * user-defined ones always are (llama.cpp's rule). */
static bool tok_special_enabled(const kvq_tokenizer *t, int32_t id, bool parse_special) {
    return parse_special || t->type[id] == KVQ_TOKTYPE_USER_DEFINED;
}

static bool tok_partition(const kvq_tokenizer *t, const char *text, size_t len, bool parse_special,
                          tok_frags *frags) {
    tok_frags other = {0};
    bool ok = len == 0 || tok_frags_push(frags, -1, 0, len);
    for (int32_t k = 0; ok && k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!tok_special_enabled(t, id, parse_special)) continue;
        ok = tok_split_on(t, id, text, frags, &other);
        tok_frags swap = *frags;                     /* the split list becomes current */
        *frags = other;
        other = swap;
    }
    free(other.v);
    return ok;
}

int kvq_tokenizer_encode(const kvq_tokenizer *t, const char *text, size_t len, bool add_special,
                         bool parse_special, int32_t *out, int cap) {
    if (!t || (!text && len > 0)) return -1;
    tok_sink sink = {out, out ? KVQ_MAX(cap, 0) : 0, 0};
    tok_frags frags = {0};
    bool ok = tok_partition(t, text, len, parse_special, &frags);
    if (ok && add_special && t->add_bos && t->bos >= 0) tok_emit(&sink, t->bos);
    bool after_special = true;                       /* the start counts as one */
    for (size_t i = 0; ok && i < frags.n; i++) {
        const tok_frag *f = &frags.v[i];
        if (f->id >= 0) {
            tok_emit(&sink, f->id);
            after_special = true;
            continue;
        }
        if (t->kind == KVQ_TOK_SPM)
            ok = tok_spm_encode(t, text + f->off, f->len, t->add_space_prefix && after_special, &sink);
        else
            ok = tok_bpe_encode(t, text + f->off, f->len, &sink);
        after_special = false;
    }
    if (ok && add_special && t->add_eos && t->eos >= 0) tok_emit(&sink, t->eos);
    free(frags.v);
    return ok ? sink.n : -1;
}
