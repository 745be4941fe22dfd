/* test_attn_block.c - the chunked attention pass (src/attn_block.*): its
 * kernels against plain double formulas at every ISA level the CPU has,
 * and whole attention through it against the per-key reference pass. */
#include "attn_block.h"
#include "attn_ref.h"
#include "simd.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_levels[] = { "scalar", "scalar-tile", "avx2", "avx2-tile", "avx512", "avx512-tile", "avx512-vnni" };

/* |a - b| in units of b's float ulp. */
static double ulps(float a, double b) {
    const double ulp = ldexp(1.0, ilogb(b) - 23);
    return fabs((double)a - b) / ulp;
}

TEST(attn_block_exp_within_two_ulp) {
    float x[4096], y[4096];
    int levels = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr) continue;
        levels++;
        double worst = 0.0, worst_x = 0.0;
        /* [-87, 0] densely, in blocks of 4096 (exp_sum(x, n, 0) = exp) */
        for (int b = 0; b < 100; b++) {
            for (int i = 0; i < 4096; i++) x[i] = y[i] = -87.0f * (float)(b * 4096 + i) / (100.0f * 4096.0f);
            const float sum = kr->exp_sum(y, 4093, 0.0f);          /* odd n: the scalar tail too */
            double ref_sum = 0.0;
            for (int i = 0; i < 4093; i++) {
                const double ref = exp((double)x[i]);
                ref_sum += ref;
                const double e = ulps(y[i], ref);
                if (e > worst) { worst = e; worst_x = x[i]; }
            }
            CHECK(fabs(sum - ref_sum) <= 1e-5 * ref_sum, "%s: sum %.9g vs %.9g", kr->level, sum, ref_sum);
        }
        CHECK(worst <= 2.0, "%s: exp error %.2f ulp at x = %.9g", kr->level, worst, worst_x);
        /* shift applied; specials: 0 -> 1 exactly, below -87 and -inf -> 0, NaN stays */
        float s[5] = { 3.0f, 3.0f - 100.0f, -INFINITY, NAN, 2.5f };
        kr->exp_sum(s, 5, 3.0f);
        CHECK(s[0] == 1.0f && s[1] == 0.0f && s[2] == 0.0f && isnan(s[3]) && ulps(s[4], exp(-0.5)) <= 2.0,
              "%s: specials %g %g %g %g %g", kr->level, s[0], s[1], s[2], s[3], s[4]);
    }
    CHECK(levels >= 1, "no level");
    CHECK(attn_block_exp(-1.0f) == attn_block_level("scalar")->exp_sum((float[]){ -1.0f }, 1, 0.0f) &&
          ulps(attn_block_exp(-1.0f), exp(-1.0)) <= 2.0, "scalar exp disagrees");
}

TEST(attn_block_max_skips_nan) {
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr) continue;
        float x[37];
        for (int i = 0; i < 37; i++) x[i] = (float)((i * 7) % 37) - 50.0f;
        x[5] = NAN;
        x[36] = NAN;
        const float m = kr->max(x, 37);
        for (int i = 0; i < 37; i++) x[i] = NAN;
        const float none = kr->max(x, 37);
        CHECK(m == -14.0f && none == -INFINITY, "%s: max %g, all-NaN max %g", kr->level, m, none);
    }
}

/* Scores and weighted V sums of the kernels vs double sums, for head
 * counts that use every tile shape and lengths with vector tails. */
TEST(attn_block_scores_and_accumulate_match_double) {
    enum { NK = ATTN_BLOCK_KEYS, MAXG = 9, MAXLEN = 136 };
    static float k[NK][MAXLEN], q[MAXG][MAXLEN], w[MAXG][NK], acc[MAXG][MAXLEN], acc0[MAXG][MAXLEN];
    static const int lens[] = { 1, 5, 16, 17, 40, 128, 136 };
    test_rng r = { 5, 0, 0 };
    for (int t = 0; t < NK; t++)
        for (int d = 0; d < MAXLEN; d++) k[t][d] = (float)test_rng_gauss(&r);
    for (int g = 0; g < MAXG; g++)
        for (int d = 0; d < MAXLEN; d++) q[g][d] = (float)test_rng_gauss(&r), acc0[g][d] = (float)test_rng_gauss(&r);
    const float *rows[NK];
    for (int t = 0; t < NK; t++) rows[t] = k[t];
    double worst = 0.0;
    const char *where = "";
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr) continue;
        for (int G = 1; G <= MAXG; G++)
            for (size_t a = 0; a < KVQ_ARRAY_LEN(lens); a++) {
                const int len = lens[a], nk = 1 + (G * 7 + a * 5) % NK;
                kr->scores(rows, nk, &q[0][0], G, MAXLEN, len, 0.5f, &w[0][0], NK);
                memcpy(acc, acc0, sizeof acc);
                kr->accumulate(rows, nk, &w[0][0], NK, G, &acc[0][0], MAXLEN, len);
                for (int g = 0; g < G; g++) {
                    for (int t = 0; t < nk; t++) {
                        double s = 0.0, mag = 0.0;
                        for (int d = 0; d < len; d++) s += (double)q[g][d] * k[t][d], mag += fabs((double)q[g][d] * k[t][d]);
                        const double e = fabs(w[g][t] - 0.5 * s) / (0.5 * mag + 1e-30);
                        if (e > worst) { worst = e; where = kr->level; }
                    }
                    for (int d = 0; d < len; d++) {
                        double s = acc0[g][d], mag = fabs(acc0[g][d]);
                        for (int t = 0; t < nk; t++) s += (double)w[g][t] * k[t][d], mag += fabs((double)w[g][t] * k[t][d]);
                        const double e = fabs(acc[g][d] - s) / (mag + 1e-30);
                        if (e > worst) { worst = e; where = kr->level; }
                    }
                }
                CHECK(worst < 1e-6, "%s G %d len %d nk %d: rel err %.3g", where, G, len, nk, worst);
            }
    }
}

/* A V row holding inf that one head weights 0: that head stays finite
 * (the per-key pass skips zero weights; 0 * inf would be NaN). */
TEST(attn_block_zero_weight_skips_nonfinite_row) {
    enum { LEN = 32, G = 2 };
    float rows_f[3][LEN], tile[ATTN_BLOCK_KEYS * LEN], zero[LEN] = { 0 }, acc[G][LEN] = { { 0 } };
    for (int t = 0; t < 3; t++)
        for (int d = 0; d < LEN; d++) rows_f[t][d] = (float)(t + 1);
    rows_f[1][7] = INFINITY;
    float w[G][ATTN_BLOCK_KEYS] = { { 0.5f, 0.0f, 0.5f }, { 0.25f, 0.5f, 0.25f } };
    const uint8_t *rows[3] = { (const uint8_t *)rows_f[0], (const uint8_t *)rows_f[1], (const uint8_t *)rows_f[2] };
    const attn_block_rows src = { .tr = kvq_type_get(KVQ_TYPE_F32), .type = KVQ_TYPE_F32, .f32 = true, .len = LEN,
                                   .tile = tile, .zero = zero };
    attn_block_values(attn_block_best(), &src, rows, 3, &w[0][0], ATTN_BLOCK_KEYS, G, &acc[0][0], LEN);
    CHECK(acc[0][7] == 2.0f && acc[0][0] == 2.0f, "head 0 (weight 0 on the inf row): %g %g", acc[0][7], acc[0][0]);
    CHECK(isinf(acc[1][7]) && acc[1][0] == 0.25f + 1.0f + 0.75f, "head 1: %g %g", acc[1][7], acc[1][0]);
}

/* Whole attention of one configuration: the chunked pass at every level
 * against the per-key pass with the scalar kernels (the reference
 * oracle), with tail and sink, decode and prefill rows, forced key ranges.
 * Returns the worst relative error (INFINITY on failure, the failure in
 * msg); *compared counts the runs. */
static double chunked_vs_per_key(kvq_type ty, int g, int hd, uint64_t seed, bool int8_query, char *msg,
                                 size_t msg_size, int *compared) {
    static kvq_type_traits scalar[KVQ_TYPE_COUNT];
    if (!kvq_simd_table("scalar", scalar)) { snprintf(msg, msg_size, "no scalar table"); return INFINITY; }
    const int n_tok = 101;
    attn_data d;
    if (!attn_data_make(&d, n_tok, 2 * g, 2, hd, hd, seed)) { snprintf(msg, msg_size, "alloc"); return INFINITY; }
    kvq_cache_params p;
    attn_params(&p, 2, hd, hd, n_tok, ty, ty, KVQ_ROT_AUTO);
    p.tail_tokens = 13;
    p.sink_tokens = 3;
    p.tail_type = ty % 2 ? KVQ_TYPE_F16 : KVQ_TYPE_F32;
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    const int pos = 60, n = n_tok - pos;
    bool ok = kvq_cache_create(&p, &c, &err) == KVQ_OK && attn_fill_upto(c, &d, 17, pos);
    const size_t len = (size_t)n * d.n_head * hd;
    float *ref = malloc(len * sizeof(float)), *out = malloc(len * sizeof(float));
    const float scale = 1.0f / sqrtf((float)hd);
    const float *q = d.q + (size_t)pos * d.n_head * hd;
    float *ref_q8 = malloc(len * sizeof(float));
    const kvq_attend_opts ref_opts = { scalar, 0, int8_query };
    /* the per-key pass with the float query (the "-tile" levels' reference)
     * and with the query rounded as the integer kernels round it */
    const kvq_attend_loop per_key = { KVQ_PASS_PER_KEY, NULL, false }, per_key_q8 = { KVQ_PASS_PER_KEY, NULL, true };
    ok = ok && ref && out && ref_q8 &&
         kvq_cache_attend_loop(c, 0, pos, n, d.n_head, q, scale, ref, NULL, &ref_opts, &per_key, &err) == KVQ_OK &&
         kvq_cache_attend_loop(c, 0, pos, n, d.n_head, q, scale, ref_q8, NULL, &ref_opts, &per_key_q8, &err) == KVQ_OK;
    if (!ok) snprintf(msg, msg_size, "%s", err.msg[0] ? err.msg : "alloc");
    double worst = ok ? 0.0 : INFINITY;
    for (size_t li = 0; ok && li < KVQ_ARRAY_LEN(k_levels); li++) {
        const kvq_attend_loop chunked = { KVQ_PASS_CHUNKED, attn_block_level(k_levels[li]), false };
        if (!chunked.block) continue;
        const float *want = chunked.block->fused ? ref_q8 : ref;
        for (int splits = 0; splits <= 3; splits += 3) {
            const kvq_attend_opts o = { NULL, splits, int8_query };
            double e = INFINITY;
            if (kvq_cache_attend_loop(c, 0, pos, n, d.n_head, q, scale, out, NULL, &o, &chunked, &err) == KVQ_OK)
                e = attn_rel_err(out, want, len);
            if (!(e <= worst)) { worst = e; snprintf(msg, msg_size, "%s splits %d", k_levels[li], splits); }
            (*compared)++;
        }
    }
    kvq_cache_free(c);
    free(ref);
    free(ref_q8);
    free(out);
    attn_data_free(&d);
    return worst;
}

/* Every cache type, GQA and head dims (with and without vector tails)
 * varying with the type. */
TEST(attn_block_chunked_pass_equals_per_key_reference) {
    static const int gqa[] = { 1, 3, 4, 8 }, dims[] = { 8, 80, 128 };
    char msg[200] = "";
    int compared = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)ty);
        if (!tr || !tr->is_cache_type) continue;
        const int g = gqa[ty % 4], hd = dims[ty % 3];
        const double worst =
            chunked_vs_per_key((kvq_type)ty, g, hd, 900 + (uint64_t)ty, false, msg, sizeof msg, &compared);
        CHECK(worst < attn_tolerance((kvq_type)ty, (kvq_type)ty, hd), "%s gqa %d hd %d: chunked (%s) vs per-key rel err %.3g", tr->name, g, hd, msg, worst);
    }
    CHECK(compared > 0, "nothing compared");
}

/* kvq_attend_opts.int8_query through the whole pass: the chunked pass
 * (the byte kernels for q4_0/q4_1, the int16 ones with the int8 query
 * elsewhere) against the per-key reference scoring with the same int8
 * query, for the types that take it and one that does not (q8_0: the
 * option leaves its query int16); and the option really changes q4_0's
 * and kvarn4's output (a query rounded to int8 is not the int16 one),
 * and not kvarn3's. */
TEST(attn_block_int8_query_through_the_pass) {
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_1, KVQ_TYPE_Q8_0 };
    char msg[200] = "";
    int compared = 0;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        const double worst = chunked_vs_per_key(types[i], 2, 128, 950 + i, true, msg, sizeof msg, &compared);
        CHECK(worst < attn_tolerance(types[i], types[i], 128), "%s: chunked (%s) vs per-key with the int8 query rel err %.3g", kvq_type_name(types[i]),
              msg, worst);
    }
    CHECK(compared > 0, "nothing compared");
    CHECK(attn_block_int8_type(KVQ_TYPE_Q4_0) && attn_block_int8_type(KVQ_TYPE_KVARN4) &&
              !attn_block_int8_type(KVQ_TYPE_Q8_0) && !attn_block_int8_type(KVQ_TYPE_KVARN3),
          "int8 types");
    /* one decode row over a q4_0 cache: int8 and int16 queries differ */
    attn_data d;
    CHECK(attn_data_make(&d, 64, 4, 2, 128, 128, 31), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 128, 128, 64, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_AUTO);
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK && attn_fill_upto(c, &d, 16, 63), "%s", err.msg);
    static float o16[4 * 128], o8[4 * 128];
    const kvq_attend_opts a16 = { NULL, 0, false }, a8 = { NULL, 0, true };
    const float *q = d.q + (size_t)63 * d.n_head * 128;
    CHECK(kvq_cache_attend_opts(c, 0, 63, 1, d.n_head, q, 0.1f, o16, NULL, &a16, &err) == KVQ_OK &&
              kvq_cache_attend_opts(c, 0, 63, 1, d.n_head, q, 0.1f, o8, NULL, &a8, &err) == KVQ_OK,
          "%s", err.msg);
    CHECK(memcmp(o16, o8, sizeof o16) != 0, "int8_query changed nothing on a q4_0 cache");
    const double e = attn_rel_err(o8, o16, 4 * 128);
    CHECK(e < 2e-2, "int8 vs int16 query on q4_0: rel err %.3g", e);
    kvq_cache_free(c);
    attn_data_free(&d);
    /* a kvarn4 K (its folded query rounded to 127 levels, its bytes read
     * by the lanes kernels) changes as well, and a kvarn3 K does not (the
     * option leaves its query int16) */
    static const kvq_type tiles[] = { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3 };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(tiles); i++) {
        enum { N = 300 };
        CHECK(attn_data_make(&d, N, 4, 2, 128, 128, 37), "alloc");
        attn_params(&p, 2, 128, 128, N, tiles[i], KVQ_TYPE_Q8_0, KVQ_ROT_AUTO);
        c = NULL;
        CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK && attn_fill_upto(c, &d, 64, N - 1), "%s", err.msg);
        const float *qk = d.q + (size_t)(N - 1) * d.n_head * 128;
        CHECK(kvq_cache_attend_opts(c, 0, N - 1, 1, d.n_head, qk, 0.1f, o16, NULL, &a16, &err) == KVQ_OK &&
                  kvq_cache_attend_opts(c, 0, N - 1, 1, d.n_head, qk, 0.1f, o8, NULL, &a8, &err) == KVQ_OK,
              "%s", err.msg);
        const bool changed = memcmp(o16, o8, sizeof o16) != 0;
        CHECK(changed == (tiles[i] == KVQ_TYPE_KVARN4), "%s: int8_query %s the output", kvq_type_name(tiles[i]),
              changed ? "changed" : "did not change");
        const double ek = attn_rel_err(o8, o16, 4 * 128);
        CHECK(ek < 2e-2, "%s: int8 vs int16 query rel err %.3g", kvq_type_name(tiles[i]), ek);
        kvq_cache_free(c);
        attn_data_free(&d);
    }
}

/* The fused kernels' types (attn_codes.inc) through whole attention:
 * GQA 1..8 and head dims 8, 80, 96, 128 (whole blocks of 32: 1, 3, 3 and
 * 4 blocks, the first three padded) spread over the types. */
TEST(attn_block_fused_pass_equals_per_key_reference) {
    static const int dims[] = { 8, 80, 96, 128 };
    const attn_block_kernels *best = attn_block_best();
    if (!best->fused) SKIP("no fused kernels at level %s", best->level);
    char msg[200] = "";
    int compared = 0, configs = 0;
    const int per_type = test_sanitized() ? 1 : 3;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        if (!best->fused[ty].block_bytes) continue;
        for (int i = 0; i < per_type; i++) {
            const int g = 1 + (ty * 3 + i * 5) % 8, hd = dims[(ty + i) % 4];
            const double worst = chunked_vs_per_key((kvq_type)ty, g, hd, 1700 + (uint64_t)(ty * 7 + i), false, msg,
                                                    sizeof msg, &compared);
            CHECK(worst < attn_tolerance((kvq_type)ty, (kvq_type)ty, hd), "%s gqa %d hd %d: fused (%s) vs per-key rel err %.3g",
                  kvq_type_name((kvq_type)ty), g, hd, msg, worst);
            configs++;
        }
    }
    CHECK(configs >= 4 * per_type && compared > 0, "%d configurations, %d runs", configs, compared);
}

/* Random rows of type ty quantised: packed [nk][row_bytes] and their
 * dequantised values (scalar reference) [nk][len]. */
static bool packed_rows(kvq_type ty, int nk, int64_t len, test_rng *r, uint8_t *packed, size_t row_bytes,
                        float *values) {
    const kvq_type_traits *ref = kvq_type_get_scalar(ty);
    float x[512];
    if (!ref || len > 512) return false;
    for (int t = 0; t < nk; t++) {
        for (int64_t d = 0; d < len; d++) x[d] = (float)test_rng_gauss(r) + (d % 7 == 0 ? 0.5f : 0.0f);
        ref->quantize(x, packed + (size_t)t * row_bytes, len);
        ref->dequantize(packed + (size_t)t * row_bytes, values + (size_t)t * len, len);
    }
    return true;
}

/* n random tokens (nh query heads over 2 KV heads of hd) and a cache of
 * K type tk and V type tv holding their rows up to position upto
 * (batches of 64).  False with err->msg set on failure. */
static bool filled_cache(attn_data *d, kvq_cache **c, int n, int nh, int hd, kvq_type tk, kvq_type tv, uint64_t seed,
                         int upto, kvq_error *err) {
    *c = NULL;
    if (!attn_data_make(d, n, nh, 2, hd, hd, seed)) {
        snprintf(err->msg, sizeof err->msg, "alloc");
        return false;
    }
    kvq_cache_params p;
    attn_params(&p, 2, hd, hd, n, tk, tv, KVQ_ROT_AUTO);
    return kvq_cache_create(&p, c, err) == KVQ_OK && attn_fill_upto(*c, d, 64, upto);
}

/* kvq_attend_opts.int8_query with a trellis K (attn_turbo.c: the query
 * rounded per TurboQuant block, exact dots): it changes the output of a
 * turbo3_tcq K, within the rounding's few 1e-3 of the default's (int16
 * levels in decode, float in a prefill group), and
 * not a scalar-codebook turbo3 K's; decode rows give the same bits for 1
 * and 2 threads; the levels' chunked passes agree (the scores are the same
 * bits, the V sums each level's); and a prefill of 40 rows (groups of many
 * query vectors, G > 4) takes the int8 query too: it matches those rows'
 * decode to the V sums' rounding, far inside the int8 query's effect. */
TEST(attn_turbo_int8_query_through_the_pass) {
    enum { N = 300, HD = 128, NH = 4, NQ = 40 };
    static float o16[NQ * NH * HD], o8[NQ * NH * HD], ob[NQ * NH * HD], od[NQ * NH * HD];
    CHECK(attn_block_int8_type(KVQ_TYPE_TURBO3_TCQ) && !attn_block_int8_type(KVQ_TYPE_TURBO3), "int8 types");
    static const kvq_type ks[] = { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO3 };
    kvq_pool *pool = kvq_pool_create(2);
    CHECK(pool, "pool");
    for (size_t ki = 0; ki < KVQ_ARRAY_LEN(ks); ki++) {
        attn_data d;
        kvq_cache *c = NULL;
        kvq_error err = { 0, "" };
        const int pos = N - NQ;
        CHECK(filled_cache(&d, &c, N, NH, HD, ks[ki], KVQ_TYPE_Q8_0, 53 + ki, pos, &err), "%s", err.msg);
        const kvq_attend_opts a16 = { NULL, 0, false }, a8 = { NULL, 0, true };
        const float *q = d.q + (size_t)pos * NH * HD;
        const size_t row = (size_t)NH * HD;
        /* decode rows (one query row each) and the 40-row prefill */
        for (int i = 0; i < NQ; i++) {
            CHECK(kvq_cache_attend_opts(c, 0, pos + i, 1, NH, q + i * row, 0.1f, o16 + i * row, NULL, &a16, &err) ==
                          KVQ_OK &&
                      kvq_cache_attend_opts(c, 0, pos + i, 1, NH, q + i * row, 0.1f, o8 + i * row, NULL, &a8, &err) ==
                          KVQ_OK &&
                      kvq_cache_attend_opts(c, 0, pos + i, 1, NH, q + i * row, 0.1f, ob + i * row, pool, &a8, &err) ==
                          KVQ_OK,
                  "%s", err.msg);
        }
        CHECK(kvq_cache_attend_opts(c, 0, pos, NQ, NH, q, 0.1f, od, NULL, &a8, &err) == KVQ_OK, "%s", err.msg);
        const bool trellis = ks[ki] == KVQ_TYPE_TURBO3_TCQ;
        const bool changed = memcmp(o16, o8, sizeof o16) != 0;
        CHECK(changed == trellis, "%s: int8_query %s the output", kvq_type_name(ks[ki]),
              changed ? "changed" : "did not change");
        const double e8 = attn_rel_err(o8, o16, NQ * row);
        CHECK(e8 < 2e-2, "%s: int8 vs float query rel err %.3g", kvq_type_name(ks[ki]), e8);
        CHECK(!memcmp(o8, ob, sizeof o8), "%s: 1 and 2 threads differ", kvq_type_name(ks[ki]));
        const double ep = attn_rel_err(od, o8, NQ * row);
        CHECK(!trellis || ep < e8 / 20, "%s: prefill vs decode with the int8 query rel err %.3g (int8 effect %.3g)",
              kvq_type_name(ks[ki]), ep, e8);
        for (size_t li = 0; trellis && li < KVQ_ARRAY_LEN(k_levels); li++) {
            const kvq_attend_loop chunked = { KVQ_PASS_CHUNKED, attn_block_level(k_levels[li]), false };
            if (!chunked.block) continue;
            CHECK(kvq_cache_attend_loop(c, 0, N - 1, 1, NH, q + (NQ - 1) * row, 0.1f, ob, NULL, &a8, &chunked, &err) ==
                      KVQ_OK,
                  "%s", err.msg);
            const double el = attn_rel_err(ob, o8 + (NQ - 1) * row, row);
            CHECK(el < e8 / 20, "%s level %s vs the default with the int8 query rel err %.3g", kvq_type_name(ks[ki]),
                  k_levels[li], el);
        }
        kvq_cache_free(c);
        attn_data_free(&d);
    }
    kvq_pool_free(pool);
}

/* A trellis K's default in decode: its query rounded to int16 levels of
 * KVQ_TURBO_QUERY16_TOP per block (attn_turbo.c).  With an f32 V (whose
 * sums every pass adds in floats) the default's output differs from the
 * per-key pass's float query by more than float rounding and within the
 * rounding's effect (attn_tolerance); every fused level gives the
 * default's scores (exact dots: the same bits), so their outputs agree to
 * float rounding, and the "-tile" levels keep the float query: they agree
 * with the per-key pass to float rounding; a turbo3 K (scalar codebook)
 * is not rounded. */
TEST(attn_turbo_int16_query_by_default) {
    enum { N = 200, HD = 128, NH = 4 };
    static float def[NH * HD], ref[NH * HD], lvl[NH * HD];
    static const kvq_type ks[] = { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO2_TCQ, KVQ_TYPE_TURBO3 };
    for (size_t ki = 0; ki < KVQ_ARRAY_LEN(ks); ki++) {
        attn_data d;
        kvq_cache *c = NULL;
        kvq_error err = { 0, "" };
        CHECK(filled_cache(&d, &c, N, NH, HD, ks[ki], KVQ_TYPE_F32, 71 + ki, N - 1, &err), "%s", err.msg);
        const float *q = d.q + (size_t)(N - 1) * NH * HD;
        const kvq_attend_loop per_key = { KVQ_PASS_PER_KEY, NULL, false };
        CHECK(kvq_cache_attend(c, 0, N - 1, 1, NH, q, 0.1f, def, NULL, &err) == KVQ_OK &&
                  kvq_cache_attend_loop(c, 0, N - 1, 1, NH, q, 0.1f, ref, NULL, NULL, &per_key, &err) == KVQ_OK,
              "%s", err.msg);
        const bool trellis = ks[ki] != KVQ_TYPE_TURBO3;
        const double e = attn_rel_err(def, ref, NH * HD);
        if (trellis)
            CHECK(e > 1e-5 && e < attn_tolerance(ks[ki], KVQ_TYPE_F32, HD), "%s: default vs float query rel err %.3g",
                  kvq_type_name(ks[ki]), e);
        else
            CHECK(e < 1e-5, "%s: default vs per-key rel err %.3g", kvq_type_name(ks[ki]), e);
        for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
            const kvq_attend_loop chunked = { KVQ_PASS_CHUNKED, attn_block_level(k_levels[li]), false };
            if (!chunked.block) continue;
            CHECK(kvq_cache_attend_loop(c, 0, N - 1, 1, NH, q, 0.1f, lvl, NULL, NULL, &chunked, &err) == KVQ_OK, "%s",
                  err.msg);
            const double el = attn_rel_err(lvl, chunked.block->fused ? def : ref, NH * HD);
            CHECK(el < 1e-5, "%s level %s: rel err %.3g against the %s", kvq_type_name(ks[ki]), k_levels[li], el,
                  chunked.block->fused ? "default" : "float query");
        }
        kvq_cache_free(c);
        attn_data_free(&d);
    }
}

/* The int8 query (attn_query.q8, kvq_attend_opts.int8_query): the
 * kernels that multiply it as bytes give the bits of the int16 kernels on
 * the same int8-rounded query (the sums are exact integers either way),
 * for every fused type at every level, head groups 1..9 (odd heads out),
 * 1..16 blocks, partial chunks (the pairs of keys past nk); and those
 * scores are within float rounding of double sums with the int8 query's
 * values, whose rounding is at most half a step of max|q_b| / 127. */
TEST(attn_block_int8_query_kernels_match_int16_ones) {
    enum { NK = ATTN_BLOCK_KEYS, MAXG = 9, MAXLEN = 512 };
    static uint8_t packed[NK * (MAXLEN / 32) * 40];
    static float vals[NK * MAXLEN], q[MAXG * MAXLEN], w8[MAXG * NK], w16[MAXG * NK];
    static float tile[NK * MAXLEN], zero[MAXLEN], qhat[MAXG * MAXLEN], qscale[MAXG * MAXLEN / 32];
    static int16_t qi[MAXG * MAXLEN];
    static int32_t qsum[MAXG * MAXLEN / 32];
    static const int lens[] = { 32, 96, 128, 512 };
    test_rng r = { 91, 0, 0 };
    int checked = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr || !kr->fused) continue;
        for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
            if (!kr->fused[ty].block_bytes) continue;
            const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
            for (int G = 1; G <= MAXG; G++) {
                const int len = lens[(G + ty) % 4], nk = 1 + (G * 13 + ty * 5) % NK;
                const size_t row_bytes = (size_t)len / 32 * (size_t)tr->block_bytes;
                CHECK(packed_rows((kvq_type)ty, nk, len, &r, packed, row_bytes, vals), "quantise");
                for (int i = 0; i < G * len; i++) q[i] = (float)test_rng_gauss(&r) * (i % 5 == 0 ? 4.0f : 1.0f);
                const uint8_t *rows[NK];
                for (int t = 0; t < nk; t++) rows[t] = packed + (size_t)t * row_bytes;
                const attn_block_rows src = { .tr = tr, .type = (kvq_type)ty, .len = len, .tile = tile, .zero = zero };
                for (int g = 0; g < G; g++) {
                    attn_block_round_query8(q + g * len, len, qi + g * len, qscale + g * len / 32, qsum + g * len / 32);
                    attn_block_rounded_values8(q + g * len, len, qhat + g * len);
                }
                for (int i = 0; i < G * len; i++) CHECK(qi[i] >= -127 && qi[i] <= 127, "int8 level %d", qi[i]);
                const attn_query q8 = { q, qi, qscale, qsum, len, true, NULL }, q16 = { q, qi, qscale, qsum, len, false, NULL };
                attn_block_scores(kr, &src, rows, nk, &q8, G, 0.25f, w8, NK);
                attn_block_scores(kr, &src, rows, nk, &q16, G, 0.25f, w16, NK);
                for (int g = 0; g < G; g++)
                    CHECK(!memcmp(w8 + g * NK, w16 + g * NK, sizeof(float) * (size_t)nk),
                          "%s %s G %d len %d nk %d: head %d's int8-query scores differ from the int16 kernels'",
                          kr->level, tr->name, G, len, nk, g);
                double worst = 0.0;
                for (int g = 0; g < G; g++)
                    for (int t = 0; t < nk; t++) {
                        double sum = 0.0, mag = 0.0;
                        for (int d = 0; d < len; d++) {
                            const double p = (double)qhat[g * len + d] * vals[t * len + d];
                            sum += p, mag += fabs(p);
                        }
                        worst = fmax(worst, fabs(w8[g * NK + t] - 0.25 * sum) / (0.25 * mag + 1e-30));
                    }
                CHECK(worst < 2e-6, "%s %s G %d: int8-query scores rel err %.3g", kr->level, tr->name, G, worst);
                checked++;
            }
        }
    }
    CHECK(checked > 0, "no fused level ran");
}

/* The fused kernels against double sums over the scalar dequantised rows,
 * through the chunk steps attn_block_scores / attn_block_values (with the
 * library's traits, so the fused path is taken): every fused type at
 * every level that has them, G 1..17 (every head group size, and the
 * codes decoded once for many groups), 1..16 blocks per row, partial
 * chunks, keys of weight 0 for every head. */
TEST(attn_block_fused_kernels_match_double) {
    enum { NK = ATTN_BLOCK_KEYS, MAXG = 17, MAXLEN = 512 };
    static uint8_t packed[NK * (MAXLEN / 32) * 40];
    static float one[MAXLEN];
    static float vals[NK * MAXLEN], q[MAXG * MAXLEN], w[MAXG * NK], acc[MAXG * MAXLEN], acc0[MAXG * MAXLEN];
    static float tile[NK * MAXLEN], zero[MAXLEN], qhat[MAXG * MAXLEN], qscale[MAXG * MAXLEN / 32];
    static int16_t qi[MAXG * MAXLEN];
    static int32_t qsum[MAXG * MAXLEN / 32];
    static const int lens[] = { 32, 96, 128, 512 };
    test_rng r = { 77, 0, 0 };
    int fused_levels = 0, checked = 0, bitwise = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr || !kr->fused) continue;
        fused_levels++;
        for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
            if (!kr->fused[ty].block_bytes) continue;
            const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
            for (int G = 1; G <= MAXG; G++) {
                const int len = lens[(G + ty) % 4], nk = 1 + (G * 11 + ty * 3) % NK;
                const size_t row_bytes = (size_t)len / 32 * (size_t)tr->block_bytes;
                CHECK(packed_rows((kvq_type)ty, nk, len, &r, packed, row_bytes, vals), "quantise");
                for (int i = 0; i < G * len; i++) q[i] = (float)test_rng_gauss(&r), acc0[i] = (float)test_rng_gauss(&r);
                const uint8_t *rows[NK];
                for (int t = 0; t < nk; t++) rows[t] = packed + (size_t)t * row_bytes;
                const attn_block_rows src = { .tr = tr, .type = (kvq_type)ty, .len = len, .tile = tile, .zero = zero };
                CHECK(attn_block_fused_for(kr, &src) == &kr->fused[ty], "%s %s: fused path not taken", kr->level,
                      tr->name);
                for (int g = 0; g < G; g++) {
                    attn_block_round_query(q + g * len, len, qi + g * len, qscale + g * len / 32, qsum + g * len / 32);
                    attn_block_rounded_values(q + g * len, len, qhat + g * len);
                }
                const attn_query aq = { q, qi, qscale, qsum, len, false, NULL };
                attn_block_scores(kr, &src, rows, nk, &aq, G, 0.25f, w, NK);
                double worst = 0.0;
                for (int g = 0; g < G; g++)
                    for (int t = 0; t < nk; t++) {
                        double s = 0.0, mag = 0.0;
                        for (int d = 0; d < len; d++) {
                            const double p = (double)qhat[g * len + d] * vals[t * len + d];
                            s += p, mag += fabs(p);
                        }
                        worst = fmax(worst, fabs(w[g * NK + t] - 0.25 * s) / (0.25 * mag + 1e-30));
                    }
                CHECK(worst < 2e-6, "%s %s G %d len %d nk %d: scores rel err %.3g", kr->level, tr->name, G, len, nk,
                      worst);
                /* the integer sums are exact and the float steps (vector
                 * FMAs) one order, so AVX-512's 16-key add trees score with
                 * the bits of AVX2's 8-key ones */
                const attn_block_kernels *avx2 = attn_block_level("avx2");
                if (!strcmp(kr->level, "avx512") && avx2) {
                    static float w_avx2[MAXG * NK];
                    attn_block_scores(avx2, &src, rows, nk, &aq, G, 0.25f, w_avx2, NK);
                    for (int g = 0; g < G; g++)
                        CHECK(!memcmp(w_avx2 + g * NK, w + g * NK, sizeof(float) * (size_t)nk),
                              "%s G %d len %d nk %d: head %d's avx512 scores differ from avx2's", tr->name, G, len,
                              nk, g);
                    bitwise++;
                }
                /* weights: key 1 weighted by no head (skipped), key 2 by head 0 only */
                for (int g = 0; g < G; g++)
                    for (int t = 0; t < nk; t++)
                        w[g * NK + t] = t == 1 || (t == 2 && g > 0) ? 0.0f : (float)test_rng_uniform(&r);
                memcpy(acc, acc0, sizeof(float) * (size_t)G * len);
                attn_block_values(kr, &src, rows, nk, w, NK, G, acc, len);
                worst = 0.0;
                for (int g = 0; g < G; g++)
                    for (int d = 0; d < len; d++) {
                        double s = acc0[g * len + d], mag = fabs(s);
                        for (int t = 0; t < nk; t++) {
                            const double p = (double)w[g * NK + t] * vals[t * len + d];
                            s += p, mag += fabs(p);
                        }
                        worst = fmax(worst, fabs(acc[g * len + d] - s) / (mag + 1e-30));
                    }
                /* 1e-5: the min's term is summed apart (w*d*c + w*m), so a value
                 * d*c + m near 0 may carry rounding of its larger parts */
                CHECK(worst < 1e-5, "%s %s G %d len %d nk %d: V sums rel err %.3g", kr->level, tr->name, G, len, nk,
                      worst);
                /* every head alone gives the same bits as in its group (the
                 * groups of heads, and the codes decoded once for all of
                 * them above two groups, change no sum's order) */
                for (int g = 0; g < G; g++) {
                    memcpy(one, acc0 + g * len, sizeof(float) * (size_t)len);
                    attn_block_values(kr, &src, rows, nk, w + g * NK, NK, 1, one, len);
                    CHECK(!memcmp(one, acc + g * len, sizeof(float) * (size_t)len),
                          "%s %s G %d: head %d alone differs from its group", kr->level, tr->name, G, g);
                }
                checked++;
            }
        }
    }
    if (!fused_levels) SKIP("no level with fused kernels on this CPU");
    CHECK(checked >= 4 * 8, "only %d cases", checked);
    CHECK(bitwise > 0 || !attn_block_level("avx512"), "avx512 level present but never compared with avx2");
}

/* A packed V row whose block scale is inf, weighted 0 by one head: that
 * head stays finite through the fused V step (as in the per-key pass),
 * the head that weights it is not. */
TEST(attn_block_fused_zero_weight_skips_nonfinite_row) {
    enum { LEN = 64, G = 2 };
    const kvq_type_traits *tr = kvq_type_get(KVQ_TYPE_Q8_0);
    uint8_t rows_q[3][2 * 34];
    float x[LEN], tile[ATTN_BLOCK_KEYS * LEN], zero[LEN] = { 0 }, acc[G][LEN] = { { 0 } };
    for (int t = 0; t < 3; t++) {
        for (int d = 0; d < LEN; d++) x[d] = (float)(t + 1);
        tr->quantize(x, rows_q[t], LEN);
    }
    kvq_wr16(rows_q[1] + 34, 0x7c00);                       /* block 1 of row 1: d = +inf */
    float w[G][ATTN_BLOCK_KEYS] = { { 0.5f, 0.0f, 0.5f }, { 0.25f, 0.5f, 0.25f } };
    const uint8_t *rows[3] = { rows_q[0], rows_q[1], rows_q[2] };
    const attn_block_rows src = { .tr = tr, .type = KVQ_TYPE_Q8_0, .len = LEN, .tile = tile, .zero = zero };
    int levels = 0;
    for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) {
        const attn_block_kernels *kr = attn_block_level(k_levels[li]);
        if (!kr || !attn_block_fused_for(kr, &src)) continue;
        levels++;
        memset(acc, 0, sizeof acc);
        attn_block_values(kr, &src, rows, 3, &w[0][0], ATTN_BLOCK_KEYS, G, &acc[0][0], LEN);
        CHECK(fabsf(acc[0][40] - 2.0f) < 1e-3f && fabsf(acc[0][0] - 2.0f) < 1e-3f, "%s head 0: %g %g", kr->level,
              acc[0][40], acc[0][0]);
        CHECK(!isfinite(acc[1][40]) && fabsf(acc[1][0] - 2.0f) < 1e-3f, "%s head 1: %g %g", kr->level, acc[1][40],
              acc[1][0]);
    }
    if (!levels) SKIP("no level with fused kernels on this CPU");
}

/* The loop switch is real: a trait table whose dequantize is broken
 * changes the chunked pass's output, not the per-key pass's. */
static void zero_dequantize(const void *src, float *y, int64_t n) { (void)src; memset(y, 0, (size_t)n * sizeof *y); }

TEST(attn_block_chunked_pass_uses_the_tables_dequantize) {
    static kvq_type_traits broken[KVQ_TYPE_COUNT];
    CHECK(kvq_simd_table("scalar", broken), "no scalar table");
    broken[KVQ_TYPE_Q8_0].dequantize = zero_dequantize;
    attn_data d;
    CHECK(attn_data_make(&d, 50, 4, 2, 64, 64, 12), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 64, 64, 50, KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_ROT_AUTO);
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK && attn_fill(c, &d, 50), "create");
    float good[4 * 64], per_key[4 * 64], chunked[4 * 64];
    const kvq_attend_opts o = { broken, 0, false };
    const kvq_attend_loop lp_key = { KVQ_PASS_PER_KEY, NULL, false }, lp_chunk = { KVQ_PASS_CHUNKED, NULL, false };
    const float *q = d.q + (size_t)49 * 4 * 64;
    bool ok = kvq_cache_attend_loop(c, 0, 49, 1, 4, q, 0.125f, good, NULL, NULL, &lp_key, NULL) == KVQ_OK &&
              kvq_cache_attend_loop(c, 0, 49, 1, 4, q, 0.125f, per_key, NULL, &o, &lp_key, NULL) == KVQ_OK &&
              kvq_cache_attend_loop(c, 0, 49, 1, 4, q, 0.125f, chunked, NULL, &o, &lp_chunk, NULL) == KVQ_OK;
    kvq_cache_free(c);
    attn_data_free(&d);
    CHECK(ok, "attend failed");
    const double e_key = attn_rel_err(per_key, good, 4 * 64), e_chunk = attn_rel_err(chunked, good, 4 * 64);
    CHECK(e_key < 1e-5 && e_chunk > 0.5, "per-key %.3g (want ~0), chunked %.3g (want large)", e_key, e_chunk);
}

/* The query's rounding (attn_block_round_half_away) against roundf, as
 * integers: every half-integer up to 32768 and its two neighbouring
 * floats (the ties roundf sends away from zero, where rounding to
 * nearest even would not), small values either side of 0.5, and random
 * values up to 2^22; and rounded queries with ties in them equal to
 * roundf's. */
TEST(attn_block_round_half_away_is_roundf) {
    long bad = 0;
    float first_bad = 0.0f;
    for (int h = 0; h <= 65536; h++)
        for (int sign = -1; sign <= 1; sign += 2) {
            const float half = (float)sign * ((float)h * 0.5f);
            const float xs[3] = { nextafterf(half, -INFINITY), half, nextafterf(half, INFINITY) };
            for (int i = 0; i < 3; i++)
                if (attn_block_round_half_away(xs[i]) != roundf(xs[i]) && !bad++) first_bad = xs[i];
        }
    test_rng r = { 77, 0, 0 };
    for (int i = 0; i < 200000; i++) {
        const float x = (float)((test_rng_uniform(&r) * 2.0 - 1.0) * ldexp(1.0, (int)(test_rng_uniform(&r) * 23.0)));
        if (attn_block_round_half_away(x) != roundf(x) && !bad++) first_bad = x;
    }
    const float small[] = { 0.0f, -0.0f, 0.49999997f, -0.49999997f, 0.5f, -0.5f, 1.4999999f, 2.5f, -2.5f, 1e-30f };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(small); i++)
        if (attn_block_round_half_away(small[i]) != roundf(small[i]) && !bad++) first_bad = small[i];
    CHECK(bad == 0, "%ld values differ from roundf, the first %.9g", bad, first_bad);
    /* a block whose scaled values are exact ties: q = k + 0.5 with max 32767
     * makes q * (32767 / 32767) = q itself */
    float q[32];
    int16_t qi[32];
    float scale;
    int32_t sum;
    for (int i = 0; i < 32; i++) q[i] = (float)(i - 16) * 3.0f + 0.5f;
    q[31] = 32767.0f;
    attn_block_round_query(q, 32, qi, &scale, &sum);
    int32_t want = 0;
    for (int i = 0; i < 32; i++) {
        CHECK(qi[i] == (int16_t)roundf(q[i]), "value %d: %g rounded to %d", i, q[i], qi[i]);
        want += (int32_t)roundf(q[i]);
    }
    CHECK(sum == want && scale == 1.0f, "sum %d (want %d), scale %g", sum, want, scale);
}

/* The query's rounding to int16 (attn_block_round_query): every value
 * within half a step of the block's scale max|q_b| / 32767, the code sums,
 * a zero block, a block holding NaN; and the scores of every fused type
 * with the rounded query within the bound attn_block.h states of the
 * scores with the float query: sum_b (s_b / 2) sum_{i in b} |k_i|. */
TEST(attn_block_rounded_query_error_within_bound) {
    enum { LEN = 128, NB = LEN / 32, NK = 20 };
    float q[LEN], qhat[LEN], scale[NB];
    int16_t qi[LEN];
    int32_t sum[NB];
    test_rng r = { 31, 0, 0 };
    for (int i = 0; i < LEN; i++) q[i] = (float)test_rng_gauss(&r) * (i % 32 == 5 ? 20.0f : 1.0f);
    for (int i = 64; i < 96; i++) q[i] = 0.0f;                 /* block 2: zeros */
    attn_block_round_query(q, LEN, qi, scale, sum);
    attn_block_rounded_values(q, LEN, qhat);
    for (int b = 0; b < NB; b++) {
        float amax = 0.0f;
        int32_t s = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(q[b * 32 + i])), s += qi[b * 32 + i];
        CHECK(scale[b] == amax / 32767.0f && s == sum[b], "block %d: scale %g (max %g), sum %d vs %d", b,
              scale[b], amax, sum[b], s);
        for (int i = 0; i < 32; i++) {
            const int j = b * 32 + i;
            CHECK(fabsf(q[j] - qhat[j]) <= 0.5001f * scale[b] && qhat[j] == scale[b] * (float)qi[j],
                  "value %d: %g rounded to %g (scale %g)", j, q[j], qhat[j], scale[b]);
        }
    }
    CHECK(scale[2] == 0.0f && sum[2] == 0, "zero block: scale %g sum %d", scale[2], sum[2]);
    q[3] = NAN;
    attn_block_round_query(q, LEN, qi, scale, sum);
    CHECK(isnan(scale[0]) && !isnan(scale[1]), "NaN block: scales %g %g", scale[0], scale[1]);
    /* a block of tiny values (its 32767 / max overflows a float; found by
     * fuzz_model): still rounded to within half a step, zeros to zero */
    float tiny[32];
    for (int i = 0; i < 32; i++) tiny[i] = i % 4 == 0 ? 0.0f : 1e-36f * (float)(i - 16);
    attn_block_round_query(tiny, 32, qi, scale, sum);
    for (int i = 0; i < 32; i++)
        CHECK(fabs((double)tiny[i] - (double)scale[0] * qi[i]) <= 0.5001 * scale[0] && (tiny[i] != 0.0f || qi[i] == 0),
              "tiny value %d: %g rounded to %d x %g", i, tiny[i], qi[i], scale[0]);
    CHECK(qi[31] == 32767 && scale[0] > 0.0f, "tiny block: max to %d, scale %g", qi[31], scale[0]);
    q[3] = 1.0f;
    attn_block_round_query(q, LEN, qi, scale, sum);

    static uint8_t packed[NK * NB * 40];
    static float vals[NK * LEN], tile[NK * LEN], zero[LEN], w[NK], w_exact[NK];
    const attn_block_kernels *kr = attn_block_best();
    int types = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        if (!attn_block_int_type((kvq_type)ty)) continue;
        const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
        const size_t row_bytes = (size_t)NB * tr->block_bytes;
        CHECK(packed_rows((kvq_type)ty, NK, LEN, &r, packed, row_bytes, vals), "quantise");
        const uint8_t *rows[NK];
        for (int k = 0; k < NK; k++) rows[k] = packed + (size_t)k * row_bytes;
        const attn_block_rows src = { .tr = tr, .type = (kvq_type)ty, .len = LEN, .tile = tile, .zero = zero };
        const attn_query aq = { q, qi, scale, sum, LEN, false, NULL }, fq = { q, NULL, NULL, NULL, LEN, false, NULL };
        attn_block_scores(kr, &src, rows, NK, &aq, 1, 1.0f, w, NK);
        attn_block_scores(kr, &src, rows, NK, &fq, 1, 1.0f, w_exact, NK);   /* float query: unpacked */
        for (int k = 0; k < NK; k++) {
            double exact = 0.0, bound = 0.0, mag = 0.0;
            for (int i = 0; i < LEN; i++) {
                exact += (double)q[i] * vals[k * LEN + i];
                bound += 0.5 * scale[i / 32] * fabs((double)vals[k * LEN + i]);
                mag += fabs((double)q[i] * vals[k * LEN + i]);
            }
            CHECK(fabs(w[k] - exact) <= bound + 2e-6 * mag, "%s key %d: score %.9g, exact %.9g, bound %.3g",
                  tr->name, k, w[k], exact, bound);
            CHECK(fabs(w_exact[k] - exact) <= 2e-6 * mag, "%s key %d: float-query score %.9g vs %.9g", tr->name, k,
                  w_exact[k], exact);
        }
        types++;
    }
    CHECK(types == 12, "%d integer-scored types, want q8_0 ... q2_1 and iq4_nl", types);
}

/* f16 and bf16 rows read in place (converted in registers) by every level
 * that has the kernels: scores and V sums against double sums over the
 * rows' values. */
TEST(attn_block_half_rows_in_place_match_double) {
    enum { NK = ATTN_BLOCK_KEYS, G = 3, LEN = 136 };
    static uint16_t rows16[NK][LEN];
    static float vals[NK][LEN], q[G][LEN], w[G][NK], acc[G][LEN];
    test_rng r = { 8, 0, 0 };
    for (int g = 0; g < G; g++)
        for (int d = 0; d < LEN; d++) q[g][d] = (float)test_rng_gauss(&r);
    int checked = 0;
    for (int kind = ATTN_ROW_F16; kind <= ATTN_ROW_BF16; kind++) {
        for (int t = 0; t < NK; t++)
            for (int d = 0; d < LEN; d++) {
                const float x = (float)test_rng_gauss(&r);
                rows16[t][d] = kind == ATTN_ROW_F16 ? kvq_fp32_to_fp16(x) : kvq_fp32_to_bf16(x);
                vals[t][d] = kind == ATTN_ROW_F16 ? kvq_fp16_to_fp32(rows16[t][d]) : kvq_bf16_to_fp32(rows16[t][d]);
            }
        const float *rows[NK];
        for (int t = 0; t < NK; t++) rows[t] = (const float *)(const void *)rows16[t];
        /* every level, and the AVX-512 instance's own 16-lane kernels,
         * which a CPU that runs 512-bit operations as halves (Zen 4)
         * replaces in its levels by AVX2's (attn_block.c) */
        const attn_block_kernels *levels[KVQ_ARRAY_LEN(k_levels) + 1];
        size_t n_levels = 0;
        for (size_t li = 0; li < KVQ_ARRAY_LEN(k_levels); li++) levels[n_levels++] = attn_block_level(k_levels[li]);
#if defined(__x86_64__)
        if (attn_block_level("avx512")) levels[n_levels++] = attn_block_avx512();
#endif
        for (size_t li = 0; li < n_levels; li++) {
            const attn_block_kernels *kr = levels[li];
            if (!kr || !kr->scores_as[kind]) continue;
            const int nk = 29;
            kr->scores_as[kind](rows, nk, &q[0][0], G, LEN, LEN, 0.5f, &w[0][0], NK);
            memset(acc, 0, sizeof acc);
            kr->accumulate_as[kind](rows, nk, &w[0][0], NK, G, &acc[0][0], LEN, LEN);
            double worst = 0.0;
            for (int g = 0; g < G; g++) {
                for (int t = 0; t < nk; t++) {
                    double s = 0.0, mag = 0.0;
                    for (int d = 0; d < LEN; d++) s += (double)q[g][d] * vals[t][d], mag += fabs((double)q[g][d] * vals[t][d]);
                    worst = fmax(worst, fabs(w[g][t] - 0.5 * s) / (0.5 * mag));
                }
                for (int d = 0; d < LEN; d++) {
                    double s = 0.0, mag = 0.0;
                    for (int t = 0; t < nk; t++) s += (double)w[g][t] * vals[t][d], mag += fabs((double)w[g][t] * vals[t][d]);
                    worst = fmax(worst, fabs(acc[g][d] - s) / mag);
                }
            }
            CHECK(worst < 1e-6, "%s %s rows: rel err %.3g", kr->level, kind == ATTN_ROW_F16 ? "f16" : "bf16", worst);
            checked++;
        }
    }
    CHECK(checked >= 2, "only %d levels checked", checked);
}
