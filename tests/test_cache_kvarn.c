/* test_cache_kvarn.c - KVarN types in the cache (docs/kvarn.md): which
 * positions are exact and which quantised, bytes of records and memory
 * figures by hand, tiles quantised once, rotation as part of the format,
 * attention from records against the formula over the values the cache
 * holds, mixed K/V types, prefill == decode, threads, determinism. */
#include "attn_ref.h"
#include "cache_tiles_simd.h"
#include "kvarn.h"
#include "row_hooks.h"

#include <string.h>
#include <unistd.h>

enum { TILE = 128 };

static size_t record_bytes_128(int bits) { return (size_t)(2048 * bits + 768); }

static kvq_cache *make_cache(const kvq_cache_params *p) {
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    if (kvq_cache_create(p, &c, &err) != KVQ_OK) fprintf(stderr, "create: %s\n", err.msg);
    return c;
}

/* Exact/quantised bookkeeping for sequences of 1..1000 tokens, tail 0:
 * tile 0 and the incomplete last tile exact, every complete tile from 1 on
 * quantised (readable from the body, not otherwise); memory by hand. */
TEST(kvarn_cache_exact_regions_and_bytes) {
    const int lengths[] = { 1, 127, 128, 129, 300, 1000 };
    const int n_ctx = 1024, n_head_kv = 2, hd = 128, batch = 100;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int n = lengths[li];
        attn_data d;
        CHECK(attn_data_make(&d, n, 2, n_head_kv, hd, hd, 5 + li), "alloc");
        kvq_cache_params p;
        attn_params(&p, n_head_kv, hd, hd, n_ctx, KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, KVQ_ROT_AUTO);
        p.max_batch = batch;
        p.tail_type = KVQ_TYPE_F16;
        kvq_cache *c = make_cache(&p);
        CHECK(c && attn_fill(c, &d, batch), "n=%d: create/fill", n);
        /* memory at n_ctx (a whole number of tiles): records of tiles 1..7
         * and 128 exact sink rows, f16; no incomplete tile at that length.
         * Allocated on top: the incomplete tile's 127 rows and the stage of
         * one batch (work). */
        kvq_cache_bytes b;
        kvq_cache_memory(c, &b);
        const size_t tiles = n_ctx / TILE - 1, row = (size_t)hd * 2, stage = 2u * n_head_kv * batch * row;
        CHECK(b.k == n_head_kv * tiles * record_bytes_128(4), "n=%d: K bytes %zu", n, b.k);
        CHECK(b.v == n_head_kv * tiles * record_bytes_128(3), "n=%d: V bytes %zu", n, b.v);
        CHECK(b.sink == 2u * n_head_kv * TILE * row, "n=%d: sink bytes %zu", n, b.sink);
        CHECK(b.tail == 0, "n=%d: tail bytes %zu", n, b.tail);
        CHECK(b.total == b.k + b.v + b.sink + b.tail, "total");
        CHECK(b.work > stage && b.allocated == b.total + b.work + 2u * n_head_kv * 127 * row,
              "n=%d: work %zu allocated %zu", n, b.work, b.allocated);
        CHECK(c->k[0].record_bytes == record_bytes_128(4) && c->v[0].record_bytes == record_bytes_128(3),
              "record bytes %zu %zu", c->k[0].record_bytes, c->v[0].record_bytes);
        /* which copy each key is read from by the last query */
        const int qp = n - 1, complete = n / TILE, staged = (n - 1) / batch * batch;   /* the last write */
        float rd[128];
        int wrong = -1;
        for (int key = 0; key <= qp && wrong < 0; key++) {
            const int tile = key / TILE;
            const kvq_cache_part want = tile == 0          ? KVQ_PART_SINK
                                        : tile < complete ? KVQ_PART_BODY
                                        : key < staged    ? KVQ_PART_RING
                                                          : KVQ_PART_STAGE;
            for (int side = 0; side < 2; side++)
                if (kvq_cache_key_part(c, 0, side, qp, key) != want) wrong = key;
            const bool quantised = kvq_cache_read_row(c, 0, false, KVQ_PART_BODY, 1, key, rd, NULL) == KVQ_OK;
            if (quantised != (want == KVQ_PART_BODY)) wrong = key;
        }
        CHECK(wrong < 0, "n=%d: key %d read from the wrong copy", n, wrong);
        kvq_cache_free(c);
        attn_data_free(&d);
    }
}

/* The tail counts whole tiles back from the query's incomplete tile:
 * tail 100 -> 128; a query at 1000 (7 complete tiles, 896..1000 exact)
 * also reads tile 6 exactly; sink 200 -> 256 exact first positions. */
TEST(kvarn_cache_tail_and_sink_round_to_tiles) {
    attn_data d;
    CHECK(attn_data_make(&d, 1001, 2, 1, 64, 64, 9), "alloc");
    kvq_cache_params p;
    attn_params(&p, 1, 64, 64, 1100, KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN8, KVQ_ROT_AUTO);
    p.max_batch = 64;
    p.tail_tokens = 100;
    p.sink_tokens = 200;
    p.tail_type = KVQ_TYPE_F16;
    kvq_cache *c = make_cache(&p);
    CHECK(c && attn_fill(c, &d, 64), "create/fill");
    CHECK(c->k[0].tail_tokens == 128 && c->k[0].sink_rows == 256, "tail %d sink %d", c->k[0].tail_tokens,
          c->k[0].sink_rows);
    /* 64-wide tiles: K records 64 channel rows + 128 token columns */
    CHECK(c->k[0].record_bytes == (size_t)(1024 * 2 + 2 * (2 * 64 + 128)), "K64 record %zu", c->k[0].record_bytes);
    CHECK(c->v[0].record_bytes == (size_t)(1024 * 8 + 2 * (2 * 128 + 64)), "V64 record %zu", c->v[0].record_bytes);
    const int qp = 1000;   /* the last write was 960..1000 */
    for (int key = 0; key <= qp; key++) {
        const kvq_cache_part want = key < 256   ? KVQ_PART_SINK
                                    : key < 768 ? KVQ_PART_BODY
                                    : key < 960 ? KVQ_PART_RING
                                                : KVQ_PART_STAGE;
        CHECK(kvq_cache_key_part(c, 0, false, qp, key) == want, "key %d", key);
    }
    /* ring: the tail tile + the incomplete tile's at most 127 rows,
     * whatever the batch */
    CHECK(c->k[0].ring_rows == 128 + 127, "ring rows %d", c->k[0].ring_rows);
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    CHECK(b.k == (size_t)(1100 / 128 - 2) * c->k[0].record_bytes, "K bytes %zu", b.k);
    /* kept at n_ctx 1100: the tail tile + 1100 % 128 = 76 incomplete rows */
    CHECK(b.tail == 2u * (128 + 76) * 64 * 2 && b.sink == 2u * 256 * 64 * 2, "tail %zu sink %zu", b.tail, b.sink);
    kvq_cache_free(c);
    attn_data_free(&d);
}

/* A tile is quantised once, when complete, from the staging rows: its
 * record does not change when later tokens arrive; two caches fed the
 * same input hold the same bytes. */
TEST(kvarn_cache_tiles_quantised_once_and_deterministic) {
    attn_data d;
    CHECK(attn_data_make(&d, 700, 2, 2, 256, 96, 21), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 256, 96, 700, KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, KVQ_ROT_OFF);
    p.max_batch = 300;
    kvq_cache *a = make_cache(&p), *b = make_cache(&p);
    CHECK(a && b, "create");
    CHECK(a->k[0].n_slices == 2 && a->k[0].store_dim == 256, "256 head: %d slices", a->k[0].n_slices);
    CHECK(a->v[0].n_slices == 1 && a->v[0].store_dim == 128, "96 head padded to %d", a->v[0].store_dim);
    const size_t kb = a->bytes.k, vb = a->bytes.v;
    kvq_error err;
    CHECK(kvq_cache_write(a, 0, 0, 256, d.k, d.v, &err) == KVQ_OK, "%s", err.msg);
    uint8_t *snap = malloc(kb + vb);
    CHECK(snap, "alloc");
    memcpy(snap, a->mem[0], kb);
    memcpy(snap + kb, a->mem[1], vb);
    CHECK(kvq_cache_write(a, 0, 256, 300, d.k + (size_t)256 * 2 * 256, d.v + (size_t)256 * 2 * 96, &err) == KVQ_OK,
          "%s", err.msg);
    /* tile 1 of every head: unchanged bytes */
    for (int h = 0; h < 2; h++) {
        const size_t k_off = (size_t)h * a->k[0].body_head_bytes, v_off = (size_t)h * a->v[0].body_head_bytes;
        CHECK(!memcmp(snap + k_off, a->mem[0] + k_off, 2 * a->k[0].record_bytes), "K tile 1 head %d changed", h);
        CHECK(!memcmp(snap + kb + v_off, a->mem[1] + v_off, a->v[0].record_bytes), "V tile 1 head %d changed", h);
    }
    free(snap);
    CHECK(attn_fill(b, &(attn_data){ 556, 2, 2, 256, 96, d.k, d.v, d.q }, 7), "fill b in batches of 7");
    CHECK(!memcmp(a->mem[0], b->mem[0], kb) && !memcmp(a->mem[1], b->mem[1], vb),
          "same input in other batches gave different records");
    kvq_cache_free(a);
    kvq_cache_free(b);
    attn_data_free(&d);
}

/* KVarN rotates as part of its format: --attn-rot off does not switch it
 * off, a block type on the other side keeps the generic rule. */
TEST(kvarn_cache_rotation_is_part_of_the_format) {
    kvq_cache_params p;
    attn_params(&p, 1, 128, 64, 256, KVQ_TYPE_KVARN4, KVQ_TYPE_Q4_0, KVQ_ROT_OFF);
    kvq_cache *c = make_cache(&p);
    CHECK(c, "create");
    CHECK(c->k[0].rot_block == 128 && c->v[0].rot_block == 0, "rot off: K %d V %d", c->k[0].rot_block, c->v[0].rot_block);
    CHECK(strstr(kvq_cache_rotation(c)->reason, "kvarn4 rotates inside its format"), "reason: %s",
          kvq_cache_rotation(c)->reason);
    kvq_cache_free(c);
    attn_params(&p, 1, 64, 128, 256, KVQ_TYPE_Q8_0, KVQ_TYPE_KVARN3, KVQ_ROT_AUTO);
    c = make_cache(&p);
    CHECK(c && c->k[0].rot_block == 64 && c->v[0].rot_block == 128, "auto: K %d V %d", c ? c->k[0].rot_block : -1,
          c ? c->v[0].rot_block : -1);
    kvq_cache_free(c);
}

/* Attention straight from records == the formula over the values the
 * cache holds (records dequantised, exact rows where the rule says), for
 * every KVarN width, heads 64/128/256/512 and padded 80, GQA, mixed with block
 * and plain types, with and without tail, prefill batches and decode. */
TEST(kvarn_cache_attention_equals_reference_on_cached_values) {
    static const struct { kvq_type k, v; int hd_k, hd_v, gqa, tail, batch; } cases[] = {
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN4, 128, 128, 4, 0, 64 },
        { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN3, 64, 64, 2, 0, 300 },
        { KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, 256, 256, 1, 100, 50 },
        { KVQ_TYPE_KVARN8, KVQ_TYPE_KVARN4, 80, 80, 3, 0, 33 },
        { KVQ_TYPE_Q8_0, KVQ_TYPE_KVARN3, 128, 128, 2, 40, 64 },
        { KVQ_TYPE_KVARN4, KVQ_TYPE_F16, 128, 64, 2, 0, 64 },
        { KVQ_TYPE_KVARN3, KVQ_TYPE_Q4_0, 64, 128, 4, 7, 90 },
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN2, 512, 512, 2, 0, 128 },
    };
    const bool san = test_sanitized();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int n_tok = san ? 290 : 420, pos = san ? 250 : 380;
        attn_data d;
        CHECK(attn_data_make(&d, n_tok, 2 * cases[i].gqa, 2, cases[i].hd_k, cases[i].hd_v, 100 + i), "alloc");
        char msg[300] = "";
        kvq_cache_params p;
        attn_params(&p, 2, cases[i].hd_k, cases[i].hd_v, n_tok, cases[i].k, cases[i].v, KVQ_ROT_AUTO);
        p.max_batch = KVQ_MAX(cases[i].batch, n_tok - pos);   /* the queries are the last write */
        p.tail_tokens = cases[i].tail;
        p.tail_type = KVQ_TYPE_F16;
        kvq_cache *c = make_cache(&p);
        CHECK(c && attn_fill_upto(c, &d, cases[i].batch, pos), "case %zu: create/fill", i);
        const size_t len = (size_t)(n_tok - pos) * d.n_head * d.hd_v;
        float *out = malloc(len * sizeof *out), *ref = malloc(len * sizeof *ref);
        CHECK(out && ref, "alloc");
        const float scale = 1.0f / sqrtf((float)d.hd_k);
        kvq_error err;
        kvq_status st = kvq_cache_attend(c, 0, pos, n_tok - pos, d.n_head, d.q + (size_t)pos * d.n_head * d.hd_k,
                                         scale, out, NULL, &err);
        snprintf(msg, sizeof msg, "%s", st ? err.msg : "");
        const bool ref_ok = attn_ref_cache(c, &d, pos, n_tok - pos, scale, ref);
        const double e = attn_rel_err(out, ref, len);
        /* K from records, the float path (records unpacked to f32 rows):
         * float query, so as close as float sums get (block-type K: the
         * reference rounds the query as the fused kernels do); the default (fused) path scores KVarN
         * K records with the folded query rounded to int16 (docs/kvarn.md:
         * scores move by up to ~5e-5 of the largest; the kernels against
         * the rounded query: kvarn_fused_kernels_match_references...) */
        const kvq_attend_loop tile_loop = { KVQ_PASS_CHUNKED, attn_block_level("scalar-tile"), false };
        st = st ? st : kvq_cache_attend_loop(c, 0, pos, n_tok - pos, d.n_head, d.q + (size_t)pos * d.n_head * d.hd_k,
                                             scale, out, NULL, NULL, &tile_loop, &err);
        const double e_tile = attn_rel_err(out, ref, len);
        const bool int_k = kvq_type_get(cases[i].k)->layout == KVQ_LAYOUT_TILES;
        kvq_cache_free(c);
        free(out);
        free(ref);
        attn_data_free(&d);
        CHECK(st == KVQ_OK && ref_ok, "case %zu: %s", i, msg);
        CHECK(!int_k || e_tile < 2e-5, "case %zu (%s/%s hd %d/%d): float path rel err %.3g vs reference on cached values", i,
              kvq_type_name(cases[i].k), kvq_type_name(cases[i].v), cases[i].hd_k, cases[i].hd_v, e_tile);
        /* V records in pairs: their weights' rounding (attn_tolerance) */
        const double tol = KVQ_MAX(int_k ? 2e-4 : 2e-5, attn_tolerance(cases[i].k, cases[i].v, cases[i].hd_v));
        CHECK(e < tol, "case %zu (%s/%s hd %d/%d): rel err %.3g vs reference on cached values", i,
              kvq_type_name(cases[i].k), kvq_type_name(cases[i].v), cases[i].hd_k, cases[i].hd_v, e);
    }
}

/* Prefill in batches == one decode step at a time (each query reads the
 * same copies whatever the batch), and 1 vs 3 threads are bitwise equal. */
TEST(kvarn_cache_prefill_equals_decode_and_threads_agree) {
    const int n_tok = test_sanitized() ? 280 : 400, n_head = 4, hd = 128;
    attn_data d;
    CHECK(attn_data_make(&d, n_tok, n_head, 2, hd, hd, 77), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, hd, hd, n_tok, KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, KVQ_ROT_AUTO);
    p.max_batch = 100;
    kvq_cache *pre = make_cache(&p), *dec = make_cache(&p);
    kvq_pool *pool = kvq_pool_create(3);
    CHECK(pre && dec && pool, "create");
    const size_t row = (size_t)n_head * hd;
    float *a = malloc((size_t)n_tok * row * sizeof *a), *b = malloc((size_t)n_tok * row * sizeof *b),
          *c3 = malloc((size_t)n_tok * row * sizeof *c3);
    CHECK(a && b && c3, "alloc");
    const float scale = 0.09f;
    kvq_error err;
    bool ok = true;
    for (int p0 = 0; p0 < n_tok && ok; p0 += 100) {
        const int n = KVQ_MIN(100, n_tok - p0);
        ok = !kvq_cache_write(pre, 0, p0, n, d.k + (size_t)p0 * 2 * hd, d.v + (size_t)p0 * 2 * hd, &err) &&
             !kvq_cache_attend(pre, 0, p0, n, n_head, d.q + (size_t)p0 * row, scale, a + (size_t)p0 * row, NULL, &err) &&
             !kvq_cache_attend(pre, 0, p0, n, n_head, d.q + (size_t)p0 * row, scale, c3 + (size_t)p0 * row, pool, &err);
    }
    for (int t = 0; t < n_tok && ok; t++)
        ok = !kvq_cache_write(dec, 0, t, 1, d.k + (size_t)t * 2 * hd, d.v + (size_t)t * 2 * hd, &err) &&
             !kvq_cache_attend(dec, 0, t, 1, n_head, d.q + (size_t)t * row, scale, b + (size_t)t * row, NULL, &err);
    CHECK(ok, "%s", err.msg);
    CHECK(!memcmp(pre->mem[0], dec->mem[0], pre->bytes.k), "records differ between prefill and decode");
    /* prefill and decode cut the keys into other chunks, and V in pairs
     * rounds its weights per chunk (attn_tolerance) */
    const double e = attn_rel_err(a, b, (size_t)n_tok * row);
    CHECK(e < attn_tolerance(KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN3, hd), "prefill vs decode rel err %.3g", e);
    CHECK(!memcmp(a, c3, (size_t)n_tok * row * sizeof *a), "1 vs 3 threads not bitwise equal");
    free(a); free(b); free(c3);
    kvq_pool_free(pool);
    kvq_cache_free(pre);
    kvq_cache_free(dec);
    attn_data_free(&d);
}

/* KVarN's quantised tiles cost accuracy (the kernel reads them), and a
 * tail covering the context makes the cache exact. */
TEST(kvarn_cache_tail_covering_context_is_exact) {
    const int n_tok = 300;
    attn_data d;
    CHECK(attn_data_make(&d, n_tok, 2, 1, 128, 128, 31), "alloc");
    float *out = malloc((size_t)n_tok * 2 * 128 * sizeof *out), *ref = malloc((size_t)n_tok * 2 * 128 * sizeof *ref);
    CHECK(out && ref, "alloc");
    attn_ref_plain(&d, 0, n_tok, 0.1f, ref);
    double err_tail[2];
    for (int tail = 0; tail < 2; tail++) {
        kvq_cache_params p;
        attn_params(&p, 1, 128, 128, n_tok, KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN2, KVQ_ROT_AUTO);
        p.tail_tokens = tail ? n_tok : 0;
        p.tail_type = KVQ_TYPE_F32;
        kvq_cache *c = make_cache(&p);
        kvq_error err;
        CHECK(c && attn_fill(c, &d, n_tok) && !kvq_cache_attend(c, 0, 0, n_tok, 2, d.q, 0.1f, out, NULL, &err),
              "run");
        err_tail[tail] = attn_rel_err(out, ref, (size_t)n_tok * 2 * 128);
        kvq_cache_free(c);
    }
    free(out);
    free(ref);
    attn_data_free(&d);
    CHECK(err_tail[1] < 1e-5, "tail >= context: rel err %.3g", err_tail[1]);
    CHECK(err_tail[0] > 1e-3, "kvarn2 without tail: rel err only %.3g (are records read?)", err_tail[0]);
}

/* The type table: names, bits, record bytes as bpv, cache row bytes. */
TEST(kvarn_cache_type_table) {
    const kvq_type types[] = { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN4,
                               KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, KVQ_TYPE_KVARN8 };
    const int bits[] = { 2, 3, 4, 5, 6, 8 };
    for (int i = 0; i < 6; i++) {
        const kvq_type_traits *tr = kvq_type_get(types[i]);
        char name[16];
        snprintf(name, sizeof name, "kvarn%d", bits[i]);
        CHECK(tr && !strcmp(tr->name, name) && kvq_type_from_name(name) == types[i], "%s", name);
        CHECK(tr->layout == KVQ_LAYOUT_TILES && tr->format_rot == KVQ_FMT_ROT_SLICE && tr->bits == bits[i] &&
                  tr->is_cache_type && !tr->is_block_quant,
              "%s columns", name);
        CHECK(fabs(kvq_type_bpv(types[i]) - (bits[i] + 0.375)) < 1e-12, "%s bpv %g", name, kvq_type_bpv(types[i]));
        CHECK(kvq_row_bytes(types[i], 128) == 0, "%s has no rows", name);
        CHECK(kvq_cache_row_bytes(types[i], 8, 256) == (size_t)8 * 2 * (16 * bits[i] + 6), "%s: bytes/token", name);
    }
}

/* The AVX2 unpacking of codes and fp16 metadata gives exactly the scalar
 * floats, for every width, on random bytes (16 bytes of slack after the
 * tokens, as the record's metadata provides). */
TEST(kvarn_cache_simd_unpack_equals_scalar) {
    const kvq_cpu *cpu = kvq_cpu_features();
    if (!cpu->avx2 || !cpu->f16c) SKIP("no AVX2/F16C (or KVQ_FORCE_SCALAR)");
    const int bits[] = { 2, 3, 4, 5, 6, 8 };
    uint8_t buf[128 + 16];
    float a[128], b[128];
    test_rng r = { 99, 0, 0 };
    for (int i = 0; i < 6; i++)
        for (int rep = 0; rep < 20; rep++) {
            const int width = rep % 2 ? 64 : 128;
            for (size_t k = 0; k < sizeof buf; k++) buf[k] = (uint8_t)test_rng_u64(&r);
            kvq_tiles_codes_scalar(buf, width, bits[i], a);
            kvq_tiles_codes_avx2(buf, width, bits[i], b);
            CHECK(!memcmp(a, b, (size_t)width * sizeof *a), "bits %d width %d: codes differ", bits[i], width);
        }
    for (int n = 1; n <= 40; n++) {
        for (size_t k = 0; k < sizeof buf; k++) buf[k] = (uint8_t)test_rng_u64(&r);
        for (int k = 0; k < n; k++) buf[2 * k + 1] &= 0x7b;   /* finite halves (no NaN payload compare) */
        kvq_tiles_halves_scalar(buf, n, a);
        kvq_tiles_halves_avx2(buf, n, b);
        CHECK(!memcmp(a, b, (size_t)n * sizeof *a), "%d halves differ", n);
    }
}

/* kvq quant-test measures KVarN on whole 128-row tiles (docs/spec/formats.md §6):
 * one table row, error ordered by bits; fewer rows than a tile: a note. */
TEST(kvarn_cli_quant_test_tiles) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    static char out[1 << 14];
    char cmd[1024];
    double nmse[2];
    const char *types[2] = { "kvarn3", "kvarn5" };
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s quant-test --dim 64 --rows 128 --type %s --outliers", bin, types[i]);
        CHECK(test_run(cmd, out, sizeof out) == 0, "'%s': %s", cmd, out);
        char needle[32];
        snprintf(needle, sizeof needle, "\n| %s |", types[i]);
        const char *row = strstr(out, needle);
        CHECK(row && sscanf(row + strlen(needle), " %*f | %*e | %lf", &nmse[i]) == 1, "no row for %s in:\n%s",
              types[i], out);
    }
    CHECK(nmse[0] > 0 && nmse[0] < 0.1 && nmse[1] < nmse[0] / 4, "kvarn3 nmse %g, kvarn5 %g", nmse[0], nmse[1]);
    snprintf(cmd, sizeof cmd, "%s quant-test --dim 64 --rows 16 --type kvarn3 2>&1", bin);
    CHECK(test_run(cmd, out, sizeof out) == 0 && strstr(out, "needs --rows >= 128"), "short rows: %s", out);
}

/* kvq_cache_plan_bytes (what tools report at other contexts) gives the
 * figures of the cache created from the same parameters, for tile, turbo
 * and block sides with tails, sinks, padded heads and per-layer types. */
TEST(cache_plan_bytes_equal_created_cache) {
    static const kvq_type layers_k[3] = { KVQ_TYPE_KVARN4, KVQ_TYPE_Q4_0, KVQ_TYPE_TURBO3 };
    static const struct { kvq_type k, v; int hd, tail, sink, n_ctx, batch; bool per_layer; } cases[] = {
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 128, 0, 0, 1000, 100, false },
        { KVQ_TYPE_Q8_0, KVQ_TYPE_KVARN2, 80, 300, 5, 4096, 512, false },
        { KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_F16, 192, 64, 0, 777, 64, false },
        { KVQ_TYPE_F16, KVQ_TYPE_Q4_0, 64, 0, 200, 300, 300, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvq_cache_params p;
        attn_params(&p, 2, cases[i].hd, cases[i].hd, cases[i].n_ctx, cases[i].k, cases[i].v, KVQ_ROT_AUTO);
        p.n_layer = 3;
        p.tail_tokens = cases[i].tail;
        p.sink_tokens = cases[i].sink;
        p.max_batch = cases[i].batch;
        if (cases[i].per_layer) p.layer_type_k = layers_k;
        kvq_cache_bytes planned, made;
        kvq_error err = { 0, "" };
        CHECK(kvq_cache_plan_bytes(&p, &planned, &err) == KVQ_OK, "case %zu: %s", i, err.msg);
        kvq_cache *c = make_cache(&p);
        CHECK(c, "case %zu: create", i);
        kvq_cache_memory(c, &made);
        kvq_cache_free(c);
        CHECK(!memcmp(&planned, &made, sizeof made), "case %zu: planned %zu bytes, created %zu", i, planned.total,
              made.total);
    }
    kvq_cache_params p;
    attn_params(&p, 1, 128, 128, 100, KVQ_TYPE_KVARN4, KVQ_TYPE_COUNT, KVQ_ROT_AUTO);
    kvq_cache_bytes b;
    CHECK(kvq_cache_plan_bytes(&p, &b, NULL) == KVQ_ERR_ARG, "bad type accepted");
}

/* KVarN's T (normalisation iterations) is a cache parameter: 0 means the
 * format's 16, and another T changes the quantised tile. */
static bool kvarn_row_with_iters(int iters, float *row, char *msg, size_t cap) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_layer = 1;
    p.n_head_kv = 1;
    p.head_dim_k = p.head_dim_v = 128;
    p.n_ctx = 512;
    p.max_batch = 256;
    p.type_k = p.type_v = KVQ_TYPE_KVARN4;
    p.kvarn_iters = iters;
    static float k[256 * 128], v[256 * 128];
    test_rng r = { 42, 0, 0 };
    for (int i = 0; i < 256 * 128; i++) {
        k[i] = (float)test_rng_gauss(&r) * (i % 128 == 3 ? 12.0f : 1.0f);
        v[i] = (float)test_rng_gauss(&r);
    }
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    bool ok = kvq_cache_create(&p, &c, &err) == KVQ_OK && kvq_cache_write(c, 0, 0, 256, k, v, &err) == KVQ_OK &&
              kvq_cache_read_row(c, 0, false, KVQ_PART_BODY, 0, 200, row, &err) == KVQ_OK;
    if (!ok) snprintf(msg, cap, "%s", err.msg);
    kvq_cache_free(c);
    return ok;
}

TEST(kvarn_cache_iterations_parameter) {
    float def[128], t16[128], t1[128];
    char msg[300] = "";
    CHECK(kvarn_row_with_iters(0, def, msg, sizeof msg), "%s", msg);
    CHECK(kvarn_row_with_iters(16, t16, msg, sizeof msg), "%s", msg);
    CHECK(kvarn_row_with_iters(1, t1, msg, sizeof msg), "%s", msg);
    CHECK(memcmp(def, t16, sizeof def) == 0, "kvarn_iters 0 is not the default T = 16");
    CHECK(memcmp(def, t1, sizeof def) != 0, "kvarn_iters 1 quantised the tile like T = 16");
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.kvarn_iters = -1;
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_ERR_ARG && strstr(err.msg, "kvarn_iters"), "bad T accepted: %s", err.msg);
}

/* ---- the fused record kernels (attn_kvarn.inc) through the hooks, at
 * every level this CPU runs, against references in double built from the
 * record: K scores with the int16-rounded folded query (tight), the
 * unrounded ones within the rounding's bound (docs/kvarn.md), and V sums
 * with keys weighted 0 by every head and by some. */

static const uint8_t *record_at(const kvq_cache_side *sd, int head, int tile, int slice) {
    return sd->body + (size_t)head * sd->body_head_bytes +
           ((size_t)(tile - sd->first_tile) * (size_t)sd->n_slices + (size_t)slice) * sd->record_bytes;
}

static float half_at(const uint8_t *p, int i) { return kvq_half_to_float(kvq_rd16(p + 2 * i)); }

/* The folded query of one head and slice rounded as docs/kvarn.md
 * defines it, written out plainly: qhat_c = qscale_b * qi_c, top levels a
 * side (32767, or 127 for the int8 query); a score is O_t (sum_c qhat_c
 * (code_c - m) + m sum_c q_c S_c + sum_c q_c Z_c). */
static void rounded_fold(const float *q, const uint8_t *S, int w, float top, double *qhat, double *qscale) {
    for (int b = 0; b < w / 32; b++) {
        float qs[32], amax = 0.0f;
        for (int i = 0; i < 32; i++) {
            qs[i] = q[b * 32 + i] * half_at(S, b * 32 + i);
            amax = fabsf(qs[i]) > amax ? fabsf(qs[i]) : amax;
        }
        const float inv = top / amax, sc = amax / top;
        qscale[b] = sc;
        for (int i = 0; i < 32; i++) qhat[b * 32 + i] = (double)sc * (double)lrintf(qs[i] * inv);
    }
}

typedef struct run_refs {
    double k_round[20 * ATTN_RUN_KEYS];  /* scores with the rounded folded query */
    double k_exact[20 * ATTN_RUN_KEYS];  /* ... with the float query            */
    double k_bound[20 * ATTN_RUN_KEYS];  /* the rounding's bound per score      */
    double v[20 * 512];                    /* acc0 + sum_t p_t v_t                */
    double v_bound[20 * 512];              /* V records in pairs: the weights' rounding's bound */
} run_refs;

/* References of one run (key0, nk) of KV head h for G heads, the folded
 * query rounded to `top` levels a side. */
static void run_reference(const kvq_cache *c, int h, int key0, int nk, int G, const float *q, int stride,
                          float scale, float top, const float *pw, const float *acc0, int acc_stride, run_refs *r) {
    const kvq_cache_side *sk = &c->k[0], *sv = &c->v[0];
    const int w = sk->tile.width, tile = key0 / TILE, m = 1 << (sk->tile.bits - 1);
    float row[512];
    uint8_t codes[128];
    for (int g = 0; g < G; g++)
        for (int t = 0; t < nk; t++) {
            double ex = 0, ro = 0, bound = 0;
            for (int s = 0; s < sk->n_slices; s++) {
                const uint8_t *rec = record_at(sk, h, tile, s);
                const kvq_kvarn_meta mt = kvq_kvarn_meta_of(sk->tile, rec);
                const float *qg = q + (size_t)g * stride + s * w;
                double qhat[128], qscale[4], sum = 0, qz = 0;
                rounded_fold(qg, mt.S, w, top, qhat, qscale);
                uint8_t file_rec[KVQ_TILES_RECORD_MAX];   /* the codes token-major, whatever the memory's order */
                kvq_tiles_record_out(sk, rec, file_rec);
                kvq_kvarn_unpack(sk->tile, file_rec, (key0 + t) % TILE, 1, codes);
                for (int ch = 0; ch < w; ch++) {   /* codes centred on m: q_c S_c m unrounded */
                    sum += qhat[ch] * ((double)codes[ch] - m) + (double)(qg[ch] * half_at(mt.S, ch)) * m;
                    qz += (double)qg[ch] * half_at(mt.Z, ch);
                    bound += qscale[ch / 32] / 2 * fabs((double)codes[ch] - m) * fabs(half_at(mt.O, (key0 + t) % TILE));
                }
                ro += half_at(mt.O, (key0 + t) % TILE) * (sum + qz);
            }
            kvq_row_hooks_of(sk->type)->read_row(sk, h, key0 + t, row);
            for (int d = 0; d < sk->store_dim; d++) ex += (double)q[(size_t)g * stride + d] * row[d];
            r->k_round[g * ATTN_RUN_KEYS + t] = scale * ro;
            r->k_exact[g * ATTN_RUN_KEYS + t] = scale * ex;
            r->k_bound[g * ATTN_RUN_KEYS + t] = scale * bound;
        }
    for (int g = 0; g < G; g++)
        for (int d = 0; d < sv->store_dim; d++) r->v[g * 512 + d] = acc0[(size_t)g * acc_stride + d];
    for (int t = 0; t < nk; t++) {
        kvq_row_hooks_of(sv->type)->read_row(sv, h, key0 + t, row);
        for (int g = 0; g < G; g++)
            for (int d = 0; d < sv->store_dim; d++) r->v[g * 512 + d] += (double)pw[g * ATTN_RUN_KEYS + t] * row[d];
    }
    /* V in pairs (cache_tiles_layout.h): each weight p_t S_t rounded to
     * int16 on the scale s = max_t p_t max_t |S_t| / 32767 of the run, so
     * each term is off by at most s / 2 times |code - m| <= m, times O_c */
    for (int sl = 0; sl < sv->n_slices; sl++) {
        const kvq_kvarn_meta mt = kvq_kvarn_meta_of(sv->tile, record_at(sv, h, tile, sl));
        double smax = 0;
        for (int t = 0; t < nk; t++) smax = fmax(smax, fabs(half_at(mt.S, (key0 + t) % TILE)));
        for (int g = 0; g < G; g++) {
            double pmax = 0;
            const double m_v = 1 << (sv->tile.bits - 1);   /* V's centre code */
            for (int t = 0; t < nk; t++) pmax = fmax(pmax, pw[g * ATTN_RUN_KEYS + t]);
            for (int ch = 0; ch < w; ch++)
                r->v_bound[g * 512 + sl * w + ch] =
                    sv->tile_layout ? nk * (m_v / 2.0) * (pmax * smax / 32767) * fabs(half_at(mt.O, ch)) : 0.0;
        }
    }
}

static double max_abs(const double *x, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

TEST(kvarn_fused_kernels_match_references_every_level_width_and_group) {
    static const kvq_type types[] = { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN4,
                                      KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, KVQ_TYPE_KVARN8 };
    static const int hds[] = { 64, 128, 256 }, groups[] = { 1, 2, 3, 5, 7, 8, 17 };
    /* runs as attention cuts them (ATTN_RUN_KEYS keys, within a tile): whole,
     * starting inside a group of 16, partial, the tile's last key */
    static const int runs[][2] = { { 128, 64 }, { 157, 3 }, { 192, 64 }, { 250, 5 }, { 255, 1 }, { 139, 53 },
                                   { 160, 32 } };
    static const char *const levels[] = { "scalar", "avx2", "avx512", "avx512-tile", "avx512-vnni" };
    static run_refs r;
    static float q[20 * 256], pw[20 * ATTN_RUN_KEYS], acc0[20 * 256], acc[20 * 256], wts[20 * ATTN_RUN_KEYS];
    const int n_tok = 300, acc_stride = 256;
    double worst_k = 0, worst_bound = 0, worst_v = 0, worst_k8 = 0;
    int checked = 0, paired = 0;
    test_rng rng = { 4242, 0, 0 };
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(types); ti++)
        for (size_t hi = 0; hi < KVQ_ARRAY_LEN(hds); hi++) {
            const int hd = hds[hi];
            attn_data d;
            CHECK(attn_data_make(&d, n_tok, 2, 2, hd, hd, 500 + ti * 7 + hi), "alloc");
            kvq_cache_params p;
            attn_params(&p, 2, hd, hd, n_tok, types[ti], types[ti], KVQ_ROT_AUTO);
            p.max_batch = 100;
            kvq_cache *c = make_cache(&p);
            CHECK(c && attn_fill(c, &d, 100), "%s hd %d: create/fill", kvq_type_name(types[ti]), hd);
            CHECK(c->k[0].first_tile == 1 && c->k[0].tile.width == (hd <= 64 ? 64 : 128), "tile layout");
            for (size_t gi = 0; gi < KVQ_ARRAY_LEN(groups); gi++)
                for (size_t ri = (gi + hi) % 2; ri < KVQ_ARRAY_LEN(runs); ri += 2) {   /* half the runs each */
                    const int G = groups[gi], key0 = runs[ri][0], nk = runs[ri][1], h = (int)(ri % 2);
                    const bool q8 = gi % 2 == 1;   /* the int8 query for G = 2, 5, 8 */
                    const int stride = c->k[0].store_dim;
                    for (int i = 0; i < G * stride; i++) q[i] = (float)test_rng_gauss(&rng);
                    for (int g = 0; g < G; g++)
                        for (int k = 0; k < ATTN_RUN_KEYS; k++) {
                            const bool zero = k % 5 == 2 || (g == 0 && k % 7 == 3);   /* by all, by one */
                            pw[g * ATTN_RUN_KEYS + k] = zero || k >= nk ? 0.0f : (float)test_rng_uniform(&rng);
                        }
                    for (int i = 0; i < G * acc_stride; i++) acc0[i] = (float)test_rng_gauss(&rng);
                    run_reference(c, h, key0, nk, G, q, stride, 0.088f, q8 ? 127.0f : 32767.0f, pw, acc0, acc_stride,
                                  &r);
                    const double k_mag = max_abs(r.k_exact, G * ATTN_RUN_KEYS), v_mag = max_abs(r.v, G * 512);
                    for (size_t li = 0; li < KVQ_ARRAY_LEN(levels); li++) {
                        const attn_block_kernels *kr = attn_block_level(levels[li]);
                        if (!kr) continue;
                        attn_block_rows rk = { 0 }, rv = { 0 };
                        rk.sd = &c->k[0]; rk.type = c->k[0].type; rk.kv_head = h; rk.key0 = key0;
                        rv.sd = &c->v[0]; rv.type = c->v[0].type; rv.kv_head = h; rv.key0 = key0;
                        const attn_query aq = { q, NULL, NULL, NULL, stride, q8, NULL };
                        kvq_row_hooks_of(rk.type)->score(kr, &rk, NULL, nk, &aq, G, 0.088f, wts, ATTN_RUN_KEYS);
                        memcpy(acc, acc0, (size_t)G * acc_stride * sizeof *acc);
                        kvq_row_hooks_of(rv.type)->accumulate(kr, &rv, NULL, nk, pw, ATTN_RUN_KEYS, G, acc, acc_stride);
                        const bool fused = kr->kvarn != NULL;
                        for (int g = 0; g < G; g++)
                            for (int k = 0; k < nk; k++) {
                                const int i = g * ATTN_RUN_KEYS + k;
                                const double got = wts[i], e_exact = fabs(got - r.k_exact[i]);
                                const double e = fused ? fabs(got - r.k_round[i]) : e_exact;
                                CHECK(e <= 2e-6 * k_mag, "%s %s hd %d G %d run %d+%d head %d key %d: score %.9g, "
                                      "reference %.9g (%s query)", kr->level, kvq_type_name(types[ti]), hd, G, key0, nk,
                                      g, k, got, fused ? r.k_round[i] : r.k_exact[i],
                                      fused ? (q8 ? "int8-rounded" : "rounded") : "float");
                                CHECK(e_exact <= r.k_bound[i] + 2e-6 * k_mag, "%s %s: rounding error %.3g above its "
                                      "bound %.3g", kr->level, kvq_type_name(types[ti]), e_exact, r.k_bound[i]);
                                if (q8) {
                                    worst_k8 = e_exact / k_mag > worst_k8 ? e_exact / k_mag : worst_k8;
                                    continue;
                                }
                                worst_k = e_exact / k_mag > worst_k ? e_exact / k_mag : worst_k;
                                worst_bound = r.k_bound[i] / k_mag > worst_bound ? r.k_bound[i] / k_mag : worst_bound;
                            }
                        for (int g = 0; g < G; g++)
                            for (int dd = 0; dd < c->v[0].store_dim; dd++) {
                                const double e = fabs(acc[g * acc_stride + dd] - r.v[g * 512 + dd]);
                                /* float sums' error grows with the run's keys */
                                const double bound = (fused ? r.v_bound[g * 512 + dd] : 0.0) + 2e-6 * fmax(1.0, nk / 32.0) * v_mag;
                                CHECK(e <= bound, "%s %s hd %d G %d run %d+%d head %d ch %d: V sum %.9g, "
                                      "reference %.9g (bound %.3g)", kr->level, kvq_type_name(types[ti]), hd, G, key0,
                                      nk, g, dd, acc[g * acc_stride + dd], r.v[g * 512 + dd], bound);
                                if (fused && r.v_bound[g * 512 + dd] > 0) {   /* beyond float rounding */
                                    const double over = fmax(0.0, e - 2e-6 * fmax(1.0, nk / 32.0) * v_mag) / r.v_bound[g * 512 + dd];
                                    worst_v = over > worst_v ? over : worst_v;
                                    paired++;
                                }
                            }
                        checked++;
                    }
                }
            kvq_cache_free(c);
            attn_data_free(&d);
        }
    CHECK(checked >= 6 * 3 * 7 * 2, "only %d runs checked", checked);
    CHECK(worst_k > 0, "the rounded query changed no score (is it rounded?)");
    CHECK(worst_k8 > 10 * worst_k, "the int8 query (%.2g) rounds no coarser than the int16 one (%.2g)", worst_k8, worst_k);
    printf("  int16 folded query: largest score change %.2g of the run's largest score (bound %.2g); int8: %.2g\n",
           worst_k, worst_bound, worst_k8);
    if (paired) printf("  V in pairs: largest error %.2g of its bound (%d sums)\n", worst_v, paired);
}

/* Whole decode steps: every level against the scalar one, GQA groups 1, 3,
 * 5, 7 (partial head groups in the kernels), and 1 vs 3 threads bitwise
 * (the keys are split into ranges by the shapes only). */
TEST(kvarn_attention_levels_groups_and_threads_agree) {
    static const struct { kvq_type k, v; int hd, gqa; } cases[] = {
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 128, 1 }, { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN8, 64, 3 },
        { KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, 256, 5 }, { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN4, 128, 7 },
    };
    static const char *const levels[] = { "avx2", "avx512", "avx512-vnni" };
    const int n_tok = test_sanitized() ? 420 : 700, pos = n_tok - 1;
    kvq_pool *pool = kvq_pool_create(3);
    CHECK(pool, "pool");
    int compared = 0;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(cases); i++) {
        const int n_head = 2 * cases[i].gqa, hd = cases[i].hd;
        attn_data d;
        CHECK(attn_data_make(&d, n_tok, n_head, 2, hd, hd, 900 + i), "alloc");
        kvq_cache_params p;
        attn_params(&p, 2, hd, hd, n_tok, cases[i].k, cases[i].v, KVQ_ROT_AUTO);
        p.max_batch = 128;
        kvq_cache *c = make_cache(&p);
        CHECK(c && attn_fill_upto(c, &d, 128, pos), "case %zu: create/fill", i);
        const size_t len = (size_t)n_head * hd;
        float ref[16 * 256], out[16 * 256], out3[16 * 256];
        const float *q = d.q + (size_t)pos * n_head * hd;
        const kvq_attend_loop scalar = { KVQ_PASS_CHUNKED, attn_block_level("scalar"), false };
        kvq_error err;
        CHECK(!kvq_cache_attend_loop(c, 0, pos, 1, n_head, q, 0.09f, ref, NULL, NULL, &scalar, &err), "%s", err.msg);
        for (size_t l = 0; l < KVQ_ARRAY_LEN(levels); l++) {
            const kvq_attend_loop loop = { KVQ_PASS_CHUNKED, attn_block_level(levels[l]), false };
            if (!loop.block) continue;
            CHECK(!kvq_cache_attend_loop(c, 0, pos, 1, n_head, q, 0.09f, out, NULL, NULL, &loop, &err), "%s", err.msg);
            /* the levels' float terms differ (FMA or not), so a V weight
             * near a rounding boundary of the pairs' int16 weights may round
             * one step apart: with runs of 64 keys a step is coarser (case 3
             * measured 2.5-4.5e-6 with runs of 32, 0.8-1.1e-5 with 64); a
             * kernel's logic error moves the output by 1e-3 or more */
            const double e = attn_rel_err(out, ref, len);
            CHECK(e < 3e-5, "case %zu (%s/%s GQA %d) at %s vs scalar: rel err %.3g", i, kvq_type_name(cases[i].k),
                  kvq_type_name(cases[i].v), cases[i].gqa, levels[l], e);
            compared++;
        }
        CHECK(!kvq_cache_attend(c, 0, pos, 1, n_head, q, 0.09f, out, NULL, &err) &&
                  !kvq_cache_attend(c, 0, pos, 1, n_head, q, 0.09f, out3, pool, &err), "%s", err.msg);
        CHECK(!memcmp(out, out3, len * sizeof *out), "case %zu: 1 vs 3 threads not bitwise equal", i);
        kvq_cache_free(c);
        attn_data_free(&d);
    }
    kvq_pool_free(pool);
    (void)compared;   /* 0 on a CPU without SIMD levels: groups and threads still checked */
}

static int kvq_tile_bits_of(kvq_type t) { return kvq_type_get_scalar(t)->bits; }

static uint8_t *read_whole_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    if (!f) return NULL;
    if (!fseek(f, 0, SEEK_END)) {
        const long len = ftell(f);
        if (len >= 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)len + 1)) &&
            fread(buf, 1, (size_t)len, f) == (size_t)len)
            *n = (size_t)len;
        else { free(buf); buf = NULL; }
    }
    fclose(f);
    return buf;
}

/* Records kept in lanes (K) and pairs (V) in memory
 * (cache_tiles_layout.h) against the same cache made without that order,
 * every width: the same records as files hold them, the same state file
 * byte for byte, K scores the same bits at every level (with the int16
 * and the int8 query), V sums within the pairs rounding, and the memory's
 * bytes really in another order (V of 2 and 3 bits at width 64 stays
 * token-major: no block quads). */
TEST(kvarn_memory_layout_is_invisible_outside_attention) {
    static const kvq_type types[] = { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN4,
                                      KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, KVQ_TYPE_KVARN8 };
    static const int hds[] = { 64, 128, 256 };
    static const char *const levels[] = { "scalar", "avx2", "avx512", "avx512-vnni", "avx512-tile" };
    const int n_tok = 400, n_head_kv = 2, G = 3;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types) * KVQ_ARRAY_LEN(hds); i++) {
        const kvq_type ty = types[i / KVQ_ARRAY_LEN(hds)];
        const int hd = hds[i % KVQ_ARRAY_LEN(hds)];
        attn_data d;
        CHECK(attn_data_make(&d, n_tok, n_head_kv * G, n_head_kv, hd, hd, 77 + i), "alloc");
        kvq_cache_params p;
        attn_params(&p, n_head_kv, hd, hd, 512, ty, ty, KVQ_ROT_AUTO);
        p.max_batch = 100;
        kvq_cache *on = make_cache(&p);
        kvq_cache_set_lanes(false);
        kvq_cache_set_pairs(false);
        kvq_cache *off = make_cache(&p);
        kvq_cache_set_lanes(true);
        kvq_cache_set_pairs(true);
        CHECK(on && off && attn_fill(on, &d, 100) && attn_fill(off, &d, 100), "hd %d: create/fill", hd);
        const bool v_layout = kvq_tile_bits_of(ty) >= 4 || hd > 64;
        CHECK(on->k[0].tile_layout && on->v[0].tile_layout == v_layout && !off->k[0].tile_layout &&
                  !off->v[0].tile_layout, "%s hd %d: layout flags", kvq_type_name(ty), hd);
        for (int side = 0; side < 2; side++) {
            const kvq_cache_side *a = side ? &on->v[0] : &on->k[0], *b = side ? &off->v[0] : &off->k[0];
            const size_t body = (size_t)(n_tok / TILE - a->first_tile) * a->n_slices * a->record_bytes;
            CHECK(memcmp(a->body, b->body, body) != 0 || (side && !v_layout),
                  "%s hd %d side %d: the memory holds token-major codes", kvq_type_name(ty), hd, side);
            for (int h = 0; h < n_head_kv; h++)
                for (size_t at = 0; at < body; at += a->record_bytes) {
                    uint8_t rec[KVQ_TILES_RECORD_MAX];
                    kvq_tiles_record_out(a, a->body + (size_t)h * a->body_head_bytes + at, rec);
                    CHECK(!memcmp(rec, b->body + (size_t)h * b->body_head_bytes + at, a->record_bytes),
                          "hd %d side %d head %d: record at %zu differs in file order", hd, side, h, at);
                }
        }
        /* state files: the same bytes */
        char path_on[64], path_off[64];
        snprintf(path_on, sizeof path_on, "/tmp/kvq_layout_on_%d.kvqs", (int)getpid());
        snprintf(path_off, sizeof path_off, "/tmp/kvq_layout_off_%d.kvqs", (int)getpid());
        int32_t toks[400] = { 0 };
        const kvq_state_tag tag = { 7, toks, n_tok };
        kvq_error err = { 0, "" };
        CHECK(kvq_cache_save(on, path_on, &tag, &err) == KVQ_OK && kvq_cache_save(off, path_off, &tag, &err) == KVQ_OK,
              "save: %s", err.msg);
        size_t n_on = 0, n_off = 0;
        uint8_t *f_on = read_whole_file(path_on, &n_on), *f_off = read_whole_file(path_off, &n_off);
        CHECK(f_on && f_off && n_on == n_off && !memcmp(f_on, f_off, n_on), "hd %d: state files differ", hd);
        free(f_on);
        free(f_off);
        kvq_cache *back = make_cache(&p);   /* a file read into the layout gives the same memory */
        int32_t *bt = NULL;
        int n_back = 0;
        CHECK(back && kvq_cache_load(back, path_off, 7, &bt, &n_back, &err) == KVQ_OK, "load: %s", err.msg);
        free(bt);
        CHECK(!memcmp(back->mem[0], on->mem[0], on->bytes.k) && !memcmp(back->mem[1], on->mem[1], on->bytes.v),
              "hd %d: loaded memory differs", hd);
        kvq_cache_free(back);
        remove(path_on);
        remove(path_off);
        /* K scores bitwise, V sums within the pairs rounding, per level */
        static float q[8 * 256], pw[8 * ATTN_RUN_KEYS], w_on[8 * ATTN_RUN_KEYS], w_off[8 * ATTN_RUN_KEYS];
        static float w8_on[8 * ATTN_RUN_KEYS], w8_off[8 * ATTN_RUN_KEYS];
        static float a_on[8 * 256], a_off[8 * 256];
        test_rng rng = { 99 + i, 0, 0 };
        const int stride = on->k[0].store_dim, key0 = 131, nk = 61;
        for (int j = 0; j < G * stride; j++) q[j] = (float)test_rng_gauss(&rng);
        for (int j = 0; j < G * ATTN_RUN_KEYS; j++) pw[j] = (float)test_rng_uniform(&rng);
        for (size_t li = 0; li < KVQ_ARRAY_LEN(levels); li++) {
            const attn_block_kernels *kr = attn_block_level(levels[li]);
            if (!kr) continue;
            const attn_query aq = { q, NULL, NULL, NULL, stride, false, NULL };
            float *wk[2] = { w_on, w_off }, *av[2] = { a_on, a_off };
            kvq_cache *cs[2] = { on, off };
            for (int x = 0; x < 2; x++) {
                attn_block_rows rk = { 0 }, rv = { 0 };
                rk.sd = &cs[x]->k[0]; rk.type = ty; rk.kv_head = 1; rk.key0 = key0;
                rv.sd = &cs[x]->v[0]; rv.type = ty; rv.kv_head = 1; rv.key0 = key0;
                kvq_row_hooks_of(ty)->score(kr, &rk, NULL, nk, &aq, G, 0.09f, wk[x], ATTN_RUN_KEYS);
                memset(av[x], 0, sizeof a_on);
                kvq_row_hooks_of(ty)->accumulate(kr, &rv, NULL, nk, pw, ATTN_RUN_KEYS, G, av[x], 256);
            }
            for (int g = 0; g < G; g++)
                CHECK(!memcmp(w_on + g * ATTN_RUN_KEYS, w_off + g * ATTN_RUN_KEYS, (size_t)nk * sizeof *w_on),
                      "%s hd %d %s head %d: K scores differ with the lanes layout", kvq_type_name(ty), hd, kr->level, g);
            /* the int8 query: 4-bit codes in lanes multiplied as bytes, in
             * rows by the int16 kernels on the same levels: the same bits */
            const attn_query aq8 = { q, NULL, NULL, NULL, stride, true, NULL };
            for (int x = 0; x < 2; x++) {
                attn_block_rows rk = { 0 };
                rk.sd = &cs[x]->k[0]; rk.type = ty; rk.kv_head = 1; rk.key0 = key0;
                kvq_row_hooks_of(ty)->score(kr, &rk, NULL, nk, &aq8, G, 0.09f, x ? w8_off : w8_on, ATTN_RUN_KEYS);
            }
            for (int g = 0; g < G; g++)
                CHECK(!memcmp(w8_on + g * ATTN_RUN_KEYS, w8_off + g * ATTN_RUN_KEYS, (size_t)nk * sizeof *w_on),
                      "%s hd %d %s head %d: int8-query K scores differ with the lanes layout", kvq_type_name(ty), hd,
                      kr->level, g);
            CHECK(!kr->kvarn || memcmp(w8_on, w_on, (size_t)nk * sizeof *w_on) != 0,
                  "%s hd %d %s: the int8 query changed no score", kvq_type_name(ty), hd, kr->level);
            const double e = attn_rel_err(a_on, a_off, (size_t)G * 256);
            CHECK(e < (kr->kvarn && v_layout ? 3e-4 : 1e-7), "%s hd %d %s: V sums differ by %.3g", kvq_type_name(ty), hd,
                  kr->level, e);
        }
        kvq_cache_free(on);
        kvq_cache_free(off);
        attn_data_free(&d);
    }
}
