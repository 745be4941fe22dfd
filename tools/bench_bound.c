/* bench_bound.c - the memory-bandwidth bound of a generation step
 * (bench_bound.h). */
#include "bench_bound.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* 256 MiB: eight times the largest last-level cache of the machines this
 * runs on (32 MiB), so every pass streams from memory. */
enum { BW_BYTES = 256 << 20, BW_PASSES = 5, BW_TASKS = 64 };

/* 16-byte vectors (plain x86-64, no dispatch): two loads a cycle are
 * several times what memory delivers to one core. */
typedef uint64_t v2u __attribute__((vector_size(16)));

typedef struct bw_job {
    const v2u *buf;
    size_t n_vec;            /* vectors in the buffer */
    v2u sum[BW_TASKS];       /* per task, so that nothing is optimised away */
} bw_job;

/* Task = one of BW_TASKS equal contiguous parts of the buffer. */
static void bw_task(void *ctx, int task, int thread) {
    (void)thread;
    bw_job *j = ctx;
    const size_t per_task = j->n_vec / BW_TASKS, lo = (size_t)task * per_task, hi = lo + per_task;
    v2u a = { 0, 0 }, b = { 0, 0 }, c = { 0, 0 }, d = { 0, 0 };
    for (size_t i = lo; i < hi; i += 4) {
        a += j->buf[i];
        b += j->buf[i + 1];
        c += j->buf[i + 2];
        d += j->buf[i + 3];
    }
    j->sum[task] = a + b + c + d;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_read_bandwidth(int n_threads) {
    kvq_pool *pool = n_threads > 1 ? kvq_pool_create(n_threads) : NULL;
    if (n_threads > 1 && !pool) return 0.0;   /* not the threads asked for: no figure rather than 1 thread's */
    bw_job *j = calloc(1, sizeof *j);
    v2u *buf = j ? malloc(BW_BYTES) : NULL;
    double best = 0.0;
    if (buf) {
        j->buf = buf;
        j->n_vec = BW_BYTES / sizeof(v2u);
        for (size_t i = 0; i < j->n_vec; i++) buf[i] = (v2u){ i, ~i };   /* touch every page */
        /* BW_TASKS equal parts, whatever the thread count: the pool hands
         * them out, so a thread that gets its core late does less of the
         * work instead of holding up the pass. */
        for (int p = 0; p < BW_PASSES; p++) {
            const double t0 = now_s();
            kvq_pool_run(pool, bw_task, j, BW_TASKS);
            const double gbs = (double)BW_BYTES / (now_s() - t0) * 1e-9;
            best = gbs > best ? gbs : best;
        }
        volatile uint64_t sink = 0;
        for (int t = 0; t < BW_TASKS; t++) sink += j->sum[t][0] ^ j->sum[t][1];
        (void)sink;
    }
    free(buf);
    free(j);
    kvq_pool_free(pool);
    return best;
}

double bench_decode_weight_bytes(const kvq_model *m) {
    kvq_model_weights w;
    kvq_model_get_weights(m, &w);
    return w.decode_bytes;
}

double bench_decode_cache_bytes(const kvq_cache *c, int first, int n_gen) {
    double sum = 0.0;
    for (int i = 0; i < n_gen; i++) sum += kvq_cache_query_bytes_all(c, first + i);
    return n_gen > 0 ? sum / n_gen : 0.0;
}

double bench_bound_tps(double gbs, double bytes) { return gbs > 0 && bytes > 0 ? gbs * 1e9 / bytes : 0.0; }
