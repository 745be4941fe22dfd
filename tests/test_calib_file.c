/* test_calib_file.c - the calibration file (src/calib_file.c): a round
 * trip keeps every value, and each bad file is refused with its own error:
 * another model, truncated, corrupted, not a calibration, a newer version. */
#include "base_kvq.h"
#include "calib.h"
#include "test.h"

#include <unistd.h>

typedef struct calib_fixture {
    char dir[64], model[96], other[96], path[96];
} calib_fixture;

static bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static bool read_bytes(const char *path, uint8_t **p, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *p = malloc(*n);
    const bool ok = *p && fread(*p, 1, *n, f) == *n;
    fclose(f);
    return ok;
}

/* Two stand-in "model files" (the hash covers any file) and a small
 * calibration with random contents, written for the first. */
static kvq_calib *make_fixture(calib_fixture *fx, kvq_error *err) {
    snprintf(fx->dir, sizeof fx->dir, "/tmp/kvq_calib_XXXXXX");
    if (!mkdtemp(fx->dir)) return NULL;
    snprintf(fx->model, sizeof fx->model, "%s/model.gguf", fx->dir);
    snprintf(fx->other, sizeof fx->other, "%s/other.gguf", fx->dir);
    snprintf(fx->path, sizeof fx->path, "%s/model.cal", fx->dir);
    if (!write_bytes(fx->model, "model one", 9) || !write_bytes(fx->other, "model two", 9)) return NULL;
    const int rates[3] = { 225, 325, 425 };
    kvq_calib *c;
    if (kvq_calib_alloc(&c, 2, 3, 64, 32, 3, rates, err)) return NULL;
    test_rng r = { 77, 0, 0 };
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 3; h++)
            for (int s = 0; s < 2; s++) {
                kvq_calib_side *sd = kvq_calib_side_at(c, l, h, s == 1);
                const int d = sd->d;
                double imp[64];
                for (int i = 0; i < d; i++) {
                    sd->mean[i] = (float)test_rng_gauss(&r);
                    imp[i] = exp(-0.1 * i);
                    sd->weight[i] = (float)imp[i];
                }
                for (int i = 0; i < d * d; i++) {
                    sd->fwd[i] = (float)test_rng_gauss(&r);
                    sd->inv[i] = (float)test_rng_gauss(&r);
                }
                for (int k = 0; k < 3; k++)
                    if (kvq_calib_allocate(imp, d, 8 * (kvq_calib_row_bytes(rates[k], d) - 2), sd->bits + k * d, err))
                        return NULL;
                kvq_calib_side_finish(sd, s == 1);
            }
    c->method_k = KVQ_CALIB_QUERY_MIX;
    c->method_v = KVQ_CALIB_ATT2_WO;
    c->query_mix = 0.25;
    c->n_tokens = 12345;
    return c;
}

static void remove_fixture(calib_fixture *fx) {
    unlink(fx->model);
    unlink(fx->other);
    unlink(fx->path);
    rmdir(fx->dir);
}

/* kvq_calib_load for the model in the file at model_path. */
static kvq_status load_for_file(const char *path, const char *model_path, kvq_calib **out, kvq_error *err) {
    uint64_t hash;
    *out = NULL;
    kvq_status st = kvq_model_file_hash(model_path, &hash, err);
    return st ? st : kvq_calib_load_for(path, hash, out, err);
}

static bool same_side(const kvq_calib_side *a, const kvq_calib_side *b, int n_rates) {
    const size_t d = (size_t)a->d;
    return a->d == b->d && !memcmp(a->mean, b->mean, d * 4) && !memcmp(a->fwd, b->fwd, d * d * 4) &&
           !memcmp(a->inv, b->inv, d * d * 4) && !memcmp(a->back, b->back, d * d * 4) &&
           !memcmp(a->weight, b->weight, d * 4) && !memcmp(a->bits, b->bits, (size_t)n_rates * d);
}

TEST(calib_file_round_trip) {
    calib_fixture fx;
    kvq_error err = { 0 };
    kvq_calib *c = make_fixture(&fx, &err);
    CHECK(c, "fixture: %s", err.msg);
    uint64_t hash;
    CHECK(kvq_model_file_hash(fx.model, &hash, &err) == KVQ_OK, "hash");
    c->model_hash = hash;
    CHECK(kvq_calib_write(c, fx.path, &err) == KVQ_OK, "%s", err.msg);
    kvq_calib *back = NULL;
    kvq_status st = load_for_file(fx.path, fx.model, &back, &err);
    bool same = st == KVQ_OK && back->n_layer == 2 && back->n_head_kv == 3 && back->head_dim_k == 64 &&
                back->head_dim_v == 32 && back->n_rates == 3 && back->rates[1] == 325 &&
                back->method_k == KVQ_CALIB_QUERY_MIX && back->method_v == KVQ_CALIB_ATT2_WO && back->query_mix == 0.25 && back->n_tokens == 12345;
    for (int l = 0; same && l < 2; l++)
        for (int h = 0; same && h < 3; h++)
            same = same_side(kvq_calib_side_at(c, l, h, false), kvq_calib_side_at(back, l, h, false), 3) &&
                   same_side(kvq_calib_side_at(c, l, h, true), kvq_calib_side_at(back, l, h, true), 3);
    kvq_calib_free(back);
    kvq_calib_free(c);
    remove_fixture(&fx);
    CHECK(st == KVQ_OK, "load: %s", err.msg);
    CHECK(same, "the loaded calibration differs from the written one");
}

/* Load a variant of the fixture's file; returns the status and err. */
static kvq_status load_variant(calib_fixture *fx, const uint8_t *bytes, size_t n, const char *model, kvq_error *err) {
    if (!write_bytes(fx->path, bytes, n)) return KVQ_ERR_IO;
    kvq_calib *c = NULL;
    kvq_status st = load_for_file(fx->path, model, &c, err);
    kvq_calib_free(c);
    return st;
}

TEST(calib_file_refuses_bad_files) {
    calib_fixture fx;
    kvq_error err = { 0 };
    kvq_calib *c = make_fixture(&fx, &err);
    CHECK(c, "fixture: %s", err.msg);
    uint64_t hash;
    CHECK(kvq_model_file_hash(fx.model, &hash, &err) == KVQ_OK, "hash");
    c->model_hash = hash;
    CHECK(kvq_calib_write(c, fx.path, &err) == KVQ_OK, "%s", err.msg);
    kvq_calib_free(c);
    uint8_t *buf;
    size_t n;
    CHECK(read_bytes(fx.path, &buf, &n), "read back");
    struct { const char *what, *model, *needle; size_t len; size_t flip; kvq_status code; } cases[] = {
        { "another model", fx.other, "another model", n, 0, KVQ_ERR_ARG },
        { "truncated", fx.model, "truncated", n - 1, 0, KVQ_ERR_FORMAT },
        { "truncated header", fx.model, "not a kvq calibration", 40, 0, KVQ_ERR_FORMAT },
        { "payload byte", fx.model, "checksum", n, n / 2, KVQ_ERR_FORMAT },
        { "header byte", fx.model, "checksum", n, 44, KVQ_ERR_FORMAT },
        { "magic", fx.model, "not a kvq calibration", n, 3, KVQ_ERR_FORMAT },
        { "version", fx.model, "version", n, 8, KVQ_ERR_FORMAT },
        { "shape", fx.model, "impossible shape", n, 31, KVQ_ERR_FORMAT },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t *v = malloc(n);
        memcpy(v, buf, n);
        if (cases[i].flip) v[cases[i].flip] ^= 0x40;
        memset(&err, 0, sizeof err);
        const kvq_status st = load_variant(&fx, v, cases[i].len, cases[i].model, &err);
        free(v);
        if (st != cases[i].code || !strstr(err.msg, cases[i].needle)) {
            free(buf);
            remove_fixture(&fx);
            CHECK(false, "%s: status %d, message '%s' (wanted '%s')", cases[i].what, st, err.msg, cases[i].needle);
        }
    }
    /* from memory: the same bytes load; a value past the checksum made
     * non-finite (then resealed, as a tool rewriting it would) is refused
     * by the content check behind the checksum */
    kvq_calib *mem = NULL;
    CHECK(kvq_calib_load_memory(buf, n, "mem", hash, &mem, &err) == KVQ_OK && mem && mem->n_layer == 2, "memory: %s",
          err.msg);
    kvq_calib_free(mem);
    mem = NULL;
    uint8_t *nan_file = malloc(n);
    memcpy(nan_file, buf, n);
    const uint32_t nan_bits = 0x7fc00000u;
    memcpy(nan_file + 64 + 4 * 3 + 4 * 5, &nan_bits, 4);   /* rates, then layer 0 head 0 K's mean[5] */
    kvq_calib_reseal(nan_file, n);
    const kvq_status nan_st = kvq_calib_load_memory(nan_file, n, "mem", hash, &mem, &err);
    free(nan_file);
    CHECK(nan_st == KVQ_ERR_FORMAT && !mem && strstr(err.msg, "non-finite"), "NaN value: status %d '%s'", nan_st,
          err.msg);
    /* a missing file, and a missing model file */
    kvq_calib *none = NULL;
    CHECK(kvq_calib_load(fx.path, NULL, &none, &err) == KVQ_ERR_ARG && !none, "NULL model accepted");
    CHECK(load_for_file("/nonexistent/x.cal", fx.model, &none, &err) == KVQ_ERR_IO && !none, "missing file");
    CHECK(load_for_file(fx.path, "/nonexistent/m.gguf", &none, &err) == KVQ_ERR_IO && !none, "missing model");
    free(buf);
    remove_fixture(&fx);
}
