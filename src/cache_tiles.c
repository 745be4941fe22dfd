/*
 * cache_tiles.c - the KVarN side of the cache (docs/kvarn.md): shapes of
 * tile sides, quantising a completed tile from its exact staging rows into
 * one record per KV head and slice, reading a record's row back (tests),
 * and attention straight from records (scores of a run of keys against
 * the query heads of a GQA group; accumulation of weighted values).
 *
 * Record math (FORMATS.md §3), with codes q, fp16 S, Z per row of A and O
 * per column of A:
 *   K (rows = channels c, cols = tokens t): k_t[c] = (q S_c + Z_c) O_t, so
 *     q.k_t = O_t (sum_c (q_c S_c) code + sum_c q_c Z_c): the per-channel
 *     products q_c S_c and sum q_c Z_c are formed once per run of keys;
 *   V (rows = tokens t, cols = channels c): v_t[c] = (q S_t + Z_t) O_c, so
 *     sum_t p_t v_t[c] = O_c (sum_t (p_t S_t) code + sum_t p_t Z_t): O is
 *     applied once per run of keys.
 * Codes of a run are unpacked once and shared by every query head.
 */
#include "cache.h"

enum { T = KVQ_KVARN_TILE, MAX_RUN = T, MAX_WIDTH = 128 };

void kvq_tiles_shape(kvq_cache_side *sd, bool is_v) {
    const int width = sd->head_dim <= 64 ? 64 : 128;
    sd->tile.width = width;
    sd->tile.bits = kvq_type_get_scalar(sd->type)->bits;
    sd->tile.is_key = !is_v;
    sd->store_dim = (sd->head_dim + width - 1) / width * width;
    sd->n_slices = sd->store_dim / width;
    sd->record_bytes = kvq_kvarn_record_bytes(sd->tile);
}

size_t kvq_tiles_scratch_floats(const kvq_cache_side *sd) {
    return (size_t)T * sd->tile.width + (size_t)sd->store_dim + kvq_kvarn_scratch_floats(sd->tile);
}

static const uint8_t *record_of(const kvq_cache_side *sd, int head, int tile, int slice) {
    return sd->body + (size_t)head * sd->body_head_bytes +
           ((size_t)(tile - sd->first_tile) * (size_t)sd->n_slices + (size_t)slice) * sd->record_bytes;
}

kvq_status kvq_tiles_quantize(const kvq_cache *c, const kvq_cache_side *sd, int tile, kvq_error *err) {
    const int w = sd->tile.width;
    float *x = c->tile_scratch, *row = x + (size_t)T * w, *work = row + sd->store_dim;
    for (int h = 0; h < c->p.n_head_kv; h++)
        for (int s = 0; s < sd->n_slices; s++) {
            for (int t = 0; t < T; t++) {      /* the staging rows, as the ring holds them */
                const int pos = tile * T + t;
                const uint8_t *src = sd->ring + ((size_t)h * sd->ring_rows + (size_t)(pos % sd->ring_rows)) *
                                                    sd->exact_row_bytes;
                kvq_dequantize_row(c->p.tail_type, src, row, sd->store_dim);
                memcpy(x + (size_t)t * w, row + (size_t)s * w, (size_t)w * sizeof *x);
            }
            kvq_status st = kvq_kvarn_quantize(sd->tile, x, KVQ_KVARN_ITERS, (uint8_t *)record_of(sd, h, tile, s), work);
            if (st != KVQ_OK) return kvq_fail(err, st, "cache: quantising tile %d failed", tile);
        }
    return KVQ_OK;
}

static float h2f(const uint8_t *p, int i) { return kvq_half_to_float(kvq_rd16(p + 2 * i)); }

void kvq_tiles_read_row(const kvq_cache_side *sd, int head, int pos, float *out) {
    const int w = sd->tile.width, tile = pos / T, t = pos % T;
    uint8_t codes[MAX_WIDTH];
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        kvq_kvarn_unpack(sd->tile, rec, t, 1, codes);
        for (int ch = 0; ch < w; ch++) {
            const int r = sd->tile.is_key ? ch : t, col = sd->tile.is_key ? t : ch;
            out[s * w + ch] = ((float)codes[ch] * h2f(m.S, r) + h2f(m.Z, r)) * h2f(m.O, col);
        }
    }
}

void kvq_tiles_score(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                     int q_stride, float scale, float *wts, int w_stride) {
    const int w = sd->tile.width, tile = key0 / T, t0 = key0 % T;
    uint8_t codes[MAX_RUN * MAX_WIDTH];
    float S[MAX_WIDTH], Z[MAX_WIDTH], O[MAX_RUN], qs[MAX_WIDTH];
    for (int j = 0; j < G; j++) memset(wts + (size_t)j * w_stride, 0, (size_t)nk * sizeof *wts);
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, kv_head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        for (int ch = 0; ch < w; ch++) { S[ch] = h2f(m.S, ch); Z[ch] = h2f(m.Z, ch); }
        for (int t = 0; t < nk; t++) O[t] = h2f(m.O, t0 + t);
        kvq_kvarn_unpack(sd->tile, rec, t0, nk, codes);
        for (int j = 0; j < G; j++) {
            const float *qj = q + (size_t)j * q_stride + (size_t)s * w;
            float qz = 0.0f;
            for (int ch = 0; ch < w; ch++) { qs[ch] = qj[ch] * S[ch]; qz += qj[ch] * Z[ch]; }
            float *wj = wts + (size_t)j * w_stride;
            for (int t = 0; t < nk; t++) {
                const uint8_t *ct = codes + (size_t)t * w;
                float acc = 0.0f;
                for (int ch = 0; ch < w; ch++) acc += qs[ch] * (float)ct[ch];
                wj[t] += O[t] * (acc + qz);
            }
        }
    }
    for (int j = 0; j < G; j++)
        for (int t = 0; t < nk; t++) wts[(size_t)j * w_stride + t] *= scale;
}

void kvq_tiles_accumulate(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *wts, int G,
                          int w_stride, float *acc, int acc_stride) {
    const int w = sd->tile.width, tile = key0 / T, t0 = key0 % T;
    uint8_t codes[MAX_RUN * MAX_WIDTH];
    float S[MAX_RUN], Z[MAX_RUN], O[MAX_WIDTH], a[MAX_WIDTH];
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, kv_head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        for (int t = 0; t < nk; t++) { S[t] = h2f(m.S, t0 + t); Z[t] = h2f(m.Z, t0 + t); }
        for (int ch = 0; ch < w; ch++) O[ch] = h2f(m.O, ch);
        kvq_kvarn_unpack(sd->tile, rec, t0, nk, codes);
        for (int j = 0; j < G; j++) {
            const float *pj = wts + (size_t)j * w_stride;
            float pz = 0.0f;
            memset(a, 0, (size_t)w * sizeof *a);
            for (int t = 0; t < nk; t++) {
                if (pj[t] == 0.0f) continue;
                const float ps = pj[t] * S[t];
                const uint8_t *ct = codes + (size_t)t * w;
                pz += pj[t] * Z[t];
                for (int ch = 0; ch < w; ch++) a[ch] += ps * (float)ct[ch];
            }
            float *out = acc + (size_t)j * acc_stride + (size_t)s * w;
            for (int ch = 0; ch < w; ch++) out[ch] += O[ch] * (a[ch] + pz);
        }
    }
}
