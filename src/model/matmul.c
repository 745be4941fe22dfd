/*
 * matmul.c - kvq_matmul (see matmul.h): output rows split into fixed
 * chunks, one pool task per chunk.
 *
 * Decoding (one token) is memory-bound: each weight row is read once, so
 * the type's fused dot kernel (unpack + multiply in registers) is best.
 * Prefill (many tokens) is compute-bound: a group of weight rows is
 * unpacked once into f32 scratch and a register-blocked tile kernel
 * multiplies it against every token, reusing each loaded weight vector for
 * several tokens and each token vector for several rows.
 */
#include "matmul.h"
#include "act8.h"
#include "kquants_xperm.h"
#include "vec1.h"

#include <stdlib.h>

/* Rows per prefill task.  Fixed (never derived from the thread count) so
 * that the grouping of rows, and with it every output's summation order,
 * is the same however many threads run. */
enum { GEMM_TASK_ROWS = 16, MAX_TILE = 8 };

/* Decode products: the rows in chunks of about GEMV_CHUNK_BYTES of
 * weights, each thread streaming a contiguous share of them and then
 * taking chunks from the back of the others' (kvq_pool_run_spans).
 * Why long shares: threads that claim small slices of one matrix in turn
 * each read it in short interleaved runs, and memory serves that far
 * worse than long contiguous streams.  On a 2-core AMD EPYC (Zen 5), 2
 * threads read a 151936 x 1024 q8_0 matrix at 22 GB/s with 32-row (35
 * KB) tasks claimed in turn and at 33-35 GB/s with 256 KB or larger ones
 * (docs/performance.md).  Why small chunks at the end: with tasks of
 * 256 KB-1 MB, two per thread (what ran before), the caller waited ~1.1
 * ms of a q8_0 step's 18 for the other thread's last task of the ~200
 * products (Zen 4, 2 threads); a chunk of 64 KB takes ~1.5 us.  Every
 * output of a decode product is one row's own dot, so which thread
 * computes it changes no bit. */
enum { GEMV_CHUNK_BYTES = 64 << 10 };

static int64_t gemv_chunk_rows(size_t row_bytes) {
    return KVQ_MAX((int64_t)1, (int64_t)(GEMV_CHUNK_BYTES / KVQ_MAX(row_bytes, (size_t)1)));
}

/* The matrices of one decode job (one, or a group read by the same input:
 * kvq_matmul_group), their rows in chunks numbered across them in order:
 * part p's chunks are first[p] .. first[p + 1] - 1. */
typedef struct decode_parts {
    int n;
    const uint8_t *W[KVQ_MATMUL_MAX_PARTS];
    float *Y[KVQ_MATMUL_MAX_PARTS];
    int64_t rows[KVQ_MATMUL_MAX_PARTS], first[KVQ_MATMUL_MAX_PARTS + 1];
    int64_t chunk_rows;
} decode_parts;

static decode_parts parts_of(int n, const kvq_matmul_out *outs, size_t row_bytes) {
    decode_parts d = { .n = n, .chunk_rows = gemv_chunk_rows(row_bytes) };
    for (int p = 0; p < n; p++) {
        d.W[p] = outs[p].W;
        d.Y[p] = outs[p].Y;
        d.rows[p] = outs[p].rows;
        d.first[p + 1] = d.first[p] + (outs[p].rows + d.chunk_rows - 1) / d.chunk_rows;
    }
    return d;
}

/* The part of chunk c, and (r0, r1) its rows in that part. */
static int part_rows(const decode_parts *d, int64_t c, int64_t *r0, int64_t *r1) {
    int p = 0;
    while (c >= d->first[p + 1]) p++;
    *r0 = (c - d->first[p]) * d->chunk_rows;
    *r1 = KVQ_MIN(d->rows[p], *r0 + d->chunk_rows);
    return p;
}

/* The scalar instance of gemm_tile.inc: 4 rows x 4 tokens of plain floats
 * (the primitive set of src/base/vec1.h). */
#define TILE_ROWS 4
#define TILE_TOKS 4
#define TILE_FN tile_scalar
#include "gemm_tile.inc"

kvq_gemm_tile kvq_gemm_tile_scalar(void) { return (kvq_gemm_tile){ tile_scalar, TILE_ROWS, TILE_TOKS }; }

/* The widest tile kernel this CPU runs (read-only after the first call). */
static kvq_gemm_tile best_tile(void) {
#if defined(__x86_64__)
    const kvq_isa isa = kvq_isa_best();
    if (isa == KVQ_ISA_AVX512) return kvq_gemm_tile_avx512();
    if (isa == KVQ_ISA_AVX2) return kvq_gemm_tile_avx2();
#endif
    return kvq_gemm_tile_scalar();
}

typedef struct matmul_job {
    kvq_type wtype;
    const kvq_type_traits *tr;   /* looked up once per product, not per row */
    kvq_kq_xrows_fn xrows;   /* decode: rows against X laid out for them, or NULL */
    const uint8_t *W;
    size_t row_bytes;
    int64_t rows, cols, n_tok;
    const float *X;
    float *Y;
    kvq_gemm_tile tile;
    float *scratch;          /* per thread: tile.rows * cols floats (prefill) */
    /* decode: the matrices (W, rows and Y above are prefill's), and with
     * int8 activations their dot and X quantised (else dot8 NULL) */
    decode_parts parts;
    kvq_act8_dot_fn dot8;
    const uint8_t *xq;
} matmul_job;

/* Decode chunks c0 .. c1 - 1 (kvq_pool_run_spans over j->parts): each
 * row's dot with the one input: K-quant rows against X laid out for them
 * (xrows), the int8 dot against xq (dot8), else the type's dot. */
static void gemv_chunks(void *ctx, int64_t c0, int64_t c1, int thread) {
    (void)thread;
    const matmul_job *j = ctx;
    for (int64_t c = c0; c < c1; c++) {
        int64_t r0, r1;
        const int p = part_rows(&j->parts, c, &r0, &r1);
        const uint8_t *W = j->parts.W[p];
        float *Y = j->parts.Y[p];
        /* rows are whole blocks (checked in kvq_matmul_scratch), so the
         * type's dot runs on them directly, with no padding */
        if (j->xrows) {
            j->xrows(W + (size_t)r0 * j->row_bytes, j->row_bytes, r1 - r0, j->X, j->cols, Y + r0);
            continue;
        }
        if (j->dot8)
            for (int64_t r = r0; r < r1; r++) Y[r] = j->dot8(W + (size_t)r * j->row_bytes, j->xq, j->cols);
        else
            for (int64_t r = r0; r < r1; r++) Y[r] = j->tr->dot(W + (size_t)r * j->row_bytes, j->X, j->cols);
    }
}

/* Weight rows r0..r0+nr-1 as f32 row pointers: f32 weights are used in
 * place, anything else is unpacked into this thread's scratch.  Slots past
 * nr repeat the last row (a padded tile). */
static void unpack_rows(const matmul_job *j, int thread, int64_t r0, int nr, const float **w) {
    /* f32 weights need no scratch (j->scratch may be NULL: no NULL + 0) */
    float *scratch =
        j->wtype == KVQ_TYPE_F32 ? NULL : j->scratch + (size_t)thread * (size_t)j->tile.rows * (size_t)j->cols;
    for (int r = 0; r < j->tile.rows; r++) {
        if (r >= nr) { w[r] = w[nr - 1]; continue; }
        const uint8_t *src = j->W + (size_t)(r0 + r) * j->row_bytes;
        if (j->wtype == KVQ_TYPE_F32) {
            w[r] = (const float *)src;
        } else {
            float *dst = scratch + (size_t)r * (size_t)j->cols;
            j->tr->dequantize(src, dst, j->cols);
            w[r] = dst;
        }
    }
}

static void gemm_task(void *ctx, int task, int thread) {
    const matmul_job *j = ctx;
    const kvq_gemm_tile tile = j->tile;
    const int64_t r_end = KVQ_MIN(j->rows, (int64_t)(task + 1) * GEMM_TASK_ROWS);
    const float *w[MAX_TILE], *x[MAX_TILE];
    float out[MAX_TILE * MAX_TILE];
    for (int64_t r0 = (int64_t)task * GEMM_TASK_ROWS; r0 < r_end; r0 += tile.rows) {
        const int nr = (int)KVQ_MIN(tile.rows, r_end - r0);
        unpack_rows(j, thread, r0, nr, w);
        for (int64_t t0 = 0; t0 < j->n_tok; t0 += tile.toks) {
            const int nt = (int)KVQ_MIN(tile.toks, j->n_tok - t0);
            for (int t = 0; t < tile.toks; t++)
                x[t] = j->X + (size_t)(t0 + KVQ_MIN(t, nt - 1)) * (size_t)j->cols;
            tile.fn(w, x, j->cols, out);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < nr; r++)
                    j->Y[(size_t)(t0 + t) * (size_t)j->rows + (size_t)(r0 + r)] = out[t * tile.rows + r];
        }
    }
}

static int n_tasks_for(int64_t rows, int task_rows) {
    return (int)((rows + task_rows - 1) / task_rows);
}

/* A decode product.  K-quant weights: X laid out once for the type
 * (kquants_xperm.h) into the caller's scratch, or memory of its own, and
 * every row dotted with that; the row dot when neither is to be had (the
 * same product within a few ulp, not the same bits). */
static void gemv(kvq_pool *pool, matmul_job *j, float *scratch, size_t scratch_floats) {
    const kvq_kq_xrows_fn xrows = kvq_kq_xrows(j->wtype);
    float *xp = NULL, *owned = NULL;
    if (xrows) {
        const size_t need = kvq_kq_xperm_floats(j->cols);
        xp = scratch && scratch_floats >= need ? scratch : (owned = kvq_malloc_n(need, sizeof(float)));
    }
    if (xp && kvq_kq_xperm(j->wtype, j->X, j->cols, xp)) {
        j->xrows = xrows;
        j->X = xp;
    }
    kvq_pool_run_spans(pool, gemv_chunks, j, j->parts.first[j->parts.n], 1);
    free(owned);
}

/* Prefill without scratch memory (allocation failed): per-row dots, still
 * one output per thread in a fixed order. */
static void gemv_each_token(kvq_pool *pool, matmul_job *j) {
    const float *X = j->X;
    float *Y = j->Y;
    for (int64_t t = 0; t < j->n_tok; t++) {
        const kvq_matmul_out out = { j->W, j->rows, Y + (size_t)t * (size_t)j->rows };
        j->X = X + (size_t)t * (size_t)j->cols;
        j->parts = parts_of(1, &out, j->row_bytes);
        kvq_pool_run_spans(pool, gemv_chunks, j, j->parts.first[1], 1);
    }
}

size_t kvq_matmul_scratch_floats(int n_threads, int64_t max_cols) {
    return (size_t)KVQ_MAX(n_threads, 1) * MAX_TILE * (size_t)KVQ_MAX(max_cols, 0);
}

void kvq_matmul(kvq_pool *pool, kvq_type wtype, const void *W, int64_t rows, int64_t cols,
                const float *X, int64_t n_tok, float *Y) {
    kvq_matmul_split(pool, KVQ_MATMUL_MIN_PARALLEL_MACS, wtype, W, rows, cols, X, n_tok, Y);
}

void kvq_matmul_split(kvq_pool *pool, double min_parallel_macs, kvq_type wtype, const void *W, int64_t rows,
                      int64_t cols, const float *X, int64_t n_tok, float *Y) {
    /* no caller scratch: prefill allocates its own (tests, benchmarks) */
    kvq_matmul_scratch(pool, min_parallel_macs, NULL, 0, wtype, W, rows, cols, X, n_tok, Y);
}

void kvq_matmul_scratch(kvq_pool *pool, double min_parallel_macs, float *scratch, size_t scratch_floats,
                        kvq_type wtype, const void *W, int64_t rows, int64_t cols, const float *X,
                        int64_t n_tok, float *Y) {
    const kvq_type_traits *tr = kvq_type_get(wtype);
    if (!tr || !tr->dot || !W || !X || !Y || rows < 1 || cols < 1 || n_tok < 1) return; /* tile types are no weights */
    if (!tr->row_bytes && cols % tr->block_size) return;          /* weight rows are whole blocks */
    if (rows > (int64_t)INT32_MAX * GEMM_TASK_ROWS) return;   /* a prefill task index is an int */
    if (n_tok == 1) {   /* a decode group of one */
        const kvq_matmul_out out = { W, rows, Y };
        kvq_matmul_group(pool, min_parallel_macs, scratch, scratch_floats, wtype, cols, X, 1, &out);
        return;
    }
    /* Too small to share: the same tasks run on this thread alone (the
     * task grouping, hence every output bit, does not change). */
    if ((double)rows * (double)cols * (double)n_tok < min_parallel_macs) pool = NULL;
    matmul_job j = {
        .wtype = wtype, .tr = tr, .W = W, .row_bytes = kvq_row_bytes(wtype, cols),
        .rows = rows, .cols = cols, .n_tok = n_tok, .X = X, .Y = Y,
    };
    j.tile = best_tile();
    float *owned = NULL;
    if (wtype != KVQ_TYPE_F32) {
        const size_t need = (size_t)kvq_pool_threads(pool) * (size_t)j.tile.rows * (size_t)cols;
        j.scratch = scratch && scratch_floats >= need ? scratch : (owned = kvq_malloc_n(need, sizeof(float)));
        if (!j.scratch) { gemv_each_token(pool, &j); return; }
    }
    kvq_pool_run(pool, gemm_task, &j, n_tasks_for(rows, GEMM_TASK_ROWS));
    free(owned);
}

/* ------------------------------------------------- int8 activations */

/* Token rows per pass over a task's weight rows: the quantised rows of a
 * group (~16 x 1.1 KB per 1024 columns) and the task's weight rows stay
 * in the first cache levels while each is reused. */
enum { ACT8_TOK_GROUP = 16 };

typedef struct act8_job {
    kvq_act8_dot_fn dot;
    kvq_act8_dot4_fn dot4;   /* 4 tokens per weight row (NULL: none) */
    const uint8_t *W, *xq;
    size_t row_bytes, xq_row_bytes;
    int64_t rows, cols, n_tok;
    float *Y;
} act8_job;

/* A prefill task's GEMM_TASK_ROWS weight rows against every token. */
static void act8_task(void *ctx, int task, int thread) {
    (void)thread;
    const act8_job *j = ctx;
    const int64_t r0 = (int64_t)task * GEMM_TASK_ROWS, r1 = KVQ_MIN(j->rows, r0 + GEMM_TASK_ROWS);
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += ACT8_TOK_GROUP) {
        const int64_t t1 = KVQ_MIN(j->n_tok, t0 + ACT8_TOK_GROUP);
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = j->W + (size_t)r * j->row_bytes;
            int64_t t = t0;
            for (; j->dot4 && t + 4 <= t1; t += 4) {   /* same bits as 4 dots */
                const void *xs[4];
                float out[4];
                for (int k = 0; k < 4; k++) xs[k] = j->xq + (size_t)(t + k) * j->xq_row_bytes;
                j->dot4(w, xs, j->cols, out);
                for (int k = 0; k < 4; k++) j->Y[(size_t)(t + k) * (size_t)j->rows + (size_t)r] = out[k];
            }
            for (; t < t1; t++)
                j->Y[(size_t)t * (size_t)j->rows + (size_t)r] = j->dot(w, j->xq + (size_t)t * j->xq_row_bytes, j->cols);
        }
    }
}

size_t kvq_matmul_act8_bytes(int64_t n_tok, int64_t cols) {
    return (size_t)KVQ_MAX(n_tok, 0) * kvq_act8_row_bytes_max(cols);
}

bool kvq_matmul_act8(kvq_pool *pool, double min_parallel_macs, void *xq, size_t xq_bytes, kvq_type wtype,
                     const void *W, int64_t rows, int64_t cols, const float *X, int64_t n_tok, float *Y) {
    const kvq_act8_dot_fn dot = kvq_act8_dot(wtype);
    if (!dot || !xq || !W || !X || !Y || rows < 1 || cols < 1 || n_tok < 1) return false;
    if (cols % kvq_act8_block(wtype) || rows > (int64_t)INT32_MAX) return false;
    const size_t xq_row = kvq_act8_row_bytes(wtype, cols);
    if (xq_bytes / xq_row < (size_t)n_tok) return false;
    if (n_tok == 1) {   /* a decode group of one */
        const kvq_matmul_out out = { W, rows, Y };
        return kvq_matmul_act8_group(pool, min_parallel_macs, xq, xq_bytes, wtype, cols, X, 1, &out);
    }
    for (int64_t t = 0; t < n_tok; t++)
        kvq_act8_quantize(wtype, X + (size_t)t * (size_t)cols, cols, (uint8_t *)xq + (size_t)t * xq_row);
    if ((double)rows * (double)cols * (double)n_tok < min_parallel_macs) pool = NULL;
    act8_job j = {
        .dot = dot, .dot4 = kvq_act8_dot4(wtype), .W = W, .xq = xq, .row_bytes = kvq_row_bytes(wtype, cols), .xq_row_bytes = xq_row,
        .rows = rows, .cols = cols, .n_tok = n_tok, .Y = Y,
    };
    kvq_pool_run(pool, act8_task, &j, n_tasks_for(rows, GEMM_TASK_ROWS));
    return true;
}

/* ---- decode groups: several matrices read by one input, one job */

/* Valid outs (1..KVQ_MATMUL_MAX_PARTS of them, each W and Y set and rows
 * >= 1), and their multiply-adds. */
static bool group_ok(int n, const kvq_matmul_out *outs, int64_t cols, double *macs) {
    if (!outs || n < 1 || n > KVQ_MATMUL_MAX_PARTS || cols < 1) return false;
    *macs = 0;
    for (int p = 0; p < n; p++) {
        if (!outs[p].W || !outs[p].Y || outs[p].rows < 1) return false;
        *macs += (double)outs[p].rows * (double)cols;
    }
    return true;
}

void kvq_matmul_group(kvq_pool *pool, double min_parallel_macs, float *scratch, size_t scratch_floats,
                      kvq_type wtype, int64_t cols, const float *X, int n, const kvq_matmul_out *outs) {
    const kvq_type_traits *tr = kvq_type_get(wtype);
    double macs;
    if (!tr || !tr->dot || !X || !group_ok(n, outs, cols, &macs)) return;
    if (!tr->row_bytes && cols % tr->block_size) return;
    if (macs < min_parallel_macs) pool = NULL;
    matmul_job j = { .wtype = wtype, .tr = tr, .row_bytes = kvq_row_bytes(wtype, cols), .cols = cols, .n_tok = 1, .X = X };
    j.parts = parts_of(n, outs, j.row_bytes);
    gemv(pool, &j, scratch, scratch_floats);
}

bool kvq_matmul_act8_group(kvq_pool *pool, double min_parallel_macs, void *xq, size_t xq_bytes, kvq_type wtype,
                           int64_t cols, const float *X, int n, const kvq_matmul_out *outs) {
    const kvq_act8_dot_fn dot = kvq_act8_dot(wtype);
    double macs;
    if (!dot || !xq || !X || !group_ok(n, outs, cols, &macs) || cols % kvq_act8_block(wtype)) return false;
    const size_t xq_row = kvq_act8_row_bytes(wtype, cols);
    if (xq_bytes < xq_row) return false;
    kvq_act8_quantize(wtype, X, cols, xq);
    if (macs < min_parallel_macs) pool = NULL;
    matmul_job j = { .wtype = wtype, .row_bytes = kvq_row_bytes(wtype, cols), .cols = cols, .n_tok = 1, .X = X,
                     .dot8 = dot, .xq = xq };
    j.parts = parts_of(n, outs, j.row_bytes);
    kvq_pool_run_spans(pool, gemv_chunks, &j, j.parts.first[n], 1);
    return true;
}
