/*
 * hadamard_avx2.c - the normalised fast Walsh-Hadamard transform with AVX2
 * (compiled with -mavx2; reached only through hadamard.c after run-time
 * detection).  It performs the same additions in the same order as
 * kvq_fwht_scalar, so both give identical bits; only the grouping into
 * 8-float registers differs.
 */
#include "hadamard.h"

#if defined(__AVX2__)
#include <immintrin.h>

/* One butterfly stage inside a register: lane j pairs with lane j ^ h
 * (`partner` holds the register with the pairs swapped).  The lower lane
 * of each pair keeps a + b, the upper one a - b, as in the scalar stage. */
#define STAGE_IN_REGISTER(v, partner, upper_lanes) \
    _mm256_blend_ps(_mm256_add_ps((v), (partner)), _mm256_sub_ps((partner), (v)), (upper_lanes))

/* Stages h = 1, 2, 4: all pairs lie within one register of 8 floats. */
static __m256 fwht8(__m256 v) {
    v = STAGE_IN_REGISTER(v, _mm256_permute_ps(v, 0xB1), 0xAA);          /* h = 1 */
    v = STAGE_IN_REGISTER(v, _mm256_permute_ps(v, 0x4E), 0xCC);          /* h = 2 */
    return STAGE_IN_REGISTER(v, _mm256_permute2f128_ps(v, v, 0x01), 0xF0); /* h = 4 */
}

/* Stages h = 8 .. 32 across 8 registers (64 floats) in place: pairs
 * whole registers h / 8 apart, as the memory stages below. */
static inline __attribute__((always_inline)) void fwht64_regs(__m256 v[8]) {
    for (int h = 1; h < 8; h *= 2)
        for (int i = 0; i < 8; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                const __m256 a = v[j], b = v[j + h];
                v[j] = _mm256_add_ps(a, b);
                v[j + h] = _mm256_sub_ps(a, b);
            }
}

/* One 64-float half of a row: loaded with the pre signs (sign bits
 * flipped by XOR: the negation apply_signs makes), stages h = 1 .. 32. */
static inline __attribute__((always_inline)) void fwht64_load(const float *x, const uint32_t *pre, __m256 v[8]) {
    for (int i = 0; i < 8; i++) {
        __m256 t = _mm256_loadu_ps(x + 8 * i);
        if (pre) t = _mm256_xor_ps(t, _mm256_loadu_ps((const float *)(const void *)(pre + 8 * i)));
        v[i] = fwht8(t);
    }
    fwht64_regs(v);
}

/* x * s with the post signs, stored. */
static inline __attribute__((always_inline)) void put_scaled(float *x, __m256 v, __m256 s, const uint32_t *post) {
    v = _mm256_mul_ps(v, s);
    if (post) v = _mm256_xor_ps(v, _mm256_loadu_ps((const float *)(const void *)post));
    _mm256_storeu_ps(x, v);
}

/* n = 64 or 128 in registers: the same butterflies per value as the
 * stage-by-stage transform (each value's sums do not depend on the order
 * in which independent pairs are taken), then the scale and post signs.
 * Stage by stage through memory, every stage waited on the last one's
 * stores; a TurboQuant row's rotation took ~9 % of a turbo2_tcq cache
 * write. */
void kvq_fwht_signed_avx2(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post) {
    if (n != 64 && n != 128) {
        kvq_fwht_signed_steps(kvq_fwht_avx2, src, x, n, pre, post);
        return;
    }
    const __m256 s = _mm256_set1_ps(kvq_fwht_norm(n));
    __m256 lo[8];
    fwht64_load(src, pre, lo);
    if (n == 64) {
        for (int i = 0; i < 8; i++) put_scaled(x + 8 * i, lo[i], s, post ? post + 8 * i : NULL);
        return;
    }
    __m256 hi[8];
    fwht64_load(src + 64, pre ? pre + 64 : NULL, hi);
    for (int i = 0; i < 8; i++) {   /* stage h = 64 */
        put_scaled(x + 8 * i, _mm256_add_ps(lo[i], hi[i]), s, post ? post + 8 * i : NULL);
        put_scaled(x + 64 + 8 * i, _mm256_sub_ps(lo[i], hi[i]), s, post ? post + 64 + 8 * i : NULL);
    }
}

void kvq_fwht_avx2(float *x, int n) {
    if (n == 64 || n == 128) { kvq_fwht_signed_avx2(x, x, n, NULL, NULL); return; }
    for (int j = 0; j < n; j += 8) _mm256_storeu_ps(x + j, fwht8(_mm256_loadu_ps(x + j)));
    /* Stages h >= 8: pairs are whole registers h floats apart. */
    for (int h = 8; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
    const __m256 s = _mm256_set1_ps(kvq_fwht_norm(n));
    for (int j = 0; j < n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), s));
}

#else
/* Built without AVX2 (a non-x86 target): never selected, kept so the
 * symbol exists for the tests. */
void kvq_fwht_avx2(float *x, int n) { kvq_fwht_scalar(x, n); }
void kvq_fwht_signed_avx2(const float *src, float *x, int n, const uint32_t *pre, const uint32_t *post) {
    kvq_fwht_signed_scalar(src, x, n, pre, post);
}
#endif
