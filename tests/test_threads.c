/* test_threads.c - the worker pool: every task runs exactly once, thread
 * ids stay in range, pools are reusable, 1-thread pools run inline,
 * workers get the stack kvq's tasks need. */
#include "test.h"
#include "kvq.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

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
