/* hash64.c - the streaming checksum defined in hash64.h. */
#include "hash64.h"

#include <string.h>

#define K0 0x6b76712d68617368ULL
#define K1 0x9e3779b97f4a7c15ULL

static uint64_t load_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t fmix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static inline uint64_t round64(uint64_t h, uint64_t w) {
    h = (h ^ w) * K1;
    return h ^ (h >> 32);
}

static void put_word(kvq_hash64 *h, uint64_t w) {
    uint64_t *lane = &h->lane[h->n_words & 3];
    *lane = round64(*lane, w);
    h->n_words++;
}

void kvq_hash64_init(kvq_hash64 *h) {
    memset(h, 0, sizeof *h);
    for (int j = 0; j < 4; j++) h->lane[j] = K0 + (uint64_t)j * K1;
}

void kvq_hash64_update(kvq_hash64 *h, const void *data, size_t len) {
    const uint8_t *p = data;
    h->total += len;
    while (h->n_part && len) {                 /* finish a pending word first */
        h->part[h->n_part++] = *p++;
        len--;
        if (h->n_part == 8) {
            put_word(h, load_le64(h->part));
            h->n_part = 0;
        }
    }
    while (len >= 8 && (h->n_words & 3)) {     /* align to lane 0 */
        put_word(h, load_le64(p));
        p += 8;
        len -= 8;
    }
    /* Whole stripes: the four lanes are independent chains. */
    uint64_t a = h->lane[0], b = h->lane[1], c = h->lane[2], d = h->lane[3];
    size_t stripes = len / 32;
    for (size_t s = 0; s < stripes; s++, p += 32) {
        a = round64(a, load_le64(p));
        b = round64(b, load_le64(p + 8));
        c = round64(c, load_le64(p + 16));
        d = round64(d, load_le64(p + 24));
    }
    h->lane[0] = a, h->lane[1] = b, h->lane[2] = c, h->lane[3] = d;
    h->n_words += 4 * (uint64_t)stripes;
    len -= 32 * stripes;
    while (len >= 8) {
        put_word(h, load_le64(p));
        p += 8;
        len -= 8;
    }
    while (len--) h->part[h->n_part++] = *p++;
}

uint64_t kvq_hash64_final(const kvq_hash64 *h) {
    kvq_hash64 t = *h;
    if (t.n_part) {
        uint8_t w[8] = { 0 };
        memcpy(w, t.part, t.n_part);
        put_word(&t, load_le64(w));
    }
    uint64_t r = t.total;
    for (int j = 0; j < 4; j++) r = (r ^ fmix(t.lane[j])) * K1;
    return fmix(r);
}

uint64_t kvq_hash64_of(const void *data, size_t len) {
    kvq_hash64 h;
    kvq_hash64_init(&h);
    kvq_hash64_update(&h, data, len);
    return kvq_hash64_final(&h);
}
