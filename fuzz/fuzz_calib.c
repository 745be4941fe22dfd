/*
 * fuzz_calib.c - libFuzzer target for calibration files
 * (src/eval/calib_file.c), through kvq_calib_load_memory.
 *
 * The model hash is taken from the input itself (the check against the
 * model is tested elsewhere), and each input is read twice: as it is, and
 * after kvq_calib_reseal has made its checksum match, so the checks
 * behind the checksum (shape, rates, finite values, every allocation a
 * code that fits its row) see mutated content too.  A read must fail with
 * KVQ_ERR_FORMAT and a message, or give a calibration that works: every
 * side's code at every rate encodes and decodes a row, and a cache of
 * each calibrated type the file has a rate for is created, written and
 * read by attention.
 */
#include "calib.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdlib.h>

static uint64_t hash_in(const uint8_t *p, size_t size) {
    uint64_t h = 0;
    for (int i = 0; size >= 56 && i < 8; i++) h |= (uint64_t)p[48 + i] << 8 * i;
    return h;
}

/* Every side's code at every rate: a row of its mean encodes and decodes
 * to finite values. */
static void code_rows(const kvq_calib *c) {
    float y[KVQ_MAX_HEAD_DIM], back[KVQ_MAX_HEAD_DIM];
    uint8_t row[8 * KVQ_MAX_HEAD_DIM + 64];
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head_kv; h++)
            for (int s = 0; s < 2; s++) {
                const kvq_calib_side *sd = kvq_calib_side_at(c, l, h, s == 1);
                for (int r = 0; r < c->n_rates; r++) {
                    kvq_calib_profile prof;
                    kvq_error err;
                    const int bytes = kvq_calib_row_bytes(c->rates[r], sd->d);
                    if (bytes < 0 || (size_t)bytes > sizeof row) abort();
                    if (kvq_calib_profile_make(sd->bits + (size_t)r * sd->d, sd->weight, sd->d, bytes, s == 0, &prof,
                                               &err) != KVQ_OK)
                        abort();   /* the loader accepted it */
                    for (int i = 0; i < sd->d; i++) y[i] = (float)(i % 7) - 3.0f;
                    kvq_calib_encode(&prof, y, row);
                    kvq_calib_decode(&prof, row, back);
                    for (int i = 0; i < sd->d; i++)
                        if (!isfinite(back[i])) abort();
                }
            }
}

/* Two positions of every layer written, then read by attention (one
 * query head per KV head): the outputs of finite rows through a finite
 * transform are finite or the calibration had to be refused. */
static void write_and_attend(kvq_cache *cache, const kvq_cache_params *p) {
    enum { N = 2 };
    const size_t nk = (size_t)N * p->n_head_kv * p->head_dim_k, nv = (size_t)N * p->n_head_kv * p->head_dim_v;
    float *k = malloc(nk * sizeof *k), *v = malloc(nv * sizeof *v), *out = malloc(nv * sizeof *out);
    if (!k || !v || !out) abort();
    for (size_t i = 0; i < nk; i++) k[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (size_t i = 0; i < nv; i++) v[i] = (float)((i * 53) % 13) / 13.0f - 0.5f;
    kvq_error err = { 0 };
    for (int l = 0; l < p->n_layer; l++) {
        if (kvq_cache_write(cache, l, 0, N, k, v, &err) != KVQ_OK ||
            kvq_cache_attend(cache, l, 0, N, p->n_head_kv, k, 0.125f, out, NULL, &err) != KVQ_OK)
            abort();   /* valid arguments on a cache that was created */
    }
    free(k);
    free(v);
    free(out);
}

/* A cache of each calibrated type with a rate in the file: created from
 * the calibration, two rows written, attention over them. */
static void use_in_caches(const kvq_calib *c) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)t);
        if (!tr->calib_rate || kvq_calib_find_rate(c, tr->calib_rate) < 0) continue;
        kvq_cache_params p;
        kvq_cache_params_default(&p);
        p.n_layer = c->n_layer;
        p.n_head_kv = c->n_head_kv;
        p.head_dim_k = c->head_dim_k;
        p.head_dim_v = c->head_dim_v;
        p.n_ctx = 4;
        p.max_batch = 2;
        p.type_k = p.type_v = (kvq_type)t;
        p.calib = c;
        if (p.n_layer > 2 || p.n_head_kv > 2) continue;   /* keep each input fast */
        kvq_cache *cache = NULL;
        kvq_error err = { 0 };
        if (kvq_cache_create(&p, &cache, &err) != KVQ_OK) {
            if (cache || !err.msg[0]) abort();
            continue;
        }
        write_and_attend(cache, &p);
        kvq_cache_free(cache);
    }
}

static void read_once(const uint8_t *buf, size_t size) {
    kvq_calib *c = NULL;
    kvq_error err = { 0 };
    kvq_status s = kvq_calib_load_memory(buf, size, "fuzz", hash_in(buf, size), &c, &err);
    if (s != KVQ_OK) {
        if ((s != KVQ_ERR_FORMAT && s != KVQ_ERR_NOMEM) || c || !err.msg[0]) abort();
        return;
    }
    code_rows(c);
    use_in_caches(c);
    kvq_calib_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_copy_input(data, size);
    if (!buf) return 0;
    read_once(buf, size);
    kvq_calib_reseal(buf, size);
    read_once(buf, size);
    free(buf);
    return 0;
}
