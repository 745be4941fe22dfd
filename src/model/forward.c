/*
 * forward.c - the transformer forward pass on CPU for llama, qwen2, qwen3.
 *
 * One call evaluates a batch of n tokens at positions pos..pos+n-1:
 *   x = embed(tokens)
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = h Wq, h Wk, h Wv (+ bias: qwen2)
 *               q, k = per-head rmsnorm (qwen3), then RoPE
 *               cache <- k, v;  a = attention(q, cache)
 *               x += a Wo
 *               h = rmsnorm(x) * ffn_norm
 *               x += (silu(h Wgate) * (h Wup)) Wdown
 *   logits = (rmsnorm(x) * output_norm) Woutput   (only the rows asked for)
 * Activations are f32 throughout by default; kvq_ctx_set_activations(ctx,
 * KVQ_ACT_INT8) rounds the input of every q8_0/q4_0/q4_K/q5_K/q6_K
 * product to int8 blocks, and the query that scores a q4_0/q4_1/kvarn4 K, as
 * llama.cpp does (src/format/act8.h, kvq_attend_opts.int8_query,
 * docs/engine.md); KVQ_ACT_QUERY8 rounds that query alone.
 */
#include "cache.h"
#include "matmul.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

enum { DEFAULT_MAX_BATCH = 512 };

struct kvq_ctx {
    const kvq_model *m;
    kvq_cache *cache;
    kvq_pool *pool;
    int max_batch;
    /* scratch, each sized for max_batch tokens */
    float *x;           /* residual stream   [B][n_embd]            */
    float *h;           /* normed input      [B][n_embd]            */
    float *q, *k, *v;   /* projections       [B][heads][head_dim]   */
    float *attn;        /* attention output  [B][n_head][head_dim_v] */
    float *gate, *up;   /* FFN               [B][n_ff]               */
    float *rope_cos, *rope_sin; /* [B][head_dim_k / 2]              */
    float *matmul_ws;   /* prefill weight rows: kvq_matmul_scratch_floats */
    size_t matmul_ws_floats;
    kvq_act act;        /* activations of the weight products (default f32) */
    void *xq;           /* KVQ_ACT_INT8: max_batch quantised rows */
    size_t xq_bytes;
    kvq_layer_observer observe;  /* calibration: sees q, k, v of every layer */
    void *observe_ud;
};

/* ------------------------------------------------------- element-wise */

/* y = x / sqrt(mean(x^2) + eps) * w; the sum of squares in double as
 * llama.cpp does, so that wide rows lose no precision. */
static void rmsnorm(const float *x, const float *w, float *y, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
}

static void rmsnorm_rows(const float *x, const float *w, float *y, int rows, int n, float eps) {
    for (int r = 0; r < rows; r++) rmsnorm(x + (size_t)r * n, w, y + (size_t)r * n, n, eps);
}

static void add_bias(float *y, const float *b, int rows, int n) {
    if (!b) return;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++) y[(size_t)r * n + i] += b[i];
}

static void add_into(float *x, const float *d, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += d[i];
}

static float silu(float x) { return x / (1.0f + expf(-x)); }

/* ------------------------------------------------------------------ RoPE */

/* cos/sin of every (token, pair) of the batch.  The angle of pair i at
 * position p is p * scale * base^(-2i/d), built as llama.cpp builds it: a
 * float running product of theta_scale = base^(-2/d), so results match. */
static void rope_tables(const kvq_model *m, int pos, int n, float *cos_t, float *sin_t) {
    const int half = m->info.head_dim_k / 2;
    const float theta_scale = powf(m->info.rope_base, -2.0f / (float)m->info.head_dim_k);
    for (int t = 0; t < n; t++) {
        float theta = (float)(pos + t) * m->rope_freq_scale;
        for (int i = 0; i < half; i++) {
            cos_t[(size_t)t * half + i] = cosf(theta);
            sin_t[(size_t)t * half + i] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

/* Rotate each head's pairs: adjacent (2i, 2i+1) for llama ("NORM"),
 * half-split (i, i+d/2) for qwen ("NEOX"). x: [n][n_heads][d]. */
static void rope_apply(float *x, int n, int n_heads, int d, bool neox, const float *cos_t, const float *sin_t) {
    const int half = d / 2;
    const int stride = neox ? 1 : 2;         /* distance between pair starts */
    const int partner = neox ? half : 1;     /* offset of a pair's 2nd value */
    for (int t = 0; t < n; t++) {
        const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
        for (int hd = 0; hd < n_heads; hd++) {
            float *v = x + ((size_t)t * n_heads + hd) * d;
            for (int i = 0; i < half; i++) {
                float *a = v + i * stride, *b = a + partner;
                const float x0 = *a, x1 = *b;
                *a = x0 * c[i] - x1 * s[i];
                *b = x0 * s[i] + x1 * c[i];
            }
        }
    }
}

/* ------------------------------------------------------------- matmul */

static void matmul(kvq_ctx *c, const kvq_weight *w, const float *x, int n, float *y) {
    if (c->act == KVQ_ACT_INT8 && kvq_matmul_act8(c->pool, KVQ_MATMUL_MIN_PARALLEL_MACS, c->xq, c->xq_bytes, w->type,
                                                  w->data, w->rows, w->cols, x, n, y))
        return;   /* else a type without an int8 path: f32 */
    kvq_matmul_scratch(c->pool, KVQ_MATMUL_MIN_PARALLEL_MACS, c->matmul_ws, c->matmul_ws_floats, w->type, w->data,
                       w->rows, w->cols, x, n, y);
}

/* One token's products with matrices of one type and width that read x,
 * as one job (kvq_matmul_group: one hand-off and one end, int8 X rounded
 * once; each output the bits of its own product): int8 activations where
 * the option is on and the type has them, as matmul. */
static void matmul_group(kvq_ctx *c, kvq_type type, int64_t cols, const float *x, int n_parts,
                         const kvq_matmul_out *outs) {
    if (c->act == KVQ_ACT_INT8 &&
        kvq_matmul_act8_group(c->pool, KVQ_MATMUL_MIN_PARALLEL_MACS, c->xq, c->xq_bytes, type, cols, x, n_parts, outs))
        return;
    kvq_matmul_group(c->pool, KVQ_MATMUL_MIN_PARALLEL_MACS, c->matmul_ws, c->matmul_ws_floats, type, cols, x, n_parts,
                     outs);
}

/* Products of one input with several matrices (q, k, v; gate, up): in
 * prefill one product each; for one token each run of neighbours of one
 * type and width is one group (Q4_K_M: q and k together, v alone). */
static void matmul_each(kvq_ctx *c, int count, const kvq_weight *const *w, const float *x, int n, float *const *y) {
    if (n > 1) {
        for (int i = 0; i < count; i++) matmul(c, w[i], x, n, y[i]);
        return;
    }
    for (int i = 0; i < count;) {
        const kvq_weight *first = w[i];
        kvq_matmul_out outs[KVQ_MATMUL_MAX_PARTS];
        int parts = 0;
        for (; i < count && parts < KVQ_MATMUL_MAX_PARTS && w[i]->type == first->type && w[i]->cols == first->cols; i++)
            outs[parts++] = (kvq_matmul_out){ w[i]->data, w[i]->rows, y[i] };
        matmul_group(c, first->type, first->cols, x, parts, outs);
    }
}

/* The pool for a job of `macs` multiply-adds: none (run on this thread)
 * when sharing would cost more than it saves; the same threshold as the
 * products' (matmul.h), as attention's per-key work is dot/axpy rows too. */
static kvq_pool *pool_for(const kvq_ctx *c, double macs) {
    return macs < KVQ_MATMUL_MIN_PARALLEL_MACS ? NULL : c->pool;
}

/* ---------------------------------------------------------- the layers */

static void embed(const kvq_model *m, const int32_t *tokens, int n, float *x) {
    const int E = m->info.n_embd;
    for (int t = 0; t < n; t++) {
        const uint8_t *row = (const uint8_t *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes;
        kvq_dequantize_row(m->tok_embd.type, row, x + (size_t)t * E, E);
    }
}

static kvq_status attention_block(kvq_ctx *c, int il, int pos, int n, kvq_error *err) {
    const kvq_model *m = c->m;
    const kvq_model_info *in = &m->info;
    const kvq_layer *L = &m->layers[il];
    const int dk = in->head_dim_k, dv = in->head_dim_v;
    const int q_w = in->n_head * dk, k_w = in->n_head_kv * dk, v_w = in->n_head_kv * dv;

    rmsnorm_rows(c->x, L->attn_norm, c->h, n, in->n_embd, in->rms_eps);
    const kvq_weight *const qkv[3] = { &L->wq, &L->wk, &L->wv };
    float *const qkv_out[3] = { c->q, c->k, c->v };
    matmul_each(c, 3, qkv, c->h, n, qkv_out);
    add_bias(c->q, L->bq, n, q_w);
    add_bias(c->k, L->bk, n, k_w);
    add_bias(c->v, L->bv, n, v_w);
    if (L->q_norm) {  /* qwen3: each head normalised on its own */
        rmsnorm_rows(c->q, L->q_norm, c->q, n * in->n_head, dk, in->rms_eps);
        rmsnorm_rows(c->k, L->k_norm, c->k, n * in->n_head_kv, dk, in->rms_eps);
    }
    rope_apply(c->q, n, in->n_head, dk, in->rope_neox, c->rope_cos, c->rope_sin);
    rope_apply(c->k, n, in->n_head_kv, dk, in->rope_neox, c->rope_cos, c->rope_sin);

    kvq_status st = kvq_cache_write_pool(c->cache, il, pos, n, c->k, c->v, c->pool, err);
    if (!st && c->observe) st = c->observe(c->observe_ud, il, pos, n, c->q, c->k, c->v, err);
    if (st) return st;
    /* each of the n queries of every head reads up to pos + n keys and values */
    const double attn_macs = (double)n * (double)(pos + n) * in->n_head * (dk + dv);
    /* int8 activations round the query to int8 for a q4_0/q4_1/kvarn4 K too, as
     * they do the weights' inputs; KVQ_ACT_QUERY8 only the query
     * (kvq_ctx_set_activations) */
    const kvq_attend_opts ao = { NULL, 0, c->act == KVQ_ACT_INT8 || c->act == KVQ_ACT_QUERY8 };
    st = kvq_cache_attend_opts(c->cache, il, pos, n, in->n_head, c->q, 1.0f / sqrtf((float)dk), c->attn,
                               pool_for(c, attn_macs), &ao, err);
    if (st) return st;
    matmul(c, &L->wo, c->attn, n, c->h);
    add_into(c->x, c->h, (size_t)n * in->n_embd);
    return KVQ_OK;
}

static void ffn_block(kvq_ctx *c, int il, int n) {
    const kvq_model_info *in = &c->m->info;
    const kvq_layer *L = &c->m->layers[il];
    rmsnorm_rows(c->x, L->ffn_norm, c->h, n, in->n_embd, in->rms_eps);
    const kvq_weight *const gate_up[2] = { &L->ffn_gate, &L->ffn_up };
    float *const gate_up_out[2] = { c->gate, c->up };
    matmul_each(c, 2, gate_up, c->h, n, gate_up_out);
    const size_t nf = (size_t)n * in->n_ff;
    for (size_t i = 0; i < nf; i++) c->gate[i] = silu(c->gate[i]) * c->up[i];
    matmul(c, &L->ffn_down, c->gate, n, c->h);
    add_into(c->x, c->h, (size_t)n * in->n_embd);
}

/* Final norm and output projection of rows [first, n) of the batch.
 * The weights were checked finite at load, but activations can still
 * overflow: a non-finite logit is an error here, not a NaN perplexity or
 * a garbage token later (a check of n_vocab values per row, next to the
 * n_vocab x n_embd product that made them). */
static kvq_status output_logits(kvq_ctx *c, int pos, int first, int n, float *logits, kvq_error *err) {
    const kvq_model_info *in = &c->m->info;
    const size_t E = (size_t)in->n_embd;
    rmsnorm_rows(c->x + first * E, c->m->output_norm, c->h, n - first, in->n_embd, in->rms_eps);
    matmul(c, &c->m->output, c->h, n - first, logits);
    const size_t count = (size_t)(n - first) * (size_t)in->n_vocab;
    uint32_t any = 0;
    for (size_t i = 0; i < count; i++) any |= (uint32_t)((kvq_f32_bits(logits[i]) & 0x7f800000u) == 0x7f800000u);
    for (size_t i = 0; any && i < count; i++)
        if (!isfinite(logits[i]))
            return kvq_fail(err, KVQ_ERR_FORMAT, "eval: non-finite logit (%s) at position %d: the model's activations "
                            "overflow", isnan(logits[i]) ? "nan" : "inf", pos + first + (int)(i / (size_t)in->n_vocab));
    return KVQ_OK;
}

kvq_status kvq_ctx_eval_rows(kvq_ctx *c, const int32_t *tokens, int n, int pos, int first_row, float *logits,
                             kvq_error *err) {
    if (!c || !tokens) return kvq_fail(err, KVQ_ERR_ARG, "eval: NULL context or tokens");
    if (n < 1 || n > c->max_batch)
        return kvq_fail(err, KVQ_ERR_ARG, "eval: %d tokens in one batch (1..%d allowed)", n, c->max_batch);
    if (pos < 0) return kvq_fail(err, KVQ_ERR_ARG, "eval: negative position %d", pos);
    if (first_row < 0 || first_row >= n) return kvq_fail(err, KVQ_ERR_ARG, "eval: first logits row %d of %d", first_row, n);
    const kvq_model_info *in = &c->m->info;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= in->n_vocab)
            return kvq_fail(err, KVQ_ERR_ARG, "eval: token id %d is outside the vocabulary (0..%d)",
                            (int)tokens[t], in->n_vocab - 1);

    embed(c->m, tokens, n, c->x);
    rope_tables(c->m, pos, n, c->rope_cos, c->rope_sin);
    for (int il = 0; il < in->n_layer; il++) {
        kvq_status st = attention_block(c, il, pos, n, err);
        if (st) return st;
        ffn_block(c, il, n);
    }
    return logits ? output_logits(c, pos, first_row, n, logits, err) : KVQ_OK;
}

kvq_status kvq_ctx_eval(kvq_ctx *c, const int32_t *tokens, int n, int pos, float *logits, bool last_only,
                        kvq_error *err) {
    return kvq_ctx_eval_rows(c, tokens, n, pos, last_only && n > 0 ? n - 1 : 0, logits, err);
}

/* ------------------------------------------------------------- context */

static int online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 1024 ? (int)n : 1;
}

static kvq_status alloc_scratch(kvq_ctx *c, int threads, kvq_error *err) {
    const kvq_model_info *in = &c->m->info;
    const size_t B = (size_t)c->max_batch;
    /* the widest weight row: wq/wk/wv/gate/up/output read n_embd, wo
     * n_head * head_dim_v, down n_ff */
    const int64_t max_cols = KVQ_MAX(in->n_embd, KVQ_MAX(in->n_head * in->head_dim_v, in->n_ff));
    c->matmul_ws_floats = kvq_matmul_scratch_floats(threads, max_cols);
    const size_t width = (size_t)KVQ_MAX(in->n_embd, KVQ_MAX(in->n_head * in->head_dim_v, in->n_head * in->head_dim_k));
    struct { float **p; size_t n; } bufs[] = {
        { &c->x, B * in->n_embd }, { &c->h, B * width },
        { &c->q, B * in->n_head * in->head_dim_k }, { &c->k, B * in->n_head_kv * in->head_dim_k },
        { &c->v, B * in->n_head_kv * in->head_dim_v }, { &c->attn, B * in->n_head * in->head_dim_v },
        { &c->gate, B * in->n_ff }, { &c->up, B * in->n_ff },
        { &c->rope_cos, B * (in->head_dim_k / 2) }, { &c->rope_sin, B * (in->head_dim_k / 2) },
        { &c->matmul_ws, c->matmul_ws_floats },
    };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(bufs); i++) {
        *bufs[i].p = kvq_malloc_n(bufs[i].n, sizeof(float));
        if (!*bufs[i].p) return kvq_fail(err, KVQ_ERR_NOMEM, "context: out of memory for scratch buffers");
    }
    return KVQ_OK;
}

kvq_status kvq_ctx_create(const kvq_model *m, const kvq_cache_params *cp, int n_threads, kvq_ctx **out,
                          kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "kvq_ctx_create: out is NULL");
    *out = NULL;
    if (!m || !cp) return kvq_fail(err, KVQ_ERR_ARG, "kvq_ctx_create: NULL model or cache parameters");
    if (cp->n_ctx < 1) return kvq_fail(err, KVQ_ERR_ARG, "context size %d must be at least 1", cp->n_ctx);
    const kvq_model_info *in = &m->info;
    kvq_cache_params p = *cp;
    p.n_layer = in->n_layer;
    p.n_head_kv = in->n_head_kv;
    p.head_dim_k = in->head_dim_k;
    p.head_dim_v = in->head_dim_v;
    if (p.max_batch < 1) p.max_batch = DEFAULT_MAX_BATCH;
    p.max_batch = KVQ_MIN(p.max_batch, p.n_ctx);

    kvq_ctx *c = kvq_calloc(1, sizeof *c);
    if (!c) return kvq_fail(err, KVQ_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->max_batch = p.max_batch;
    const int threads = n_threads > 0 ? n_threads : online_cores();   /* 0 = the default, named resolved */
    kvq_status st = kvq_cache_create(&p, &c->cache, err);
    if (!st) st = alloc_scratch(c, threads, err);
    if (!st) {
        c->pool = kvq_pool_create(threads);
        if (!c->pool) st = kvq_fail(err, KVQ_ERR_NOMEM, "context: cannot start %d threads", threads);
    }
    if (st) { kvq_ctx_free(c); return st; }
    *out = c;
    return KVQ_OK;
}

void kvq_ctx_free(kvq_ctx *c) {
    if (!c) return;
    kvq_pool_free(c->pool);
    kvq_cache_free(c->cache);
    float *bufs[] = { c->x, c->h, c->q, c->k, c->v, c->attn, c->gate, c->up, c->rope_cos, c->rope_sin, c->matmul_ws };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(bufs); i++) free(bufs[i]);
    free(c->xq);
    free(c);
}

/* The widest input of any product: wq/wk/wv/gate/up/output read n_embd,
 * wo n_head * head_dim_v, down n_ff. */
static int64_t widest_input(const kvq_model_info *in) {
    return KVQ_MAX(in->n_embd, KVQ_MAX(in->n_head * in->head_dim_v, in->n_ff));
}

kvq_status kvq_ctx_set_activations(kvq_ctx *c, kvq_act act, kvq_error *err) {
    if (!c) return kvq_fail(err, KVQ_ERR_ARG, "kvq_ctx_set_activations: ctx is NULL");
    if ((unsigned)act >= KVQ_ACT_COUNT)
        return kvq_fail(err, KVQ_ERR_ARG, "activations %d: expected KVQ_ACT_F32, KVQ_ACT_INT8 or KVQ_ACT_QUERY8",
                        (int)act);
    if (act == KVQ_ACT_INT8 && !c->xq) {
        const size_t bytes = kvq_matmul_act8_bytes(c->max_batch, widest_input(&c->m->info));
        c->xq = kvq_malloc(bytes);
        if (!c->xq) return kvq_fail(err, KVQ_ERR_NOMEM, "context: out of memory for int8 activations");
        c->xq_bytes = bytes;
    }
    c->act = act;
    return KVQ_OK;
}

kvq_act kvq_ctx_activations(const kvq_ctx *c) { return c ? c->act : KVQ_ACT_F32; }

kvq_cache *kvq_ctx_cache(kvq_ctx *c) { return c ? c->cache : NULL; }
kvq_pool *kvq_ctx_pool(const kvq_ctx *c) { return c->pool; }

void kvq_ctx_set_observer(kvq_ctx *c, kvq_layer_observer fn, void *ud) {
    c->observe = fn;
    c->observe_ud = ud;
}
const kvq_model *kvq_ctx_model(const kvq_ctx *c) { return c->m; }
int kvq_ctx_n_vocab(const kvq_ctx *c) { return c->m->info.n_vocab; }
int kvq_ctx_threads(const kvq_ctx *c) { return kvq_pool_threads(c->pool); }
int kvq_ctx_max_batch(const kvq_ctx *c) { return c->max_batch; }

kvq_status kvq_ctx_shift(kvq_ctx *c, int n_discard, int keep_first, kvq_error *err) {
    if (!c) return kvq_fail(err, KVQ_ERR_ARG, "shift: NULL context");
    const kvq_cache_rope rope = { c->m->info.rope_base, c->m->rope_freq_scale, c->m->info.rope_neox };
    return kvq_cache_shift(c->cache, n_discard, keep_first, &rope, err);
}
