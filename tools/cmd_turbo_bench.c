/* cmd_turbo_bench.c - `kvq turbo-bench`: the figures of docs/turbo.md for
 * the TurboQuant types: round-trip NMSE on unit Gaussian vectors (the
 * stored format and the paper's direction error), the inner-product gain,
 * and encode / dot / axpy times per block (SIMD and scalar). */
#include "cli.h"
#include "kvq_eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "turbo-bench"

typedef struct bench_opts { long vectors, dim, seed; } bench_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq " CMD " [options]\n\n"
        "NMSE and speed of turbo2/3/4 and turbo2/3/4_tcq on unit Gaussian vectors.\n\n"
        "  -n, --vectors N   vectors (default 2000)\n"
        "  -d, --dim N       head size, 1..128 (default 128)\n"
        "  -s, --seed N      data seed (default 1)\n"
        "  -h, --help        this text\n");
}

static int parse(int argc, char **argv, bench_opts *o, bool *help) {
    *o = (bench_opts){ 2000, 128, 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long *dst, lo, hi;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { *help = true; return 0; }
        if (!strcmp(a, "-n") || !strcmp(a, "--vectors")) dst = &o->vectors, lo = 10, hi = 1000000;
        else if (!strcmp(a, "-d") || !strcmp(a, "--dim")) dst = &o->dim, lo = 1, hi = 128;
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) dst = &o->seed, lo = 0, hi = 0x7fffffffL;
        else return cli_error(CMD, "unknown option '%s' (see kvq %s --help)", a, CMD);
        if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
        if (!cli_parse_long(v, lo, hi, dst))
            return cli_error(CMD, "%s: '%s' is not an integer in %ld..%ld (see kvq %s --help)", a, v, lo, hi, CMD);
    }
    return 0;
}

/* splitmix64 + Box-Muller */
static double gauss(uint64_t *s) {
    uint64_t z[2];
    for (int i = 0; i < 2; i++) {
        uint64_t v = (*s += 0x9e3779b97f4a7c15ULL);
        v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
        v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
        z[i] = v ^ (v >> 31);
    }
    double u1 = ((z[0] >> 11) + 0.5) / 9007199254740992.0, u2 = (z[1] >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

int cmd_turbo_bench(int argc, char **argv) {
    bench_opts o;
    bool help = false;
    if (parse(argc, argv, &o, &help)) return 1;
    if (help) { usage(stdout); return 0; }
    int n = (int)o.vectors, d = (int)o.dim, dr = kvq_turbo_rot_dim(d);
    float *x = malloc(sizeof(float) * (size_t)n * d), *q_rot = malloc(sizeof(float) * (size_t)dr);
    if (!x || !q_rot) {
        free(x), free(q_rot);
        return cli_error(CMD, "out of memory for %d vectors of %d", n, d);
    }
    uint64_t s = (uint64_t)o.seed;
    for (size_t i = 0; i < (size_t)n * d; i++) x[i] = (float)gauss(&s);
    for (int i = 0; i < dr; i++) q_rot[i] = (float)gauss(&s);
    printf("%d unit-Gaussian vectors of %d, simd %s\n", n, d, kvq_simd_level());
    printf("%-11s %6s %9s %9s %7s %7s %9s %10s %8s %8s\n", "type", "bpv", "NMSE", "paper", "dB", "gain",
           "enc us", "scalar us", "dot ns", "axpy ns");
    kvq_turbo_bench_row rows[KVQ_TURBO_BENCH_ROWS];
    kvq_error err = { 0 };
    /* the table is printed once every type ran (the run takes seconds) */
    const kvq_status st = kvq_turbo_bench(x, n, d, q_rot, rows, &err);
    free(x), free(q_rot);
    if (st) return cli_error(CMD, "%s", err.msg);
    double scalar_nmse[5] = { 0 };
    for (int t = 0; t < KVQ_TURBO_BENCH_ROWS; t++) {
        const kvq_turbo_bench_row *r = &rows[t];
        if (!r->tcq) scalar_nmse[r->bits] = r->nmse;
        double db = r->tcq ? 10 * log10(r->nmse / scalar_nmse[r->bits]) : 0.0;
        printf("%-11s %6.3f %9.5f %9.5f %7.2f %7.4f %9.2f %10.2f %8.1f %8.1f\n", kvq_type_name(r->type), r->bpv,
               r->nmse, r->paper, db, r->ip_gain, r->enc_us, r->enc_scalar_us, r->dot_ns, r->axpy_ns);
    }
    printf("times per 128 values; dB: trellis NMSE relative to the scalar type of equal bits\n");
    return 0;
}
