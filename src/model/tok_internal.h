/* tok_internal.h - the tokenizer's insides, shared by tokenizer.c (set-up,
 * special tokens, dispatch), tok_spm.c, tok_bpe.c and tok_pretok.c. */
#ifndef KVQ_TOK_INTERNAL_H
#define KVQ_TOK_INTERNAL_H

#include "tokenizer.h"

#include <stdlib.h>

/* ---- string -> int32 hash map over caller-owned key bytes (tok_strmap.c) */
typedef struct tok_strmap_slot { const char *key; uint32_t len; int32_t value; } tok_strmap_slot;
typedef struct tok_strmap { tok_strmap_slot *slots; size_t mask; } tok_strmap;

/* Room for n keys (load factor <= 1/2).  false when out of memory. */
bool tok_strmap_init(tok_strmap *m, size_t n);
void tok_strmap_free(tok_strmap *m);
/* Insert or overwrite (the last value for a key wins, as in llama.cpp). */
void tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value);
/* The value, or -1 when absent. */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);

/* ---- the tokenizer */
struct kvq_tokenizer {
    kvq_tok_kind kind;
    kvq_tok_pre pre;
    int32_t n_vocab;
    char *text;               /* every token's bytes, then every merge's       */
    uint32_t *tok_off, *tok_len;
    float *score;
    uint8_t *type;
    tok_strmap vocab;         /* token text -> id                               */
    tok_strmap merges;        /* "left right" -> rank (BPE)                     */
    int32_t byte_token[256];  /* id standing for each byte, -1 if none          */
    int32_t *special;         /* ids matched in raw text, longest text first    */
    int32_t n_special;
    int32_t bos, eos, unk, pad;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
};

static inline const char *tok_text(const kvq_tokenizer *t, int32_t id) { return t->text + t->tok_off[id]; }

/* Where encoded ids go: the first cap are stored, all are counted. */
typedef struct tok_sink { int32_t *out; int cap; int n; } tok_sink;
static inline void tok_emit(tok_sink *s, int32_t id) {
    if (s->n < s->cap) s->out[s->n] = id;
    s->n++;
}

/* ---- the merge loop (tok_merge.c) */
typedef struct tok_sym { int32_t prev, next; uint32_t off, len; } tok_sym;
/* Whether adjacent symbols l, r may merge, and with which priority
 * (higher first). */
typedef bool (*tok_pair_fn)(void *ctx, const char *text, const tok_sym *l, const tok_sym *r, float *priority);
/* Split text[0, n) into one symbol per UTF-8 character and merge pairs,
 * highest priority first (leftmost on ties), until none qualifies.
 * Returns the symbols (caller frees; the survivors are linked by next
 * from index 0, merged-away ones have len 0), *n_sym their initial
 * count; NULL when out of memory. */
tok_sym *tok_merge(const char *text, uint32_t n, tok_pair_fn fn, void *ctx, int32_t *n_sym);

/* Tokenize one raw-text segment (no special tokens inside); prefix_space:
 * SPM prepends a space (segment first or after a special token).  false
 * when out of memory. */
bool tok_spm_encode(const kvq_tokenizer *t, const char *text, size_t len, bool prefix_space, tok_sink *s);
bool tok_bpe_encode(const kvq_tokenizer *t, const char *text, size_t len, tok_sink *s);
/* BPE on one pre-token (its raw bytes). */
bool tok_bpe_word(const kvq_tokenizer *t, const char *word, size_t len, tok_sink *s);

/* GPT-2's byte <-> printable code point table. */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);          /* -1 when cp stands for no byte */

/* Pre-tokeniser: split text into words; calls fn(word, len, ctx) for each,
 * stopping early (and returning false) when fn does. */
typedef bool (*tok_word_fn)(const char *word, size_t len, void *ctx);
bool tok_pretokenize(kvq_tok_pre pre, const char *text, size_t len, tok_word_fn fn, void *ctx);

#endif
