/*
 * bench_vecops.c - the throughput of the vector instructions the attention
 * kernels are made of, on this machine (kvq-bench vecops [-n ITERS] [-r ROUNDS]).
 *
 * Why: at depth a quantised cache's decode step is bound by the kernels'
 * arithmetic, not by memory (docs/performance.md), so the other
 * physical bound of a step is the number of vector instructions per key
 * over the rate the core issues them.  This measures that rate per
 * instruction: VECOPS_CHAINS independent chains of one instruction, the
 * thread's CPU time, best of ROUNDS; "per cycle" uses the clock that
 * bench_clock_hz estimates (dependent integer adds, one per cycle).
 * Not a port model: instructions that share a unit are not told apart.
 */
#include "bench.h"
#include "bench_vecops.h"
#include "kvq_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*vecops_level)(vecop_time *out, long iters);

/* Best of `rounds` runs of one level's table. */
static int time_level(vecops_level run, long iters, int rounds, vecop_time *best) {
    int n = 0;
    for (int r = 0; r < rounds; r++) {
        vecop_time t[VECOPS_MAX];
        n = run(t, iters);
        for (int i = 0; i < n; i++)
            if (r == 0 || t[i].seconds < best[i].seconds) best[i] = t[i];
    }
    return n;
}

static void print_rows(const char *level, const vecop_time *t, int n, double hz) {
    for (int i = 0; i < n; i++) {
        const double per_ns = 1e-9 / t[i].seconds;
        printf("| %s | %s | %s | %.3f | %.2f | ", level, t[i].name, t[i].used, t[i].seconds * 1e9, per_ns);
        if (hz > 0) printf("%.2f |\n", per_ns * 1e9 / hz);
        else printf("- |\n");
    }
}

int bench_vecops(int argc, char **argv) {
    int iters = 20000000, rounds = 3;
    for (int i = 1; i < argc; i += 2) {   /* every flag takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok;
        if (!strcmp(a, "-n")) ok = bench_flag_int("vecops", a, v, 1000, 1000000000, &iters);
        else if (!strcmp(a, "-r")) ok = bench_flag_int("vecops", a, v, 1, 100, &rounds);
        else { fprintf(stderr, "vecops: unknown flag %s (-n ITERS, -r ROUNDS)\n", a); return 1; }
        if (!ok) return 1;
    }
    const double hz = bench_clock_hz();
    char clock[64];
    printf("\n## vector instruction throughput: %d chains each, 1 thread, CPU time, best of %d; %s\n\n", VECOPS_CHAINS,
           rounds, bench_clock_text(hz, clock, sizeof clock));
    printf("| level | instruction | used by | ns each | per ns | per cycle |\n|---|---|---|---:|---:|---:|\n");
#if defined(__x86_64__)
    const kvq_isa isa = kvq_isa_best();
    vecop_time t[VECOPS_MAX];
    int n;
    if (isa >= KVQ_ISA_AVX2) {
        n = time_level(bench_vecops_avx2, iters, rounds, t);
        print_rows("avx2", t, n, hz);
    }
    if (isa >= KVQ_ISA_AVX512) {
        n = time_level(bench_vecops_avx512, iters, rounds, t);
        print_rows("avx512", t, n, hz);
        if (kvq_cpu_features()->avx512vnni) {
            n = time_level(bench_vecops_vnni, iters, rounds, t);
            print_rows("avx512-vnni", t, n, hz);
        }
    }
    if (isa < KVQ_ISA_AVX2) printf("\n(no SIMD level on this CPU: nothing to time)\n");
#else
    printf("\n(x86 only)\n");
#endif
    return 0;
}
