/*
 * attention.c - causal attention over the quantised cache (docs/spec/attention.md §3-4).
 *
 * Per KV head and query row there is one pass over keys 0..pos+i.  Each key
 * is read from exactly one copy per side (kvq_cache_side_split): the sink
 * (first positions), the exact recent rows (the query's tail; for tile
 * sides also its incomplete tile), kept in the ring or, for the rows of
 * the batch just written, in the stage, or the body (quantised, read in
 * packed form).  Every copy is read through the hooks of its type's row
 * (row_hooks.h: score a chunk of keys, accumulate weighted values), so
 * this file never asks which format it reads.  K and V may have
 * different types and so different splits; keys are cut at the
 * boundaries of both.
 * All query heads sharing the KV head (GQA) are scored per key, so K and V
 * rows are read once per group.  Scores go through one online softmax per
 * query head (running max and denominator in f32) in chunks of chunk_keys
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
 * The key loop (score_keys / accumulate_values) hands each chunk to the
 * copy's hooks at the pass's kernel level (attn_block.h): a chunk's keys
 * are decoded once and every GQA head is scored and accumulated from
 * them.  The per-key loop (the type's dot and axpy per key and head,
 * attn_hooks_per_key) is the reference it is tested against
 * (kvq_cache_attend_loop); record types (KVarN, calibrated) have no dot
 * and run their own hooks in both.
 */
#include "attn_block.h"
#include "cache.h"
#include "cache_lanes.h"
#include "row_hooks.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

enum {
    KEY_CHUNK = ATTN_RUN_KEYS, /* most keys scored before one softmax update (chunk_keys) */
    MIN_CHUNK_KEYS = 8,    /* fewest keys of a decode chunk (side_chunk_keys) */
    MIN_SPLIT_KEYS = 256,  /* a key range shorter than this is not worth a task */
    TASKS_PER_THREAD = 4,  /* enough tasks for dynamic balancing             */
    GROUP_VECTORS = 8,     /* query vectors (rows x GQA heads) a prefill group scores at once */
    ATTN_GROUP_ROWS = 32,  /* most rows of a group (row_hooks.h, group_vectors) */
    SPLIT_TASKS = 16,      /* (KV head x row x key range) tasks wanted when rows are few */
};

/* One copy (body, ring, sink or stage) of one side (K or V) of a layer,
 * read through the hooks of its type's row (row_hooks.h). */
typedef struct attn_source {
    const kvq_row_hooks *hooks;       /* score / accumulate a chunk of its keys */
    attn_block_rows chunk;            /* what they read: traits, type, width, side */
    const uint8_t *rows;              /* row 0 of KV head 0; NULL: records  */
    size_t stride;                    /* bytes per row                      */
    size_t head;                      /* bytes per KV head                  */
    bool lanes;                       /* a K body in lanes or V body in pairs
                                         (cache_lanes.h): rows not addressable,
                                         read by score_lanes / accumulate_lanes
                                         or unpacked                        */
    int ring;                         /* slot = pos % ring; 0: slot = pos - first */
    int first;                        /* position of row 0 (the stage's batch) */
    bool rounded;                     /* the body: scored with the rounded query where it exists */
    int max_keys;                     /* most keys per call of its hooks (max_keys) */
} attn_source;

typedef struct attn_job {
    int pos, n, n_head, group;
    float scale;
    const kvq_cache_side *side_k, *side_v;
    int stage_pos;                    /* the layer's batch in the stage, or INT_MAX */
    attn_source k[KVQ_PART_COUNT], v[KVQ_PART_COUNT]; /* indexed by kvq_cache_part */
    int run_k, run_v;                 /* a chunk never crosses a multiple of these
                                         (the bodies' hooks' run_keys: a tile), 0: any */
    int chunk_keys;                   /* keys per chunk, <= KEY_CHUNK */
    const float *q;                   /* rotated: [n][n_head][q_stride]     */
    /* the same rounded to int16 per block (attn_block_round_query) when K's
     * body rows are scored by integer kernels, else NULL: codes
     * [n][n_head][q_stride], scales and code sums [n][n_head][q_stride/32];
     * q_hat (per-key pass with round_query): their values as floats */
    const int16_t *qi;
    const float *qi_scale, *q_hat;
    const int32_t *qi_sum;
    const int8_t *qi_bytes;           /* q8: qi as bytes (attn_block_query_bytes), else NULL */
    bool q8;                          /* qi rounded to int8 levels (opts->int8_query) */
    int q_stride, acc_stride, head_dim_v;
    int rows_per_chunk, n_chunks, n_splits, split_len;
    int group_rows;                   /* query rows processed together (attend_group) */
    float *scratch;                   /* per thread: scratch_floats each    */
    size_t scratch_floats;
    float *partial;                   /* [n_splits][n][n_head][acc_stride+2] */
    float *out;                       /* [n][n_head][head_dim_v]            */
    const attn_block_kernels *blk;    /* the chunked pass; NULL: per key (reference) */
    const attn_block_kernels *level;  /* the kernels the hooks run: blk, or the best */
} attn_job;

/* Online-softmax state of the query vectors of one row's `group` heads, or
 * of a group of rows ([row][head]). */
typedef struct row_state {
    float *acc;     /* [group][acc_stride]  sum of weight * V  */
    float *m;       /* [group]              running max score  */
    float *l;       /* [group]              running sum of weights */
    float *w;       /* [group][KEY_CHUNK]   scores, then weights */
    float *k_tile;  /* chunked pass: [KEY_CHUNK][q_stride]   K rows as f32 */
    float *v_tile;  /* chunked pass: [KEY_CHUNK][acc_stride] V rows as f32 */
    float *zero;    /* chunked pass: [acc_stride] zeros */
    /* chunked pass: a group of rows' query vectors side by side
     * (attend_group): [group_rows * group][q_stride] floats, int16 codes,
     * [..][q_stride/32] scales and sums */
    float *q_group, *qi_scale_group;
    int32_t *qi_sum_group;
    int16_t *qi_group;
    int8_t *qi_bytes_group;   /* q8: [group_rows * group][q_stride] bytes */
    attn_run_memo *memo;   /* the task's: what record hooks keep between chunks */
} row_state;

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static int gcd(int a, int b) { while (b) { int t = a % b; a = b; b = t; } return a; }
static int lcm(int a, int b) { return a / gcd(a, b) * b; }

/* ------------------------------------------------------------ the pass */

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

/* The chunk's rows of one KV head, or NULL for a copy whose hooks read
 * its side's records instead. */
static const uint8_t *const *source_rows(const attn_source *src, int kv_head, int c0, int nk, const uint8_t **rows) {
    if (!src->rows) return NULL;
    /* one row's address, then steps of one row (wrapping at the ring's
     * end): no division or multiply per key, and nothing re-read from
     * *src between the stores */
    const uint8_t *const head = src->rows + (size_t)kv_head * src->head;
    const size_t stride = src->stride;
    const int ring = src->ring;
    int slot = ring ? c0 % ring : c0 - src->first;
    const uint8_t *p = head + (size_t)slot * stride;
    if (!ring || slot + nk <= ring) {   /* no wrap: the usual case, a loop without a branch */
        for (int t = 0; t < nk; t++) rows[t] = p + (size_t)t * stride;
        return rows;
    }
    for (int t = 0; t < nk; t++) {
        rows[t] = p;
        p += stride;
        if (ring && ++slot == ring) { slot = 0; p = head; }
    }
    return rows;
}

/* The chunk's rows of a lanes body (cache_lanes.h) unpacked into `bytes`
 * (KEY_CHUNK x KVQ_LANES_ROW_MAX), for hooks that read rows only. */
static const uint8_t *const *unpack_lanes(const attn_source *src, int kv_head, int c0, int nk, uint8_t *bytes,
                                          const uint8_t **rows) {
    for (int t = 0; t < nk; t++) {
        uint8_t *row = bytes + (size_t)t * KVQ_LANES_ROW_MAX;
        kvq_cache_body_get(src->chunk.sd, kv_head, c0 + t, row);
        rows[t] = row;
    }
    return rows;
}

/* score_keys on a lanes body whose hooks cannot read it at this level
 * (the per-key reference, the tile levels, a caller's table). */
static void score_unpacked(const attn_job *jb, const attn_source *ks, const attn_block_rows *k, int c0, int nk,
                           const attn_query *q, int G, row_state *st) {
    uint8_t bytes[KEY_CHUNK * KVQ_LANES_ROW_MAX];
    const uint8_t *buf[KEY_CHUNK];
    ks->hooks->score(jb->level, k, unpack_lanes(ks, k->kv_head, c0, nk, bytes, buf), nk, q, G, jb->scale, st->w,
                     KEY_CHUNK);
}

/* Scores of keys c0..c0+nk-1 against the group's query heads:
 * st->w[j*KEY_CHUNK + t], by the copy's hooks.  Exact copies are scored
 * with the float query; the body with the rounded one where the pass
 * made it (the chunked pass's integer kernels, or their per-key
 * reference q_hat). */
static void score_keys(const attn_job *jb, const attn_source *ks, int kv_head, int c0, int nk, const attn_query *aq,
                       const float *q_hat, int G, row_state *st) {
    const uint8_t *buf[KEY_CHUNK], *const *rows = ks->lanes ? NULL : source_rows(ks, kv_head, c0, nk, buf);
    attn_block_rows k = ks->chunk;
    k.tile = st->k_tile;
    k.kv_head = kv_head;
    k.key0 = c0;
    k.memo = st->memo;
    attn_query q = *aq;
    if (!ks->rounded) q.qi = NULL;
    else if (q_hat) q.q = q_hat;
    if (ks->lanes) {
        k.lanes = ks->rows + (size_t)kv_head * ks->head;
        if (!ks->hooks->score_lanes || !ks->hooks->score_lanes(jb->level, &k, nk, &q, G, jb->scale, st->w, KEY_CHUNK))
            score_unpacked(jb, ks, &k, c0, nk, &q, G, st);
        return;
    }
    ks->hooks->score(jb->level, &k, rows, nk, &q, G, jb->scale, st->w, KEY_CHUNK);
}

/* accumulate_values on a pairs body whose hooks cannot read it here (as
 * score_unpacked: the rows' bytes on this frame, not the hot path's). */
static void accumulate_unpacked(const attn_job *jb, const attn_source *vs, const attn_block_rows *v, int c0, int nk,
                                int G, row_state *st) {
    uint8_t bytes[KEY_CHUNK * KVQ_LANES_ROW_MAX];
    const uint8_t *buf[KEY_CHUNK];
    vs->hooks->accumulate(jb->level, v, unpack_lanes(vs, v->kv_head, c0, nk, bytes, buf), nk, st->w, KEY_CHUNK, G,
                          st->acc, jb->acc_stride);
}

/* acc_j += sum_t w[j][t] v_t for keys c0..c0+nk-1, by the copy's hooks
 * (a V body in pairs: read in place where the hooks can at this level and
 * every weight and scale is finite, else unpacked). */
static void accumulate_values(const attn_job *jb, const attn_source *vs, int kv_head, int c0, int nk, int G,
                              row_state *st) {
    attn_block_rows v = vs->chunk;
    v.tile = st->v_tile;
    v.zero = st->zero;
    v.kv_head = kv_head;
    v.key0 = c0;
    v.memo = st->memo;
    if (vs->lanes) {
        v.lanes = vs->rows + (size_t)kv_head * vs->head;
        if (!vs->hooks->accumulate_lanes ||
            !vs->hooks->accumulate_lanes(jb->level, &v, nk, st->w, KEY_CHUNK, G, st->acc, jb->acc_stride))
            accumulate_unpacked(jb, vs, &v, c0, nk, G, st);
        return;
    }
    const uint8_t *buf[KEY_CHUNK];
    vs->hooks->accumulate(jb->level, &v, source_rows(vs, kv_head, c0, nk, buf), nk, st->w, KEY_CHUNK, G, st->acc,
                          jb->acc_stride);
}

/* Keys [p0, p1), K from one copy and V from one copy, against the nq
 * query vectors q (the GQA heads of one row, or of a group of rows).  Runs
 * of keys stop where a body's hooks ask (run_keys: KVarN's tile ends) and
 * hold at most what both copies' hooks take (max_keys). */
static void attend_keys(const attn_job *jb, const attn_source *ks, const attn_source *vs, int kv_head, int p0,
                        int p1, const attn_query *q, const float *q_hat, int nq, row_state *st) {
    if (st->memo) st->memo->k_rec = st->memo->v_rec = NULL;   /* new query vectors */
    const int chunk = KVQ_MIN(jb->chunk_keys, KVQ_MIN(ks->max_keys, vs->max_keys));
    for (int c0 = p0; c0 < p1;) {
        int nk = KVQ_MIN(chunk, p1 - c0);
        if ((ks->lanes || vs->lanes) && chunk > KVQ_LANES)   /* chunks from whole groups on */
            nk = KVQ_MIN(nk, chunk - c0 % KVQ_LANES);
        if (jb->run_k) nk = KVQ_MIN(nk, jb->run_k - c0 % jb->run_k);
        if (jb->run_v) nk = KVQ_MIN(nk, jb->run_v - c0 % jb->run_v);
        score_keys(jb, ks, kv_head, c0, nk, q, q_hat, nq, st);
        for (int j = 0; j < nq; j++) softmax_update(jb, st, j, nk, jb->acc_stride);
        accumulate_values(jb, vs, kv_head, c0, nk, nq, st);
        c0 += nk;
    }
}

/* out = first head_dim_v values of (acc / l) rotated back from the V
 * side's rotation (acc is scratch and is overwritten). */
static void finalize_row(const attn_job *jb, int kv_head, float *acc, float l, float *out) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = 0; d < jb->side_v->store_dim; d++) acc[d] *= inv;
    kvq_cache_side_unrotate(jb->side_v, kv_head, acc);
    memcpy(out, acc, (size_t)jb->head_dim_v * sizeof *out);
}

/* Which copy a key at or after `a` falls in, given one side's split. */
static kvq_cache_part part_at(kvq_key_split s, int a) {
    return a < s.sink_end      ? KVQ_PART_SINK
           : a < s.ring_start  ? KVQ_PART_BODY
           : a < s.stage_start ? KVQ_PART_RING
                               : KVQ_PART_STAGE;
}

/* The cuts of one row's keys: 0, the six inner boundaries of K's and V's
 * splits (sorted), qp + 1; between two cuts K and V each come from one copy. */
enum { N_CUTS = 8 };
static void row_cuts(const kvq_key_split *sk, const kvq_key_split *sv, int qp, int cuts[N_CUTS]) {
    const int c[N_CUTS] = { 0, sk->sink_end, sk->ring_start, sk->stage_start, sv->sink_end, sv->ring_start,
                            sv->stage_start, qp + 1 };
    memcpy(cuts, c, sizeof c);
    for (int a = 1; a < N_CUTS - 1; a++)             /* sort the six inner cuts */
        for (int b = a; b > 1 && cuts[b] < cuts[b - 1]; b--) { int x = cuts[b]; cuts[b] = cuts[b - 1]; cuts[b - 1] = x; }
}

/* The query vectors of row i's GQA group (float, rounded, their values). */
static attn_query row_query(const attn_job *jb, int kv_head, int i, const float **q_hat) {
    const size_t head0 = (size_t)i * jb->n_head + (size_t)kv_head * jb->group, qb = (size_t)jb->q_stride / 32;
    const attn_query q = { jb->q + head0 * jb->q_stride, jb->qi ? jb->qi + head0 * jb->q_stride : NULL,
                           jb->qi ? jb->qi_scale + head0 * qb : NULL, jb->qi ? jb->qi_sum + head0 * qb : NULL,
                           jb->q_stride, jb->q8, jb->qi_bytes ? jb->qi_bytes + head0 * jb->q_stride : NULL };
    *q_hat = jb->q_hat ? jb->q_hat + head0 * jb->q_stride : NULL;
    return q;
}

/* Row r's part of a group's state: its G query vectors. */
static row_state row_part(const attn_job *jb, const row_state *st, int r) {
    row_state p = *st;
    const size_t j0 = (size_t)r * jb->group;
    p.acc += j0 * jb->acc_stride;
    p.m += j0;
    p.l += j0;
    p.w += j0 * KEY_CHUNK;
    return p;
}

/* One query row (all heads of one KV head) over its keys in [lo, hi):
 * cut at every boundary of either side's split, so each run reads K from
 * one copy and V from one copy. */
static void attend_row(const attn_job *jb, int kv_head, int i, int lo, int hi, row_state *st) {
    const int qp = jb->pos + i;                      /* the query's position */
    const kvq_key_split sk = kvq_cache_side_split(jb->side_k, qp, jb->stage_pos);
    const kvq_key_split sv = kvq_cache_side_split(jb->side_v, qp, jb->stage_pos);
    int cuts[N_CUTS];
    row_cuts(&sk, &sv, qp, cuts);
    const float *q_hat;
    const attn_query q = row_query(jb, kv_head, i, &q_hat);
    for (int s = 0; s < N_CUTS - 1; s++) {
        const int a = KVQ_MAX(cuts[s], lo), b = KVQ_MIN(cuts[s + 1], hi);
        if (a < b) attend_keys(jb, &jb->k[part_at(sk, a)], &jb->v[part_at(sv, a)], kv_head, a, b, &q, q_hat,
                               jb->group, st);
    }
}

/* The group's query vectors side by side ([r][g], as its state), gathered
 * once: the kernels take vectors at one stride. */
static attn_query group_query(const attn_job *jb, int kv_head, int i0, int R, const row_state *st) {
    const size_t G = (size_t)jb->group, qs = (size_t)jb->q_stride, qb = qs / 32;
    attn_query g = { st->q_group, jb->qi ? st->qi_group : NULL, jb->qi ? st->qi_scale_group : NULL,
                     jb->qi ? st->qi_sum_group : NULL, jb->q_stride, jb->q8, jb->qi_bytes ? st->qi_bytes_group : NULL };
    for (int r = 0; r < R; r++) {
        const float *unused;
        const attn_query q = row_query(jb, kv_head, i0 + r, &unused);
        memcpy(st->q_group + r * G * qs, q.q, G * qs * sizeof(float));
        if (!jb->qi) continue;
        memcpy(st->qi_group + r * G * qs, q.qi, G * qs * sizeof(int16_t));
        memcpy(st->qi_scale_group + r * G * qb, q.scale, G * qb * sizeof(float));
        memcpy(st->qi_sum_group + r * G * qb, q.sum, G * qb * sizeof(int32_t));
        if (q.qb) memcpy(st->qi_bytes_group + r * G * qs, q.qb, G * qs);
    }
    return g;
}

/* R consecutive query rows i0.. (all heads of one KV head) over the keys
 * of one range.  The keys every row sees (up to the first row's position)
 * are processed once for all R x G query vectors wherever all rows read
 * them from the same copies: a chunk's K and V rows are decoded once per
 * group, not once per row.  Where the rows' splits differ (the few keys at
 * each moving boundary, R - 1 wide) and past the first row's position,
 * each row goes on alone.  R = 1 is the plain per-row pass. */
static void attend_group(const attn_job *jb, int kv_head, int i0, int R, int k_lo, int k_hi, row_state *st) {
    const int G = jb->group, nq = R * G;
    memset(st->acc, 0, (size_t)nq * (size_t)jb->acc_stride * sizeof(float));
    for (int j = 0; j < nq; j++) { st->m[j] = -INFINITY; st->l[j] = 0.0f; }
    if (R == 1) { attend_row(jb, kv_head, i0, k_lo, k_hi, st); return; }
    const int qp0 = jb->pos + i0, shared_hi = KVQ_MIN(k_hi, qp0 + 1);
    kvq_key_split sk[ATTN_GROUP_ROWS], sv[ATTN_GROUP_ROWS];
    int cuts[ATTN_GROUP_ROWS * N_CUTS + 2], n_cuts = 0;
    for (int r = 0; r < R; r++) {
        sk[r] = kvq_cache_side_split(jb->side_k, qp0 + r, jb->stage_pos);
        sv[r] = kvq_cache_side_split(jb->side_v, qp0 + r, jb->stage_pos);
        row_cuts(&sk[r], &sv[r], qp0 + r, cuts + n_cuts);
        n_cuts += N_CUTS;
    }
    cuts[n_cuts++] = k_lo;
    cuts[n_cuts++] = shared_hi;
    for (int a = 1; a < n_cuts; a++)                 /* sort all cuts */
        for (int b = a; b > 0 && cuts[b] < cuts[b - 1]; b--) { int x = cuts[b]; cuts[b] = cuts[b - 1]; cuts[b - 1] = x; }
    const attn_query gq = group_query(jb, kv_head, i0, R, st);
    for (int s = 0; s + 1 < n_cuts; s++) {
        const int a = KVQ_MAX(cuts[s], k_lo), b = KVQ_MIN(cuts[s + 1], shared_hi);
        if (a >= b) continue;
        bool same = true;
        for (int r = 1; r < R; r++)
            same &= part_at(sk[r], a) == part_at(sk[0], a) && part_at(sv[r], a) == part_at(sv[0], a);
        if (same) {
            attend_keys(jb, &jb->k[part_at(sk[0], a)], &jb->v[part_at(sv[0], a)], kv_head, a, b, &gq, NULL, nq, st);
            continue;
        }
        for (int r = 0; r < R; r++) {
            row_state p = row_part(jb, st, r);
            attend_row(jb, kv_head, i0 + r, a, b, &p);
        }
    }
    for (int r = 1; r < R; r++) {                    /* the keys only the later rows see */
        row_state p = row_part(jb, st, r);
        attend_row(jb, kv_head, i0 + r, KVQ_MAX(k_lo, qp0 + 1), k_hi, &p);
    }
}

static void attn_task(void *ctx, int task, int thread) {
    const attn_job *jb = ctx;
    const int split = task % jb->n_splits;
    const int chunk = (task / jb->n_splits) % jb->n_chunks;
    const int kv_head = task / jb->n_splits / jb->n_chunks;
    const int G = jb->group;
    const size_t nq = (size_t)jb->group_rows * G;
    float *s = jb->scratch + (size_t)thread * jb->scratch_floats;
    row_state st;
    memset(&st, 0, sizeof st);
    attn_run_memo memo;
    memo.k_rec = memo.v_rec = NULL;
    st.memo = &memo;
    st.acc = s;
    st.m = st.acc + nq * jb->acc_stride;
    st.l = st.m + nq;
    st.w = st.l + nq;
    if (jb->blk) {                                         /* the chunked pass's tiles, the group's queries */
        st.k_tile = st.w + nq * KEY_CHUNK;
        st.v_tile = st.k_tile + (size_t)KEY_CHUNK * jb->q_stride;
        st.zero = st.v_tile + (size_t)KEY_CHUNK * jb->acc_stride;
        memset(st.zero, 0, (size_t)jb->acc_stride * sizeof(float));
        st.q_group = st.zero + jb->acc_stride;
        st.qi_scale_group = st.q_group + nq * jb->q_stride;
        st.qi_sum_group = (int32_t *)(void *)(st.qi_scale_group + nq * (size_t)jb->q_stride / 32);
        st.qi_group = (int16_t *)(void *)(st.qi_sum_group + nq * (size_t)jb->q_stride / 32);
        st.qi_bytes_group = (int8_t *)(void *)(st.qi_group + nq * (size_t)jb->q_stride);
    }
    const int k_lo = split * jb->split_len, k_hi = k_lo + jb->split_len;
    const int r1 = KVQ_MIN(jb->n, (chunk + 1) * jb->rows_per_chunk);
    const size_t part_floats = (size_t)jb->acc_stride + 2;
    for (int i0 = chunk * jb->rows_per_chunk; i0 < r1; i0 += jb->group_rows) {
        const int R = KVQ_MIN(jb->group_rows, r1 - i0);
        attend_group(jb, kv_head, i0, R, k_lo, k_hi, &st);
        for (int r = 0; r < R; r++)
            for (int j = 0; j < G; j++) {
                const int i = i0 + r;
                const size_t head = (size_t)kv_head * G + (size_t)j, sj = (size_t)r * G + (size_t)j;
                float *acc = st.acc + sj * jb->acc_stride;
                if (jb->n_splits == 1) {
                    finalize_row(jb, kv_head, acc, st.l[sj], jb->out + ((size_t)i * jb->n_head + head) * jb->head_dim_v);
                    continue;
                }
                float *p = jb->partial + (((size_t)split * jb->n + (size_t)i) * jb->n_head + head) * part_floats;
                memcpy(p, acc, (size_t)jb->acc_stride * sizeof(float));
                p[jb->acc_stride] = st.m[sj];
                p[jb->acc_stride + 1] = st.l[sj];
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
    finalize_row(jb, head / jb->group, acc, l, jb->out + ((size_t)i * jb->n_head + (size_t)head) * jb->head_dim_v);
}

/* ------------------------------------------------------------- set-up */

/* The row kernels of type t: from the caller's table, or the active ones. */
static const kvq_type_traits *traits_of(const kvq_type_traits *table, kvq_type t) {
    return table ? &table[t] : kvq_type_get(t);
}

/* The hooks that read a copy of type t: its row's own, or, for the rows
 * of a caller's table and in the per-key reference pass, the generic ones
 * built from that table's kernels (decode; dot and axpy per key) where
 * the table has them. */
static const kvq_row_hooks *hooks_for(const kvq_type_traits *tr, kvq_type t, const kvq_type_traits *table,
                                      bool per_key) {
    if (per_key && tr->dot && tr->axpy) return &attn_hooks_per_key;
    if (table && tr->dequantize) return &attn_hooks_decode;
    return kvq_row_hooks_of(t);
}

/* Keys per chunk of a decode step (one query row) that one body's hooks
 * ask for: the keys whose rows of one KV head fill their chunk_bytes
 * (kvq_row_hooks), at least MIN_CHUNK_KEYS; KEY_CHUNK where they ask
 * nothing (attend_keys cuts that to what the copies' hooks take). */
static int side_chunk_keys(const attn_source *s) {
    const int bytes = s->hooks->chunk_bytes;
    if (bytes <= 0 || s->stride == 0) return KEY_CHUNK;
    const size_t keys = (size_t)bytes / s->stride;
    return (int)KVQ_MAX((size_t)MIN_CHUNK_KEYS, KVQ_MIN((size_t)KEY_CHUNK, keys));
}

/* The decode chunk: the larger of the two sides' (a side that wants the
 * full KEY_CHUNK, the packed types, always gets all its hooks take). */
static int decode_chunk_keys(const attn_source *k, const attn_source *v) {
    return KVQ_MAX(side_chunk_keys(k), side_chunk_keys(v));
}

static attn_source make_source(const kvq_cache *c, const kvq_cache_side *sd, kvq_cache_part part,
                               const kvq_type_traits *table, bool per_key) {
    attn_source s;
    memset(&s, 0, sizeof s);
    const bool body = part == KVQ_PART_BODY, stage = part == KVQ_PART_STAGE;
    const kvq_type type = body ? sd->type : c->p.tail_type;
    const kvq_type_traits *tr = traits_of(table, type);
    const int rows = body ? c->p.n_ctx : part == KVQ_PART_RING ? sd->ring_rows : stage ? c->stage.cap : sd->sink_rows;
    s.hooks = hooks_for(tr, type, table, per_key);
    s.chunk.tr = tr;
    s.chunk.type = type;
    s.chunk.f32 = type == KVQ_TYPE_F32;
    s.chunk.len = tr->row_bytes ? sd->store_dim : round_up(sd->store_dim, tr->block_size);
    s.chunk.sd = sd;
    s.rows = body ? sd->body : part == KVQ_PART_RING ? sd->ring : stage ? c->stage.rows[sd->side_index] : sd->sink;
    if (s.hooks->read_row) s.rows = NULL;   /* records: the hooks read the side */
    s.stride = body ? sd->row_bytes : stage ? c->stage.row_bytes[sd->side_index] : sd->exact_row_bytes;
    s.head = body ? sd->body_head_bytes : (size_t)rows * s.stride;
    s.lanes = body && sd->lanes;
    s.first = stage ? c->stage.pos : 0;
    s.ring = part == KVQ_PART_RING ? sd->ring_rows : 0;
    s.rounded = body;
    s.max_keys = kvq_row_hooks_keys(s.hooks);   /* <= ATTN_RUN_KEYS = KEY_CHUNK */
    return s;
}

/* Values a rotated query (or accumulator) row holds: the side's stored
 * width, rounded up to whole blocks of every row type that reads it. */
static int padded_width(const kvq_cache_side *sd, const kvq_type_traits *body, int exact_block) {
    const int body_block = !sd->records && !body->row_bytes ? body->block_size : 1;   /* records: whole slices */
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

/* Rows per chunk: about TASKS_PER_THREAD tasks per thread, in whole
 * groups of rows (rows and groups are independent, so this never changes
 * a result).  Key ranges: when (KV
 * heads x rows) is small and the context long (decode), the keys are cut
 * into ranges of at least MIN_SPLIT_KEYS so that SPLIT_TASKS tasks exist.
 * The ranges depend on the shapes only, never on the thread count, so the
 * output is bitwise the same for any number of threads. */
static void choose_work(attn_job *jb, int n_head_kv, int n_threads, int forced_splits) {
    const int target = TASKS_PER_THREAD * n_threads;
    const int n_keys = jb->pos + jb->n;
    int chunks = n_threads > 1 ? KVQ_MIN(jb->n, (target + n_head_kv - 1) / n_head_kv) : 1;
    jb->rows_per_chunk = (int)round_up((jb->n + chunks - 1) / chunks, jb->group_rows);   /* whole groups */
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

/* Rotated, zero-padded copy of every query row: [n][n_head][q_stride]
 * (row r is query head r % n_head, read by KV head (r % n_head) / group). */
static void rotate_queries(const kvq_cache_side *sk, const float *q, int rows, int n_head, int group, int q_stride,
                           float *qr) {
    for (int r = 0; r < rows; r++) {
        float *dst = qr + (size_t)r * q_stride;
        kvq_cache_side_rotate_query(sk, r % n_head / group, q + (size_t)r * sk->head_dim, dst);
        memset(dst + sk->store_dim, 0, (size_t)(q_stride - sk->store_dim) * sizeof(float));
    }
}

/* Every rotated query row rounded to int16 per block (int8 levels with
 * jb->q8, and then also as the lanes kernels' bytes), once per call; mem
 * holds q_floats/2 floats of codes, then scales and sums, then (q8)
 * q_floats/4 floats of bytes. */
static void round_queries(attn_job *jb, int rows, float *mem) {
    const size_t qb = (size_t)jb->q_stride / 32, n_blocks = (size_t)rows * qb;
    int16_t *qi = (int16_t *)(void *)mem;
    float *scale = mem + (size_t)rows * jb->q_stride / 2;
    int32_t *sum = (int32_t *)(void *)(scale + n_blocks);
    int8_t *bytes = (int8_t *)(void *)(sum + n_blocks);
    for (int r = 0; r < rows; r++) {
        const size_t at = (size_t)r * jb->q_stride;
        (jb->q8 ? attn_block_round_query8 : attn_block_round_query)(jb->q + at, jb->q_stride, qi + at,
                                                                    scale + (size_t)r * qb, sum + (size_t)r * qb);
        if (jb->q8) attn_block_query_bytes(qi + at, jb->q_stride, bytes + at);
    }
    jb->qi = qi;
    jb->qi_scale = scale;
    jb->qi_sum = sum;
    jb->qi_bytes = jb->q8 ? bytes : NULL;
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
    jb.blk = choose_pass(opts, loop);
    jb.level = jb.blk ? jb.blk : attn_block_best();
    for (int part = 0; part < KVQ_PART_COUNT; part++) {
        jb.k[part] = make_source(c, k, (kvq_cache_part)part, table, !jb.blk);
        jb.v[part] = make_source(c, v, (kvq_cache_part)part, table, !jb.blk);
    }
    jb.run_k = jb.k[KVQ_PART_BODY].hooks->run_keys;
    jb.run_v = jb.v[KVQ_PART_BODY].hooks->run_keys;
    jb.chunk_keys = n == 1 ? decode_chunk_keys(&jb.k[KVQ_PART_BODY], &jb.v[KVQ_PART_BODY]) : KEY_CHUNK;
    const int exact_block = traits_of(table, c->p.tail_type)->block_size;
    jb.q_stride = padded_width(k, traits_of(table, k->type), exact_block);
    jb.acc_stride = padded_width(v, traits_of(table, v->type), exact_block);
    jb.head_dim_v = v->head_dim;
    jb.out = out;
    const int n_threads = kvq_pool_threads(pool);
    /* prefill: rows in groups of about GROUP_VECTORS query vectors, or
     * as many as the bodies' hooks want (a function of the shapes and
     * types only: the grouping, and with it every sum's order, is the
     * same for any thread count) */
    const int vectors = KVQ_MAX(GROUP_VECTORS, KVQ_MAX(jb.k[KVQ_PART_BODY].hooks->group_vectors,
                                                       jb.v[KVQ_PART_BODY].hooks->group_vectors));
    jb.group_rows = jb.blk ? KVQ_MAX(1, KVQ_MIN(ATTN_GROUP_ROWS, vectors / jb.group)) : 1;
    choose_work(&jb, c->p.n_head_kv, n_threads, opts ? opts->key_splits : 0);

    const size_t q_floats = (size_t)n * n_head * jb.q_stride;
    /* the rounded query: for the chunked pass's integer kernels, or as
     * floats for the per-key pass that reproduces them */
    const bool int_k = attn_block_int_type(k->type) && jb.q_stride % 32 == 0;
    const bool want_qi = int_k && jb.blk, want_qhat = int_k && !jb.blk && loop && loop->round_query;
    jb.q8 = opts && opts->int8_query && attn_block_int8_type(k->type);
    /* round_queries' bytes: for the block types' kernels (kvarn4 folds
     * its own, attn_kvarn_kernels.fold_query) */
    const bool q8_bytes = jb.q8 && want_qi;
    const size_t qb_floats = q8_bytes ? q_floats / 4 : 0;
    const size_t qi_floats = want_qi ? q_floats / 2 + 2 * (q_floats / 32) + qb_floats : want_qhat ? q_floats : 0;
    const size_t nq = (size_t)jb.group_rows * jb.group;
    jb.scratch_floats = nq * ((size_t)jb.acc_stride + 2 + KEY_CHUNK);
    if (jb.blk)   /* K and V tiles, a zero row, a group's queries (attn_task) */
        jb.scratch_floats += (size_t)KEY_CHUNK * ((size_t)jb.q_stride + jb.acc_stride) + jb.acc_stride +
                             nq * ((size_t)jb.q_stride + 2 * ((size_t)jb.q_stride / 32) + (size_t)jb.q_stride / 2 + 1) +
                             (q8_bytes ? nq * (size_t)jb.q_stride / 4 + 1 : 0);
    const size_t part_floats = jb.n_splits > 1 ? (size_t)jb.n_splits * n * n_head * (jb.acc_stride + 2) : 0;
    const size_t merge_floats = jb.n_splits > 1 ? (size_t)jb.acc_stride : 0;
    float *mem = kvq_cache_attend_scratch(c, q_floats + (size_t)n_threads * jb.scratch_floats + part_floats +
                                                 merge_floats + qi_floats);
    if (!mem) return kvq_fail(err, KVQ_ERR_NOMEM, "attend: out of memory for %d query rows", n);
    float *qr = mem;
    jb.scratch = qr + q_floats;
    jb.partial = jb.scratch + (size_t)n_threads * jb.scratch_floats;
    rotate_queries(k, q, n * n_head, n_head, jb.group, jb.q_stride, qr);
    jb.q = qr;
    float *qi_mem = jb.partial + part_floats + merge_floats;
    if (want_qi) round_queries(&jb, n * n_head, qi_mem);
    if (want_qhat)
        for (int r = 0; r < n * n_head; r++)
            (jb.q8 ? attn_block_rounded_values8 : attn_block_rounded_values)(qr + (size_t)r * jb.q_stride, jb.q_stride,
                                                                             qi_mem + (size_t)r * jb.q_stride);
    if (want_qhat) jb.q_hat = qi_mem;

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
