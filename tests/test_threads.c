/* test_threads.c - the worker pool: every task runs exactly once, thread
 * ids stay in range, pools are reusable, 1-thread pools run inline,
 * workers get the stack kvq's tasks need; spans (kvq_pool_run_spans)
 * cover every item once in whole chunks, and a share held up is helped
 * from its back. */
#include "test.h"
#include "kvq.h"
#include "kvq_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { MAX_TASKS = 1000 };

typedef struct count_ctx {
    atomic_int runs[MAX_TASKS];
    atomic_int bad_thread;
    int n_threads;
    pthread_t caller;
    atomic_int off_caller;    /* tasks that ran on another thread */
    int busy_iters;           /* work before the count (lets workers take tasks) */
} count_ctx;

static void count_task(void *p, int task, int thread) {
    count_ctx *c = p;
    volatile int sink = 0;
    for (int i = 0; i < c->busy_iters; i++) sink = sink + i;
    (void)sink;
    atomic_fetch_add(&c->runs[task], 1);
    if (thread < 0 || thread >= c->n_threads) atomic_fetch_add(&c->bad_thread, 1);
    if (!pthread_equal(pthread_self(), c->caller)) atomic_fetch_add(&c->off_caller, 1);
}

static void reset(count_ctx *c, int n_threads) {
    for (int i = 0; i < MAX_TASKS; i++) atomic_init(&c->runs[i], 0);
    atomic_init(&c->bad_thread, 0);
    atomic_init(&c->off_caller, 0);
    c->n_threads = n_threads;
    c->caller = pthread_self();
    c->busy_iters = 0;
}

/* Runs n_tasks through the pool and reports the first task not run once. */
static int first_wrong_task(kvq_pool *pool, count_ctx *c, int n_tasks) {
    reset(c, kvq_pool_threads(pool));
    kvq_pool_run(pool, count_task, c, n_tasks);
    for (int i = 0; i < MAX_TASKS; i++)
        if (atomic_load(&c->runs[i]) != (i < n_tasks ? 1 : 0)) return i;
    return -1;
}

TEST(pool_runs_every_task_once) {
    static count_ctx c;
    const int sizes[] = { 0, 1, 2, 3, 7, 64, 999 };
    for (int n = 1; n <= 4; n++) {
        kvq_pool *pool = kvq_pool_create(n);
        CHECK(pool != NULL, "kvq_pool_create(%d) failed", n);
        CHECK(kvq_pool_threads(pool) == n, "threads %d != %d", kvq_pool_threads(pool), n);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int bad = first_wrong_task(pool, &c, sizes[s]);
            if (bad >= 0) kvq_pool_free(pool);
            CHECK(bad < 0, "pool %d, %d tasks: task %d ran %d times", n, sizes[s], bad,
                  atomic_load(&c.runs[bad]));
            if (atomic_load(&c.bad_thread)) kvq_pool_free(pool);
            CHECK(atomic_load(&c.bad_thread) == 0, "thread id out of range");
        }
        kvq_pool_free(pool);
    }
}

/* Many short jobs back to back: the hand-off between jobs must not lose
 * or repeat work (a generation/wake-up race would show here). */
TEST(pool_reuse_many_jobs) {
    static count_ctx c;
    kvq_pool *pool = kvq_pool_create(3);
    CHECK(pool != NULL, "kvq_pool_create(3) failed");
    const int jobs = test_sanitized() ? 300 : 3000;
    int bad_job = -1, bad_task = -1;
    for (int j = 0; j < jobs && bad_job < 0; j++) {
        int bad = first_wrong_task(pool, &c, 1 + j % 17);
        if (bad >= 0) { bad_job = j; bad_task = bad; }
    }
    kvq_pool_free(pool);
    CHECK(bad_job < 0, "job %d: task %d not run exactly once", bad_job, bad_task);
}

/* The caller returns once every task ran, without waiting for workers
 * that never woke up; such a late worker must not run a task of a job that
 * already returned.  Jobs alternate between two contexts: after each job
 * the other context (whose job has returned) must be untouched. */
static long total_runs(count_ctx *c) {
    long sum = 0;
    for (int i = 0; i < MAX_TASKS; i++) sum += atomic_load(&c->runs[i]);
    return sum;
}

TEST(pool_late_workers_never_run_old_jobs) {
    static count_ctx c[2];
    kvq_pool *pool = kvq_pool_create(4);
    CHECK(pool != NULL, "kvq_pool_create(4) failed");
    reset(&c[0], 4);
    reset(&c[1], 4);
    c[0].busy_iters = c[1].busy_iters = 2000;   /* a few microseconds per task */
    const int jobs = test_sanitized() ? 2000 : 20000;
    long expected[2] = { 0, 0 };   /* task runs of each context so far */
    int bad_job = -1;
    for (int j = 0; j < jobs && bad_job < 0; j++) {
        const int n = 2 + j % 5;
        kvq_pool_run(pool, count_task, &c[j % 2], n);
        expected[j % 2] += n;
        if (total_runs(&c[0]) != expected[0] || total_runs(&c[1]) != expected[1]) bad_job = j;
    }
    kvq_pool_free(pool);
    CHECK(bad_job < 0, "job %d: task runs %ld/%ld, expected %ld/%ld", bad_job, total_runs(&c[0]),
          total_runs(&c[1]), expected[0], expected[1]);
}

TEST(pool_single_thread_runs_inline) {
    static count_ctx c;
    CHECK(kvq_pool_threads(NULL) == 1, "NULL pool has %d threads", kvq_pool_threads(NULL));
    CHECK(first_wrong_task(NULL, &c, 5) < 0, "NULL pool did not run the tasks");
    CHECK(atomic_load(&c.off_caller) == 0, "NULL pool ran tasks off the caller thread");
    kvq_pool *pool = kvq_pool_create(1);
    CHECK(pool != NULL, "kvq_pool_create(1) failed");
    int bad = first_wrong_task(pool, &c, 5);
    int off = atomic_load(&c.off_caller);
    kvq_pool_free(pool);
    CHECK(bad < 0, "1-thread pool: task %d wrong", bad);
    CHECK(off == 0, "1-thread pool ran %d tasks off the caller thread", off);
}

TEST(pool_rejects_bad_sizes) {
    CHECK(kvq_pool_create(0) == NULL, "pool of 0 threads created");
    CHECK(kvq_pool_create(-3) == NULL, "pool of -3 threads created");
    kvq_pool_free(NULL); /* must be a no-op */
}

#if defined(__GLIBC__)
typedef struct stack_ctx {
    atomic_size_t least;      /* the smallest worker stack seen (SIZE_MAX: none) */
    pthread_t caller;
} stack_ctx;

static void stack_task(void *p, int task, int thread) {
    (void)task;
    (void)thread;
    stack_ctx *c = p;
    volatile int sink = 0;
    for (int i = 0; i < 20000; i++) sink = sink + i;   /* time for the worker to take tasks */
    (void)sink;
    if (pthread_equal(pthread_self(), c->caller)) return;
    pthread_attr_t attr;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    pthread_attr_getstacksize(&attr, &size);
    pthread_attr_destroy(&attr);
    size_t seen = atomic_load(&c->least);
    while (size < seen && !atomic_compare_exchange_weak(&c->least, &seen, size)) {}
}
#endif

/* A worker's stack is at least 2 MiB even where the process default is
 * small (musl's is 128 KiB; here glibc's default is set to that): a
 * trellis cache write's task keeps ~140 KiB on it. */
TEST(pool_workers_get_room_on_their_stacks) {
#if defined(__GLIBC__)
    pthread_attr_t old, small;
    if (pthread_getattr_default_np(&old) != 0 || pthread_attr_init(&small) != 0) SKIP("no default thread attributes");
    if (pthread_attr_setstacksize(&small, 128 << 10) != 0 || pthread_setattr_default_np(&small) != 0) {
        pthread_attr_destroy(&small);
        pthread_attr_destroy(&old);
        SKIP("cannot set the default thread stack");
    }
    kvq_pool *pool = kvq_pool_create(2);
    pthread_setattr_default_np(&old);   /* before any CHECK can return */
    pthread_attr_destroy(&small);
    pthread_attr_destroy(&old);
    CHECK(pool != NULL, "pool of 2 threads not created");
    if (!pool) return;
    stack_ctx c;
    atomic_init(&c.least, SIZE_MAX);
    c.caller = pthread_self();
    for (int round = 0; round < 50 && atomic_load(&c.least) == SIZE_MAX; round++) kvq_pool_run(pool, stack_task, &c, 64);
    kvq_pool_free(pool);
    const size_t least = atomic_load(&c.least);
    CHECK(least != SIZE_MAX, "no task ran on the worker in 50 jobs");
    CHECK(least == SIZE_MAX || least >= (size_t)2 << 20, "a worker's stack is %zu KiB, under 2 MiB", least >> 10);
#else
    SKIP("not glibc: no way here to make the default thread stack small");
#endif
}

/* ------------------------------------------------------------- spans */

enum { MAX_ITEMS = 5000 };

typedef struct span_ctx {
    atomic_int runs[MAX_ITEMS];
    atomic_int bad_call;      /* a call not on chunk bounds, too long, or off a thread id */
    int n_threads;
    int64_t n_items, chunk;
    /* span_wait_task: the call holding item 0 waits for item `wait_for` */
    int wait_for;
    atomic_int helped;        /* item wait_for ran while item 0's call waited */
} span_ctx;

static void span_count(void *p, int64_t begin, int64_t end, int thread) {
    span_ctx *c = p;
    const int64_t chunk = c->chunk < 1 ? 1 : c->chunk;
    if (begin < 0 || end > c->n_items || begin >= end || begin % chunk || (end - begin > chunk) ||
        (end - begin < chunk && end != c->n_items) || thread < 0 || thread >= c->n_threads)
        atomic_fetch_add(&c->bad_call, 1);
    for (int64_t i = begin; i < end && i < MAX_ITEMS; i++) atomic_fetch_add(&c->runs[i], 1);
}

static void span_reset(span_ctx *c, int n_threads, int64_t n_items, int64_t chunk) {
    for (int i = 0; i < MAX_ITEMS; i++) atomic_init(&c->runs[i], 0);
    atomic_init(&c->bad_call, 0);
    atomic_init(&c->helped, 0);
    c->n_threads = n_threads;
    c->n_items = n_items;
    c->chunk = chunk;
    c->wait_for = -1;
}

/* Every item once, in calls of one whole chunk each (the last may be
 * short), for pools of 1-4 threads and NULL, and sizes from empty to
 * one chunk to many, including a chunk of 0 (taken as 1). */
TEST(pool_spans_cover_every_item_once) {
    static span_ctx c;
    const int64_t cases[][2] = { { 0, 5 }, { 1, 1 }, { 7, 3 }, { 100, 1 }, { 1000, 7 }, { 1000, 1000 },
                                 { 1000, 5000 }, { 999, 0 }, { 4999, 64 } };
    for (int n = 0; n <= 4; n++) {
        kvq_pool *pool = n ? kvq_pool_create(n) : NULL;
        CHECK(!n || pool, "kvq_pool_create(%d) failed", n);
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            span_reset(&c, kvq_pool_threads(pool), cases[k][0], cases[k][1]);
            kvq_pool_run_spans(pool, span_count, &c, cases[k][0], cases[k][1]);
            int bad = -1;
            for (int i = 0; i < MAX_ITEMS && bad < 0; i++)
                if (atomic_load(&c.runs[i]) != (i < cases[k][0] ? 1 : 0)) bad = i;
            const int bad_calls = atomic_load(&c.bad_call);
            if (bad >= 0 || bad_calls) kvq_pool_free(pool);
            CHECK(bad < 0, "%d threads, %lld items in chunks of %lld: item %d ran %d times", n,
                  (long long)cases[k][0], (long long)cases[k][1], bad, atomic_load(&c.runs[bad]));
            CHECK(bad_calls == 0, "%d threads, %lld items in chunks of %lld: %d calls off the chunks or threads",
                  n, (long long)cases[k][0], (long long)cases[k][1], bad_calls);
        }
        kvq_pool_free(pool);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Item 0's call (share 0's first chunk) waits, up to 10 s, until item
 * wait_for (share 0's last chunk) has run: only a thread helping share 0
 * from its back can run that while share 0's owner waits. */
static void span_wait_task(void *p, int64_t begin, int64_t end, int thread) {
    span_ctx *c = p;
    if (begin == 0) {
        const double t0 = now_s();
        while (!atomic_load(&c->runs[c->wait_for]) && now_s() - t0 < 10.0) sched_yield();
        if (atomic_load(&c->runs[c->wait_for])) atomic_store(&c->helped, 1);
    }
    span_count(p, begin, end, thread);
}

/* Two threads, 20 one-item chunks: shares 0-9 and 10-19.  The owner of
 * share 0 is held in its first chunk; the other thread runs share 1 and
 * then takes share 0's chunks from the back, 9 first. */
TEST(pool_spans_help_a_held_share_from_its_back) {
    static span_ctx c;
    kvq_pool *pool = kvq_pool_create(2);
    CHECK(pool != NULL, "kvq_pool_create(2) failed");
    span_reset(&c, 2, 20, 1);
    c.wait_for = 9;
    kvq_pool_run_spans(pool, span_wait_task, &c, 20, 1);
    kvq_pool_free(pool);
    int bad = -1;
    for (int i = 0; i < 20 && bad < 0; i++)
        if (atomic_load(&c.runs[i]) != 1) bad = i;
    CHECK(atomic_load(&c.helped), "share 0's last chunk did not run while its owner was held (no help from the back)");
    CHECK(bad < 0, "item %d ran %d times", bad, atomic_load(&c.runs[bad]));
    CHECK(atomic_load(&c.bad_call) == 0, "a call off the chunks or threads");
}
