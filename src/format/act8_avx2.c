/* act8_avx2.c - int8-activation dots with AVX2 (act8_dot.inc): pmaddubsw
 * then pmaddwd into int32 lanes.  Also what an AVX-512 CPU without
 * AVX512_VNNI runs. */
#include <immintrin.h>

static inline __m256i a8_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
static inline __m256i a8_i16(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
}

#define A8_INSTALL kvq_act8_install_avx2
#include "act8_dot.inc"
