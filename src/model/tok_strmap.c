/* tok_strmap.c - open-addressing hash map from byte strings to ids, used
 * for the vocabulary (text -> id) and the BPE merge ranks. */
#include "tok_internal.h"

/* FNV-1a: simple, and good enough spread for vocabulary strings. */
static uint32_t tok_hash(const char *key, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)key[i]) * 16777619u;
    return h;
}

bool tok_strmap_init(tok_strmap *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    m->slots = kvq_calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    return m->slots != NULL;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slots);
    m->slots = NULL;
}

static tok_strmap_slot *tok_strmap_find(const tok_strmap *m, const char *key, size_t len) {
    size_t i = tok_hash(key, len) & m->mask;
    for (;;) {                                       /* never full: load <= 1/2 */
        tok_strmap_slot *s = &m->slots[i];
        if (!s->key || (s->len == len && memcmp(s->key, key, len) == 0)) return s;
        i = (i + 1) & m->mask;
    }
}

void tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t value) {
    tok_strmap_slot *s = tok_strmap_find(m, key, len);
    s->key = key;
    s->len = (uint32_t)len;
    s->value = value;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->slots) return -1;
    const tok_strmap_slot *s = tok_strmap_find(m, key, len);
    return s->key ? s->value : -1;
}
