/* test_attention.c - attention over the quantised cache (docs/spec/attention.md §3-5)
 * against the plain formula and against the formula over the values the
 * cache holds. */
#include "attn_ref.h"
#include "simd.h"

#include <string.h>

/* One cache, filled with d, attended with queries pos..n_tok-1. */
typedef struct attn_case {
    kvq_cache_params p;
    int pos;               /* first query row        */
    int batch;             /* write batch size       */
    kvq_pool *pool;
    kvq_attend_opts opts;
} attn_case;

static void case_init(attn_case *ac, const attn_data *d, kvq_type tk, kvq_type tv, kvq_rot_mode rot) {
    memset(ac, 0, sizeof *ac);
    attn_params(&ac->p, d->n_head_kv, d->hd_k, d->hd_v, d->n_tok, tk, tv, rot);
    ac->batch = d->n_tok;
    ac->opts.table = NULL;   /* active kernels */
}

/* Build the cache, attend, and return it (NULL on failure, message in msg). */
static kvq_cache *case_run(const attn_case *ac, const attn_data *d, float *out, char *msg, size_t cap) {
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    if (kvq_cache_create(&ac->p, &c, &err) != KVQ_OK) { snprintf(msg, cap, "create: %s", err.msg); return NULL; }
    if (!attn_fill_upto(c, d, ac->batch, ac->pos)) { snprintf(msg, cap, "fill failed"); kvq_cache_free(c); return NULL; }
    const float scale = 1.0f / sqrtf((float)d->hd_k);
    const float *q = d->q + (size_t)ac->pos * d->n_head * d->hd_k;
    if (kvq_cache_attend_opts(c, 0, ac->pos, d->n_tok - ac->pos, d->n_head, q, scale, out, ac->pool,
                              &ac->opts, &err) != KVQ_OK) {
        snprintf(msg, cap, "attend: %s", err.msg);
        kvq_cache_free(c);
        return NULL;
    }
    return c;
}

static size_t out_len(const attn_data *d, int pos) { return (size_t)(d->n_tok - pos) * d->n_head * d->hd_v; }

/* Kernel vs the reference over the cache's own values; returns rel error
 * (or +inf on failure). */
static double kernel_vs_cache_ref(const attn_case *ac, const attn_data *d, char *msg, size_t cap) {
    const size_t len = out_len(d, ac->pos);
    float *out = malloc(len * sizeof(float)), *ref = malloc(len * sizeof(float));
    double e = INFINITY;
    kvq_cache *c = out && ref ? case_run(ac, d, out, msg, cap) : NULL;
    if (c && attn_ref_cache(c, d, ac->pos, d->n_tok - ac->pos, 1.0f / sqrtf((float)d->hd_k), ref))
        e = attn_rel_err(out, ref, len);
    kvq_cache_free(c);
    free(out);
    free(ref);
    return e;
}

/* Kernel vs the plain formula over the raw inputs. */
static double kernel_vs_plain(const attn_case *ac, const attn_data *d, char *msg, size_t cap) {
    const size_t len = out_len(d, ac->pos);
    float *out = malloc(len * sizeof(float)), *ref = malloc(len * sizeof(float));
    double e = INFINITY;
    kvq_cache *c = out && ref ? case_run(ac, d, out, msg, cap) : NULL;
    if (c) {
        attn_ref_plain(d, ac->pos, d->n_tok - ac->pos, 1.0f / sqrtf((float)d->hd_k), ref);
        e = attn_rel_err(out, ref, len);
    }
    kvq_cache_free(c);
    free(out);
    free(ref);
    return e;
}

static bool is_cache_type(kvq_type t) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    return tr && tr->is_cache_type;
}

static const int k_head_dims[] = { 1, 5, 8, 24, 64, 80, 128, 256, 512 };
static const int k_gqa[] = { 1, 2, 4, 8 };

TEST(attention_f32_equals_plain_formula) {
    char msg[300] = "";
    for (size_t a = 0; a < KVQ_ARRAY_LEN(k_head_dims); a++)
        for (size_t b = 0; b < KVQ_ARRAY_LEN(k_gqa); b++) {
            const int hd = k_head_dims[a], g = k_gqa[b], n_tok = hd >= 256 ? 37 : 77;
            attn_data d;
            CHECK(attn_data_make(&d, n_tok, 2 * g, 2, hd, hd, 100 + a * 10 + b), "alloc");
            attn_case ac;
            case_init(&ac, &d, KVQ_TYPE_F32, KVQ_TYPE_F32, KVQ_ROT_OFF);
            ac.pos = n_tok / 3;
            ac.batch = 13;
            const double e = kernel_vs_plain(&ac, &d, msg, sizeof msg);
            attn_data_free(&d);
            CHECK(e < 1e-5, "head_dim %d gqa %d: rel err %.3g vs plain formula %s", hd, g, e, msg);
        }
}

TEST(attention_every_type_equals_reference_on_cached_values) {
    char msg[300] = "";
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        if (!is_cache_type((kvq_type)ty)) continue;
        for (int hd = 64; hd <= 80; hd += 16) {        /* 64: AUTO rotation; 80: padded last block */
            attn_data d;
            CHECK(attn_data_make(&d, 70, 4, 2, hd, hd, 7 + (uint64_t)ty), "alloc");
            attn_case ac;
            case_init(&ac, &d, (kvq_type)ty, (kvq_type)ty, hd == 80 ? KVQ_ROT_ON : KVQ_ROT_AUTO);
            ac.p.tail_tokens = 11;
            ac.p.sink_tokens = 3;
            ac.p.tail_type = ty % 2 ? KVQ_TYPE_F16 : KVQ_TYPE_BF16;
            ac.batch = 9;
            ac.pos = 41;
            const double e = kernel_vs_cache_ref(&ac, &d, msg, sizeof msg);
            attn_data_free(&d);
            CHECK(e < attn_tolerance((kvq_type)ty, (kvq_type)ty, hd), "type %s head_dim %d: rel err %.3g %s",
                  kvq_type_name((kvq_type)ty), hd, e, msg);
        }
    }
}

TEST(attention_head_dims_and_gqa_on_quantised_cache) {
    char msg[300] = "";
    for (size_t a = 0; a < KVQ_ARRAY_LEN(k_head_dims); a++)
        for (size_t b = 0; b < KVQ_ARRAY_LEN(k_gqa); b++) {
            const int hd = k_head_dims[a], g = k_gqa[b];
            attn_data d;
            CHECK(attn_data_make(&d, 45, 2 * g, 2, hd, hd, 300 + a * 10 + b), "alloc");
            attn_case ac;
            case_init(&ac, &d, KVQ_TYPE_Q4_0, KVQ_TYPE_Q5_1, KVQ_ROT_AUTO);
            ac.p.tail_tokens = 5;
            ac.pos = 30;
            ac.batch = 7;
            const double e = kernel_vs_cache_ref(&ac, &d, msg, sizeof msg);
            attn_data_free(&d);
            CHECK(e < attn_tolerance(KVQ_TYPE_Q4_0, KVQ_TYPE_Q5_1, hd), "head_dim %d gqa %d: rel err %.3g %s", hd, g, e, msg);
        }
}

/* K and V of different types, block bytes and head dims: a kernel that
 * read V with K's type (or K's row size) would produce garbage. */
TEST(attention_swapped_kv_types_read_their_own_side) {
    static const kvq_type pairs[][2] = {
        { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0 }, { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0 },
        { KVQ_TYPE_F16, KVQ_TYPE_Q2_1 },  { KVQ_TYPE_Q3_0, KVQ_TYPE_F32 },
    };
    char msg[300] = "";
    float *outs[2] = { NULL, NULL };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(pairs); i++) {
        attn_data d;
        CHECK(attn_data_make(&d, 53, 4, 2, 64, 96, 77), "alloc");
        attn_case ac;
        case_init(&ac, &d, pairs[i][0], pairs[i][1], KVQ_ROT_AUTO);
        ac.pos = 20;
        const double e = kernel_vs_cache_ref(&ac, &d, msg, sizeof msg);
        if (i < 2) {                 /* keep the q8_0/q4_0 pair's outputs */
            outs[i] = malloc(out_len(&d, ac.pos) * sizeof(float));
            kvq_cache *c = outs[i] ? case_run(&ac, &d, outs[i], msg, sizeof msg) : NULL;
            kvq_cache_free(c);
        }
        const size_t len = out_len(&d, ac.pos);
        attn_data_free(&d);
        CHECK(e < attn_tolerance(pairs[i][0], pairs[i][1], 96), "K %s / V %s: rel err %.3g %s", kvq_type_name(pairs[i][0]),
              kvq_type_name(pairs[i][1]), e, msg);
        if (i == 1) {
            const double diff = attn_rel_err(outs[0], outs[1], len);
            free(outs[0]);
            free(outs[1]);
            CHECK(diff > 1e-4, "q8_0/q4_0 and q4_0/q8_0 give the same output (diff %.3g)", diff);
        }
    }
}

TEST(attention_tail_covering_context_is_exact) {
    char msg[300] = "";
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q2_0, KVQ_TYPE_IQ4_NL, KVQ_TYPE_Q8_0 };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        attn_data d;
        CHECK(attn_data_make(&d, 61, 4, 1, 128, 128, 5 + i), "alloc");
        attn_case ac;
        case_init(&ac, &d, types[i], types[i], KVQ_ROT_AUTO);
        ac.p.tail_tokens = 61;                 /* the whole context */
        ac.p.tail_type = KVQ_TYPE_F32;
        ac.batch = 16;
        ac.pos = 17;
        const double e = kernel_vs_plain(&ac, &d, msg, sizeof msg);
        /* a tail longer than the context is an error, not a silent clamp */
        kvq_cache *c = NULL;
        kvq_error err = { 0, "" };
        ac.p.tail_tokens = 62;
        const kvq_status st = kvq_cache_create(&ac.p, &c, &err);
        kvq_cache_free(c);
        attn_data_free(&d);
        CHECK(e < 1e-5, "%s with tail == context: rel err %.3g vs exact %s", kvq_type_name(types[i]), e, msg);
        CHECK(st == KVQ_ERR_ARG && strstr(err.msg, "tail"), "tail 62 > n_ctx 61: status %d '%s'", st, err.msg);
    }
}

TEST(attention_tail_lowers_q4_0_error) {
    char msg[300] = "";
    attn_data d;
    CHECK(attn_data_make(&d, 200, 4, 2, 64, 64, 11), "alloc");
    double err[2];
    for (int i = 0; i < 2; i++) {
        attn_case ac;
        case_init(&ac, &d, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_OFF);
        ac.p.tail_tokens = i ? 64 : 0;
        ac.pos = 100;
        ac.batch = 50;
        const size_t len = out_len(&d, ac.pos);
        float *out = malloc(len * sizeof(float)), *ref = malloc(len * sizeof(float));
        kvq_cache *c = out && ref ? case_run(&ac, &d, out, msg, sizeof msg) : NULL;
        if (c) attn_ref_plain(&d, ac.pos, d.n_tok - ac.pos, 1.0f / 8.0f, ref);
        err[i] = c ? attn_sq_err(out, ref, len) : INFINITY;
        kvq_cache_free(c);
        free(out);
        free(ref);
    }
    attn_data_free(&d);
    CHECK(isfinite(err[0]) && err[1] < 0.8 * err[0], "tail 64 error %.4g not below tail 0 error %.4g %s",
          err[1], err[0], msg);
}

/* Sink positions get a large score and a distinctive V; reading them from
 * the q2_0 body instead of the exact copy would move the output. */
TEST(attention_sink_rows_are_read_exactly) {
    char msg[300] = "";
    attn_data d;
    CHECK(attn_data_make(&d, 40, 2, 1, 32, 32, 21), "alloc");
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 32; i++) {
            d.k[p * 32 + i] = 0.37f * (float)(i % 5) + 0.11f;       /* attracts every query */
            d.v[p * 32 + i] = (float)(i % 7) * 0.71f - 1.3f;
        }
    for (size_t i = 0; i < (size_t)40 * 2 * 32; i++) d.q[i] = 0.5f * d.q[i] + 2.0f;
    attn_case ac;
    case_init(&ac, &d, KVQ_TYPE_Q2_0, KVQ_TYPE_Q2_0, KVQ_ROT_OFF);
    ac.p.sink_tokens = 2;
    ac.p.tail_type = KVQ_TYPE_F32;
    ac.pos = 10;
    const double e = kernel_vs_cache_ref(&ac, &d, msg, sizeof msg);
    CHECK(e < 1e-5, "sink: rel err %.3g vs reference %s", e, msg);
    /* the sink copy holds the input exactly (f32, no rotation) */
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&ac.p, &c, NULL) == KVQ_OK && attn_fill(c, &d, 40), "create");
    float row[32];
    kvq_cache_read_row(c, 0, true, KVQ_PART_SINK, 0, 1, row, NULL);
    kvq_cache_free(c);
    const double se = attn_rel_err(row, d.v + 32, 32);
    /* the same cache without sink is further from the exact formula */
    size_t len = out_len(&d, ac.pos);
    float *with = malloc(len * sizeof(float)), *without = malloc(len * sizeof(float)),
          *ref = malloc(len * sizeof(float));
    CHECK(with && without && ref, "alloc");
    kvq_cache_free(case_run(&ac, &d, with, msg, sizeof msg));
    ac.p.sink_tokens = 0;
    kvq_cache_free(case_run(&ac, &d, without, msg, sizeof msg));
    attn_ref_plain(&d, ac.pos, d.n_tok - ac.pos, 1.0f / sqrtf(32.0f), ref);
    const double e_with = attn_sq_err(with, ref, len), e_without = attn_sq_err(without, ref, len);
    free(with); free(without); free(ref);
    attn_data_free(&d);
    CHECK(se == 0.0, "sink copy differs from the input (rel %.3g)", se);
    CHECK(e_with < 0.5 * e_without, "sink did not help: %.4g vs %.4g", e_with, e_without);
}

/* Prefill in batches == one decode step at a time (write, then attend):
 * the same bits' worth (1e-6) where V is read as rows (q3_0 at head_dim
 * 64: no pairs layout), within the pairs tolerance where it is in pairs
 * (q6_0: a chunk's weight scale covers the keys a prefill row masks). */
static void prefill_vs_decode(test_ctx *t, kvq_type tv, double tol) {
    char msg[300] = "";
    attn_data d;
    const int n_tok = 75;
    CHECK(attn_data_make(&d, n_tok, 8, 2, 80, 64, 31), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 80, 64, 100, KVQ_TYPE_Q4_1, tv, KVQ_ROT_ON);
    p.tail_tokens = 9;
    p.sink_tokens = 2;
    p.max_batch = 16;
    kvq_cache *a = NULL, *b = NULL;
    kvq_error err;
    CHECK(kvq_cache_create(&p, &a, &err) == KVQ_OK && kvq_cache_create(&p, &b, &err) == KVQ_OK, "%s", err.msg);
    const size_t row = (size_t)8 * 64;
    float *pre = malloc((size_t)n_tok * row * sizeof(float)), *dec = malloc((size_t)n_tok * row * sizeof(float));
    CHECK(pre && dec, "alloc");
    const float scale = 1.0f / sqrtf(80.0f);
    bool ok = true;
    for (int p0 = 0; p0 < n_tok && ok; p0 += 16) {        /* prefill: batches of 16 */
        const int n = KVQ_MIN(16, n_tok - p0);
        ok = kvq_cache_write(a, 0, p0, n, d.k + (size_t)p0 * 2 * 80, d.v + (size_t)p0 * 2 * 64, &err) == KVQ_OK &&
             kvq_cache_attend(a, 0, p0, n, 8, d.q + (size_t)p0 * 8 * 80, scale, pre + p0 * row, NULL, &err) == KVQ_OK;
    }
    for (int p0 = 0; p0 < n_tok && ok; p0++)              /* decode: one at a time */
        ok = kvq_cache_write(b, 0, p0, 1, d.k + (size_t)p0 * 2 * 80, d.v + (size_t)p0 * 2 * 64, &err) == KVQ_OK &&
             kvq_cache_attend(b, 0, p0, 1, 8, d.q + (size_t)p0 * 8 * 80, scale, dec + p0 * row, NULL, &err) == KVQ_OK;
    const double e = ok ? attn_rel_err(pre, dec, (size_t)n_tok * row) : INFINITY;
    snprintf(msg, sizeof msg, "%s", ok ? "" : err.msg);
    kvq_cache_free(a);
    kvq_cache_free(b);
    free(pre);
    free(dec);
    attn_data_free(&d);
    CHECK(e < tol, "V %s: prefill vs decode: rel err %.3g %s", kvq_type_name(tv), e, msg);
}

TEST(attention_prefill_equals_decode_steps) {
    prefill_vs_decode(t, KVQ_TYPE_Q3_0, 1e-6);
    prefill_vs_decode(t, KVQ_TYPE_Q6_0, attn_tolerance(KVQ_TYPE_Q4_1, KVQ_TYPE_Q6_0, 64));
}

/* 1, 2, 3 threads give the same bits (key ranges depend on shapes only);
 * forced key ranges (log-sum-exp merge) agree to float rounding; block
 * types and TurboQuant codes (fused row hooks) alike. */
static void threads_and_splits(test_ctx *t, kvq_type tk, kvq_type tv, int rows) {
    char msg[300] = "";
    const int n_tok = test_sanitized() ? 700 : 1500;
    attn_data d;
    CHECK(attn_data_make(&d, n_tok, 4, 1, 64, 64, 41), "alloc");
    attn_case ac;
    case_init(&ac, &d, tk, tv, KVQ_ROT_AUTO);
    ac.p.tail_tokens = 33;
    ac.p.sink_tokens = 4;
    ac.pos = n_tok - rows;                                 /* few rows, long context: split */
    const size_t len = out_len(&d, ac.pos);
    float *base = malloc(len * sizeof(float)), *out = malloc(len * sizeof(float));
    CHECK(base && out, "alloc");
    kvq_cache_free(case_run(&ac, &d, base, msg, sizeof msg));
    double worst_threads = 0.0, worst_split = 0.0;
    for (int i = 0; i < 6; i++) {
        const bool threads = i < 2;
        ac.pool = threads ? kvq_pool_create(i + 2) : NULL;
        static const int forced[6] = { 0, 0, 1, 3, 7, 1000 };
        ac.opts.key_splits = forced[i];
        kvq_cache *c = (!threads || ac.pool) ? case_run(&ac, &d, out, msg, sizeof msg) : NULL;
        const double e = c ? attn_rel_err(out, base, len) : INFINITY;
        kvq_cache_free(c);
        kvq_pool_free(ac.pool);
        double *w = threads ? &worst_threads : &worst_split;
        if (!(e <= *w)) *w = e;
    }
    free(base);
    free(out);
    attn_data_free(&d);
    CHECK(worst_threads == 0.0, "%s/%s: 2/3 threads differ from 1 thread: rel err %.3g %s", kvq_type_name(tk),
          kvq_type_name(tv), worst_threads, msg);
    CHECK(worst_split < attn_tolerance(tk, tv, d.hd_v), "%s/%s: forced key ranges differ: rel err %.3g %s", kvq_type_name(tk),
          kvq_type_name(tv), worst_split, msg);
}

/* One query row (a decode step) over rows read in place: f16 and bf16
 * bodies run in chunks of 16 keys, f32 in chunks of 8 (4 KiB of a head's
 * rows: their hooks' chunk_bytes); pairs with a packed side run in chunks
 * of 32.  101 keys: whole chunks and a remainder, against the formula
 * over the cached values, GQA 2 at head_dim 128 as in the models. */
TEST(attention_decode_step_over_rows_in_place) {
    static const kvq_type pairs[][2] = {
        { KVQ_TYPE_F16, KVQ_TYPE_F16 }, { KVQ_TYPE_BF16, KVQ_TYPE_BF16 }, { KVQ_TYPE_F32, KVQ_TYPE_F32 },
        { KVQ_TYPE_F16, KVQ_TYPE_Q8_0 }, { KVQ_TYPE_Q4_0, KVQ_TYPE_F16 },
    };
    char msg[300] = "";
    for (size_t i = 0; i < KVQ_ARRAY_LEN(pairs); i++) {
        attn_data d;
        CHECK(attn_data_make(&d, 101, 4, 2, 128, 128, 61 + i), "alloc");
        attn_case ac;
        case_init(&ac, &d, pairs[i][0], pairs[i][1], KVQ_ROT_AUTO);
        ac.pos = d.n_tok - 1;
        ac.batch = 16;
        const double e = kernel_vs_cache_ref(&ac, &d, msg, sizeof msg);
        attn_data_free(&d);
        CHECK(e < attn_tolerance(pairs[i][0], pairs[i][1], 128), "%s/%s: rel err %.3g %s", kvq_type_name(pairs[i][0]),
              kvq_type_name(pairs[i][1]), e, msg);
    }
}

TEST(attention_threads_and_key_splits_agree) {
    threads_and_splits(t, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, 3);
    threads_and_splits(t, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4, 1);   /* one row: the fused codes */
    threads_and_splits(t, KVQ_TYPE_F16, KVQ_TYPE_F16, 1);             /* one row: chunks of 16 keys */
}

TEST(attention_rotation_of_f32_cache_is_rounding_only) {
    char msg[300] = "";
    attn_data d;
    CHECK(attn_data_make(&d, 50, 4, 2, 96, 128, 51), "alloc");
    const size_t len = out_len(&d, 10);
    float *off = malloc(len * sizeof(float)), *on = malloc(len * sizeof(float));
    CHECK(off && on, "alloc");
    attn_case ac;
    case_init(&ac, &d, KVQ_TYPE_F32, KVQ_TYPE_F32, KVQ_ROT_OFF);
    ac.pos = 10;
    kvq_cache_free(case_run(&ac, &d, off, msg, sizeof msg));
    double worst = 0.0;
    int rotated = 0;
    for (int signs = 0; signs < 2; signs++) {
        ac.p.rot.mode = KVQ_ROT_ON;
        ac.p.rot_random_signs = signs;
        kvq_cache *c = case_run(&ac, &d, on, msg, sizeof msg);
        if (c && kvq_cache_rotation(c)->block_k && kvq_cache_rotation(c)->block_v) rotated++;
        kvq_cache_free(c);
        const double e = c ? attn_rel_err(on, off, len) : INFINITY;
        if (!(e <= worst)) worst = e;
    }
    free(off);
    free(on);
    attn_data_free(&d);
    CHECK(rotated == 2, "rotation was not applied (%d) %s", rotated, msg);
    CHECK(worst < 1e-5, "rotation changed an f32 cache's output by %.3g", worst);
}

static float zero_dot(const void *row, const float *x, int64_t n) { (void)row; (void)x; (void)n; return 0.0f; }

/* The kernels of the table passed in are the ones used: a table whose
 * dot is broken (every score 0: uniform weights) changes the output. */
TEST(attention_uses_the_given_trait_table) {
    static kvq_type_traits broken[KVQ_TYPE_COUNT];
    CHECK(kvq_simd_table("scalar", broken), "no scalar table");
    broken[KVQ_TYPE_Q4_0].dot = zero_dot;
    char msg[300] = "";
    attn_data d;
    CHECK(attn_data_make(&d, 40, 2, 1, 64, 64, 71), "alloc");
    attn_case ac;
    case_init(&ac, &d, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_AUTO);
    ac.pos = 30;
    const size_t len = out_len(&d, ac.pos);
    float *good = malloc(len * sizeof(float)), *bad = malloc(len * sizeof(float));
    CHECK(good && bad, "alloc");
    kvq_cache_free(case_run(&ac, &d, good, msg, sizeof msg));
    ac.opts.table = broken;
    kvq_cache_free(case_run(&ac, &d, bad, msg, sizeof msg));
    const double e = attn_rel_err(bad, good, len);
    free(good);
    free(bad);
    attn_data_free(&d);
    CHECK(e > 0.05, "a broken dot in the given table did not change the output (%.3g) %s", e, msg);
}

/* Same cache, every SIMD level the CPU has (and the active table) vs the
 * scalar reference kernels, K and V of different types. */
TEST(attention_simd_levels_agree_with_scalar) {
    static kvq_type_traits scalar[KVQ_TYPE_COUNT], level[KVQ_TYPE_COUNT];
    static const char *levels[] = { "active", "avx2", "avx512" };
    CHECK(kvq_simd_table("scalar", scalar), "no scalar table");
    char msg[300] = "";
    int compared = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        if (!is_cache_type((kvq_type)ty)) continue;
        const kvq_type tv = (kvq_type)(KVQ_TYPE_Q8_0 + (ty + 1) % 12);   /* another block type */
        attn_data d;
        CHECK(attn_data_make(&d, 90, 8, 2, 128, 128, 61 + (uint64_t)ty), "alloc");
        attn_case ac;
        case_init(&ac, &d, (kvq_type)ty, tv, KVQ_ROT_AUTO);
        ac.p.tail_tokens = 20;
        ac.p.sink_tokens = 2;
        ac.p.tail_type = KVQ_TYPE_F16;
        ac.pos = 60;
        const size_t len = out_len(&d, ac.pos);
        float *ref = malloc(len * sizeof(float)), *out = malloc(len * sizeof(float));
        float *ref_qi = malloc(len * sizeof(float));
        ac.opts.table = scalar;
        kvq_cache *c = ref && out && ref_qi ? case_run(&ac, &d, ref, msg, sizeof msg) : NULL;
        /* the active path (chunked, integer K kernels) against the scalar
         * per-key pass scoring with the same rounded query */
        const kvq_attend_loop per_key_qi = { KVQ_PASS_PER_KEY, NULL, true };
        if (c && kvq_cache_attend_loop(c, 0, ac.pos, d.n_tok - ac.pos, d.n_head, d.q + (size_t)ac.pos * 8 * 128,
                                       1.0f / sqrtf(128.0f), ref_qi, NULL, &ac.opts, &per_key_qi, NULL) != KVQ_OK) {
            kvq_cache_free(c);
            c = NULL;
        }
        double worst = c ? 0.0 : INFINITY;
        const char *worst_level = "";
        for (size_t i = 0; c && i < KVQ_ARRAY_LEN(levels); i++) {
            if (i > 0 && !kvq_simd_table(levels[i], level)) continue;   /* CPU lacks it */
            kvq_attend_opts o = { i ? level : NULL, 0, false };
            double e = INFINITY;
            if (kvq_cache_attend_opts(c, 0, ac.pos, d.n_tok - ac.pos, d.n_head, d.q + (size_t)ac.pos * 8 * 128,
                                      1.0f / sqrtf(128.0f), out, NULL, &o, NULL) == KVQ_OK)
                e = attn_rel_err(out, i ? ref : ref_qi, len);
            if (!(e <= worst)) { worst = e; worst_level = levels[i]; }
            compared++;
        }
        kvq_cache_free(c);
        free(ref);
        free(ref_qi);
        free(out);
        attn_data_free(&d);
        CHECK(worst < attn_tolerance((kvq_type)ty, tv, 128), "K %s / V %s: %s (%s) vs scalar rel err %.3g %s", kvq_type_name((kvq_type)ty),
              kvq_type_name(tv), worst_level, kvq_simd_level(), worst, msg);
    }
    CHECK(compared > 0, "nothing compared");
}

TEST(attention_rejects_bad_calls) {
    kvq_cache_params p;
    attn_params(&p, 2, 64, 64, 32, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_AUTO);
    p.tail_tokens = 4;
    p.max_batch = 4;
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "create");
    float k[4 * 2 * 64] = { 0 }, q[4 * 6 * 64] = { 0 }, out[4 * 6 * 64];
    kvq_error err = { 0, "" };
    kvq_status s1 = kvq_cache_attend(c, 0, 0, 1, 6, q, 1.0f, out, NULL, &err);   /* nothing written */
    for (int p0 = 0; p0 < 12; p0 += 4) kvq_cache_write(c, 0, p0, 4, k, k, NULL);
    kvq_status s2 = kvq_cache_attend(c, 0, 0, 1, 5, q, 1.0f, out, NULL, &err);   /* 5 % 2 != 0 */
    kvq_status s3 = kvq_cache_attend(c, 1, 8, 1, 6, q, 1.0f, out, NULL, &err);   /* no layer 1 */
    kvq_status s4 = kvq_cache_attend(c, 0, 10, 3, 6, q, 1.0f, out, NULL, &err);  /* past stored */
    kvq_status s5 = kvq_cache_attend(c, 0, 2, 1, 6, q, 1.0f, out, NULL, &err);   /* ring moved on */
    kvq_status s6 = kvq_cache_attend(c, 0, 8, 4, 6, q, 1.0f, out, NULL, &err);   /* fine */
    kvq_cache_free(c);
    CHECK(s1 == KVQ_ERR_ARG && s2 == KVQ_ERR_ARG && s3 == KVQ_ERR_ARG && s4 == KVQ_ERR_ARG &&
          s5 == KVQ_ERR_ARG, "bad calls accepted: %d %d %d %d %d", s1, s2, s3, s4, s5);
    CHECK(s6 == KVQ_OK, "valid call rejected: %s", err.msg);
}
