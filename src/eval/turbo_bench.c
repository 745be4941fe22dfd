/* turbo_bench.c - the figures of docs/turbo.md for the TurboQuant types
 * (kvq_eval.h, "TurboQuant"): round-trip NMSE on unit-Gaussian vectors
 * (the stored format and the paper's direction error), the inner-product
 * gain, and encode / dot / axpy times per 128 values (SIMD and scalar),
 * for `kvq turbo-bench`. */
#include "alloc.h"
#include "turbo.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* NMSE of the format and the paper's ||u - c_hat||^2 (c_hat = x_hat/norm'). */
static void measure_error(kvq_turbo_type t, const float *x, int n, int d, uint8_t *rows, float *y,
                          kvq_turbo_bench_row *r) {
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
                       const float *q_rot, kvq_turbo_bench_row *r) {
    int n_scalar = n < 200 ? n : 200;          /* the scalar trellis is slow */
    r->enc_scalar_us = time_op(OP_ENCODE_SCALAR, t, x, n_scalar, d, rows, y, q_rot);
    r->enc_us = time_op(OP_ENCODE, t, x, n, d, rows, y, q_rot);
    r->dot_ns = 1e3 * time_op(OP_DOT, t, x, n, d, rows, y, q_rot);
    r->axpy_ns = 1e3 * time_op(OP_AXPY, t, x, n, d, rows, y, q_rot);
    measure_error(t, x, n, d, rows, y, r);
}

kvq_status kvq_turbo_bench(const float *x, int n, int d, const float *q_rot, kvq_turbo_bench_row *rows,
                           kvq_error *err) {
    if (!x || !q_rot || !rows || n < 1 || d < 1 || d > KVQ_TURBO_BLOCK)
        return kvq_fail(err, KVQ_ERR_ARG, "turbo-bench: %d vectors of %d (want at least 1 of 1..%d)", n, d,
                        KVQ_TURBO_BLOCK);
    _Static_assert((int)KVQ_TURBO_COUNT == (int)KVQ_TURBO_BENCH_ROWS, "one bench row per TurboQuant type");
    float *y = kvq_malloc_n((size_t)kvq_turbo_rot_dim(d), sizeof(float));
    uint8_t *packed = kvq_malloc_n(kvq_turbo_row_bytes(KVQ_TURBO4_TCQ, d), (size_t)n);
    if (!y || !packed) {
        free(y), free(packed);
        return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory for %d vectors of %d", n, d);
    }
    for (kvq_turbo_type t = 0; t < KVQ_TURBO_COUNT; t++) {
        kvq_turbo_bench_row *r = &rows[t];
        bench_type(t, x, n, d, packed, y, q_rot, r);
        r->type = kvq_type_from_name(kvq_turbo_name(t));
        r->bits = kvq_turbo_bits(t);
        r->tcq = kvq_turbo_is_tcq(t);
        r->bpv = kvq_turbo_bpv(t, d);
        r->ip_gain = kvq_turbo_ip_gain(t);
    }
    free(y), free(packed);
    return KVQ_OK;
}
