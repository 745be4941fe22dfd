/*
 * bench_formats.c - throughput of every type's row kernels (quantise,
 * dequantise, dot, axpy) at every SIMD level the CPU has, on rows of one
 * head dimension (the cache's access pattern), plus memcpy of the same f32
 * data as a bandwidth reference.  GB/s counts the packed bytes (what the
 * cache reads or writes), Mval/s the values.
 */
#include "bench.h"
#include "kvq.h"
#include "simd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { OP_QUANTIZE, OP_DEQUANTIZE, OP_DOT, OP_AXPY, OP_COUNT } op_kind;
static const char *const op_names[OP_COUNT] = { "quantize", "dequantize", "dot", "axpy" };

typedef struct job {
    const kvq_type_traits *tr;
    op_kind op;
    const float *x;      /* n input values                  */
    uint8_t *packed;     /* rows * row_bytes                 */
    float *y;            /* n output / accumulator values    */
    int64_t n, dim;
    size_t row_bytes;
} job;

static void run_job(void *ctx) {
    const job *j = ctx;
    const int64_t rows = j->n / j->dim;
    double s = 0;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *p = j->packed + (size_t)r * j->row_bytes;
        switch (j->op) {
        case OP_QUANTIZE: j->tr->quantize(j->x + r * j->dim, p, j->dim); break;
        case OP_DEQUANTIZE: j->tr->dequantize(p, j->y + r * j->dim, j->dim); break;
        case OP_DOT: s += j->tr->dot(p, j->x + r * j->dim, j->dim); break;
        case OP_AXPY: j->tr->axpy(1e-7f, p, j->y + r * j->dim, j->dim); break;
        default: break;
        }
    }
    bench_consume(s);
}

typedef struct memcpy_job { const float *src; float *dst; int64_t n; } memcpy_job;
static void run_memcpy(void *ctx) {
    const memcpy_job *m = ctx;
    memcpy(m->dst, m->src, sizeof(float) * (size_t)m->n);
    bench_consume(m->dst[m->n / 2]);
}

static void *kernel_of(const kvq_type_traits *tr, op_kind op) {
    switch (op) {
    case OP_QUANTIZE: return (void *)tr->quantize;
    case OP_DEQUANTIZE: return (void *)tr->dequantize;
    case OP_DOT: return (void *)tr->dot;
    default: return (void *)tr->axpy;
    }
}

static int usage(FILE *out, int status) {
    fprintf(out, "usage: kvq-bench formats [--values N] [--dim D] [--reps R] [--type NAME]\n"
                 "  --values N  values per timed pass (default 262144, a multiple of D)\n"
                 "  --dim D     row length, a multiple of 32 (default 128, a head)\n"
                 "  --reps R    timed repetitions, the median is reported (default 5, >= 1)\n"
                 "  --type NAME only this type (default: every cache type)\n");
    return status;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    if (!v) { fprintf(stderr, "kvq-bench formats: error: %s needs a value\n", flag); return 0; }
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x < lo || x > hi) {
        fprintf(stderr, "kvq-bench formats: error: %s must be an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

int bench_formats(int argc, char **argv) {
    long values = 262144, dim = 128, reps = 5;
    kvq_type only = KVQ_TYPE_COUNT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(stdout, 0);
        else if (!strcmp(a, "--values")) { if (!parse_long(a, v, 32, 1L << 26, &values)) return 1; i++; }
        else if (!strcmp(a, "--dim")) { if (!parse_long(a, v, 32, KVQ_MAX_HEAD_DIM, &dim)) return 1; i++; }
        else if (!strcmp(a, "--reps")) { if (!parse_long(a, v, 1, 101, &reps)) return 1; i++; }
        else if (!strcmp(a, "--type")) {
            only = v ? kvq_type_from_name(v) : KVQ_TYPE_COUNT;
            if (only == KVQ_TYPE_COUNT) { fprintf(stderr, "kvq-bench formats: error: unknown type '%s'\n", v ? v : ""); return 1; }
            const kvq_type_traits *tr = kvq_type_get_scalar(only);
            if (!tr || !tr->quantize) {
                fprintf(stderr, "kvq-bench formats: error: %s has no row quantiser to time (KVarN tiles: cachefmt tiles)\n", v);
                return 1;
            }
            i++;
        } else { fprintf(stderr, "kvq-bench formats: error: unknown flag '%s'\n", a); return usage(stderr, 1); }
    }
    if (dim % 32 || values % dim) {
        fprintf(stderr, "kvq-bench formats: error: --dim must be a multiple of 32 and divide --values\n");
        return 1;
    }

    static kvq_type_traits tables[3][KVQ_TYPE_COUNT];
    static const char *const level_names[3] = { "scalar", "avx2", "avx512" };
    int have[3], nlevels = 0;
    for (int l = 0; l < 3; l++) nlevels += have[l] = kvq_simd_table(level_names[l], tables[l]);

    const int64_t n = values;
    float *x = malloc(sizeof(float) * (size_t)n), *y = calloc((size_t)n, sizeof(float));
    uint8_t *packed = malloc((size_t)n * 4 + 64);
    if (!x || !y || !packed) {
        fprintf(stderr, "kvq-bench formats: error: out of memory\n");
        free(x); free(y); free(packed);
        return 1;
    }
    uint64_t s = 88172645463325252ULL;                 /* xorshift: rough Gaussian-ish data */
    for (int64_t i = 0; i < n; i++) {
        double acc = 0;
        for (int k = 0; k < 4; k++) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; acc += (double)(s >> 11) / 9007199254740992.0; }
        x[i] = (float)((acc - 2.0) * 1.7320508);
    }

    memcpy_job mj = { x, y, n };
    const double t_copy = bench_time(run_memcpy, &mj, (int)reps, 0.02);
    printf("## formats\n\n%lld values per pass in rows of %ld, median of %ld runs; GB/s = packed bytes "
           "read or written per second.\nmemcpy of the same values as f32: %.2f GB/s (%.0f Mval/s)\n\n",
           (long long)n, dim, reps, 4.0 * (double)n / t_copy * 1e-9, (double)n / t_copy * 1e-6);

    printf("| type | op |");
    for (int l = 0; l < 3; l++) if (have[l]) printf(" %s GB/s | %s Mval/s |", level_names[l], level_names[l]);
    printf(" best / scalar |\n|---|---|");
    for (int l = 0; l < nlevels; l++) printf("---:|---:|");
    printf("---:|\n");

    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *ref = kvq_type_get_scalar((kvq_type)t);
        if (!ref || !ref->quantize || (only != KVQ_TYPE_COUNT && only != (kvq_type)t)) continue;
        const size_t rb = kvq_row_bytes((kvq_type)t, dim);
        if (!rb) {   /* a row of dim values this type does not store (e.g. not its block multiple) */
            printf("| %s | - | rows of %ld values not stored by this type |\n", ref->name, dim);
            continue;
        }
        const double packed_bytes = (double)rb * (double)(n / dim);
        for (int64_t r = 0; r < n / dim; r++) ref->quantize(x + r * dim, packed + (size_t)r * rb, dim);
        for (int op = 0; op < OP_COUNT; op++) {
            printf("| %s | %s |", ref->name, op_names[op]);
            double t_scalar = 0, t_best = 0;
            for (int l = 0; l < 3; l++) {
                if (!have[l]) continue;
                const kvq_type_traits *tr = &tables[l][t];
                if (l > 0 && kernel_of(tr, (op_kind)op) == kernel_of(ref, (op_kind)op)) {
                    printf(" = scalar | |");
                    continue;
                }
                job j = { tr, (op_kind)op, x, packed, y, n, dim, rb };
                const double sec = bench_time(run_job, &j, (int)reps, 0.02);
                if (op == OP_QUANTIZE) /* restore the scalar encoder's bytes for the readers */
                    for (int64_t r = 0; r < n / dim; r++) ref->quantize(x + r * dim, packed + (size_t)r * rb, dim);
                if (l == 0) t_scalar = sec;
                if (t_best == 0 || sec < t_best) t_best = sec;
                printf(" %.3g | %.4g |", packed_bytes / sec * 1e-9, (double)n / sec * 1e-6);
            }
            printf(" %.1fx |\n", t_scalar / t_best);
            fflush(stdout);
        }
    }
    printf("\n");
    free(x); free(y); free(packed);
    return 0;
}
