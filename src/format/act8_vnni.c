/* act8_vnni.c - int8-activation dots with AVX512_VNNI on 256-bit vectors
 * (act8_dot.inc): vpdpbusd makes a lane's four u8 * s8 products and adds
 * them in one instruction, vpdpwssd the scaled int16 pairs.  Compiled with
 * -mavx512vnni (the Makefile's *_vnni.c rule); reached only when
 * kvq_cpu_features()->avx512vnni. */
#include <immintrin.h>

static inline __m256i a8_u8s8(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
static inline __m256i a8_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

#define A8_INSTALL kvq_act8_install_vnni
#include "act8_dot.inc"
