/* bench_vecops_avx2.c - kvq-bench vecops at the AVX2 level (256-bit). */
#include "bench_vecops.h"

#include <immintrin.h>

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

#define VO_F __m256
#define VO_I __m256i
#define VO_SET1_PS _mm256_set1_ps
#define VO_SET1_EPI32 _mm256_set1_epi32
#define VO_FN bench_vecops_avx2
#define VO_ROWS(X)                                                     \
    X(FMA, __m256, f, "vfmadd231ps ymm", "V sums, f16 K")              \
    X(CVT, __m256, f, "vcvtdq2ps ymm", "V codes to float")             \
    X(PERMPS, __m256, f, "vpermps ymm", "iq4_nl search, tile kernels") \
    X(ZX8TO32, __m256i, k, "vpmovzxbd ymm", "V codes widened")         \
    X(ZX8TO16, __m256i, k, "vpmovzxbw ymm", "K codes widened")         \
    X(MADDWD, __m256i, k, "vpmaddwd ymm", "K integer sums")            \
    X(MADDUBS, __m256i, k, "vpmaddubsw ymm", "int8 weight dots")       \
    X(PSHUFB, __m256i, k, "vpshufb ymm", "codebook look-ups")          \
    X(PERM128, __m256i, k, "vperm2i128 ymm", "K add trees")            \
    X(UNPACK, __m256i, k, "vpunpckldq ymm", "K add trees")             \
    X(ADDD, __m256i, k, "vpaddd ymm", "K add trees")
#include "bench_vecops.inc"
