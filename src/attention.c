/*
 * attention.c - causal attention over the quantised cache (docs/spec/attention.md §3-4).
 *
 * Per KV head and query row there is one pass over keys 0..pos+i.  Each key
 * is read from exactly one copy per side (kvq_cache_side_split): the sink
 * (first positions), the exact recent rows (the query's tail; for tile
 * sides also its incomplete tile), kept in the ring or, for the rows of
 * the batch just written, in the stage, or the body (quantised, read in packed
 * form: a row type's dot/axpy, or a tile type's records straight through
 * its tile hooks, src/tile_ops.h).  K and V may have different types and so different
 * splits; keys are cut at the boundaries of both.
 * All query heads sharing the KV head (GQA) are scored per key, so K and V
 * rows are read once per group.  Scores go through one online softmax per
 * query head (running max and denominator in f32) in chunks of KEY_CHUNK
 * keys, so a rescale of the accumulator happens at most once per chunk.
 *
 * Q is rotated once per head with the K side's rotation (the plan's, or
 * the format's own per-slice Hadamard); the output is rotated back once
 * per head with the V side's (H^-1), so rotation never enters the loop.
 *
 * Work is split over (KV head x chunk of query rows x key range); key
 * ranges (for long contexts with few rows) produce partial (max, sum, acc)
 * triples that are merged by log-sum-exp.  How the keys are cut depends on
 * the shapes only, so results are bitwise independent of the thread count.
 *
 * The key loop (score_keys / accumulate_values) runs the chunked kernels of
 * attn_block.h by default for row types: a chunk's K and V rows are
 * unpacked once into f32 tiles and every GQA head is scored and accumulated
 * from them; the per-key loop (the type's dot and axpy per key and head) is
 * the reference it is tested against (kvq_cache_attend_loop).  Tile bodies
 * (KVarN) always go through their format's hooks, which share one unpacking
 * of a run of keys between the heads in the same way.
 */
#include "attn_block.h"
#include "cache.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

enum {
    KEY_CHUNK = ATTN_BLOCK_KEYS, /* keys scored before one softmax update      */
    MIN_SPLIT_KEYS = 256,  /* a key range shorter than this is not worth a task */
    TASKS_PER_THREAD = 4,  /* enough tasks for dynamic balancing             */
    SPLIT_TASKS = 16,      /* (KV head x row x key range) tasks wanted when rows are few */
};

/* One copy (body, ring or sink) of one side (K or V) of a layer: rows read
 * with a type's row kernels, or (tile bodies) records read by the tile
 * hooks of its format (src/tile_ops.h). */
typedef struct attn_source {
    const kvq_cache_side *tiles;      /* non-NULL: records of this side     */
    const kvq_type_traits *tr;        /* row kernels                        */
    const uint8_t *rows;              /* row 0 of KV head 0                 */
    size_t stride;                    /* bytes per row                      */
    size_t head;                      /* bytes per KV head                  */
    int64_t len;                      /* values per dot / axpy: whole blocks */
    bool f32;                         /* f32 rows: the chunked pass reads them in place */
    int ring;                         /* slot = pos % ring; 0: slot = pos - first */
    int first;                        /* position of row 0 (the stage's batch) */
} attn_source;

typedef struct attn_job {
    int pos, n, n_head, group;
    float scale;
    const kvq_cache_side *side_k, *side_v;
    int stage_pos;                    /* the layer's batch in the stage, or INT_MAX */
    attn_source k[KVQ_PART_COUNT], v[KVQ_PART_COUNT]; /* indexed by kvq_cache_part */
    bool cut_at_tiles;                /* a tile side: runs never cross a tile */
    const float *q;                   /* rotated: [n][n_head][q_stride]     */
    int q_stride, acc_stride, head_dim_v;
    int rows_per_chunk, n_chunks, n_splits, split_len;
    float *scratch;                   /* per thread: scratch_floats each    */
    size_t scratch_floats;
    float *partial;                   /* [n_splits][n][n_head][acc_stride+2] */
    float *out;                       /* [n][n_head][head_dim_v]            */
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

static const uint8_t *source_row(const attn_source *src, int kv_head, int pos) {
    const int slot = src->ring ? pos % src->ring : pos - src->first;
    return src->rows + (size_t)kv_head * src->head + (size_t)slot * src->stride;
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
 * st->w[j*KEY_CHUNK + t].  Tile bodies: their format's hook.  Chunked:
 * the K rows unpacked once into a tile, every head scored from it
 * (attn_block.h); reference: dot per key and head. */
static void score_keys(const attn_job *jb, const attn_source *ks, int kv_head, int c0, int nk, const float *q,
                       row_state *st) {
    const int G = jb->group;
    if (ks->tiles) {
        ks->tiles->tile_ops->score(ks->tiles, kv_head, c0, nk, q, G, jb->q_stride, jb->scale, st->w, KEY_CHUNK);
        return;
    }
    if (jb->blk) {
        const uint8_t *rows[KEY_CHUNK];
        for (int t = 0; t < nk; t++) rows[t] = source_row(ks, kv_head, c0 + t);
        const attn_block_rows k = { ks->tr, ks->f32, ks->len, st->k_tile, NULL };
        attn_block_scores(jb->blk, &k, rows, nk, q, G, jb->q_stride, jb->scale, st->w, KEY_CHUNK);
        return;
    }
    for (int t = 0; t < nk; t++) {
        const uint8_t *krow = source_row(ks, kv_head, c0 + t);
        for (int j = 0; j < G; j++)
            st->w[j * KEY_CHUNK + t] = ks->tr->dot(krow, q + (size_t)j * jb->q_stride, ks->len) * jb->scale;
    }
}

/* acc_j += sum_t w[j][t] v_t for keys c0..c0+nk-1.  Tile bodies: their
 * format's hook.  Chunked: V rows unpacked once, added into all heads'
 * accumulators in one pass; reference: axpy per key and head of nonzero
 * weight. */
static void accumulate_values(const attn_job *jb, const attn_source *vs, int kv_head, int c0, int nk,
                              row_state *st) {
    const int G = jb->group;
    if (vs->tiles) {
        vs->tiles->tile_ops->accumulate(vs->tiles, kv_head, c0, nk, st->w, G, KEY_CHUNK, st->acc, jb->acc_stride);
        return;
    }
    if (jb->blk) {
        const uint8_t *rows[KEY_CHUNK];
        for (int t = 0; t < nk; t++) rows[t] = source_row(vs, kv_head, c0 + t);
        const attn_block_rows v = { vs->tr, vs->f32, vs->len, st->v_tile, st->zero };
        attn_block_values(jb->blk, &v, rows, nk, st->w, KEY_CHUNK, G, st->acc, jb->acc_stride);
        return;
    }
    for (int t = 0; t < nk; t++) {
        const uint8_t *vrow = source_row(vs, kv_head, c0 + t);
        for (int j = 0; j < G; j++) {
            const float wt = st->w[j * KEY_CHUNK + t];
            if (wt != 0.0f) vs->tr->axpy(wt, vrow, st->acc + (size_t)j * jb->acc_stride, vs->len);
        }
    }
}

/* Keys [p0, p1), K from one copy and V from one copy, against the group's
 * query heads q.  With a tile side, runs of keys stop at tile ends. */
static void attend_keys(const attn_job *jb, const attn_source *ks, const attn_source *vs, int kv_head, int p0,
                        int p1, const float *q, row_state *st) {
    const int G = jb->group;
    for (int c0 = p0; c0 < p1;) {
        int nk = KVQ_MIN(KEY_CHUNK, p1 - c0);
        if (jb->cut_at_tiles) nk = KVQ_MIN(nk, KVQ_KVARN_TILE - c0 % KVQ_KVARN_TILE);
        score_keys(jb, ks, kv_head, c0, nk, q, st);
        for (int j = 0; j < G; j++) softmax_update(jb, st, j, nk, jb->acc_stride);
        accumulate_values(jb, vs, kv_head, c0, nk, st);
        c0 += nk;
    }
}

/* out = first head_dim_v values of (acc / l) rotated back from the V
 * side's rotation (acc is scratch and is overwritten). */
static void finalize_row(const attn_job *jb, float *acc, float l, float *out) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < jb->side_v->store_dim; d++) acc[d] *= inv;
    kvq_cache_side_unrotate(jb->side_v, acc);
    memcpy(out, acc, (size_t)jb->head_dim_v * sizeof *out);
}

/* Which copy a key at or after `a` falls in, given one side's split. */
static kvq_cache_part part_at(kvq_key_split s, int a) {
    return a < s.sink_end      ? KVQ_PART_SINK
           : a < s.ring_start  ? KVQ_PART_BODY
           : a < s.stage_start ? KVQ_PART_RING
                               : KVQ_PART_STAGE;
}

/* One query row (all heads of one KV head) over the keys of one range.
 * K and V each have their own split into sink, body, ring and stage (their
 * types may differ); the keys are cut at every boundary of either side, so
 * each run reads K from one copy and V from one copy. */
static void attend_row(const attn_job *jb, int kv_head, int i, int k_lo, int k_hi, row_state *st) {
    const int G = jb->group;
    const int qp = jb->pos + i;                      /* the query's position */
    memset(st->acc, 0, (size_t)G * (size_t)jb->acc_stride * sizeof(float));
    for (int j = 0; j < G; j++) { st->m[j] = -INFINITY; st->l[j] = 0.0f; }
    const kvq_key_split sk = kvq_cache_side_split(jb->side_k, qp, jb->stage_pos);
    const kvq_key_split sv = kvq_cache_side_split(jb->side_v, qp, jb->stage_pos);
    enum { N_CUTS = 8 };
    int cuts[N_CUTS] = { 0, sk.sink_end, sk.ring_start, sk.stage_start, sv.sink_end, sv.ring_start, sv.stage_start, qp + 1 };
    for (int a = 1; a < N_CUTS - 1; a++)             /* sort the six inner cuts */
        for (int b = a; b > 1 && cuts[b] < cuts[b - 1]; b--) { int x = cuts[b]; cuts[b] = cuts[b - 1]; cuts[b - 1] = x; }
    const float *q = jb->q + ((size_t)i * jb->n_head + (size_t)kv_head * G) * jb->q_stride;
    for (int s = 0; s < N_CUTS - 1; s++) {
        const int a = KVQ_MAX(cuts[s], k_lo), b = KVQ_MIN(cuts[s + 1], k_hi);
        if (a < b) attend_keys(jb, &jb->k[part_at(sk, a)], &jb->v[part_at(sv, a)], kv_head, a, b, q, st);
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
            float *acc = st.acc + (size_t)j * jb->acc_stride;
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

static attn_source make_source(const kvq_cache *c, const kvq_cache_side *sd, kvq_cache_part part,
                               const kvq_type_traits *table) {
    attn_source s;
    memset(&s, 0, sizeof s);
    const bool body = part == KVQ_PART_BODY;
    if (body && sd->layout == KVQ_LAYOUT_TILES) {
        s.tiles = sd;
        return s;
    }
    const bool stage = part == KVQ_PART_STAGE;
    const int rows = body ? c->p.n_ctx : part == KVQ_PART_RING ? sd->ring_rows : stage ? c->stage.cap : sd->sink_rows;
    s.tr = traits_of(table, body ? sd->type : c->p.tail_type);
    s.rows = body ? sd->body : part == KVQ_PART_RING ? sd->ring : stage ? c->stage.rows[sd->side_index] : sd->sink;
    s.stride = body ? sd->row_bytes : stage ? c->stage.row_bytes[sd->side_index] : sd->exact_row_bytes;
    s.head = (size_t)rows * s.stride;
    s.first = stage ? c->stage.pos : 0;
    s.len = s.tr->row_bytes ? sd->store_dim : round_up(sd->store_dim, s.tr->block_size);
    s.f32 = (body ? sd->type : c->p.tail_type) == KVQ_TYPE_F32;
    s.ring = part == KVQ_PART_RING ? sd->ring_rows : 0;
    return s;
}

/* Values a rotated query (or accumulator) row holds: the side's stored
 * width, rounded up to whole blocks of every row type that reads it. */
static int padded_width(const kvq_cache_side *sd, const kvq_type_traits *body, int exact_block) {
    const int body_block = sd->layout == KVQ_LAYOUT_ROWS && !body->row_bytes ? body->block_size : 1;
    return (int)round_up(sd->store_dim, lcm(body_block, exact_block));
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
    /* The oldest exact row a query needs must still be held (ring_start
     * only grows with the query position).  It is not when a later write
     * has moved this batch's rows from the stage into the ring, or when
     * the queries are older than the tail. */
    const kvq_cache_side *sides[2] = { &c->k[layer], &c->v[layer] };
    for (int s = 0; s < 2; s++) {
        const kvq_cache_side *sd = sides[s];
        const int from = sd->ring_rows ? kvq_cache_exact_from(c, layer, sd) : 0;
        const int need = kvq_cache_side_split(sd, pos, kvq_cache_stage_pos(c, layer)).ring_start;
        if (sd->ring_rows && need < pos + 1 && need < from)
            return kvq_fail(err, KVQ_ERR_ARG, "attend: queries from %d need exact %c rows from %d, but layer %d holds "
                            "them from %d only (attend a batch before the next write; older queries are past the tail)",
                            pos, s ? 'V' : 'K', need, layer, from);
    }
    return KVQ_OK;
}

/* Rotated, zero-padded copy of every query row: [n][n_head][q_stride]. */
static void rotate_queries(const kvq_cache_side *sk, const float *q, int rows, int q_stride, float *qr) {
    for (int r = 0; r < rows; r++) {
        float *dst = qr + (size_t)r * q_stride;
        kvq_cache_side_rotate(sk, q + (size_t)r * sk->head_dim, dst);
        memset(dst + sk->store_dim, 0, (size_t)(q_stride - sk->store_dim) * sizeof(float));
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
    jb.scale = scale;
    jb.side_k = k;
    jb.side_v = v;
    jb.stage_pos = kvq_cache_stage_pos(c, layer);
    for (int part = 0; part < KVQ_PART_COUNT; part++) {
        jb.k[part] = make_source(c, k, (kvq_cache_part)part, table);
        jb.v[part] = make_source(c, v, (kvq_cache_part)part, table);
    }
    jb.cut_at_tiles = k->layout == KVQ_LAYOUT_TILES || v->layout == KVQ_LAYOUT_TILES;
    const int exact_block = traits_of(table, c->p.tail_type)->block_size;
    jb.q_stride = padded_width(k, traits_of(table, k->type), exact_block);
    jb.acc_stride = padded_width(v, traits_of(table, v->type), exact_block);
    jb.head_dim_v = v->head_dim;
    jb.out = out;
    const int n_threads = kvq_pool_threads(pool);
    choose_work(&jb, c->p.n_head_kv, n_threads, opts ? opts->key_splits : 0);

    jb.blk = choose_pass(opts, loop);
    const size_t q_floats = (size_t)n * n_head * jb.q_stride;
    jb.scratch_floats = (size_t)jb.group * ((size_t)jb.acc_stride + 2 + KEY_CHUNK);
    if (jb.blk)   /* K and V tiles and a zero row (attn_task) */
        jb.scratch_floats += (size_t)KEY_CHUNK * ((size_t)jb.q_stride + jb.acc_stride) + jb.acc_stride;
    const size_t part_floats = jb.n_splits > 1 ? (size_t)jb.n_splits * n * n_head * (jb.acc_stride + 2) : 0;
    const size_t merge_floats = jb.n_splits > 1 ? (size_t)jb.acc_stride : 0;
    float *mem = kvq_cache_attend_scratch(c, q_floats + (size_t)n_threads * jb.scratch_floats + part_floats +
                                                 merge_floats);
    if (!mem) return kvq_fail(err, KVQ_ERR_NOMEM, "attend: out of memory for %d query rows", n);
    float *qr = mem;
    jb.scratch = qr + q_floats;
    jb.partial = jb.scratch + (size_t)n_threads * jb.scratch_floats;
    rotate_queries(k, q, n * n_head, jb.q_stride, qr);
    jb.q = qr;

    kvq_pool_run(pool, attn_task, &jb, c->p.n_head_kv * jb.n_chunks * jb.n_splits);
    if (jb.n_splits > 1) {
        float *acc = jb.partial + part_floats;
        for (int i = 0; i < n; i++)
            for (int h = 0; h < n_head; h++) merge_splits(&jb, i, h, acc);
    }
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
