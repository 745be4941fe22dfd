/* attn_ref.c - see attn_ref.h. */
#include "attn_ref.h"
#include "cache_lanes.h"
#include "attn_block.h"
#include "row_hooks.h"
#include "calib.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

bool attn_data_make(attn_data *d, int n_tok, int n_head, int n_head_kv, int hd_k, int hd_v, uint64_t seed) {
    memset(d, 0, sizeof *d);
    d->n_tok = n_tok; d->n_head = n_head; d->n_head_kv = n_head_kv; d->hd_k = hd_k; d->hd_v = hd_v;
    const size_t nk = (size_t)n_tok * n_head_kv * hd_k, nv = (size_t)n_tok * n_head_kv * hd_v;
    const size_t nq = (size_t)n_tok * n_head * hd_k;
    d->k = malloc(nk * sizeof(float));
    d->v = malloc(nv * sizeof(float));
    d->q = malloc(nq * sizeof(float));
    if (!d->k || !d->v || !d->q) { attn_data_free(d); return false; }
    test_rng r = { seed, 0, 0 };
    for (size_t i = 0; i < nk; i++) {
        const int ch = (int)(i % (size_t)hd_k);
        d->k[i] = (float)(test_rng_gauss(&r) * (ch % 16 == 3 ? 6.0 : 1.0));   /* outlier channels */
    }
    for (size_t i = 0; i < nv; i++) d->v[i] = (float)test_rng_gauss(&r);
    for (size_t i = 0; i < nq; i++) d->q[i] = (float)test_rng_gauss(&r);
    return true;
}

void attn_data_free(attn_data *d) {
    free(d->k); free(d->v); free(d->q);
    d->k = d->v = d->q = NULL;
}

/* One side of one head: T = Q diag(s) with Q random orthogonal (rows by
 * Gram-Schmidt), T^-1 = diag(1/s) Q^T. */
static bool synth_side(kvq_calib_side *sd, const kvq_calib *c, test_rng *r) {
    const int d = sd->d;
    double *q = malloc((size_t)d * d * sizeof *q), imp[KVQ_MAX_HEAD_DIM];
    if (!q) return false;
    for (int j = 0; j < d; j++) {
        double *v = q + (size_t)j * d;
        for (int i = 0; i < d; i++) v[i] = test_rng_gauss(r);
        for (int k = 0; k < j; k++) {
            double dot = 0;
            for (int i = 0; i < d; i++) dot += v[i] * q[(size_t)k * d + i];
            for (int i = 0; i < d; i++) v[i] -= dot * q[(size_t)k * d + i];
        }
        double n = 0;
        for (int i = 0; i < d; i++) n += v[i] * v[i];
        for (int i = 0; i < d; i++) v[i] /= sqrt(n);
    }
    for (int i = 0; i < d; i++) {
        const double s = 0.5 + test_rng_uniform(r);          /* scale of output i */
        for (int j = 0; j < d; j++) {
            sd->fwd[(size_t)i * d + j] = (float)(q[(size_t)j * d + i] * s);   /* T = Q^T-rows scaled */
            sd->inv[(size_t)j * d + i] = (float)(q[(size_t)j * d + i] / s);
        }
        sd->mean[i] = (float)(0.3 * test_rng_gauss(r));
        imp[i] = exp(-4.0 * i / d);
        sd->weight[i] = (float)imp[i];
    }
    free(q);
    kvq_error err;
    for (int k = 0; k < c->n_rates; k++)
        if (kvq_calib_allocate(imp, d, 8 * (kvq_calib_row_bytes(c->rates[k], d) - 2), sd->bits + (size_t)k * d, &err))
            return false;
    return true;
}

static kvq_calib *synth_calib(int n_layer, int n_head_kv, int hd_k, int hd_v) {
    kvq_calib *c;
    kvq_error err;
    if (kvq_calib_alloc(&c, n_layer, n_head_kv, hd_k, hd_v, KVQ_CALIB_N_RATES, kvq_calib_rates, &err)) return NULL;
    test_rng r = { 0xca1b + (uint64_t)(n_layer * 7 + n_head_kv * 131 + hd_k * 1009 + hd_v), 0, 0 };
    for (int l = 0; l < n_layer; l++)
        for (int h = 0; h < n_head_kv; h++)
            for (int s = 0; s < 2; s++) {
                kvq_calib_side *sd = kvq_calib_side_at(c, l, h, s == 1);
                if (!synth_side(sd, c, &r)) { kvq_calib_free(c); return NULL; }
                kvq_calib_side_finish(sd, s == 1);
            }
    return c;
}

const kvq_calib *attn_test_calib(int n_layer, int n_head_kv, int hd_k, int hd_v) {
    enum { MAX_SHAPES = 32 };
    static struct { int shape[4]; kvq_calib *c; } made[MAX_SHAPES];
    static int n_made;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    const int shape[4] = { n_layer, n_head_kv, hd_k, hd_v };
    pthread_mutex_lock(&lock);
    kvq_calib *found = NULL;
    for (int i = 0; i < n_made && !found; i++)
        if (!memcmp(made[i].shape, shape, sizeof shape)) found = made[i].c;
    if (!found && n_made < MAX_SHAPES && (found = synth_calib(n_layer, n_head_kv, hd_k, hd_v))) {
        memcpy(made[n_made].shape, shape, sizeof shape);
        made[n_made++].c = found;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

static bool is_calibrated(kvq_type t) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    return tr && tr->calib_rate > 0;
}

void attn_params(kvq_cache_params *p, int n_head_kv, int hd_k, int hd_v, int n_ctx, kvq_type tk,
                 kvq_type tv, kvq_rot_mode rot) {
    kvq_cache_params_default(p);
    p->n_layer = 1;
    p->n_head_kv = n_head_kv;
    p->head_dim_k = hd_k;
    p->head_dim_v = hd_v;
    p->n_ctx = n_ctx;
    p->max_batch = n_ctx;
    p->type_k = tk;
    p->type_v = tv;
    memset(&p->rot, 0, sizeof p->rot);
    p->rot.mode = rot;
    p->rot.mode_k = p->rot.mode_v = KVQ_ROT_AUTO;
    if (is_calibrated(tk) || is_calibrated(tv)) p->calib = attn_test_calib(1, n_head_kv, hd_k, hd_v);
}

static bool fill_range(kvq_cache *c, const attn_data *d, int batch, int p_begin, int p_end) {
    for (int p0 = p_begin; p0 < p_end; p0 += batch) {
        const int n = KVQ_MIN(batch, p_end - p0);
        kvq_error err;
        if (kvq_cache_write(c, 0, p0, n, d->k + (size_t)p0 * d->n_head_kv * d->hd_k,
                            d->v + (size_t)p0 * d->n_head_kv * d->hd_v, &err) != KVQ_OK) {
            fprintf(stderr, "attn_fill: %s\n", err.msg);
            return false;
        }
    }
    return true;
}

bool attn_fill(kvq_cache *c, const attn_data *d, int batch) { return fill_range(c, d, batch, 0, d->n_tok); }

bool attn_fill_upto(kvq_cache *c, const attn_data *d, int batch, int from) {
    return fill_range(c, d, batch, 0, from) && fill_range(c, d, d->n_tok, from, d->n_tok);
}

/* softmax(q . k_p * scale) weighted sum of v_p, p = 0..n_keys-1, in double.
 * key(p) / val(p) return the rows to use; q_body (when not NULL) is the
 * query for the keys is_body(p) names (the rounded query of the integer
 * kernels, attn_block.h). */
typedef const float *(*row_fn)(void *ctx, int p);
typedef bool (*body_fn)(void *ctx, int p);
static void attend_one_q(const float *q, const float *q_body, body_fn is_body, int hd_k, int hd_v, int n_keys,
                         float scale, row_fn key, row_fn val, void *ctx, double *out) {
    double *s = malloc((size_t)n_keys * sizeof(double));
    if (!s) abort();
    double mx = -INFINITY, sum = 0.0;
    for (int p = 0; p < n_keys; p++) {
        const float *k = key(ctx, p);
        const float *qp = q_body && is_body(ctx, p) ? q_body : q;
        double dot = 0.0;
        for (int i = 0; i < hd_k; i++) dot += (double)qp[i] * k[i];
        s[p] = dot * scale;
        if (s[p] > mx) mx = s[p];
    }
    for (int p = 0; p < n_keys; p++) sum += (s[p] = exp(s[p] - mx));
    for (int i = 0; i < hd_v; i++) out[i] = 0.0;
    for (int p = 0; p < n_keys; p++) {
        const float *v = val(ctx, p);
        for (int i = 0; i < hd_v; i++) out[i] += s[p] / sum * v[i];
    }
    free(s);
}

static void attend_one(const float *q, int hd_k, int hd_v, int n_keys, float scale, row_fn key, row_fn val,
                       void *ctx, double *out) {
    attend_one_q(q, NULL, NULL, hd_k, hd_v, n_keys, scale, key, val, ctx, out);
}

typedef struct plain_ctx { const attn_data *d; int kvh; } plain_ctx;
static const float *plain_key(void *ctx, int p) {
    const plain_ctx *c = ctx;
    return c->d->k + ((size_t)p * c->d->n_head_kv + c->kvh) * c->d->hd_k;
}
static const float *plain_val(void *ctx, int p) {
    const plain_ctx *c = ctx;
    return c->d->v + ((size_t)p * c->d->n_head_kv + c->kvh) * c->d->hd_v;
}

void attn_ref_plain(const attn_data *d, int pos, int n, float scale, float *out) {
    double acc[512];
    const int group = d->n_head / d->n_head_kv;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < d->n_head; h++) {
            plain_ctx pc = { d, h / group };
            const float *q = d->q + ((size_t)(pos + i) * d->n_head + h) * d->hd_k;
            attend_one(q, d->hd_k, d->hd_v, pos + i + 1, scale, plain_key, plain_val, &pc, acc);
            float *o = out + ((size_t)i * d->n_head + h) * d->hd_v;
            for (int j = 0; j < d->hd_v; j++) o[j] = (float)acc[j];
        }
}

/* Cached rows of one KV head, dequantised once: for each position its
 * body, ring (when still held) and sink value; picked per query. */
typedef struct cache_ctx {
    const float *body_k, *body_v, *exact_k, *exact_v;  /* [n_keys][store_dim] */
    const kvq_cache *c;
    int q_pos, dim_k, dim_v;
} cache_ctx;

/* docs/spec/attention.md §3 and docs/kvarn.md, written independently of the kernel:
 * rows: the first sink_rows keys and the query's last tail keys are exact;
 * tiles: also every key whose tile is not complete within 0..q_pos, and
 * the last tail/128 complete tiles. */
static bool use_exact(const kvq_cache_side *sd, int q_pos, int p) {
    if (p < sd->sink_rows) return true;
    if (sd->layout == KVQ_LAYOUT_ROWS) return p >= q_pos - (sd->ring_rows ? sd->tail_tokens : 0) + 1;
    const int complete_tiles = (q_pos + 1) / 128;
    return p / 128 >= complete_tiles - sd->tail_tokens / 128;
}
static const float *cache_key(void *ctx, int p) {
    const cache_ctx *cc = ctx;
    return (use_exact(&cc->c->k[0], cc->q_pos, p) ? cc->exact_k : cc->body_k) + (size_t)p * cc->dim_k;
}
static bool cache_key_is_body(void *ctx, int p) {
    const cache_ctx *cc = ctx;
    return !use_exact(&cc->c->k[0], cc->q_pos, p);
}
static const float *cache_val(void *ctx, int p) {
    const cache_ctx *cc = ctx;
    return (use_exact(&cc->c->v[0], cc->q_pos, p) ? cc->exact_v : cc->body_v) + (size_t)p * cc->dim_v;
}

/* A stored row of position p from one copy, or NaNs when that copy does
 * not hold it (a row no query here may read). */
static void read_or_nan(const kvq_cache *c, bool is_v, kvq_cache_part part, int kvh, int p, float *out) {
    const int dim = is_v ? c->v[0].store_dim : c->k[0].store_dim;
    if (kvq_cache_read_row(c, 0, is_v, part, kvh, p, out, NULL) == KVQ_OK) return;
    for (int i = 0; i < dim; i++) out[i] = NAN;
}

/* Exact copy of position p: the sink when it holds p, else the ring. */
static void read_exact(const kvq_cache *c, bool is_v, int kvh, int p, float *out) {
    const kvq_cache_side *sd = is_v ? &c->v[0] : &c->k[0];
    read_or_nan(c, is_v, p < sd->sink_rows ? KVQ_PART_SINK : KVQ_PART_RING, kvh, p, out);
}

bool attn_ref_cache(const kvq_cache *c, const attn_data *d, int pos, int n, float scale, float *out) {
    const kvq_cache_side *sk = &c->k[0], *sv = &c->v[0];
    const int n_keys = pos + n, dk = sk->store_dim, dv = sv->store_dim;
    const int group = d->n_head / d->n_head_kv;
    float *mem = malloc((size_t)n_keys * 2 * (dk + dv) * sizeof(float));
    if (!mem) return false;
    float *bk = mem, *bv = bk + (size_t)n_keys * dk, *ek = bv + (size_t)n_keys * dv,
          *ev = ek + (size_t)n_keys * dk;
    double acc[512];
    float qr[512], qhat[512], o[512];
    /* body rows of the 32-value block types: scored with the query rounded
     * over whole blocks (zero-padded), as the kernel rounds it */
    const bool int_k = attn_block_int_type(sk->type) && sk->layout == KVQ_LAYOUT_ROWS;
    const int dk_blocks = (dk + 31) / 32 * 32;
    for (int kvh = 0; kvh < d->n_head_kv; kvh++) {
        for (int p = 0; p < n_keys; p++) {
            read_or_nan(c, false, KVQ_PART_BODY, kvh, p, bk + (size_t)p * dk);
            read_or_nan(c, true, KVQ_PART_BODY, kvh, p, bv + (size_t)p * dv);
            read_exact(c, false, kvh, p, ek + (size_t)p * dk);
            read_exact(c, true, kvh, p, ev + (size_t)p * dv);
        }
        for (int i = 0; i < n; i++)
            for (int g = 0; g < group; g++) {
                const int h = kvh * group + g;
                kvq_cache_side_rotate_query(sk, kvh, d->q + ((size_t)(pos + i) * d->n_head + h) * d->hd_k, qr);
                cache_ctx cc = { bk, bv, ek, ev, c, pos + i, dk, dv };
                if (int_k) {
                    memset(qr + dk, 0, (size_t)(dk_blocks - dk) * sizeof(float));
                    attn_block_rounded_values(qr, dk_blocks, qhat);
                }
                attend_one_q(qr, int_k ? qhat : NULL, cache_key_is_body, dk, dv, pos + i + 1, scale, cache_key,
                             cache_val, &cc, acc);
                for (int j = 0; j < dv; j++) o[j] = (float)acc[j];
                kvq_cache_side_unrotate(sv, kvh, o);
                memcpy(out + ((size_t)i * d->n_head + h) * d->hd_v, o, (size_t)d->hd_v * sizeof(float));
            }
    }
    free(mem);
    return true;
}

double attn_rel_err(const float *a, const float *b, size_t n) {
    double diff = 0.0, mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= diff)) diff = e;               /* NaN makes the error NaN-large */
        if (fabs((double)b[i]) > mag) mag = fabs((double)b[i]);
    }
    return diff / (mag > 1e-30 ? mag : 1e-30);
}

kvq_cache *attn_layout_cache(kvq_type tk, kvq_type tv, bool k_lanes, bool v_pairs, int sink, int tail,
                             const attn_data *d) {
    kvq_cache_params p;
    attn_params(&p, d->n_head_kv, d->hd_k, d->hd_v, 256, tk, tv, KVQ_ROT_AUTO);
    p.sink_tokens = sink;
    p.tail_tokens = tail;
    kvq_cache *c = NULL;
    kvq_cache_set_lanes(k_lanes);
    kvq_cache_set_pairs(v_pairs);
    const kvq_status st = kvq_cache_create(&p, &c, NULL);
    kvq_cache_set_lanes(true);
    kvq_cache_set_pairs(true);
    return st == KVQ_OK ? c : NULL;
}

int attn_body_rows_differ(const kvq_cache *a, const kvq_cache *b, bool v, int n_pos, int step) {
    float ra[KVQ_MAX_HEAD_DIM], rb[KVQ_MAX_HEAD_DIM];
    const int n_head_kv = a->p.n_head_kv, dim = v ? a->p.head_dim_v : a->p.head_dim_k;
    for (int h = 0; h < n_head_kv; h++)
        for (int pos = 0; pos < n_pos; pos += step)
            if (kvq_cache_read_row(a, 0, v, KVQ_PART_BODY, h, pos, ra, NULL) != KVQ_OK ||
                kvq_cache_read_row(b, 0, v, KVQ_PART_BODY, h, pos, rb, NULL) != KVQ_OK ||
                memcmp(ra, rb, (size_t)dim * sizeof *ra))
                return h * n_pos + pos;
    return -1;
}

bool attn_attend_rows(kvq_cache *c, const attn_data *d, int pos, int n, float *out) {
    return kvq_cache_attend(c, 0, pos, n, d->n_head, d->q + (size_t)pos * d->n_head * d->hd_k,
                            1.0f / sqrtf((float)d->hd_k), out, NULL, NULL) == KVQ_OK;
}

static bool trellis_type(kvq_type t) {
    return t == KVQ_TYPE_TURBO2_TCQ || t == KVQ_TYPE_TURBO3_TCQ || t == KVQ_TYPE_TURBO4_TCQ;
}

int attn_chunk_keys(kvq_type t) {
    const kvq_row_hooks *hooks = kvq_row_hooks_of(t);
    return hooks ? kvq_row_hooks_keys(hooks) : ATTN_CHUNK_KEYS;
}

double attn_tolerance(kvq_type tk, kvq_type tv, int head_dim_v) {
    if (trellis_type(tk)) return 3e-3;
    const int padded = (head_dim_v + 31) / 32 * 32;   /* a rotated head may be stored at whole blocks */
    /* KVarN V records kept in pairs (cache_tiles_layout.h) */
    const kvq_type_traits *tr = kvq_type_get_scalar(tv);
    const bool kvarn_pairs = tr && tr->layout == KVQ_LAYOUT_TILES;
    /* their weights are rounded on one scale per run of up to ATTN_RUN_KEYS
     * (64) keys, twice the block types' chunk: the error's bound doubles
     * (kvarn4/kvarn2 at head_dim 512 measured 2.9e-4 with runs of 32,
     * 4.1e-4 with 64; the 4k model's KLD did not move, docs/kvarn.md) */
    if (kvarn_pairs) return 6e-4;
    /* a trellis V's decode sums on weights rounded to int16 (turbo.h); a
     * block type's V in pairs likewise, on one scale per chunk: the bound
     * grows with the chunk's keys (ATTN_CHUNK_KEYS, or the type's hooks'
     * max_keys: 64 for codes of 4 bits or fewer, attn_block.c) */
    if (trellis_type(tv)) return 3e-4;
    if (!kvq_vpairs_type(tv, head_dim_v) && !kvq_vpairs_type(tv, padded)) return 1e-5;
    return 3e-4 * attn_chunk_keys(tv) / ATTN_CHUNK_KEYS;
}

double attn_sq_err(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}
