/*
 * kquants_xperm.c - the activation layout of the K-quant decode dots
 * (kquants_xperm.h): one scalar routine every level shares, and the table
 * of each level's kernels.
 */
#include "kquants_xperm.h"
#include "quant_kquants.h"

#include <pthread.h>
#include <string.h>

/* The runs of each pair p, in lane order (kquants_xperm.h). */
static const uint8_t q4_K_pairs[4][2] = { { 0, 2 }, { 1, 3 }, { 4, 6 }, { 5, 7 } };
static const uint8_t q6_K_pairs[4][2] = { { 0, 1 }, { 2, 3 }, { 4, 5 }, { 6, 7 } };

size_t kvq_kq_xperm_floats(int64_t n) { return n > 0 ? (size_t)n + (size_t)n / 16 : 0; }

/* Sums of x over consecutive groups of `width` values, in order. */
static void group_sums(const float *x, int64_t n, int width, float *out) {
    for (int64_t i = 0; i < n; i += width) {
        float s = 0.0f;
        for (int k = 0; k < width; k++) s += x[i + k];
        out[i / width] = s;
    }
}

bool kvq_kq_xperm(kvq_type t, const float *x, int64_t n, float *xp) {
    const uint8_t(*pairs)[2] = t == KVQ_TYPE_Q4_K || t == KVQ_TYPE_Q5_K ? q4_K_pairs : t == KVQ_TYPE_Q6_K ? q6_K_pairs : NULL;
    if (!pairs || n < 1 || n % KVQ_QK_K) return false;
    for (int64_t s = 0; s < n; s += KVQ_QK_K)
        for (int p = 0; p < 4; p++)
            for (int b = 0; b < 4; b++)
                for (int g = 0; g < 2; g++)
                    for (int l = 0; l < 8; l++)
                        xp[s + 64 * p + 16 * b + 8 * g + l] = x[s + 32 * pairs[p][g] + 4 * l + b];
    if (t == KVQ_TYPE_Q6_K) {
        group_sums(x, n, 16, xp + n);
        return true;
    }
    for (int64_t s = 0; s < n; s += KVQ_QK_K) {   /* q4_K, q5_K: a super-block's 8 run sums, twice */
        float *out = xp + n + s / 16;
        group_sums(x + s, KVQ_QK_K, 32, out);
        memcpy(out + 8, out, 8 * sizeof *out);
    }
    return true;
}

static kvq_kq_xrows_fn g_tables[KVQ_ISA_COUNT][KVQ_TYPE_COUNT];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_tables(void) {
#if defined(__x86_64__)
    const kvq_cpu *cpu = kvq_cpu_features();
    if (cpu->avx2) kvq_kq_xperm_install_avx2(g_tables[KVQ_ISA_AVX2]);
    if (cpu->avx512) kvq_kq_xperm_install_avx512(g_tables[KVQ_ISA_AVX512]);
#endif
}

kvq_kq_xrows_fn kvq_kq_xrows_level(kvq_type t, kvq_isa isa) {
    if ((unsigned)t >= KVQ_TYPE_COUNT || (unsigned)isa >= KVQ_ISA_COUNT) return NULL;
    pthread_once(&g_once, fill_tables);
    return g_tables[isa][t];
}

kvq_kq_xrows_fn kvq_kq_xrows(kvq_type t) { return kvq_kq_xrows_level(t, kvq_isa_best()); }
