/* bench_bound.c - the memory-bandwidth bound of a generation step
 * (bench_bound.h). */
#include "bench_bound.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BW_PASSES = 5, BW_TASKS = 64 };
#define BW_MIN_BYTES ((size_t)256 << 20)
#define BW_MAX_BYTES ((size_t)4 << 30)

size_t bench_bandwidth_bytes(size_t llc_bytes) {
    size_t b = llc_bytes > BW_MAX_BYTES / 4 ? BW_MAX_BYTES : 4 * llc_bytes;
    b = b < BW_MIN_BYTES ? BW_MIN_BYTES : b;
    return b / (BW_TASKS * 64) * (BW_TASKS * 64);   /* whole 64-byte lines per task */
}

/* One "index" directory's value of cpu `cpu` (Linux sysfs), or false. */
static bool cache_attr(int cpu, int index, const char *name, char *buf, size_t cap) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/%s", cpu, index, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    const bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (ok) buf[strcspn(buf, "\n")] = 0;
    return ok;
}

size_t bench_llc_bytes(void) {
    /* every level-3 cache once: the CPUs listed as sharing it are skipped
     * (a multi-CCD part has one L3 per CCD, all counted) */
    enum { MAX_CPUS = 1024, MAX_L3 = 64 };
    char seen[MAX_L3][64];
    int n_seen = 0;
    size_t total = 0;
    for (int cpu = 0; cpu < MAX_CPUS; cpu++) {
        char buf[64];
        if (!cache_attr(cpu, 0, "level", buf, sizeof buf)) break;   /* no such cpu (or no sysfs) */
        for (int index = 0; index < 8; index++) {
            char level[8], shared[64], size[32];
            if (!cache_attr(cpu, index, "level", level, sizeof level)) break;
            if (strcmp(level, "3") || !cache_attr(cpu, index, "shared_cpu_list", shared, sizeof shared) ||
                !cache_attr(cpu, index, "size", size, sizeof size))
                continue;
            bool known = false;
            for (int i = 0; i < n_seen && !known; i++) known = !strcmp(seen[i], shared);
            if (known || n_seen == MAX_L3) continue;
            snprintf(seen[n_seen++], sizeof seen[0], "%s", shared);
            char *end;
            const unsigned long long v = strtoull(size, &end, 10);
            total += (size_t)v << (*end == 'K' ? 10 : *end == 'M' ? 20 : 0);
        }
    }
    return total;
}

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
    const size_t bytes = bench_bandwidth_bytes(bench_llc_bytes());
    bw_job *j = calloc(1, sizeof *j);
    v2u *buf = j ? malloc(bytes) : NULL;
    double best = 0.0;
    if (buf) {
        j->buf = buf;
        j->n_vec = bytes / sizeof(v2u);
        for (size_t i = 0; i < j->n_vec; i++) buf[i] = (v2u){ i, ~i };   /* touch every page */
        /* BW_TASKS equal parts, whatever the thread count: the pool hands
         * them out, so a thread that gets its core late does less of the
         * work instead of holding up the pass. */
        for (int p = 0; p < BW_PASSES; p++) {
            const double t0 = now_s();
            kvq_pool_run(pool, bw_task, j, BW_TASKS);
            const double gbs = (double)bytes / (now_s() - t0) * 1e-9;
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

bool bench_bandwidth_moved(double before_gbs, double after_gbs) {
    if (!(before_gbs > 0) || !(after_gbs > 0)) return false;
    return fabs(before_gbs - after_gbs) > 0.25 * fmax(before_gbs, after_gbs);
}

double bench_bound_bandwidth(double before_gbs, double after_gbs) {
    const double b = before_gbs > 0 ? before_gbs : 0.0, a = after_gbs > 0 ? after_gbs : 0.0;
    return a > b ? a : b;
}
