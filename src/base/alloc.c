/* alloc.c - libc's allocator behind a counter that a test can make fail
 * (alloc.h).  Unarmed, the cost is one relaxed atomic load per call. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_int g_armed;              /* a failure point is set         */
static atomic_long g_calls;             /* calls since kvq_alloc_fail_at  */
static atomic_long g_failed;            /* calls made to fail since then  */
static long g_fail_at;                  /* written before g_armed is set  */
static int g_persist;

void kvq_alloc_fail_at(long n, int persist) {
    atomic_store(&g_armed, 0);
    g_fail_at = n;
    g_persist = persist;
    atomic_store(&g_calls, 0);
    atomic_store(&g_failed, 0);
    if (n > 0) atomic_store(&g_armed, 1);
}

long kvq_alloc_calls(void) { return atomic_load(&g_calls); }
long kvq_alloc_failed(void) { return atomic_load(&g_failed); }

/* Counts the call; true when it is to fail.  Calls are counted only while
 * armed, so an unarmed library pays one load. */
static int should_fail(void) {
    if (!atomic_load_explicit(&g_armed, memory_order_acquire)) return 0;
    const long k = atomic_fetch_add(&g_calls, 1) + 1;
    if (k == g_fail_at || (g_persist && k > g_fail_at)) {
        atomic_fetch_add(&g_failed, 1);
        return 1;
    }
    return 0;
}

void *kvq_malloc(size_t n) { return should_fail() ? NULL : malloc(n); }
void *kvq_calloc(size_t count, size_t size) { return should_fail() ? NULL : calloc(count, size); }
void *kvq_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n); }

/* calloc's large blocks are freshly mapped pages, zero at no cost until
 * touched, but they start 16 bytes into a page (the allocator's header).
 * A page more, and the start moved up to the next page: the pages' lazy
 * zeroes are kept.  Streams read from a page boundary ran faster (the
 * cache's bodies: docs/performance.md, "The cache's memory on pages"). */
void *kvq_calloc_paged(size_t n, void **block) {
    *block = n > SIZE_MAX - KVQ_PAGE_BYTES ? NULL : kvq_calloc(1, n + KVQ_PAGE_BYTES);
    if (!*block) return NULL;
    const uintptr_t at = ((uintptr_t)*block + KVQ_PAGE_BYTES - 1) & ~(uintptr_t)(KVQ_PAGE_BYTES - 1);
    return (uint8_t *)*block + (at - (uintptr_t)*block);
}
