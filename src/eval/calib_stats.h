/* calib_stats.h - what `kvq calibrate` measures while the model reads the
 * calibration text with an exact (f32, unrotated) cache: per layer and KV
 * head, weighted first and second moments of
 *
 *   k      the keys as cached (after RoPE), one weight per key;
 *   q      the queries that read this KV head (every query head of its
 *          GQA group), one weight per query row;
 *   v      the values, one weight per value;
 *   v_att  the values, each weighted by b_t = sum_i,h p_h,i,t^2 (over
 *          the queries i >= t and the group's heads h): the
 *          variance of the attention output's error is
 *          sum_t p_t^2 E|e_t|^2 for independent errors e_t of the value
 *          rows, so b_t is how much token t's value error reaches the
 *          outputs (docs/calibration.md derives it).
 *
 * Moments are sums in double: weight, sum w x, and the upper triangle of
 * sum w x x^T.  The attention weights are recomputed from the cache's
 * exact keys (softmax of q.k / sqrt(d) in double), so the numbers are the
 * model's own.  Work is split by KV head only, so the result is the same
 * for any thread count. */
#ifndef KVQ_CALIB_STATS_H
#define KVQ_CALIB_STATS_H

#include "kvq_internal.h"

typedef struct kvq_moments {
    int d;
    double w;          /* sum of weights            */
    double *sum;       /* [d]   sum w x             */
    double *outer;     /* [d*d] sum w x x^T (upper triangle filled; kvq_moments_cov mirrors it) */
} kvq_moments;

enum { KVQ_MOM_K = 0, KVQ_MOM_Q, KVQ_MOM_V, KVQ_MOM_V_ATT, KVQ_MOM_COUNT };

typedef struct kvq_calib_stats {
    int n_layer, n_head_kv, n_head, head_dim_k, head_dim_v, n_ctx;
    kvq_moments *mom;       /* [n_layer][n_head_kv][KVQ_MOM_COUNT]          */
    double *recv_sq;        /* [n_layer][n_head_kv][n_ctx]: b_t of the chunk */
    float *keys;            /* [n_head_kv][n_ctx][head_dim_k]: one layer's keys, per call */
    double *probs;          /* [n_head_kv][n_ctx]: one query's softmax, per task */
    long long n_tokens;     /* positions seen (per layer) */
} kvq_calib_stats;

kvq_status kvq_calib_stats_init(kvq_calib_stats *s, const kvq_model_info *in, int n_ctx, kvq_error *err);
void kvq_calib_stats_free(kvq_calib_stats *s);

/* The moments of one (layer, KV head, kind). */
kvq_moments *kvq_calib_stats_at(const kvq_calib_stats *s, int layer, int head, int kind);

/* Mean (may be NULL) and second moment about `center` (NULL: about zero,
 * i.e. E[x x^T]; else E[(x - c)(x - c)^T]) of weighted moments, full
 * symmetric d*d.  Fails when the weight is zero. */
kvq_status kvq_moments_cov(const kvq_moments *m, double *mean, const double *center, double *cov, kvq_error *err);

/* The forward-pass observer (kvq_ctx_set_observer) for a context whose
 * cache is exact: adds the batch's k, q, v rows, and the attention each
 * cached key receives from the batch's queries. */
typedef struct kvq_calib_observer {
    kvq_calib_stats *stats;
    kvq_ctx *ctx;           /* its cache holds the keys, its pool runs the heads */
} kvq_calib_observer;
kvq_status kvq_calib_observe(void *ud, int layer, int pos, int n, const float *q, const float *k, const float *v,
                             kvq_error *err);

/* After a chunk (before the cache is cleared): fold each position's b_t
 * into v_att with the cached values, then reset. */
kvq_status kvq_calib_stats_end_chunk(kvq_calib_stats *s, kvq_ctx *ctx, kvq_error *err);

#endif
