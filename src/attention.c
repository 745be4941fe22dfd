/*
 * attention.c - causal attention over the quantised cache (ATTENTION.md §3-4).
 *
 * Per KV head and query row there is one pass over keys 0..pos+i.  Each key
 * is read from exactly one copy:
 *   sink  if key < sink_rows,
 *   ring  if key >= (pos+i) - tail_tokens + 1 (the query's own most recent
 *         tail_tokens positions),
 *   body  otherwise (quantised, read in packed form by the type's dot/axpy).
 * All query heads sharing the KV head (GQA) are scored per key, so K and V
 * rows are read once per group.  Scores go through one online softmax per
 * query head (running max and denominator in f32) in chunks of KEY_CHUNK
 * keys, so a rescale of the accumulator happens at most once per chunk.
 *
 * Q is rotated once per head with the K plan; the output is rotated back
 * once per head with the V plan (H^-1), so rotation never enters the loop.
 *
 * Work is split over (KV head x chunk of query rows x key range); key
 * ranges (for long contexts with few rows) produce partial (max, sum, acc)
 * triples that are merged by log-sum-exp.  How the keys are cut depends on
 * the shapes only, so results are bitwise independent of the thread count.
 *
 * The key loop (score_keys / accumulate_values) runs the chunked kernels of
 * attn_block.h by default: a chunk's K and V rows are unpacked once into
 * f32 tiles and every GQA head is scored and accumulated from them; the
 * per-key loop (the type's dot and axpy per key and head) is the reference
 * it is tested against (kvq_cache_attend_loop).
 */
#include "attn_block.h"
#include "cache.h"

#include <math.h>
#include <stdlib.h>

enum {
    KEY_CHUNK = ATTN_BLOCK_KEYS, /* keys scored before one softmax update      */
    MIN_SPLIT_KEYS = 256,  /* a key range shorter than this is not worth a task */
    TASKS_PER_THREAD = 4,  /* enough tasks for dynamic balancing             */
    SPLIT_TASKS = 16,      /* (KV head x row x key range) tasks wanted when rows are few */
};

/* One copy (body, ring or sink) of one layer's K and V rows. */
typedef struct attn_source {
    const kvq_type_traits *k, *v;
    const uint8_t *k_rows, *v_rows;   /* row 0 of KV head 0                 */
    size_t k_stride, v_stride;        /* bytes per row                      */
    size_t k_head, v_head;            /* bytes per KV head                  */
    int64_t k_len, v_len;             /* values per dot / axpy: whole blocks */
    bool k_f32, v_f32;                /* f32 rows: the chunked pass reads them in place */
    int ring;                         /* slot = pos % ring; 0: slot = pos   */
} attn_source;

typedef struct attn_job {
    int pos, n, n_head, group;
    int sink_rows, tail_tokens;
    float scale;
    attn_source src[3];               /* indexed by kvq_cache_part          */
    const float *q;                   /* rotated: [n][n_head][q_stride]     */
    int q_stride, acc_stride, head_dim_v;
    int rows_per_chunk, n_chunks, n_splits, split_len;
    float *scratch;                   /* per thread: scratch_floats each    */
    size_t scratch_floats;
    float *partial;                   /* [n_splits][n][n_head][acc_stride+2] */
    float *out;                       /* [n][n_head][head_dim_v]            */
    int block_v;
    const int8_t *signs_v;
    const attn_block_kernels *blk;    /* the chunked pass; NULL: per key (reference) */
} attn_job;

/* Online-softmax state of the `group` query heads of one row. */
typedef struct row_state {
    float *acc;     /* [group][acc_stride]  sum of weight * V  */
    float *m;       /* [group]              running max score  */
    float *l;       /* [group]              running sum of weights */
    float *w;       /* [group][KEY_CHUNK]   scores, then weights */
    float *k_tile;  /* chunked pass: [KEY_CHUNK][q_stride]   K rows as f32 */
    float *v_tile;  /* chunked pass: [KEY_CHUNK][acc_stride] V rows as f32 */
    float *zero;    /* chunked pass: [acc_stride] zeros */
} row_state;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int gcd(int a, int b) { while (b) { int t = a % b; a = b; b = t; } return a; }
static int lcm(int a, int b) { return a / gcd(a, b) * b; }

/* ------------------------------------------------------------ the pass */

static const uint8_t *source_row(const uint8_t *rows, size_t stride, size_t head_bytes, int ring,
                                 int kv_head, int pos) {
    const int slot = ring ? pos % ring : pos;
    return rows + (size_t)kv_head * head_bytes + (size_t)slot * stride;
}

/* Fold a chunk's scores of one head into its softmax state: raise the
 * running max (rescaling what was accumulated) and turn scores into
 * weights exp(s - max). */
static void softmax_update(const attn_job *jb, row_state *st, int j, int n_keys, int acc_stride) {
    float *w = st->w + (size_t)j * KEY_CHUNK;
    float mx = st->m[j];
    if (jb->blk) {                         /* a NaN score is left to poison its weight */
        const float cm = jb->blk->max(w, n_keys);
        mx = cm > mx ? cm : mx;
    } else {
        for (int t = 0; t < n_keys; t++) mx = w[t] > mx ? w[t] : mx;
    }
    if (mx == -INFINITY) {                 /* every score -inf: no weight */
        for (int t = 0; t < n_keys; t++) w[t] = 0.0f;
        return;
    }
    if (mx > st->m[j]) {
        if (st->m[j] != -INFINITY) {
            const float f = expf(st->m[j] - mx);
            float *acc = st->acc + (size_t)j * acc_stride;
            for (int d = 0; d < acc_stride; d++) acc[d] *= f;
            st->l[j] *= f;
        }
        st->m[j] = mx;
    }
    if (jb->blk) {                         /* vectorised exp (attn_block.h) */
        st->l[j] += jb->blk->exp_sum(w, n_keys, mx);
        return;
    }
    for (int t = 0; t < n_keys; t++) {
        w[t] = expf(w[t] - mx);
        st->l[j] += w[t];
    }
}

/* Scores of keys c0..c0+nk-1 against the group's query heads q:
 * st->w[j*KEY_CHUNK + t].  Chunked: the K rows unpacked once into a tile,
 * every head scored from it (attn_block.h); reference: dot per key and head. */
static void score_keys(const attn_job *jb, const attn_source *src, int kv_head, int c0, int nk,
                       const float *q, row_state *st) {
    const int G = jb->group;
    if (jb->blk) {
        const uint8_t *rows[KEY_CHUNK];
        for (int t = 0; t < nk; t++)
            rows[t] = source_row(src->k_rows, src->k_stride, src->k_head, src->ring, kv_head, c0 + t);
        const attn_block_rows k = { src->k, src->k_f32, src->k_len, st->k_tile, NULL };
        attn_block_scores(jb->blk, &k, rows, nk, q, G, jb->q_stride, jb->scale, st->w, KEY_CHUNK);
        return;
    }
    for (int t = 0; t < nk; t++) {
        const uint8_t *krow = source_row(src->k_rows, src->k_stride, src->k_head, src->ring, kv_head, c0 + t);
        for (int j = 0; j < G; j++)
            st->w[j * KEY_CHUNK + t] = src->k->dot(krow, q + (size_t)j * jb->q_stride, src->k_len) * jb->scale;
    }
}

/* acc_j += sum_t w[j][t] v_t for keys c0..c0+nk-1.  Chunked: V rows
 * unpacked once, added into all heads' accumulators in one pass;
 * reference: axpy per key and head of nonzero weight. */
static void accumulate_values(const attn_job *jb, const attn_source *src, int kv_head, int c0, int nk,
                              row_state *st) {
    const int G = jb->group;
    if (jb->blk) {
        const uint8_t *rows[KEY_CHUNK];
        for (int t = 0; t < nk; t++)
            rows[t] = source_row(src->v_rows, src->v_stride, src->v_head, src->ring, kv_head, c0 + t);
        const attn_block_rows v = { src->v, src->v_f32, src->v_len, st->v_tile, st->zero };
        attn_block_values(jb->blk, &v, rows, nk, st->w, KEY_CHUNK, G, st->acc, jb->acc_stride);
        return;
    }
    for (int t = 0; t < nk; t++) {
        const uint8_t *vrow = source_row(src->v_rows, src->v_stride, src->v_head, src->ring, kv_head, c0 + t);
        for (int j = 0; j < G; j++) {
            const float w = st->w[j * KEY_CHUNK + t];
            if (w != 0.0f) src->v->axpy(w, vrow, st->acc + (size_t)j * jb->acc_stride, src->v_len);
        }
    }
}

/* Keys [p0, p1) of one copy against the group's query heads q. */
static void attend_keys(const attn_job *jb, const attn_source *src, int kv_head, int p0, int p1,
                        const float *q, row_state *st) {
    const int G = jb->group;
    for (int c0 = p0; c0 < p1; c0 += KEY_CHUNK) {
        const int nk = KVQ_MIN(KEY_CHUNK, p1 - c0);
        score_keys(jb, src, kv_head, c0, nk, q, st);
        for (int j = 0; j < G; j++) softmax_update(jb, st, j, nk, jb->acc_stride);
        accumulate_values(jb, src, kv_head, c0, nk, st);
    }
}

/* out[d] = acc[d] / l, then back from the V rotation. */
static void finalize_row(const attn_job *jb, const float *acc, float l, float *out) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < jb->head_dim_v; d++) out[d] = acc[d] * inv;
    if (jb->block_v) kvq_rotate_row_inverse(out, jb->head_dim_v, jb->block_v, jb->signs_v);
}

/* One query row (all heads of one KV head) over the keys of one range. */
static void attend_row(const attn_job *jb, int kv_head, int i, int k_lo, int k_hi, row_state *st) {
    const int G = jb->group;
    const int qp = jb->pos + i;                      /* the query's position */
    memset(st->acc, 0, (size_t)G * (size_t)jb->acc_stride * sizeof(float));
    for (int j = 0; j < G; j++) { st->m[j] = -INFINITY; st->l[j] = 0.0f; }
    /* [0, sink_end): sink; [sink_end, tail_start): body; [tail_start, qp]: ring */
    const int sink_end = KVQ_MIN(jb->sink_rows, qp + 1);
    const int tail_start = KVQ_MAX(sink_end, qp + 1 - jb->tail_tokens);
    const int bounds[4] = { 0, sink_end, tail_start, qp + 1 };
    const kvq_cache_part parts[3] = { KVQ_PART_SINK, KVQ_PART_BODY, KVQ_PART_RING };
    const float *q = jb->q + ((size_t)i * jb->n_head + (size_t)kv_head * G) * jb->q_stride;
    for (int s = 0; s < 3; s++) {
        const int a = KVQ_MAX(bounds[s], k_lo), b = KVQ_MIN(bounds[s + 1], k_hi);
        if (a < b) attend_keys(jb, &jb->src[parts[s]], kv_head, a, b, q, st);
    }
}

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *jb = ctx;
    const int split = task % jb->n_splits;
    const int chunk = (task / jb->n_splits) % jb->n_chunks;
    const int kv_head = task / jb->n_splits / jb->n_chunks;
    const int G = jb->group;
    float *s = jb->scratch + (size_t)thread * jb->scratch_floats;
    row_state st;
    st.acc = s;
    st.m = st.acc + (size_t)G * jb->acc_stride;
    st.l = st.m + G;
    st.w = st.l + G;
    st.k_tile = st.v_tile = st.zero = NULL;
    if (jb->blk) {                                         /* the chunked pass's tiles */
        st.k_tile = st.w + (size_t)G * KEY_CHUNK;
        st.v_tile = st.k_tile + (size_t)KEY_CHUNK * jb->q_stride;
        st.zero = st.v_tile + (size_t)KEY_CHUNK * jb->acc_stride;
        memset(st.zero, 0, (size_t)jb->acc_stride * sizeof(float));
    }
    const int k_lo = split * jb->split_len, k_hi = k_lo + jb->split_len;
    const int r1 = KVQ_MIN(jb->n, (chunk + 1) * jb->rows_per_chunk);
    const size_t part_floats = (size_t)jb->acc_stride + 2;
    for (int i = chunk * jb->rows_per_chunk; i < r1; i++) {
        attend_row(jb, kv_head, i, k_lo, k_hi, &st);
        for (int j = 0; j < G; j++) {
            const size_t head = (size_t)kv_head * G + (size_t)j;
            const float *acc = st.acc + (size_t)j * jb->acc_stride;
            if (jb->n_splits == 1) {
                finalize_row(jb, acc, st.l[j], jb->out + ((size_t)i * jb->n_head + head) * jb->head_dim_v);
                continue;
            }
            float *p = jb->partial + (((size_t)split * jb->n + (size_t)i) * jb->n_head + head) * part_floats;
            memcpy(p, acc, (size_t)jb->acc_stride * sizeof(float));
            p[jb->acc_stride] = st.m[j];
            p[jb->acc_stride + 1] = st.l[j];
        }
    }
}

/* Log-sum-exp merge of the key ranges' partial results of one (row, head):
 * with M the largest partial max, acc = sum acc_s e^(m_s-M), l likewise. */
static void merge_splits(const attn_job *jb, int i, int head, float *acc) {
    const size_t part_floats = (size_t)jb->acc_stride + 2;
    const size_t stride = (size_t)jb->n * jb->n_head * part_floats;
    const float *p0 = jb->partial + ((size_t)i * jb->n_head + (size_t)head) * part_floats;
    float mx = -INFINITY, l = 0.0f;
    for (int s = 0; s < jb->n_splits; s++) {
        const float m = p0[s * stride + jb->acc_stride];
        mx = m > mx ? m : mx;
    }
    memset(acc, 0, (size_t)jb->acc_stride * sizeof(float));
    for (int s = 0; s < jb->n_splits; s++) {
        const float *p = p0 + s * stride;
        if (p[jb->acc_stride] == -INFINITY) continue;   /* range held no key of this row */
        const float f = expf(p[jb->acc_stride] - mx);
        for (int d = 0; d < jb->acc_stride; d++) acc[d] += f * p[d];
        l += f * p[jb->acc_stride + 1];
    }
    finalize_row(jb, acc, l, jb->out + ((size_t)i * jb->n_head + (size_t)head) * jb->head_dim_v);
}

/* ------------------------------------------------------------- set-up */

/* The row kernels of type t: from the caller's table, or the active ones. */
static const kvq_type_traits *traits_of(const kvq_type_traits *table, kvq_type t) {
    return table ? &table[t] : kvq_type_get(t);
}

static attn_source make_source(const kvq_cache *c, const kvq_cache_side *k, const kvq_cache_side *v,
                               kvq_cache_part part, const kvq_type_traits *table) {
    attn_source s;
    memset(&s, 0, sizeof s);
    const bool body = part == KVQ_PART_BODY;
    const int rows = body ? c->p.n_ctx : part == KVQ_PART_RING ? c->ring_rows : c->sink_rows;
    s.k = traits_of(table, body ? k->type : c->p.tail_type);
    s.v = traits_of(table, body ? v->type : c->p.tail_type);
    s.k_rows = body ? k->body : part == KVQ_PART_RING ? k->ring : k->sink;
    s.v_rows = body ? v->body : part == KVQ_PART_RING ? v->ring : v->sink;
    s.k_stride = body ? k->row_bytes : k->exact_row_bytes;
    s.v_stride = body ? v->row_bytes : v->exact_row_bytes;
    s.k_head = (size_t)rows * s.k_stride;
    s.v_head = (size_t)rows * s.v_stride;
    s.k_len = round_up(k->head_dim, s.k->block_size);
    s.v_len = round_up(v->head_dim, s.v->block_size);
    s.k_f32 = (body ? k->type : c->p.tail_type) == KVQ_TYPE_F32;
    s.v_f32 = (body ? v->type : c->p.tail_type) == KVQ_TYPE_F32;
    s.ring = part == KVQ_PART_RING ? c->ring_rows : 0;
    return s;
}

/* The chunked pass's kernels, or NULL for the per-key reference pass:
 * a caller's trait table alone selects the reference (its dot and axpy are
 * what such a caller tests). */
static const attn_block_kernels *choose_pass(const kvq_attend_opts *opts, const kvq_attend_loop *loop) {
    const kvq_attend_pass pass = loop ? loop->pass : KVQ_PASS_DEFAULT;
    if (pass == KVQ_PASS_PER_KEY || (pass == KVQ_PASS_DEFAULT && opts && opts->table)) return NULL;
    return loop && loop->block ? loop->block : attn_block_best();
}

/* Rows per chunk: about TASKS_PER_THREAD tasks per thread (rows are
 * independent, so this never changes a result).  Key ranges: when (KV
 * heads x rows) is small and the context long (decode), the keys are cut
 * into ranges of at least MIN_SPLIT_KEYS so that SPLIT_TASKS tasks exist.
 * The ranges depend on the shapes only, never on the thread count, so the
 * output is bitwise the same for any number of threads. */
static void choose_work(attn_job *jb, int n_head_kv, int n_threads, int forced_splits) {
    const int target = TASKS_PER_THREAD * n_threads;
    const int n_keys = jb->pos + jb->n;
    int chunks = n_threads > 1 ? KVQ_MIN(jb->n, (target + n_head_kv - 1) / n_head_kv) : 1;
    jb->rows_per_chunk = (jb->n + chunks - 1) / chunks;
    jb->n_chunks = (jb->n + jb->rows_per_chunk - 1) / jb->rows_per_chunk;
    int splits = 1;
    if (forced_splits > 0) {
        splits = forced_splits;
    } else if ((int64_t)n_head_kv * jb->n < SPLIT_TASKS) {
        const int want = (SPLIT_TASKS + n_head_kv * jb->n - 1) / (n_head_kv * jb->n);
        splits = KVQ_MAX(1, KVQ_MIN(want, n_keys / MIN_SPLIT_KEYS));
    }
    splits = KVQ_MIN(splits, n_keys);
    jb->split_len = (n_keys + splits - 1) / splits;
    jb->n_splits = (n_keys + jb->split_len - 1) / jb->split_len;
}

static kvq_status check_attend(const kvq_cache *c, int layer, int pos, int n, int n_head, const float *q,
                               const float *out, kvq_error *err) {
    if (!c || !q || !out) return kvq_fail(err, KVQ_ERR_ARG, "attend: NULL argument");
    if (layer < 0 || layer >= c->p.n_layer)
        return kvq_fail(err, KVQ_ERR_ARG, "attend: layer %d outside 0..%d", layer, c->p.n_layer - 1);
    if (n_head <= 0 || n_head % c->p.n_head_kv)
        return kvq_fail(err, KVQ_ERR_ARG, "attend: n_head %d is not a multiple of n_head_kv %d", n_head,
                        c->p.n_head_kv);
    const int stored = c->n_stored[layer];
    if (pos < 0 || n < 1 || (int64_t)pos + n > stored)
        return kvq_fail(err, KVQ_ERR_ARG, "attend: queries at %d..%d but layer %d holds %d positions "
                        "(write first, then attend)", pos, pos + n - 1, layer, stored);
    /* The oldest ring row a query needs must not have been overwritten. */
    if (c->ring_rows && KVQ_MAX(0, pos + 1 - c->p.tail_tokens) < stored - c->ring_rows)
        return kvq_fail(err, KVQ_ERR_ARG, "attend: queries from %d are too old for the tail ring "
                        "(holds positions %d..%d)", pos, stored - c->ring_rows, stored - 1);
    return KVQ_OK;
}

/* Rotated, zero-padded copy of every query row: [n][n_head][q_stride]. */
static void rotate_queries(const kvq_cache *c, const float *q, int rows, int q_stride, float *qr) {
    const int d = c->p.head_dim_k;
    for (int r = 0; r < rows; r++) {
        float *dst = qr + (size_t)r * q_stride;
        memcpy(dst, q + (size_t)r * d, (size_t)d * sizeof(float));
        memset(dst + d, 0, (size_t)(q_stride - d) * sizeof(float));
        if (c->plan.block_k) kvq_rotate_row(dst, d, c->plan.block_k, c->signs_k);
    }
}

kvq_status kvq_cache_attend_loop(kvq_cache *c, int layer, int pos, int n, int n_head, const float *q,
                                 float scale, float *out, kvq_pool *pool, const kvq_attend_opts *opts,
                                 const kvq_attend_loop *loop, kvq_error *err) {
    kvq_status st = check_attend(c, layer, pos, n, n_head, q, out, err);
    if (st != KVQ_OK) return st;
    const kvq_type_traits *table = opts ? opts->table : NULL;
    const kvq_cache_side *k = &c->k[layer], *v = &c->v[layer];
    attn_job jb;
    memset(&jb, 0, sizeof jb);
    jb.pos = pos;
    jb.n = n;
    jb.n_head = n_head;
    jb.group = n_head / c->p.n_head_kv;
    jb.sink_rows = c->sink_rows;
    jb.tail_tokens = c->ring_rows ? c->p.tail_tokens : 0;
    jb.scale = scale;
    for (int part = 0; part < 3; part++) jb.src[part] = make_source(c, k, v, (kvq_cache_part)part, table);
    const int exact_block = traits_of(table, c->p.tail_type)->block_size;
    jb.q_stride = (int)round_up(k->head_dim, lcm(jb.src[KVQ_PART_BODY].k->block_size, exact_block));
    jb.acc_stride = (int)round_up(v->head_dim, lcm(jb.src[KVQ_PART_BODY].v->block_size, exact_block));
    jb.head_dim_v = v->head_dim;
    jb.out = out;
    jb.block_v = c->plan.block_v;
    jb.signs_v = c->signs_v;
    const int n_threads = kvq_pool_threads(pool);
    choose_work(&jb, c->p.n_head_kv, n_threads, opts ? opts->key_splits : 0);

    jb.blk = choose_pass(opts, loop);
    const size_t q_floats = (size_t)n * n_head * jb.q_stride;
    jb.scratch_floats = (size_t)jb.group * ((size_t)jb.acc_stride + 2 + KEY_CHUNK);
    if (jb.blk)   /* K and V tiles and a zero row (attn_task) */
        jb.scratch_floats += (size_t)KEY_CHUNK * ((size_t)jb.q_stride + jb.acc_stride) + jb.acc_stride;
    const size_t part_floats = jb.n_splits > 1 ? (size_t)jb.n_splits * n * n_head * (jb.acc_stride + 2) : 0;
    const size_t merge_floats = jb.n_splits > 1 ? (size_t)jb.acc_stride : 0;
    float *mem = malloc((q_floats + (size_t)n_threads * jb.scratch_floats + part_floats + merge_floats) *
                        sizeof(float));
    if (!mem) return kvq_fail(err, KVQ_ERR_NOMEM, "attend: out of memory for %d query rows", n);
    float *qr = mem;
    jb.scratch = qr + q_floats;
    jb.partial = jb.scratch + (size_t)n_threads * jb.scratch_floats;
    rotate_queries(c, q, n * n_head, jb.q_stride, qr);
    jb.q = qr;

    kvq_pool_run(pool, attn_task, &jb, c->p.n_head_kv * jb.n_chunks * jb.n_splits);
    if (jb.n_splits > 1) {
        float *acc = jb.partial + part_floats;
        for (int i = 0; i < n; i++)
            for (int h = 0; h < n_head; h++) merge_splits(&jb, i, h, acc);
    }
    free(mem);
    return KVQ_OK;
}

kvq_status kvq_cache_attend_opts(kvq_cache *c, int layer, int pos, int n, int n_head, const float *q,
                                 float scale, float *out, kvq_pool *pool, const kvq_attend_opts *opts,
                                 kvq_error *err) {
    return kvq_cache_attend_loop(c, layer, pos, n, n_head, q, scale, out, pool, opts, NULL, err);
}

kvq_status kvq_cache_attend(kvq_cache *c, int layer, int pos, int n, int n_head, const float *q,
                            float scale, float *out, kvq_pool *pool, kvq_error *err) {
    return kvq_cache_attend_opts(c, layer, pos, n, n_head, q, scale, out, pool, NULL, err);
}
