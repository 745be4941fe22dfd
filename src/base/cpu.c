/* cpu.c - run-time CPU feature detection.
 *
 * SIMD kernels are compiled into separate files with their own ISA flags
 * and only reached through the trait table after this check, so the same
 * binary runs on any x86-64 (and elsewhere, where only scalar exists).
 * KVQ_FORCE_SCALAR=1 in the environment forces the reference path, which
 * is how benchmarks compare scalar with SIMD in one binary; KVQ_FORCE_AVX2=1
 * leaves AVX-512 out, so an AVX-512 machine can measure what an AVX2-only
 * one runs.  The level every kernel table is indexed by (kvq_isa_best) is
 * decided here, once. */
#include "kvq_internal.h"

#include <pthread.h>
#include <stdlib.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static kvq_cpu g_cpu;
static kvq_isa g_isa = KVQ_ISA_SCALAR;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
/* AMD family 19h (Zen 3 and Zen 4; of the two only Zen 4 has AVX-512):
 * its 512-bit operations issue as two 256-bit halves. */
static bool amd_family_19h(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return false;   /* "AuthenticAMD" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned base = (a >> 8) & 0xFu, ext = (a >> 20) & 0xFFu;
    return (base == 0xFu ? base + ext : base) == 0x19u;
}
#endif

static void detect(void) {
    const char *force = getenv("KVQ_FORCE_SCALAR");
    if (force && *force && *force != '0') return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    g_cpu.avx2 = __builtin_cpu_supports("avx2");
    g_cpu.fma = __builtin_cpu_supports("fma");
    g_cpu.f16c = g_cpu.avx2; /* every AVX2 CPU shipped has F16C */
    g_cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (!g_cpu.fma) g_cpu.avx2 = g_cpu.avx512 = false;
    const char *avx2_only = getenv("KVQ_FORCE_AVX2");
    if (avx2_only && *avx2_only && *avx2_only != '0') g_cpu.avx512 = false;
    g_cpu.avx512vnni = g_cpu.avx512 && __builtin_cpu_supports("avx512vnni");
    g_cpu.avx512vbmi = g_cpu.avx512 && __builtin_cpu_supports("avx512vbmi");
    g_cpu.avx512_halves = g_cpu.avx512 && amd_family_19h();
#endif
    g_isa = g_cpu.avx512 ? KVQ_ISA_AVX512 : g_cpu.avx2 && g_cpu.fma && g_cpu.f16c ? KVQ_ISA_AVX2 : KVQ_ISA_SCALAR;
}

const kvq_cpu *kvq_cpu_features(void) {
    pthread_once(&g_cpu_once, detect);
    return &g_cpu;
}

kvq_isa kvq_isa_best(void) {
    pthread_once(&g_cpu_once, detect);
    return g_isa;
}

const char *kvq_isa_name(kvq_isa isa) {
    static const char *const names[KVQ_ISA_COUNT] = { "scalar", "avx2", "avx512" };
    return (unsigned)isa < KVQ_ISA_COUNT ? names[isa] : "?";
}
