/*
 * quant_block.c - scalar reference for the plain types (f32, f16, bf16)
 * and the 32-value block types q8_0, q6_0 ... q2_1 (docs/spec/formats.md §1-2).
 *
 * Every q*_0 / q*_1 type is one instance of the same scheme, described by
 * a block_spec (bits, offset or min, encoder rule); nothing here is
 * duplicated per bit width.  Layout of a block:
 *
 *   fp16 d, [fp16 m], code planes narrowest first
 *
 * The b-bit code of element j is split over planes: the widest plane holds
 * the low bits.  Plane layouts (chosen so that q4/q5 equal ggml's bytes):
 *   4-bit plane, 16 bytes: byte j = code[j] | code[j+16] << 4
 *   2-bit plane,  8 bytes: byte j = code[j] | code[j+8]<<2 | code[j+16]<<4 | code[j+24]<<6
 *   1-bit plane,  4 bytes: little-endian uint32, bit j = code[j]
 * So q6 = 2-bit plane (bits 4-5) + 4-bit plane; q5 = 1-bit (bit 4) + 4-bit
 * (ggml's qh then qs); q3 = 1-bit (bit 2) + 2-bit; q2 = 2-bit.
 * q8_0 stores int8 codes instead (ggml's layout).
 */
#include "quant_block.h"

#include <float.h>
#include <math.h>

/* ------------------------------------------------------------ code planes */

/* Plane widths for a code of `bits` bits, narrowest first; returns count. */
static int plane_widths(int bits, int w[2]) {
    switch (bits) {
    case 6: w[0] = 2; w[1] = 4; return 2;
    case 5: w[0] = 1; w[1] = 4; return 2;
    case 4: w[0] = 4; return 1;
    case 3: w[0] = 1; w[1] = 2; return 2;
    case 2: w[0] = 2; return 1;
    default: return 0;
    }
}

static void pack_plane(const uint8_t q[KVQ_BLOCK], int width, int shift, uint8_t *out) {
    const int mask = (1 << width) - 1;
    if (width == 4) {
        for (int j = 0; j < 16; j++)
            out[j] = (uint8_t)(((q[j] >> shift) & mask) | (((q[j + 16] >> shift) & mask) << 4));
    } else if (width == 2) {
        for (int j = 0; j < 8; j++) {
            int b = 0;
            for (int k = 0; k < 4; k++) b |= ((q[j + 8 * k] >> shift) & mask) << (2 * k);
            out[j] = (uint8_t)b;
        }
    } else { /* width 1 */
        uint32_t bitsv = 0;
        for (int j = 0; j < KVQ_BLOCK; j++) bitsv |= (uint32_t)((q[j] >> shift) & 1) << j;
        for (int k = 0; k < 4; k++) out[k] = (uint8_t)(bitsv >> (8 * k));
    }
}

static void unpack_plane(const uint8_t *in, int width, int shift, uint8_t q[KVQ_BLOCK]) {
    if (width == 4) {
        for (int j = 0; j < 16; j++) {
            q[j] |= (uint8_t)((in[j] & 15) << shift);
            q[j + 16] |= (uint8_t)((in[j] >> 4) << shift);
        }
    } else if (width == 2) {
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) q[j + 8 * k] |= (uint8_t)(((in[j] >> (2 * k)) & 3) << shift);
    } else {
        uint32_t bitsv = (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
        for (int j = 0; j < KVQ_BLOCK; j++) q[j] |= (uint8_t)(((bitsv >> j) & 1) << shift);
    }
}

static void pack_codes(const uint8_t q[KVQ_BLOCK], int bits, uint8_t *out) {
    int w[2], np = plane_widths(bits, w);
    /* widest (last) plane holds the low bits */
    int shift = 0;
    int shifts[2];
    for (int p = np - 1; p >= 0; p--) { shifts[p] = shift; shift += w[p]; }
    for (int p = 0; p < np; p++) {
        pack_plane(q, w[p], shifts[p], out);
        out += w[p] * KVQ_BLOCK / 8;
    }
}

static void unpack_codes(const uint8_t *in, int bits, uint8_t q[KVQ_BLOCK]) {
    int w[2], np = plane_widths(bits, w);
    int shift = 0, shifts[2];
    for (int p = np - 1; p >= 0; p--) { shifts[p] = shift; shift += w[p]; }
    memset(q, 0, KVQ_BLOCK);
    for (int p = 0; p < np; p++) {
        unpack_plane(in, w[p], shifts[p], q);
        in += w[p] * KVQ_BLOCK / 8;
    }
}

/* ------------------------------------------------------------ block types */

typedef struct block_spec {
    int bits;        /* code width                                        */
    bool has_min;    /* q*_1: x = d*q + m ; q*_0: x = d*(q - 2^(bits-1))  */
    bool refit;      /* q6_0: least-squares refit of d after choosing codes */
} block_spec;

static int spec_header(const block_spec *s) { return s->has_min ? 4 : 2; }
static int spec_bytes(const block_spec *s) { return spec_header(s) + s->bits * KVQ_BLOCK / 8; }

/* Encode one block of 32 values (the docs/spec/formats.md §2 reference rules; the
 * float arithmetic mirrors the reference so q4/q5 bytes are identical). */
static void encode_block(const block_spec *s, const float *x, uint8_t *dst) {
    const int qmax = (1 << s->bits) - 1;
    if (!kvq_block_is_finite(x)) {
        kvq_wr16(dst, KVQ_HALF_NAN);
        if (s->has_min) kvq_wr16(dst + 2, KVQ_HALF_NAN);
        memset(dst + spec_header(s), 0, (size_t)(s->bits * KVQ_BLOCK / 8));
        return;
    }
    uint8_t q[KVQ_BLOCK];
    float d;
    if (s->has_min) {
        float lo = FLT_MAX, hi = -FLT_MAX;
        for (int j = 0; j < KVQ_BLOCK; j++) {
            if (x[j] < lo) lo = x[j];
            if (x[j] > hi) hi = x[j];
        }
        d = (hi - lo) / (float)qmax;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) {
            q[j] = (uint8_t)kvq_code_clamp((x[j] - lo) * id + 0.5f, 0, qmax, 0);
        }
        kvq_wr16(dst + 2, kvq_float_to_half(lo));
    } else {
        /* d from the value of largest magnitude, sign kept: that value maps
         * to the most negative code, which has one more step than the
         * positive side. */
        const int off = 1 << (s->bits - 1);
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); vmax = x[j]; }
        }
        d = vmax / (float)-off;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) {
            q[j] = (uint8_t)kvq_code_clamp(x[j] * id + ((float)off + 0.5f), 0, qmax, off);
        }
        if (s->refit) {
            /* weighted least squares with w = x^2 over the chosen codes */
            double num = 0, den = 0;
            for (int j = 0; j < KVQ_BLOCK; j++) {
                double w = (double)x[j] * x[j], c = q[j] - off;
                num += w * x[j] * c;
                den += w * c * c;
            }
            if (den > 0) d = (float)(num / den);
        }
    }
    kvq_wr16(dst, kvq_float_to_half(d));
    pack_codes(q, s->bits, dst + spec_header(s));
}

static void decode_block(const block_spec *s, const uint8_t *src, float *y) {
    uint8_t q[KVQ_BLOCK];
    unpack_codes(src + spec_header(s), s->bits, q);
    const float d = kvq_half_to_float(kvq_rd16(src));
    if (s->has_min) {
        const float m = kvq_half_to_float(kvq_rd16(src + 2));
        for (int j = 0; j < KVQ_BLOCK; j++) y[j] = d * (float)q[j] + m;
    } else {
        const int off = 1 << (s->bits - 1);
        for (int j = 0; j < KVQ_BLOCK; j++) y[j] = d * (float)(q[j] - off);
    }
}

static void spec_quantize(const block_spec *s, const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, out += spec_bytes(s)) encode_block(s, x + i, out);
}

static void spec_dequantize(const block_spec *s, const void *src, float *y, int64_t n) {
    const uint8_t *in = src;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += spec_bytes(s)) decode_block(s, in, y + i);
}

static float spec_dot(const block_spec *s, const void *row, const float *x, int64_t n) {
    const uint8_t *in = row;
    float tmp[KVQ_BLOCK], sum = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += spec_bytes(s)) {
        decode_block(s, in, tmp);
        for (int j = 0; j < KVQ_BLOCK; j++) sum += tmp[j] * x[i + j];
    }
    return sum;
}

static void spec_axpy(const block_spec *s, float w, const void *row, float *y, int64_t n) {
    const uint8_t *in = row;
    float tmp[KVQ_BLOCK];
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += spec_bytes(s)) {
        decode_block(s, in, tmp);
        for (int j = 0; j < KVQ_BLOCK; j++) y[i + j] += w * tmp[j];
    }
}

/* One line per block type: its spec and the four kernels of the table. */
#define KVQ_BLOCK_TYPE(name, BITS, HAS_MIN, REFIT)                                     \
    static const block_spec spec_##name = { BITS, HAS_MIN, REFIT };                    \
    void kvq_##name##_quantize(const float *x, void *dst, int64_t n) {                 \
        spec_quantize(&spec_##name, x, dst, n);                                        \
    }                                                                                  \
    void kvq_##name##_dequantize(const void *src, float *y, int64_t n) {               \
        spec_dequantize(&spec_##name, src, y, n);                                      \
    }                                                                                  \
    float kvq_##name##_dot(const void *row, const float *x, int64_t n) {               \
        return spec_dot(&spec_##name, row, x, n);                                      \
    }                                                                                  \
    void kvq_##name##_axpy(float w, const void *row, float *y, int64_t n) {            \
        spec_axpy(&spec_##name, w, row, y, n);                                         \
    }

KVQ_BLOCK_TYPE(q6_0, 6, false, true)
KVQ_BLOCK_TYPE(q6_1, 6, true, false)
KVQ_BLOCK_TYPE(q5_0, 5, false, false)
KVQ_BLOCK_TYPE(q5_1, 5, true, false)
KVQ_BLOCK_TYPE(q4_0, 4, false, false)
KVQ_BLOCK_TYPE(q4_1, 4, true, false)
KVQ_BLOCK_TYPE(q3_0, 3, false, false)
KVQ_BLOCK_TYPE(q3_1, 3, true, false)
KVQ_BLOCK_TYPE(q2_0, 2, false, false)
KVQ_BLOCK_TYPE(q2_1, 2, true, false)

/* ------------------------------------------------------------------ q8_0 */
/* fp16 d then 32 int8 codes; d = max|x|/127, q = round(x/d) (roundf:
 * halves away from zero, as the reference). */

void kvq_q8_0_quantize(const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, out += KVQ_BYTES_Q8_0) {
        if (!kvq_block_is_finite(x + i)) {
            kvq_wr16(out, KVQ_HALF_NAN);
            memset(out + 2, 0, KVQ_BLOCK);
            continue;
        }
        float amax = 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) amax = KVQ_MAX(amax, fabsf(x[i + j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        kvq_wr16(out, kvq_float_to_half(d));
        for (int j = 0; j < KVQ_BLOCK; j++) out[2 + j] = (uint8_t)(int8_t)kvq_code_clamp(roundf(x[i + j] * id), -127, 127, 0);
    }
}

void kvq_q8_0_dequantize(const void *src, float *y, int64_t n) {
    const uint8_t *in = src;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_Q8_0) {
        const float d = kvq_half_to_float(kvq_rd16(in));
        for (int j = 0; j < KVQ_BLOCK; j++) y[i + j] = d * (float)(int8_t)in[2 + j];
    }
}

float kvq_q8_0_dot(const void *row, const float *x, int64_t n) {
    const uint8_t *in = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_Q8_0) {
        float s = 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) s += (float)(int8_t)in[2 + j] * x[i + j];
        sum += kvq_half_to_float(kvq_rd16(in)) * s;
    }
    return sum;
}

void kvq_q8_0_axpy(float w, const void *row, float *y, int64_t n) {
    const uint8_t *in = row;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_Q8_0) {
        const float wd = w * kvq_half_to_float(kvq_rd16(in));
        for (int j = 0; j < KVQ_BLOCK; j++) y[i + j] += wd * (float)(int8_t)in[2 + j];
    }
}

/* ------------------------------------------------------ f32 / f16 / bf16 */
/* One generator for the three plain types: load and store of one value. */

static inline float load_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline void store_f32(void *p, int64_t i, float v) { ((float *)p)[i] = v; }
static inline float load_f16(const void *p, int64_t i) {
    return kvq_half_to_float(kvq_rd16((const uint8_t *)p + 2 * i));
}
static inline void store_f16(void *p, int64_t i, float v) {
    kvq_wr16((uint8_t *)p + 2 * i, kvq_float_to_half(v));
}
static inline float load_bf16(const void *p, int64_t i) {
    return kvq_bfloat_to_float(kvq_rd16((const uint8_t *)p + 2 * i));
}
static inline void store_bf16(void *p, int64_t i, float v) {
    kvq_wr16((uint8_t *)p + 2 * i, kvq_float_to_bfloat(v));
}

#define KVQ_PLAIN_TYPE(name)                                                           \
    void kvq_##name##_quantize(const float *x, void *dst, int64_t n) {                 \
        for (int64_t i = 0; i < n; i++) store_##name(dst, i, x[i]);                    \
    }                                                                                  \
    void kvq_##name##_dequantize(const void *src, float *y, int64_t n) {               \
        for (int64_t i = 0; i < n; i++) y[i] = load_##name(src, i);                    \
    }                                                                                  \
    float kvq_##name##_dot(const void *row, const float *x, int64_t n) {               \
        float s = 0.0f;                                                                \
        for (int64_t i = 0; i < n; i++) s += load_##name(row, i) * x[i];               \
        return s;                                                                      \
    }                                                                                  \
    void kvq_##name##_axpy(float w, const void *row, float *y, int64_t n) {            \
        for (int64_t i = 0; i < n; i++) y[i] += w * load_##name(row, i);               \
    }

KVQ_PLAIN_TYPE(f32)
KVQ_PLAIN_TYPE(f16)
KVQ_PLAIN_TYPE(bf16)
