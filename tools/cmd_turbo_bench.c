/* cmd_turbo_bench.c - `kvq turbo-bench`: the figures of docs/turbo.md for
 * the TurboQuant types: round-trip NMSE on unit Gaussian vectors (the
 * stored format and the paper's direction error), the inner-product gain,
 * and encode / dot / axpy times per block (SIMD and scalar). */
#include "cli.h"
#include "turbo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
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

typedef struct bench_row { double nmse, paper, enc_us, enc_scalar_us, dot_ns, axpy_ns; } bench_row;

/* NMSE of the format and the paper's ||u - c_hat||^2 (c_hat = x_hat/norm'). */
static void measure_error(kvq_turbo_type t, const float *x, int n, int d, uint8_t *rows, float *y,
                          bench_row *r) {
    size_t rb = kvq_turbo_row_bytes(t, d);
    r->nmse = r->paper = 0;
    for (int v = 0; v < n; v++) {
        const float *xv = x + (size_t)v * d;
        uint8_t *row = rows + (size_t)v * rb;
        kvq_turbo_dequantize(t, row, y, d, NULL);
        double n2 = 0, e = 0, pe = 0;
        for (int i = 0; i < d; i++) n2 += (double)xv[i] * xv[i];
        /* norm' is the first block's fp16 (d <= 128: the only block) */
        float norm_prime = kvq_fp16_to_fp32((uint16_t)(row[0] | row[1] << 8));
        for (int i = 0; i < d; i++) {
            e += (xv[i] - y[i]) * (double)(xv[i] - y[i]);
            double diff = xv[i] / sqrt(n2) - y[i] / norm_prime;
            pe += diff * diff;
        }
        r->nmse += e / n2, r->paper += pe;
    }
    r->nmse /= n, r->paper /= n;
}

/* Each timing is the best, over TRIALS passes, of the mean time per row
 * of CHUNK consecutive rows: the machine may be shared, and the best short
 * run is the closest to the kernel's own cost. */
#define TRIALS 5
#define CHUNK 25
typedef enum { OP_ENCODE, OP_ENCODE_SCALAR, OP_DOT, OP_AXPY } bench_op;

static void run_op(bench_op op, kvq_turbo_type t, const float *xv, uint8_t *row, int d, float *acc,
                   const float *q_rot, volatile float *sink) {
    switch (op) {
    case OP_ENCODE: kvq_turbo_quantize(t, xv, row, d, NULL); break;
    case OP_ENCODE_SCALAR: kvq_turbo_quantize_scalar(t, xv, row, d, NULL); break;
    case OP_DOT: *sink += kvq_turbo_dot_rot(t, row, q_rot, d); break;
    case OP_AXPY: kvq_turbo_axpy_rot(t, 0.001f, row, acc, d); break;
    }
}

static double time_op(bench_op op, kvq_turbo_type t, const float *x, int n, int d, uint8_t *rows,
                      float *acc, const float *q_rot) {
    size_t rb = kvq_turbo_row_bytes(t, d);
    double best = INFINITY;
    volatile float sink = 0;
    for (int trial = 0; trial < TRIALS; trial++)
        for (int v0 = 0; v0 < n; v0 += CHUNK) {
            int v1 = v0 + CHUNK < n ? v0 + CHUNK : n;
            double t0 = now_us();
            for (int v = v0; v < v1; v++)
                run_op(op, t, x + (size_t)v * d, rows + (size_t)v * rb, d, acc, q_rot, &sink);
            best = fmin(best, (now_us() - t0) / (v1 - v0));
        }
    return best * KVQ_TURBO_BLOCK / kvq_turbo_rot_dim(d);    /* per 128 values */
}

static void bench_type(kvq_turbo_type t, const float *x, int n, int d, uint8_t *rows, float *y,
                       float *q_rot, bench_row *r) {
    int n_scalar = n < 200 ? n : 200;          /* the scalar trellis is slow */
    r->enc_scalar_us = time_op(OP_ENCODE_SCALAR, t, x, n_scalar, d, rows, y, q_rot);
    r->enc_us = time_op(OP_ENCODE, t, x, n, d, rows, y, q_rot);
    r->dot_ns = 1e3 * time_op(OP_DOT, t, x, n, d, rows, y, q_rot);
    r->axpy_ns = 1e3 * time_op(OP_AXPY, t, x, n, d, rows, y, q_rot);
    measure_error(t, x, n, d, rows, y, r);
}

int cmd_turbo_bench(int argc, char **argv) {
    bench_opts o;
    bool help = false;
    if (parse(argc, argv, &o, &help)) return 1;
    if (help) { usage(stdout); return 0; }
    int n = (int)o.vectors, d = (int)o.dim, dr = kvq_turbo_rot_dim(d);
    float *x = malloc(sizeof(float) * (size_t)n * d), *y = malloc(sizeof(float) * (size_t)dr);
    float *q_rot = malloc(sizeof(float) * (size_t)dr);
    uint8_t *rows = malloc(kvq_turbo_row_bytes(KVQ_TURBO4_TCQ, d) * (size_t)n);
    if (!x || !y || !q_rot || !rows) {
        free(x), free(y), free(q_rot), free(rows);
        return cli_error(CMD, "out of memory for %d vectors of %d", n, d);
    }
    uint64_t s = (uint64_t)o.seed;
    for (size_t i = 0; i < (size_t)n * d; i++) x[i] = (float)gauss(&s);
    for (int i = 0; i < dr; i++) q_rot[i] = (float)gauss(&s);
    printf("%d unit-Gaussian vectors of %d, simd %s\n", n, d, kvq_simd_level());
    printf("%-11s %6s %9s %9s %7s %7s %9s %10s %8s %8s\n", "type", "bpv", "NMSE", "paper", "dB", "gain",
           "enc us", "scalar us", "dot ns", "axpy ns");
    double scalar_nmse[5] = { 0 };
    for (kvq_turbo_type t = 0; t < KVQ_TURBO_COUNT; t++) {
        bench_row r;
        bench_type(t, x, n, d, rows, y, q_rot, &r);
        int b = kvq_turbo_bits(t);
        if (!kvq_turbo_is_tcq(t)) scalar_nmse[b] = r.nmse;
        double db = kvq_turbo_is_tcq(t) ? 10 * log10(r.nmse / scalar_nmse[b]) : 0.0;
        printf("%-11s %6.3f %9.5f %9.5f %7.2f %7.4f %9.2f %10.2f %8.1f %8.1f\n", kvq_turbo_name(t),
               kvq_turbo_bpv(t, d), r.nmse, r.paper, db, kvq_turbo_ip_gain(t), r.enc_us, r.enc_scalar_us,
               r.dot_ns, r.axpy_ns);
    }
    printf("times per 128 values; dB: trellis NMSE relative to the scalar type of equal bits\n");
    free(x), free(y), free(q_rot), free(rows);
    return 0;
}
