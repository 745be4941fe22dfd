/* test_cache.c - the KV cache's layout, memory figures, writes and
 * parameter checks (docs/spec/attention.md §2-3). */
#include "attn_ref.h"

#include <string.h>

static void base_params(kvq_cache_params *p) {
    attn_params(p, 2, 64, 64, 64, KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, KVQ_ROT_AUTO);
}

/* Hand-computed: 2 layers x 2 KV heads, K 80 wide, V 48 wide, n_ctx 100.
 *   K row  q4_0: 80 -> 3 blocks x 18 = 54 B; layer 1 overridden to f16: 160 B
 *   V row  q8_0: 48 -> 2 blocks x 34 = 68 B
 *   Rotated block-type rows whose head is not a whole number of blocks are
 *   stored (and mixed) at their padded width, exact copies included:
 *   K q4_0 96 values, K f16 80 (plain: no padding), V q8_0 64.
 *   ring   tail 10 + max_batch 7 = 17 rows, bf16, per head:
 *          layer 0 (96 + 64) x 2 = 320 B, layer 1 (80 + 64) x 2 = 288 B
 *   sink   3 rows of the same 320 + 288 B per head */
TEST(cache_memory_figures_exact) {
    kvq_cache_params p;
    attn_params(&p, 2, 80, 48, 100, KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, KVQ_ROT_AUTO);
    const kvq_type lk[2] = { KVQ_TYPE_Q4_0, KVQ_TYPE_F16 };
    p.n_layer = 2;
    p.layer_type_k = lk;
    p.max_batch = 7;
    p.tail_tokens = 10;
    p.tail_type = KVQ_TYPE_BF16;
    p.sink_tokens = 3;
    kvq_cache *c = NULL;
    kvq_error err;
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    for (size_t i = 0; i < KVQ_ARRAY_LEN(c->mem); i++)   /* each region on a page (kvq_calloc_paged) */
        CHECK(!c->mem_bytes[i] || (uintptr_t)c->mem[i] % KVQ_PAGE_BYTES == 0, "region %zu starts %zu into a page", i,
              (size_t)((uintptr_t)c->mem[i] % KVQ_PAGE_BYTES));
    kvq_cache_free(c);
    CHECK(b.k == (size_t)2 * 100 * (54 + 160), "K body %zu", b.k);
    CHECK(b.v == (size_t)2 * 2 * 100 * 68, "V body %zu", b.v);
    /* the tail is exactly 10 rows, whatever max_batch is; the batch's rows
     * are staged in working memory: 7 rows of the widest K row (layer 0's
     * q4_0, 80 padded to 96: 2 x 192 bytes) and V row (48 padded to 64) */
    CHECK(b.tail == (size_t)2 * 10 * (320 + 288), "tail %zu", b.tail);
    CHECK(b.sink == (size_t)2 * 3 * (320 + 288), "sink %zu", b.sink);
    CHECK(b.total == b.k + b.v + b.tail + b.sink && b.total == 85808, "total %zu", b.total);
    CHECK(b.work == (size_t)7 * (384 + 256), "work %zu", b.work);
    /* layer 0's q4_0 K body is kept 16 keys side by side, both layers'
     * q8_0 V bodies two keys per lane (cache_lanes.h): allocated in whole
     * groups, 112 rows of 54 (68) bytes per head, counted as the 100 they
     * hold */
    CHECK(b.allocated == b.total + b.work + (size_t)2 * 12 * 54 + (size_t)2 * 2 * 12 * 68, "allocated %zu",
          b.allocated);
    CHECK(kvq_cache_row_bytes(KVQ_TYPE_Q4_0, 8, 128) == 8 * 4 * 18, "row bytes q4_0");
    CHECK(kvq_cache_row_bytes(KVQ_TYPE_Q5_1, 1, 24) == 24, "row bytes q5_1 24 (one padded block)");
    CHECK(kvq_cache_row_bytes(KVQ_TYPE_F16, 4, 80) == 640, "row bytes f16");
}

/* No tail, no sink: no exact memory at all; a tail as long as the context
 * holds the whole context once; longer ones are refused. */
TEST(cache_memory_tail_and_sink_bounds) {
    kvq_cache_params p;
    attn_params(&p, 1, 32, 32, 50, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_AUTO);
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    kvq_cache_free(c);
    CHECK(b.tail == 0 && b.sink == 0 && b.k == 50 * 18 && b.total == 2 * 50 * 18, "%zu %zu %zu", b.tail, b.sink, b.k);
    CHECK(b.work == 0, "no tail, yet %zu bytes of stage", b.work);
    p.tail_tokens = 50;
    p.sink_tokens = 50;
    p.tail_type = KVQ_TYPE_F32;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    kvq_cache_memory(c, &b);
    kvq_cache_free(c);
    CHECK(b.tail == 2 * 50 * 128 && b.sink == 2 * 50 * 128, "tail %zu sink %zu", b.tail, b.sink);
}

TEST(cache_rejects_impossible_params) {
    static const char *what[] = { "n_ctx 0", "head_dim_k 0", "head_dim_v 513", "n_head_kv 0", "n_layer 0",
                                  "type", "weight type", "tail type", "layer type", "max_batch 0",
                                  "tail -1", "sink -1", "tail > n_ctx", "sink > n_ctx" };
    const kvq_type bad_layer[2] = { KVQ_TYPE_Q4_0, (kvq_type)99 };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(what); i++) {
        kvq_cache_params p;
        base_params(&p);
        switch (i) {
        case 0: p.n_ctx = 0; break;
        case 1: p.head_dim_k = 0; break;
        case 2: p.head_dim_v = 513; break;
        case 3: p.n_head_kv = 0; break;
        case 4: p.n_layer = 0; break;
        case 5: p.type_k = KVQ_TYPE_COUNT; break;
        case 6: p.type_v = KVQ_TYPE_Q4_K; break;
        case 7: p.tail_type = KVQ_TYPE_Q8_0; break;
        case 8: p.n_layer = 2; p.layer_type_v = bad_layer; break;
        case 9: p.max_batch = 0; break;
        case 10: p.tail_tokens = -1; break;
        case 11: p.sink_tokens = -1; break;
        case 12: p.tail_tokens = p.n_ctx + 1; break;
        case 13: p.sink_tokens = p.n_ctx + 1; break;
        }
        kvq_cache *c = (kvq_cache *)&p;   /* must be reset to NULL */
        kvq_error err = { KVQ_OK, "" };
        kvq_status st = kvq_cache_create(&p, &c, &err);
        CHECK(st == KVQ_ERR_ARG && c == NULL && err.code == KVQ_ERR_ARG && err.msg[0],
              "%s: status %d, message '%s'", what[i], st, err.msg);
    }
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(NULL, &c, NULL) == KVQ_ERR_ARG, "NULL params accepted");
    /* sizes that overflow size_t are refused before any allocation */
    kvq_cache_params p;
    attn_params(&p, 1 << 20, 512, 512, 1 << 30, KVQ_TYPE_F32, KVQ_TYPE_F32, KVQ_ROT_OFF);
    p.n_layer = 1 << 16;
    kvq_error err = { KVQ_OK, "" };
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_ERR_ARG && c == NULL && strstr(err.msg, "overflow"),
          "overflowing size: '%s'", err.msg);
}

TEST(cache_writes_must_be_contiguous) {
    kvq_cache_params p;
    base_params(&p);
    p.n_ctx = 10;
    p.max_batch = 4;
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    float k[4 * 2 * 64] = { 0 };
    kvq_error err;
    kvq_status ok1 = kvq_cache_write(c, 0, 0, 3, k, k, &err);
    kvq_status gap = kvq_cache_write(c, 0, 5, 1, k, k, &err);
    kvq_status back = kvq_cache_write(c, 0, 1, 1, k, k, &err);
    kvq_status big = kvq_cache_write(c, 0, 3, 5, k, k, &err);      /* > max_batch */
    kvq_status ok2 = kvq_cache_write(c, 0, 3, 4, k, k, &err);
    kvq_status ok3 = kvq_cache_write(c, 0, 7, 3, k, k, &err);      /* fills n_ctx */
    kvq_status over = kvq_cache_write(c, 0, 10, 1, k, k, &err);    /* past n_ctx */
    kvq_status layer = kvq_cache_write(c, 1, 0, 1, k, k, &err);
    kvq_cache_clear(c);
    kvq_status again = kvq_cache_write(c, 0, 0, 1, k, k, &err);
    kvq_cache_free(c);
    CHECK(ok1 == KVQ_OK && ok2 == KVQ_OK && ok3 == KVQ_OK && again == KVQ_OK, "valid writes rejected");
    CHECK(gap == KVQ_ERR_ARG && back == KVQ_ERR_ARG && big == KVQ_ERR_ARG && over == KVQ_ERR_ARG &&
          layer == KVQ_ERR_ARG, "invalid writes accepted: %d %d %d %d %d", gap, back, big, over, layer);
}

/* Body, ring and sink hold the same rotated row; rotating back gives the
 * input (exactly for the f32 copies, to quantisation error for q8_0). */
TEST(cache_rows_are_rotated_once_and_copied_exactly) {
    attn_data d;
    CHECK(attn_data_make(&d, 20, 2, 2, 128, 64, 3), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 128, 64, 20, KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_ROT_AUTO);
    p.tail_tokens = 4;
    p.max_batch = 5;
    p.sink_tokens = 2;
    p.tail_type = KVQ_TYPE_F32;
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK && attn_fill(c, &d, 5), "create");
    const kvq_rot_plan *plan = kvq_cache_rotation(c);
    const int bk = plan->block_k;
    float body[128], ring[128], sink[128], rot[128];
    kvq_status s1 = kvq_cache_read_row(c, 0, false, KVQ_PART_BODY, 1, 1, body, NULL);
    kvq_status s2 = kvq_cache_read_row(c, 0, false, KVQ_PART_SINK, 1, 1, sink, NULL);
    kvq_status s3 = kvq_cache_read_row(c, 0, false, KVQ_PART_RING, 1, 19, ring, NULL);
    float old[128];   /* ring of 4 + 5 rows after 20 positions holds 11..19 */
    kvq_status s4 = kvq_cache_read_row(c, 0, false, KVQ_PART_RING, 1, 10, old, NULL);
    kvq_cache_free(c);
    CHECK(bk > 0, "q8_0 with head_dim 128 not rotated under AUTO");
    CHECK(s1 == KVQ_OK && s2 == KVQ_OK && s3 == KVQ_OK && s4 == KVQ_ERR_ARG, "reads %d %d %d %d", s1, s2, s3, s4);
    /* sink holds rotate(k[pos 1, head 1]) exactly */
    memcpy(rot, d.k + (1 * 2 + 1) * 128, sizeof rot);
    kvq_rotate_row(rot, 128, bk, NULL);
    CHECK(memcmp(rot, sink, sizeof rot) == 0, "sink is not the rotated input");
    CHECK(attn_rel_err(body, rot, 128) < 0.02 && attn_rel_err(body, rot, 128) > 0.0,
          "body is not the quantised rotated input (%.3g)", attn_rel_err(body, rot, 128));
    kvq_rotate_row_inverse(sink, 128, bk, NULL);
    CHECK(attn_rel_err(sink, d.k + (1 * 2 + 1) * 128, 128) < 1e-6, "rotation does not invert");
    memcpy(rot, d.k + (19 * 2 + 1) * 128, sizeof rot);
    kvq_rotate_row(rot, 128, bk, NULL);
    CHECK(memcmp(rot, ring, sizeof rot) == 0, "ring row of position 19 is not the rotated input");
    attn_data_free(&d);
}

TEST(cache_rotation_plan_follows_types) {
    kvq_cache_params p;
    attn_params(&p, 1, 128, 128, 8, KVQ_TYPE_F16, KVQ_TYPE_F16, KVQ_ROT_AUTO);
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    const int plain_k = kvq_cache_rotation(c)->block_k;
    kvq_cache_free(c);
    p.type_k = KVQ_TYPE_Q4_0;
    p.type_v = KVQ_TYPE_Q4_0;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    const kvq_rot_plan plan = *kvq_cache_rotation(c);
    kvq_cache_free(c);
    /* a per-layer q4_0 override under f16 defaults still gets rotated */
    const kvq_type lt[2] = { KVQ_TYPE_F16, KVQ_TYPE_Q4_0 };
    p.type_k = p.type_v = KVQ_TYPE_F16;
    p.n_layer = 2;
    p.layer_type_k = lt;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    const int layered_k = kvq_cache_rotation(c)->block_k;
    kvq_cache_free(c);
    CHECK(plain_k == 0, "f16 cache rotated under AUTO (block %d)", plain_k);
    CHECK(plan.block_k == 128 && plan.block_v == 64, "q4_0/128: blocks %d/%d (%s)", plan.block_k,
          plan.block_v, plan.reason);
    CHECK(layered_k == 128, "q4_0 layer override not rotated (block %d)", layered_k);
}

/* Attention's working memory is the cache's, reused: after the largest
 * call (a prefill), decoding steps allocate nothing (the buffer stays the
 * same) and still match the reference over what the cache holds. */
TEST(cache_attend_reuses_its_scratch) {
    attn_data d;
    const int n_tok = 48;
    CHECK(attn_data_make(&d, n_tok, 4, 2, 64, 64, 97), "alloc");
    kvq_cache_params p;
    base_params(&p);
    kvq_cache *c = NULL;
    kvq_error err = { 0 };
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    float *out = malloc((size_t)n_tok * 4 * 64 * sizeof(float)), *ref = malloc(4 * 64 * sizeof(float));
    const float scale = 0.125f;
    bool ok = out && ref && attn_fill(c, &d, 16) &&
              kvq_cache_attend(c, 0, 0, n_tok, 4, d.q, scale, out, NULL, &err) == KVQ_OK;
    const float *first = c->attend_scratch;
    const bool have_first = first != NULL;
    bool reused = true;
    double worst = 0;
    for (int pos = n_tok / 2; ok && pos < n_tok; pos++) {
        ok = kvq_cache_attend(c, 0, pos, 1, 4, d.q + (size_t)pos * 4 * 64, scale, out, NULL, &err) == KVQ_OK &&
             attn_ref_cache(c, &d, pos, 1, scale, ref);
        reused = reused && c->attend_scratch == first;
        if (ok) worst = KVQ_MAX(worst, attn_rel_err(out, ref, 4 * 64));
    }
    kvq_cache_free(c);
    free(out);
    free(ref);
    attn_data_free(&d);
    CHECK(ok, "attend failed: %s", err.msg);
    CHECK(have_first, "no attention scratch after a prefill");
    CHECK(reused, "a decode step reallocated the attention scratch");
    CHECK(worst < 1e-4, "decode vs reference over the cache: rel err %.3g", worst);
}
