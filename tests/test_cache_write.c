/* test_cache_write.c - cache writes split over threads (kvq_cache_write_pool)
 * store the same bytes as the inline write for every kind of body: rows
 * (f16, q4_0, iq4_nl's scale search), TurboQuant trellis codes and KVarN
 * tiles completed inside and across batches. */
#include "cache.h"
#include "test.h"

#include <string.h>

enum { LAYERS = 2, HEADS = 3, DIM = 128, CTX = 400, BATCH = 150 };

static kvq_cache *filled(kvq_type tk, kvq_type tv, const float *kv, kvq_pool *pool) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = LAYERS;
    p.n_head_kv = HEADS;
    p.head_dim_k = p.head_dim_v = DIM;
    p.n_ctx = CTX;
    p.max_batch = BATCH;
    p.type_k = tk;
    p.type_v = tv;
    p.tail_type = KVQ_TYPE_F16;
    p.tail_tokens = 64;
    p.kvarn_iters = 4;
    kvq_cache *c = NULL;
    if (kvq_cache_create(&p, &c, NULL) != KVQ_OK) return NULL;
    const size_t row = (size_t)HEADS * DIM;
    for (int pos = 0; pos < CTX; pos += BATCH) {
        const int n = KVQ_MIN(BATCH, CTX - pos);
        for (int l = 0; l < LAYERS; l++)
            if (kvq_cache_write_pool(c, l, pos, n, kv + pos * row, kv + (CTX + pos) * row, pool, NULL) != KVQ_OK) {
                kvq_cache_free(c);
                return NULL;
            }
    }
    return c;
}

TEST(cache_write_threads_store_the_same_bytes) {
    const kvq_type types[][2] = {
        { KVQ_TYPE_F16, KVQ_TYPE_Q4_0 }, { KVQ_TYPE_IQ4_NL, KVQ_TYPE_Q8_0 },
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3 }, { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4 },
    };
    const size_t n = 2 * (size_t)CTX * HEADS * DIM;
    float *kv = malloc(n * sizeof *kv);
    kvq_pool *pool = kvq_pool_create(3);
    CHECK(kv && pool, "alloc");
    test_rng r = { 11, 0, 0 };
    for (size_t i = 0; i < n; i++) kv[i] = (float)test_rng_gauss(&r) * (i % DIM == 7 ? 6.0f : 1.0f);
    int failed = -1;
    bool made = true;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0] && failed < 0; ti++) {
        kvq_cache *a = filled(types[ti][0], types[ti][1], kv, NULL), *b = filled(types[ti][0], types[ti][1], kv, pool);
        made = a && b;
        bool same = made;
        for (size_t m = 0; same && m < KVQ_ARRAY_LEN(a->mem); m++)
            same = a->mem_bytes[m] == b->mem_bytes[m] && (!a->mem_bytes[m] || !memcmp(a->mem[m], b->mem[m], a->mem_bytes[m]));
        for (int l = 0; same && l < LAYERS; l++) same = a->n_stored[l] == CTX && b->n_stored[l] == CTX;
        if (!same) failed = (int)ti;
        kvq_cache_free(a);
        kvq_cache_free(b);
    }
    free(kv);
    kvq_pool_free(pool);
    CHECK(failed < 0, "%s/%s: %s", kvq_type_name(types[failed][0]), kvq_type_name(types[failed][1]),
          made ? "3 threads stored other bytes than 1" : "create or write failed");
}
