/*
 * quant_iq4nl.c - iq4_nl: 32 values, fp16 d, 16 4-bit indices into a fixed
 * non-linear codebook (ggml's layout: byte j = idx[j] | idx[j+16] << 4).
 *
 * Decoding is fixed by the format.  The encoder is kvq's own: it searches
 * the block scale that minimises the plain squared error of the stored
 * (fp16-rounded) block.  Candidates: the reference's grid (the largest-
 * magnitude value mapped onto the codebook's end, nudged in 1/8 steps over
 * +-7), each refined by least-squares refits of d for the chosen indices,
 * with both unit and x^2 weights.  Every candidate is scored after fp16
 * rounding of d, so the best one is never worse than the reference's.
 */
#include "quant_block.h"

#include <math.h>

const int8_t kvq_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Index of the codebook entry nearest to v (values are sorted). */
static int nearest_index(float v) {
    if (v <= kvq_iq4nl_values[0]) return 0;
    if (v >= kvq_iq4nl_values[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < kvq_iq4nl_values[mid]) hi = mid; else lo = mid;
    }
    return v - kvq_iq4nl_values[lo] < kvq_iq4nl_values[hi] - v ? lo : hi;
}

/* Squared error of the block for scale d (rounded to fp16); fills idx. */
static float score_scale(const float *x, float d, uint8_t idx[KVQ_BLOCK], float *d_stored) {
    const float dh = kvq_half_to_float(kvq_float_to_half(d));
    const float id = dh != 0.0f ? 1.0f / dh : 0.0f;
    float err = 0.0f;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        int k = nearest_index(x[j] * id);
        idx[j] = (uint8_t)k;
        float e = x[j] - dh * kvq_iq4nl_values[k];
        err += e * e;
    }
    *d_stored = dh;
    return err;
}

/* Least-squares d for fixed indices, weights w_j = x_j^power (0 or 2). */
static float refit(const float *x, const uint8_t idx[KVQ_BLOCK], int power) {
    double num = 0, den = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        double w = power ? (double)x[j] * x[j] : 1.0, t = kvq_iq4nl_values[idx[j]];
        num += w * x[j] * t;
        den += w * t * t;
    }
    return den > 0 ? (float)(num / den) : 0.0f;
}

static void encode_block(const float *x, uint8_t *dst) {
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < KVQ_BLOCK; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); vmax = x[j]; }

    uint8_t best_idx[KVQ_BLOCK] = {0}, idx[KVQ_BLOCK];
    float best_d = 0.0f, best_err = 0.0f;
    for (int j = 0; j < KVQ_BLOCK; j++) best_err += x[j] * x[j]; /* d = 0 */

    if (amax > 0.0f) {
        for (int itry = -16; itry <= 16; itry++) {
            /* scale mapping vmax onto the codebook's most negative end, nudged */
            float d0 = vmax / ((float)kvq_iq4nl_values[0] + (float)itry);
            float d = d0;
            for (int round = 0; round < 3; round++) {
                float ds, err = score_scale(x, d, idx, &ds);
                if (err < best_err) { best_err = err; best_d = ds; memcpy(best_idx, idx, KVQ_BLOCK); }
                float d_unit = refit(x, idx, 0), d_w2 = refit(x, idx, 2);
                uint8_t idx2[KVQ_BLOCK];
                float ds2, err2 = score_scale(x, d_w2, idx2, &ds2);
                if (err2 < best_err) { best_err = err2; best_d = ds2; memcpy(best_idx, idx2, KVQ_BLOCK); }
                if (d_unit == 0.0f || d_unit == d) break;
                d = d_unit;
            }
        }
    }
    kvq_wr16(dst, kvq_float_to_half(best_d));
    for (int j = 0; j < 16; j++) dst[2 + j] = (uint8_t)(best_idx[j] | (best_idx[j + 16] << 4));
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
