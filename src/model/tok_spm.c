/* tok_spm.c - SentencePiece-style tokenization of one text segment:
 * spaces become "▁" (a leading one is added when asked), pairs merge by
 * the score of the token they form (tok_merge.c), and a final symbol that
 * is no token is spelled with byte tokens (<0xNN>). */
#include "tok_internal.h"

static bool spm_pair_score(void *ctx, const char *text, const tok_sym *l, const tok_sym *r, float *priority) {
    const kvq_tokenizer *t = ctx;
    int32_t id = tok_strmap_get(&t->vocab, text + l->off, l->len + r->len);  /* adjacent: contiguous */
    if (id < 0) return false;
    *priority = t->score[id];
    return true;
}

/* "▁"-escape: optional leading space, then every ' ' as U+2581. */
static size_t spm_escape(const char *in, size_t len, bool prefix_space, char *out) {
    size_t n = 0;
    if (prefix_space) { memcpy(out, "\xE2\x96\x81", 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (in[i] == ' ') { memcpy(out + n, "\xE2\x96\x81", 3); n += 3; }
        else out[n++] = in[i];
    }
    return n;
}

static void spm_emit_symbol(const kvq_tokenizer *t, const char *text, const tok_sym *y, tok_sink *sink) {
    int32_t id = tok_strmap_get(&t->vocab, text + y->off, y->len);
    if (id >= 0) { tok_emit(sink, id); return; }
    for (uint32_t i = 0; i < y->len; i++) {          /* byte fallback */
        int32_t b = t->byte_token[(uint8_t)text[y->off + i]];
        if (b < 0) b = t->unk;
        if (b >= 0) tok_emit(sink, b);
    }
}

bool tok_spm_encode(const kvq_tokenizer *t, const char *text, size_t len, bool prefix_space, tok_sink *sink) {
    if (len > UINT32_MAX / 3 - 1) return false;
    char *buf = kvq_malloc_n(3, len + 1);
    if (!buf) return false;
    uint32_t n = (uint32_t)spm_escape(text, len, prefix_space, buf);
    int32_t n_sym = 0;
    tok_sym *sym = tok_merge(buf, n, spm_pair_score, (void *)t, &n_sym);
    if (sym)
        for (int32_t i = n_sym > 0 ? 0 : -1; i >= 0; i = sym[i].next) spm_emit_symbol(t, buf, &sym[i], sink);
    free(sym);
    free(buf);
    return sym != NULL;
}
