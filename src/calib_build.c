/* calib_build.c - a calibration from measured statistics: per layer and
 * KV head, the transform of each side (calib_fit.c) from the moments the
 * side's method names, and the allocation for every rate. */
#include "calib_build.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>

/* Wo^T Wo restricted to the columns of the query heads of KV head g,
 * averaged over them: how an error in the attention output of one head
 * reaches the residual stream (the metric of V's error). */
static kvq_status output_metric(const kvq_model *m, int layer, int g, double *out, kvq_error *err) {
    const kvq_model_info *in = &m->info;
    const kvq_weight *wo = &m->layers[layer].wo;
    const int dv = in->head_dim_v, G = in->n_head / in->n_head_kv;
    float *row = malloc((size_t)wo->cols * sizeof *row);
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

static int moments_kind(kvq_calib_method m, bool is_v) {
    if (is_v) return m == KVQ_CALIB_KLT ? KVQ_MOM_V : KVQ_MOM_V_ATT;
    return m == KVQ_CALIB_QUERY_ATT ? KVQ_MOM_K_ATT : KVQ_MOM_K;
}

/* Mean-square error of an isotropic code of the same stream bits
 * (a random rotation, every coefficient the same bits) per unit of
 * E|x|^2 tr(G)/d: the reference the predicted gain is measured against. */
static double isotropic_distortion(int d, int code_bits, kvq_error *err) {
    double *ones = malloc((size_t)d * sizeof *ones);
    uint8_t *bits = malloc((size_t)d);
    double D = NAN;
    if (ones && bits) {
        for (int i = 0; i < d; i++) ones[i] = 1.0;
        if (kvq_calib_allocate(ones, d, code_bits, bits, err) == KVQ_OK) {
            D = 0.0;
            for (int i = 0; i < d; i++) D += kvq_calib_distortion(bits[i]) / d;
        }
    }
    free(ones);
    free(bits);
    return D;
}

typedef struct side_fit {
    int d;
    double *cov, *mean, *metric, *fwd, *inv, *imp, *tmp;
} side_fit;

static void fit_free(side_fit *f) {
    free(f->cov); free(f->mean); free(f->metric); free(f->fwd); free(f->inv); free(f->imp); free(f->tmp);
}

static kvq_status fit_alloc(side_fit *f, int d) {
    const size_t dd = (size_t)d * (size_t)d;
    memset(f, 0, sizeof *f);
    f->d = d;
    f->cov = malloc(dd * sizeof(double));
    f->mean = malloc((size_t)d * sizeof(double));
    f->metric = malloc(dd * sizeof(double));
    f->fwd = malloc(dd * sizeof(double));
    f->inv = malloc(dd * sizeof(double));
    f->imp = malloc((size_t)d * sizeof(double));
    f->tmp = malloc(dd * sizeof(double));
    return f->cov && f->mean && f->metric && f->fwd && f->inv && f->imp && f->tmp ? KVQ_OK : KVQ_ERR_NOMEM;
}

/* E|x|^2 tr(G)/d of the side's data (G = I without a metric). */
static double isotropic_scale(const kvq_moments *mo, const double *metric, int d) {
    double e2 = 0.0, tg = 0.0;
    for (int i = 0; i < d; i++) {
        e2 += mo->outer[(size_t)i * d + i] / mo->w;
        tg += metric ? metric[(size_t)i * d + i] : 1.0;
    }
    return e2 * tg / d;
}

static kvq_status build_side(const kvq_calib_stats *s, const kvq_model *m, kvq_calib *c, int l, int g, bool is_v,
                             side_fit *f, double *pred_db, kvq_error *err) {
    const kvq_calib_method method = is_v ? c->method_v : c->method_k;
    const kvq_moments *mo = kvq_calib_stats_at(s, l, g, moments_kind(method, is_v));
    const int d = f->d;
    kvq_status st = kvq_moments_cov(mo, f->mean, NULL, f->tmp, err);     /* mean; tmp scratch */
    if (!st) st = kvq_moments_cov(mo, NULL, f->mean, f->cov, err);       /* about the mean     */
    const double *metric = NULL;
    if (!st && !is_v && (method == KVQ_CALIB_QUERY || method == KVQ_CALIB_QUERY_ATT)) {
        st = kvq_moments_cov(kvq_calib_stats_at(s, l, g, KVQ_MOM_Q), NULL, NULL, f->metric, err);
        metric = f->metric;
    } else if (!st && is_v && method == KVQ_CALIB_ATT2_WO) {
        st = output_metric(m, l, g, f->metric, err);
        metric = f->metric;
    }
    if (!st) st = kvq_calib_fit_transform(f->cov, metric, d, f->fwd, f->inv, f->imp, err);
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
    const double iso = isotropic_scale(mo, metric, d);
    for (int r = 0; r < c->n_rates; r++) {
        uint8_t *bits = sd->bits + (size_t)r * d;
        const int code_bits = 8 * (kvq_calib_row_bytes(c->rates[r], d) - 2);
        if ((st = kvq_calib_allocate(f->imp, d, code_bits, bits, err))) return st;
        double cal = 0.0;
        for (int i = 0; i < d; i++) cal += f->imp[i] * kvq_calib_distortion(bits[i]);
        const double base = isotropic_distortion(d, code_bits, err) * iso;
        if (pred_db) pred_db[r] = 10.0 * log10(base / cal);
    }
    return KVQ_OK;
}

kvq_status kvq_calib_build(const kvq_calib_stats *s, const kvq_model *m, uint64_t model_hash,
                           kvq_calib_method method_k, kvq_calib_method method_v, int n_rates, const int *rates,
                           kvq_calib **out, double *pred_db, kvq_error *err) {
    kvq_calib *c;
    kvq_status st = kvq_calib_alloc(&c, s->n_layer, s->n_head_kv, s->head_dim_k, s->head_dim_v, n_rates, rates, err);
    if (st) return st;
    c->model_hash = model_hash;
    c->method_k = method_k;
    c->method_v = method_v;
    c->n_tokens = (uint32_t)KVQ_MIN(s->n_tokens, (long long)UINT32_MAX);
    side_fit fk, fv;
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
