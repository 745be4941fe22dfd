/* oom.h - the out-of-memory loop of tests/test_oom*.c (SQLite's way of
 * testing allocation failures): a job runs with allocation n failing
 * (src/base/alloc.h), n = 1, 2, 3, ..., until a run makes fewer than n
 * allocations and so runs with no failure at all.  Each failing run must
 * end in KVQ_ERR_NOMEM with a message (not success, not another error,
 * not a crash), having freed what it took (under make sanitize
 * LeakSanitizer is asked after every job); the run with no failure must
 * succeed, and each test then compares its result with an ordinary run's.
 * Each loop runs twice: failing only allocation n (the code after a
 * failure goes on with memory again, so a failure that is ignored is
 * seen) and failing every allocation from n on (so cleanup code that
 * allocates is seen).  One thread allocates, so "the nth allocation" is
 * the same call in every run. */
#ifndef KVQ_TEST_OOM_H
#define KVQ_TEST_OOM_H

#include "kvq_internal.h"   /* kvq.h and the allocation hook (alloc.h) */
#include "model_writer.h"
#include "test.h"

typedef kvq_status (*oom_job)(void *ud, kvq_error *err);

typedef struct oom_count {
    long points;   /* allocations that were made to fail, one run each */
} oom_count;

/* Both loops over job; false with msg when a run breaks a rule or the
 * job leaked. */
bool oom_check(oom_job job, void *ud, oom_count *c, char *msg, size_t cap);

/* In a TEST: both loops, and at least min_points failing runs among them
 * (so the loop cannot pass by never failing anything). */
#define OOM_CHECK(job, ud, c, min_points)                                                                      \
    do {                                                                                                        \
        char msg_[512] = "";                                                                                    \
        const long before_ = (c)->points;                                                                       \
        bool ok_ = oom_check(job, ud, c, msg_, sizeof msg_);                                                    \
        CHECK(ok_, "%s: %s", #job, msg_);                                                                       \
        CHECK((c)->points - before_ >= (min_points), "%s: only %ld failure points (want >= %d)", #job,          \
              (c)->points - before_, (min_points));                                                             \
    } while (0)

/* /tmp/kvq_test_oom_WHAT_PID */
void oom_tmp_path(char *buf, size_t n, const char *what);

/* The tiny llama of model_writer.h with head_dim 32 (one KV head), so
 * every cache family fits it. */
tm_spec oom_spec(void);
/* That model with n_layer layers and width n_embd (2 heads), written to
 * path (oom_tmp_path "tiny.gguf"; the caller removes it) and loaded with
 * nothing failing; NULL when it cannot be. */
kvq_model *oom_load_tiny(char *path, size_t cap, int n_layer, int n_embd);

/* A context of OOM_CTX positions, batches of 16, one thread, both sides
 * of type t, rotation off. */
enum { OOM_CTX = 32 };
kvq_status oom_ctx(const kvq_model *m, kvq_type t, kvq_ctx **ctx, kvq_error *err);

#endif
