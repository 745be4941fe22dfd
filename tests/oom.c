/* oom.c - the out-of-memory loop (oom.h). */
#include "oom.h"

#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define OOM_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOM_LSAN 1
#endif
#endif
#ifdef OOM_LSAN
int __lsan_do_recoverable_leak_check(void);   /* <sanitizer/lsan_interface.h> */
#endif

enum { OOM_MAX_RUNS = 20000 };

/* Runs job with allocation n failing (persist: n and every later one),
 * n = 1, 2, ..., until a run has nothing fail; false with msg on the
 * first run that breaks the rules above. */
static bool oom_loop(oom_job job, void *ud, int persist, oom_count *c, char *msg, size_t cap) {
    for (long n = 1; n <= OOM_MAX_RUNS; n++) {
        kvq_error err = { KVQ_OK, "" };
        kvq_alloc_fail_at(n, persist);
        const kvq_status st = job(ud, &err);
        const long failed = kvq_alloc_failed();
        kvq_alloc_fail_at(0, 0);
        if (!failed) {
            c->points += n - 1;
            if (st == KVQ_OK) return true;
            snprintf(msg, cap, "with no allocation failing the job failed: status %d, %s", (int)st, err.msg);
            return false;
        }
        if (st != KVQ_ERR_NOMEM || !err.msg[0]) {
            snprintf(msg, cap, "allocation %ld failing%s: status %d (want %d, KVQ_ERR_NOMEM), message '%s'", n,
                     persist ? " (and every later one)" : "", (int)st, (int)KVQ_ERR_NOMEM, err.msg);
            return false;
        }
    }
    snprintf(msg, cap, "more than %d allocations: the job never finished", OOM_MAX_RUNS);
    return false;
}

/* Both loops; false with msg when either breaks a rule or leaks.
 * LeakSanitizer reports every leak in the process, not this job's only:
 * a test that failed earlier (its CHECK returns without freeing) would
 * make every later loop fail too, hiding the one failure among many.  So
 * the process is checked before the loops as well, and once it holds a
 * leak from elsewhere (that test is already failing the run), later
 * loops say so on stderr and are not asked about leaks. */
bool oom_check(oom_job job, void *ud, oom_count *c, char *msg, size_t cap) {
#ifdef OOM_LSAN
    static bool leaked_before;
    if (!leaked_before && __lsan_do_recoverable_leak_check()) {
        leaked_before = true;
        fprintf(stderr, "oom: leaks from an earlier test (report above); the leak checks of the loops from here on "
                        "are skipped\n");
    }
#endif
    if (!oom_loop(job, ud, 0, c, msg, cap) || !oom_loop(job, ud, 1, c, msg, cap)) return false;
#ifdef OOM_LSAN
    if (!leaked_before && __lsan_do_recoverable_leak_check()) {
        snprintf(msg, cap, "LeakSanitizer found leaks (report above)");
        return false;
    }
#endif
    return true;
}

void oom_tmp_path(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "/tmp/kvq_test_oom_%s_%d", what, (int)getpid());
}

tm_spec oom_spec(void) {
    tm_spec s = tm_spec_default();
    s.n_embd = 64;
    s.n_head = 2;
    s.n_head_kv = 1;
    s.n_ff = 64;
    return s;
}

kvq_model *oom_load_tiny(char *path, size_t cap, int n_layer, int n_embd) {
    oom_tmp_path(path, cap, "tiny.gguf");
    tm_spec s = oom_spec();
    s.block_count = s.n_blocks = n_layer;
    s.n_embd = n_embd;
    kvq_model *m = NULL;
    kvq_error err;
    if (tm_save_spec(&s, path) && kvq_model_load(path, &m, &err) != KVQ_OK) m = NULL;
    return m;
}

kvq_status oom_ctx(const kvq_model *m, kvq_type t, kvq_ctx **ctx, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_ctx = OOM_CTX;
    p.max_batch = 16;
    p.type_k = p.type_v = t;
    return kvq_ctx_create(m, &p, 1, ctx, err);
}
