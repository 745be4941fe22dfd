/* tok_bpe.c - byte-level BPE (GPT-2 style) on one raw-text segment: the
 * pre-tokeniser splits it into words; each word's bytes are replaced by
 * GPT-2's printable stand-in characters and merged by merge rank (lowest
 * first, via tok_merge.c). */
#include "tok_internal.h"
#include "unicode_class.h"

/* GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', 0xA1..0xAC,
 * 0xAE..0xFF) stand for themselves; the other 68 (0x00..0x20, 0x7F..0xA0,
 * 0xAD) are given code points 256, 257, ... in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;                  /* 33 bytes: 256..288  */
    if (b <= 0xA0) return 256u + 33 + (b - 0x7F);    /* 34 bytes: 289..322  */
    return 256u + 33 + 34;                           /* 0xAD:     323       */
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 33 + 34) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 33 + 34) return 0xAD;
    return -1;
}

typedef struct bpe_ctx { const kvq_tokenizer *t; char *key; } bpe_ctx;

/* Pairs merge by rank: look up "left right" among the merges. */
static bool bpe_pair_rank(void *ctx, const char *text, const tok_sym *l, const tok_sym *r, float *priority) {
    bpe_ctx *c = ctx;
    memcpy(c->key, text + l->off, l->len);
    c->key[l->len] = ' ';
    memcpy(c->key + l->len + 1, text + r->off, r->len);
    int32_t rank = tok_strmap_get(&c->t->merges, c->key, l->len + 1 + r->len);
    if (rank < 0) return false;
    *priority = -(float)rank;                        /* exact: ranks < 2^24 */
    return true;
}

/* A symbol that is no token (merges producing a string outside the
 * vocabulary): one token per character, unk where even that is missing. */
static void bpe_emit_symbol(const kvq_tokenizer *t, const char *text, const tok_sym *y, tok_sink *sink) {
    int32_t id = tok_strmap_get(&t->vocab, text + y->off, y->len);
    if (id >= 0) { tok_emit(sink, id); return; }
    for (uint32_t i = 0; i < y->len;) {
        int n;
        uc_decode((const unsigned char *)text + y->off + i, y->len - i, &n);
        id = tok_strmap_get(&t->vocab, text + y->off + i, (size_t)n);
        if (id < 0) id = t->unk;
        if (id >= 0) tok_emit(sink, id);
        i += (uint32_t)n;
    }
}

bool tok_bpe_word(const kvq_tokenizer *t, const char *word, size_t len, tok_sink *sink) {
    if (len > UINT32_MAX / 4) return false;
    char *mapped = kvq_malloc(2 * len + 1);              /* stand-ins are < U+0800: 2 bytes */
    char *key = kvq_malloc(2 * len + 2);
    if (!mapped || !key) {
        free(mapped);
        free(key);
        return false;
    }
    uint32_t n = 0;
    for (size_t i = 0; i < len; i++) n += (uint32_t)uc_encode(tok_byte_to_cp((uint8_t)word[i]), mapped + n);
    int32_t whole = t->ignore_merges ? tok_strmap_get(&t->vocab, mapped, n) : -1;
    bool ok = true;
    if (whole >= 0) {
        tok_emit(sink, whole);
    } else {
        bpe_ctx c = {t, key};
        int32_t n_sym = 0;
        tok_sym *sym = tok_merge(mapped, n, bpe_pair_rank, &c, &n_sym);
        ok = sym != NULL;
        if (ok)
            for (int32_t i = n_sym > 0 ? 0 : -1; i >= 0; i = sym[i].next) bpe_emit_symbol(t, mapped, &sym[i], sink);
        free(sym);
    }
    free(mapped);
    free(key);
    return ok;
}

typedef struct bpe_words { const kvq_tokenizer *t; tok_sink *sink; } bpe_words;

static bool bpe_on_word(const char *word, size_t len, void *ctx) {
    bpe_words *w = ctx;
    return tok_bpe_word(w->t, word, len, w->sink);
}

bool tok_bpe_encode(const kvq_tokenizer *t, const char *text, size_t len, tok_sink *sink) {
    bpe_words w = {t, sink};
    return tok_pretokenize(t->pre, text, len, bpe_on_word, &w);
}
