/* bench_vecops_vnni.c - kvq-bench vecops: AVX512_VNNI's dot products. */
#include "bench_vecops.h"

#include <immintrin.h>

#define DPBUSD(a) _mm512_dpbusd_epi32(a, k, k)
#define DPWSSD(a) _mm512_dpwssd_epi32(a, k, k)

#define VO_F __m512
#define VO_I __m512i
#define VO_SET1_PS _mm512_set1_ps
#define VO_SET1_EPI32 _mm512_set1_epi32
#define VO_FN bench_vecops_vnni
#define VO_ROWS(X)                                                                  \
    X(DPBUSD, __m512i, k, "vpdpbusd zmm", "int8 weight dots (q4_0, K-quants)")      \
    X(DPWSSD, __m512i, k, "vpdpwssd zmm", "int8 weight dots (K-quants)")
#include "bench_vecops.inc"
