/* cache_calib.c - calibrated sides of the cache (docs/calibration.md).
 *
 * A calibrated side stores, per KV head h, y = T_h (x - mean_h) coded with
 * that head's allocation at the type's rate (src/calib_code.c); its exact
 * copies (tail, sink) hold the same y in tail_type.  Attention runs in the
 * transformed domain as with the Hadamard rotation: each query is
 * multiplied by T^-T once (q'.y = q.(x - mean); the constant q.mean
 * cancels in the softmax), each output by T^-1 once, plus mean_v (the
 * weights sum to 1).  The body is read through the row's hooks (they get
 * the side and the KV head, so they know the head's layout); rows are
 * written one by one like any row type. */
#include "cache.h"
#include "calib.h"
#include "format_row.h"
#include "row_hooks.h"
#include "hash64.h"

#include <stdlib.h>

/* ------------------------------------------------------------ transforms */

/* out[i] = sum_j m[i][j] x[j], 8 partial sums in a fixed order. */
static void mat_vec(const float *m, const float *x, float *out, int d) {
    for (int i = 0; i < d; i++) {
        const float *row = m + (size_t)i * d;
        float s[8] = { 0 };
        int j = 0;
        for (; j + 8 <= d; j += 8)
            for (int k = 0; k < 8; k++) s[k] += row[j + k] * x[j + k];
        for (; j < d; j++) s[0] += row[j] * x[j];
        out[i] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
}

void kvq_calib_head_forward(const kvq_calib_head *h, const float *x, float *y) {
    float c[KVQ_MAX_HEAD_DIM];
    for (int i = 0; i < h->d; i++) c[i] = x[i] - h->mean[i];
    mat_vec(h->fwd, c, y, h->d);
}

void kvq_calib_head_query(const kvq_calib_head *h, const float *q, float *out) { mat_vec(h->back, q, out, h->d); }

/* out[j] = sum_i m[i][j] x[i]: the transpose, as a sum of scaled rows. */
static void mat_t_vec(const float *m, const float *x, float *out, int d) {
    for (int j = 0; j < d; j++) out[j] = 0.0f;
    for (int i = 0; i < d; i++) {
        const float *row = m + (size_t)i * d;
        for (int j = 0; j < d; j++) out[j] += x[i] * row[j];
    }
}

void kvq_calib_head_output(const kvq_calib_head *h, float *acc) {
    float y[KVQ_MAX_HEAD_DIM];
    memcpy(y, acc, (size_t)h->d * sizeof *y);
    if (h->is_k) mat_t_vec(h->back, y, acc, h->d);       /* (T^-T)^T = T^-1 */
    else mat_vec(h->back, y, acc, h->d);
    for (int i = 0; i < h->d; i++) acc[i] += h->mean[i];
}

/* ------------------------------------------------------------------ hooks */

static const uint8_t *calib_row(const kvq_cache_side *sd, int head, int pos) {
    return sd->body + (size_t)head * sd->body_head_bytes + (size_t)pos * sd->row_bytes;
}

static void calib_read_row(const kvq_cache_side *sd, int head, int pos, float *out) {
    kvq_calib_decode(&sd->calib[head].prof, calib_row(sd, head, pos), out);
}

/* Each key's row decoded once, scored against every head of the group:
 * the scalar reference of kvq_calib_score_avx2. */
void kvq_calib_score_scalar(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                            int q_stride, float scale, float *w, int w_stride) {
    const kvq_calib_profile *p = &sd->calib[kv_head].prof;
    float y[KVQ_MAX_HEAD_DIM];
    for (int t = 0; t < nk; t++) {
        kvq_calib_decode(p, calib_row(sd, kv_head, key0 + t), y);
        for (int j = 0; j < G; j++) {
            const float *qj = q + (size_t)j * q_stride;
            float s[4] = { 0 };
            int i = 0;
            for (; i + 4 <= p->n_coded; i += 4)
                for (int k = 0; k < 4; k++) s[k] += qj[i + k] * y[i + k];
            for (; i < p->n_coded; i++) s[0] += qj[i] * y[i];    /* the rest decodes to 0 */
            w[(size_t)j * w_stride + t] = scale * ((s[0] + s[1]) + (s[2] + s[3]));
        }
    }
}

/* acc_j += w_j,t y_t; a key no head weights is not decoded (nor a
 * non-finite row added where its weight is 0): the scalar reference of
 * kvq_calib_accumulate_avx2. */
void kvq_calib_accumulate_scalar(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                                 int w_stride, float *acc, int acc_stride) {
    const kvq_calib_profile *p = &sd->calib[kv_head].prof;
    float y[KVQ_MAX_HEAD_DIM];
    for (int t = 0; t < nk; t++) {
        bool any = false;
        for (int j = 0; j < G; j++) any |= w[(size_t)j * w_stride + t] != 0.0f;
        if (!any) continue;
        kvq_calib_decode(p, calib_row(sd, kv_head, key0 + t), y);
        for (int j = 0; j < G; j++) {
            const float wt = w[(size_t)j * w_stride + t];
            if (wt == 0.0f) continue;
            float *restrict a = acc + (size_t)j * acc_stride;
            for (int i = 0; i < p->n_coded; i++) a[i] += wt * y[i];
        }
    }
}

static bool is_calibrated(kvq_type t) { return kvq_type_get_scalar(t)->calib_rate > 0; }

/* The fused AVX2 reads at the levels that have AVX2 (the attention
 * pass's level chooses; scalar: the reference hooks above). */
static void calib_score(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *unused, int nk,
                        const attn_query *q, int G, float scale, float *w, int w_stride) {
    (void)unused;
    if (kr->isa >= KVQ_ISA_AVX2) kvq_calib_score_avx2(k->sd, k->kv_head, k->key0, nk, q->q, G, q->stride, scale, w, w_stride);
    else kvq_calib_score_scalar(k->sd, k->kv_head, k->key0, nk, q->q, G, q->stride, scale, w, w_stride);
}

static void calib_accumulate(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *unused,
                             int nk, const float *w, int w_stride, int G, float *acc, int acc_stride) {
    (void)unused;
    if (kr->isa >= KVQ_ISA_AVX2) kvq_calib_accumulate_avx2(v->sd, v->kv_head, v->key0, nk, w, G, w_stride, acc, acc_stride);
    else kvq_calib_accumulate_scalar(v->sd, v->kv_head, v->key0, nk, w, G, w_stride, acc, acc_stride);
}

/* Calibrated bodies are rows (layout KVQ_LAYOUT_ROWS), written one by one,
 * but each KV head's rows have that head's layout, which these hooks know
 * through the side: read_row, score and accumulate only. */
static const kvq_row_hooks g_calib_hooks = {
    .name = "calibrated rows",
    .score = calib_score,
    .accumulate = calib_accumulate,
    .read_row = calib_read_row,
};

void kvq_calib_register(void) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)
        if (kvq_type_get_scalar((kvq_type)t) && is_calibrated((kvq_type)t)) kvq_format_set_hooks((kvq_type)t, &g_calib_hooks);
}

/* ------------------------------------------------------------------ binding */


/* The calibration fits the cache: shape, and every rate its sides use. */
static kvq_status check_calibration(const kvq_cache *c, kvq_error *err) {
    const kvq_calib *cal = c->p.calib;
    const kvq_cache_params *p = &c->p;
    for (int l = 0; l < p->n_layer; l++)
        for (int s = 0; s < 2; s++) {
            const kvq_type t = s ? c->types_v[l] : c->types_k[l];
            if (!is_calibrated(t)) continue;
            if (!cal)
                return kvq_fail(err, KVQ_ERR_ARG, "cache: %c type %s needs a calibration of the model (kvq "
                                "calibrate, then --calib FILE)", s ? 'V' : 'K', kvq_type_name(t));
            if (cal->n_layer != p->n_layer || cal->n_head_kv != p->n_head_kv || cal->head_dim_k != p->head_dim_k ||
                cal->head_dim_v != p->head_dim_v)
                return kvq_fail(err, KVQ_ERR_ARG, "cache: the calibration is for %d layers x %d KV heads of %d/%d "
                                "values, the cache has %d x %d of %d/%d", cal->n_layer, cal->n_head_kv,
                                cal->head_dim_k, cal->head_dim_v, p->n_layer, p->n_head_kv, p->head_dim_k,
                                p->head_dim_v);
            const int rate = kvq_type_get_scalar(t)->calib_rate;
            if (kvq_calib_find_rate(cal, rate) < 0) {
                char have[128] = "";
                for (int r = 0; r < cal->n_rates; r++) {
                    const size_t n = strlen(have);
                    snprintf(have + n, sizeof have - n, "%s%d.%02d", r ? ", " : "", cal->rates[r] / 100,
                             cal->rates[r] % 100);
                }
                return kvq_fail(err, KVQ_ERR_ARG, "cache: %s needs a calibration at %d.%02d bits per value; this one "
                                "has %s (run kvq calibrate again)", kvq_type_name(t), rate / 100, rate % 100, have);
            }
        }
    return KVQ_OK;
}

/* Copy one KV head's side: mean, T, the query/output matrix, importance
 * and the allocation of the rate into mem; lay out its rows. */
static kvq_status bind_head(kvq_calib_head *h, const kvq_calib_side *cs, bool is_v, int rate_index, size_t row_bytes,
                            float *mem, uint8_t *bits, kvq_error *err) {
    const size_t d = (size_t)cs->d;
    float *mean = mem, *fwd = mean + d, *back = fwd + d * d, *weight = back + d * d;
    memcpy(mean, cs->mean, d * sizeof *mean);
    memcpy(fwd, cs->fwd, d * d * sizeof *fwd);
    memcpy(back, cs->back, d * d * sizeof *back);
    memcpy(weight, cs->weight, d * sizeof *weight);
    memcpy(bits, cs->bits + (size_t)rate_index * d, d);
    h->d = cs->d;
    h->is_k = !is_v;
    h->mean = mean;
    h->fwd = fwd;
    h->back = back;
    return kvq_calib_profile_make(bits, weight, cs->d, (int)row_bytes, !is_v, &h->prof, err);   /* K: unbiased */
}

/* Floats one KV head's copy takes: mean, T, T^-T or T^-1, importance,
 * and its allocation's d bytes rounded up. */
static size_t head_floats(size_t d) { return 2 * d * d + 2 * d + d / sizeof(float) + 1; }

/* Calibrated heads of the cache and the floats of their copies (from the
 * shapes and types alone: the planned figures need no calibration). */
static void count_copies(const kvq_cache *c, size_t *n_heads, size_t *floats) {
    const kvq_cache_params *p = &c->p;
    *n_heads = *floats = 0;
    for (int l = 0; l < p->n_layer; l++)
        for (int s = 0; s < 2; s++) {
            if (!is_calibrated(s ? c->types_v[l] : c->types_k[l])) continue;
            *n_heads += (size_t)p->n_head_kv;
            *floats += (size_t)p->n_head_kv * head_floats((size_t)(s ? p->head_dim_v : p->head_dim_k));
        }
}

size_t kvq_cache_calib_bytes(const kvq_cache *c) {
    size_t n_heads, floats;
    count_copies(c, &n_heads, &floats);
    return n_heads * sizeof(kvq_calib_head) + floats * sizeof(float);
}

kvq_status kvq_cache_calib_bind(kvq_cache *c, kvq_error *err) {
    const kvq_cache_params *p = &c->p;
    kvq_status st = check_calibration(c, err);
    if (st) return st;
    size_t n_heads, floats;
    count_copies(c, &n_heads, &floats);
    if (!n_heads) return KVQ_OK;
    c->calib_heads = kvq_calloc(n_heads, sizeof *c->calib_heads);
    c->calib_mem = kvq_calloc(floats, sizeof *c->calib_mem);   /* zeroed: the padding after each head's bits is hashed */
    if (!c->calib_heads || !c->calib_mem)
        return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory for the calibration's transforms");
    kvq_calib_head *h = c->calib_heads;
    float *mem = c->calib_mem;
    for (int l = 0; l < p->n_layer; l++)
        for (int s = 0; s < 2; s++) {
            kvq_cache_side *sd = s ? &c->v[l] : &c->k[l];
            if (!is_calibrated(sd->type)) continue;
            const int ri = kvq_calib_find_rate(p->calib, kvq_type_get_scalar(sd->type)->calib_rate);
            const size_t d = (size_t)sd->head_dim;
            sd->calib = h;
            sd->records = kvq_row_hooks_of(sd->type);
            for (int g = 0; g < p->n_head_kv; g++, h++) {
                uint8_t *bits = (uint8_t *)(mem + 2 * d * d + 2 * d);
                st = bind_head(h, kvq_calib_side_at(p->calib, l, g, s == 1), s == 1, ri, sd->row_bytes, mem, bits, err);
                if (st) return st;
                mem += head_floats(d);
            }
        }
    /* what a saved state must have been written with (cache_state.c) */
    c->calib_hash = (uint32_t)kvq_hash64_of(c->calib_mem, (size_t)(mem - c->calib_mem) * sizeof *mem) | 1u;
    return KVQ_OK;
}
