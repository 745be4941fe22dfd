/* test_cache_turbo.c - TurboQuant types in the cache: row bytes and memory
 * by hand (64-blocks for small heads, 128-blocks and a 64/128 rest for
 * others), the format's rotation as the side's rotation (whatever the
 * switches say), attention in the rotated domain against the formula over
 * the values the cache holds, mixed with block and KVarN types. */
#include "attn_ref.h"

#include <string.h>

static kvq_cache *make_cache(const kvq_cache_params *p) {
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    if (kvq_cache_create(p, &c, &err) != KVQ_OK) fprintf(stderr, "create: %s\n", err.msg);
    return c;
}

/* Row bytes per head (docs/spec/formats.md §4-5 sizes) and stored widths. */
TEST(turbo_cache_row_bytes_and_memory) {
    static const struct { int hd, store, b4, b3tcq; } rows[] = {
        { 64, 64, 34, 28 }, { 128, 128, 66, 52 }, { 256, 256, 132, 104 },
        { 80, 128, 66, 52 }, { 192, 192, 100, 80 }, { 8, 64, 34, 28 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kvq_cache_params p;
        attn_params(&p, 2, rows[i].hd, rows[i].hd, 100, KVQ_TYPE_TURBO4, KVQ_TYPE_TURBO3_TCQ, KVQ_ROT_AUTO);
        p.tail_tokens = 10;
        p.max_batch = 20;
        kvq_cache *c = make_cache(&p);
        CHECK(c, "create hd %d", rows[i].hd);
        CHECK(c->k[0].store_dim == rows[i].store && c->v[0].store_dim == rows[i].store, "hd %d: stored %d",
              rows[i].hd, c->k[0].store_dim);
        CHECK(c->k[0].row_bytes == (size_t)rows[i].b4 && c->v[0].row_bytes == (size_t)rows[i].b3tcq,
              "hd %d: row bytes %zu / %zu", rows[i].hd, c->k[0].row_bytes, c->v[0].row_bytes);
        kvq_cache_bytes b;
        kvq_cache_memory(c, &b);
        CHECK(b.k == 2u * 100 * rows[i].b4 && b.v == 2u * 100 * rows[i].b3tcq, "hd %d: K %zu V %zu", rows[i].hd, b.k, b.v);
        /* ring: the tail's 10 rows of the stored width in bf16; the stage
         * of a 20-row batch is working memory */
        CHECK(b.tail == 2u * 2 * 10 * rows[i].store * 2, "hd %d: tail %zu", rows[i].hd, b.tail);
        CHECK(b.work == 2u * 2 * 20 * rows[i].store * 2, "hd %d: work %zu", rows[i].hd, b.work);
        CHECK(kvq_cache_row_bytes(KVQ_TYPE_TURBO4, 2, rows[i].hd) == 2u * rows[i].b4, "hd %d: cache row bytes",
              rows[i].hd);
        kvq_cache_free(c);
    }
}

/* The side's rotation is TurboQuant's own (S2 H S1), with --attn-rot off
 * too; the other side keeps the generic rule. */
TEST(turbo_cache_rotation_is_the_formats) {
    kvq_cache_params p;
    attn_params(&p, 1, 128, 128, 64, KVQ_TYPE_TURBO3, KVQ_TYPE_Q4_0, KVQ_ROT_OFF);
    kvq_cache *c = make_cache(&p);
    CHECK(c && c->k[0].rot_kind == KVQ_FMT_ROT_TURBO && c->v[0].rot_kind == KVQ_FMT_ROT_NONE && c->v[0].rot_block == 0,
          "rotation kinds");
    CHECK(c && strstr(kvq_cache_rotation(c)->reason, "turbo3 rotates inside its format"), "reason: %s",
          c ? kvq_cache_rotation(c)->reason : "");
    /* a stored ring row is R x: same norm as x, different values */
    float x[128], row[128];
    for (int i = 0; i < 128; i++) x[i] = (float)(i % 7) - 3.0f;
    float v[128] = { 0 };
    kvq_error err;
    CHECK(c && !kvq_cache_write(c, 0, 0, 1, x, v, &err) && !kvq_cache_read_row(c, 0, false, KVQ_PART_BODY, 0, 0, row, &err),
          "write/read");
    double nx = 0, nr = 0, same = 0;
    for (int i = 0; i < 128; i++) { nx += x[i] * x[i]; nr += row[i] * row[i]; same += row[i] == x[i]; }
    CHECK(fabs(sqrt(nr / nx) - 1.0) < 0.05 && same < 16, "stored row not the rotated one (norm ratio %.3f, %g equal)",
          sqrt(nr / nx), same);
    kvq_cache_free(c);
}

/* Trellis rows are quantised two at a time (write_row_pair): a batch's
 * by positions of one head, a one-token write's by heads (0 and 1; head 2
 * alone).  The cache holds the same rows either way, odd batch lengths
 * and a padded head (80 -> 128) included. */
TEST(turbo_cache_batch_write_equals_token_writes) {
    static const int dims[] = { 128, 80 };
    for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
        const int hd = dims[di], n = 7, heads = 3;
        kvq_cache_params p;
        attn_params(&p, heads, hd, hd, 16, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO2_TCQ, KVQ_ROT_AUTO);
        kvq_cache *batch = make_cache(&p), *single = make_cache(&p);
        CHECK(batch && single, "hd %d: caches", hd);
        if (!batch || !single) { kvq_cache_free(batch); kvq_cache_free(single); continue; }
        float k[7 * 3 * 128], v[7 * 3 * 128];
        test_rng r = { 80 + (uint64_t)hd, 0, 0 };
        for (int i = 0; i < n * heads * hd; i++) k[i] = (float)test_rng_gauss(&r), v[i] = (float)test_rng_gauss(&r);
        kvq_error err;
        CHECK(!kvq_cache_write(batch, 0, 0, n, k, v, &err), "hd %d: batch write", hd);
        for (int pos = 0; pos < n; pos++)
            CHECK(!kvq_cache_write(single, 0, pos, 1, k + (size_t)pos * heads * hd, v + (size_t)pos * heads * hd, &err),
                  "hd %d: write %d", hd, pos);
        for (int side = 0; side < 2; side++)
            for (int h = 0; h < heads; h++)
                for (int pos = 0; pos < n; pos++) {
                    float a[128], b[128];
                    const bool ok = !kvq_cache_read_row(batch, 0, side, KVQ_PART_BODY, h, pos, a, &err) &&
                                    !kvq_cache_read_row(single, 0, side, KVQ_PART_BODY, h, pos, b, &err);
                    CHECK(ok && !memcmp(a, b, sizeof(float) * (size_t)hd), "hd %d side %d head %d row %d differs", hd,
                          side, h, pos);
                }
        kvq_cache_free(batch);
        kvq_cache_free(single);
    }
}

/* Attention in the rotated domain == formula over the cached values (Q
 * rotated with R once, output rotated back once, rows read by dot_rot /
 * axpy_rot), every turbo type, heads 64/128/256/512 and padded 80/192, GQA,
 * tail and sink, mixed with q8_0, f16 and KVarN. */
TEST(turbo_cache_attention_equals_reference_on_cached_values) {
    static const struct { kvq_type k, v; int hd_k, hd_v, gqa, tail, sink; } cases[] = {
        { KVQ_TYPE_TURBO2, KVQ_TYPE_TURBO2, 64, 64, 2, 0, 0 },
        { KVQ_TYPE_TURBO3, KVQ_TYPE_TURBO4, 128, 128, 4, 9, 2 },
        { KVQ_TYPE_TURBO4, KVQ_TYPE_TURBO3, 256, 256, 1, 0, 0 },
        { KVQ_TYPE_TURBO2_TCQ, KVQ_TYPE_TURBO3_TCQ, 80, 80, 3, 5, 0 },
        { KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_TURBO2_TCQ, 192, 192, 2, 0, 4 },
        { KVQ_TYPE_Q8_0, KVQ_TYPE_TURBO4, 128, 64, 2, 0, 0 },
        { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_F16, 64, 128, 2, 3, 0 },
        { KVQ_TYPE_TURBO4, KVQ_TYPE_KVARN4, 128, 128, 2, 0, 0 },
        { KVQ_TYPE_TURBO3, KVQ_TYPE_TURBO4_TCQ, 512, 512, 2, 0, 0 },
    };
    const bool san = test_sanitized();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the 40 queries lie inside the last batch of 64 written (180: rows
         * 128..179), so each reads the batch's staged rows */
        const int n_tok = san ? 180 : 300, pos = n_tok - 40;
        attn_data d;
        CHECK(attn_data_make(&d, n_tok, 2 * cases[i].gqa, 2, cases[i].hd_k, cases[i].hd_v, 300 + i), "alloc");
        kvq_cache_params p;
        attn_params(&p, 2, cases[i].hd_k, cases[i].hd_v, n_tok, cases[i].k, cases[i].v, KVQ_ROT_AUTO);
        p.max_batch = 64;
        p.tail_tokens = cases[i].tail;
        p.sink_tokens = cases[i].sink;
        kvq_cache *c = make_cache(&p);
        CHECK(c && attn_fill(c, &d, 64), "case %zu: create/fill", i);
        const size_t len = (size_t)(n_tok - pos) * d.n_head * d.hd_v;
        float *out = malloc(len * sizeof *out), *ref = malloc(len * sizeof *ref);
        CHECK(out && ref, "alloc");
        const float scale = 1.0f / sqrtf((float)d.hd_k);
        kvq_error err = { 0, "" };
        const kvq_status st = kvq_cache_attend(c, 0, pos, n_tok - pos, d.n_head, d.q + (size_t)pos * d.n_head * d.hd_k,
                                               scale, out, NULL, &err);
        const bool ref_ok = attn_ref_cache(c, &d, pos, n_tok - pos, scale, ref);
        const double e = attn_rel_err(out, ref, len);
        kvq_cache_free(c);
        free(out); free(ref);
        attn_data_free(&d);
        CHECK(st == KVQ_OK && ref_ok, "case %zu: %s", i, err.msg);
        /* float rounding; a V body in pairs adds its weights' rounding (attn_tolerance) */
        const double tol = attn_tolerance(cases[i].k, cases[i].v, cases[i].hd_v) > 1e-5 ? attn_tolerance(cases[i].k, cases[i].v, cases[i].hd_v) : 2e-5;
        CHECK(e < tol, "case %zu (%s/%s hd %d/%d): rel err %.3g vs reference on cached values", i,
              kvq_type_name(cases[i].k), kvq_type_name(cases[i].v), cases[i].hd_k, cases[i].hd_v, e);
    }
}

/* A tail covering the context reads only exact rows, stored as R x: Q
 * rotated by R and the output rotated back by R^T give the plain formula,
 * so the rotation pair is right (padded 80 and 192 heads included). */
TEST(turbo_cache_tail_covering_context_is_exact) {
    const int dims[] = { 64, 80, 192 };
    for (int i = 0; i < 3; i++) {
        const int n_tok = 70;
        attn_data d;
        CHECK(attn_data_make(&d, n_tok, 4, 2, dims[i], dims[i], 40 + (uint64_t)i), "alloc");
        kvq_cache_params p;
        attn_params(&p, 2, dims[i], dims[i], n_tok, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO2, KVQ_ROT_AUTO);
        p.tail_tokens = n_tok;
        p.tail_type = KVQ_TYPE_F32;
        kvq_cache *c = make_cache(&p);
        const size_t len = (size_t)n_tok * 4 * dims[i];
        float *out = malloc(len * sizeof *out), *ref = malloc(len * sizeof *ref);
        kvq_error err = { 0, "" };
        const bool ok = c && out && ref && attn_fill(c, &d, n_tok) &&
                        !kvq_cache_attend(c, 0, 0, n_tok, 4, d.q, 0.125f, out, NULL, &err);
        if (ok) attn_ref_plain(&d, 0, n_tok, 0.125f, ref);
        const double e = ok ? attn_rel_err(out, ref, len) : INFINITY;
        kvq_cache_free(c);
        free(out); free(ref);
        attn_data_free(&d);
        CHECK(e < 1e-5, "hd %d: rel err %.3g against the plain formula %s", dims[i], e, err.msg);
    }
}
