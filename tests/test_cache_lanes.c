/* test_cache_lanes.c - K bodies stored 16 keys side by side
 * (src/cache/cache_lanes.h): rows in and out unchanged, the lanes score
 * kernels equal to the row kernels bit for bit at every level, and a
 * cache in lanes attending, reading, saving and loading as one in rows. */
#include "attn_block.h"
#include "attn_ref.h"
#include "cache_lanes.h"
#include "quant_block.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const k_levels[] = { "scalar", "avx2", "avx512", "avx512-vnni" };
static const kvq_type k_lanes_types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_1, KVQ_TYPE_IQ4_NL, KVQ_TYPE_Q8_0,
                                           KVQ_TYPE_Q6_0, KVQ_TYPE_Q6_1, KVQ_TYPE_Q5_0, KVQ_TYPE_Q5_1,
                                           KVQ_TYPE_Q3_0, KVQ_TYPE_Q3_1, KVQ_TYPE_Q2_0, KVQ_TYPE_Q2_1 };

/* Random rows of type t (rows of `dim` values): codes and headers anything,
 * or (finite) every fp16 header a small positive number. */
static void random_rows(test_rng *r, kvq_type t, uint8_t *rows, int n, int dim, bool finite) {
    const int bb = kvq_type_get_scalar(t)->block_bytes, hdr = kvq_lanes_spec_of(t)->header;
    const size_t bytes = (size_t)n * (size_t)(dim / 32) * (size_t)bb;
    for (size_t i = 0; i < bytes; i++) rows[i] = (uint8_t)(test_rng_u64(r) >> 24);
    if (!finite) return;
    for (size_t blk = 0; blk < bytes / (size_t)bb; blk++)
        for (int h = 0; h < hdr; h += 2)
            kvq_wr16(rows + blk * (size_t)bb + (size_t)h, kvq_float_to_half(0.01f + 0.001f * (float)(blk % 17) - 0.004f * (float)h));
}

/* Every position of several groups put, then read back: each row's
 * bytes unchanged, whatever was written around it (every code and
 * header has its own place), for every type with lanes (all twelve
 * 32-value block types: 8-, 4-, 2- and 1-bit planes). */
TEST(lanes_rows_round_trip) {
    enum { N = 53 };   /* 3 whole groups and a partial one */
    static uint8_t rows[N * 16 * 34], back[16 * 34], body[4 * 16 * 16 * 34];
    static const int dims[] = { 32, 64, 128, 512 };
    test_rng r = { 7, 0, 0 };
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_lanes_types); ti++)
        for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
            const kvq_type ty = k_lanes_types[ti];
            const int dim = dims[di];
            const size_t rb = (size_t)(dim / 32) * (size_t)kvq_type_get_scalar(ty)->block_bytes;
            CHECK(kvq_lanes_type(ty, dim), "%s at %d has lanes", kvq_type_name(ty), dim);
            CHECK(kvq_lanes_group_bytes(kvq_lanes_spec_of(ty), dim) == 16 * rb, "a group is 16 rows' bytes");
            random_rows(&r, ty, rows, N, dim, false);
            memset(body, 0xA5, sizeof body);
            for (int pos = N - 1; pos >= 0; pos--) kvq_lanes_put_row(ty, body, dim, pos, rows + pos * rb);   /* any order */
            for (int pos = 0; pos < N; pos++) {
                kvq_lanes_get_row(ty, body, dim, pos, back);
                CHECK(!memcmp(back, rows + pos * rb, rb), "%s dim %d: row %d changed", kvq_type_name(ty), dim, pos);
            }
        }
    /* the cache stores in lanes exactly the types whose kernels read lanes */
    const attn_block_kernels *scalar = attn_block_level("scalar");
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++)
        CHECK(!kvq_lanes_spec_of((kvq_type)ty) == !(scalar->fused && scalar->fused[ty].scores_lanes),
              "%s: a lanes layout without a lanes kernel, or the reverse", kvq_type_name((kvq_type)ty));
    CHECK(!kvq_lanes_type(KVQ_TYPE_F16, 128) && !kvq_lanes_type(KVQ_TYPE_Q4_0, 48) &&
          !kvq_lanes_type(KVQ_TYPE_Q4_0, 1024) && !kvq_lanes_type(KVQ_TYPE_KVARN4, 128),
          "lanes only for the 32-value block types, rows of whole blocks up to 512");
}

/* The lanes score kernel of every level against the same level's row
 * kernel on the same rows: the same bits, for every type with lanes,
 * chunks that start inside a group and end inside another, head groups
 * 1..9 (an odd head out), 1..16 blocks, the int16 and the int8 query;
 * nothing written past nk. */
TEST(lanes_scores_equal_row_scores) {
    enum { NPOS = 96, MAXG = 9, MAXLEN = 512, NK = ATTN_BLOCK_KEYS };
    static uint8_t rows[NPOS * MAXLEN / 32 * 34], body[NPOS * MAXLEN / 32 * 34];
    static float q[MAXG * MAXLEN], qscale[MAXG * MAXLEN / 32], w_rows[MAXG * NK], w_lanes[MAXG * NK];
    static int16_t qi[MAXG * MAXLEN];
    static int8_t qb[MAXG * MAXLEN];
    static int32_t qsum[MAXG * MAXLEN / 32];
    static const int lens[] = { 32, 64, 128, 512 };
    static const int spans[][2] = { { 0, 32 }, { 16, 32 }, { 5, 27 }, { 3, 1 }, { 47, 32 }, { 60, 9 }, { 64, 32 } };
    test_rng r = { 19, 0, 0 };
    int checked = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr) continue;
        for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_lanes_types); ti++) {
            const kvq_type ty = k_lanes_types[ti];
            const attn_block_fused *f = &kr->fused[ty];
            CHECK(f->scores && f->scores_lanes, "%s: %s has row and lanes kernels", kr->level, kvq_type_name(ty));
            for (int G = 1; G <= MAXG; G++)
                for (size_t si = 0; si < KVQ_ARRAY_LEN(spans); si++) {
                    const int len = lens[(G + (int)si + (int)ti) % 4], key0 = spans[si][0], nk = spans[si][1];
                    const bool int8 = (G + si) % 3 == 0 && attn_block_int8_type(ty);
                    const size_t rb = (size_t)len / 32 * (size_t)kvq_type_get_scalar(ty)->block_bytes;
                    random_rows(&r, ty, rows, NPOS, len, true);
                    for (int pos = 0; pos < NPOS; pos++) kvq_lanes_put_row(ty, body, len, pos, rows + pos * rb);
                    for (int i = 0; i < G * len; i++) q[i] = (float)test_rng_gauss(&r) * (i % 5 == 0 ? 4.0f : 1.0f);
                    for (int g = 0; g < G; g++)
                        (int8 ? attn_block_round_query8 : attn_block_round_query)(q + g * len, len, qi + g * len,
                                                                                  qscale + g * len / 32, qsum + g * len / 32);
                    if (int8) attn_block_query_bytes(qi, (int64_t)G * len, qb);
                    const attn_query aq = { q, qi, qscale, qsum, len, int8, int8 ? qb : NULL };
                    const uint8_t *kr_rows[NK];
                    for (int k = 0; k < nk; k++) kr_rows[k] = rows + (size_t)(key0 + k) * rb;
                    for (int i = 0; i < MAXG * NK; i++) w_lanes[i] = -12345.0f;
                    f->scores(kr_rows, nk, &aq, G, len, 0.125f, w_rows, NK);
                    f->scores_lanes(body, key0, nk, &aq, G, len, 0.125f, w_lanes, NK);
                    for (int g = 0; g < G; g++) {
                        CHECK(!memcmp(w_rows + g * NK, w_lanes + g * NK, (size_t)nk * sizeof(float)),
                              "%s %s G %d len %d keys %d..%d%s: head %d's lanes scores differ from the rows'", kr->level,
                              kvq_type_name(ty), G, len, key0, key0 + nk - 1, int8 ? " int8" : "", g);
                        for (int k = nk; k < NK; k++)
                            CHECK(w_lanes[g * NK + k] == -12345.0f, "%s: score %d of head %d written past nk %d",
                                  kr->level, k, g, nk);
                    }
                    checked++;
                }
        }
    }
    CHECK(checked >= (int)(KVQ_ARRAY_LEN(spans) * KVQ_ARRAY_LEN(k_lanes_types)) * MAXG, "%d cases", checked);
}

/* The int8 query's byte sums at their extremes (every code 15 or 0, every
 * query level +-127 or alternating): where pairs of byte products are
 * summed in int16 before widening (the AVX2 and AVX-512 levels) a block
 * reaches 30480 of 32767, so one more pair vector or a saturating step
 * would show here.  Each level's byte kernel against its own int16
 * kernel on the same query levels (exact integers both: the same bits). */
TEST(lanes_int8_query_extremes) {
    enum { NPOS = 32, LEN = 128, G = 2 };
    static uint8_t rows[NPOS * LEN / 32 * 34], body[NPOS * LEN / 32 * 34];
    static float q[G * LEN], qscale[G * LEN / 32], w8[G * NPOS], w16[G * NPOS];
    static int16_t qi[G * LEN];
    static int8_t qb[G * LEN];
    static int32_t qsum[G * LEN / 32];
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_1 };
    int checked = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr) continue;
        for (size_t ti = 0; ti < KVQ_ARRAY_LEN(types); ti++)
            for (int codes = 0; codes < 3; codes++)
                for (int sign = 0; sign < 3; sign++) {
                    const kvq_type ty = types[ti];
                    const int bb = kvq_type_get_scalar(ty)->block_bytes, hdr = kvq_lanes_spec_of(ty)->header;
                    const size_t rb = (size_t)LEN / 32 * (size_t)bb;
                    for (int pos = 0; pos < NPOS; pos++)
                        for (int b = 0; b < LEN / 32; b++) {
                            uint8_t *blk = rows + (size_t)pos * rb + (size_t)b * (size_t)bb;
                            memset(blk + hdr, codes == 0 ? 0xFF : codes == 1 ? 0x00 : (pos + b) % 2 ? 0xF0 : 0x0F,
                                   (size_t)(bb - hdr));
                            kvq_wr16(blk, kvq_float_to_half(0.01f * (float)(1 + pos % 3)));
                            if (hdr == 4) kvq_wr16(blk + 2, kvq_float_to_half(-0.02f));
                        }
                    for (int pos = 0; pos < NPOS; pos++) kvq_lanes_put_row(ty, body, LEN, pos, rows + (size_t)pos * rb);
                    for (int i = 0; i < G * LEN; i++)
                        q[i] = sign == 0 ? 1.0f : sign == 1 ? -1.0f : (i % 3 ? 1.0f : -1.0f);
                    for (int g = 0; g < G; g++)
                        attn_block_round_query8(q + g * LEN, LEN, qi + g * LEN, qscale + g * LEN / 32, qsum + g * LEN / 32);
                    attn_block_query_bytes(qi, G * LEN, qb);
                    const attn_query bytes = { q, qi, qscale, qsum, LEN, true, qb },
                                     pairs = { q, qi, qscale, qsum, LEN, true, NULL };
                    kr->fused[ty].scores_lanes(body, 0, NPOS, &bytes, G, LEN, 1.0f, w8, NPOS);
                    kr->fused[ty].scores_lanes(body, 0, NPOS, &pairs, G, LEN, 1.0f, w16, NPOS);
                    CHECK(!memcmp(w8, w16, sizeof w8), "%s %s codes %d signs %d: the byte sums differ from the int16 ones",
                          kr->level, kvq_type_name(ty), codes, sign);
                    CHECK(qi[0] == (q[0] > 0.0f ? 127 : -127), "the query at its extreme level");
                    checked++;
                }
    }
    CHECK(checked >= 18, "%d cases", checked);
}

/* For every type with lanes: one cache with its K body in lanes, one in rows (the same
 * writes): every body row reads back the same; attention is the same bits
 * where chunks start at whole groups either way (no sink, no tail: decode
 * steps and a prefill batch); with a sink and a tail (chunks cut at other
 * keys) within float rounding of the rows cache and of the reference over
 * the cached values; a state saved from lanes loads into rows and
 * attends the same bits as the cache it came from. */
static kvq_cache *lanes_cache(kvq_type tk, bool lanes, int sink, int tail, const attn_data *d) {
    return attn_layout_cache(tk, KVQ_TYPE_Q8_0, lanes, false, sink, tail, d);   /* V in rows: only K's layout differs */
}

TEST(cache_lanes_attends_as_rows) {
    enum { N = 181, HKV = 2, GQA = 2, HD = 128 };
    attn_data d;
    CHECK(attn_data_make(&d, N, HKV * GQA, HKV, HD, HD, 77), "alloc");
    const size_t per_row = (size_t)HKV * GQA * HD;
    float *a = malloc(8 * per_row * sizeof(float)), *b = malloc(8 * per_row * sizeof(float));
    float *ref = malloc(8 * per_row * sizeof(float));
    CHECK(a && b && ref, "alloc");
    for (int layout = 0; layout < 2 * (int)KVQ_ARRAY_LEN(k_lanes_types); layout++) {
        const kvq_type tk = k_lanes_types[layout / 2];
        const int sink = layout % 2 ? 3 : 0, tail = layout % 2 ? 5 : 0;
        kvq_cache *cl = lanes_cache(tk, true, sink, tail, &d), *cr = lanes_cache(tk, false, sink, tail, &d);
        CHECK(cl && cr, "create");
        CHECK(cl->k[0].lanes && !cr->k[0].lanes && !cl->v[0].lanes, "only the lanes cache's K body is in lanes");
        CHECK(attn_fill_upto(cl, &d, 13, N - 8) && attn_fill_upto(cr, &d, 13, N - 8), "fill");
        const int differ = attn_body_rows_differ(cl, cr, false, N, 7);
        CHECK(differ < 0, "head %d position %d reads back differently", differ / N, differ % N);
        CHECK(attn_attend_rows(cl, &d, N - 8, 8, a) && attn_attend_rows(cr, &d, N - 8, 8, b), "prefill batch");
        CHECK(attn_ref_cache(cl, &d, N - 8, 8, 1.0f / sqrtf((float)HD), ref), "reference");
        if (!sink) CHECK(!memcmp(a, b, 8 * per_row * sizeof(float)), "%s batch: lanes and rows differ", kvq_type_name(tk));
        else CHECK(attn_rel_err(a, b, 8 * per_row) < 1e-5, "batch: lanes vs rows %.3g", attn_rel_err(a, b, 8 * per_row));
        CHECK(attn_rel_err(a, ref, 8 * per_row) < 1e-4, "batch vs reference %.3g", attn_rel_err(a, ref, 8 * per_row));
        for (int pos = N - 8; pos < N; pos += 3) {   /* decode steps */
            CHECK(attn_attend_rows(cl, &d, pos, 1, a) && attn_attend_rows(cr, &d, pos, 1, b), "decode");
            if (!sink) CHECK(!memcmp(a, b, per_row * sizeof(float)), "%s step %d: lanes and rows differ", kvq_type_name(tk), pos);
            else CHECK(attn_rel_err(a, b, per_row) < 1e-5, "step %d: %.3g", pos, attn_rel_err(a, b, per_row));
        }
        char path[64];
        snprintf(path, sizeof path, "/tmp/kvq_lanes_%d.kvqs", (int)getpid());
        static int32_t toks[N];
        const kvq_state_tag tag = { 99, toks, N };
        int32_t *back = NULL;
        int n_back = 0;
        kvq_cache *loaded = lanes_cache(tk, false, sink, tail, &d);
        CHECK(loaded && kvq_cache_save(cl, path, &tag, NULL) == KVQ_OK &&
              kvq_cache_load(loaded, path, 99, &back, &n_back, NULL) == KVQ_OK, "save lanes, load rows");
        free(back);
        remove(path);
        CHECK(!memcmp(loaded->mem[0], cr->mem[0], cr->mem_bytes[0]), "the file holds the rows the rows cache has");
        CHECK(attn_attend_rows(loaded, &d, N - 1, 1, a) && attn_attend_rows(cr, &d, N - 1, 1, b), "attend loaded");
        CHECK(!memcmp(a, b, per_row * sizeof(float)), "loaded cache attends differently");
        kvq_cache_free(loaded);
        kvq_cache_free(cl);
        kvq_cache_free(cr);
    }
    free(a);
    free(b);
    free(ref);
    attn_data_free(&d);
}
