/* quant_block.h - scalar reference kernels of every cache type, declared
 * for the trait table (src/types.c) and the SIMD files' fallbacks. */
#ifndef KVQ_QUANT_BLOCK_H
#define KVQ_QUANT_BLOCK_H

#include "kvq_internal.h"

#define KVQ_BLOCK 32   /* values per block of every q*_0 / q*_1 / iq4_nl type */

/* One row of the trait table's kernels per name, e.g. kvq_q4_0_quantize. */
#define KVQ_DECLARE_KERNELS(name)                                                 \
    void  kvq_##name##_quantize(const float *x, void *dst, int64_t n);            \
    void  kvq_##name##_dequantize(const void *src, float *y, int64_t n);          \
    float kvq_##name##_dot(const void *row, const float *x, int64_t n);           \
    void  kvq_##name##_axpy(float w, const void *row, float *y, int64_t n);

KVQ_DECLARE_KERNELS(f32)
KVQ_DECLARE_KERNELS(f16)
KVQ_DECLARE_KERNELS(bf16)
KVQ_DECLARE_KERNELS(q8_0)
KVQ_DECLARE_KERNELS(q6_0)
KVQ_DECLARE_KERNELS(q6_1)
KVQ_DECLARE_KERNELS(q5_0)
KVQ_DECLARE_KERNELS(q5_1)
KVQ_DECLARE_KERNELS(q4_0)
KVQ_DECLARE_KERNELS(q4_1)
KVQ_DECLARE_KERNELS(iq4_nl)
KVQ_DECLARE_KERNELS(q3_0)
KVQ_DECLARE_KERNELS(q3_1)
KVQ_DECLARE_KERNELS(q2_0)
KVQ_DECLARE_KERNELS(q2_1)

/* The iq4_nl codebook (FORMATS.md §2; ggml's kvalues_iq4nl). */
extern const int8_t kvq_iq4nl_values[16];

/* Code planes shared by the q*_0/q*_1 layouts (see quant_block.c). */
void kvq_pack_codes(const uint8_t q[KVQ_BLOCK], int bits, uint8_t *out);
void kvq_unpack_codes(const uint8_t *in, int bits, uint8_t q[KVQ_BLOCK]);

#endif
