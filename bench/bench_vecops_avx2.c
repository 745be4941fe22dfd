/* bench_vecops_avx2.c - kvq-bench vecops at the AVX2 level (256-bit). */
#include "bench_vecops.h"

#include <immintrin.h>
#include <stddef.h>

/* One instruction's chains, each in its own function so that every
 * one gets the registers to itself.  f and k: constant operands. */
#define VECOP_FN(OP, T, init)                                                     \
    static __attribute__((noinline)) double time_##OP(long iters, __m256 f, __m256i k) { \
        double s;                                                                 \
        (void)f;                                                                  \
        (void)k;                                                                  \
        VECOPS_TIME(T, init, OP, iters, s);                                       \
        return s;                                                                 \
    }
#define FMA(a) _mm256_fmadd_ps(a, f, f)
#define CVT(a) _mm256_cvtepi32_ps(_mm256_castps_si256(a))
#define PERMPS(a) _mm256_permutevar8x32_ps(a, k)
#define ZX8TO32(a) _mm256_cvtepu8_epi32(_mm256_castsi256_si128(a))
#define ZX8TO16(a) _mm256_cvtepu8_epi16(_mm256_castsi256_si128(a))
#define MADDWD(a) _mm256_madd_epi16(a, k)
#define MADDUBS(a) _mm256_maddubs_epi16(a, k)
#define PSHUFB(a) _mm256_shuffle_epi8(k, a)
#define PERM128(a) _mm256_permute2x128_si256(a, k, 0x21)
#define UNPACK(a) _mm256_unpacklo_epi32(a, k)
#define ADDD(a) _mm256_add_epi32(a, k)
VECOP_FN(FMA, __m256, f)
VECOP_FN(CVT, __m256, f)
VECOP_FN(PERMPS, __m256, f)
VECOP_FN(ZX8TO32, __m256i, k)
VECOP_FN(ZX8TO16, __m256i, k)
VECOP_FN(MADDWD, __m256i, k)
VECOP_FN(MADDUBS, __m256i, k)
VECOP_FN(PSHUFB, __m256i, k)
VECOP_FN(PERM128, __m256i, k)
VECOP_FN(UNPACK, __m256i, k)
VECOP_FN(ADDD, __m256i, k)

static const struct { const char *name, *used; double (*time)(long, __m256, __m256i); } k_rows[] = {
    { "vfmadd231ps ymm", "V sums, f16 K", time_FMA },
    { "vcvtdq2ps ymm", "V codes to float", time_CVT },
    { "vpermps ymm", "iq4_nl search, tile kernels", time_PERMPS },
    { "vpmovzxbd ymm", "V codes widened", time_ZX8TO32 },
    { "vpmovzxbw ymm", "K codes widened", time_ZX8TO16 },
    { "vpmaddwd ymm", "K integer sums", time_MADDWD },
    { "vpmaddubsw ymm", "int8 weight dots", time_MADDUBS },
    { "vpshufb ymm", "codebook look-ups", time_PSHUFB },
    { "vperm2i128 ymm", "K add trees", time_PERM128 },
    { "vpunpckldq ymm", "K add trees", time_UNPACK },
    { "vpaddd ymm", "K add trees", time_ADDD },
};

int bench_vecops_avx2(vecop_time *out, long iters) {
    volatile int seed = 3;   /* operands the compiler cannot fold */
    const __m256 f = _mm256_set1_ps((float)seed * 0.25f);
    const __m256i k = _mm256_set1_epi32(seed);
    int n = 0;
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0] && n < VECOPS_MAX; i++, n++) {
        out[n].name = k_rows[i].name;
        out[n].used = k_rows[i].used;
        out[n].seconds = k_rows[i].time(iters, f, k);
    }
    return n;
}
