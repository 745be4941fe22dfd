/*
 * threads.c - the fixed worker pool behind kvq_pool_run (kvq.h, "threads").
 *
 * A pool of n threads starts n-1 workers once; the calling thread is the
 * n-th and works too.  Tasks are handed out from one 64-bit atomic "claim
 * word" holding (generation, task count, next task index): a thread claims
 * a task with one fetch-add and learns from the value it got back which
 * job the task belongs to and whether it is a real task.
 *
 * Why the count and generation live in the claim word: the caller returns
 * as soon as every task has *run*, not when every worker has *reported
 * back*.  A worker the scheduler has not woken yet (the usual case on a
 * loaded machine, and a few microseconds even on an idle one) is then
 * never waited for; it wakes late, claims from whatever job is current,
 * and either gets a real task of that job or finds it exhausted.  A claim
 * is all a worker ever reads before knowing it holds a live task, so a
 * late worker cannot run a finished job's task against a stale context:
 * the job's fn/ctx are only read after a successful claim, and a job with
 * a claimed task cannot finish, so they cannot change under it.
 *
 * Waiting: a thread spins briefly (a decoding forward pass issues a job
 * every few microseconds), then sleeps on a condition variable, so an idle
 * pool burns no CPU.  The other side only pays for a wake-up (a mutex and
 * a futex call) when someone is actually asleep: "sleepers" counters are
 * checked after publishing, and a would-be sleeper re-checks after
 * registering (both sequentially consistent, so one of them sees the
 * other).
 *
 * One job at a time: kvq_pool_run must not be called concurrently on the
 * same pool, nor from inside one of its tasks.
 */
#include "kvq_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
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

/* The claim word: bits 0-23 next task index, 24-47 task count of the job,
 * 48-63 generation (wraps; only "changed" matters).  A job has at most
 * JOB_MAX_TASKS tasks (larger runs are split), so the index, bumped at most
 * once more per thread after the tasks run out, never carries into the
 * count field. */
enum { FIELD_BITS = 24, GEN_SHIFT = 2 * FIELD_BITS, JOB_MAX_TASKS = 1 << 22, MAX_THREADS = 1024 };
#define FIELD_MASK ((UINT64_C(1) << FIELD_BITS) - 1)

static uint64_t claim_word(unsigned gen, int n_tasks) {
    return ((uint64_t)(gen & 0xffffu) << GEN_SHIFT) | ((uint64_t)n_tasks << FIELD_BITS);
}
static unsigned word_gen(uint64_t w) { return (unsigned)(w >> GEN_SHIFT); }
static int word_tasks(uint64_t w) { return (int)((w >> FIELD_BITS) & FIELD_MASK); }
static int word_next(uint64_t w) { return (int)(w & FIELD_MASK); }

struct kvq_pool {
    int n_threads;
    pthread_t *workers;          /* n_threads - 1 of them                   */
    int n_started;

    pthread_mutex_t mu;
    pthread_cond_t job_cv;       /* workers sleep here between jobs         */
    pthread_cond_t done_cv;      /* the caller sleeps here for stragglers   */

    /* the current job: written by the caller before the claim word */
    kvq_task_fn fn;
    void *ctx;
    int first_task;              /* task index of claim 0 (split runs)      */

    _Atomic uint64_t claim;      /* see claim_word                          */
    atomic_int done;             /* tasks of the current job that finished  */
    atomic_int sleeping_workers; /* workers (about to be) in job_cv         */
    atomic_int caller_sleeping;  /* the caller is (about to be) in done_cv  */
    atomic_bool stop;
    unsigned generation;         /* caller's copy of the current generation */
};

typedef struct worker_arg { kvq_pool *pool; int thread; } worker_arg;

static void wake_caller_if_asleep(kvq_pool *p) {
    if (!atomic_load(&p->caller_sleeping)) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_signal(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

/* Claim and run tasks until a claim comes back empty; returns the
 * generation of that empty claim (the job this thread saw exhausted). */
static unsigned drain_tasks(kvq_pool *p, int thread) {
    for (;;) {
        const uint64_t w = atomic_fetch_add(&p->claim, 1);
        const int n = word_tasks(w), task = word_next(w);
        if (task >= n) return word_gen(w);
        p->fn(p->ctx, p->first_task + task, thread);
        if (atomic_fetch_add(&p->done, 1) + 1 == n) wake_caller_if_asleep(p);
    }
}

/* Block until the claim word's generation differs from `seen`. */
static void wait_for_job(kvq_pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (word_gen(atomic_load_explicit(&p->claim, memory_order_acquire)) != seen) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping_workers, 1);
    while (word_gen(atomic_load(&p->claim)) == seen) pthread_cond_wait(&p->job_cv, &p->mu);
    atomic_fetch_sub(&p->sleeping_workers, 1);
    pthread_mutex_unlock(&p->mu);
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    kvq_pool *p = wa.pool;
    unsigned seen = 0;    /* generation 0 is the empty job the pool starts with */
    for (;;) {
        wait_for_job(p, seen);
        seen = drain_tasks(p, wa.thread);
        /* checked after the drain: its claim may already have seen the
         * shutdown generation, which is published after `stop` is set */
        if (atomic_load(&p->stop)) return NULL;
    }
}

/* Block until all n tasks of the current job have finished. */
static void wait_for_done(kvq_pool *p, int n) {
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n) return;
        CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeping, 1);
    while (atomic_load(&p->done) != n) pthread_cond_wait(&p->done_cv, &p->mu);
    atomic_store(&p->caller_sleeping, 0);
    pthread_mutex_unlock(&p->mu);
}

/* Start a new generation of n tasks (0 at shutdown) and wake sleepers. */
static void publish(kvq_pool *p, int n_tasks) {
    p->generation++;
    atomic_store(&p->done, 0);
    atomic_store(&p->claim, claim_word(p->generation, n_tasks));
    if (atomic_load(&p->sleeping_workers) == 0) return;
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->job_cv);
    pthread_mutex_unlock(&p->mu);
}

static void stop_workers(kvq_pool *p) {
    atomic_store(&p->stop, true);
    publish(p, 0);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i], NULL);
    p->n_started = 0;
}

/* The least stack a worker gets.  Tasks keep their work on the stack: a
 * trellis cache write ~140 KiB (gcc -fstack-usage, AVX-512: the batch's
 * rotated rows 33 KiB, their targets and states 13 KiB, the pairs search's
 * two pairs of searches and layouts 87 KiB), more than musl's default 128
 * KiB; glibc's default (the stack rlimit, usually 8 MiB) is kept where
 * larger. */
enum { WORKER_STACK_MIN = 2 << 20 };

/* Thread attributes with at least WORKER_STACK_MIN of stack; false if
 * they cannot be made. */
static bool worker_attr(pthread_attr_t *attr) {
    if (pthread_attr_init(attr) != 0) return false;
    size_t size = 0;
    if (pthread_attr_getstacksize(attr, &size) == 0 && size >= WORKER_STACK_MIN) return true;
    if (pthread_attr_setstacksize(attr, WORKER_STACK_MIN) == 0) return true;
    pthread_attr_destroy(attr);
    return false;
}

kvq_pool *kvq_pool_create(int n_threads) {
    pthread_attr_t attr;   /* the workers' (worker_attr) */
    if (n_threads < 1 || n_threads > MAX_THREADS) return NULL;
    kvq_pool *p = kvq_calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    atomic_init(&p->claim, claim_word(0, 0));
    atomic_init(&p->done, 0);
    atomic_init(&p->sleeping_workers, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->stop, false);
    if (pthread_mutex_init(&p->mu, NULL) != 0) { free(p); return NULL; }
    if (pthread_cond_init(&p->job_cv, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&p->done_cv, NULL) != 0) goto fail_job;
    if (n_threads > 1) {
        p->workers = kvq_malloc_n((size_t)(n_threads - 1), sizeof *p->workers);
        if (!p->workers) goto fail_done;
        if (!worker_attr(&attr)) goto fail_workers;
        for (int i = 0; i < n_threads - 1; i++) {
            worker_arg *wa = kvq_malloc(sizeof *wa);
            if (!wa) goto fail_threads;
            wa->pool = p;
            wa->thread = i + 1;
            if (pthread_create(&p->workers[i], &attr, worker_main, wa) != 0) {
                free(wa);
                goto fail_threads;
            }
            p->n_started++;
        }
        pthread_attr_destroy(&attr);
    }
    return p;

fail_threads:
    pthread_attr_destroy(&attr);
    stop_workers(p);
fail_workers:
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

/* One job of n_tasks <= JOB_MAX_TASKS tasks, numbered from first. */
static void run_job(kvq_pool *p, kvq_task_fn fn, void *ctx, int first, int n_tasks) {
    p->fn = fn;
    p->ctx = ctx;
    p->first_task = first;
    publish(p, n_tasks);
    drain_tasks(p, 0);
    wait_for_done(p, n_tasks);
}

void kvq_pool_run(kvq_pool *p, kvq_task_fn fn, void *ctx, int n_tasks) {
    if (!fn || n_tasks <= 0) return;
    /* one thread, or one task: no hand-off is cheaper than doing it here */
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int task = 0; task < n_tasks; task++) fn(ctx, task, 0);
        return;
    }
    for (int first = 0; first < n_tasks; first += JOB_MAX_TASKS)
        run_job(p, fn, ctx, first, KVQ_MIN(JOB_MAX_TASKS, n_tasks - first));
}

/* ------------------------------------------------------------- spans */

/* A share of a span job: chunks front .. back - 1 not yet taken, packed
 * in one word (front low, back high) so that its owner (from the front)
 * and a helper (from the back) take chunks by compare-and-swap and never
 * the same one.  One cache line each: the owner's takes do not contend
 * with the other shares'. */
typedef struct span_share {
    _Alignas(64) _Atomic uint64_t left;
} span_share;

enum { MAX_SHARES = 64 };

typedef struct span_job {
    kvq_span_fn fn;
    void *ctx;
    int64_t n_items, chunk;
    int n_shares;
    span_share share[MAX_SHARES];
} span_job;

static uint64_t span_pack(uint32_t front, uint32_t back) { return (uint64_t)back << 32 | front; }

/* The next chunk of share s from its front (from_back false) or back;
 * -1 when the share is empty. */
static int64_t take_chunk(span_share *s, bool from_back) {
    uint64_t w = atomic_load_explicit(&s->left, memory_order_relaxed);
    for (;;) {
        const uint32_t front = (uint32_t)w, back = (uint32_t)(w >> 32);
        if (front >= back) return -1;
        const uint64_t next = from_back ? span_pack(front, back - 1) : span_pack(front + 1, back);
        if (atomic_compare_exchange_weak_explicit(&s->left, &w, next, memory_order_relaxed, memory_order_relaxed))
            return from_back ? (int64_t)back - 1 : (int64_t)front;
    }
}

static void run_chunk(const span_job *j, int64_t c, int thread) {
    const int64_t begin = c * j->chunk;
    j->fn(j->ctx, begin, KVQ_MIN(j->n_items, begin + j->chunk), thread);
}

/* Task k < n_shares: share k from its front, then help.  The n_threads
 * tasks past those only help: a thread that starts after the others
 * claimed the shares (a worker woken late) still takes chunks from their
 * backs, and finds nothing once every chunk is taken. */
static void span_task(void *ctx, int task, int thread) {
    span_job *j = ctx;
    if (task < j->n_shares)
        for (int64_t c; (c = take_chunk(&j->share[task], false)) >= 0;) run_chunk(j, c, thread);
    for (;;) {
        int most = -1;
        uint32_t most_left = 0;
        for (int s = 0; s < j->n_shares; s++) {
            const uint64_t w = atomic_load_explicit(&j->share[s].left, memory_order_relaxed);
            const uint32_t front = (uint32_t)w, back = (uint32_t)(w >> 32);
            if (back > front && back - front > most_left) { most = s; most_left = back - front; }
        }
        if (most < 0) return;
        const int64_t c = take_chunk(&j->share[most], true);
        if (c >= 0) run_chunk(j, c, thread);
    }
}

void kvq_pool_run_spans(kvq_pool *p, kvq_span_fn fn, void *ctx, int64_t n_items, int64_t chunk) {
    if (!fn || n_items <= 0) return;
    chunk = KVQ_MAX(chunk, (int64_t)1);
    const int64_t n_chunks = (n_items + chunk - 1) / chunk;
    if (!p || p->n_threads == 1 || n_chunks == 1 || n_chunks > UINT32_MAX) {
        for (int64_t b = 0; b < n_items; b += chunk) fn(ctx, b, KVQ_MIN(n_items, b + chunk), 0);
        return;
    }
    span_job j = { .fn = fn, .ctx = ctx, .n_items = n_items, .chunk = chunk };
    j.n_shares = (int)KVQ_MIN(KVQ_MIN((int64_t)p->n_threads, (int64_t)MAX_SHARES), n_chunks);
    for (int s = 0; s < j.n_shares; s++)
        atomic_init(&j.share[s].left, span_pack((uint32_t)(n_chunks * s / j.n_shares),
                                                (uint32_t)(n_chunks * (s + 1) / j.n_shares)));
    kvq_pool_run(p, span_task, &j, j.n_shares + p->n_threads);
}
