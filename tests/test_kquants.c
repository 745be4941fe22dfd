/* test_kquants.c - the K-quant weight types (q4_K, q5_K, q6_K).
 *
 * The layouts are checked against real files: ../shared/models/synth holds
 * the same random weights as F32 (qwen3-h128.gguf) and as K-quants written
 * by llama-quantize; every K-quant tensor, dequantised by kvq, must be
 * close to its F32 original.  A layout mistake (nibble order, scale
 * packing, sub-block order) gives errors of order 100%, not a few %.
 */
#include "test.h"
#include "kvq.h"
#include "gguf.h"
#include "matmul.h"

#include <string.h>

/* Relative RMS error of one dequantised tensor against its F32 original
 * in f32file, or -1 when the tensor is missing there or unusable. */
static double tensor_rel_rms(const gguf_tensor *tq, const gguf_file *f32file) {
    char name[256];
    if (tq->name.len >= sizeof name) return -1;
    memcpy(name, tq->name.ptr, (size_t)tq->name.len);
    name[tq->name.len] = 0;
    const gguf_tensor *tf = gguf_find_tensor(f32file, name);
    if (!tf || tf->type != KVQ_TYPE_F32 || tf->ne[0] != tq->ne[0]) return -1;
    const int64_t cols = tq->ne[0], rows = tq->ne[1] * tq->ne[2] * tq->ne[3];
    if (rows != tf->ne[1] * tf->ne[2] * tf->ne[3]) return -1;
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row) return -1;
    const size_t row_bytes = kvq_row_bytes(tq->type, cols);
    double err = 0, ref = 0;
    for (int64_t r = 0; r < rows; r++) {
        kvq_dequantize_row(tq->type, (const uint8_t *)tq->data + row_bytes * (size_t)r, row, cols);
        const float *orig = (const float *)tf->data + r * cols;
        for (int64_t i = 0; i < cols; i++) {
            double e = (double)row[i] - orig[i];
            err += e * e;
            ref += (double)orig[i] * orig[i];
        }
    }
    free(row);
    return ref > 0 ? sqrt(err / ref) : -1;
}

/* Every K-quant tensor of `file` against qwen3-h128.gguf; limit[t] is the
 * largest relative RMS error accepted for type t, need[t] says the file
 * must contain that type. */
static void check_file(test_ctx *t, const char *file, const double limit[KVQ_TYPE_COUNT],
                       const bool need[KVQ_TYPE_COUNT]) {
    char pq[1024], pf[1024], rel[256];
    snprintf(rel, sizeof rel, "models/synth/%s", file);
    if (!test_shared_path(pq, sizeof pq, rel) ||
        !test_shared_path(pf, sizeof pf, "models/synth/qwen3-h128.gguf"))
        SKIP("../shared/models/synth/%s not found", file);
    gguf_file *q = NULL, *f = NULL;
    kvq_error err = { 0 };
    char fail[300] = "";
    int seen[KVQ_TYPE_COUNT] = { 0 };
    double worst[KVQ_TYPE_COUNT] = { 0 };
    if (gguf_open(pq, &q, &err) != KVQ_OK || gguf_open(pf, &f, &err) != KVQ_OK)
        snprintf(fail, sizeof fail, "cannot open %s or qwen3-h128.gguf: %s", file, err.msg);
    for (uint64_t i = 0; q && f && i < q->n_tensors && !fail[0]; i++) {
        const gguf_tensor *tq = &q->tensors[i];
        const kvq_type ty = tq->type;
        if (ty != KVQ_TYPE_Q4_K && ty != KVQ_TYPE_Q5_K && ty != KVQ_TYPE_Q6_K) continue;
        double e = tensor_rel_rms(tq, f);
        if (e < 0) snprintf(fail, sizeof fail, "%s: tensor %.*s unusable", file, (int)tq->name.len, tq->name.ptr);
        else if (e > limit[ty])
            snprintf(fail, sizeof fail, "%s: %.*s (%s) relative RMS error %.4f > %.4f", file,
                     (int)tq->name.len, tq->name.ptr, kvq_type_name(ty), e, limit[ty]);
        seen[ty]++;
        if (e > worst[ty]) worst[ty] = e;
    }
    gguf_close(q);
    gguf_close(f);
    CHECK(!fail[0], "%s", fail);
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++)
        CHECK(!need[ty] || seen[ty] > 0, "%s has no %s tensor", file, kvq_type_name((kvq_type)ty));
    if (getenv("KVQ_TEST_VERBOSE"))
        for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++)
            if (seen[ty]) printf("  %s: %d %s tensors, worst rel RMS %.4f\n", file, seen[ty],
                                 kvq_type_name((kvq_type)ty), worst[ty]);
}

/* The synthetic weights are Gaussian, the worst case for a min/max code:
 * a sub-block of 32 spans about 4 sigma, so Q4_K's step is ~0.27 sigma and
 * its RMS error ~0.077 sigma (measured worst tensor: 7.2%); Q6_K (16 values,
 * 64 levels) ~1.8% (measured 1.78%); Q5_K half of Q4_K.  A layout mistake
 * gives errors near or above 100%. */
static void set_limits(double limit[KVQ_TYPE_COUNT]) {
    limit[KVQ_TYPE_Q4_K] = 0.09;
    limit[KVQ_TYPE_Q5_K] = 0.045;
    limit[KVQ_TYPE_Q6_K] = 0.025;
}

TEST(kquant_q4_K_file_close_to_f32) {
    double limit[KVQ_TYPE_COUNT] = { 0 };
    bool need[KVQ_TYPE_COUNT] = { 0 };
    set_limits(limit);
    need[KVQ_TYPE_Q4_K] = true;
    check_file(t, "qwen3-h128-q4_k.gguf", limit, need);
}

TEST(kquant_q6_K_file_close_to_f32) {
    double limit[KVQ_TYPE_COUNT] = { 0 };
    bool need[KVQ_TYPE_COUNT] = { 0 };
    set_limits(limit);
    need[KVQ_TYPE_Q6_K] = true;
    check_file(t, "qwen3-h128-q6_k.gguf", limit, need);
}

/* Q5_K is Q4_K plus a fifth bit plane (no real file uses it): with qh all
 * zero a Q5_K block decodes exactly like the Q4_K block with the same
 * d, dmin, scales and qs; setting bit b of qh[l] raises exactly value
 * 32*b + l, by 16 quantisation steps of its sub-block. */
TEST(kquant_q5_K_is_q4_K_plus_high_bit) {
    test_rng rng = { 42, 0, 0 };
    uint8_t q4[144], q5[176];
    for (int i = 0; i < 144; i++) q4[i] = (uint8_t)test_rng_u64(&rng);
    uint16_t d = kvq_fp32_to_fp16(0.0125f), dmin = kvq_fp32_to_fp16(0.003f);
    memcpy(q4, &d, 2);
    memcpy(q4 + 2, &dmin, 2);
    memcpy(q5, q4, 16);                 /* d, dmin, scales */
    memset(q5 + 16, 0, 32);             /* qh */
    memcpy(q5 + 48, q4 + 16, 128);      /* qs */
    float y4[256], y5[256], y5b[256];
    kvq_dequantize_row(KVQ_TYPE_Q4_K, q4, y4, 256);
    kvq_dequantize_row(KVQ_TYPE_Q5_K, q5, y5, 256);
    CHECK(memcmp(y4, y5, sizeof y4) == 0, "q5_K with qh = 0 differs from q4_K");
    const int probes[][2] = { { 0, 0 }, { 5, 1 }, { 31, 2 }, { 17, 7 }, { 9, 4 } };
    for (size_t p = 0; p < sizeof probes / sizeof probes[0]; p++) {
        const int l = probes[p][0], b = probes[p][1], want = 32 * b + l;
        q5[16 + l] = (uint8_t)(1u << b);
        kvq_dequantize_row(KVQ_TYPE_Q5_K, q5, y5b, 256);
        q5[16 + l] = 0;
        for (int i = 0; i < 256; i++) {
            if (i == want) continue;
            CHECK(y5b[i] == y5[i], "qh[%d] bit %d changed value %d (expected only %d)", l, b, i, want);
        }
        /* 16 steps up: (y(bit) - y(0)) equals 16 * d*sc, which is positive
         * unless the sub-block scale is 0 */
        CHECK(y5b[want] >= y5[want], "qh[%d] bit %d lowered value %d", l, b, want);
    }
}

/* kvq_matmul on real K-quant weights against the same matmul on their F32
 * originals: the outputs differ by about the weights' own error. */
TEST(kquant_matmul_real_weights) {
    char pq[1024], pf[1024];
    if (!test_shared_path(pq, sizeof pq, "models/synth/qwen3-h128-q4_k.gguf") ||
        !test_shared_path(pf, sizeof pf, "models/synth/qwen3-h128.gguf"))
        SKIP("../shared/models/synth not found");
    gguf_file *q = NULL, *f = NULL;
    kvq_error err = { 0 };
    if (gguf_open(pq, &q, &err) != KVQ_OK || gguf_open(pf, &f, &err) != KVQ_OK) {
        gguf_close(q);
        CHECK(0, "cannot open the synth models: %s", err.msg);
    }
    const gguf_tensor *tq = gguf_find_tensor(q, "blk.0.attn_q.weight");
    const gguf_tensor *tf = gguf_find_tensor(f, "blk.0.attn_q.weight");
    char fail[200] = "";
    if (!tq || !tf || tq->type != KVQ_TYPE_Q4_K || tf->type != KVQ_TYPE_F32 || tq->ne[0] != tf->ne[0])
        snprintf(fail, sizeof fail, "blk.0.attn_q.weight missing or not q4_K / f32");
    const int64_t cols = tq ? tq->ne[0] : 0, rows = tq ? tq->ne[1] : 0, n_tok = 5;
    float *X = fail[0] ? NULL : malloc(sizeof(float) * (size_t)(cols * n_tok));
    float *Yq = fail[0] ? NULL : malloc(sizeof(float) * (size_t)(rows * n_tok));
    float *Yf = fail[0] ? NULL : malloc(sizeof(float) * (size_t)(rows * n_tok));
    kvq_pool *pool = kvq_pool_create(2);
    if (!fail[0] && X && Yq && Yf && pool) {
        test_rng rng = { 11, 0, 0 };
        for (int64_t i = 0; i < cols * n_tok; i++) X[i] = (float)test_rng_gauss(&rng);
        kvq_matmul(pool, KVQ_TYPE_Q4_K, tq->data, rows, cols, X, n_tok, Yq);
        kvq_matmul(pool, KVQ_TYPE_F32, tf->data, rows, cols, X, n_tok, Yf);
        double e = 0, r = 0;
        for (int64_t i = 0; i < rows * n_tok; i++) {
            e += ((double)Yq[i] - Yf[i]) * ((double)Yq[i] - Yf[i]);
            r += (double)Yf[i] * Yf[i];
        }
        if (!(r > 0 && sqrt(e / r) < 0.12))
            snprintf(fail, sizeof fail, "q4_K matmul relative RMS error %.4f vs f32", r > 0 ? sqrt(e / r) : -1.0);
    } else if (!fail[0]) {
        snprintf(fail, sizeof fail, "out of memory");
    }
    free(X); free(Yq); free(Yf);
    kvq_pool_free(pool);
    gguf_close(q);
    gguf_close(f);
    CHECK(!fail[0], "%s", fail);
}
