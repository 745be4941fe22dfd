/* test_kquants.c - the K-quant weight types (q4_K, q5_K, q6_K).
 *
 * The layouts are checked against real files: ../shared/models/synth holds
 * the same random weights as F32 (qwen3-h128.gguf) and as K-quants written
 * by llama-quantize; every K-quant tensor, dequantised by kvq, must be
 * close to its F32 original.  A layout mistake (nibble order, scale
 * packing, sub-block order) gives errors of order 100%, not a few %.
 * The files are read with a minimal GGUF walker of this test's own, so the
 * test does not depend on the library's reader. */
#include "test.h"
#include "kvq.h"

#include <string.h>

/* ------------------------------------------------- minimal GGUF walker */

typedef struct mini_tensor {
    char name[96];
    int ggml_type;
    int64_t ne[4];
    uint32_t n_dims;
    uint64_t offset;
} mini_tensor;

typedef struct mini_gguf {
    uint8_t *buf;
    size_t size, pos, data;
    uint64_t n_tensors;
    mini_tensor *t;
    int bad;
} mini_gguf;

static uint64_t rd(mini_gguf *g, int bytes) {
    if (g->pos + (size_t)bytes > g->size) { g->bad = 1; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)g->buf[g->pos + (size_t)i] << (8 * i);
    g->pos += (size_t)bytes;
    return v;
}

static void skip(mini_gguf *g, uint64_t n) {
    if (n > g->size - g->pos) { g->bad = 1; return; }
    g->pos += (size_t)n;
}

/* Byte size of a scalar GGUF value type; 0 for string/array. */
static int scalar_size(uint32_t ty) {
    static const int sz[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return ty < 13 ? sz[ty] : -1;
}

static void skip_value(mini_gguf *g, uint32_t ty, uint32_t *alignment, int is_alignment) {
    if (ty == 8) { skip(g, rd(g, 8)); return; }
    if (ty == 9) {
        uint32_t et = (uint32_t)rd(g, 4);
        uint64_t n = rd(g, 8);
        for (uint64_t i = 0; i < n && !g->bad; i++) skip_value(g, et, NULL, 0);
        return;
    }
    int s = scalar_size(ty);
    if (s <= 0) { g->bad = 1; return; }
    uint64_t v = rd(g, s);
    if (is_alignment && alignment && v) *alignment = (uint32_t)v;
}

static void mini_close(mini_gguf *g) { free(g->buf); free(g->t); }

static int mini_open(mini_gguf *g, const char *path) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    g->buf = n > 0 ? malloc((size_t)n) : NULL;
    g->size = (size_t)(n > 0 ? n : 0);
    int ok = g->buf && fread(g->buf, 1, g->size, f) == g->size;
    fclose(f);
    if (!ok || rd(g, 4) != 0x46554747u /* "GGUF" */) return 0;
    rd(g, 4); /* version */
    g->n_tensors = rd(g, 8);
    uint64_t n_kv = rd(g, 8);
    uint32_t alignment = 32;
    for (uint64_t i = 0; i < n_kv && !g->bad; i++) {
        uint64_t klen = rd(g, 8);
        int is_al = klen == 17 && g->pos + 17 <= g->size &&
                    memcmp(g->buf + g->pos, "general.alignment", 17) == 0;
        skip(g, klen);
        skip_value(g, (uint32_t)rd(g, 4), &alignment, is_al);
    }
    if (g->bad || g->n_tensors > 100000) return 0;
    g->t = calloc((size_t)g->n_tensors + 1, sizeof *g->t);
    if (!g->t) return 0;
    for (uint64_t i = 0; i < g->n_tensors && !g->bad; i++) {
        mini_tensor *t = &g->t[i];
        uint64_t len = rd(g, 8);
        if (len >= sizeof t->name || len > g->size - g->pos) return 0;
        memcpy(t->name, g->buf + g->pos, (size_t)len);
        skip(g, len);
        t->n_dims = (uint32_t)rd(g, 4);
        if (t->n_dims > 4) return 0;
        for (int d = 0; d < 4; d++) t->ne[d] = d < (int)t->n_dims ? (int64_t)rd(g, 8) : 1;
        t->ggml_type = (int)rd(g, 4);
        t->offset = rd(g, 8);
    }
    g->data = (g->pos + alignment - 1) / alignment * alignment;
    return !g->bad;
}

static const mini_tensor *mini_find(const mini_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->t[i].name, name) == 0) return &g->t[i];
    return NULL;
}

/* Tensor data as a kvq type, bounds-checked; NULL when unusable. */
static const uint8_t *mini_data(const mini_gguf *g, const mini_tensor *t, kvq_type *ty, int64_t *rows) {
    *ty = kvq_type_from_ggml_id(t->ggml_type);
    if (*ty == KVQ_TYPE_COUNT) return NULL;
    *rows = t->ne[1] * t->ne[2] * t->ne[3];
    size_t bytes = kvq_row_bytes(*ty, t->ne[0]) * (size_t)*rows;
    if (g->data + t->offset > g->size || bytes > g->size - g->data - t->offset) return NULL;
    return g->buf + g->data + t->offset;
}

/* ------------------------------------------------------------- the tests */

/* Relative RMS error of one dequantised tensor against its F32 original,
 * or -1 when the tensor is unusable. */
static double tensor_rel_rms(const mini_gguf *q, const mini_tensor *tq, const mini_gguf *f32,
                             kvq_type *ty_out) {
    const mini_tensor *tf = mini_find(f32, tq->name);
    kvq_type ty, tyf;
    int64_t rows, rows_f;
    const uint8_t *dq = mini_data(q, tq, &ty, &rows);
    const uint8_t *df = tf ? mini_data(f32, tf, &tyf, &rows_f) : NULL;
    *ty_out = ty;
    if (!dq || !df || tyf != KVQ_TYPE_F32 || rows != rows_f || tf->ne[0] != tq->ne[0]) return -1;
    const int64_t cols = tq->ne[0];
    float *row = malloc((size_t)cols * sizeof *row);
    if (!row) return -1;
    double err = 0, ref = 0;
    for (int64_t r = 0; r < rows; r++) {
        kvq_dequantize_row(ty, dq + kvq_row_bytes(ty, cols) * (size_t)r, row, cols);
        const float *orig = (const float *)df + r * cols;
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
    mini_gguf q, f;
    int ok = mini_open(&q, pq) & mini_open(&f, pf);
    char fail[300] = "";
    int seen[KVQ_TYPE_COUNT] = { 0 };
    double worst[KVQ_TYPE_COUNT] = { 0 };
    if (!ok) snprintf(fail, sizeof fail, "cannot parse %s or qwen3-h128.gguf", file);
    for (uint64_t i = 0; ok && i < q.n_tensors && !fail[0]; i++) {
        kvq_type ty = kvq_type_from_ggml_id(q.t[i].ggml_type);
        if (ty != KVQ_TYPE_Q4_K && ty != KVQ_TYPE_Q5_K && ty != KVQ_TYPE_Q6_K) continue;
        double e = tensor_rel_rms(&q, &q.t[i], &f, &ty);
        if (e < 0) snprintf(fail, sizeof fail, "%s: tensor %s unusable", file, q.t[i].name);
        else if (e > limit[ty])
            snprintf(fail, sizeof fail, "%s: %s (%s) relative RMS error %.4f > %.4f", file,
                     q.t[i].name, kvq_type_name(ty), e, limit[ty]);
        seen[ty]++;
        if (e > worst[ty]) worst[ty] = e;
    }
    mini_close(&q);
    mini_close(&f);
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
