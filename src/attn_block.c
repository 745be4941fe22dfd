/*
 * attn_block.c - the chunked key loop of attention (attn_block.h): the
 * scalar instance of the kernels, the choice of ISA, and the two steps
 * the attention pass calls per chunk (scores of the K rows, weighted sum
 * of the V rows), which unpack the chunk's rows with the type's
 * dequantize first or hand the packed rows to the level's fused kernels.
 */
#include "attn_block.h"

#include <math.h>

/* ------------------------------------------------ the scalar instance */

#define VF float
#define VL 1
#define vzero() 0.0f
#define vset1(f) (f)
#define vload(p) (*(p))
#define vstore(p, v) (*(p) = (v))
#define vadd(a, b) ((a) + (b))
#define vsub(a, b) ((a) - (b))
#define vmul(a, b) ((a) * (b))
#define vfma(a, b, c) ((a) * (b) + (c))
#define vmin_hi(hi, x) ((x) > (hi) ? (hi) : (x))
#define vmax_skip(x, m) ((x) > (m) ? (x) : (m))
#define vzero_below(x, lo, y) ((x) < (lo) ? 0.0f : (y))
#define vhsum(v) (v)
#define vhmax(v) (v)
#define BLOCK_LEVEL "scalar"
#define vsum_lanes(acc, s) ((s)[0] = (acc)[0])
#define BLOCK_KERNELS g_block_scalar

/* 2^n from the exponent bits; n outside [-126, 127] (or NaN, which only
 * reaches here with a NaN x) returns 1, whose product is masked or NaN. */
static inline float vpow2(float n) {
    if (!(n >= -126.0f && n <= 127.0f)) return 1.0f;
    return kvq_bits_f32((uint32_t)((int32_t)n + 127) << 23);
}

#include "attn_block.inc"

float attn_block_exp(float x) { return vexp(x); }

/* ------------------------------------------------------- ISA choice */

const attn_block_kernels *attn_block_level(const char *level) {
    const kvq_cpu *cpu = kvq_cpu_features();
    if (!level) return NULL;
    if (strcmp(level, "scalar") == 0) return &g_block_scalar;
#if defined(__x86_64__)
    if (strcmp(level, "avx2") == 0) return cpu->avx2 && cpu->fma && cpu->f16c ? attn_block_avx2() : NULL;
    if (strcmp(level, "avx512") == 0) return cpu->avx512 ? attn_block_avx512() : NULL;
    if (strcmp(level, "avx512-tile") == 0) return cpu->avx512 ? attn_block_avx512_tile() : NULL;
#else
    (void)cpu;
#endif
    return NULL;
}

const attn_block_kernels *attn_block_best(void) {
    static const char *const levels[] = { "avx512", "avx2" };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(levels); i++) {
        const attn_block_kernels *k = attn_block_level(levels[i]);
        if (k) return k;
    }
    return &g_block_scalar;
}

/* ------------------------------------------------ the steps of a chunk */

/* Row t of the chunk as f32: in place for f32 rows, else unpacked into
 * slot t of the tile. */
static const float *unpack_row(const attn_block_rows *src, const uint8_t *row, int t) {
    if (src->f32) return (const float *)(const void *)row;
    float *dst = src->tile + (size_t)t * (size_t)src->len;
    src->tr->dequantize(row, dst, src->len);
    return dst;
}

const attn_block_fused *attn_block_fused_for(const attn_block_kernels *kr, const attn_block_rows *src) {
    if (src->f32 || !kr->fused || src->len > 32 * ATTN_FUSED_MAX_BLOCKS) return NULL;
    const kvq_type_traits *own = kvq_type_get(KVQ_TYPE_F32);     /* row 0 of the library's table */
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        if (src->tr != own + t) continue;
        const attn_block_fused *f = &kr->fused[t];
        return f->block_bytes == src->tr->block_bytes && src->tr->block_size == 32 ? f : NULL;
    }
    return NULL;
}

void attn_block_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows,
                       int nk, const float *q, int G, int q_stride, float scale, float *w, int ldw) {
    const attn_block_fused *fz = attn_block_fused_for(kr, k);
    if (fz) {
        fz->scores(rows, nk, q, G, q_stride, k->len, scale, w, ldw);
        return;
    }
    const float *keys[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) keys[t] = unpack_row(k, rows[t], t);
    kr->scores(keys, nk, q, G, q_stride, k->len, scale, w, ldw);
}

static bool row_is_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* Add a non-finite row x only to the heads that weight it (0 * inf
 * would turn the others into NaN). */
static void add_where_weighted(const float *x, int64_t len, const float *w, int ldw, int t, int G, float *acc,
                               int acc_stride) {
    for (int g = 0; g < G; g++) {
        const float wt = w[(size_t)g * ldw + t];
        if (wt == 0.0f) continue;
        for (int64_t d = 0; d < len; d++) acc[(size_t)g * acc_stride + d] += wt * x[d];
    }
}

/* How many of the G heads give key t a nonzero weight. */
static int heads_weighting(const float *w, int ldw, int G, int t) {
    int weighted = 0;
    for (int g = 0; g < G; g++) weighted += w[(size_t)g * ldw + t] != 0.0f;
    return weighted;
}

/* A packed row's values are finite iff its fp16 headers are (codes are
 * small integers): exponent bits all ones is inf or NaN. */
static bool packed_row_is_finite(const attn_block_fused *f, const uint8_t *row, int64_t len) {
    for (int64_t b = 0; b < len / 32; b++, row += f->block_bytes) {
        if ((kvq_rd16(row) & 0x7c00) == 0x7c00) return false;
        if (f->has_min && (kvq_rd16(row + 2) & 0x7c00) == 0x7c00) return false;
    }
    return true;
}

/* The fused V step.  A finite row is added with its weights as they are
 * (a weight of 0 adds 0); a non-finite one (an inf or NaN block scale)
 * only to the heads that weight it, as in the per-key pass. */
static void values_fused(const attn_block_fused *fz, const attn_block_rows *v, const uint8_t *const *rows,
                         int nk, const float *w, int ldw, int G, float *acc, int acc_stride) {
    const uint8_t *keep[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) {
        keep[t] = rows[t];
        if (packed_row_is_finite(fz, rows[t], v->len)) continue;
        keep[t] = NULL;
        if (!heads_weighting(w, ldw, G, t)) continue;
        v->tr->dequantize(rows[t], v->tile, v->len);
        add_where_weighted(v->tile, v->len, w, ldw, t, G, acc, acc_stride);
    }
    fz->accumulate(keep, nk, w, ldw, G, acc, acc_stride, v->len);
}

void attn_block_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows,
                       int nk, const float *w, int ldw, int G, float *acc, int acc_stride) {
    const attn_block_fused *fz = attn_block_fused_for(kr, v);
    if (fz) {
        values_fused(fz, v, rows, nk, w, ldw, G, acc, acc_stride);
        return;
    }
    const float *vals[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) {
        const int weighted = heads_weighting(w, ldw, G, t);
        if (!weighted) { vals[t] = v->zero; continue; }
        vals[t] = unpack_row(v, rows[t], t);
        if (weighted == G || row_is_finite(vals[t], v->len)) continue;
        add_where_weighted(vals[t], v->len, w, ldw, t, G, acc, acc_stride);
        vals[t] = v->zero;
    }
    kr->accumulate(vals, nk, w, ldw, G, acc, acc_stride, v->len);
}
