/*
 * quant_iq4nl.c - iq4_nl: 32 values, fp16 d, 16 4-bit indices into a fixed
 * non-linear codebook (ggml's layout: byte j = idx[j] | idx[j+16] << 4).
 *
 * Decoding is fixed by the format.  The encoder is kvq's own: an exact
 * search of the fp16 scale that minimises the block's plain (unweighted)
 * squared error (see sweep_scales below), so it is never worse than any
 * other choice of scale and indices, the reference's included.  Blocks
 * holding NaN or +-inf are stored "poisoned": d = NaN, indices 0.
 */
#include "quant_block.h"

#include <math.h>
#include <stdlib.h>

const int8_t kvq_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Index of the codebook entry nearest to v (values are sorted; NaN -> 0). */
static int nearest_index(float v) {
    if (!(v > kvq_iq4nl_values[0])) return 0;
    if (v >= kvq_iq4nl_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < kvq_iq4nl_values[mid]) hi = mid; else lo = mid;
    }
    return v - kvq_iq4nl_values[lo] < kvq_iq4nl_values[hi] - v ? lo : hi;
}

/* Index k minimising (x - d*T[k])^2 for d != 0: the nearest entry to x/d,
 * confirmed against its neighbours in the error itself (x/d rounds). */
static int best_index(float x, float d) {
    int k = nearest_index(x / d);
    double best = ((double)x - (double)d * kvq_iq4nl_values[k]);
    best *= best;
    for (int c = k - 1; c <= k + 1; c += 2) {
        if (c < 0 || c > 15) continue;
        double e = (double)x - (double)d * kvq_iq4nl_values[c];
        if (e * e < best) { best = e * e; k = c; }
    }
    return k;
}

/*
 * Exact scale search.  For a fixed d > 0 the best index of x_j is the
 * codebook entry nearest to x_j/d, so the block's squared error
 *     SSE(d) = sum_j min_k (x_j - d*T_k)^2
 * is piecewise quadratic in d: the index of x_j changes only where x_j/d
 * crosses the midpoint of two neighbouring entries, d = x_j / mid_k.
 * Between consecutive breakpoints [lo, hi] the indices are fixed and
 *     SSE(d) = Sxx - 2 d Sxt + d^2 Stt     (Sxt = sum x_j T_j, Stt = sum T_j^2),
 * a convex parabola with minimum at d* = Sxt/Stt.  The stored d is fp16,
 * so the best stored scale inside [lo, hi] is one of the two fp16 values
 * around clamp(d*, lo, hi).  Sweeping all intervals in order of d, with
 * Sxt and Stt updated at each breakpoint, visits every fp16 candidate that
 * can be optimal: the result is the global minimum of SSE over all fp16
 * scales of one sign.  d < 0 is the same search on -x.
 */
typedef struct scale_event {
    float d;            /* breakpoint                                   */
    float x;            /* the value whose index changes                */
    int16_t t_from, t_to; /* codebook values before and after            */
} scale_event;

static int event_cmp(const void *a, const void *b) {
    float da = ((const scale_event *)a)->d, db = ((const scale_event *)b)->d;
    return (da > db) - (da < db);
}

typedef struct scale_choice { float d; double sse; } scale_choice;

/* Score the fp16 scales around clamp(d*, lo, hi) that lie in [lo, hi]. */
static void try_interval(double sxx, double sxt, double stt, float lo, float hi, scale_choice *best) {
    double dstar = sxt / stt;
    float c = dstar <= lo ? lo : dstar >= hi ? hi : (float)dstar;
    if (!(c > 0.0f)) c = lo;
    uint16_t h = kvq_float_to_half(c);
    if (h >= 0x7c00u) h = 0x7bffu;                    /* largest finite half */
    float v = kvq_half_to_float(h);
    uint16_t h2 = (v < c || h == 0) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
    const uint16_t cand[2] = { h, h2 };
    for (int i = 0; i < 2; i++) {
        if (cand[i] == 0 || cand[i] >= 0x7c00u) continue;
        float dv = kvq_half_to_float(cand[i]);
        if (dv < lo || dv > hi) continue;
        double sse = sxx - 2.0 * dv * sxt + (double)dv * dv * stt;
        if (sse < best->sse) { best->sse = sse; best->d = dv; }
    }
}

/* Best fp16 d > 0 for x scaled by sign (+1 / -1); updates best with
 * d carrying the sign. */
static void sweep_scales(const float *x, float sign, double sxx, scale_choice *best) {
    scale_event ev[KVQ_BLOCK * 8];
    int nev = 0;
    double sxt = 0, stt = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        const float xs = sign * x[j];
        /* as d grows from 0+, x/d moves from +-inf towards 0 */
        int k = xs > 0 ? 15 : xs < 0 ? 0 : 8;
        sxt += (double)xs * kvq_iq4nl_values[k];
        stt += (double)kvq_iq4nl_values[k] * kvq_iq4nl_values[k];
        if (xs > 0) {
            for (; k > 8; k--) {
                float mid = 0.5f * (float)(kvq_iq4nl_values[k - 1] + kvq_iq4nl_values[k]);
                ev[nev++] = (scale_event){ xs / mid, xs, kvq_iq4nl_values[k], kvq_iq4nl_values[k - 1] };
            }
        } else if (xs < 0) {
            for (; k < 8; k++) {
                float mid = 0.5f * (float)(kvq_iq4nl_values[k] + kvq_iq4nl_values[k + 1]);
                ev[nev++] = (scale_event){ xs / mid, xs, kvq_iq4nl_values[k], kvq_iq4nl_values[k + 1] };
            }
        }
    }
    qsort(ev, (size_t)nev, sizeof ev[0], event_cmp);
    scale_choice local = { 0.0f, best->sse };
    float lo = 0.0f;
    for (int e = 0; e <= nev; e++) {
        const float hi = e < nev ? ev[e].d : INFINITY;
        /* the parabola's minimum bounds every candidate of the interval */
        double floor_sse = sxx - sxt * sxt / stt;
        if (hi >= lo && floor_sse < local.sse) try_interval(sxx, sxt, stt, lo, hi, &local);
        if (e == nev) break;
        sxt += (double)ev[e].x * (ev[e].t_to - ev[e].t_from);
        stt += (double)ev[e].t_to * ev[e].t_to - (double)ev[e].t_from * ev[e].t_from;
        lo = hi;
    }
    if (local.sse < best->sse) { best->sse = local.sse; best->d = sign * local.d; }
}

static void encode_block(const float *x, uint8_t *dst) {
    if (!kvq_block_is_finite(x)) {               /* docs/formats.md: poisoned block */
        kvq_wr16(dst, KVQ_HALF_NAN);
        memset(dst + 2, 0, 16);
        return;
    }
    double sxx = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) sxx += (double)x[j] * x[j];
    scale_choice best = { 0.0f, sxx };       /* d = 0 decodes to zeros */
    if (sxx > 0) {
        sweep_scales(x, 1.0f, sxx, &best);
        sweep_scales(x, -1.0f, sxx, &best);
    }
    uint8_t idx[KVQ_BLOCK];
    for (int j = 0; j < KVQ_BLOCK; j++) idx[j] = best.d != 0.0f ? (uint8_t)best_index(x[j], best.d) : 8;
    kvq_wr16(dst, kvq_float_to_half(best.d));
    for (int j = 0; j < 16; j++) dst[2 + j] = (uint8_t)(idx[j] | (idx[j + 16] << 4));
}

static void decode_block(const uint8_t *src, float *y) {
    const float d = kvq_half_to_float(kvq_rd16(src));
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)kvq_iq4nl_values[src[2 + j] & 15];
        y[j + 16] = d * (float)kvq_iq4nl_values[src[2 + j] >> 4];
    }
}

void kvq_iq4_nl_quantize(const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, out += 18) encode_block(x + i, out);
}

void kvq_iq4_nl_dequantize(const void *src, float *y, int64_t n) {
    const uint8_t *in = src;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += 18) decode_block(in, y + i);
}

float kvq_iq4_nl_dot(const void *row, const float *x, int64_t n) {
    const uint8_t *in = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += 18) {
        float s = 0.0f;
        for (int j = 0; j < 16; j++)
            s += (float)kvq_iq4nl_values[in[2 + j] & 15] * x[i + j] +
                 (float)kvq_iq4nl_values[in[2 + j] >> 4] * x[i + j + 16];
        sum += kvq_half_to_float(kvq_rd16(in)) * s;
    }
    return sum;
}

void kvq_iq4_nl_axpy(float w, const void *row, float *y, int64_t n) {
    const uint8_t *in = row;
    float tmp[KVQ_BLOCK];
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += 18) {
        decode_block(in, tmp);
        for (int j = 0; j < KVQ_BLOCK; j++) y[i + j] += w * tmp[j];
    }
}
