/* hadamard.h - internals of the Walsh-Hadamard rotation (src/format/hadamard.c):
 * the scalar and AVX2 transforms, exposed so that tests can hold them
 * against each other, and the fixed seeds of the randomised Hadamard. */
#ifndef KVQ_HADAMARD_H
#define KVQ_HADAMARD_H

#include "kvq_internal.h"

#include <math.h>
#include <string.h>

enum { KVQ_FWHT_MAX = 4096 };   /* largest transform kvq_fwht accepts */

static inline bool kvq_is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* 1/sqrt(n), rounded once to float: both transforms scale by exactly this
 * value, so their results agree bit for bit. */
static inline float kvq_fwht_norm(int n) { return (float)(1.0 / sqrt((double)n)); }

/* Normalised in-place transforms; n a power of two in [1, KVQ_FWHT_MAX]
 * (checked by the caller).  The AVX2 one must only run when
 * kvq_isa_best() >= KVQ_ISA_AVX2. */
void kvq_fwht_scalar(float *x, int n);
void kvq_fwht_avx2(float *x, int n);

/* x <- post H pre src (src == x: in place; otherwise the two do not
 * overlap): the diagonals as sign-bit masks (0 or 0x80000000 per value,
 * XOR-ed in: the same bits as negating; NULL: +1), n as for kvq_fwht.
 * The same bits as copying, flipping, kvq_fwht and flipping; the AVX2 one
 * keeps n = 64 and 128 in registers. */
void kvq_fwht_signed(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post);

/* x_i with its sign bit XOR mask_i, for n values (mask NULL: unchanged). */
static inline void kvq_flip_signs(float *x, const uint32_t *mask, int n) {
    if (mask)
        for (int i = 0; i < n; i++) x[i] = kvq_bits_f32(kvq_f32_bits(x[i]) ^ mask[i]);
}
/* kvq_fwht_signed as the steps it stands for, with the transform fwht
 * (the scalar level, and the AVX2 one for sizes it keeps no registers
 * for). */
static inline void kvq_fwht_signed_steps(void (*fwht)(float *, int), const float *src, float *x, int n,
                                         const uint32_t *pre, const uint32_t *post) {
    if (src != x) memmove(x, src, (size_t)n * sizeof *x);
    kvq_flip_signs(x, pre, n);
    fwht(x, n);
    kvq_flip_signs(x, post, n);
}
void kvq_fwht_signed_scalar(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post);
void kvq_fwht_signed_avx2(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post);

/*
 * Seeds of the randomised Hadamard (kvq_random_signs).  Q and K must share
 * one sign diagonal (q.k is only invariant when both see the same
 * rotation), and V and the attention output share another; the diagonal
 * has `block` entries and is reused for every block of a row, every head
 * and every layer.  The constants are arbitrary but fixed forever: a
 * cache written with one diagonal can only be read with the same one.
 */
#define KVQ_ROT_SEED_QK UINT64_C(0x6b76712d726f742b) /* "kvq-rot+" */
#define KVQ_ROT_SEED_V  UINT64_C(0x6b76712d726f742d) /* "kvq-rot-" */
/* D of the H.D.H mixing of padded rows (src/cache/cache.c), shared by Q/K and V. */
#define KVQ_ROT_SEED_MIX UINT64_C(0x6b76712d6d697821) /* "kvq-mix!" */

#endif
