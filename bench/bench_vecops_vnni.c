/* bench_vecops_vnni.c - kvq-bench vecops: AVX512_VNNI's dot products. */
#include "bench_vecops.h"

#include <immintrin.h>

#define DPBUSD(a) _mm512_dpbusd_epi32(a, k, k)
#define DPWSSD(a) _mm512_dpwssd_epi32(a, k, k)

static __attribute__((noinline)) double time_dpbusd(long iters, __m512i k) {
    double s;
    VECOPS_TIME(__m512i, k, DPBUSD, iters, s);
    return s;
}

static __attribute__((noinline)) double time_dpwssd(long iters, __m512i k) {
    double s;
    VECOPS_TIME(__m512i, k, DPWSSD, iters, s);
    return s;
}

int bench_vecops_vnni(vecop_time *out, long iters) {
    volatile int seed = 3;   /* an operand the compiler cannot fold */
    const __m512i k = _mm512_set1_epi32(seed);
    out[0] = (vecop_time){ "vpdpbusd zmm", "int8 weight dots (q4_0, K-quants)", time_dpbusd(iters, k) };
    out[1] = (vecop_time){ "vpdpwssd zmm", "int8 weight dots (K-quants)", time_dpwssd(iters, k) };
    return 2;
}
