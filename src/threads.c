/*
 * threads.c - the fixed worker pool behind kvq_pool_run (kvq.h, "threads").
 *
 * A pool of n threads starts n-1 workers once; the calling thread is the
 * n-th and works too.  A job is published by bumping a generation counter;
 * every thread then takes task indices from one atomic counter until the
 * tasks run out (dynamic hand-out balances uneven tasks), and the caller
 * returns once every worker has reported back.
 *
 * Waiting: a worker spins briefly on the generation counter (a job usually
 * follows the previous one within microseconds during a forward pass), then
 * sleeps on a condition variable, so an idle pool burns no CPU.  The caller
 * waits for stragglers the same way.
 *
 * One job at a time: kvq_pool_run must not be called concurrently on the
 * same pool, nor from inside one of its tasks.
 */
#include "kvq_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Polls before a thread sleeps: `pause` takes 10-140 cycles depending on
 * the CPU, so this is roughly 5-50 microseconds, enough to catch the next
 * matmul of a forward pass without burning a core when idle. */
enum { SPIN_ITERS = 1000 };

struct kvq_pool {
    int n_threads;
    pthread_t *workers;          /* n_threads - 1 of them                  */
    int n_started;

    pthread_mutex_t mu;
    pthread_cond_t job_cv;       /* workers sleep here between jobs        */
    pthread_cond_t done_cv;      /* the caller sleeps here for stragglers  */

    /* the current job: written by the caller before the generation bump */
    kvq_task_fn fn;
    void *ctx;
    int n_tasks;

    atomic_uint generation;      /* bumped once per job (and at shutdown)  */
    atomic_int next_task;        /* next task index to hand out            */
    atomic_int pending;          /* workers that have not finished the job */
    atomic_bool stop;
};

typedef struct worker_arg { kvq_pool *pool; int thread; } worker_arg;

/* Take tasks until none are left. */
static void drain_tasks(kvq_pool *p, int thread) {
    for (;;) {
        int task = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (task >= p->n_tasks) return;
        p->fn(p->ctx, task, thread);
    }
}

/* Block until the generation differs from `seen`; returns the new one. */
static unsigned wait_for_job(kvq_pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        unsigned g = atomic_load_explicit(&p->generation, memory_order_acquire);
        if (g != seen) return g;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    unsigned g;
    while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->job_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    kvq_pool *p = wa.pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        drain_tasks(p, wa.thread);
        /* the last worker to finish wakes the caller (under the mutex, so
         * the wake-up cannot slip between its check and its wait) */
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void wait_for_workers(kvq_pool *p) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/* Wake every worker for a new generation (a job, or shutdown). */
static void publish(kvq_pool *p) {
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->job_cv);
    pthread_mutex_unlock(&p->mu);
}

static void stop_workers(kvq_pool *p) {
    atomic_store_explicit(&p->stop, true, memory_order_release);
    publish(p);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i], NULL);
    p->n_started = 0;
}

kvq_pool *kvq_pool_create(int n_threads) {
    if (n_threads < 1 || n_threads > 1024) return NULL;
    kvq_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->generation, 0);
    atomic_init(&p->next_task, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    if (pthread_mutex_init(&p->mu, NULL) != 0) { free(p); return NULL; }
    if (pthread_cond_init(&p->job_cv, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&p->done_cv, NULL) != 0) goto fail_job;
    if (n_threads > 1) {
        p->workers = malloc((size_t)(n_threads - 1) * sizeof *p->workers);
        if (!p->workers) goto fail_done;
        for (int i = 0; i < n_threads - 1; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) goto fail_threads;
            wa->pool = p;
            wa->thread = i + 1;
            if (pthread_create(&p->workers[i], NULL, worker_main, wa) != 0) {
                free(wa);
                goto fail_threads;
            }
            p->n_started++;
        }
    }
    return p;

fail_threads:
    stop_workers(p);
    free(p->workers);
fail_done:
    pthread_cond_destroy(&p->done_cv);
fail_job:
    pthread_cond_destroy(&p->job_cv);
fail_mu:
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
}

void kvq_pool_free(kvq_pool *p) {
    if (!p) return;
    stop_workers(p);
    free(p->workers);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->job_cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int kvq_pool_threads(const kvq_pool *p) { return p ? p->n_threads : 1; }

void kvq_pool_run(kvq_pool *p, kvq_task_fn fn, void *ctx, int n_tasks) {
    if (!fn || n_tasks <= 0) return;
    /* one thread, or one task: no hand-off is cheaper than doing it here */
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int task = 0; task < n_tasks; task++) fn(ctx, task, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    publish(p);
    drain_tasks(p, 0);
    wait_for_workers(p);
}
