/*
 * simd_x86_kernels.h - the SIMD row kernels, written once for any vector
 * width.  Included by simd_avx2.c (8 floats per vector) and simd_avx512.c
 * (16), each of which first includes the primitive set of its width
 * (src/base/vec8.h, vec16.h: VF, VL, VPB, vzero, vset1, vload, vstore,
 * vadd, vmul, vfma, vhsum, vload_h, vload_bf) and defines the format's own:
 *
 *   vcodes_float(__m256i codes, VF out[VPB])   32 int8 -> floats
 *   vcodes_q8_0(const uint8_t *p, VF out[VPB]) 32 int8 at p -> floats
 *   vscale_h(const uint8_t *p)                 the fp16 at p in every lane
 *   vstore_h / vstore_bf (VL values)
 *   q8_codes_store(const VF v[VPB], float id, uint8_t *dst)
 *   vabs_max(const VF v[VPB]) -> max |v| (inputs finite)
 *
 * Block types: one decoder per layout (simd_x86_codes.h) feeds the same
 * three loops; plain types: one loader per storage type.  Everything here
 * is static, so each ISA file gets its own copy compiled with its flags.
 *
 * Rounding: dequantisation does exactly the scalar reference's operations
 * (d*code, then +m), so it is bitwise identical; dot and axpy use FMA and
 * a different summation order, so they agree with the reference to float
 * rounding (tests/test_simd.c).
 */
#include "simd_x86_codes.h"

/* ------------------------------------------------------------ block types */

/* An fp16 field through F16C (one instruction; the same value as
 * kvq_half_to_float except for the payload of a signalling NaN, which only
 * the bitwise-compared dequantiser would show, so it keeps the scalar one). */
static inline float scale_of(const uint8_t *p) { return _cvtsh_ss(kvq_rd16(p)); }

#define KVQ_SIMD_BLOCK_KERNELS(name, BYTES, HAS_MIN, FLOATS)                              \
    static void simd_##name##_dequantize(const void *src, float *y, int64_t n) {          \
        const uint8_t *b = src;                                                           \
        for (int64_t i = 0; i < n; i += KVQ_BLOCK, b += (BYTES)) {                        \
            VF c[VPB];                                                                    \
            FLOATS(name, b, c);                                                           \
            const VF d = vset1(kvq_half_to_float(kvq_rd16(b)));                           \
            const VF m = vset1((HAS_MIN) ? kvq_half_to_float(kvq_rd16(b + 2)) : 0.0f);    \
            for (int k = 0; k < VPB; k++) {                                               \
                VF v = vmul(d, c[k]);                                                     \
                if (HAS_MIN) v = vadd(v, m); /* never +0 onto -0 for q*_0 */              \
                vstore(y + i + k * VL, v);                                                \
            }                                                                             \
        }                                                                                 \
    }                                                                                     \
    /* sum_j (d*c_j + m) x_j = d * sum_j c_j x_j + m * sum_j x_j */                       \
    static float simd_##name##_dot(const void *row, const float *x, int64_t n) {          \
        const uint8_t *b = row;                                                           \
        VF acc = vzero(), acc_m = vzero();                                                \
        for (int64_t i = 0; i < n; i += KVQ_BLOCK, b += (BYTES)) {                        \
            VF c[VPB];                                                                    \
            FLOATS(name, b, c);                                                           \
            const float *xb = x + i;                                                      \
            VF cx = vmul(c[0], vload(xb));                                                \
            for (int k = 1; k < VPB; k++) cx = vfma(c[k], vload(xb + k * VL), cx);        \
            acc = vfma(vscale_h(b), cx, acc);                                             \
            if (HAS_MIN) {                                                                \
                VF sx = vload(xb);                                                        \
                for (int k = 1; k < VPB; k++) sx = vadd(sx, vload(xb + k * VL));          \
                acc_m = vfma(vscale_h(b + 2), sx, acc_m);                                 \
            }                                                                             \
        }                                                                                 \
        return (HAS_MIN) ? vhsum(vadd(acc, acc_m)) : vhsum(acc);                          \
    }                                                                                     \
    /* y += w*(d*c + m) = (w*d)*c + (w*m) */                                              \
    static void simd_##name##_axpy(float w, const void *row, float *y, int64_t n) {       \
        const uint8_t *b = row;                                                           \
        for (int64_t i = 0; i < n; i += KVQ_BLOCK, b += (BYTES)) {                        \
            VF c[VPB];                                                                    \
            FLOATS(name, b, c);                                                           \
            const VF wd = vset1(w * scale_of(b));                                         \
            const VF wm = vset1((HAS_MIN) ? w * scale_of(b + 2) : 0.0f);                  \
            for (int k = 0; k < VPB; k++) {                                               \
                float *yk = y + i + k * VL;                                               \
                VF acc = vload(yk);                                                       \
                if (HAS_MIN) acc = vadd(acc, wm);                                         \
                vstore(yk, vfma(wd, c[k], acc));                                          \
            }                                                                             \
        }                                                                                 \
    }

/* A block's 32 codes as floats: through the type's decoder
 * (simd_x86_codes.h), or for q8_0's plain bytes converted straight from
 * memory (vcodes_q8_0: no 32-byte load and lane extracts; the values are
 * the same). */
#define DECODED_FLOATS(name, b, c) vcodes_float(codes_##name(b), c)
#define Q8_0_FLOATS(name, b, c) vcodes_q8_0((b) + 2, c)

KVQ_SIMD_BLOCK_KERNELS(q8_0, KVQ_BYTES_Q8_0, false, Q8_0_FLOATS)

KVQ_SIMD_BLOCK_KERNELS(q6_0, KVQ_BYTES_Q6_0, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q6_1, KVQ_BYTES_Q6_1, true, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q5_0, KVQ_BYTES_Q5_0, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q5_1, KVQ_BYTES_Q5_1, true, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q4_0, KVQ_BYTES_Q4_0, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q4_1, KVQ_BYTES_Q4_1, true, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(iq4_nl, KVQ_BYTES_IQ4_NL, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q3_0, KVQ_BYTES_Q3_0, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q3_1, KVQ_BYTES_Q3_1, true, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q2_0, KVQ_BYTES_Q2_0, false, DECODED_FLOATS)
KVQ_SIMD_BLOCK_KERNELS(q2_1, KVQ_BYTES_Q2_1, true, DECODED_FLOATS)

/* q8_0 encoder: the scalar rule (d = max|x|/127, q = roundf(x/d)) on
 * vectors; bitwise identical to the reference. */
static void simd_q8_0_quantize(const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, out += KVQ_BYTES_Q8_0) {
        if (!kvq_block_is_finite(x + i)) {
            kvq_q8_0_quantize(x + i, out, KVQ_BLOCK);   /* the poisoned block */
            continue;
        }
        VF v[VPB];
        for (int k = 0; k < VPB; k++) v[k] = vload(x + i + k * VL);
        const float d = vabs_max(v) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        kvq_wr16(out, kvq_float_to_half(d));
        q8_codes_store(v, id, out + 2);
    }
}

/* iq4_nl encoder: the scale search's steps (iq4nl_search.inc) on this
 * level's vectors; the same bytes as the scalar steps. */
#define IQ4NL_OPS simd_iq4nl_ops
#include "iq4nl_search.inc"
static void simd_iq4_nl_quantize(const float *x, void *dst, int64_t n) {
    kvq_iq4nl_quantize_with(x, dst, n, &simd_iq4nl_ops);
}

/* ------------------------------------------------------------ plain types */
/* Whole vectors in the loop, the remainder (n need not be a multiple of
 * anything for block size 1) through the scalar kernel. */

/* One loader and one storer per storage type (token-pasted below). */
static inline VF vload_as_f32(const uint8_t *p) { return vload((const float *)(const void *)p); }
static inline VF vload_as_f16(const uint8_t *p) { return vload_h(p); }
static inline VF vload_as_bf16(const uint8_t *p) { return vload_bf(p); }
static inline void vstore_as_f16(uint8_t *p, VF v) { vstore_h(p, v); }
static inline void vstore_as_bf16(uint8_t *p, VF v) { vstore_bf(p, v); }

#define KVQ_SIMD_PLAIN_KERNELS(name, ELEM_BYTES)                                           \
    static void simd_##name##_dequantize(const void *src, float *y, int64_t n) {           \
        const uint8_t *r = src;                                                            \
        int64_t i = 0;                                                                     \
        for (; i + VL <= n; i += VL) vstore(y + i, vload_as_##name(r + i * (ELEM_BYTES))); \
        if (i < n) kvq_##name##_dequantize(r + i * (ELEM_BYTES), y + i, n - i);            \
    }                                                                                      \
    static float simd_##name##_dot(const void *row, const float *x, int64_t n) {           \
        const uint8_t *r = row;                                                            \
        VF acc0 = vzero(), acc1 = vzero();                                                 \
        int64_t i = 0;                                                                     \
        for (; i + 2 * VL <= n; i += 2 * VL) {                                             \
            acc0 = vfma(vload_as_##name(r + i * (ELEM_BYTES)), vload(x + i), acc0);        \
            acc1 = vfma(vload_as_##name(r + (i + VL) * (ELEM_BYTES)),                      \
                          vload(x + i + VL), acc1);                                        \
        }                                                                                  \
        float s = vhsum(vadd(acc0, acc1));                                                 \
        if (i < n) s += kvq_##name##_dot(r + i * (ELEM_BYTES), x + i, n - i);              \
        return s;                                                                          \
    }                                                                                      \
    static void simd_##name##_axpy(float w, const void *row, float *y, int64_t n) {        \
        const uint8_t *r = row;                                                            \
        const VF wv = vset1(w);                                                            \
        int64_t i = 0;                                                                     \
        for (; i + VL <= n; i += VL)                                                       \
            vstore(y + i, vfma(wv, vload_as_##name(r + i * (ELEM_BYTES)), vload(y + i)));  \
        if (i < n) kvq_##name##_axpy(w, r + i * (ELEM_BYTES), y + i, n - i);               \
    }

KVQ_SIMD_PLAIN_KERNELS(f32, 4)
KVQ_SIMD_PLAIN_KERNELS(f16, 2)
KVQ_SIMD_PLAIN_KERNELS(bf16, 2)

#define KVQ_SIMD_HALF_QUANTIZE(name)                                                      \
    static void simd_##name##_quantize(const float *x, void *dst, int64_t n) {            \
        uint8_t *out = dst;                                                               \
        int64_t i = 0;                                                                    \
        for (; i + VL <= n; i += VL) vstore_as_##name(out + 2 * i, vload(x + i));         \
        if (i < n) kvq_##name##_quantize(x + i, out + 2 * i, n - i);                      \
    }

KVQ_SIMD_HALF_QUANTIZE(f16)
KVQ_SIMD_HALF_QUANTIZE(bf16)

/* ------------------------------------------------------------ the table */

#define KVQ_SIMD_SET_READERS(T, name)                                                     \
    (table[T].dequantize = simd_##name##_dequantize, table[T].dot = simd_##name##_dot,    \
     table[T].axpy = simd_##name##_axpy)

static void simd_install_kernels(kvq_type_traits table[KVQ_TYPE_COUNT]) {
    KVQ_SIMD_SET_READERS(KVQ_TYPE_F32, f32);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_F16, f16);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_BF16, bf16);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q8_0, q8_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q6_0, q6_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q6_1, q6_1);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q5_0, q5_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q5_1, q5_1);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q4_0, q4_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q4_1, q4_1);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_IQ4_NL, iq4_nl);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q3_0, q3_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q3_1, q3_1);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q2_0, q2_0);
    KVQ_SIMD_SET_READERS(KVQ_TYPE_Q2_1, q2_1);
    table[KVQ_TYPE_F16].quantize = simd_f16_quantize;
    table[KVQ_TYPE_BF16].quantize = simd_bf16_quantize;
    table[KVQ_TYPE_Q8_0].quantize = simd_q8_0_quantize;
    table[KVQ_TYPE_IQ4_NL].quantize = simd_iq4_nl_quantize;
}
