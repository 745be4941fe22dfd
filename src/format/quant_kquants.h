/* quant_kquants.h - ggml's K-quant weight layouts (GGUF types Q4_K, Q5_K,
 * Q6_K): scalar reference kernels for the trait table and the layout facts
 * the SIMD files share.  kvq only reads these types (no quantiser).
 *
 * Super-block of 256 values (QK_K), little-endian fp16 scales:
 *   Q4_K, 144 bytes: d, dmin, scales[12], qs[128]
 *   Q5_K, 176 bytes: d, dmin, scales[12], qh[32], qs[128]
 *   Q6_K, 210 bytes: ql[128], qh[64], int8 scales[16], d
 * Q4_K/Q5_K: 8 sub-blocks of 32, value = d*sc[j]*q - dmin*m[j] with 6-bit
 * sc/m packed in scales[12] (kvq_kq_scale_min).  Each 64-value chunk c
 * reads 32 bytes of qs: low nibbles are values 0..31, high nibbles 32..63;
 * Q5_K adds bit 2c (first 32) / 2c+1 (second 32) of qh[l] as bit 4.
 * Q6_K: 16 sub-blocks of 16, value = d*scales[s]*(q - 32), q 6 bits; see
 * quant_kquants.c for where the bits of q live. */
#ifndef KVQ_QUANT_KQUANTS_H
#define KVQ_QUANT_KQUANTS_H

#include "quant_block.h"

#include <string.h>

#define KVQ_QK_K 256
#define KVQ_Q4_K_BYTES 144
#define KVQ_Q5_K_BYTES 176
#define KVQ_Q6_K_BYTES 210

KVQ_DECLARE_KERNELS(q4_K)
KVQ_DECLARE_KERNELS(q5_K)
KVQ_DECLARE_KERNELS(q6_K)

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes:
 * j < 4: low 6 bits of bytes j (scale) and j+4 (min); j >= 4: a nibble of
 * byte j+4 plus the top two bits of bytes j-4 (scale) and j (min). */
static inline void kvq_kq_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The 6-bit scales and mins of Q4_K/Q5_K's 8 sub-blocks, byte j of *sc
 * and *m for sub-block j (the rule of kvq_kq_scale_min, word operations). */
static inline void kvq_kq_scales_words(const uint8_t *b, uint64_t *sc, uint64_t *m) {
    uint32_t w[3];
    memcpy(w, b + 4, sizeof w);
    const uint32_t six = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, two = 0x03030303u;
    *sc = (uint64_t)(w[0] & six) | (uint64_t)((w[2] & nib) | (((w[0] >> 6) & two) << 4)) << 32;
    *m = (uint64_t)(w[1] & six) | (uint64_t)(((w[2] >> 4) & nib) | (((w[1] >> 6) & two) << 4)) << 32;
}

#endif
