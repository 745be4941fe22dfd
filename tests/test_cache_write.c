/* test_cache_write.c - cache writes split over threads (kvq_cache_write_pool)
 * store the same bytes as the inline write for every kind of body: rows
 * (f16, q4_0, iq4_nl's scale search), TurboQuant trellis codes and KVarN
 * tiles completed inside and across batches. */
#include "cache.h"
#include "test.h"

#include <math.h>
#include <string.h>

enum { LAYERS = 2, HEADS = 3, DIM = 128, CTX = 400, BATCH = 150 };

/* A cache of heads x DIM rows, batches of BATCH, KVarN with 4 iterations
 * (fast and still every code path); NULL when it cannot be created. */
static kvq_cache *make_cache(int layers, int heads, int n_ctx, kvq_type tk, kvq_type tv, int tail) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = layers;
    p.n_head_kv = heads;
    p.head_dim_k = p.head_dim_v = DIM;
    p.n_ctx = n_ctx;
    p.max_batch = BATCH;
    p.type_k = tk;
    p.type_v = tv;
    p.tail_type = KVQ_TYPE_F16;
    p.tail_tokens = tail;
    p.kvarn_iters = 4;
    kvq_cache *c = NULL;
    return kvq_cache_create(&p, &c, NULL) == KVQ_OK ? c : NULL;
}

static kvq_cache *filled(kvq_type tk, kvq_type tv, const float *kv, kvq_pool *pool) {
    kvq_cache *c = make_cache(LAYERS, HEADS, CTX, tk, tv, 64);
    if (!c) return NULL;
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

/* ------------------------------------------------ a write that fails */

enum { FAIL_BATCH0 = 150, FAIL_CTX = 400 };   /* the second write completes KVarN tile 1 */

static kvq_cache *fail_cache(void) { return make_cache(1, 2, FAIL_CTX, KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 16); }

static kvq_status write_span(kvq_cache *c, const float *kv, int pos, int n, kvq_pool *pool, kvq_error *err) {
    const size_t row = 2 * (size_t)DIM;
    return kvq_cache_write_pool(c, 0, pos, n, kv + pos * row, kv + (FAIL_CTX + pos) * row, pool, err);
}

static bool attend_same(kvq_cache *a, kvq_cache *b, const float *q, int pos, int n) {
    const size_t len = (size_t)n * 4 * DIM;          /* 4 query heads: GQA 2 */
    float *oa = malloc(len * sizeof *oa), *ob = malloc(len * sizeof *ob);
    const float scale = 1.0f / sqrtf((float)DIM);
    bool same = oa && ob && kvq_cache_attend(a, 0, pos, n, 4, q, scale, oa, NULL, NULL) == KVQ_OK &&
                kvq_cache_attend(b, 0, pos, n, 4, q, scale, ob, NULL, NULL) == KVQ_OK && !memcmp(oa, ob, len * sizeof *oa);
    free(oa);
    free(ob);
    return same;
}

/* kvq.h's promise for a failed write: nothing is stored (the layer holds
 * what kvq_cache_n_stored said before), and repeating the call gives the
 * cache an uninterrupted write gives, bit for bit.  The second write runs
 * on a 2-thread pool, so it must grow the tile scratch the first (inline)
 * write reserved: that is the allocation a write can fail on. */
TEST(cache_write_failed_call_stores_nothing) {
    const size_t n_kv = 2 * (size_t)FAIL_CTX * 2 * DIM, n_q = (size_t)FAIL_CTX * 4 * DIM;
    float *kv = malloc(n_kv * sizeof *kv), *q = malloc(n_q * sizeof *q);
    kvq_pool *pool = kvq_pool_create(2);
    CHECK(kv && q && pool, "alloc");
    test_rng r = { 5, 0, 0 };
    for (size_t i = 0; i < n_kv; i++) kv[i] = (float)test_rng_gauss(&r) * (i % DIM == 3 ? 5.0f : 1.0f);
    for (size_t i = 0; i < n_q; i++) q[i] = (float)test_rng_gauss(&r);
    kvq_cache *whole = fail_cache();
    CHECK(whole && write_span(whole, kv, 0, FAIL_BATCH0, NULL, NULL) == KVQ_OK &&
              write_span(whole, kv, FAIL_BATCH0, BATCH, pool, NULL) == KVQ_OK &&
              write_span(whole, kv, FAIL_BATCH0 + BATCH, FAIL_CTX - FAIL_BATCH0 - BATCH, pool, NULL) == KVQ_OK,
          "uninterrupted writes");
    long failures = 0;
    for (long at = 1; at <= 64; at++) {
        kvq_cache *c = fail_cache();
        CHECK(c && write_span(c, kv, 0, FAIL_BATCH0, NULL, NULL) == KVQ_OK, "first write");
        kvq_error err = { KVQ_OK, "" };
        kvq_alloc_fail_at(at, 0);
        const kvq_status st = write_span(c, kv, FAIL_BATCH0, BATCH, pool, &err);
        kvq_alloc_fail_at(0, 0);
        if (st == KVQ_OK) { kvq_cache_free(c); break; }       /* no allocation left to fail */
        failures++;
        CHECK(st == KVQ_ERR_NOMEM && err.msg[0], "allocation %ld: status %d (%s)", at, (int)st, err.msg);
        CHECK(kvq_cache_n_stored(c, 0) == FAIL_BATCH0, "allocation %ld: the layer holds %d positions", at,
              kvq_cache_n_stored(c, 0));
        CHECK(write_span(c, kv, FAIL_BATCH0, BATCH, pool, &err) == KVQ_OK &&
                  write_span(c, kv, FAIL_BATCH0 + BATCH, FAIL_CTX - FAIL_BATCH0 - BATCH, pool, &err) == KVQ_OK,
              "allocation %ld: the repeated write: %s", at, err.msg);
        CHECK(attend_same(c, whole, q, 0, BATCH) && attend_same(c, whole, q + (size_t)(FAIL_CTX - 50) * 4 * DIM, FAIL_CTX - 50, 50),
              "allocation %ld: attention differs from an uninterrupted write", at);
        kvq_cache_free(c);
    }
    CHECK(failures >= 1, "the second write made no allocation that could fail");
    CHECK(kvq_cache_n_stored(whole, 0) == FAIL_CTX && kvq_cache_n_stored(whole, 1) == -1 &&
              kvq_cache_n_stored(NULL, 0) == -1,
          "n_stored: %d", kvq_cache_n_stored(whole, 0));
    kvq_cache_free(whole);
    kvq_pool_free(pool);
    free(kv);
    free(q);
}
