/* test_fuzz_regress.c - each finding of the fuzz targets (docs/fuzzing.md,
 * "Findings") as a unit test that needs no fuzzer: the input, or one
 * crafted the same way, must now be refused cleanly.  (The input files
 * themselves are kept as seeds, fuzz/corpus/NAME/regress-*.) */
#include "test.h"
#include "cache.h"
#include "hash64.h"

#include <string.h>
#include <unistd.h>

/* The q4_0/q8_0 cache of fuzz_state.c: 2 layers, one 64-wide KV head,
 * n_ctx 300, tail 16, rollback 8, rows written by layer as the forward
 * pass writes them. */
static kvq_cache *state_cache(int n, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_layer = 2;
    p.n_head_kv = 1;
    p.head_dim_k = p.head_dim_v = 64;
    p.n_ctx = 300;
    p.max_batch = 64;
    p.type_k = KVQ_TYPE_Q4_0;
    p.type_v = KVQ_TYPE_Q8_0;
    p.tail_tokens = 16;
    p.rollback_tokens = 8;
    kvq_cache *c = NULL;
    if (kvq_cache_create(&p, &c, err) != KVQ_OK) return NULL;
    static float k[64 * 64], v[64 * 64], out[64 * 64];
    for (int i = 0; i < n * 64; i++) {
        k[i] = sinf(0.37f * (float)i);
        v[i] = cosf(0.11f * (float)i);
    }
    for (int layer = 0; layer < 2; layer++)
        if (kvq_cache_write(c, layer, 0, n, k, v, err) != KVQ_OK ||
            kvq_cache_attend(c, layer, 0, n, 1, k, 0.125f, out, NULL, err) != KVQ_OK) {
            kvq_cache_free(c);
            return NULL;
        }
    return c;
}

/* 2026-12-01, state: a state file whose checksum matches but whose
 * "oldest exact row" of a side is 2^32-1 passed the range check as the
 * int -1 and was written before the ring (a heap write out of bounds). */
TEST(fuzz_regress_state_exact_rows_from_out_of_range) {
    kvq_error err = { 0, "" };
    kvq_cache *c = state_cache(5, &err);
    CHECK(c, "cache: %s", err.msg);
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvq_regress_state_%d", (int)getpid());
    int32_t tokens[5] = { 1, 2, 3, 4, 5 };
    const kvq_state_tag tag = { 0, tokens, 5 };
    kvq_status st = kvq_cache_save(c, path, &tag, &err);
    static uint8_t buf[1 << 16];
    FILE *f = st == KVQ_OK ? fopen(path, "rb") : NULL;
    size_t size = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f) fclose(f);
    remove(path);
    CHECK(st == KVQ_OK && size > 40, "save: %s (%zu bytes)", err.msg, size);
    /* header: settings words S at 12, positions n at 24; then S words,
     * n tokens, layer 0's positions, then its K side's oldest exact row */
    const size_t at = 32 + 4 * (size_t)kvq_rd32(buf + 12) + 4 * (size_t)kvq_rd32(buf + 24) + 4;
    CHECK(at + 4 <= size - 8 && kvq_rd32(buf + at) <= 5, "layout: 'from' at %zu reads %u", at, kvq_rd32(buf + at));
    int32_t *toks = NULL;
    int n = 0;
    kvq_status ok = kvq_cache_load_memory(c, buf, size, 0, &toks, &n, &err);   /* as saved: restores */
    free(toks);
    toks = NULL;
    const uint32_t bad[3] = { 0xFFFFFFFFu, 0x80000000u, 6 };
    kvq_status refused[3];
    char msgs[3][256];
    for (int i = 0; i < 3; i++) {
        static uint8_t copy[1 << 16];
        memcpy(copy, buf, size);
        for (int b = 0; b < 4; b++) copy[at + (size_t)b] = (uint8_t)(bad[i] >> 8 * b);
        kvq_wr64(copy + size - 8, kvq_hash64_of(copy, size - 8));   /* a checksum that matches */
        err.msg[0] = 0;
        refused[i] = kvq_cache_load_memory(c, copy, size, 0, &toks, &n, &err);
        snprintf(msgs[i], sizeof msgs[i], "%s", err.msg);
        free(toks);
        toks = NULL;
    }
    kvq_cache_free(c);
    CHECK(ok == KVQ_OK, "the saved state must restore");
    for (int i = 0; i < 3; i++)
        CHECK(refused[i] == KVQ_ERR_FORMAT && strstr(msgs[i], "exact rows from"), "from = %u: status %d '%s'", bad[i],
              (int)refused[i], msgs[i]);
}
