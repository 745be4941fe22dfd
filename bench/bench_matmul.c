/* bench_matmul.c - throughput of kvq_matmul (decode: one token, prefill:
 * 64 tokens) for every weight type a GGUF model may hold.  Timings only;
 * correctness lives in tests/test_matmul.c. */
#include "bench.h"
#include "bench_matmul.h"

#include "kvq.h"
#include "matmul.h"
#include "act8.h"
#include "kquants_xperm.h"
#include "simd.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float rng_float(uint64_t *s) { return (float)((double)(bench_rng_next(s) >> 11) / 9007199254740992.0 - 0.5); }

/* rows x cols weights of type ty: quantised uniform noise, or (weight-only
 * K-quants, no quantiser) random bytes with small finite fp16 scales. */
static uint8_t *make_weights(kvq_type ty, int64_t rows, int64_t cols) {
    const kvq_type_traits *tr = kvq_type_get(ty);
    const size_t rb = kvq_row_bytes(ty, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *x = malloc(sizeof(float) * (size_t)cols);
    uint64_t s = 1234 + (uint64_t)ty;
    if (!w || !x) { free(w); free(x); return NULL; }
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + rb * (size_t)r;
        if (tr->quantize) {
            for (int64_t i = 0; i < cols; i++) x[i] = rng_float(&s);
            kvq_quantize_row(ty, x, row, cols);
            continue;
        }
        for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)bench_rng_next(&s);
        const uint16_t d = kvq_fp32_to_fp16(0.01f);
        for (size_t b = 0; b < rb; b += (size_t)tr->block_bytes) {
            /* Q6_K keeps d last; Q4_K/Q5_K keep d, dmin first */
            if (ty == KVQ_TYPE_Q6_K) memcpy(row + b + 208, &d, 2);
            else { memcpy(row + b, &d, 2); memcpy(row + b + 2, &d, 2); }
        }
    }
    free(x);
    return w;
}

/* Median seconds of `reps` runs (after one warm-up run); *best the
 * fastest run (on a shared machine the least disturbed one). */
/* xq: NULL for f32 activations, else the int8 rows (kvq_matmul_act8,
 * the quantisation of X inside the timed call, as in the forward pass). */
static void run_matmul(kvq_pool *pool, kvq_type ty, const uint8_t *W, int64_t rows, int64_t cols, const float *X,
                       int64_t n_tok, float *Y, void *xq, size_t xq_bytes) {
    if (!xq || !kvq_matmul_act8(pool, KVQ_MATMUL_MIN_PARALLEL_MACS, xq, xq_bytes, ty, W, rows, cols, X, n_tok, Y))
        kvq_matmul(pool, ty, W, rows, cols, X, n_tok, Y);
}

static double time_matmul(kvq_pool *pool, kvq_type ty, const uint8_t *W, int64_t rows, int64_t cols,
                          const float *X, int64_t n_tok, float *Y, void *xq, size_t xq_bytes, int reps, double *best) {
    double t[64];
    run_matmul(pool, ty, W, rows, cols, X, n_tok, Y, xq, xq_bytes);
    for (int i = 0; i < reps; i++) {
        bench_evict_caches("matmul");   /* the weights from memory, as in a model (allocated in bench_matmul) */
        double t0 = now_s();
        run_matmul(pool, ty, W, rows, cols, X, n_tok, Y, xq, xq_bytes);
        t[i] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    *best = t[0];
    return t[reps / 2];
}

/* Median seconds per product, forcing the rows onto every thread of the
 * pool (threshold 0), each timed batch long enough (>= 0.5 ms) for the
 * clock. */
static double time_split(kvq_pool *pool, const uint8_t *W, int64_t rows, int64_t cols, const float *X,
                         float *Y, int reps) {
    double t[64];
    const int inner = (int)(2e6 / ((double)rows * (double)cols)) + 1;   /* ~2M multiply-adds per batch */
    kvq_matmul_split(pool, 0, KVQ_TYPE_Q8_0, W, rows, cols, X, 1, Y);
    for (int i = 0; i < reps; i++) {
        double t0 = now_s();
        for (int k = 0; k < inner; k++) kvq_matmul_split(pool, 0, KVQ_TYPE_Q8_0, W, rows, cols, X, 1, Y);
        t[i] = (now_s() - t0) / inner;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    return t[reps / 2];
}

/* Where sharing a decode product between 2 threads starts to pay: the
 * evidence behind KVQ_MATMUL_MIN_PARALLEL_MACS (matmul.h). */
static void print_break_even(kvq_pool *const pools[2], int reps) {
    static const int64_t shapes[][2] = { { 128, 256 }, { 256, 256 }, { 512, 256 }, { 512, 512 },
                                         { 1024, 512 }, { 1024, 1024 }, { 2048, 1024 }, { 2048, 2048 } };
    const int64_t max_cols = 2048, max_rows = 2048;
    uint8_t *W = make_weights(KVQ_TYPE_Q8_0, max_rows, max_cols);
    float *X = malloc(sizeof(float) * (size_t)max_cols), *Y = malloc(sizeof(float) * (size_t)max_rows);
    uint64_t s = 11;
    if (!W || !X || !Y) { fprintf(stderr, "bench_matmul: out of memory\n"); free(W); free(X); free(Y); return; }
    for (int64_t i = 0; i < max_cols; i++) X[i] = rng_float(&s);
    printf("\nthreads break-even (q8_0 decode, rows always shared; kvq_matmul runs products under %.0f "
           "multiply-adds on one thread), median of %d:\n\n", KVQ_MATMUL_MIN_PARALLEL_MACS, reps);
    printf("| rows x cols | multiply-adds | 1 thread us | 2 threads us | 2T speed-up |\n|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t rows = shapes[i][0], cols = shapes[i][1];
        /* the first bytes of W read as rows x cols: any q8_0 blocks are valid weights */
        const double t1 = time_split(pools[0], W, rows, cols, X, Y, reps);
        const double t2 = time_split(pools[1], W, rows, cols, X, Y, reps);
        printf("| %lldx%lld | %lld | %.2f | %.2f | %.2fx |\n", (long long)rows, (long long)cols,
               (long long)(rows * cols), 1e6 * t1, 1e6 * t2, t1 / t2);
        fflush(stdout);
    }
    free(W); free(X); free(Y);
}

/* --levels: every int8 dot level this CPU has on the same weights and
 * activations, one thread, no pool (the dot alone, rows x cols chosen by
 * the caller: small ones stay in cache), median of reps, so the kernel
 * levels compare in one binary and one run. */
/* The median and best of reps timed runs of one level's dot over the
 * rows, as the --levels line "type level ms GB/s best-ms best-GB/s". */
typedef void (*rows_fn)(const void *ctx, const uint8_t *W, size_t rb, int64_t rows, int64_t cols, float *Y);

static void print_level_line(kvq_type ty, const char *level, rows_fn run, const void *ctx, const uint8_t *W,
                             int64_t rows, int64_t cols, float *Y, int reps) {
    const size_t rb = kvq_row_bytes(ty, cols);
    double t[64];
    for (int i = -1; i < reps; i++) {
        const double t0 = now_s();
        run(ctx, W, rb, rows, cols, Y);
        if (i >= 0) t[i] = now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_double);
    printf("%-8s %-21s %10.3f %8.2f %8.3f %9.2f\n", kvq_type_name(ty), level, 1e3 * t[reps / 2],
           (double)rb * (double)rows / t[reps / 2] * 1e-9, 1e3 * t[0], (double)rb * (double)rows / t[0] * 1e-9);
}

typedef struct row_dot_ctx { kvq_dot_fn dot; const float *x; } row_dot_ctx;
static void run_row_dots(const void *ctx, const uint8_t *W, size_t rb, int64_t rows, int64_t cols, float *Y) {
    const row_dot_ctx *c = ctx;
    for (int64_t r = 0; r < rows; r++) Y[r] = c->dot(W + rb * (size_t)r, c->x, cols);
}
typedef struct xrows_ctx { kvq_kq_xrows_fn rows; const float *xp; } xrows_ctx;
static void run_xrows(const void *ctx, const uint8_t *W, size_t rb, int64_t rows, int64_t cols, float *Y) {
    const xrows_ctx *c = ctx;
    c->rows(W, rb, rows, c->xp, cols, Y);
}

typedef struct act8_ctx { kvq_act8_dot_fn dot; const void *xq; } act8_ctx;
static void run_act8(const void *ctx, const uint8_t *W, size_t rb, int64_t rows, int64_t cols, float *Y) {
    const act8_ctx *c = ctx;
    for (int64_t r = 0; r < rows; r++) Y[r] = c->dot(W + rb * (size_t)r, c->xq, cols);
}

/* --levels: every int8 dot level this CPU has on the same weights and
 * activations, one thread, no pool (the dot alone, rows x cols chosen by
 * the caller: small ones stay in cache), median of reps, so the kernel
 * levels compare in one binary and one run. */
static void print_act8_levels(kvq_type ty, const uint8_t *W, int64_t rows, int64_t cols, const float *X, void *xq,
                              float *Y, int reps) {
    kvq_act8_quantize(ty, X, cols, xq);
    for (int lv = 0; lv < KVQ_ACT8_LEVELS; lv++) {
        const act8_ctx c = { kvq_act8_dot_level(ty, (kvq_act8_level)lv), xq };
        char name[40];
        snprintf(name, sizeof name, "int8 %s", kvq_act8_level_name((kvq_act8_level)lv));
        if (c.dot) print_level_line(ty, name, run_act8, &c, W, rows, cols, Y, reps);
    }
}

/* --levels with f32 activations: each SIMD level's row dot and, for the
 * K-quants, its dot on laid-out activations (kquants_xperm.h: what a
 * decode product runs), on the same weights, one thread. */
static void print_f32_levels(kvq_type ty, const uint8_t *W, int64_t rows, int64_t cols, const float *X, float *Y,
                             int reps) {
    float *xp = malloc(kvq_kq_xperm_floats(cols) * sizeof *xp);
    for (int isa = KVQ_ISA_AVX2; isa <= (int)kvq_isa_best(); isa++) {
        kvq_type_traits table[KVQ_TYPE_COUNT];
        char name[40];
        if (!kvq_simd_table(kvq_isa_name((kvq_isa)isa), table)) continue;
        const row_dot_ctx rd = { table[ty].dot, X };
        snprintf(name, sizeof name, "f32 %s row", kvq_isa_name((kvq_isa)isa));
        print_level_line(ty, name, run_row_dots, &rd, W, rows, cols, Y, reps);
        const xrows_ctx xr = { kvq_kq_xrows_level(ty, (kvq_isa)isa), xp };
        if (!xr.rows || !xp || !kvq_kq_xperm(ty, X, cols, xp)) continue;
        snprintf(name, sizeof name, "f32 %s laid-out", kvq_isa_name((kvq_isa)isa));
        print_level_line(ty, name, run_xrows, &xr, W, rows, cols, Y, reps);
    }
    free(xp);
}

/* --model FILE: the decode products of one generation step of a real
 * model file in the forward pass's order (every layer's wq wk wv wo gate
 * up down, then the output), nothing else timed: what the weights alone
 * cost a step, and the rate they are read at, on 1 and 2 threads.
 * --no-mmap reads the file into memory first (kvq_model_load_ex). */
typedef struct model_pass { double layers_s, total_s; } model_pass;

/* xq: NULL for f32 activations, else int8 (run_matmul). */
static model_pass time_model_pass(kvq_pool *pool, const kvq_model *m, const float *X, float *Y, void *xq,
                                  size_t xq_bytes) {
    const double t0 = now_s();
    for (int l = 0; l < m->info.n_layer; l++) {
        const kvq_weight *w[KVQ_LAYER_MATRICES];
        kvq_layer_matrices(&m->layers[l], w);
        for (int k = 0; k < KVQ_LAYER_MATRICES; k++)
            run_matmul(pool, w[k]->type, w[k]->data, w[k]->rows, w[k]->cols, X, 1, Y, xq, xq_bytes);
    }
    const double t1 = now_s();
    run_matmul(pool, m->output.type, m->output.data, m->output.rows, m->output.cols, X, 1, Y, xq, xq_bytes);
    return (model_pass){ t1 - t0, now_s() - t0 };
}

/* Weight bytes of a step: all of them, and (*layers) the layers' alone. */
static double model_weight_bytes(const kvq_model *m, double *layers) {
    *layers = 0;
    for (int l = 0; l < m->info.n_layer; l++) {
        const kvq_weight *w[KVQ_LAYER_MATRICES];
        kvq_layer_matrices(&m->layers[l], w);
        for (int k = 0; k < KVQ_LAYER_MATRICES; k++) *layers += (double)w[k]->row_bytes * (double)w[k]->rows;
    }
    return *layers + (double)m->output.row_bytes * (double)m->output.rows;
}

static int bench_model_products(const char *path, bool no_mmap, bool int8, int reps, kvq_pool *const pools[2]) {
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    if (kvq_model_load_ex(path, no_mmap ? KVQ_LOAD_READ : KVQ_LOAD_MMAP, &m, &err) != KVQ_OK) {
        fprintf(stderr, "bench_matmul: %s\n", err.msg);
        return 1;
    }
    const int64_t width = KVQ_MAX(m->info.n_embd, KVQ_MAX(m->info.n_ff, m->info.n_head * m->info.head_dim_v));
    const int64_t outs = KVQ_MAX(KVQ_MAX(m->info.n_vocab, m->info.n_embd),
                                 KVQ_MAX(m->info.n_ff, m->info.n_head * m->info.head_dim_k));
    float *X = malloc(sizeof(float) * (size_t)width), *Y = malloc(sizeof(float) * (size_t)outs);
    const size_t xq_bytes = int8 ? kvq_matmul_act8_bytes(1, width) : 0;
    void *xq = int8 ? malloc(xq_bytes) : NULL;
    if (!X || !Y || (int8 && !xq)) {
        fprintf(stderr, "bench_matmul: out of memory\n");
        free(X); free(Y); free(xq); kvq_model_free(m);
        return 1;
    }
    uint64_t s = 5;
    for (int64_t i = 0; i < width; i++) X[i] = rng_float(&s);
    double layer_bytes;
    const double bytes = model_weight_bytes(m, &layer_bytes);
    printf("decode products of %s (%s, %d layers, %.1f MB of weights a step), weights %s, %s activations,\n"
           "median of %d passes after one warm-up; GB/s = weight bytes / time\n\n",
           path, m->info.arch_name, m->info.n_layer, bytes * 1e-6, no_mmap ? "read into memory" : "mapped",
           int8 ? "int8 (where the weight type has int8 dots)" : "f32", reps);
    printf("| threads | step ms | layers ms | output ms | GB/s | layers GB/s | output GB/s | p25-p75 step ms |\n"
           "|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int p = 0; p < 2; p++) {
        double step[64], lay[64], out[64];
        time_model_pass(pools[p], m, X, Y, xq, xq_bytes);
        for (int i = 0; i < reps; i++) {
            const model_pass mp = time_model_pass(pools[p], m, X, Y, xq, xq_bytes);
            step[i] = mp.total_s;
            lay[i] = mp.layers_s;
            out[i] = mp.total_s - mp.layers_s;
        }
        qsort(lay, (size_t)reps, sizeof lay[0], cmp_double);
        qsort(out, (size_t)reps, sizeof out[0], cmp_double);
        qsort(step, (size_t)reps, sizeof step[0], cmp_double);
        const double ts = step[reps / 2], tl = lay[reps / 2], to = out[reps / 2];
        printf("| %d | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.2f-%.2f |\n", p + 1, 1e3 * ts, 1e3 * tl, 1e3 * to,
               bytes / ts * 1e-9, layer_bytes / tl * 1e-9, (bytes - layer_bytes) / to * 1e-9, 1e3 * step[reps / 4],
               1e3 * step[(3 * reps) / 4]);
        fflush(stdout);
    }
    free(X); free(Y); free(xq);
    kvq_model_free(m);
    return 0;
}

static bool type_selected(const char *list, const char *name) {
    if (!list) return true;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

int bench_matmul(int argc, char **argv) {
    int64_t rows = 2048, cols = 2048;
    int reps = 5;
    const char *types = NULL, *model = NULL;
    bool no_mmap = false;
    size_t n_toks = 2;   /* --decode: the 1-token product only */
    const char *act = "both";   /* --act f32|int8|both: activations of the covered types */
    bool levels = false;        /* --levels: the dot of every kernel level instead */
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int x = 0;
        bool ok = true;
        if (!strcmp(argv[i], "--rows")) {
            ok = bench_flag_int("matmul", argv[i], v, 1, 1 << 20, &x);
            rows = x;
            i++;
        } else if (!strcmp(argv[i], "--cols")) {
            ok = bench_flag_int("matmul", argv[i], v, 256, 1 << 20, &x);
            cols = x;
            i++;
        } else if (!strcmp(argv[i], "--reps")) {
            ok = bench_flag_int("matmul", argv[i], v, 1, 64, &reps);
            i++;
        }
        else if (!strcmp(argv[i], "--types") && v) types = argv[++i];
        else if (!strcmp(argv[i], "--decode")) n_toks = 1;
        else if (!strcmp(argv[i], "--levels")) levels = true;
        else if (!strcmp(argv[i], "--act") && v) act = argv[++i];
        else if (!strcmp(argv[i], "--break-even")) types = "";   /* no type: the break-even table only */
        else if (!strcmp(argv[i], "--model") && v) model = argv[++i];
        else if (!strcmp(argv[i], "--no-mmap")) no_mmap = true;
        else { fprintf(stderr, "bench_matmul: unknown option or missing value '%s'\n", argv[i]); return 1; }
        if (!ok) return 1;
    }
    /* every named type must be a weight type the product runs (no silent drop) */
    for (const char *p = types; p && *p;) {
        char name[32];
        p = bench_list_word(p, name, sizeof name);
        if (!*name) continue;
        const kvq_type t = kvq_type_from_name(name);
        const kvq_type_traits *tr = t < KVQ_TYPE_COUNT ? kvq_type_get(t) : NULL;
        if (!tr || !tr->dequantize || cols % tr->block_size) {
            fprintf(stderr, "bench_matmul: '%s' is not a weight type this product runs at %lld columns\n", name,
                    (long long)cols);
            return 1;
        }
    }
    if (rows < 1 || cols < 256 || cols % 256 || reps < 1 || reps > 64) {
        fprintf(stderr, "bench_matmul: need rows >= 1, cols a multiple of 256, 1 <= reps <= 64\n");
        return 1;
    }
    const bool act_f32 = !strcmp(act, "f32") || !strcmp(act, "both"), act_int8 = !strcmp(act, "int8") || !strcmp(act, "both");
    if (!act_f32 && !act_int8) { fprintf(stderr, "bench_matmul: --act must be f32, int8 or both, not '%s'\n", act); return 1; }
    if (model) {   /* a model's decode products, nothing else (--act int8: int8; f32 or both: f32) */
        kvq_pool *pools[2] = { kvq_pool_create(1), kvq_pool_create(2) };
        const int rc = pools[0] && pools[1] ? bench_model_products(model, no_mmap, !act_f32, reps, pools) : 1;
        kvq_pool_free(pools[0]);
        kvq_pool_free(pools[1]);
        return rc;
    }
    const int64_t toks[] = { 1, 64 };
    const int threads[] = { 1, 2 };
    float *X = malloc(sizeof(float) * (size_t)(cols * 64));
    float *Y = malloc(sizeof(float) * (size_t)(rows * 64));
    const size_t xq_bytes = kvq_matmul_act8_bytes(64, cols);
    void *xq = malloc(xq_bytes);
    kvq_pool *pools[2] = { kvq_pool_create(1), kvq_pool_create(2) };
    if (!X || !Y || !xq || !pools[0] || !pools[1]) {
        fprintf(stderr, "bench_matmul: out of memory\n");
        free(X); free(Y); free(xq); kvq_pool_free(pools[0]); kvq_pool_free(pools[1]);
        return 1;
    }
    if (!levels && !bench_evict_caches("matmul")) {
        free(X); free(Y); free(xq); kvq_pool_free(pools[0]); kvq_pool_free(pools[1]);
        return 1;
    }
    uint64_t s = 7;
    for (int64_t i = 0; i < cols * 64; i++) X[i] = rng_float(&s);
    printf("matmul %lldx%lld, simd %s, int8 dots %s, median of %d (GFLOP/s = 2*rows*cols*n_tok / time)\n",
           (long long)rows, (long long)cols, kvq_simd_level(), kvq_act8_level_name(kvq_act8_level_best()), reps);
    if (levels) printf("--levels: the same weights every repetition, read from the caches when they fit\n");
    else printf("the CPU caches are flushed before every repetition: the weights are read from memory\n");
    if (levels) printf("%-8s %-21s %10s %8s %8s %9s\n", "type", "level", "ms", "GB/s", "best ms", "best GB/s");
    else
    printf("%-8s %5s %6s %7s %10s %9s %8s %8s %9s\n", "type", "act", "n_tok", "threads", "ms", "GFLOP/s", "GB/s",
           "best ms", "best GB/s");
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
        if (!tr || !tr->dequantize || cols % tr->block_size || !type_selected(types, tr->name)) continue;
        uint8_t *W = make_weights((kvq_type)ty, rows, cols);
        if (!W) { fprintf(stderr, "bench_matmul: out of memory\n"); continue; }
        const double bytes = (double)kvq_row_bytes((kvq_type)ty, cols) * (double)rows;   /* weights read */
        if (levels) {
            if (act_f32) print_f32_levels((kvq_type)ty, W, rows, cols, X, Y, reps);
            if (act_int8 && kvq_act8_dot((kvq_type)ty)) print_act8_levels((kvq_type)ty, W, rows, cols, X, xq, Y, reps);
            free(W);
            continue;
        }
        for (size_t k = 0; k < n_toks; k++)
            for (size_t p = 0; p < 2; p++)
                for (int a = 0; a < 2; a++) {   /* f32 then int8 activations, side by side */
                    const bool int8 = a == 1;
                    if ((int8 && (!act_int8 || !kvq_act8_dot((kvq_type)ty))) || (!int8 && !act_f32)) continue;
                    double best;
                    double sec = time_matmul(pools[p], (kvq_type)ty, W, rows, cols, X, toks[k], Y, int8 ? xq : NULL,
                                             xq_bytes, reps, &best);
                    printf("%-8s %5s %6lld %7d %10.3f %9.2f %8.2f %8.3f %9.2f\n", tr->name, int8 ? "int8" : "f32",
                           (long long)toks[k], threads[p], 1e3 * sec,
                           2.0 * (double)rows * (double)cols * (double)toks[k] / sec * 1e-9, bytes / sec * 1e-9,
                           1e3 * best, bytes / best * 1e-9);
                }
        fflush(stdout);
        free(W);
    }
    free(X); free(Y); free(xq);
    if ((!types || !types[0]) && !levels) print_break_even(pools, reps < 9 ? 9 : reps);
    kvq_pool_free(pools[0]);
    kvq_pool_free(pools[1]);
    return 0;
}

#ifdef BENCH_MATMUL_STANDALONE
int main(int argc, char **argv) { return bench_matmul(argc, argv); }
#endif
