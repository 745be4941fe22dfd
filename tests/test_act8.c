/* test_act8.c - int8 activations (src/format/act8.h, kvq_matmul_act8,
 * kvq_ctx_set_activations): every kernel level gives the scalar oracle's
 * bits; the int8 dot stays within the rounding bound of the f32 one; the
 * quantiser's edge cases; thread-count and batching independence; the
 * context option. */
#include "test.h"
#include "kvq.h"
#include "act8.h"
#include "matmul.h"
#include "model_writer.h"

#include <string.h>
#include <unistd.h>

static const kvq_type k_types[] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };

/* Offsets of a block's fp16 scales: d and (K-quant Q4/Q5) dmin. */
static void set_scales(kvq_type ty, uint8_t *blk, float d, float dmin) {
    const uint16_t hd = kvq_fp32_to_fp16(d), hm = kvq_fp32_to_fp16(dmin);
    if (ty == KVQ_TYPE_Q6_K) { memcpy(blk + 208, &hd, 2); return; }
    memcpy(blk, &hd, 2);
    if (ty == KVQ_TYPE_Q4_K || ty == KVQ_TYPE_Q5_K) memcpy(blk + 2, &hm, 2);
}

/* A row of random blocks (every code pattern, q8_0's -128 included) with
 * scales drawn per `mode`: 0 modest, 1 extreme (fp16 max, subnormal,
 * zero, mixed in one row). */
static void random_row(kvq_type ty, test_rng *rng, int64_t n, int mode, uint8_t *dst) {
    const kvq_type_traits *tr = kvq_type_get_scalar(ty);
    const int64_t nb = n / tr->block_size;
    for (int64_t i = 0; i < nb * tr->block_bytes; i++) dst[i] = (uint8_t)test_rng_u64(rng);
    static const float extreme[] = { 65504.0f, 6e-8f, 0.0f, 1.0f, 3e-5f, 30000.0f };
    for (int64_t b = 0; b < nb; b++) {
        float d = (float)(0.005 + 0.02 * test_rng_uniform(rng)), m = (float)(0.01 * test_rng_uniform(rng));
        if (mode) {
            d = extreme[test_rng_u64(rng) % 6];
            m = extreme[test_rng_u64(rng) % 6];
        }
        set_scales(ty, dst + b * tr->block_bytes, d, m);
    }
}

/* Activations: Gaussian times a per-row magnitude; mode 1 mixes blocks of
 * huge, tiny and zero values into the row. */
static void random_x(test_rng *rng, int64_t n, int mode, float *x) {
    static const float mag[] = { 1.0f, 1e30f, 1e-20f, 0.0f, 1e-40f, 3e3f };
    float s = 1.0f;
    for (int64_t i = 0; i < n; i++) {
        if (mode && i % 32 == 0) s = mag[test_rng_u64(rng) % 6];
        x[i] = (float)test_rng_gauss(rng) * s;
    }
}

static bool same_float(float a, float b) {
    return (a != a && b != b) || memcmp(&a, &b, sizeof a) == 0;
}

TEST(act8_every_level_matches_scalar_bits) {
    const int64_t sizes32[] = { 32, 64, 96, 288, 1024 }, sizes256[] = { 256, 512, 1280, 2048 };
    enum { NMAX = 2048 };
    static uint8_t row[NMAX / 32 * 34 + NMAX / 256 * 210];
    static float x[NMAX];
    static uint8_t xq[NMAX / 32 * sizeof(kvq_xq32) + NMAX / 256 * sizeof(kvq_xq256)];
    test_rng rng = { 77, 0, 0 };
    int compared = 0;
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_types); ti++) {
        const kvq_type ty = k_types[ti];
        const bool k = kvq_act8_block(ty) == 256;
        const kvq_act8_dot_fn ref = kvq_act8_dot_level(ty, KVQ_ACT8_SCALAR);
        CHECK(ref, "%s has no scalar int8 dot", kvq_type_name(ty));
        for (int si = 0; si < (k ? 4 : 5); si++)
            for (int mode = 0; mode < 2; mode++)
                for (int rep = 0; rep < 6; rep++) {
                    const int64_t n = k ? sizes256[si] : sizes32[si];
                    random_row(ty, &rng, n, mode, row);
                    random_x(&rng, n, mode, x);
                    kvq_act8_quantize(ty, x, n, xq);
                    const float want = ref(row, xq, n);
                    for (int lv = KVQ_ACT8_AVX2; lv < KVQ_ACT8_LEVELS; lv++) {
                        const kvq_act8_dot_fn f = kvq_act8_dot_level(ty, (kvq_act8_level)lv);
                        if (!f) continue;
                        const float got = f(row, xq, n);
                        CHECK(same_float(got, want), "%s n %lld mode %d: %s %.9g, scalar %.9g", kvq_type_name(ty),
                              (long long)n, mode, kvq_act8_level_name((kvq_act8_level)lv), got, want);
                        compared++;
                    }
                }
    }
    /* On a scalar-only machine (or KVQ_FORCE_SCALAR) nothing is compared:
     * the active level is then the oracle itself. */
    CHECK(compared > 0 || kvq_act8_level_best() == KVQ_ACT8_SCALAR, "no SIMD level compared");
}

/* The 512-bit VNNI level (act8_vnni512.c) exists exactly where the CPU
 * has AVX-512 with AVX512_VNNI, is then the one that runs, and the dots
 * it changes (K-quant decode, q4_0) give the scalar bits on 1, 3, 5 and 9
 * blocks (main loops and tails) with modest and extreme scales;
 * elsewhere this skips. */
TEST(act8_vnni512_level_matches_scalar_bits) {
    const bool cpu_has = kvq_isa_best() >= KVQ_ISA_AVX512 && kvq_cpu_features()->avx512vnni;
    const bool level_has = kvq_act8_dot_level(KVQ_TYPE_Q4_K, KVQ_ACT8_VNNI512) != NULL;
    CHECK(cpu_has == level_has, "CPU AVX512_VNNI %d, 512-bit int8 level %d", cpu_has, level_has);
    if (!level_has) SKIP("this CPU (or KVQ_FORCE_*) has no AVX-512 + AVX512_VNNI: the avx512-vnni-zmm dots are not run");
    CHECK(kvq_act8_level_best() == KVQ_ACT8_VNNI512, "best level %s", kvq_act8_level_name(kvq_act8_level_best()));
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };
    static const int blocks[] = { 1, 3, 5, 9 };
    static uint8_t row[9 * 210];
    static float x[9 * 256];
    static kvq_xq256 xq[9];
    test_rng rng = { 512, 0, 0 };
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(types); ti++)
        for (size_t bi = 0; bi < KVQ_ARRAY_LEN(blocks); bi++)
            for (int mode = 0; mode < 2; mode++)
                for (int rep = 0; rep < 8; rep++) {
                    const kvq_type ty = types[ti];
                    const int64_t n = (int64_t)blocks[bi] * kvq_act8_block(ty);
                    random_row(ty, &rng, n, mode, row);
                    random_x(&rng, n, mode, x);
                    kvq_act8_quantize(ty, x, n, xq);
                    const float want = kvq_act8_dot_level(ty, KVQ_ACT8_SCALAR)(row, xq, n);
                    const float got = kvq_act8_dot_level(ty, KVQ_ACT8_VNNI512)(row, xq, n);
                    CHECK(same_float(got, want), "%s n %lld mode %d rep %d: zmm %.9g, scalar %.9g", kvq_type_name(ty),
                          (long long)n, mode, rep, got, want);
                }
}

/* The 4-token prefill kernels give, per token, the scalar dot's bits. */
TEST(act8_dot4_matches_scalar_bits) {
    enum { N = 1280 };
    static uint8_t row[N / 32 * 34];
    static float x[4][N];
    static uint8_t xq[4][N / 32 * sizeof(kvq_xq32) + N / 256 * sizeof(kvq_xq256)];   /* room for either layout */
    test_rng rng = { 21, 0, 0 };
    int compared = 0;
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_types); ti++)
        for (int mode = 0; mode < 2; mode++)
            for (int rep = 0; rep < 4; rep++) {
                const kvq_type ty = k_types[ti];
                random_row(ty, &rng, N, mode, row);
                const void *xs[4];
                for (int k = 0; k < 4; k++) {
                    random_x(&rng, N, mode, x[k]);
                    kvq_act8_quantize(ty, x[k], N, xq[k]);
                    xs[k] = xq[k];
                }
                for (int lv = 0; lv < KVQ_ACT8_LEVELS; lv++) {
                    const kvq_act8_dot4_fn f = kvq_act8_dot4_level(ty, (kvq_act8_level)lv);
                    if (!f) continue;
                    float out[4];
                    f(row, xs, N, out);
                    for (int k = 0; k < 4; k++) {
                        const float want = kvq_act8_dot_level(ty, KVQ_ACT8_SCALAR)(row, xq[k], N);
                        CHECK(same_float(out[k], want), "%s mode %d token %d: %s dot4 %.9g, scalar %.9g",
                              kvq_type_name(ty), mode, k, kvq_act8_level_name((kvq_act8_level)lv), out[k], want);
                    }
                    compared++;
                }
            }
    CHECK(compared > 0 || kvq_act8_level_best() == KVQ_ACT8_SCALAR, "no dot4 kernel compared");
}

/* |dot8 - dot| <= sum_i |w_i| * d_i * (1/2 + 1e-4) + 1e-5 * sum_i |w_i x_i|
 * (+ a denormal floor): x_i moves by at most half a step d_i of its block
 * (the 1e-4 covers the float rounding of x * 127/amax and of d), the
 * exact integer sums are then scaled and added in float (relative error
 * ~ 1e-6 of the magnitude). */
TEST(act8_dot_within_rounding_bound_of_f32) {
    enum { N = 1024 };
    static uint8_t row[N / 32 * 34];
    static float x[N], w[N];
    static uint8_t xq[N / 32 * sizeof(kvq_xq256)];
    test_rng rng = { 5, 0, 0 };
    double worst_ratio = 0;
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_types); ti++) {
        const kvq_type ty = k_types[ti];
        const int bs = kvq_act8_block(ty);
        for (int rep = 0; rep < 20; rep++) {
            random_row(ty, &rng, N, 0, row);
            random_x(&rng, N, 0, x);
            for (int i = 0; i < N; i++) x[i] *= (float)(1 + 9 * ((i / bs) % 3));   /* block scales differ */
            kvq_dequantize_row(ty, row, w, N);
            kvq_act8_quantize(ty, x, N, xq);
            double ref = 0, bound = 1e-30, mag = 0;
            for (int i = 0; i < N; i++) {
                const float d = bs == 32 ? ((const kvq_xq32 *)xq)[i / 32].d : ((const kvq_xq256 *)xq)[i / 256].d;
                ref += (double)w[i] * x[i];
                bound += fabs((double)w[i]) * d * (0.5 + 1e-4);
                mag += fabs((double)w[i] * x[i]);
            }
            bound += 1e-5 * mag;
            const double got = kvq_act8_dot(ty)(row, xq, N), e = fabs(got - ref);
            CHECK(e <= bound, "%s rep %d: int8 dot %.9g, f32 %.9g, error %.3g > bound %.3g", kvq_type_name(ty), rep,
                  got, ref, e, bound);
            if (e / bound > worst_ratio) worst_ratio = e / bound;
        }
    }
    /* the activations really are rounded (the bound is not vacuous) */
    CHECK(worst_ratio > 1e-3, "int8 dots equal the f32 ones: error / bound %.3g", worst_ratio);
}

TEST(act8_quantize_edge_cases) {
    static float x[512];
    static kvq_xq256 q[2];
    static kvq_xq32 b[16];
    /* zeros and values below KVQ_ACT8_TINY: d 0, codes 0 */
    for (int i = 0; i < 512; i++) x[i] = i < 256 ? 0.0f : (i & 1 ? 1e-38f : -1e-45f);
    kvq_act8_quantize(KVQ_TYPE_Q4_K, x, 512, q);
    for (int k = 0; k < 2; k++) {
        CHECK(q[k].d == 0.0f, "block %d of zeros/tiny: d %g", k, q[k].d);
        for (int i = 0; i < 256; i++) CHECK(q[k].q[i] == 0, "block %d code %d = %d", k, i, q[k].q[i]);
        for (int g = 0; g < 16; g++) CHECK(q[k].sum[g] == 0, "block %d sum %d", k, g);
    }
    /* exact steps: amax 127 -> d 1, ties to even, sums */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) + 0.5f;   /* -15.5 .. 15.5 */
    x[0] = 127.0f;
    x[1] = -126.6f;
    kvq_act8_quantize(KVQ_TYPE_Q8_0, x, 32, b);
    CHECK(b[0].d == 1.0f, "d %g, want 1", b[0].d);
    CHECK(b[0].q[0] == 127 && b[0].q[1] == -127, "codes %d %d", b[0].q[0], b[0].q[1]);
    for (int i = 2; i < 32; i++) {
        const int want = (int)(x[i] - 0.5f) + (((int)(x[i] - 0.5f) & 1) ? 1 : 0);   /* nearest even */
        CHECK(b[0].q[i] == want, "x %.1f -> %d, want %d", x[i], b[0].q[i], want);
    }
    /* huge: the full float range, no overflow, codes +-127 */
    for (int i = 0; i < 256; i++) x[i] = (i & 1 ? -3.4e38f : 3.4e38f) * (i < 8 ? 1.0f : 0.5f);
    kvq_act8_quantize(KVQ_TYPE_Q6_K, x, 256, q);
    CHECK(isfinite(q[0].d) && q[0].d > 2e36f, "huge block d %g", q[0].d);
    CHECK(q[0].q[0] == 127 && q[0].q[1] == -127 && q[0].q[9] == -64, "huge codes %d %d %d", q[0].q[0], q[0].q[1],
          q[0].q[9]);
    CHECK(q[0].sum[0] == 0, "sum of a +-127 / +-64 group %d", q[0].sum[0]);
    /* non-finite: that block's d is NaN and its codes 0, the next block is
     * untouched, and every dot through it is NaN */
    for (int i = 0; i < 64; i++) x[i] = (float)i * 0.25f;
    x[5] = NAN;
    kvq_act8_quantize(KVQ_TYPE_Q8_0, x, 64, b);
    CHECK(isnan(b[0].d) && b[0].q[6] == 0, "NaN block: d %g code %d", b[0].d, b[0].q[6]);
    CHECK(b[1].d == 63 * 0.25f / 127.0f, "next block d %g", b[1].d);
    x[5] = INFINITY;
    kvq_act8_quantize(KVQ_TYPE_Q8_0, x, 64, b);
    CHECK(isnan(b[0].d), "inf block: d %g", b[0].d);
    uint8_t row[2 * 34];
    test_rng rng = { 3, 0, 0 };
    random_row(KVQ_TYPE_Q8_0, &rng, 64, 0, row);
    for (int lv = 0; lv < KVQ_ACT8_LEVELS; lv++) {
        const kvq_act8_dot_fn f = kvq_act8_dot_level(KVQ_TYPE_Q8_0, (kvq_act8_level)lv);
        if (f) CHECK(isnan(f(row, b, 64)), "%s: dot through an inf block is not NaN", kvq_act8_level_name(lv));
    }
    /* uncovered types have no int8 path */
    CHECK(!kvq_act8_dot(KVQ_TYPE_F16) && !kvq_act8_dot(KVQ_TYPE_F32) && kvq_act8_block(KVQ_TYPE_Q5_0) == 0,
          "f16/f32/q5_0 claim an int8 path");
}

/* Every output of kvq_matmul_act8 is its row's dot with its token: the
 * same bits for 1, 2 or 3 threads, and a prefill row equals that token
 * decoded alone. */
TEST(act8_matmul_same_bits_any_threads_and_batch) {
    enum { ROWS = 67, COLS = 512, TOK = 9 };
    kvq_pool *pools[3] = { NULL, kvq_pool_create(2), kvq_pool_create(3) };
    const size_t xq_bytes = kvq_matmul_act8_bytes(TOK, COLS);
    uint8_t *W = malloc((size_t)ROWS * kvq_row_bytes(KVQ_TYPE_Q8_0, COLS)), *xq = malloc(xq_bytes);
    float *X = malloc(sizeof(float) * TOK * COLS), *Y[3], *y1 = malloc(sizeof(float) * ROWS);
    for (int p = 0; p < 3; p++) Y[p] = malloc(sizeof(float) * ROWS * TOK);
    char fail[200] = "";
    if (!pools[1] || !pools[2] || !W || !xq || !X || !y1 || !Y[0] || !Y[1] || !Y[2]) snprintf(fail, sizeof fail, "out of memory");
    test_rng rng = { 11, 0, 0 };
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(k_types) && !fail[0]; ti++) {
        const kvq_type ty = k_types[ti];
        const size_t rb = kvq_row_bytes(ty, COLS);
        for (int r = 0; r < ROWS; r++) random_row(ty, &rng, COLS, 0, W + (size_t)r * rb);
        random_x(&rng, TOK * COLS, 0, X);
        for (int p = 0; p < 3; p++)
            if (!kvq_matmul_act8(pools[p], 0, xq, xq_bytes, ty, W, ROWS, COLS, X, TOK, Y[p]))
                snprintf(fail, sizeof fail, "%s: kvq_matmul_act8 refused", kvq_type_name(ty));
        for (int p = 1; p < 3 && !fail[0]; p++)
            if (memcmp(Y[0], Y[p], sizeof(float) * ROWS * TOK))
                snprintf(fail, sizeof fail, "%s: %d threads differ from 1", kvq_type_name(ty), p + 1);
        for (int tk = 0; tk < TOK && !fail[0]; tk++) {
            kvq_matmul_act8(pools[1], 0, xq, xq_bytes, ty, W, ROWS, COLS, X + (size_t)tk * COLS, 1, y1);
            for (int r = 0; r < ROWS && !fail[0]; r++)
                if (!same_float(y1[r], Y[0][(size_t)tk * ROWS + r]))
                    snprintf(fail, sizeof fail, "%s token %d row %d: decode %.9g, prefill %.9g", kvq_type_name(ty),
                             tk, r, y1[r], Y[0][(size_t)tk * ROWS + r]);
        }
    }
    /* uncovered type or a short buffer: refused, Y untouched */
    if (!fail[0]) {
        Y[0][0] = 42.0f;
        if (kvq_matmul_act8(NULL, 0, xq, xq_bytes, KVQ_TYPE_F32, X, 4, COLS, X, 1, Y[0]) ||
            kvq_matmul_act8(NULL, 0, xq, kvq_act8_row_bytes(KVQ_TYPE_Q8_0, COLS) * TOK - 1, KVQ_TYPE_Q8_0, W, ROWS, COLS, X, TOK, Y[0]) || Y[0][0] != 42.0f)
            snprintf(fail, sizeof fail, "f32 weights or a short buffer were not refused");
    }
    for (int p = 0; p < 3; p++) free(Y[p]);
    free(W); free(xq); free(X); free(y1);
    kvq_pool_free(pools[1]);
    kvq_pool_free(pools[2]);
    CHECK(!fail[0], "%s", fail);
}

/* The context option on a tiny model whose attn_k weights are q8_0: the
 * default is f32; int8 changes the logits a little, the same for 1 and 3
 * threads; a bad value is refused and changes nothing. */
static kvq_status eval_logits(const kvq_model *m, int threads, kvq_act act, float *logits, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_ctx = 32;
    kvq_ctx *ctx = NULL;
    static const int32_t toks[] = { 1, 40, 41, 42, 43, 44, 45, 46 };
    kvq_status st = kvq_ctx_create(m, &p, threads, &ctx, err);
    if (!st && kvq_ctx_activations(ctx) != KVQ_ACT_F32) st = kvq_fail(err, KVQ_ERR_ARG, "default is not f32");
    if (!st && kvq_ctx_set_activations(ctx, (kvq_act)7, err) != KVQ_ERR_ARG)
        st = kvq_fail(err, KVQ_ERR_ARG, "a bad activation value was accepted");
    if (!st) st = kvq_ctx_set_activations(ctx, act, err);
    if (!st) st = kvq_ctx_eval(ctx, toks, 8, 0, logits, false, err);
    kvq_ctx_free(ctx);
    return st;
}

/* The tiny model of spec s, written to a temporary file and loaded; the
 * load's status (KVQ_ERR_IO with a message when the file cannot be
 * written). */
static kvq_status load_tiny(const tm_spec *s, kvq_model **m, kvq_error *err) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvq_test_act8_%d.gguf", (int)getpid());
    tm_file f;
    tm_write(&f, s);
    const bool saved = tm_save(&f, path);
    tm_free(&f);
    if (!saved) return kvq_fail(err, KVQ_ERR_IO, "cannot write %s", path);
    const kvq_status st = kvq_model_load(path, m, err);
    remove(path);
    return st;
}

TEST(act8_context_option) {
    const tm_spec s = tm_spec_default();
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = load_tiny(&s, &m, &err);
    CHECK(st == KVQ_OK, "load: %s", err.msg);
    const int nv = kvq_model_get_info(m)->n_vocab;
    float *a = malloc(sizeof(float) * 8 * (size_t)nv * 3), *b = a ? a + 8 * nv : NULL, *c = a ? b + 8 * nv : NULL;
    if (!a) { kvq_model_free(m); CHECK(0, "out of memory"); }
    st = eval_logits(m, 1, KVQ_ACT_F32, a, &err);
    if (!st) st = eval_logits(m, 1, KVQ_ACT_INT8, b, &err);
    if (!st) st = eval_logits(m, 3, KVQ_ACT_INT8, c, &err);
    double diff = 0, mag = 0;
    for (int i = 0; i < 8 * nv; i++) { diff = fmax(diff, fabs((double)a[i] - b[i])); mag = fmax(mag, fabs((double)a[i])); }
    const bool same_threads = !memcmp(b, c, sizeof(float) * 8 * (size_t)nv);
    free(a);
    kvq_model_free(m);
    CHECK(st == KVQ_OK, "%s", err.msg);
    CHECK(same_threads, "int8 logits differ between 1 and 3 threads");
    CHECK(diff > 0 && diff < 0.05 * mag, "int8 vs f32 logits: max difference %.3g (largest logit %.3g)", diff, mag);
    CHECK(kvq_ctx_set_activations(NULL, KVQ_ACT_INT8, &err) == KVQ_ERR_ARG, "NULL ctx accepted");
}

/* KVQ_ACT_QUERY8 on a tiny model with head_dim 32 (q4_0 cache rows of one
 * block per head) and q8_0 attn_k weights: with a q4_0 cache the logits
 * move a little from f32's (the query of the K scores is rounded to
 * int8) and are KVQ_ACT_INT8's where no weight input is rounded; with a
 * q8_0 cache (int16 query for every type but q4_0/q4_1) they are f32's
 * bits, while int8 rounds the q8_0 weights' inputs and moves them. */
static kvq_status eval_cache(const kvq_model *m, kvq_type cache, kvq_act act, float *logits, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_ctx = 32;
    p.type_k = p.type_v = cache;
    kvq_ctx *ctx = NULL;
    static const int32_t toks[] = { 1, 40, 41, 42, 43, 44, 45, 46 };
    kvq_status st = kvq_ctx_create(m, &p, 1, &ctx, err);
    if (!st) st = kvq_ctx_set_activations(ctx, act, err);
    if (!st && kvq_ctx_activations(ctx) != act) st = kvq_fail(err, KVQ_ERR_ARG, "activations not kept");
    if (!st) st = kvq_ctx_eval(ctx, toks, 8, 0, logits, false, err);
    kvq_ctx_free(ctx);
    return st;
}

TEST(act8_query_alone) {
    tm_spec s = tm_spec_default();
    s.n_embd = 64;
    s.n_head = 2;      /* head_dim 32 */
    s.n_head_kv = 1;
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = load_tiny(&s, &m, &err);
    CHECK(st == KVQ_OK, "load: %s", err.msg);
    const size_t n = 8 * (size_t)kvq_model_get_info(m)->n_vocab;
    float *buf = malloc(sizeof(float) * n * 6);
    if (!buf) { kvq_model_free(m); CHECK(0, "out of memory"); }
    float *q4_f32 = buf, *q4_q8 = buf + n, *q4_i8 = buf + 2 * n, *q8_f32 = buf + 3 * n, *q8_q8 = buf + 4 * n,
          *q8_i8 = buf + 5 * n;
    st = eval_cache(m, KVQ_TYPE_Q4_0, KVQ_ACT_F32, q4_f32, &err);
    if (!st) st = eval_cache(m, KVQ_TYPE_Q4_0, KVQ_ACT_QUERY8, q4_q8, &err);
    if (!st) st = eval_cache(m, KVQ_TYPE_Q4_0, KVQ_ACT_INT8, q4_i8, &err);
    if (!st) st = eval_cache(m, KVQ_TYPE_Q8_0, KVQ_ACT_F32, q8_f32, &err);
    if (!st) st = eval_cache(m, KVQ_TYPE_Q8_0, KVQ_ACT_QUERY8, q8_q8, &err);
    if (!st) st = eval_cache(m, KVQ_TYPE_Q8_0, KVQ_ACT_INT8, q8_i8, &err);
    double diff = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)q4_f32[i] - q4_q8[i]));
        mag = fmax(mag, fabs((double)q4_f32[i]));
    }
    const bool q8_same = !memcmp(q8_f32, q8_q8, sizeof(float) * n), i8_moves = memcmp(q8_f32, q8_i8, sizeof(float) * n);
    const bool q4_not_i8 = memcmp(q4_q8, q4_i8, sizeof(float) * n) != 0;
    free(buf);
    kvq_model_free(m);
    CHECK(st == KVQ_OK, "%s", err.msg);
    CHECK(diff > 0 && diff < 0.05 * mag, "q4_0 cache, query8 vs f32: max difference %.3g (largest logit %.3g)", diff,
          mag);
    CHECK(q8_same, "q8_0 cache: query8 changed the logits (only a q4_0/q4_1 K takes the int8 query)");
    CHECK(i8_moves && q4_not_i8, "int8 gave query8's logits: the q8_0 weights' inputs were not rounded");
}

/* --act on the engine commands: a bad value is one error line naming the
 * flag and exit status 1; with the shared q8_0 model, int8 activations
 * give a perplexity near the f32 one but not the same. */
TEST(act8_cli_flag) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    static const char *const cmds[] = { "run -p hi", "perplexity -f x", "kld --base x", "bench" };
    static char cmd[4096], out[4096];
    for (size_t i = 0; i < KVQ_ARRAY_LEN(cmds); i++) {
        snprintf(cmd, sizeof cmd, "%s %s -m x.gguf --act fp8", bin, cmds[i]);
        const int rc = test_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        CHECK(rc == 1 && lines == 1 && strstr(out, "--act") && strstr(out, "f32, int8 or query8"), "'%s' exited %d: %s", cmd, rc,
              out);
    }
    char model[1024], text[1024];
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128-q8_0.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared/models/synth/qwen3-h128-q8_0.gguf or ../shared/text/gpl3.txt not found");
    double ppl[2] = { 0, 0 };
    for (int a = 0; a < 2; a++) {
        snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 128 --chunks 2 -t 2 --act %s 2>/dev/null", bin, model, text,
                 a ? "int8" : "f32");
        const int rc = test_run(cmd, out, sizeof out);
        const char *p = strstr(out, "PPL = ");
        CHECK(rc == 0 && p && sscanf(p, "PPL = %lf", &ppl[a]) == 1, "'%s' exited %d: %s", cmd, rc, out);
    }
    CHECK(ppl[0] != ppl[1] && fabs(ppl[1] / ppl[0] - 1) < 0.01, "PPL f32 %.4f, int8 %.4f", ppl[0], ppl[1]);
}
