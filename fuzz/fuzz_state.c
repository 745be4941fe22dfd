/*
 * fuzz_state.c - libFuzzer target for the cache state loader
 * (kvq_cache_load_memory, src/cache_state.c).
 *
 * One small cache of every family's settings is made once; any input must
 * either restore (then attention over what it holds must run) or fail with
 * a message and leave the cache empty; ASan/UBSan catch the rest.  Each
 * input is read twice: as it is (a mutation almost always fails the
 * trailing checksum) and with the checksum recomputed over its bytes, so
 * the checks behind it (settings, sizes, counts, rows) see mutated content
 * too.  Seeds: fuzz/corpus/state/, written by make fuzz-corpus
 * (fuzz/make_corpus.c saves the caches below at a few lengths).
 */
#include "cache.h"
#include "hash64.h"

#include <stdlib.h>

static kvq_cache *make(kvq_type k, kvq_type v, int tail) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_layer = 2;
    p.n_head_kv = 1;
    p.head_dim_k = p.head_dim_v = 64;
    p.n_ctx = 300;
    p.max_batch = 64;
    p.type_k = k;
    p.type_v = v;
    p.tail_tokens = tail;
    p.rollback_tokens = 8;
    kvq_cache *c = NULL;
    return kvq_cache_create(&p, &c, NULL) == KVQ_OK ? c : NULL;
}

static void restore_each(kvq_cache *const *caches, const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static kvq_cache *caches[3];
    if (!caches[0]) {
        caches[0] = make(KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, 16);
        caches[1] = make(KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 0);
        caches[2] = make(KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_F16, 4);
    }
    restore_each(caches, data, size);
    if (size >= 8) {   /* the same bytes with a checksum that matches them */
        uint8_t *copy = malloc(size);
        if (!copy) return 0;
        memcpy(copy, data, size);
        kvq_wr64(copy + size - 8, kvq_hash64_of(copy, size - 8));
        restore_each(caches, copy, size);
        free(copy);
    }
    return 0;
}

static void restore_each(kvq_cache *const *caches, const uint8_t *data, size_t size) {
    for (int i = 0; i < 3; i++) {
        kvq_cache *c = caches[i];
        if (!c) abort();
        int32_t *toks = NULL;
        int n = 0;
        kvq_error err = { 0, "" };
        if (kvq_cache_load_memory(c, data, size, 0, &toks, &n, &err) == KVQ_OK) {
            if (n > 0) {
                float q[4 * 64], out[4 * 64];
                memset(q, 0, sizeof q);
                if (kvq_cache_attend(c, 0, n - 1, 1, 1, q, 1.0f, out, NULL, &err) != KVQ_OK && !err.msg[0]) abort();
            }
        } else if (!err.msg[0] || c->n_stored[0] != 0) {
            abort();                     /* a refusal says why and leaves nothing behind */
        }
        free(toks);
        kvq_cache_clear(c);
    }
}
