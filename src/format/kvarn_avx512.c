/* kvarn_avx512.c - KVarN's normalisation sweep on 8 double lanes (AVX-512);
 * the logic is kvarn_sigma.inc's, shared with the scalar and AVX2
 * builds.  Installed by kvarn.c after run-time detection. */
#include "kvarn.h"

#include <immintrin.h>

#define VD __m512d
#define VW 8
#define VD_LOADF(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define VD_LOAD(p) _mm512_loadu_pd(p)
#define VD_STORE(p, v) _mm512_storeu_pd((p), (v))
#define VD_SET1(x) _mm512_set1_pd(x)
#define VD_ADD _mm512_add_pd
#define VD_SUB _mm512_sub_pd
#define VD_MUL _mm512_mul_pd
#define VD_DIV _mm512_div_pd
#define VD_SQRT _mm512_sqrt_pd
#define SIGMA_FN sigmas_avx512
#include "kvarn_sigma.inc"

void kvq_kvarn_sigmas_avx512(const float *M, int n, int lanes, const double *mul, const double *k, double *out) {
    sigmas_avx512(M, n, lanes, mul, k, out);
}
