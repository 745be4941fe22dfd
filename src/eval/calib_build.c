/* calib_build.c - a calibration from measured statistics: per layer and
 * KV head, the transform of each side (calib_fit.c) and the allocation for
 * every rate.  What each side is fitted to (docs/calibration.md, where the
 * alternatives tried and their KLD are):
 *
 *   K  data: the keys' covariance;  metric: beta C_q' + (1 - beta) I, with
 *      C_q' the queries' second moment scaled to trace d (E[(q.dk)^2] =
 *      dk^T C_q dk), mixed with the plain squared error;
 *   V  data: the values' covariance weighted by b_t = sum p_t^2 (how much
 *      each value's error reaches the outputs); metric: Wo^T Wo of the
 *      group's heads (how an output error reaches the residual stream). */
#include "calib_build.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>

/* Wo^T Wo restricted to the columns of the query heads of KV head g,
 * averaged over them. */
static kvq_status output_metric(const kvq_model *m, int layer, int g, double *out, kvq_error *err) {
    const kvq_model_info *in = &m->info;
    const kvq_weight *wo = &m->layers[layer].wo;
    const int dv = in->head_dim_v, G = in->n_head / in->n_head_kv;
    float *row = kvq_malloc_n((size_t)wo->cols, sizeof *row);
    if (!row) return kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    memset(out, 0, (size_t)dv * dv * sizeof *out);
    for (int64_t r = 0; r < wo->rows; r++) {
        kvq_dequantize_row(wo->type, (const uint8_t *)wo->data + (size_t)r * wo->row_bytes, row, wo->cols);
        for (int h = g * G; h < (g + 1) * G; h++) {
            const float *x = row + (size_t)h * dv;
            for (int i = 0; i < dv; i++)
                for (int j = 0; j < dv; j++) out[i * dv + j] += (double)x[i] * x[j] / G;
        }
    }
    free(row);
    return KVQ_OK;
}

/* beta C_q / (tr C_q / d) + (1 - beta) I. */
static kvq_status query_metric(const kvq_moments *q, double beta, int d, double *out, kvq_error *err) {
    kvq_status st = kvq_moments_cov(q, NULL, NULL, out, err);
    if (st) return st;
    double tr = 0.0;
    for (int i = 0; i < d; i++) tr += out[(size_t)i * d + i];
    if (!(tr > 0)) return kvq_fail(err, KVQ_ERR_ARG, "calibration: the queries are all zero");
    for (size_t i = 0; i < (size_t)d * d; i++) out[i] *= beta * d / tr;
    for (int i = 0; i < d; i++) out[(size_t)i * d + i] += 1.0 - beta;
    return KVQ_OK;
}

/* Mean-square error of an isotropic code of the same stream bits
 * (a random rotation, every coefficient the same bits) per unit of
 * E|x|^2 tr(G)/d: the reference the predicted gain is measured against. */
static kvq_status isotropic_distortion(int d, int code_bits, double *D, kvq_error *err) {
    double *ones = kvq_malloc_n((size_t)d, sizeof *ones);
    uint8_t *bits = kvq_malloc((size_t)d);
    kvq_status st = ones && bits ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    if (st == KVQ_OK) {
        for (int i = 0; i < d; i++) ones[i] = 1.0;
        st = kvq_calib_allocate(ones, d, code_bits, bits, err);
    }
    *D = 0.0;
    for (int i = 0; st == KVQ_OK && i < d; i++) *D += kvq_calib_distortion(bits[i]) / d;
    free(ones);
    free(bits);
    return st;
}

typedef struct side_fit {
    int d;
    double *cov, *mean, *metric, *fwd, *inv, *imp;
} side_fit;

static void fit_free(side_fit *f) {
    free(f->cov); free(f->mean); free(f->metric); free(f->fwd); free(f->inv); free(f->imp);
}

static kvq_status fit_alloc(side_fit *f, int d) {
    const size_t dd = (size_t)d * (size_t)d;
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cov = kvq_malloc_n(dd, sizeof(double));
    f->mean = kvq_malloc_n((size_t)d, sizeof(double));
    f->metric = kvq_malloc_n(dd, sizeof(double));
    f->fwd = kvq_malloc_n(dd, sizeof(double));
    f->inv = kvq_malloc_n(dd, sizeof(double));
    f->imp = kvq_malloc_n((size_t)d, sizeof(double));
    return f->cov && f->mean && f->metric && f->fwd && f->inv && f->imp ? KVQ_OK : KVQ_ERR_NOMEM;
}

/* E|x|^2 tr(G)/d of the side's data. */
static double isotropic_scale(const kvq_moments *mo, const double *metric, int d) {
    double e2 = 0.0, tg = 0.0;
    for (int i = 0; i < d; i++) {
        e2 += mo->outer[(size_t)i * d + i] / mo->w;
        tg += metric[(size_t)i * d + i];
    }
    return e2 * tg / d;
}

/* The side's data moments, its metric, then transform and allocations. */
static kvq_status build_side(const kvq_calib_stats *s, const kvq_model *m, kvq_calib *c, int l, int g, bool is_v,
                             side_fit *f, double *pred_db, kvq_error *err) {
    const kvq_moments *mo = kvq_calib_stats_at(s, l, g, is_v ? KVQ_MOM_V_ATT : KVQ_MOM_K);
    const int d = f->d;
    kvq_status st = kvq_moments_cov(mo, f->mean, NULL, f->cov, err);   /* the mean (cov: scratch) */
    if (!st) st = kvq_moments_cov(mo, NULL, f->mean, f->cov, err);    /* covariance about it     */
    if (!st) st = is_v ? output_metric(m, l, g, f->metric, err)
                       : query_metric(kvq_calib_stats_at(s, l, g, KVQ_MOM_Q), c->query_mix, d, f->metric, err);
    if (!st) st = kvq_calib_fit_transform(f->cov, f->metric, d, f->fwd, f->inv, f->imp, err);
    if (st) return st;
    kvq_calib_side *sd = kvq_calib_side_at(c, l, g, is_v);
    for (int i = 0; i < d; i++) {
        sd->mean[i] = (float)f->mean[i];
        sd->weight[i] = (float)(f->imp[i] / f->imp[0]);
    }
    for (size_t i = 0; i < (size_t)d * d; i++) {
        sd->fwd[i] = (float)f->fwd[i];
        sd->inv[i] = (float)f->inv[i];
    }
    kvq_calib_side_finish(sd, is_v);
    const double iso = isotropic_scale(mo, f->metric, d);
    for (int r = 0; r < c->n_rates; r++) {
        uint8_t *bits = sd->bits + (size_t)r * d;
        const int code_bits = 8 * (kvq_calib_row_bytes(c->rates[r], d) - 2);
        if ((st = kvq_calib_allocate(f->imp, d, code_bits, bits, err))) return st;
        double cal = 0.0;
        for (int i = 0; i < d; i++) cal += f->imp[i] * kvq_calib_distortion(bits[i]);
        double base;
        if ((st = isotropic_distortion(d, code_bits, &base, err))) return st;
        base *= iso;
        if (pred_db) pred_db[r] = 10.0 * log10(base / cal);
    }
    return KVQ_OK;
}

kvq_status kvq_calib_build(const kvq_calib_stats *s, const kvq_model *m, uint64_t model_hash, double query_mix,
                           int n_rates, const int *rates, kvq_calib **out, double *pred_db, kvq_error *err) {
    if (!(query_mix >= 0 && query_mix <= 1))
        return kvq_fail(err, KVQ_ERR_ARG, "calibration: query mix %g outside 0..1", query_mix);
    kvq_calib *c;
    kvq_status st = kvq_calib_alloc(&c, s->n_layer, s->n_head_kv, s->head_dim_k, s->head_dim_v, n_rates, rates, err);
    if (st) return st;
    c->model_hash = model_hash;
    c->method_k = KVQ_CALIB_QUERY_MIX;
    c->method_v = KVQ_CALIB_ATT2_WO;
    c->query_mix = query_mix;
    c->n_tokens = (uint32_t)KVQ_MIN(s->n_tokens, (long long)UINT32_MAX);
    side_fit fk = { 0 }, fv = { 0 };   /* both freed below, whichever allocation failed first */
    if (fit_alloc(&fk, s->head_dim_k) || fit_alloc(&fv, s->head_dim_v))
        st = kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    for (int l = 0; !st && l < s->n_layer; l++)
        for (int g = 0; !st && g < s->n_head_kv; g++) {
            double *p = pred_db ? pred_db + (((size_t)l * s->n_head_kv + g) * 2) * n_rates : NULL;
            st = build_side(s, m, c, l, g, false, &fk, p, err);
            if (!st) st = build_side(s, m, c, l, g, true, &fv, p ? p + n_rates : NULL, err);
        }
    fit_free(&fk);
    fit_free(&fv);
    if (st) { kvq_calib_free(c); return st; }
    *out = c;
    return KVQ_OK;
}

/* ------------------------------------------------ fitted to plain rows */

kvq_status kvq_calib_fit_rows(const float *rows, int n, int d, int rate, kvq_calib_rows *out, kvq_error *err) {
    memset(out, 0, sizeof *out);
    if (n < 2 || d < 1 || d > KVQ_MAX_HEAD_DIM || kvq_calib_rate_index(rate) < 0)
        return kvq_fail(err, KVQ_ERR_ARG, "calibration: %d rows of %d values at rate %d", n, d, rate);
    kvq_moments mo = { d, 0.0, kvq_calloc((size_t)d, sizeof(double)), kvq_calloc((size_t)d * d, sizeof(double)) };
    side_fit f = { 0 };
    float *mem = kvq_malloc_n((size_t)2 * d * d + 2 * (size_t)d, sizeof *mem);
    kvq_status st = mo.sum && mo.outer && mem && !fit_alloc(&f, d) ? KVQ_OK
                                                                   : kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory");
    for (int r = 0; !st && r < n; r++) {          /* the moments, as calib_stats.c keeps them */
        const float *x = rows + (size_t)r * d;
        mo.w += 1.0;
        for (int i = 0; i < d; i++) {
            mo.sum[i] += x[i];
            for (int j = i; j < d; j++) mo.outer[(size_t)i * d + j] += (double)x[i] * x[j];
        }
    }
    if (!st) st = kvq_moments_cov(&mo, f.mean, NULL, f.cov, err);
    if (!st) st = kvq_moments_cov(&mo, NULL, f.mean, f.cov, err);
    if (!st) st = kvq_calib_fit_transform(f.cov, NULL, d, f.fwd, f.inv, f.imp, err);
    if (!st) st = kvq_calib_allocate(f.imp, d, 8 * (kvq_calib_row_bytes(rate, d) - 2), out->bits, err);
    if (!st) {
        float *mean = mem, *fwd = mean + d, *inv = fwd + (size_t)d * d, *weight = inv + (size_t)d * d;
        for (int i = 0; i < d; i++) {
            mean[i] = (float)f.mean[i];
            weight[i] = (float)(f.imp[i] / f.imp[0]);
        }
        for (size_t i = 0; i < (size_t)d * d; i++) {
            fwd[i] = (float)f.fwd[i];
            inv[i] = (float)f.inv[i];
        }
        out->head = (kvq_calib_head){ d, false, mean, fwd, inv, { 0 } };   /* back = T^-1: rows come back like V */
        out->mem = mem;
        mem = NULL;
        st = kvq_calib_profile_make(out->bits, weight, d, kvq_calib_row_bytes(rate, d), false, &out->head.prof, err);
    }
    fit_free(&f);
    free(mo.sum);
    free(mo.outer);
    free(mem);
    if (st) kvq_calib_rows_free(out);
    return st;
}

void kvq_calib_rows_free(kvq_calib_rows *c) {
    free(c->mem);
    memset(c, 0, sizeof *c);
}

void kvq_calib_rows_round_trip(const kvq_calib_rows *c, const float *x, float *out, uint8_t *row) {
    float y[KVQ_MAX_HEAD_DIM];
    kvq_calib_head_forward(&c->head, x, y);
    kvq_calib_encode(&c->head.prof, y, row);
    kvq_calib_decode(&c->head.prof, row, out);
    kvq_calib_head_output(&c->head, out);
}
