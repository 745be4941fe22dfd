/* kvarn_avx512.c - KVarN's normalisation sweep on 8 double lanes (AVX-512);
 * the logic is kvarn_sigma.inc's, shared with the scalar and AVX2
 * builds.  Installed by kvarn.c after run-time detection. */
#include "kvarn.h"

#include <immintrin.h>
#include <math.h>

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
#define VF __m512
#define VFW 16
#define VF_LOAD _mm512_loadu_ps
#define VF_STORE _mm512_storeu_ps
#define VF_SET1 _mm512_set1_ps
#define VF_ADD _mm512_add_ps
#define VF_SUB _mm512_sub_ps
#define VF_MUL _mm512_mul_ps
#define VF_DIV _mm512_div_ps
#define VF_MIN _mm512_min_ps
#define VF_MAX _mm512_max_ps
#define VF_FLOOR(v) _mm512_roundscale_ps((v), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC)
#define VF_CODES(p, v, qmax) \
    _mm512_storeu_si512((p), _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(v), _mm512_setzero_si512()), \
                        _mm512_set1_epi32(qmax)))
#define SIGMA_FN sigmas_avx512
#define ROWS_FN row_codes_avx512
#include "kvarn_sigma.inc"

void kvq_kvarn_sigmas_avx512(const float *M, int n, int lanes, const double *mul, const double *k, double *out) {
    sigmas_avx512(M, n, lanes, mul, k, out);
}

float kvq_kvarn_row_codes_avx512(const float *a, int cols, float sr, const float *s_col, int qmax, float *lo, int32_t *q) {
    return row_codes_avx512(a, cols, sr, s_col, qmax, lo, q);
}
