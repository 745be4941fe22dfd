/* kvarn_avx2.c - KVarN's normalisation sweep on 4 double lanes (AVX2);
 * the logic is kvarn_sigma.inc's, shared with the scalar and AVX-512
 * builds.  Installed by kvarn.c after run-time detection. */
#include "kvarn.h"

#include <immintrin.h>
#include <math.h>

#define VD __m256d
#define VW 4
#define VD_LOADF(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define VD_LOAD(p) _mm256_loadu_pd(p)
#define VD_STORE(p, v) _mm256_storeu_pd((p), (v))
#define VD_SET1(x) _mm256_set1_pd(x)
#define VD_ADD _mm256_add_pd
#define VD_SUB _mm256_sub_pd
#define VD_MUL _mm256_mul_pd
#define VD_DIV _mm256_div_pd
#define VD_SQRT _mm256_sqrt_pd
#define VF __m256
#define VFW 8
#define VF_LOAD _mm256_loadu_ps
#define VF_STORE _mm256_storeu_ps
#define VF_SET1 _mm256_set1_ps
#define VF_ADD _mm256_add_ps
#define VF_SUB _mm256_sub_ps
#define VF_MUL _mm256_mul_ps
#define VF_DIV _mm256_div_ps
#define VF_MIN _mm256_min_ps
#define VF_MAX _mm256_max_ps
#define VF_FLOOR _mm256_floor_ps
#define VF_CODES(p, v, qmax) \
    _mm256_storeu_si256((__m256i *)(p), _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(v), \
                        _mm256_setzero_si256()), _mm256_set1_epi32(qmax)))
#define SIGMA_FN sigmas_avx2
#define ROWS_FN row_codes_avx2
#include "kvarn_sigma.inc"

void kvq_kvarn_sigmas_avx2(const float *M, int n, int lanes, const double *mul, const double *k, double *out) {
    sigmas_avx2(M, n, lanes, mul, k, out);
}

float kvq_kvarn_row_codes_avx2(const float *a, int cols, float sr, const float *s_col, int qmax, float *lo, int32_t *q) {
    return row_codes_avx2(a, cols, sr, s_col, qmax, lo, q);
}
