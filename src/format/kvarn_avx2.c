/* kvarn_avx2.c - KVarN's normalisation sweep on 4 double lanes (AVX2);
 * the logic is kvarn_sigma.inc's, shared with the scalar and AVX-512
 * builds.  Installed by kvarn.c after run-time detection. */
#include "kvarn.h"

#include <immintrin.h>

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
#define SIGMA_FN sigmas_avx2
#include "kvarn_sigma.inc"

void kvq_kvarn_sigmas_avx2(const float *M, int n, int lanes, const double *mul, const double *k, double *out) {
    sigmas_avx2(M, n, lanes, mul, k, out);
}
