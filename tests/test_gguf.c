/* test_gguf.c - the GGUF reader: a valid file read back value by value,
 * every kind of corruption rejected with its own message (never a crash),
 * and the real models in ../shared/models. */
#include "test.h"
#include "gguf.h"
#include "gguf_writer.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

/* Open a copy of exactly w->n bytes, so that ASan catches any read past
 * the end (the writer's buffer has spare capacity). */
static kvq_status open_exact(const uint8_t *p, size_t n, gguf_file **f, kvq_error *err, uint8_t **copy) {
    *copy = malloc(n ? n : 1);
    if (!*copy) return KVQ_ERR_NOMEM;
    memcpy(*copy, p, n);
    return gguf_open_memory(*copy, n, f, err);
}

static void build(gw *w, const gw_model *m) {
    memset(w, 0, sizeof *w);
    gw_write_model(w, m);
}

/* ------------------------------------------------------------ valid file */

static void check_baseline_values(test_ctx *t, const gguf_file *f) {
    uint32_t u32; int64_t i64; float f32; bool b; gguf_str s;
    CHECK(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"), "architecture");
    CHECK(gguf_get_u32(f, "llama.block_count", &u32) && u32 == 2, "block_count");
    CHECK(gguf_get_u32(f, "test.u8", &u32) && u32 == 200, "u8 -> u32");
    CHECK(gguf_get_i64(f, "test.i8", &i64) && i64 == -100, "i8 -> i64");
    CHECK(!gguf_get_u32(f, "test.i8", &u32), "negative i8 must not convert to u32");
    CHECK(gguf_get_u32(f, "test.u16", &u32) && u32 == 60000, "u16");
    CHECK(gguf_get_i64(f, "test.i16", &i64) && i64 == -30000, "i16");
    CHECK(gguf_get_u32(f, "test.u32", &u32) && u32 == 4000000000u, "u32");
    CHECK(gguf_get_i64(f, "test.i32", &i64) && i64 == -2000000000, "i32");
    CHECK(gguf_get_f32(f, "test.f32", &f32) && f32 == 1.5f, "f32");
    CHECK(gguf_get_bool(f, "test.bool", &b) && b, "bool");
    CHECK(gguf_get_i64(f, "test.u64", &i64) && i64 == (1ll << 40), "u64 -> i64");
    CHECK(!gguf_get_u32(f, "test.u64", &u32), "2^40 must not fit u32");
    CHECK(gguf_get_i64(f, "test.i64", &i64) && i64 == -(1ll << 40), "i64");
    CHECK(gguf_get_f32(f, "test.f64", &f32) && f32 == 0.25f, "f64 -> f32");
    CHECK(!gguf_get_f32(f, "test.u32", &f32) && !gguf_get_u32(f, "test.f32", &u32), "int/float do not mix");
    CHECK(!gguf_get_str(f, "test.u8", &s) && !gguf_get_bool(f, "test.u8", &b), "type mismatch");
    CHECK(!gguf_get_u32(f, "no.such.key", &u32) && !gguf_find(f, "no.such"), "absent key");
    CHECK(!gguf_get_u32(f, "tokenizer.ggml.token_type", &u32), "array is not a scalar");
}

static void check_baseline_arrays(test_ctx *t, const gguf_file *f) {
    kvq_error err = { 0 };
    gguf_str *toks = NULL; float *sc = NULL; int32_t *ty = NULL; uint64_t n = 0;
    CHECK(gguf_get_str_array(f, "tokenizer.ggml.tokens", &toks, &n, &err) == KVQ_OK, "%s", err.msg);
    int ok = n == 3 && gguf_str_eq(toks[0], "<unk>") && gguf_str_eq(toks[1], "a") && toks[2].len == 0;
    free(toks);
    CHECK(ok, "tokens read back wrong (n=%llu)", (unsigned long long)n);
    CHECK(gguf_get_f32_array(f, "tokenizer.ggml.scores", &sc, &n, &err) == KVQ_OK, "%s", err.msg);
    ok = n == 3 && sc[0] == 0.0f && sc[1] == -1.5f && sc[2] == 2.0f;
    free(sc);
    CHECK(ok, "scores read back wrong");
    CHECK(gguf_get_i32_array(f, "tokenizer.ggml.token_type", &ty, &n, &err) == KVQ_OK, "%s", err.msg);
    ok = n == 3 && ty[0] == 2 && ty[1] == 1 && ty[2] == -1;
    free(ty);
    CHECK(ok, "token types read back wrong");
    CHECK(gguf_get_i32_array(f, "test.empty", &ty, &n, &err) == KVQ_OK && n == 0, "empty array: %s", err.msg);
    free(ty);
    CHECK(gguf_get_str_array(f, "tokenizer.ggml.scores", &toks, &n, &err) == KVQ_ERR_FORMAT &&
          strstr(err.msg, "expected an array of strings"), "wrong array type: %s", err.msg);
    CHECK(gguf_get_f32_array(f, "test.f32", &sc, &n, &err) == KVQ_ERR_FORMAT, "scalar is not an array");
    CHECK(gguf_get_f32_array(f, "absent", &sc, &n, &err) == KVQ_ERR_ARG && strstr(err.msg, "not found"),
          "absent array: %s", err.msg);
}

static void check_baseline_tensors(test_ctx *t, const gguf_file *f, const gw_tensor *tensors, uint32_t alignment) {
    CHECK(f->n_tensors == 3 && f->alignment == alignment, "n_tensors %llu alignment %u",
          (unsigned long long)f->n_tensors, f->alignment);
    CHECK(f->data_offset % alignment == 0 && f->data_offset <= f->size, "data_offset %llu",
          (unsigned long long)f->data_offset);
    static const kvq_type want_type[3] = { KVQ_TYPE_F32, KVQ_TYPE_F16, KVQ_TYPE_Q8_0 };
    static const size_t want_bytes[3] = { 48, 16, 68 };
    for (int i = 0; i < 3; i++) {
        const gw_tensor *w = &tensors[i];
        const gguf_tensor *g = gguf_find_tensor(f, w->name);
        CHECK(g, "tensor %s missing", w->name);
        CHECK(g->n_dims == w->n_dims && g->ne[0] == (int64_t)w->ne[0] && g->ggml_type == (int)w->type &&
              g->type == want_type[i] && g->nbytes == want_bytes[i] && g->offset == w->offset,
              "tensor %s info read back wrong", w->name);
        CHECK(g->n_dims == 2 ? g->ne[1] == (int64_t)w->ne[1] : g->ne[1] == 1, "tensor %s ne[1]", w->name);
        CHECK(g->ne[2] == 1 && g->ne[3] == 1, "unused dims must be 1");
        const uint8_t *d = g->data;
        CHECK(d == f->base + f->data_offset + g->offset, "tensor %s data pointer", w->name);
        for (size_t k = 0; k < g->nbytes; k++)
            CHECK(d[k] == gw_data_byte(g->offset + k), "tensor %s byte %zu", w->name, k);
    }
    CHECK(!gguf_find_tensor(f, "to") && !gguf_find_tensor(f, "tokx"), "prefix must not match");
}

static void check_valid(test_ctx *t, const gw_model *m, uint32_t version, uint32_t alignment) {
    gw w;
    build(&w, m);
    CHECK(!w.oom, "writer out of memory");
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    uint8_t *copy = NULL;
    kvq_status s = open_exact(w.p, w.n, &f, &err, &copy);
    gw_free(&w);
    if (s != KVQ_OK) { free(copy); CHECK(0, "valid file rejected: %s", err.msg); }
    CHECK(f->version == version, "version %u", f->version);
    check_baseline_values(t, f);
    if (t->result == TEST_PASS) check_baseline_arrays(t, f);
    if (t->result == TEST_PASS) check_baseline_tensors(t, f, m->tensors, alignment);
    gguf_close(f);
    free(copy);
}

TEST(gguf_valid_v3) {
    gw_model m = gw_model_default();
    check_valid(t, &m, 3, 32);
}

TEST(gguf_valid_v2) {
    gw_model m = gw_model_default();
    m.version = 2;
    check_valid(t, &m, 2, 32);
}

TEST(gguf_valid_alignment_64) {
    static const gw_tensor tensors[3] = {
        { "tok", 2, { 4, 3, 0, 0 }, GW_T_F32, 0 },
        { "norm", 1, { 8, 0, 0, 0 }, GW_T_F16, 64 },
        { "q8", 2, { 32, 2, 0, 0 }, GW_T_Q8_0, 128 },
    };
    gw_model m = gw_model_default();
    m.alignment = 64;
    m.tensors = tensors;
    check_valid(t, &m, 3, 64);
}

TEST(gguf_valid_no_tensors) {
    gw_model m = gw_model_default();
    m.n_tensors = 0;
    gw w;
    build(&w, &m);
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    uint8_t *copy;
    kvq_status s = open_exact(w.p, w.n, &f, &err, &copy);
    gw_free(&w);
    int ok = s == KVQ_OK && f->n_tensors == 0 && !gguf_find_tensor(f, "tok");
    gguf_close(f);
    free(copy);
    CHECK(ok, "metadata-only file: %s", err.msg);
}

TEST(gguf_ggml_type_layouts) {
    /* ggml block layouts are format facts; the trait table must agree. */
    static const struct { int id; kvq_type type; int bs, bb; } facts[] = {
        { 0, KVQ_TYPE_F32, 1, 4 },     { 1, KVQ_TYPE_F16, 1, 2 },      { 2, KVQ_TYPE_Q4_0, 32, 18 },
        { 3, KVQ_TYPE_Q4_1, 32, 20 },  { 6, KVQ_TYPE_Q5_0, 32, 22 },   { 7, KVQ_TYPE_Q5_1, 32, 24 },
        { 8, KVQ_TYPE_Q8_0, 32, 34 },  { 12, KVQ_TYPE_Q4_K, 256, 144 }, { 13, KVQ_TYPE_Q5_K, 256, 176 },
        { 14, KVQ_TYPE_Q6_K, 256, 210 }, { 20, KVQ_TYPE_IQ4_NL, 32, 18 }, { 30, KVQ_TYPE_BF16, 1, 2 },
    };
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++) {
        kvq_type ty; int bs, bb;
        CHECK(gguf_ggml_type_layout(facts[i].id, &ty, &bs, &bb), "ggml type %d unknown", facts[i].id);
        CHECK(ty == facts[i].type && bs == facts[i].bs && bb == facts[i].bb,
              "ggml type %d: got %s %d/%d", facts[i].id, kvq_type_name(ty), bs, bb);
    }
    static const int unknown[] = { -1, 4, 5, 9, 10, 11, 15, 16, 29, 31, 39, 1000 };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        kvq_type ty; int bs, bb;
        CHECK(!gguf_ggml_type_layout(unknown[i], &ty, &bs, &bb), "ggml type %d must be unknown", unknown[i]);
    }
}

/* ------------------------------------------------------------ corruption */

/* Open bytes that must be rejected: KVQ_ERR_FORMAT, *out NULL, and a
 * message containing `want`. */
static void expect_format_error(test_ctx *t, const uint8_t *p, size_t n, const char *want, const char *what) {
    if (t->result != TEST_PASS) return;     /* report the first failure, not the last */
    gguf_file *f = (gguf_file *)&f;     /* must be overwritten with NULL */
    kvq_error err = { 0 };
    uint8_t *copy = NULL;
    kvq_status s = open_exact(p, n, &f, &err, &copy);
    if (s == KVQ_OK) gguf_close(f);
    free(copy);
    CHECK(s == KVQ_ERR_FORMAT, "%s: status %d, expected KVQ_ERR_FORMAT (%s)", what, s, err.msg);
    CHECK(f == NULL, "%s: *out not NULL on error", what);
    CHECK(strncmp(err.msg, "gguf: ", 6) == 0 && strchr(err.msg, '\n') == NULL, "%s: message '%s'", what, err.msg);
    CHECK(strstr(err.msg, want), "%s: message '%s' lacks '%s'", what, err.msg, want);
}

static void expect_model_error(test_ctx *t, const gw_model *m, const char *want, const char *what) {
    gw w;
    build(&w, m);
    if (w.oom) { gw_free(&w); CHECK(0, "writer out of memory"); }
    expect_format_error(t, w.p, w.n, want, what);
    gw_free(&w);
}

TEST(gguf_truncated_at_every_byte) {
    gw_model m = gw_model_default();
    gw w;
    build(&w, &m);
    CHECK(!w.oom && w.n > 300, "baseline has %zu bytes", w.n);
    /* The last tensor ends the file, so every proper prefix is invalid. */
    for (size_t len = 0; len < w.n; len++) {
        gguf_file *f = NULL;
        kvq_error err = { 0 };
        uint8_t *copy = NULL;
        kvq_status s = open_exact(w.p, len, &f, &err, &copy);
        if (s == KVQ_OK) gguf_close(f);
        free(copy);
        if (s != KVQ_ERR_FORMAT || err.msg[0] == 0) gw_free(&w);
        CHECK(s == KVQ_ERR_FORMAT && err.msg[0], "prefix of %zu bytes: status %d '%s'", len, s, err.msg);
    }
    gw_free(&w);
}

TEST(gguf_bad_header) {
    gw_model m = gw_model_default();
    m.magic = 0x46554746u;
    expect_model_error(t, &m, "bad magic", "bad magic");
    m = gw_model_default();
    m.version = 1;
    expect_model_error(t, &m, "version 1 is not supported", "version 1");
    m.version = 99;
    expect_model_error(t, &m, "unsupported version 99", "version 99");
    m.version = 0x03000000u;
    expect_model_error(t, &m, "big-endian", "byte-swapped version");
    m = gw_model_default();
    m.claim_counts = true;
    m.n_tensors_claim = 3;
    m.n_kv_claim = 1ull << 60;
    expect_model_error(t, &m, "cannot fit", "huge n_kv");
    m.n_kv_claim = UINT64_MAX;
    expect_model_error(t, &m, "cannot fit", "n_kv = 2^64-1");
    m.n_kv_claim = (uint64_t)gw_model_kv_count(&m);
    m.n_tensors_claim = 1ull << 59;
    expect_model_error(t, &m, "cannot fit", "huge n_tensors");
    m.n_tensors_claim = 4;              /* plausible, but the 4th info is missing */
    expect_model_error(t, &m, "tensor 3", "one tensor too many");
    static const uint8_t empty[1] = { 0 };
    expect_format_error(t, empty, 0, "truncated", "empty buffer");
}

/* The baseline with one raw metadata entry appended. */
static void expect_extra_kv_error(test_ctx *t, const gw *kv, const char *want, const char *what) {
    gw_model m = gw_model_default();
    m.extra_kv = kv->p;
    m.extra_kv_len = kv->n;
    m.n_extra_kv = 1;
    expect_model_error(t, &m, want, what);
}

TEST(gguf_bad_metadata) {
    gw kv = { 0 };
    gw_str(&kv, "x"); gw_u32(&kv, GW_STR); gw_u64(&kv, UINT64_MAX);
    expect_extra_kv_error(t, &kv, "string value length 18446744073709551615", "huge string length");
    kv.n = 0;
    gw_u64(&kv, 1ull << 62); gw_bytes(&kv, "x", 1);
    expect_extra_kv_error(t, &kv, "key length", "huge key length");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, GW_ARR); gw_u32(&kv, GW_U64); gw_u64(&kv, 1ull << 61);   /* *8 wraps to 0 */
    expect_extra_kv_error(t, &kv, "extend past the end", "array length * 8 overflows");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, GW_ARR); gw_u32(&kv, GW_STR); gw_u64(&kv, UINT64_MAX);
    expect_extra_kv_error(t, &kv, "strings cannot fit", "huge string array");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, GW_ARR); gw_u32(&kv, GW_STR); gw_u64(&kv, 2);
    gw_str(&kv, "ok"); gw_u64(&kv, 1ull << 40);
    expect_extra_kv_error(t, &kv, "array string element length", "bad length inside string array");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, 13); gw_u32(&kv, 0);
    expect_extra_kv_error(t, &kv, "invalid value type 13", "bad value type");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, GW_ARR); gw_u32(&kv, 99); gw_u64(&kv, 0);
    expect_extra_kv_error(t, &kv, "invalid array element type 99", "bad array element type");
    kv.n = 0;
    gw_str(&kv, "x"); gw_u32(&kv, GW_ARR); gw_u32(&kv, GW_ARR); gw_u64(&kv, 1);
    gw_u32(&kv, GW_U8); gw_u64(&kv, 1); gw_u8(&kv, 0);
    expect_extra_kv_error(t, &kv, "nested arrays", "array of arrays");
    kv.n = 0;
    gw_str(&kv, ""); gw_u32(&kv, GW_U8); gw_u8(&kv, 0);
    expect_extra_kv_error(t, &kv, "empty key", "empty key");
    kv.n = 0;
    gw_kv_u32(&kv, "llama.block_count", 3);
    expect_extra_kv_error(t, &kv, "duplicate metadata key 'llama.block_count'", "duplicate key");
    kv.n = 0;
    gw_kv_str(&kv, "bad\nname\x01", "v");
    gw_kv_str(&kv, "bad\nname\x01", "v");
    gw_model m = gw_model_default();
    m.extra_kv = kv.p; m.extra_kv_len = kv.n; m.n_extra_kv = 2;
    expect_model_error(t, &m, "duplicate metadata key 'bad?name?'", "control characters are not printed");
    gw_free(&kv);
}

TEST(gguf_bad_alignment) {
    gw_model m = gw_model_default();
    m.alignment = 0;
    expect_model_error(t, &m, "general.alignment 0 is not a power of two", "alignment 0");
    m.alignment = 3;
    expect_model_error(t, &m, "general.alignment 3 is not a power of two", "alignment 3");
    m.alignment = 32;
    m.alignment_type = GW_STR;
    expect_model_error(t, &m, "general.alignment must be an unsigned 32-bit integer", "alignment string");
    m.alignment_type = GW_U64;
    m.alignment = 1ll << 40;
    expect_model_error(t, &m, "general.alignment must be an unsigned 32-bit integer", "alignment 2^40");
}

/* The baseline with tensor `i` replaced by `bad`. */
static void expect_tensor_error(test_ctx *t, int i, gw_tensor bad, const char *want, const char *what) {
    gw_tensor ts[3];
    memcpy(ts, gw_baseline_tensors, sizeof ts);
    ts[i] = bad;
    gw_model m = gw_model_default();
    m.tensors = ts;
    expect_model_error(t, &m, want, what);
}

TEST(gguf_bad_tensor_info) {
    gw_tensor b = gw_baseline_tensors[1];
    b.n_dims = 0;
    expect_tensor_error(t, 1, b, "tensor 1 ('norm'): 0 dimensions", "n_dims 0");
    b.n_dims = 5;
    expect_tensor_error(t, 1, b, "5 dimensions (must be 1..4)", "n_dims 5");
    b = gw_baseline_tensors[0];
    b.ne[1] = 0;
    expect_tensor_error(t, 0, b, "tensor 0 ('tok'): dimension 1 is 0", "zero dim");
    b.ne[1] = 1ull << 63;
    expect_tensor_error(t, 0, b, "dimension 1 is 9223372036854775808", "dim > INT64_MAX");
    b.n_dims = 4;
    b.ne[0] = b.ne[1] = b.ne[2] = b.ne[3] = 1ull << 20;  /* 2^80 elements */
    expect_tensor_error(t, 0, b, "element count overflows", "overflowing product");
    b = gw_baseline_tensors[0];
    b.ne[0] = 1ull << 60;   /* 2^62 bytes: fits the arithmetic, not the file */
    b.ne[1] = 1;
    expect_tensor_error(t, 0, b, "extends past the end of the file", "huge tensor");
    b.ne[0] = 1ull << 62;   /* 2^62 values fit int64, their 2^64 bytes do not fit size_t */
    expect_tensor_error(t, 0, b, "byte size overflows", "byte size overflow");
    b = gw_baseline_tensors[0];
    b.type = 99;
    expect_tensor_error(t, 0, b, "unknown or unsupported ggml tensor type 99", "unknown type");
    b.type = 4;             /* removed Q4_2 */
    expect_tensor_error(t, 0, b, "unknown or unsupported ggml tensor type 4", "removed type");
    b.type = 0xffffffffu;
    expect_tensor_error(t, 0, b, "unknown or unsupported ggml tensor type 4294967295", "type 2^32-1");
    b = gw_baseline_tensors[2];
    b.ne[0] = 16;
    expect_tensor_error(t, 2, b, "row length 16 is not a multiple of the q8_0 block size 32", "partial block");
    b = gw_baseline_tensors[0];
    b.name = "";
    expect_tensor_error(t, 0, b, "tensor 0 has an empty name", "empty name");
}

TEST(gguf_bad_tensor_placement) {
    gw_tensor b = gw_baseline_tensors[1];
    b.offset = 65;
    expect_tensor_error(t, 1, b, "tensor 'norm' offset 65 is not a multiple of the alignment 32", "misaligned");
    b.offset = 1ull << 40;
    expect_tensor_error(t, 1, b, "tensor 'norm' (", "offset past end");
    b.offset = UINT64_MAX - 31;       /* aligned; offset + size wraps */
    /* the message shows the offset as stored, not a wrapped sum */
    expect_tensor_error(t, 1, b, "at offset 18446744073709551584 of the data section", "offset near 2^64");
    {
        /* The last tensor one byte longer than the file. */
        gw_model m = gw_model_default();
        gw w;
        build(&w, &m);
        expect_format_error(t, w.p, w.n - 1, "tensor 'q8' (", "last tensor cut by one byte");
        gw_free(&w);
    }
    b = gw_baseline_tensors[1];
    b.offset = 32;                    /* 'tok' covers [0, 48) */
    expect_tensor_error(t, 1, b, "tensors 'tok' and 'norm' overlap", "overlap");
    b.offset = 0;
    expect_tensor_error(t, 1, b, "overlap", "same offset");
    b = gw_baseline_tensors[1];
    b.name = "tok";
    expect_tensor_error(t, 1, b, "duplicate tensor name 'tok'", "duplicate name");
}

/* Replace the first occurrence of `from` (n bytes) in the built file. */
static int patch(gw *w, const void *from, const void *to, size_t n) {
    for (size_t i = 0; i + n <= w->n; i++)
        if (memcmp(w->p + i, from, n) == 0) { memcpy(w->p + i, to, n); return 1; }
    return 0;
}

/* Regression (found by fuzz/fuzz_gguf.c): a NUL inside a tensor name made
 * the name unreachable by gguf_find_tensor and could alias another one;
 * keys and names with NUL bytes are now rejected. */
TEST(gguf_nul_in_names) {
    gw_model m = gw_model_default();
    gw w;
    build(&w, &m);
    int patched = patch(&w, "\4\0\0\0\0\0\0\0norm", "\4\0\0\0\0\0\0\0n\0rm", 12);
    if (patched) expect_format_error(t, w.p, w.n, "tensor 1: name 'n?rm' contains a NUL byte", "NUL in name");
    gw_free(&w);
    CHECK(patched, "tensor name 'norm' not found in the built file");
    build(&w, &m);
    patched = patch(&w, "test.u8", "test\0u8", 7);
    if (patched) expect_format_error(t, w.p, w.n, "key 'test?u8' contains a NUL byte", "NUL in key");
    gw_free(&w);
    CHECK(patched, "key 'test.u8' not found in the built file");
}

/* Random byte flips of the valid file: every result is either a file that
 * passed validation (then every tensor lies inside the buffer) or a
 * FORMAT error with a message; never a crash (ASan checks the reads). */
TEST(gguf_random_mutations) {
    gw_model m = gw_model_default();
    gw w;
    build(&w, &m);
    CHECK(!w.oom, "writer out of memory");
    test_rng rng = { 12345, 0, 0 };
    int iters = test_sanitized() ? 10000 : 40000, accepted = 0;
    uint8_t *buf = malloc(w.n);
    CHECK(buf, "out of memory");
    for (int it = 0; it < iters; it++) {
        memcpy(buf, w.p, w.n);
        int flips = 1 + (int)(test_rng_u64(&rng) % 4);
        for (int k = 0; k < flips; k++) {
            size_t pos = (size_t)(test_rng_u64(&rng) % w.n);
            buf[pos] = (k & 1) ? (uint8_t)test_rng_u64(&rng) : (uint8_t)(buf[pos] ^ (1u << (test_rng_u64(&rng) % 8)));
        }
        size_t len = test_rng_u64(&rng) % 8 == 0 ? (size_t)(test_rng_u64(&rng) % w.n) : w.n;
        gguf_file *f = NULL;
        kvq_error err = { 0 };
        kvq_status s = gguf_open_memory(buf, len, &f, &err);
        int bad = 0;
        if (s == KVQ_OK) {
            accepted++;
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const uint8_t *d = f->tensors[i].data;
                if (d < buf || d + f->tensors[i].nbytes > buf + len) bad = 1;
            }
            gguf_close(f);
        }
        if (bad || (s != KVQ_OK && (s != KVQ_ERR_FORMAT || !err.msg[0]))) {
            free(buf);
            gw_free(&w);
            CHECK(0, "iteration %d: status %d '%s' bad=%d", it, s, err.msg, bad);
        }
    }
    free(buf);
    gw_free(&w);
    /* Flips inside tensor data or values keep the file valid: both paths ran. */
    CHECK(accepted > 0 && accepted < iters, "accepted %d of %d", accepted, iters);
}

/* ------------------------------------------------------------ real files */

/* The two ways a file is opened (mapped, read into memory): the same
 * errors for a missing file, a directory and an empty file, and the same
 * baseline parsed, each releasing its bytes its own way at close. */
TEST(gguf_open_errors) {
    kvq_status (*const open_fn[2])(const char *, gguf_file **, kvq_error *) = { gguf_open, gguf_open_read };
    const gguf_storage storage[2] = { GGUF_MAPPED, GGUF_READ };
    char path[] = "/tmp/kvq_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp failed");
    close(fd);
    for (int k = 0; k < 2 && t->result == TEST_PASS; k++) {
        gguf_file *f = NULL;
        kvq_error err = { 0 };
        CHECK(open_fn[k]("/nonexistent/kvq/model.gguf", &f, &err) == KVQ_ERR_IO && !f && strstr(err.msg, "cannot open"),
              "way %d, missing file: %s", k, err.msg);
        CHECK(open_fn[k]("/", &f, &err) == KVQ_ERR_IO && !f && strstr(err.msg, "not a regular file"),
              "way %d, directory: %s", k, err.msg);
        CHECK(open_fn[k](path, &f, &err) == KVQ_ERR_FORMAT && !f && strstr(err.msg, "empty"),
              "way %d, empty file: %s", k, err.msg);
    }
    /* The same baseline the memory tests use, through both file paths. */
    gw_model m = gw_model_default();
    gw w;
    build(&w, &m);
    FILE *fp = fopen(path, "wb");
    int written = fp && fwrite(w.p, 1, w.n, fp) == w.n;
    if (fp) fclose(fp);
    gw_free(&w);
    for (int k = 0; k < 2 && written && t->result == TEST_PASS; k++) {
        gguf_file *f = NULL;
        kvq_error err = { 0 };
        CHECK(open_fn[k](path, &f, &err) == KVQ_OK && f->storage == storage[k], "way %d, baseline: %s", k, err.msg);
        check_baseline_values(t, f);
        if (t->result == TEST_PASS) check_baseline_tensors(t, f, gw_baseline_tensors, 32);
        gguf_close(f);
    }
    unlink(path);
    CHECK(written, "cannot write %s", path);
}

/* Checks that hold for every model file: a known architecture, its block
 * count, tensors inside the data section, the vocabulary matching the
 * embedding rows. */
static void check_model_file(test_ctx *t, const char *path) {
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    CHECK(gguf_open(path, &f, &err) == KVQ_OK, "%s: %s", path, err.msg);
    gguf_str arch;
    char key[96];
    uint32_t blocks = 0;
    int ok_arch = gguf_get_str(f, "general.architecture", &arch) &&
                  (gguf_str_eq(arch, "llama") || gguf_str_eq(arch, "qwen2") || gguf_str_eq(arch, "qwen3"));
    if (ok_arch) snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
    int ok_blocks = ok_arch && gguf_get_u32(f, key, &blocks) && blocks > 0;
    int ok_version = f->version == 2 || f->version == 3;
    uint64_t sum = 0, data_end = 0;
    int ok_ranges = f->n_tensors > 0 && f->data_offset % f->alignment == 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *g = &f->tensors[i];
        const uint8_t *d = g->data;
        ok_ranges &= d >= f->base + f->data_offset && d + g->nbytes <= f->base + f->size &&
                     (size_t)(d - f->base) % f->alignment == 0;
        sum += g->nbytes;
        if (g->offset + g->nbytes > data_end) data_end = g->offset + g->nbytes;
    }
    /* The converters write the tensors back to back: the last one ends the
     * file, which checks the byte sizes computed from the types. */
    ok_ranges &= sum <= f->size - f->data_offset && data_end == f->size - f->data_offset;
    snprintf(key, sizeof key, "blk.%u.attn_q.weight", blocks ? blocks - 1 : 0);
    int ok_layers = gguf_find_tensor(f, key) != NULL;
    snprintf(key, sizeof key, "blk.%u.attn_q.weight", blocks);
    ok_layers &= gguf_find_tensor(f, key) == NULL;
    const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    gguf_str *toks = NULL;
    uint64_t n_vocab = 0;
    int ok_vocab = emb && emb->n_dims == 2 &&
                   gguf_get_str_array(f, "tokenizer.ggml.tokens", &toks, &n_vocab, &err) == KVQ_OK &&
                   (int64_t)n_vocab == emb->ne[1];
    free(toks);
    gguf_close(f);
    CHECK(ok_arch && ok_blocks && ok_version, "%s: architecture/block_count/version", path);
    CHECK(ok_ranges, "%s: tensor data outside the data section", path);
    CHECK(ok_layers, "%s: blk.N tensors do not match block_count %u", path, blocks);
    CHECK(ok_vocab, "%s: vocabulary size %llu vs token_embd", path, (unsigned long long)n_vocab);
}

TEST(gguf_real_models_all_open) {
    const char *dirs[] = { "models", "models/synth" };
    int n_files = 0;
    for (int i = 0; i < 2; i++) {
        char dir[1024];
        if (!test_shared_path(dir, sizeof dir, dirs[i])) continue;
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d)) && t->result == TEST_PASS) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            check_model_file(t, path);
            n_files++;
        }
        closedir(d);
    }
    if (t->result != TEST_PASS) return;
    if (n_files == 0) SKIP("../shared/models not found");
}

static gguf_file *open_shared(test_ctx *t, const char *rel) {
    char p[1024];
    if (!test_shared_path(p, sizeof p, rel)) return NULL;
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    if (gguf_open(p, &f, &err) != KVQ_OK) test_fail(t, __FILE__, __LINE__, "%s: %s", rel, err.msg);
    return f;
}

TEST(gguf_real_known_values) {
    gguf_file *f = open_shared(t, "models/stories260K.gguf");
    if (t->result != TEST_PASS) return;
    if (!f) SKIP("../shared/models/stories260K.gguf not found");
    gguf_str s;
    uint32_t blocks = 0, embd = 0;
    float eps = 0;
    int ok = gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama") &&
             gguf_get_u32(f, "llama.block_count", &blocks) && blocks == 5 &&
             gguf_get_u32(f, "llama.embedding_length", &embd) && embd == 64 &&
             gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && eps == 1e-5f;
    const gguf_tensor *q = gguf_find_tensor(f, "blk.4.attn_q.weight");
    int ok_q = q && q->type == KVQ_TYPE_F32 && q->ne[0] == 64 && q->ne[1] == 64 && q->nbytes == 64 * 64 * 4;
    gguf_close(f);
    CHECK(ok, "stories260K: llama, 5 blocks, embedding 64, eps 1e-5 (got %u, %u, %g)", blocks, embd, eps);
    CHECK(ok_q, "stories260K: blk.4.attn_q.weight 64x64 f32");

    f = open_shared(t, "models/toy-h64.gguf");
    if (t->result != TEST_PASS) return;
    uint32_t heads = 0;
    ok = !f || (gguf_get_u32(f, "llama.attention.head_count", &heads) && heads == 2);
    gguf_close(f);
    CHECK(ok, "toy-h64: head_count 2 (got %u)", heads);

    f = open_shared(t, "models/synth/qwen3-h128.gguf");
    if (t->result != TEST_PASS) return;
    uint32_t key_len = 0;
    ok = !f || (gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "qwen3") &&
                gguf_get_u32(f, "qwen3.attention.key_length", &key_len) && key_len == 128);
    gguf_close(f);
    CHECK(ok, "synth/qwen3-h128: key_length 128 (got %u)", key_len);
}

/* The quantised variants of the same synthetic model: same tensors and
 * shapes, the weight type (and so the byte size) differs. */
TEST(gguf_real_weight_types) {
    /* bytes per 256 values: ggml's block layouts (format facts) */
    static const struct { const char *file; kvq_type type; size_t bytes_256; } v[] = {
        { "models/synth/qwen3-h128-f16.gguf", KVQ_TYPE_F16, 512 },
        { "models/synth/qwen3-h128-bf16.gguf", KVQ_TYPE_BF16, 512 },
        { "models/synth/qwen3-h128-q8_0.gguf", KVQ_TYPE_Q8_0, 8 * 34 },
        { "models/synth/qwen3-h128-q4_0.gguf", KVQ_TYPE_Q4_0, 8 * 18 },
        { "models/synth/qwen3-h128-q4_k.gguf", KVQ_TYPE_Q4_K, 144 },
        { "models/synth/qwen3-h128-q6_k.gguf", KVQ_TYPE_Q6_K, 210 },
    };
    int found = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        gguf_file *f = open_shared(t, v[i].file);
        if (t->result != TEST_PASS) return;
        if (!f) continue;
        found++;
        const gguf_tensor *g = gguf_find_tensor(f, "blk.0.attn_q.weight");
        size_t want = 512 * v[i].bytes_256;     /* 512 rows of 256 */
        int ok = g && g->type == v[i].type && g->ne[0] == 256 && g->ne[1] == 512 && g->nbytes == want;
        gguf_close(f);
        CHECK(ok, "%s: blk.0.attn_q.weight should be %s 256x512 (%zu bytes)", v[i].file, kvq_type_name(v[i].type), want);
    }
    if (!found) SKIP("../shared/models/synth not found");
}
