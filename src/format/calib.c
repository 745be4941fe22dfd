/* calib.c - a calibration in memory (calib.h): per layer and KV head, each
 * side's transform, importances and allocations; kvq calibrate fills it
 * (src/eval/calib_build.c), the file reads and writes it
 * (src/eval/calib_file.c), a cache copies what it needs
 * (src/cache/cache_calib.c). */
#include "calib.h"

#include <stdlib.h>

const char *kvq_calib_method_name(kvq_calib_method m) {
    switch (m) {
    case KVQ_CALIB_QUERY_MIX: return "query-mix";
    case KVQ_CALIB_ATT2_WO: return "att2-wo";
    }
    return "?";
}

/* ------------------------------------------------------------ in memory */

static void side_free(kvq_calib_side *s) {
    free(s->mean); free(s->fwd); free(s->inv); free(s->back); free(s->weight); free(s->bits);
}

void kvq_calib_free(kvq_calib *c) {
    if (!c) return;
    const size_t n = (size_t)c->n_layer * (size_t)c->n_head_kv;
    for (size_t i = 0; i < n; i++) {
        if (c->k) side_free(&c->k[i]);
        if (c->v) side_free(&c->v[i]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

static bool side_alloc(kvq_calib_side *s, int d, int n_rates) {
    const size_t dd = (size_t)d * (size_t)d;
    s->d = d;
    s->mean = kvq_calloc((size_t)d, sizeof *s->mean);
    s->fwd = kvq_calloc(dd, sizeof *s->fwd);
    s->inv = kvq_calloc(dd, sizeof *s->inv);
    s->back = kvq_calloc(dd, sizeof *s->back);
    s->weight = kvq_calloc((size_t)d, sizeof *s->weight);
    s->bits = kvq_calloc((size_t)KVQ_MAX(n_rates, 1) * (size_t)d, 1);
    return s->mean && s->fwd && s->inv && s->back && s->weight && s->bits;
}

kvq_status kvq_calib_alloc(kvq_calib **out, int n_layer, int n_head_kv, int head_dim_k, int head_dim_v,
                           int n_rates, const int *rates, kvq_error *err) {
    *out = NULL;
    if (n_layer < 1 || n_layer > KVQ_CALIB_MAX_LAYERS || n_head_kv < 1 || n_head_kv > KVQ_CALIB_MAX_HEADS || head_dim_k < 1 ||
        head_dim_k > KVQ_MAX_HEAD_DIM || head_dim_v < 1 || head_dim_v > KVQ_MAX_HEAD_DIM || n_rates < 1 ||
        n_rates > KVQ_CALIB_N_RATES)
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibration: shape %d layers x %d heads, dims %d/%d, %d rates "
                        "outside the limits", n_layer, n_head_kv, head_dim_k, head_dim_v, n_rates);
    for (int i = 0; i < n_rates; i++)
        if (kvq_calib_rate_index(rates[i]) < 0)
            return kvq_fail(err, KVQ_ERR_FORMAT, "calibration: rate %d.%02d bpv is not one of the calibrated types'",
                            rates[i] / 100, rates[i] % 100);
    kvq_calib *c = kvq_calloc(1, sizeof *c);
    if (!c) return kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    c->n_layer = n_layer;
    c->n_head_kv = n_head_kv;
    c->head_dim_k = head_dim_k;
    c->head_dim_v = head_dim_v;
    c->n_rates = n_rates;
    memcpy(c->rates, rates, (size_t)n_rates * sizeof *rates);
    const size_t n = (size_t)n_layer * (size_t)n_head_kv;
    c->k = kvq_calloc(n, sizeof *c->k);
    c->v = kvq_calloc(n, sizeof *c->v);
    bool ok = c->k && c->v;
    for (size_t i = 0; ok && i < n; i++)
        ok = side_alloc(&c->k[i], head_dim_k, n_rates) && side_alloc(&c->v[i], head_dim_v, n_rates);
    if (!ok) {
        kvq_calib_free(c);
        return kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory for %d layers x %d heads", n_layer, n_head_kv);
    }
    *out = c;
    return KVQ_OK;
}

kvq_calib_side *kvq_calib_side_at(const kvq_calib *c, int layer, int head, bool is_v) {
    const size_t i = (size_t)layer * (size_t)c->n_head_kv + (size_t)head;
    return is_v ? &c->v[i] : &c->k[i];
}

void kvq_calib_side_finish(kvq_calib_side *s, bool is_v) {
    const int d = s->d;
    for (int i = 0; i < d; i++)
        for (int j = 0; j < d; j++) s->back[i * d + j] = is_v ? s->inv[i * d + j] : s->inv[j * d + i];
}

int kvq_calib_find_rate(const kvq_calib *c, int rate) {
    for (int i = 0; i < c->n_rates; i++)
        if (c->rates[i] == rate) return i;
    return -1;
}

