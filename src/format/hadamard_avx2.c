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

void kvq_fwht_avx2(float *x, int n) {
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
#endif
