/*
 * cache_edit.c - editing a filled cache (docs/cache.md "Editing"):
 * truncation (drop positions >= n: rollback for retries and speculative
 * decoding) and context shift (drop n_discard positions after the first
 * keep_first and move the rest down, re-applying RoPE to the stored keys).
 *
 * Both keep the cache's one rule intact: a query reads the same copies as
 * if the cache had been written with the edited sequence.  Truncation
 * needs the exact rows of the new last positions (tail, KVarN's incomplete
 * tile), which the ring still holds for a rollback of up to
 * rollback_tokens positions; beyond that it is refused rather than reading
 * those keys from the quantised body.  A shift rewrites every moved
 * position from its best stored copy (exact where the cache keeps one,
 * else the dequantised body): unrotate, re-RoPE K by -n_discard positions,
 * rotate, store again, so the exact rows stay exact in real arithmetic and
 * quantised rows are quantised once more (measured in docs/cache.md).
 */
#include "cache.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

/* The exact rows position n - 1 would read (ring_start of its split) must
 * still be held for every side of every layer. */
static kvq_status check_exact_held(const kvq_cache *c, int n, kvq_error *err) {
    if (n == 0) return KVQ_OK;
    for (int l = 0; l < c->p.n_layer; l++) {
        const kvq_cache_side *sides[2] = { &c->k[l], &c->v[l] };
        for (int s = 0; s < 2; s++) {
            const kvq_cache_side *sd = sides[s];
            if (!sd->ring_rows) continue;
            const int need = kvq_cache_side_split(sd, n - 1, INT_MAX).ring_start;
            const int from = kvq_cache_exact_from(c, l, sd);
            if (need < n && need < from)
                return kvq_fail(err, KVQ_ERR_ARG,
                                "cache truncate: %d positions would need layer %d's exact %c rows from %d, but the "
                                "ring holds them from %d only (raise rollback_tokens / --kv-rollback-tokens)",
                                n, l, s ? 'V' : 'K', need, from);
        }
    }
    return KVQ_OK;
}

/* Every layer keeps positions 0..n-1; ring rows at or above n are dropped
 * (ring_lo records that rows below what the ring held are not valid). */
static void cut_layers(kvq_cache *c, int n) {
    for (int l = 0; l < c->p.n_layer; l++) {
        kvq_cache_side *sides[2] = { &c->k[l], &c->v[l] };
        for (int s = 0; s < 2; s++) {
            kvq_cache_side *sd = sides[s];
            if (sd->ring_rows) sd->ring_lo = KVQ_MIN(n, kvq_cache_exact_from(c, l, sd));
        }
        c->n_stored[l] = KVQ_MIN(c->n_stored[l], n);
    }
}

static int stored_min(const kvq_cache *c) {
    int n = INT_MAX;
    for (int l = 0; l < c->p.n_layer; l++) n = KVQ_MIN(n, c->n_stored[l]);
    return n;
}

kvq_status kvq_cache_truncate(kvq_cache *c, int n, kvq_error *err) {
    if (!c) return kvq_fail(err, KVQ_ERR_ARG, "cache truncate: NULL cache");
    const int stored = stored_min(c);
    if (n < 0 || n > stored)
        return kvq_fail(err, KVQ_ERR_ARG, "cache truncate: %d positions outside 0..%d (what every layer holds)", n,
                        stored);
    kvq_cache_commit_stage(c);
    kvq_status st = check_exact_held(c, n, err);
    if (st != KVQ_OK) return st;
    cut_layers(c, n);
    return KVQ_OK;
}

/* ---------------------------------------------------------------- shift */

/* Rotate K's RoPE pairs by delta positions: pair i (adjacent 2i, 2i+1, or
 * half-split i, i + d/2 for NEOX) turns by delta * scale * base^(-2i/d).
 * Angles in double: the composition with the stored rotation is exact in
 * real arithmetic. */
static void rerope(float *k, int d, const kvq_cache_rope *r, int delta) {
    const int half = d / 2, stride = r->neox ? 1 : 2, partner = r->neox ? half : 1;
    for (int i = 0; i < half; i++) {
        const double theta = (double)delta * r->freq_scale * pow(r->base, -2.0 * i / d);
        const double cs = cos(theta), sn = sin(theta);
        float *a = k + i * stride, *b = a + partner;
        const double x0 = *a, x1 = *b;
        *a = (float)(x0 * cs - x1 * sn);
        *b = (float)(x0 * sn + x1 * cs);
    }
}

/* The best stored copy of one head's row (exact if the cache keeps one),
 * rotated back: out[head_dim]. */
static kvq_status best_row(const kvq_cache *c, int layer, bool is_v, int head, int pos, float *out, kvq_error *err) {
    const kvq_cache_side *sd = is_v ? &c->v[layer] : &c->k[layer];
    kvq_cache_part part = KVQ_PART_BODY;
    if (pos < sd->sink_rows) part = KVQ_PART_SINK;
    else if (sd->ring_rows && pos >= kvq_cache_exact_from(c, layer, sd)) part = KVQ_PART_RING;
    float buf[KVQ_MAX_HEAD_DIM];
    kvq_status st = kvq_cache_read_row(c, layer, is_v, part, head, pos, buf, err);
    if (st != KVQ_OK) return st;
    kvq_cache_side_unrotate(sd, head, buf);
    memcpy(out, buf, (size_t)sd->head_dim * sizeof *out);
    return KVQ_OK;
}

/* First position of a layer that a shift at keep_first rewrites: rows from
 * keep_first; a tile side from the start of keep_first's tile (a tile is
 * quantised as a whole, so the tile that keep_first cuts is formed anew). */
static int rewrite_from(const kvq_cache *c, int layer, int keep_first) {
    int q0 = keep_first;
    const kvq_cache_side *sides[2] = { &c->k[layer], &c->v[layer] };
    for (int s = 0; s < 2; s++)
        if (sides[s]->layout == KVQ_LAYOUT_TILES) q0 = KVQ_MIN(q0, keep_first / KVQ_KVARN_TILE * KVQ_KVARN_TILE);
    return q0;
}

/* Gather layer's rows q0..end-1 of the shifted sequence (old positions
 * q0..keep_first-1, then keep_first+d..stored-1 with K re-RoPEd by -d),
 * cut the layer at q0 and write them again. */
static kvq_status shift_layer(kvq_cache *c, int layer, int keep_first, int d, const kvq_cache_rope *rope, float *k,
                              float *v, kvq_error *err) {
    const kvq_cache_params *p = &c->p;
    const int stored = c->n_stored[layer], q0 = rewrite_from(c, layer, keep_first), n_new = stored - d - q0;
    const int hk = p->head_dim_k, hv = p->head_dim_v, nh = p->n_head_kv;
    for (int t = 0; t < n_new; t++) {
        const int old = q0 + t < keep_first ? q0 + t : q0 + t + d;
        for (int h = 0; h < nh; h++) {
            float *kr = k + ((size_t)t * nh + h) * hk, *vr = v + ((size_t)t * nh + h) * hv;
            kvq_status st;
            if ((st = best_row(c, layer, false, h, old, kr, err)) != KVQ_OK ||
                (st = best_row(c, layer, true, h, old, vr, err)) != KVQ_OK)
                return st;
            if (old != q0 + t) rerope(kr, hk, rope, -d);
        }
    }
    kvq_cache_side *sides[2] = { &c->k[layer], &c->v[layer] };
    for (int s = 0; s < 2; s++)
        if (sides[s]->ring_rows) sides[s]->ring_lo = KVQ_MIN(q0, kvq_cache_exact_from(c, layer, sides[s]));
    c->n_stored[layer] = q0;
    for (int t = 0; t < n_new; t += p->max_batch) {
        const int n = KVQ_MIN(p->max_batch, n_new - t);
        kvq_status st = kvq_cache_write(c, layer, q0 + t, n, k + (size_t)t * nh * hk, v + (size_t)t * nh * hv, err);
        if (st != KVQ_OK) return st;
    }
    kvq_cache_commit_stage(c);
    return KVQ_OK;
}

kvq_status kvq_cache_shift(kvq_cache *c, int n_discard, int keep_first, const kvq_cache_rope *rope, kvq_error *err) {
    if (!c || !rope) return kvq_fail(err, KVQ_ERR_ARG, "cache shift: NULL argument");
    const int stored = stored_min(c);
    for (int l = 0; l < c->p.n_layer; l++)
        if (c->n_stored[l] != stored)
            return kvq_fail(err, KVQ_ERR_ARG, "cache shift: layers hold different lengths (%d and %d)", stored,
                            c->n_stored[l]);
    if (n_discard < 1 || keep_first < 0 || (int64_t)keep_first + n_discard > stored)
        return kvq_fail(err, KVQ_ERR_ARG, "cache shift: discarding %d positions after the first %d of %d is not "
                        "possible", n_discard, keep_first, stored);
    if (!(rope->base > 0.0f) || !isfinite(rope->freq_scale))
        return kvq_fail(err, KVQ_ERR_ARG, "cache shift: RoPE base %g / scale %g invalid", (double)rope->base,
                        (double)rope->freq_scale);
    for (int l = 0; l < c->p.n_layer; l++)
        if (keep_first < c->k[l].sink_rows || keep_first < c->v[l].sink_rows)
            return kvq_fail(err, KVQ_ERR_ARG, "cache shift: the first %d positions kept are fewer than the %d exact "
                            "sink rows of layer %d (keep at least the sink)", keep_first,
                            KVQ_MAX(c->k[l].sink_rows, c->v[l].sink_rows), l);
    kvq_cache_commit_stage(c);
    const size_t rows = (size_t)(stored - n_discard) * c->p.n_head_kv;
    float *k = kvq_malloc_n(rows * (size_t)c->p.head_dim_k, sizeof *k), *v = kvq_malloc_n(rows * (size_t)c->p.head_dim_v, sizeof *v);
    kvq_status st = k && v ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "cache shift: out of memory for %zu rows", rows);
    for (int l = 0; st == KVQ_OK && l < c->p.n_layer; l++) st = shift_layer(c, l, keep_first, n_discard, rope, k, v, err);
    free(k);
    free(v);
    return st;
}
