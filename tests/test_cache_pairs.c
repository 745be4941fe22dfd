/* test_cache_pairs.c - the V bodies of every 32-value block type stored two keys per lane
 * (src/cache/cache_lanes.h, the pairs layout): rows in and out unchanged,
 * the pairs V kernel within its stated bound of the row kernel at every
 * level and the same bits at every level, non-finite input handed back to
 * the rows, and a cache in pairs attending, reading, saving and loading
 * as one in rows. */
#include "attn_block.h"
#include "attn_ref.h"
#include "cache_lanes.h"
#include "quant_block.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const k_levels[] = { "scalar", "avx2", "avx512", "avx512-vnni" };
static const kvq_type k_pairs_types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_IQ4_NL, KVQ_TYPE_Q4_1, KVQ_TYPE_Q8_0,
                                          KVQ_TYPE_Q3_0, KVQ_TYPE_Q2_0, KVQ_TYPE_Q3_1, KVQ_TYPE_Q2_1,
                                          KVQ_TYPE_Q5_0, KVQ_TYPE_Q5_1, KVQ_TYPE_Q6_0, KVQ_TYPE_Q6_1 };
enum { N_PAIRS_TYPES = 12 };
/* the 3- and 2-bit types: whole block quads */
static bool quad_type(kvq_type t) {
    return t == KVQ_TYPE_Q3_0 || t == KVQ_TYPE_Q2_0 || t == KVQ_TYPE_Q3_1 || t == KVQ_TYPE_Q2_1;
}
/* the q*_1 types: a min m per block; o, the code the kernel reads as 0 */
static bool has_min(kvq_type t) {
    return t == KVQ_TYPE_Q4_1 || t == KVQ_TYPE_Q3_1 || t == KVQ_TYPE_Q2_1 || t == KVQ_TYPE_Q5_1 || t == KVQ_TYPE_Q6_1;
}
static double centre_code(kvq_type t) {
    return t == KVQ_TYPE_Q6_1 ? 32.0 : t == KVQ_TYPE_Q5_1 ? 16.0 : t == KVQ_TYPE_Q4_1 ? 8.0 : t == KVQ_TYPE_Q3_1 ? 4.0 : 2.0;
}

/* The largest |value / d| of a code as the kernel reads it: q4_0's and
 * q4_1's c - 8, q3_0's c - 4, q2_0's c - 2, iq4_nl's book, q8_0's bytes
 * (random ones: -128). */
static double code_max(kvq_type t) {
    return t == KVQ_TYPE_IQ4_NL                       ? 127.0
           : t == KVQ_TYPE_Q8_0                       ? 128.0
           : t == KVQ_TYPE_Q3_0 || t == KVQ_TYPE_Q3_1 ? 4.0
           : t == KVQ_TYPE_Q2_0 || t == KVQ_TYPE_Q2_1 ? 2.0
           : t == KVQ_TYPE_Q5_0 || t == KVQ_TYPE_Q5_1 ? 16.0
           : t == KVQ_TYPE_Q6_0 || t == KVQ_TYPE_Q6_1 ? 32.0
                                                      : 8.0;
}
static size_t block_bytes(kvq_type t) { return (size_t)kvq_type_get_scalar(t)->block_bytes; }

/* Rows of a pairs type: codes anything, d of either sign, 0.003 .. 0.05
 * (or 0); the q*_1 types' m of either sign up to 0.4. */
static void random_pairs_rows(test_rng *r, kvq_type t, uint8_t *rows, int n, int dim) {
    const size_t blocks = (size_t)n * (size_t)(dim / 32), bb = block_bytes(t);
    for (size_t b = 0; b < blocks; b++) {
        uint8_t *blk = rows + b * bb;
        for (size_t i = 2; i < bb; i++) blk[i] = (uint8_t)(test_rng_u64(r) >> 24);
        const double u = test_rng_uniform(r);
        const float d = u < 0.03 ? 0.0f : (float)(0.003 + 0.047 * test_rng_uniform(r)) * (u < 0.5 ? -1.0f : 1.0f);
        kvq_wr16(blk, kvq_float_to_half(d));
        if (has_min(t)) kvq_wr16(blk + 2, kvq_float_to_half((float)(0.8 * test_rng_uniform(r) - 0.4)));
    }
}

/* Positions put in any order, then read back unchanged; the layout only
 * where promised (q4_0, whole block pairs, at most 512 values) and only
 * for the types whose kernels read it. */
TEST(vpairs_rows_round_trip) {
    enum { N = 48 };
    static const int dims[] = { 64, 128, 192, 256, 512, 96 };
    static uint8_t rows[N * 512 / 32 * KVQ_BYTES_Q8_0], body[N * 512 / 32 * KVQ_BYTES_Q8_0], back[512 / 32 * 34];
    test_rng r = { 5, 0, 0 };
    for (size_t di = 0; di < N_PAIRS_TYPES * KVQ_ARRAY_LEN(dims); di++) {
        const int dim = dims[di / N_PAIRS_TYPES];
        const kvq_type ty = k_pairs_types[di % N_PAIRS_TYPES];
        if ((dim % 64 && ty != KVQ_TYPE_Q8_0) || (dim % 128 && quad_type(ty))) continue;   /* whole pairs, quads */
        const size_t rb = (size_t)dim / 32 * block_bytes(ty);
        CHECK(kvq_vpairs_type(ty, dim), "%s at %d in pairs", kvq_type_name(ty), dim);
        random_pairs_rows(&r, ty, rows, N, dim);
        memset(body, 0xA5, sizeof body);
        for (int i = 0; i < N; i++) {
            const int pos = (i * 29 + 7) % N;   /* every position once, out of order */
            kvq_vpairs_put_row(ty, body, dim, pos, rows + (size_t)pos * rb);
        }
        for (int pos = 0; pos < N; pos++) {
            kvq_vpairs_get_row(ty, body, dim, pos, back);
            CHECK(!memcmp(back, rows + (size_t)pos * rb, rb), "dim %d position %d reads back differently", dim, pos);
        }
    }
    CHECK(!kvq_vpairs_type(KVQ_TYPE_Q4_0, 32) && !kvq_vpairs_type(KVQ_TYPE_Q4_0, 96) &&
          !kvq_vpairs_type(KVQ_TYPE_Q4_0, 1024) && !kvq_vpairs_type(KVQ_TYPE_IQ4_NL, 96) &&
          !kvq_vpairs_type(KVQ_TYPE_Q8_0, 48) && !kvq_vpairs_type(KVQ_TYPE_Q5_0, 160) &&
          !kvq_vpairs_type(KVQ_TYPE_F16, 128) && !kvq_vpairs_type(KVQ_TYPE_Q3_0, 64) &&
          !kvq_vpairs_type(KVQ_TYPE_Q2_0, 192) && !kvq_vpairs_type(KVQ_TYPE_Q3_0, 640) &&
          !kvq_vpairs_type(KVQ_TYPE_Q3_1, 96) && !kvq_vpairs_type(KVQ_TYPE_Q6_0, 96) &&
          !kvq_vpairs_type(KVQ_TYPE_Q5_1, 32),
          "pairs only for rows of whole block pairs (q8_0: blocks; the 3- and 2-bit types: "
          "quads) up to 512 values");
    const attn_block_kernels *scalar = attn_block_level("scalar");
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++)
        CHECK(!kvq_vpairs_type((kvq_type)ty, 128) == !(scalar->fused && scalar->fused[ty].accumulate_pairs),
              "%s: a pairs layout without a pairs kernel, or the reverse", kvq_type_name((kvq_type)ty));
}

/* The bound of attn_codes.inc pairs_accumulate for head g: nk s c_max
 * / 2, s = max_t w_t * max |d| over the chunk's groups / 32767 (q*_1: plus
 * nk s_m / 2, s_m = max_t w_t * max |m + o d| / 2^24), plus float
 * rounding of the sums (relative to what they add). */
static double pairs_bound(kvq_type ty, const uint8_t *body, int len, int key0, int nk, const float *wg,
                          const float *acc0, double sum_abs) {
    const int nb = len / 32, g0 = key0 / 16, g1 = (key0 + nk - 1) / 16;
    const size_t group = (size_t)nb * 16 * block_bytes(ty);
    double dmax = 0.0, mmax = 0.0, wmax = 0.0, amax = 0.0;
    for (int g = g0; g <= g1; g++)
        for (int i = 0; i < nb * 16; i++) {
            dmax = fmax(dmax, fabs(kvq_half_to_float(kvq_rd16(body + g * group + 2 * i))));
            if (has_min(ty))
                mmax = fmax(mmax, fabs(kvq_half_to_float(kvq_rd16(body + g * group + 2 * (nb * 16 + i))) +
                                       centre_code(ty) * kvq_half_to_float(kvq_rd16(body + g * group + 2 * i))));
        }
    for (int t = 0; t < nk; t++) wmax = fmax(wmax, wg[t]);
    for (int i = 0; i < len; i++) amax = fmax(amax, fabs(acc0[i]));
    return 0.5 * nk * wmax * (code_max(ty) * dmax / 32767.0 + mmax / 16777216.0) * (1.0 + 1e-3) +
           1e-6 * (amax + sum_abs);
}

/* The pairs kernel of every level against the same level's row kernel on
 * the same rows, for chunks starting at a group, inside one and ending in
 * a third, 1..32 keys, head groups 1..9, 64..512 values, weights with
 * zeros: within the bound; the same bits at every level; nothing written
 * past len. */
TEST(pairs_sums_within_bound_of_row_sums) {
    enum { NPOS = 80, MAXG = 9, MAXLEN = 512, NK = ATTN_BLOCK_KEYS, STRIDE = MAXLEN + 8 };
    static uint8_t rows[NPOS * MAXLEN / 32 * KVQ_BYTES_Q8_0], body[NPOS * MAXLEN / 32 * KVQ_BYTES_Q8_0];
    static float w[MAXG * NK], acc0[MAXG * STRIDE], acc_rows[MAXG * STRIDE], acc_pairs[MAXG * STRIDE],
        acc_first[MAXG * STRIDE];
    static const int lens[] = { 64, 128, 256, 512, 192 };
    static const int spans[][2] = { { 0, 32 }, { 16, 32 }, { 5, 27 }, { 3, 1 }, { 47, 32 }, { 60, 9 }, { 32, 16 } };
    int checked = 0, differ = 0;
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_pairs_types); ti++) {
        for (int G = 1; G <= MAXG; G++)
            for (size_t si = 0; si < KVQ_ARRAY_LEN(spans); si++) {
                const kvq_type ty = k_pairs_types[ti];
                test_rng r = { 100 + (uint64_t)(G * 16) + si + 1000 * ti, 0, 0 };
                const int len0 = ty == KVQ_TYPE_Q8_0 && si % 3 == 1 ? 96 : lens[(G + (int)si) % 5];
                const int len = quad_type(ty) ? (len0 + 127) / 128 * 128 : len0;
                const int key0 = spans[si][0], nk = spans[si][1];
                const size_t rb = (size_t)len / 32 * block_bytes(ty);
                random_pairs_rows(&r, ty, rows, NPOS, len);
                for (int pos = 0; pos < NPOS; pos++) kvq_vpairs_put_row(ty, body, len, pos, rows + pos * rb);
                for (int i = 0; i < MAXG * NK; i++)
                    w[i] = test_rng_uniform(&r) < 0.15 ? 0.0f : (float)test_rng_uniform(&r);
                for (int i = 0; i < MAXG * STRIDE; i++) acc0[i] = (float)test_rng_gauss(&r) * 0.01f;
                const uint8_t *vr[NK];
                for (int t = 0; t < nk; t++) vr[t] = rows + (size_t)(key0 + t) * rb;
                bool first = true;
                for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
                    const attn_block_kernels *kr = attn_block_level(k_levels[li]);
                    if (!kr) continue;
                    const attn_block_fused *f = &kr->fused[ty];
                    CHECK(f->accumulate && f->accumulate_pairs, "%s: %s has row and pairs V kernels", kr->level,
                          kvq_type_name(ty));
                    memcpy(acc_rows, acc0, sizeof acc0);
                    memcpy(acc_pairs, acc0, sizeof acc0);
                    f->accumulate(vr, nk, w, NK, G, acc_rows, STRIDE, len);
                    CHECK(f->accumulate_pairs(body, key0, nk, w, NK, G, acc_pairs, STRIDE, len),
                          "%s: finite chunk refused",
                          kr->level);
                    for (int g = 0; g < G; g++) {
                        double sum_abs = 0.0;
                        for (int t = 0; t < nk; t++)
                            sum_abs += w[g * NK + t] * (code_max(ty) * fabs(kvq_half_to_float(kvq_rd16(vr[t]))) +
                                                        (has_min(ty) ? 0.4 : 0.0));
                        const double bound =
                            pairs_bound(ty, body, len, key0, nk, w + g * NK, acc0 + g * STRIDE, sum_abs * len);
                        double worst = 0.0;
                        for (int i = 0; i < len; i++) {
                            const double e = fabs((double)acc_pairs[g * STRIDE + i] - acc_rows[g * STRIDE + i]);
                            worst = e > worst || e != e ? e : worst;
                        }
                        CHECK(worst <= bound,
                              "%s %s G %d len %d keys %d..%d head %d: pairs off the rows by %.3g > %.3g",
                              kr->level, kvq_type_name(ty), G, len, key0, key0 + nk - 1, g, worst, bound);
                        differ += worst > 0.0;
                        for (int i = len; i < STRIDE; i++)
                            CHECK(acc_pairs[g * STRIDE + i] == acc0[g * STRIDE + i], "%s: written past len", kr->level);
                    }
                    if (first) memcpy(acc_first, acc_pairs, sizeof acc_pairs);
                    else CHECK(!memcmp(acc_first, acc_pairs, sizeof acc_pairs),
                               "%s: pairs sums differ from the scalar level's",
                               kr->level);
                    first = false;
                    checked++;
                }
            }
    }
    CHECK(checked >= N_PAIRS_TYPES * MAXG * (int)KVQ_ARRAY_LEN(spans), "%d cases", checked);
    CHECK(differ > 0, "the rounding of the weights never showed: is the pairs kernel the row kernel?");
}

/* The keys of a chunk's groups outside the chunk (an earlier sequence's
 * rows, another range's keys) change nothing: the same bits, and the
 * chunk accepted even where they hold NaN, infinite or larger scales. */
TEST(pairs_sums_ignore_keys_outside_the_chunk) {
    enum { NPOS = 64, LEN = 256, NK = ATTN_BLOCK_KEYS, G = 3 };
    static uint8_t rows[NPOS * LEN / 32 * KVQ_BYTES_Q8_0], other[NPOS * LEN / 32 * KVQ_BYTES_Q8_0],
        body[NPOS * LEN / 32 * KVQ_BYTES_Q8_0], body2[NPOS * LEN / 32 * KVQ_BYTES_Q8_0];
    static const int spans[][2] = { { 5, 27 }, { 3, 1 }, { 16, 9 }, { 47, 16 } };
    float w[G * NK], acc[G * LEN], acc2[G * LEN];
    int cases = 0;
    for (size_t li = 0; li < N_PAIRS_TYPES * KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li / N_PAIRS_TYPES]);
        if (!kr) continue;
        const kvq_type ty = k_pairs_types[li % N_PAIRS_TYPES];
        const size_t rb = LEN / 32 * block_bytes(ty);
        for (size_t si = 0; si < KVQ_ARRAY_LEN(spans); si++) {
            const int key0 = spans[si][0], nk = spans[si][1];
            test_rng r = { 40 + li * 8 + si, 0, 0 };
            random_pairs_rows(&r, ty, rows, NPOS, LEN);
            random_pairs_rows(&r, ty, other, NPOS, LEN);
            for (int pos = 0; pos < NPOS; pos++) {
                uint8_t *o = other + pos * rb;
                if (pos % 3 == 0) kvq_wr16(o + (size_t)(pos % 8) * block_bytes(ty), pos % 2 ? 0x7E00 : 0x7C00);
                if (pos % 3 == 1) kvq_wr16(o, kvq_float_to_half(60000.0f));
                const bool inside = pos >= key0 && pos < key0 + nk;
                kvq_vpairs_put_row(ty, body, LEN, pos, rows + pos * rb);
                kvq_vpairs_put_row(ty, body2, LEN, pos, inside ? rows + pos * rb : o);
            }
            for (int i = 0; i < G * NK; i++) w[i] = (float)test_rng_uniform(&r);
            for (int i = 0; i < G * LEN; i++) acc[i] = acc2[i] = (float)i * 0.01f;
            const attn_block_fused *f = &kr->fused[ty];
            CHECK(f->accumulate_pairs(body, key0, nk, w, NK, G, acc, LEN, LEN) &&
                      f->accumulate_pairs(body2, key0, nk, w, NK, G, acc2, LEN, LEN),
                  "%s %s keys %d..%d: refused", kr->level, kvq_type_name(ty), key0, key0 + nk - 1);
            CHECK(!memcmp(acc, acc2, sizeof acc), "%s %s keys %d..%d: the keys outside the chunk changed its sums",
                  kr->level, kvq_type_name(ty), key0, key0 + nk - 1);
            cases++;
        }
    }
    CHECK(cases >= N_PAIRS_TYPES * (int)KVQ_ARRAY_LEN(spans), "%d cases", cases);
}

/* A NaN or infinite scale of a key of the chunk, or a NaN weight: the
 * kernel adds nothing and says so (the caller then sums the rows, setting
 * aside keys of weight 0). */
TEST(pairs_hand_back_nonfinite_chunks) {
    enum { NPOS = 48, LEN = 128, NK = ATTN_BLOCK_KEYS, G = 2 };
    static uint8_t rows[NPOS * LEN / 32 * KVQ_BYTES_Q8_0], body[NPOS * LEN / 32 * KVQ_BYTES_Q8_0];
    float w[G * NK], acc[G * LEN], acc0[G * LEN];
    test_rng r = { 9, 0, 0 };
    for (size_t li = 0; li < N_PAIRS_TYPES * KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li / N_PAIRS_TYPES]);
        if (!kr) continue;
        const kvq_type ty = k_pairs_types[li % N_PAIRS_TYPES];
        const size_t rb = LEN / 32 * block_bytes(ty);
        const attn_block_fused *f = &kr->fused[ty];
        for (int c = 0; c < 5; c++) {
            if (c == 4 && !has_min(ty)) continue;
            random_pairs_rows(&r, ty, rows, NPOS, LEN);
            for (int i = 0; i < G * NK; i++) w[i] = (float)test_rng_uniform(&r);
            if (c == 0) kvq_wr16(rows + 20 * rb + 2 * block_bytes(ty), 0x7E00);   /* NaN d, key 20 block 2 */
            if (c == 1) kvq_wr16(rows + 31 * rb, 0x7C00);                        /* inf d, key 31 */
            if (c == 2) w[NK + 7] = NAN;
            if (c == 3) kvq_wr16(rows + 17 * rb, 0xFE00);   /* a NaN scale of a key outside the chunk: accepted */
            if (c == 4) kvq_wr16(rows + 25 * rb + 2, 0x7C00);   /* q*_1: an infinite min */
            for (int pos = 0; pos < NPOS; pos++) kvq_vpairs_put_row(ty, body, LEN, pos, rows + pos * rb);
            for (int i = 0; i < G * LEN; i++) acc[i] = acc0[i] = (float)i;
            const int key0 = c == 3 ? 18 : 16, nk = c == 3 ? 14 : 16;
            if (c == 3) {   /* outside the chunk: not its business (pairs_sums_ignore_keys_outside_the_chunk) */
                CHECK(f->accumulate_pairs(body, key0, nk, w, NK, G, acc, LEN, LEN), "%s %s: refused for a NaN outside",
                      kr->level, kvq_type_name(ty));
                continue;
            }
            CHECK(!f->accumulate_pairs(body, key0, nk, w, NK, G, acc, LEN, LEN), "%s %s case %d: accepted", kr->level,
                  kvq_type_name(ty), c);
            CHECK(!memcmp(acc, acc0, sizeof acc), "%s case %d: added something before refusing", kr->level, c);
        }
    }
}

/* A cache with a q4_0 / iq4_nl V body in pairs against one in rows (the same
 * writes): every body row reads back the same; attention within the
 * pairs tolerance of the rows cache and of the reference over the cached
 * values, with and without a sink and a tail; a state saved from pairs
 * loads into rows byte for byte, and one saved from rows into pairs
 * reads back the same rows. */
static kvq_cache *pairs_cache(kvq_type tk, kvq_type tv, bool pairs, int sink, int tail, const attn_data *d) {
    return attn_layout_cache(tk, tv, true, pairs, sink, tail, d);
}

TEST(cache_pairs_attends_as_rows) {
    enum { N = 181, HKV = 2, GQA = 2, HD = 128 };
    static const kvq_type tks[] = { KVQ_TYPE_Q8_0, KVQ_TYPE_F16,  KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_1,
                                    KVQ_TYPE_Q3_0, KVQ_TYPE_Q8_0, KVQ_TYPE_F16,  KVQ_TYPE_Q2_1,
                                    KVQ_TYPE_Q5_0, KVQ_TYPE_F16,  KVQ_TYPE_Q6_0, KVQ_TYPE_Q4_0 };   /* V: k_pairs_types */
    attn_data d;
    CHECK(attn_data_make(&d, N, HKV * GQA, HKV, HD, HD, 78), "alloc");
    const size_t per_row = (size_t)HKV * GQA * HD;
    float *a = malloc(8 * per_row * sizeof(float)), *b = malloc(8 * per_row * sizeof(float));
    float *ref = malloc(8 * per_row * sizeof(float));
    CHECK(a && b && ref, "alloc");
    for (int cs = 0; cs < 2 * (int)KVQ_ARRAY_LEN(tks); cs++) {
        const kvq_type tk = tks[cs / 2], tv = k_pairs_types[cs / 2];
        const double tol = attn_tolerance(tk, tv, HD);
        const int sink = cs % 2 ? 3 : 0, tail = cs % 2 ? 5 : 0;
        kvq_cache *cp = pairs_cache(tk, tv, true, sink, tail, &d), *cr = pairs_cache(tk, tv, false, sink, tail, &d);
        CHECK(cp && cr, "create");
        CHECK(cp->v[0].lanes && !cr->v[0].lanes, "only the pairs cache's V body is in pairs");
        CHECK(attn_fill_upto(cp, &d, 13, N - 8) && attn_fill_upto(cr, &d, 13, N - 8), "fill");
        const int differ = attn_body_rows_differ(cp, cr, true, N, 5);
        CHECK(differ < 0, "head %d position %d reads back differently", differ / N, differ % N);
        CHECK(attn_attend_rows(cp, &d, N - 8, 8, a) && attn_attend_rows(cr, &d, N - 8, 8, b), "prefill batch");
        CHECK(attn_ref_cache(cp, &d, N - 8, 8, 1.0f / sqrtf((float)HD), ref), "reference");
        CHECK(attn_rel_err(a, b, 8 * per_row) < tol, "K %s batch: pairs vs rows %.3g", kvq_type_name(tk),
              attn_rel_err(a, b, 8 * per_row));
        CHECK(attn_rel_err(a, ref, 8 * per_row) < tol, "K %s batch vs reference %.3g", kvq_type_name(tk),
              attn_rel_err(a, ref, 8 * per_row));
        for (int pos = N - 8; pos < N; pos += 3) {   /* decode steps */
            CHECK(attn_attend_rows(cp, &d, pos, 1, a) && attn_attend_rows(cr, &d, pos, 1, b), "decode");
            CHECK(attn_rel_err(a, b, per_row) < tol, "K %s step %d: %.3g", kvq_type_name(tk), pos,
                  attn_rel_err(a, b, per_row));
        }
        char path[64];
        snprintf(path, sizeof path, "/tmp/kvq_pairs_%d.kvqs", (int)getpid());
        static int32_t toks[N];
        const kvq_state_tag tag = { 99, toks, N };
        int32_t *back = NULL;
        int n_back = 0;
        kvq_cache *loaded = pairs_cache(tk, tv, false, sink, tail, &d);
        CHECK(loaded && kvq_cache_save(cp, path, &tag, NULL) == KVQ_OK &&
              kvq_cache_load(loaded, path, 99, &back, &n_back, NULL) == KVQ_OK, "save pairs, load rows");
        free(back);
        back = NULL;
        CHECK(!memcmp(loaded->mem[0], cr->mem[0], cr->mem_bytes[0]), "the file holds the rows the rows cache has");
        kvq_cache *into_pairs = pairs_cache(tk, tv, true, sink, tail, &d);
        CHECK(into_pairs && kvq_cache_save(cr, path, &tag, NULL) == KVQ_OK &&
              kvq_cache_load(into_pairs, path, 99, &back, &n_back, NULL) == KVQ_OK, "save rows, load pairs");
        free(back);
        remove(path);
        CHECK(!memcmp(into_pairs->mem[0], cp->mem[0], cp->mem_bytes[0]),
              "loaded into pairs: not the pairs cache's bytes");
        CHECK(attn_attend_rows(into_pairs, &d, N - 1, 1, a) && attn_attend_rows(cp, &d, N - 1, 1, b), "attend loaded");
        CHECK(!memcmp(a, b, per_row * sizeof(float)), "the cache loaded into pairs attends differently");
        kvq_cache_free(into_pairs);
        kvq_cache_free(loaded);
        kvq_cache_free(cp);
        kvq_cache_free(cr);
    }
    free(a);
    free(b);
    free(ref);
    attn_data_free(&d);
}
