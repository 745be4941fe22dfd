/* bench_vecops_avx512.c - kvq-bench vecops at the AVX-512 level (512-bit). */
#include "bench_vecops.h"

#include <immintrin.h>

#define FMA(a) _mm512_fmadd_ps(a, f, f)
#define CVT(a) _mm512_cvtepi32_ps(_mm512_castps_si512(a))
#define PERMPS(a) _mm512_permutexvar_ps(k, a)
#define ZX8TO32(a) _mm512_cvtepu8_epi32(_mm512_castsi512_si128(a))
#define ZX8TO16(a) _mm512_cvtepu8_epi16(_mm512_castsi512_si256(a))
#define MADDWD(a) _mm512_madd_epi16(a, k)
#define PSHUFB(a) _mm512_shuffle_epi8(k, a)
#define SHUF128(a) _mm512_shuffle_i32x4(a, k, 0x4e)
#define INSERT256(a) _mm512_inserti64x4(a, _mm512_castsi512_si256(k), 1)
#define UNPACK(a) _mm512_unpacklo_epi32(a, k)
#define ADDD(a) _mm512_add_epi32(a, k)

#define VO_F __m512
#define VO_I __m512i
#define VO_SET1_PS _mm512_set1_ps
#define VO_SET1_EPI32 _mm512_set1_epi32
#define VO_FN bench_vecops_avx512
#define VO_ROWS(X)                                                          \
    X(FMA, __m512, f, "vfmadd231ps zmm", "V sums, f16 K")                   \
    X(CVT, __m512, f, "vcvtdq2ps zmm", "V codes to float")                  \
    X(PERMPS, __m512, f, "vpermps zmm", "V codebooks (q4, iq4_nl), turbo")  \
    X(ZX8TO32, __m512i, k, "vpmovzxbd zmm", "V codes widened")              \
    X(ZX8TO16, __m512i, k, "vpmovzxbw zmm", "K codes widened")              \
    X(MADDWD, __m512i, k, "vpmaddwd zmm", "K integer sums")                 \
    X(PSHUFB, __m512i, k, "vpshufb zmm", "codebook look-ups")               \
    X(SHUF128, __m512i, k, "vshufi32x4 zmm", "K add trees")                 \
    X(INSERT256, __m512i, k, "vinserti64x4 zmm", "K pairs of keys")         \
    X(UNPACK, __m512i, k, "vpunpckldq zmm", "K add trees")                  \
    X(ADDD, __m512i, k, "vpaddd zmm", "K add trees")
#include "bench_vecops.inc"
