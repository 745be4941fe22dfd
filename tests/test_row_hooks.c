/* test_row_hooks.c - the rows of the type table (src/format/format_row.h)
 * and their hooks (src/cache/row_hooks.h): every cache type has its
 * attention hooks, record types their record hooks, sizes agree between
 * the rows and the kernels that read them, and attention through every
 * kernel level this CPU runs matches the scalar level (the oracle) for
 * every cache type, KVarN and calibrated rows included (their hooks run
 * the level their caller chose). */
#include "attn_ref.h"
#include "format_row.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

TEST(row_hooks_every_cache_type_has_its_hooks) {
    int n = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_format_row *row = kvq_format_row_get((kvq_type)ty);
        CHECK(row && row->traits.name, "type %d has no row", ty);
        const kvq_row_hooks *h = kvq_row_hooks_of((kvq_type)ty);
        CHECK(row->hooks == h, "%s: the row's hooks are not the installed ones", row->traits.name);
        if (!row->traits.is_cache_type) {
            CHECK(!h, "%s is not a cache type but has hooks", row->traits.name);
            continue;
        }
        CHECK(h && h->score && h->accumulate && h->name, "%s: no attention hooks", row->traits.name);
        const bool records = row->traits.layout == KVQ_LAYOUT_TILES || row->traits.calib_rate;
        CHECK(records == (h->read_row != NULL), "%s: record hooks %s", row->traits.name, h->read_row ? "on a row type" : "missing");
        CHECK((row->traits.layout == KVQ_LAYOUT_TILES) == (h->shape && h->quantize && h->scratch_floats && h->run_keys),
              "%s: tile hooks", row->traits.name);
        CHECK(records || row->traits.dequantize, "%s: a row type without decode", row->traits.name);
        n++;
    }
    CHECK(n >= 30, "only %d cache types", n);
}

/* The fused kernels' block sizes are the rows' (one description, derived
 * once), at every level that has them. */
TEST(row_hooks_fused_block_sizes_are_the_rows) {
    static const char *const levels[] = { "scalar", "avx2", "avx512", "avx512-vnni" };
    int checked = 0;
    for (size_t l = 0; l < KVQ_ARRAY_LEN(levels); l++) {
        const attn_block_kernels *kr = attn_block_level(levels[l]);
        if (!kr || !kr->fused) continue;
        for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
            if (!kr->fused[ty].block_bytes) continue;
            const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)ty);
            /* a block is 2 (d) or 4 (d, m) header bytes + 4 bytes per code bit:
             * 4 header bytes exactly when the size is a multiple of 4 */
            CHECK(tr->block_size == 32 && kr->fused[ty].block_bytes == tr->block_bytes &&
                      kr->fused[ty].has_min == (tr->block_bytes % 4 == 0),
                  "%s %s: fused block %d bytes (min %d), row %d", kr->level, tr->name, kr->fused[ty].block_bytes,
                  kr->fused[ty].has_min, tr->block_bytes);
            /* the fused kernels, in chunks of 64 keys for codes of 4 bits
             * or fewer and of the default 32 for the wider ones */
            const kvq_row_hooks *h = kvq_row_hooks_of((kvq_type)ty), *q4 = kvq_row_hooks_of(KVQ_TYPE_Q4_0);
            CHECK(h && q4 && h->score == q4->score && h->accumulate == q4->accumulate &&
                      h->score_lanes == q4->score_lanes && h->accumulate_lanes == q4->accumulate_lanes,
                  "%s is not read by the fused hooks", tr->name);
            const int bits = (tr->block_bytes - (tr->block_bytes % 4 == 0 ? 4 : 2)) / 4;
            CHECK(h->max_keys == (bits <= 4 ? ATTN_BLOCK_KEYS : 0), "%s (%d-bit codes): chunks of %d keys", tr->name,
                  bits, h->max_keys);
            checked++;
        }
    }
    CHECK(checked >= 12, "only %d fused rows checked", checked);
}

/* One cache of type t (tail and sink, GQA 2) attended for its last batch
 * of queries by the chunked pass at one level. */
static bool attend_at(kvq_cache *c, const attn_data *d, int pos, const attn_block_kernels *kr, float *out) {
    const kvq_attend_loop loop = { KVQ_PASS_CHUNKED, kr, false };
    kvq_error err;
    return kvq_cache_attend_loop(c, 0, pos, d->n_tok - pos, d->n_head, d->q + (size_t)pos * d->n_head * d->hd_k,
                                 1.0f / sqrtf((float)d->hd_k), out, NULL, NULL, &loop, &err) == KVQ_OK;
}

TEST(row_hooks_every_level_matches_scalar_for_every_cache_type) {
    enum { N_TOK = 300, POS = 280, HD = 128 };
    static const char *const levels[] = { "avx2", "avx512", "avx512-vnni" };
    const attn_block_kernels *scalar = attn_block_level("scalar");
    attn_data d;
    CHECK(attn_data_make(&d, N_TOK, 4, 2, HD, HD, 99), "alloc");
    const size_t n_out = (size_t)(N_TOK - POS) * d.n_head * HD;
    float *ref = malloc(n_out * sizeof *ref), *out = malloc(n_out * sizeof *out);
    CHECK(ref && out, "alloc");
    int compared = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)ty);
        if (!tr->is_cache_type) continue;
        kvq_cache_params p;
        attn_params(&p, 2, HD, HD, 512, (kvq_type)ty, (kvq_type)ty, KVQ_ROT_AUTO);
        p.max_batch = 64;
        p.tail_tokens = 16;
        p.sink_tokens = 4;
        kvq_cache *c = NULL;
        kvq_error err;
        CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s: %s", tr->name, err.msg);
        CHECK(attn_fill_upto(c, &d, 64, POS), "%s: fill", tr->name);
        CHECK(attend_at(c, &d, POS, scalar, ref), "%s: scalar attend", tr->name);
        for (size_t l = 0; l < KVQ_ARRAY_LEN(levels); l++) {
            const attn_block_kernels *kr = attn_block_level(levels[l]);
            if (!kr) continue;
            CHECK(attend_at(c, &d, POS, kr, out), "%s %s: attend", tr->name, kr->level);
            const double e = attn_rel_err(out, ref, n_out);
            /* The levels' float operations differ from the scalar
             * level's in the last bits (FMA or not, the order of sums),
             * and the V sums in pairs round each weight to int16 on one
             * scale per chunk, which turns such a difference into a step
             * of that scale: measured at most 7.3e-6 with chunks of 32
             * keys (q2_1) and 1.9e-5 with 64 (q3_1; q4_1 1.2e-5), against
             * attn_tolerance's 3e-4 / 6e-4 bound on the rounding itself */
            const double tol = attn_chunk_keys((kvq_type)ty) > ATTN_CHUNK_KEYS ? 4e-5 : 1e-5;
            CHECK(e < tol, "%s at %s vs scalar: rel err %.3g (bound %.3g)", tr->name, kr->level, e, tol);
            compared++;
        }
        kvq_cache_free(c);
    }
    free(ref);
    free(out);
    attn_data_free(&d);
    if (!compared) SKIP("no SIMD level on this CPU (or KVQ_FORCE_SCALAR=1)");
}

/* ------------------------------------------------ TurboQuant's hooks */

/* Decode steps: each of the n_q query tokens from pos on attends alone
 * (one token x G heads: the fused code kernels; a batch of tokens would
 * share the unpacked tile instead). */
static bool turbo_steps(kvq_cache *c, int pos, int n_q, int n_head, const float *q, const attn_block_kernels *kr,
                        kvq_pool *pool, float *out, kvq_error *err) {
    const kvq_attend_loop loop = { KVQ_PASS_CHUNKED, kr, false };
    const size_t row = (size_t)n_head * 128;
    for (int i = 0; i < n_q; i++)
        if (kvq_cache_attend_loop(c, 0, pos + i, 1, n_head, q + i * row, 1.0f / sqrtf(128.0f), out + i * row, pool,
                                  NULL, &loop, err) != KVQ_OK)
            return false;
    return true;
}

/* The TurboQuant hooks at every level this CPU runs against the scalar
 * level, decode steps (fused from the codes up to 4 heads, the unpacked
 * tile above): every turbo type, GQA groups 1..8 (passes of 1, 2 and 4 heads
 * and their rests), a key count that fills no group of 4 and no chunk of
 * 32 (75 keys, 16 of them in the tail ring and 4 in the sink), and with 2
 * threads the same bits as with 1 at the best level. */
TEST(row_hooks_turbo_levels_gqa_and_threads) {
    enum { N_TOK = 75, POS = 71, HD = 128, KV = 2, MAXG = 8 };
    static const kvq_type types[] = { KVQ_TYPE_TURBO2,     KVQ_TYPE_TURBO3,     KVQ_TYPE_TURBO4,
                                      KVQ_TYPE_TURBO2_TCQ, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4_TCQ };
    static const int groups[] = { 1, 2, 3, 4, 5, 8 };
    static const char *const levels[] = { "avx2", "avx512", "avx512-vnni" };
    const attn_block_kernels *scalar = attn_block_level("scalar"), *best = attn_block_best();
    attn_data d;
    CHECK(attn_data_make(&d, N_TOK, KV * MAXG, KV, HD, HD, 1234), "alloc");
    const size_t n_q = (size_t)(N_TOK - POS) * KV * MAXG * HD;
    float *q = malloc(n_q * sizeof *q), *ref = malloc(n_q * sizeof *ref), *out = malloc(n_q * sizeof *out);
    kvq_pool *pool = kvq_pool_create(2);
    CHECK(q && ref && out && pool, "alloc");
    int compared = 0;
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(types); ti++) {
        kvq_cache_params p;
        attn_params(&p, KV, HD, HD, 128, types[ti], types[ti], KVQ_ROT_AUTO);
        p.max_batch = 32;
        p.tail_tokens = 16;
        p.sink_tokens = 4;
        kvq_cache *c = NULL;
        kvq_error err;
        CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s: %s", kvq_type_name(types[ti]), err.msg);
        CHECK(attn_fill(c, &d, 32), "%s: fill", kvq_type_name(types[ti]));
        for (size_t gi = 0; gi < KVQ_ARRAY_LEN(groups); gi++) {
            const int G = groups[gi], n_head = KV * G;
            const size_t n_out = (size_t)(N_TOK - POS) * n_head * HD;
            /* the first n_head query heads of each query token */
            for (int tok = POS; tok < N_TOK; tok++)
                memcpy(q + (size_t)(tok - POS) * n_head * HD, d.q + ((size_t)tok * KV * MAXG) * HD,
                       (size_t)n_head * HD * sizeof *q);
            CHECK(turbo_steps(c, POS, N_TOK - POS, n_head, q, scalar, NULL, ref, &err), "%s G=%d: scalar %s",
                  kvq_type_name(types[ti]), G, err.msg);
            for (size_t l = 0; l < KVQ_ARRAY_LEN(levels); l++) {
                const attn_block_kernels *kr = attn_block_level(levels[l]);
                if (!kr) continue;
                CHECK(turbo_steps(c, POS, N_TOK - POS, n_head, q, kr, NULL, out, &err), "%s G=%d %s: %s",
                      kvq_type_name(types[ti]), G, kr->level, err.msg);
                const double e = attn_rel_err(out, ref, n_out);
                CHECK(e < 1e-5, "%s G=%d at %s vs scalar: rel err %.3g", kvq_type_name(types[ti]), G, kr->level, e);
                compared++;
            }
            /* 2 threads: the same bits as 1 at the best level */
            CHECK(turbo_steps(c, POS, N_TOK - POS, n_head, q, best, NULL, ref, &err) &&
                      turbo_steps(c, POS, N_TOK - POS, n_head, q, best, pool, out, &err),
                  "%s G=%d threads: %s", kvq_type_name(types[ti]), G, err.msg);
            CHECK(!memcmp(out, ref, n_out * sizeof *out), "%s G=%d: 2 threads differ from 1 at %s",
                  kvq_type_name(types[ti]), G, best->level);
        }
        kvq_cache_free(c);
    }
    kvq_pool_free(pool);
    free(q);
    free(ref);
    free(out);
    attn_data_free(&d);
    if (!compared) SKIP("no SIMD level on this CPU (or KVQ_FORCE_SCALAR=1); threads checked at %s", best->level);
}
