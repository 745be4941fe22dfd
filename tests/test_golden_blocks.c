/* test_golden_blocks.c - byte-exact layouts against the reference blocks in
 * ../shared/golden/blocks (48 rows x 128 values; see its README). */
#include "test.h"
#include "kvq.h"

#include <string.h>

enum { ROWS = 48, COLS = 128 };

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static float *load_input(void) {
    char p[1024];
    if (!test_shared_path(p, sizeof p, "golden/blocks/input_f32.bin")) return NULL;
    size_t n;
    float *x = read_all(p, &n);
    if (x && n != ROWS * COLS * sizeof(float)) { free(x); return NULL; }
    return x;
}

/* Encode every row with kvq and compare every byte with the reference. */
static void check_bytes(test_ctx *t, const char *type_name) {
    float *x = load_input();
    if (!x) SKIP("../shared/golden/blocks not found");
    kvq_type ty = kvq_type_from_name(type_name);
    char p[1024], rel[256];
    snprintf(rel, sizeof rel, "golden/blocks/%s.bin", type_name);
    size_t n;
    uint8_t *ref = test_shared_path(p, sizeof p, rel) ? read_all(p, &n) : NULL;
    size_t rb = kvq_row_bytes(ty, COLS);
    uint8_t *mine = malloc(rb);
    int bad_row = -1;
    size_t bad_byte = 0;
    if (ref && n == rb * ROWS) {
        for (int r = 0; r < ROWS && bad_row < 0; r++) {
            kvq_quantize_row(ty, x + r * COLS, mine, COLS);
            for (size_t b = 0; b < rb; b++)
                if (mine[b] != ref[r * rb + b]) { bad_row = r; bad_byte = b; break; }
        }
    }
    int ok_size = ref && n == rb * ROWS;
    uint8_t got = bad_row >= 0 ? mine[bad_byte] : 0, want = bad_row >= 0 ? ref[bad_row * rb + bad_byte] : 0;
    free(mine); free(ref); free(x);
    CHECK(ok_size, "%s: reference file missing or of unexpected size", type_name);
    CHECK(bad_row < 0, "%s: row %d byte %zu: got 0x%02x want 0x%02x", type_name, bad_row, bad_byte, got, want);
}

/* Decoding the reference blocks gives exactly the reference floats. */
static void check_decode(test_ctx *t, const char *type_name) {
    float *x = load_input();
    if (!x) SKIP("../shared/golden/blocks not found");
    free(x);
    kvq_type ty = kvq_type_from_name(type_name);
    char p[1024], rel[256];
    snprintf(rel, sizeof rel, "golden/blocks/%s.bin", type_name);
    size_t nb = 0, nf = 0;
    uint8_t *blocks = test_shared_path(p, sizeof p, rel) ? read_all(p, &nb) : NULL;
    snprintf(rel, sizeof rel, "golden/blocks/%s.dequant_f32.bin", type_name);
    float *want = test_shared_path(p, sizeof p, rel) ? read_all(p, &nf) : NULL;
    size_t rb = kvq_row_bytes(ty, COLS);
    int ok = blocks && want && nb == rb * ROWS && nf == ROWS * COLS * sizeof(float);
    int bad = -1;
    float got_v = 0, want_v = 0;
    for (int r = 0; ok && r < ROWS && bad < 0; r++) {
        float y[COLS];
        kvq_dequantize_row(ty, blocks + r * rb, y, COLS);
        for (int c = 0; c < COLS; c++)
            if (memcmp(&y[c], &want[r * COLS + c], 4) != 0) { bad = r * COLS + c; got_v = y[c]; want_v = want[r * COLS + c]; break; }
    }
    free(blocks); free(want);
    CHECK(ok, "%s: reference files missing or of unexpected size", type_name);
    CHECK(bad < 0, "%s: value %d decodes to %.9g, reference %.9g", type_name, bad, got_v, want_v);
}

TEST(golden_bytes_f16)  { check_bytes(t, "f16"); }
TEST(golden_bytes_bf16) { check_bytes(t, "bf16"); }
TEST(golden_bytes_q8_0) { check_bytes(t, "q8_0"); }
TEST(golden_bytes_q4_0) { check_bytes(t, "q4_0"); }
TEST(golden_bytes_q4_1) { check_bytes(t, "q4_1"); }
TEST(golden_bytes_q5_0) { check_bytes(t, "q5_0"); }
TEST(golden_bytes_q5_1) { check_bytes(t, "q5_1"); }

TEST(golden_decode_all) {
    const char *names[] = { "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        check_decode(t, names[i]);
        if (t->result != TEST_PASS) return;
    }
}

/* iq4_nl's encoder is kvq's own: per row, its squared error after decoding
 * must not exceed the reference encoder's. */
TEST(golden_iq4_nl_error_not_worse) {
    float *x = load_input();
    if (!x) SKIP("../shared/golden/blocks not found");
    char p[1024];
    size_t nf = 0;
    float *ref = test_shared_path(p, sizeof p, "golden/blocks/iq4_nl.dequant_f32.bin") ? read_all(p, &nf) : NULL;
    int worse = -1;
    double e_mine = 0, e_ref = 0;
    if (ref && nf == ROWS * COLS * sizeof(float)) {
        uint8_t blk[4 * 18];
        for (int r = 0; r < ROWS && worse < 0; r++) {
            float y[COLS];
            kvq_quantize_row(KVQ_TYPE_IQ4_NL, x + r * COLS, blk, COLS);
            kvq_dequantize_row(KVQ_TYPE_IQ4_NL, blk, y, COLS);
            double em = 0, er = 0;
            for (int c = 0; c < COLS; c++) {
                double a = x[r * COLS + c];
                em += (y[c] - a) * (y[c] - a);
                er += (ref[r * COLS + c] - a) * (ref[r * COLS + c] - a);
            }
            if (em > er * (1 + 1e-6) + 1e-30) { worse = r; e_mine = em; e_ref = er; }
        }
    }
    int ok = ref && nf == ROWS * COLS * sizeof(float);
    free(ref); free(x);
    CHECK(ok, "iq4_nl reference missing");
    CHECK(worse < 0, "row %d: kvq squared error %.6g > reference %.6g", worse, e_mine, e_ref);
}
