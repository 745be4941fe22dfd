/* tok_merge.c - the merge loop both vocabularies share: the text starts as
 * one symbol per UTF-8 character; the adjacent pair with the highest
 * priority (SPM: the merged token's score; BPE: minus the merge's rank) is
 * merged, leftmost first on equal priority, until no pair qualifies.
 * Pairs are queued lazily and dropped when stale, as in SentencePiece. */
#include "tok_internal.h"

typedef struct tok_pair { float priority; int32_t left, right; uint32_t size; } tok_pair;

static bool pair_before(const tok_pair *a, const tok_pair *b) {
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

typedef struct pair_heap { tok_pair *v; size_t n; } pair_heap;

static void heap_push(pair_heap *h, tok_pair p) {
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = p;
}

static tok_pair heap_pop(pair_heap *h) {
    tok_pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c])) c++;
        if (!pair_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

/* Byte length of the UTF-8 character a lead byte starts, counted as
 * llama.cpp does (by the high nibble; a stray continuation byte is 1). */
static uint32_t char_len(uint8_t lead) {
    static const uint8_t len_by_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_by_nibble[lead >> 4];
}

static int32_t split_chars(const char *text, uint32_t n, tok_sym *sym) {
    int32_t n_sym = 0;
    for (uint32_t off = 0; off < n; n_sym++) {
        uint32_t l = KVQ_MIN(char_len((uint8_t)text[off]), n - off);
        sym[n_sym] = (tok_sym){n_sym - 1, n_sym + 1, off, l};
        off += l;
    }
    if (n_sym > 0) sym[n_sym - 1].next = -1;
    return n_sym;
}

typedef struct merge_state {
    const char *text;
    tok_sym *sym;
    pair_heap heap;
    tok_pair_fn fn;
    void *ctx;
} merge_state;

static void try_pair(merge_state *s, int32_t l, int32_t r) {
    float priority;
    if (l < 0 || r < 0 || !s->fn(s->ctx, s->text, &s->sym[l], &s->sym[r], &priority)) return;
    heap_push(&s->heap, (tok_pair){priority, l, r, s->sym[l].len + s->sym[r].len});
}

tok_sym *tok_merge(const char *text, uint32_t n, tok_pair_fn fn, void *ctx, int32_t *n_sym) {
    /* at most n symbols; n-1 initial pairs plus at most 2 per merge */
    tok_sym *sym = kvq_malloc_n((size_t)n + 1, sizeof *sym);
    tok_pair *heap = kvq_malloc_n(3 * (size_t)n + 1, sizeof *heap);
    if (!sym || !heap) {
        free(sym);
        free(heap);
        return NULL;
    }
    merge_state s = {text, sym, {heap, 0}, fn, ctx};
    *n_sym = split_chars(text, n, sym);
    for (int32_t i = 1; i < *n_sym; i++) try_pair(&s, i - 1, i);
    while (s.heap.n > 0) {
        tok_pair p = heap_pop(&s.heap);
        tok_sym *l = &sym[p.left], *r = &sym[p.right];
        /* symbols only grow or vanish, so equal size means still adjacent */
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        try_pair(&s, l->prev, p.left);
        try_pair(&s, p.left, l->next);
    }
    free(heap);
    return sym;
}
