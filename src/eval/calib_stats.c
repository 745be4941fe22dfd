/* calib_stats.c - the calibration statistics of calib_stats.h, gathered
 * by a forward-pass observer over an exact cache. */
#include "calib_stats.h"
#include "cache.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>

static kvq_status moments_init(kvq_moments *m, int d) {
    m->d = d;
    m->w = 0.0;
    m->sum = kvq_calloc((size_t)d, sizeof *m->sum);
    m->outer = kvq_calloc((size_t)d * (size_t)d, sizeof *m->outer);
    return m->sum && m->outer ? KVQ_OK : KVQ_ERR_NOMEM;
}

/* Add w x x^T (upper triangle) for one row of floats. */
static void moments_add(kvq_moments *m, const float *x, double w) {
    const int d = m->d;
    m->w += w;
    for (int i = 0; i < d; i++) {
        const double wx = w * x[i];
        m->sum[i] += wx;
        double *row = m->outer + (size_t)i * d;
        for (int j = i; j < d; j++) row[j] += wx * x[j];
    }
}

kvq_status kvq_moments_cov(const kvq_moments *m, double *mean, const double *center, double *cov, kvq_error *err) {
    const int d = m->d;
    if (!(m->w > 0)) return kvq_fail(err, KVQ_ERR_ARG, "calibration: moments with no weight (no data seen)");
    if (mean)
        for (int i = 0; i < d; i++) mean[i] = m->sum[i] / m->w;
    for (int i = 0; i < d; i++)
        for (int j = i; j < d; j++) {
            double c = m->outer[(size_t)i * d + j] / m->w;
            if (center)   /* E[(x-c)(x-c)^T] = E[xx^T] - c E[x]^T - E[x] c^T + c c^T */
                c += -center[i] * m->sum[j] / m->w - m->sum[i] / m->w * center[j] + center[i] * center[j];
            cov[(size_t)i * d + j] = cov[(size_t)j * d + i] = c;
        }
    return KVQ_OK;
}

kvq_status kvq_calib_stats_init(kvq_calib_stats *s, const kvq_model_info *in, int n_ctx, kvq_error *err) {
    memset(s, 0, sizeof *s);
    s->n_layer = in->n_layer;
    s->n_head_kv = in->n_head_kv;
    s->n_head = in->n_head;
    s->head_dim_k = in->head_dim_k;
    s->head_dim_v = in->head_dim_v;
    s->n_ctx = n_ctx;
    const size_t heads = (size_t)in->n_layer * (size_t)in->n_head_kv;
    s->mom = kvq_calloc(heads * KVQ_MOM_COUNT, sizeof *s->mom);
    s->recv_sq = kvq_calloc(heads * (size_t)n_ctx, sizeof *s->recv_sq);
    s->keys = kvq_malloc_n((size_t)in->n_head_kv * (size_t)n_ctx * (size_t)in->head_dim_k, sizeof *s->keys);
    s->probs = kvq_malloc_n((size_t)in->n_head_kv * (size_t)n_ctx, sizeof *s->probs);
    kvq_status st = s->mom && s->recv_sq && s->keys && s->probs ? KVQ_OK : KVQ_ERR_NOMEM;
    for (size_t i = 0; st == KVQ_OK && i < heads * KVQ_MOM_COUNT; i++) {
        const int kind = (int)(i % KVQ_MOM_COUNT);
        const bool is_v = kind == KVQ_MOM_V || kind == KVQ_MOM_V_ATT;
        st = moments_init(&s->mom[i], is_v ? in->head_dim_v : in->head_dim_k);
    }
    if (st != KVQ_OK) {
        kvq_calib_stats_free(s);
        return kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory for the statistics");
    }
    return KVQ_OK;
}

void kvq_calib_stats_free(kvq_calib_stats *s) {
    if (!s) return;
    const size_t heads = (size_t)s->n_layer * (size_t)s->n_head_kv;
    for (size_t i = 0; s->mom && i < heads * KVQ_MOM_COUNT; i++) {
        free(s->mom[i].sum);
        free(s->mom[i].outer);
    }
    free(s->mom);
    free(s->recv_sq);
    free(s->keys);
    free(s->probs);

    memset(s, 0, sizeof *s);
}

kvq_moments *kvq_calib_stats_at(const kvq_calib_stats *s, int layer, int head, int kind) {
    return &s->mom[((size_t)layer * s->n_head_kv + (size_t)head) * KVQ_MOM_COUNT + (size_t)kind];
}

static double *recv_at(const kvq_calib_stats *s, double *base, int layer, int head) {
    return base + ((size_t)layer * s->n_head_kv + (size_t)head) * (size_t)s->n_ctx;
}

/* ------------------------------------------------------------ observer */

/* q . k in float with 8 partial sums in a fixed order (the same bits on
 * every machine: the build is ISO C, so nothing is contracted to FMA). */
static double dot8(const float *a, const float *b, int d) {
    float s[8] = { 0 };
    int i = 0;
    for (; i + 8 <= d; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    for (; i < d; i++) s[0] += a[i] * b[i];
    return (double)(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}

typedef struct observe_job {
    kvq_calib_stats *s;
    int layer, pos, n;
    const float *q, *k, *v;
} observe_job;

/* One KV head: its rows' moments, and the attention its cached keys
 * receive from every query head of its group (softmax in double). */
static void observe_head(void *ctx, int g, int thread) {
    (void)thread;
    const observe_job *jb = ctx;
    kvq_calib_stats *s = jb->s;
    const int dk = s->head_dim_k, dv = s->head_dim_v, G = s->n_head / s->n_head_kv;
    const float *keys = s->keys + (size_t)g * s->n_ctx * dk;
    double *p = s->probs + (size_t)g * s->n_ctx;
    double *recv_sq = recv_at(s, s->recv_sq, jb->layer, g);
    const double scale = 1.0 / sqrt((double)dk);
    for (int i = 0; i < jb->n; i++) {
        const int qp = jb->pos + i;
        moments_add(kvq_calib_stats_at(s, jb->layer, g, KVQ_MOM_K), jb->k + ((size_t)i * s->n_head_kv + g) * dk, 1.0);
        moments_add(kvq_calib_stats_at(s, jb->layer, g, KVQ_MOM_V), jb->v + ((size_t)i * s->n_head_kv + g) * dv, 1.0);
        for (int h = g * G; h < (g + 1) * G; h++) {
            const float *qh = jb->q + ((size_t)i * s->n_head + h) * dk;
            moments_add(kvq_calib_stats_at(s, jb->layer, g, KVQ_MOM_Q), qh, 1.0);
            double mx = -INFINITY, sum = 0.0;
            for (int t = 0; t <= qp; t++) {
                p[t] = scale * dot8(qh, keys + (size_t)t * dk, dk);
                mx = p[t] > mx ? p[t] : mx;
            }
            for (int t = 0; t <= qp; t++) sum += p[t] = exp(p[t] - mx);
            for (int t = 0; t <= qp; t++) recv_sq[t] += (p[t] / sum) * (p[t] / sum);
        }
    }
}

kvq_status kvq_calib_observe(void *ud, int layer, int pos, int n, const float *q, const float *k, const float *v,
                             kvq_error *err) {
    kvq_calib_observer *ob = ud;
    kvq_calib_stats *s = ob->stats;
    const kvq_cache *c = kvq_ctx_cache(ob->ctx);
    const kvq_cache_side *sides[2] = { &c->k[layer], &c->v[layer] };
    for (int i = 0; i < 2; i++)
        if (sides[i]->type != KVQ_TYPE_F32 || sides[i]->store_dim != sides[i]->head_dim || sides[i]->rot_block ||
            sides[i]->mix_signs || sides[i]->rot_kind != KVQ_FMT_ROT_NONE)
            return kvq_fail(err, KVQ_ERR_ARG, "calibration: the cache must be f32 and unrotated");
    if (pos + n > s->n_ctx) return kvq_fail(err, KVQ_ERR_ARG, "calibration: position %d beyond %d", pos + n, s->n_ctx);
    for (int g = 0; g < s->n_head_kv; g++)
        for (int t = 0; t < pos + n; t++) {
            kvq_status st = kvq_cache_read_row(c, layer, false, KVQ_PART_BODY, g, t,
                                               s->keys + ((size_t)g * s->n_ctx + t) * s->head_dim_k, err);
            if (st) return st;
        }
    observe_job jb = { s, layer, pos, n, q, k, v };
    kvq_pool_run(kvq_ctx_pool(ob->ctx), observe_head, &jb, s->n_head_kv);
    if (layer == 0) s->n_tokens += n;
    return KVQ_OK;
}

kvq_status kvq_calib_stats_end_chunk(kvq_calib_stats *s, kvq_ctx *ctx, kvq_error *err) {
    const kvq_cache *c = kvq_ctx_cache(ctx);
    float row[KVQ_MAX_HEAD_DIM];
    for (int l = 0; l < s->n_layer; l++) {
        const int stored = c->n_stored[l];
        for (int g = 0; g < s->n_head_kv; g++) {
            double *recv_sq = recv_at(s, s->recv_sq, l, g);
            for (int t = 0; t < stored; t++) {
                kvq_status st = kvq_cache_read_row(c, l, true, KVQ_PART_BODY, g, t, row, err);
                if (st) return st;
                moments_add(kvq_calib_stats_at(s, l, g, KVQ_MOM_V_ATT), row, recv_sq[t]);
            }
            memset(recv_sq, 0, (size_t)s->n_ctx * sizeof *recv_sq);
        }
    }
    return KVQ_OK;
}
