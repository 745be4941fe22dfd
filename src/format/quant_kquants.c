/*
 * quant_kquants.c - scalar reference kernels of the K-quant weight types
 * (layouts in quant_kquants.h).  Each type has one super-block decoder;
 * dequantize, dot and axpy are generated from it, so the three kernels of
 * a type cannot disagree about the layout.
 */
#include "quant_kquants.h"

/* Q4_K and Q5_K share everything but the fifth bit (has_qh). */
static void decode_q45_K(const uint8_t *b, bool has_qh, float *y) {
    const float d = kvq_half_to_float(kvq_rd16(b));
    const float dmin = kvq_half_to_float(kvq_rd16(b + 2));
    const uint8_t *scales = b + 4;
    const uint8_t *qh = b + 16;
    const uint8_t *qs = has_qh ? b + 48 : b + 16;
    for (int c = 0; c < 4; c++) {                 /* 64-value chunks */
        const uint8_t *q = qs + 32 * c;
        for (int half = 0; half < 2; half++) {    /* low, then high nibbles */
            int sc, m;
            const int j = 2 * c + half;
            kvq_kq_scale_min(scales, j, &sc, &m);
            const float ds = d * (float)sc, dm = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int code = half ? q[l] >> 4 : q[l] & 15;
                if (has_qh) code |= ((qh[l] >> j) & 1) << 4;
                y[32 * j + l] = ds * (float)code - dm;
            }
        }
    }
}

static void decode_q4_K(const uint8_t *b, float *y) { decode_q45_K(b, false, y); }
static void decode_q5_K(const uint8_t *b, float *y) { decode_q45_K(b, true, y); }

/* Q6_K: each 128-value half n reads ql[64n..], qh[32n..], scales[8n..].
 * For l < 32 the four values l, l+32, l+64, l+96 of the half take their
 * low nibble from ql[l], ql[l+32], ql[l] >> 4, ql[l+32] >> 4 and their top
 * two bits from bits 0-1, 2-3, 4-5, 6-7 of qh[l]; value v of the half uses
 * scale v / 16. */
static void decode_q6_K(const uint8_t *b, float *y) {
    const float d = kvq_half_to_float(kvq_rd16(b + 208));
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(b + 192 + 8 * n);
        float *out = y + 128 * n;
        for (int l = 0; l < 32; l++) {
            const int lo[4] = { ql[l] & 15, ql[l + 32] & 15, ql[l] >> 4, ql[l + 32] >> 4 };
            for (int k = 0; k < 4; k++) {
                const int v = 32 * k + l;
                const int q = lo[k] | (((qh[l] >> (2 * k)) & 3) << 4);
                out[v] = d * (float)sc[v / 16] * (float)(q - 32);
            }
        }
    }
}

/* The three table kernels of a type from its decoder and block size. */
#define KVQ_KQUANT_TYPE(name, BYTES)                                                   \
    void kvq_##name##_dequantize(const void *src, float *y, int64_t n) {               \
        const uint8_t *in = src;                                                       \
        for (int64_t i = 0; i < n; i += KVQ_QK_K, in += (BYTES)) decode_##name(in, y + i); \
    }                                                                                  \
    float kvq_##name##_dot(const void *row, const float *x, int64_t n) {               \
        const uint8_t *in = row;                                                       \
        float w[KVQ_QK_K], sum = 0.0f;                                                 \
        for (int64_t i = 0; i < n; i += KVQ_QK_K, in += (BYTES)) {                     \
            decode_##name(in, w);                                                      \
            for (int j = 0; j < KVQ_QK_K; j++) sum += w[j] * x[i + j];                 \
        }                                                                              \
        return sum;                                                                    \
    }                                                                                  \
    void kvq_##name##_axpy(float a, const void *row, float *y, int64_t n) {            \
        const uint8_t *in = row;                                                       \
        float w[KVQ_QK_K];                                                             \
        for (int64_t i = 0; i < n; i += KVQ_QK_K, in += (BYTES)) {                     \
            decode_##name(in, w);                                                      \
            for (int j = 0; j < KVQ_QK_K; j++) y[i + j] += a * w[j];                   \
        }                                                                              \
    }

KVQ_KQUANT_TYPE(q4_K, KVQ_Q4_K_BYTES)
KVQ_KQUANT_TYPE(q5_K, KVQ_Q5_K_BYTES)
KVQ_KQUANT_TYPE(q6_K, KVQ_Q6_K_BYTES)
