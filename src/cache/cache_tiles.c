/*
 * cache_tiles.c - the KVarN side of the cache (docs/kvarn.md), the hooks of
 * KVarN's rows (row_hooks.h, installed by kvq_kvarn_register at the end): shapes of
 * tile sides, quantising a completed tile from its exact staging rows into
 * one record per KV head and slice, reading a record's row back (tests),
 * and attention straight from records (scores of a run of keys against
 * the query heads of a GQA group; accumulation of weighted values).
 *
 * Record math (docs/spec/formats.md §3), with codes q, fp16 S, Z per row of A and O
 * per column of A:
 *   K (rows = channels c, cols = tokens t): k_t[c] = (q S_c + Z_c) O_t, so
 *     q.k_t = O_t (sum_c (q_c S_c) code + sum_c q_c Z_c): the per-channel
 *     products q_c S_c and sum q_c Z_c are formed once per run of keys;
 *   V (rows = tokens t, cols = channels c): v_t[c] = (q S_t + Z_t) O_c, so
 *     sum_t p_t v_t[c] = O_c (sum_t (p_t S_t) code + sum_t p_t Z_t): O is
 *     applied once per run of keys.
 * At a level with KVarN kernels (attn_kvarn.inc) the codes are read in
 * place: K by integer dot products with the folded query q_c S_c rounded
 * to int16 per 32 channels, V widened to floats in registers; each block
 * of a key decoded once for every query head.  The records' codes are
 * kept in lanes (K) and pairs (V) in memory (cache_tiles_layout.h): 16
 * keys' sums in one vector, and V's sums in integers too.  The "-tile" levels unpack
 * a run's codes into f32 rows for the tile kernels (the float path).
 */
#include "cache.h"
#include "format_row.h"
#include "row_hooks.h"
#include "cache_tiles_simd.h"
#include "cache_tiles_layout.h"

#include <math.h>

enum { T = KVQ_KVARN_TILE, MAX_WIDTH = 128 };
_Static_assert((int)MAX_WIDTH == (int)ATTN_MEMO_WIDTH, "attn_run_memo holds one slice");
_Static_assert((int)T == (int)ATTN_MEMO_KEYS, "attn_run_memo holds one tile's per-token scales");

void kvq_tiles_codes_scalar(const uint8_t *tok, int width, int bits, float *out) {
    uint8_t codes[MAX_WIDTH];
    const kvq_kvarn_shape one = { width, bits, false };
    kvq_kvarn_unpack(one, tok, 0, 1, codes);
    for (int i = 0; i < width; i++) out[i] = (float)codes[i];
}

void kvq_tiles_halves_scalar(const uint8_t *src, int n, float *out) {
    for (int i = 0; i < n; i++) out[i] = kvq_half_to_float(kvq_rd16(src + 2 * i));
}

/* Code and fp16 unpacking per ISA level (index kvq_isa): the attention
 * pass's level chooses (AVX-512 runs the AVX2 helpers). */
typedef struct tile_unpack {
    void (*codes)(const uint8_t *tok, int width, int bits, float *out);
    void (*halves)(const uint8_t *src, int n, float *out);
} tile_unpack;

static const tile_unpack g_unpack[KVQ_ISA_COUNT] = {
    [KVQ_ISA_SCALAR] = { kvq_tiles_codes_scalar, kvq_tiles_halves_scalar },
    [KVQ_ISA_AVX2] = { kvq_tiles_codes_avx2, kvq_tiles_halves_avx2 },
    [KVQ_ISA_AVX512] = { kvq_tiles_codes_avx2, kvq_tiles_halves_avx2 },
};

static void kvq_tiles_shape(kvq_cache_side *sd, bool is_v) {
    const int width = sd->head_dim <= 64 ? 64 : 128;
    sd->tile.width = width;
    sd->tile.bits = kvq_type_get_scalar(sd->type)->bits;
    sd->tile.is_key = !is_v;
    sd->store_dim = (sd->head_dim + width - 1) / width * width;
    sd->n_slices = sd->store_dim / width;
    sd->record_bytes = kvq_kvarn_record_bytes(sd->tile);
}

static size_t kvq_tiles_scratch_floats(const kvq_cache_side *sd) {
    return (size_t)T * sd->tile.width + (size_t)sd->store_dim + kvq_kvarn_scratch_floats(sd->tile);
}

static const uint8_t *record_of(const kvq_cache_side *sd, int head, int tile, int slice) {
    return sd->body + (size_t)head * sd->body_head_bytes +
           ((size_t)(tile - sd->first_tile) * (size_t)sd->n_slices + (size_t)slice) * sd->record_bytes;
}

enum { RUN_CODE_BYTES = ATTN_RUN_KEYS * MAX_WIDTH };   /* a run's token-major codes, 8-bit at most */

/* Tokens t0 .. t0 + n - 1 of a record's codes, token-major: in place, or
 * out of the memory's layout into buf (n * width * bits / 8 bytes). */
static const uint8_t *run_tokens(const kvq_cache_side *sd, const uint8_t *rec, int t0, int n, uint8_t *buf) {
    if (!sd->tile_layout) return rec + (size_t)t0 * sd->tile.width * sd->tile.bits / 8;
    kvq_tiles_layout_get(sd->tile, rec, t0, n, buf);
    return buf;
}

static size_t payload_bytes(const kvq_cache_side *sd) { return (size_t)T * sd->tile.width * sd->tile.bits / 8; }

void kvq_tiles_record_out(const kvq_cache_side *sd, const uint8_t *rec, uint8_t *out) {
    memcpy(out, rec, sd->record_bytes);
    if (sd->tile_layout) kvq_tiles_layout_get(sd->tile, rec, 0, T, out);
}

void kvq_tiles_record_in(const kvq_cache_side *sd, const uint8_t *in, uint8_t *rec) {
    memcpy(rec, in, sd->record_bytes);
    if (sd->tile_layout) kvq_tiles_layout_put(sd->tile, in, rec);
}

static kvq_status kvq_tiles_quantize(const kvq_cache *c, const kvq_cache_side *sd, int h, int tile, float *scratch,
                                     kvq_error *err) {
    const int w = sd->tile.width;
    float *x = scratch, *row = x + (size_t)T * w, *work = row + sd->store_dim;
    for (int s = 0; s < sd->n_slices; s++) {
        for (int t = 0; t < T; t++) {      /* the exact rows, as the ring and stage hold them */
            const uint8_t *src = kvq_cache_exact_row(c, sd, h, tile * T + t);
            kvq_dequantize_row_tr(sd->tail_tr, src, row, sd->store_dim);
            memcpy(x + (size_t)t * w, row + (size_t)s * w, (size_t)w * sizeof *x);
        }
        uint8_t *rec = (uint8_t *)record_of(sd, h, tile, s);
        kvq_status st = kvq_kvarn_quantize(sd->tile, x, c->p.kvarn_iters ? c->p.kvarn_iters : KVQ_KVARN_ITERS, rec,
                                           work);
        if (st != KVQ_OK) return kvq_fail(err, st, "cache: quantising tile %d of head %d failed (%s)", tile, h,
                                         st == KVQ_ERR_NOMEM ? "out of memory" : "bad tile shape");
        if (sd->tile_layout) {   /* the codes into the memory's order */
            uint8_t tokens[T * MAX_WIDTH];   /* 8-bit codes at most */
            memcpy(tokens, rec, payload_bytes(sd));
            kvq_tiles_layout_put(sd->tile, tokens, rec);
        }
    }
    return KVQ_OK;
}

static float h2f(const uint8_t *p, int i) { return kvq_half_to_float(kvq_rd16(p + 2 * i)); }

static void kvq_tiles_read_row(const kvq_cache_side *sd, int head, int pos, float *out) {
    const int w = sd->tile.width, tile = pos / T, t = pos % T;
    uint8_t codes[MAX_WIDTH], buf[MAX_WIDTH];
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        kvq_kvarn_unpack(sd->tile, run_tokens(sd, rec, t, 1, buf), 0, 1, codes);
        for (int ch = 0; ch < w; ch++) {
            const int r = sd->tile.is_key ? ch : t, col = sd->tile.is_key ? t : ch;
            out[s * w + ch] = ((float)codes[ch] * h2f(m.S, r) + h2f(m.Z, r)) * h2f(m.O, col);
        }
    }
}

/* Codes of a run of nk tokens as floats, cf[t*w + ch]: converted once
 * and shared by every query head; the products with them go through the
 * register-blocked kernels of the attention's chunked loop (attn_block.h:
 * heads x keys at once, SIMD where the CPU has it). */
static void run_codes(const tile_unpack *u, const kvq_cache_side *sd, const uint8_t *rec, int t0, int nk, float *cf) {
    const int w = sd->tile.width;
    const size_t tok_bytes = (size_t)w * sd->tile.bits / 8;
    uint8_t buf[RUN_CODE_BYTES];
    const uint8_t *tokens = run_tokens(sd, rec, t0, nk, buf);
    for (int t = 0; t < nk; t++) u->codes(tokens + (size_t)t * tok_bytes, w, sd->tile.bits, cf + (size_t)t * w);
}

/* Heads handled per block call (their scaled queries / weights sit on the
 * stack); larger GQA groups go in several calls. */
enum { HEADS = 16 };
_Static_assert((int)HEADS == (int)ATTN_MEMO_HEADS, "attn_run_memo holds one group of heads");

/* The chunk's per-key loops, four keys at a step so that the compiler
 * turns each step into one vector operation (as a plain loop over n it
 * stayed scalar: these loops were a fifth of KVarN's decode time). */
static void multiply_keys(const float *a, const float *b, int n, float *out) {
    int t = 0;
    for (; t + 4 <= n; t += 4)
        for (int k = 0; k < 4; k++) out[t + k] = a[t + k] * b[t + k];
    for (; t < n; t++) out[t] = a[t] * b[t];
}
/* 1 when v is inf or NaN (its exponent field all ones), else 0. */
static inline uint32_t non_finite(float v) { return (kvq_f32_bits(v) & 0x7f800000u) == 0x7f800000u; }

/* Whether a[0..n) and b[0..n) are all finite (compares and ors, which
 * SSE2 has, so this too is one vector step). */
static bool keys_finite(const float *a, const float *b, int n) {
    uint32_t bad[4] = { 0, 0, 0, 0 };
    int t = 0;
    for (; t + 4 <= n; t += 4)
        for (int k = 0; k < 4; k++) bad[k] |= non_finite(a[t + k]) | non_finite(b[t + k]);
    for (; t < n; t++) bad[0] |= non_finite(a[t]) | non_finite(b[t]);
    return !(bad[0] | bad[1] | bad[2] | bad[3]);
}

/* ---- the tile path (levels without KVarN kernels, the "-tile" ones):
 * a run's codes unpacked into f32 rows, then the level's tile kernels,
 * ATTN_CHUNK_KEYS keys at a time (what those kernels take) */

static void tile_path_score_part(const attn_block_kernels *blk, const attn_block_rows *k, int nk,
                                 const attn_query *aq, int G, float scale, float *wts, int w_stride) {
    const kvq_cache_side *sd = k->sd;
    const int kv_head = k->kv_head, key0 = k->key0, q_stride = aq->stride;
    const float *q = aq->q;
    const int w = sd->tile.width, tile = key0 / T, t0 = key0 % T;
    const tile_unpack u = g_unpack[blk->isa];
    float cf[ATTN_CHUNK_KEYS * MAX_WIDTH], S[MAX_WIDTH], Z[MAX_WIDTH], O[ATTN_CHUNK_KEYS];
    float qs[HEADS * MAX_WIDTH], qz[HEADS], dots[HEADS * ATTN_CHUNK_KEYS];
    const float *rows[ATTN_CHUNK_KEYS];
    for (int t = 0; t < nk; t++) rows[t] = cf + (size_t)t * w;
    for (int j = 0; j < G; j++) memset(wts + (size_t)j * w_stride, 0, (size_t)nk * sizeof *wts);
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, kv_head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        u.halves(m.S, w, S);
        u.halves(m.Z, w, Z);
        u.halves(m.O + 2 * t0, nk, O);
        run_codes(&u, sd, rec, t0, nk, cf);
        for (int j0 = 0; j0 < G; j0 += HEADS) {
            const int hg = KVQ_MIN(HEADS, G - j0);
            for (int j = 0; j < hg; j++) {          /* q_c S_c and sum q_c Z_c per head */
                const float *qj = q + (size_t)(j0 + j) * q_stride + (size_t)s * w;
                float z = 0.0f;
                for (int ch = 0; ch < w; ch++) { qs[j * w + ch] = qj[ch] * S[ch]; z += qj[ch] * Z[ch]; }
                qz[j] = z;
            }
            blk->scores(rows, nk, qs, hg, w, w, 1.0f, dots, ATTN_CHUNK_KEYS);
            for (int j = 0; j < hg; j++) {
                float *wj = wts + (size_t)(j0 + j) * w_stride;
                for (int t = 0; t < nk; t++) wj[t] += O[t] * (dots[j * ATTN_CHUNK_KEYS + t] + qz[j]);
            }
        }
    }
    for (int j = 0; j < G; j++) kvq_scale_floats(wts + (size_t)j * w_stride, nk, scale);
}

static void tile_path_accumulate_part(const attn_block_kernels *blk, const attn_block_rows *v, int nk,
                                      const float *wts, int w_stride, int G, float *acc, int acc_stride) {
    const kvq_cache_side *sd = v->sd;
    const int kv_head = v->kv_head, key0 = v->key0;
    const int w = sd->tile.width, tile = key0 / T, t0 = key0 % T;
    const tile_unpack u = g_unpack[blk->isa];
    float cf[ATTN_CHUNK_KEYS * MAX_WIDTH], S[ATTN_CHUNK_KEYS], Z[ATTN_CHUNK_KEYS], O[MAX_WIDTH];
    float ps[HEADS * ATTN_CHUNK_KEYS], pz[HEADS], a[HEADS * MAX_WIDTH];
    const float *rows[ATTN_CHUNK_KEYS];
    for (int t = 0; t < nk; t++) rows[t] = cf + (size_t)t * w;
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, kv_head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        u.halves(m.S + 2 * t0, nk, S);
        u.halves(m.Z + 2 * t0, nk, Z);
        u.halves(m.O, w, O);
        run_codes(&u, sd, rec, t0, nk, cf);
        for (int j0 = 0; j0 < G; j0 += HEADS) {
            const int hg = KVQ_MIN(HEADS, G - j0);
            for (int j = 0; j < hg; j++) {          /* p_t S_t and sum p_t Z_t per head */
                const float *pj = wts + (size_t)(j0 + j) * w_stride;
                float z = 0.0f;
                for (int t = 0; t < nk; t++) { ps[j * ATTN_CHUNK_KEYS + t] = pj[t] * S[t]; z += pj[t] * Z[t]; }
                pz[j] = z;
            }
            memset(a, 0, (size_t)hg * w * sizeof *a);
            blk->accumulate(rows, nk, ps, ATTN_CHUNK_KEYS, hg, a, w, w);
            for (int j = 0; j < hg; j++) {
                float *out = acc + (size_t)(j0 + j) * acc_stride + (size_t)s * w;
                for (int ch = 0; ch < w; ch++) out[ch] += O[ch] * (a[j * w + ch] + pz[j]);
            }
        }
    }
}

static void tile_path_score(const attn_block_kernels *blk, const attn_block_rows *k, int nk, const attn_query *aq,
                            int G, float scale, float *wts, int w_stride) {
    for (int t = 0; t < nk; t += ATTN_CHUNK_KEYS) {
        attn_block_rows part = *k;
        part.key0 += t;
        tile_path_score_part(blk, &part, KVQ_MIN(ATTN_CHUNK_KEYS, nk - t), aq, G, scale, wts + t, w_stride);
    }
}

static void tile_path_accumulate(const attn_block_kernels *blk, const attn_block_rows *v, int nk, const float *wts,
                                 int w_stride, int G, float *acc, int acc_stride) {
    for (int t = 0; t < nk; t += ATTN_CHUNK_KEYS) {
        attn_block_rows part = *v;
        part.key0 += t;
        tile_path_accumulate_part(blk, &part, KVQ_MIN(ATTN_CHUNK_KEYS, nk - t), wts + t, w_stride, G, acc,
                                  acc_stride);
    }
}

/* ---- fused: scores and V sums from the codes (attn_kvarn.inc) */

/* n fp16 values as floats, 0 up to `pad` (the kernels read whole vectors). */
static void halves_padded(const tile_unpack *u, const uint8_t *src, int n, int pad, float *out) {
    u->halves(src, n, out);
    for (int i = n; i < pad; i++) out[i] = 0.0f;
}

/* A head's records lie one after the other, tile by tile, so decode reads
 * each side as one stream.  The hardware prefetchers restart at every 4
 * KiB page, and a record (8-9 KiB at 128 channels, 4 bits) spans several:
 * each run fetches the bytes of the next one (kvq_prefetch_once), from
 * this record or, past its codes, the next tile's of this slice (and
 * that record's scales, which its first run reads), so that the fetches
 * spread over the tile's runs: here, in one burst before the kernel, for
 * records kept token-major; the kernels that read the lanes and pairs
 * layouts fetch the next run's codes themselves as they read this run's
 * (next_run_ahead).  Codes are in token order
 * in either layout (cache_tiles_layout.h: groups of 16 tokens), so run t0
 * .. t0 + nk - 1 is bytes t0 .. t0 + nk - 1 times a token's share.  A
 * hint only (uintptr_t arithmetic: no pointer is formed past the body; a
 * fetch past it is wasted, never a fault). */
static void prefetch_next_run(const kvq_cache_side *sd, const uint8_t *rec, int t0, int nk) {
    const uintptr_t tok = payload_bytes(sd) / T, end = payload_bytes(sd);
    uintptr_t from = (uintptr_t)(t0 + nk) * tok, to = from + (uintptr_t)nk * tok;
    uintptr_t base = (uintptr_t)rec;
    if (to > end) {   /* the rest of these codes, then the next tile's record, its scales first */
        if (from < end) kvq_prefetch_once(base + from, base + end);
        base += (uintptr_t)sd->n_slices * sd->record_bytes;
        kvq_prefetch_once(base + end, base + sd->record_bytes);
        from = from > end ? from - end : 0;
        to -= end;
    }
    kvq_prefetch_once(base + from, base + to);
}

/* The next run's codes' first byte, for a kernel that fetches them as it
 * reads this run's (K lanes: a vector's keys' share each; V pairs:
 * pairs_fetch_ahead, a group each): in this record, or the next tile's,
 * whose scales are fetched here.  A burst of a run's 64 lines before the
 * kernel waited for room among the fetches in flight (docs/performance.md,
 * "Prefetched into L2 again"). */
static uintptr_t next_run_ahead(const kvq_cache_side *sd, const uint8_t *rec, int t0, int nk) {
    const uintptr_t tok = payload_bytes(sd) / T, end = payload_bytes(sd), from = (uintptr_t)(t0 + nk) * tok;
    if (from < end) return (uintptr_t)rec + from;
    const uintptr_t next = (uintptr_t)rec + (uintptr_t)sd->n_slices * sd->record_bytes;
    kvq_prefetch_once(next + end, next + sd->record_bytes);
    return next + (from - end);
}

/* Runs of keys are at most one attention chunk (ATTN_RUN_KEYS), within
 * one tile; per slice each head's folded query q_c S_c is rounded to
 * int16 once (attn_block.h) and every key scored from its codes. */
static void kvq_tiles_score(const attn_block_kernels *blk, const attn_block_rows *k, const uint8_t *const *unused,
                            int nk, const attn_query *aq, int G, float scale, float *wts, int w_stride) {
    (void)unused;
    if (!blk->kvarn) { tile_path_score(blk, k, nk, aq, G, scale, wts, w_stride); return; }
    const kvq_cache_side *sd = k->sd;
    const int w = sd->tile.width, tile = k->key0 / T, t0 = k->key0 % T, bits = sd->tile.bits;
    const size_t tok_bytes = (size_t)w * bits / 8;
    const tile_unpack u = g_unpack[blk->isa];
    const bool lanes = sd->tile_layout;   /* the kernel that reads lanes (every fused level has it) */
    float S[MAX_WIDTH], Z[MAX_WIDTH], O[ATTN_RUN_KEYS], qscale[HEADS * MAX_WIDTH / 32], qz[HEADS];
    int16_t qi[HEADS * MAX_WIDTH];
    int8_t qb[HEADS * MAX_WIDTH];
    int32_t qsub[HEADS * MAX_WIDTH / 32];
    /* the int8 query (kvq_attend_opts.int8_query): the folded query rounded
     * to 127 levels, and for 4-bit codes in lanes multiplied as bytes */
    const bool q8 = aq->q8, bytes = q8 && lanes && bits == 4;
    for (int j = 0; j < G; j++) memset(wts + (size_t)j * w_stride, 0, (size_t)nk * sizeof *wts);
    /* one slice, one group of heads: the folded query is the same for the
     * tile's every chunk, made once per tile (k->memo) */
    attn_run_memo *memo = sd->n_slices == 1 && G <= HEADS ? k->memo : NULL;
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, k->kv_head, tile, s);
        const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
        const uintptr_t ahead = lanes ? next_run_ahead(sd, rec, t0, nk) : 0;
        if (!lanes) prefetch_next_run(sd, rec, t0, nk);
        if (memo) {
            if (memo->k_rec != rec || memo->k_heads != G) {   /* (one job: one query rounding) */
                u.halves(m.S, w, S);
                u.halves(m.Z, w, Z);
                u.halves(m.O, T, memo->k_o);
                memset(memo->k_o + T, 0, ATTN_RUN_KEYS * sizeof *memo->k_o);
                blk->kvarn->fold_query(aq->q, aq->stride, G, S, Z, w, bits, lanes, q8, memo->qi,
                                       bytes ? memo->qb : NULL, memo->qscale, memo->qsub, memo->qz);
                memo->k_rec = rec;
                memo->k_heads = G;
            }
            /* the kernels read O in whole vectors up to ATTN_RUN_KEYS past
             * t0 and use the first nk */
            const float *Ot = memo->k_o + t0;
            if (lanes)
                blk->kvarn->scores_lanes(bits, rec, w, t0, nk, memo->qi, bytes ? memo->qb : NULL, memo->qscale,
                                         memo->qsub, memo->qz, Ot, G, wts, w_stride, ahead);
            else
                blk->kvarn->scores(bits, rec + (size_t)t0 * tok_bytes, w, nk, memo->qi, memo->qscale, memo->qsub,
                                   memo->qz, Ot, G, wts, w_stride);
            continue;
        }
        halves_padded(&u, m.O + 2 * t0, nk, ATTN_RUN_KEYS, O);
        u.halves(m.S, w, S);
        u.halves(m.Z, w, Z);
        for (int j0 = 0; j0 < G; j0 += HEADS) {
            const int hg = KVQ_MIN(HEADS, G - j0);
            blk->kvarn->fold_query(aq->q + (size_t)j0 * aq->stride + (size_t)s * w, aq->stride, hg, S, Z, w,
                                   bits, lanes, q8, qi, bytes ? qb : NULL, qscale, qsub, qz);
            if (lanes)
                blk->kvarn->scores_lanes(bits, rec, w, t0, nk, qi, bytes ? qb : NULL, qscale, qsub, qz, O, hg,
                                         wts + (size_t)j0 * w_stride, w_stride, j0 ? 0 : ahead);
            else
                blk->kvarn->scores(bits, rec + (size_t)t0 * tok_bytes, w, nk, qi, qscale, qsub, qz, O, hg,
                                   wts + (size_t)j0 * w_stride, w_stride);
        }
    }
    for (int j = 0; j < G; j++) kvq_scale_floats(wts + (size_t)j * w_stride, nk, scale);
}

/* Which of the chunk's keys some head weights (live[t]), and how many.
 * The usual chunk has no zero weight at all: that is checked first. */
static int live_keys(const float *wts, int w_stride, int G, int nk, bool *live) {
    if (attn_block_all_weighted(wts, w_stride, G, nk)) {
        for (int t = 0; t < nk; t++) live[t] = true;
        return nk;
    }
    int n_live = 0;
    for (int t = 0; t < nk; t++) {
        bool l = false;
        for (int j = 0; j < G; j++) l |= wts[(size_t)j * w_stride + t] != 0.0f;
        live[t] = l;
        n_live += l;
    }
    return n_live;
}

/* sum_t p_t z_t over n keys in four interleaved partial sums, combined
 * pairwise: one fixed order (the same bits at every level and thread
 * count), and four add chains instead of one of n dependent adds, which
 * took about a tenth of a KVarN chunk's V step. */
static float weighted_sum(const float *p, const float *z, int n) {
    float s[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    int t = 0;
    for (; t + 4 <= n; t += 4)
        for (int k = 0; k < 4; k++) {
            const float m = p[t + k] * z[t + k];
            s[k] += m;
        }
    for (; t < n; t++) {
        const float m = p[t] * z[t];
        s[0] += m;
    }
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* A V record's scales as floats: the run's per-token scales S and zeros
 * Z, and the column scales O.  From the run memo, converted once per tile
 * (one slice), or into the caller's S, Z and O. */
typedef struct v_scales { const float *S, *Z, *O; } v_scales;

static v_scales v_record_scales(const tile_unpack *u, const kvq_cache_side *sd, const uint8_t *rec, int t0, int nk,
                                attn_run_memo *memo, float *S, float *Z, float *O) {
    const kvq_kvarn_meta m = kvq_kvarn_meta_of(sd->tile, rec);
    if (sd->n_slices == 1 && memo) {
        if (memo->v_rec != rec) {
            u->halves(m.O, sd->tile.width, memo->o);
            u->halves(m.S, T, memo->v_s);
            u->halves(m.Z, T, memo->v_z);
            memo->v_rec = rec;
        }
        return (v_scales){ memo->v_s + t0, memo->v_z + t0, memo->o };
    }
    u->halves(m.S + 2 * t0, nk, S);
    u->halves(m.Z + 2 * t0, nk, Z);
    u->halves(m.O, sd->tile.width, O);
    return (v_scales){ S, Z, O };
}

/* V sums of a run of a record kept in pairs (cache_tiles_layout.h), every
 * head's weights rounded to int16 (attn_kvarn.inc kvarn_values_pairs;
 * the row's zero Z_t and the codes' centre m S_t added as floats); false,
 * nothing added, when S, Z or a weight is not finite (the caller sums
 * the codes as floats, where a key of weight 0 stays out).  The kernel
 * checks what one call reads before it adds; with more than HEADS heads
 * (prefill) the later groups' weights are checked here first, so that no
 * group adds before a later one fails. */
static bool values_in_pairs(const attn_block_kernels *blk, const kvq_cache_side *sd, const uint8_t *rec, int t0,
                            int nk, v_scales sc, const float *wts, int w_stride, int G, float *acc, int acc_stride,
                            uintptr_t ahead) {
    for (int j = HEADS; j < G; j++)
        if (!keys_finite(wts + (size_t)j * w_stride, wts + (size_t)j * w_stride, nk)) return false;
    for (int j0 = 0; j0 < G; j0 += HEADS)
        if (!blk->kvarn->values_pairs(sd->tile.bits, rec, sd->tile.width, t0, nk, sc.S, sc.Z,
                                      wts + (size_t)j0 * w_stride, w_stride, KVQ_MIN(HEADS, G - j0), sc.O,
                                      acc + (size_t)j0 * acc_stride, acc_stride, j0 ? 0 : ahead))
            return false;
    return true;
}

/* Keys weighted 0 by every head are not read, and a weight of 0 adds
 * nothing (not 0 * S or 0 * Z: a non-finite record value stays out of the
 * heads that do not weight it). */
static void kvq_tiles_accumulate(const attn_block_kernels *blk, const attn_block_rows *v, const uint8_t *const *unused,
                                 int nk, const float *wts, int w_stride, int G, float *acc, int acc_stride) {
    (void)unused;
    if (!blk->kvarn) { tile_path_accumulate(blk, v, nk, wts, w_stride, G, acc, acc_stride); return; }
    const kvq_cache_side *sd = v->sd;
    const int w = sd->tile.width, tile = v->key0 / T, t0 = v->key0 % T, bits = sd->tile.bits;
    const size_t tok_bytes = (size_t)w * bits / 8;
    const tile_unpack u = g_unpack[blk->isa];
    float S[ATTN_RUN_KEYS], Z[ATTN_RUN_KEYS], O[MAX_WIDTH], ps[HEADS * ATTN_RUN_KEYS], pz[HEADS];
    bool live[ATTN_RUN_KEYS];
    const int n_live = live_keys(wts, w_stride, G, nk, live);
    if (!n_live) return;
    uint8_t buf[RUN_CODE_BYTES];
    for (int s = 0; s < sd->n_slices; s++) {
        const uint8_t *rec = record_of(sd, v->kv_head, tile, s);
        const bool pairs = sd->tile_layout;
        const uintptr_t ahead = pairs ? next_run_ahead(sd, rec, t0, nk) : 0;
        if (!pairs) prefetch_next_run(sd, rec, t0, nk);
        const v_scales sc = v_record_scales(&u, sd, rec, t0, nk, v->memo, S, Z, O);
        if (pairs && values_in_pairs(blk, sd, rec, t0, nk, sc, wts, w_stride, G, acc + (size_t)s * w,
                                     acc_stride, ahead))
            continue;
        const uint8_t *rows[ATTN_RUN_KEYS], *row = run_tokens(sd, rec, t0, nk, buf);
        for (int t = 0; t < nk; t++, row += tok_bytes) rows[t] = live[t] ? row : NULL;
        const bool finite = keys_finite(sc.S, sc.Z, nk);  /* S, Z finite: 0 * S = 0 without a test */
        for (int j0 = 0; j0 < G; j0 += HEADS) {
            const int hg = KVQ_MIN(HEADS, G - j0);
            for (int j = 0; j < hg; j++) {          /* p_t S_t and sum p_t Z_t per head */
                const float *pj = wts + (size_t)(j0 + j) * w_stride;
                float *pp = ps + j * ATTN_RUN_KEYS, z = 0.0f;
                if (finite) {
                    multiply_keys(pj, sc.S, nk, pp);
                    z = weighted_sum(pj, sc.Z, nk);
                } else {
                    for (int t = 0; t < nk; t++) {
                        const bool weighted = pj[t] != 0.0f;
                        pp[t] = weighted ? pj[t] * sc.S[t] : 0.0f;
                        z += weighted ? pj[t] * sc.Z[t] : 0.0f;
                    }
                }
                pz[j] = z;
            }
            blk->kvarn->values(bits, rows, nk, w, ps, ATTN_RUN_KEYS, hg, sc.O, pz,
                               acc + (size_t)j0 * acc_stride + (size_t)s * w, acc_stride);
        }
    }
}

static const kvq_row_hooks g_kvarn_hooks = {
    .name = "kvarn records",
    .score = kvq_tiles_score,
    .accumulate = kvq_tiles_accumulate,
    .max_keys = ATTN_RUN_KEYS,   /* 0.8x the step of 32-key runs (docs/performance.md) */
    .run_keys = T,
    .shape = kvq_tiles_shape,
    .scratch_floats = kvq_tiles_scratch_floats,
    .quantize = kvq_tiles_quantize,
    .read_row = kvq_tiles_read_row,
};

void kvq_kvarn_register(void) {
    static const kvq_type types[] = { KVQ_TYPE_KVARN2, KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN4,
                                      KVQ_TYPE_KVARN5, KVQ_TYPE_KVARN6, KVQ_TYPE_KVARN8 };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) kvq_format_set_hooks(types[i], &g_kvarn_hooks);
}
