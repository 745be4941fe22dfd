/* bench_vecops_avx512.c - kvq-bench vecops at the AVX-512 level (512-bit). */
#include "bench_vecops.h"

#include <immintrin.h>
#include <stddef.h>

/* One instruction's chains, each in its own function so that every
 * one gets the registers to itself.  f and k: constant operands. */
#define VECOP_FN(OP, T, init)                                                     \
    static __attribute__((noinline)) double time_##OP(long iters, __m512 f, __m512i k) { \
        double s;                                                                 \
        (void)f;                                                                  \
        (void)k;                                                                  \
        VECOPS_TIME(T, init, OP, iters, s);                                       \
        return s;                                                                 \
    }
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
VECOP_FN(FMA, __m512, f)
VECOP_FN(CVT, __m512, f)
VECOP_FN(PERMPS, __m512, f)
VECOP_FN(ZX8TO32, __m512i, k)
VECOP_FN(ZX8TO16, __m512i, k)
VECOP_FN(MADDWD, __m512i, k)
VECOP_FN(PSHUFB, __m512i, k)
VECOP_FN(SHUF128, __m512i, k)
VECOP_FN(INSERT256, __m512i, k)
VECOP_FN(UNPACK, __m512i, k)
VECOP_FN(ADDD, __m512i, k)

static const struct { const char *name, *used; double (*time)(long, __m512, __m512i); } k_rows[] = {
    { "vfmadd231ps zmm", "V sums, f16 K", time_FMA },
    { "vcvtdq2ps zmm", "V codes to float", time_CVT },
    { "vpermps zmm", "V codebooks (q4, iq4_nl), turbo", time_PERMPS },
    { "vpmovzxbd zmm", "V codes widened", time_ZX8TO32 },
    { "vpmovzxbw zmm", "K codes widened", time_ZX8TO16 },
    { "vpmaddwd zmm", "K integer sums", time_MADDWD },
    { "vpshufb zmm", "codebook look-ups", time_PSHUFB },
    { "vshufi32x4 zmm", "K add trees", time_SHUF128 },
    { "vinserti64x4 zmm", "K pairs of keys", time_INSERT256 },
    { "vpunpckldq zmm", "K add trees", time_UNPACK },
    { "vpaddd zmm", "K add trees", time_ADDD },
};

int bench_vecops_avx512(vecop_time *out, long iters) {
    volatile int seed = 3;   /* operands the compiler cannot fold */
    const __m512 f = _mm512_set1_ps((float)seed * 0.25f);
    const __m512i k = _mm512_set1_epi32(seed);
    int n = 0;
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0] && n < VECOPS_MAX; i++, n++) {
        out[n].name = k_rows[i].name;
        out[n].used = k_rows[i].used;
        out[n].seconds = k_rows[i].time(iters, f, k);
    }
    return n;
}
