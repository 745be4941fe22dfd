/* alloc.h - the library's one way to allocate memory.
 *
 * Every allocation in src/ goes through kvq_malloc / kvq_calloc /
 * kvq_realloc (make check-layers refuses a bare malloc, calloc, realloc
 * or strdup in src/), so a test can make the Nth allocation fail and check
 * that each failure path returns KVQ_ERR_NOMEM, frees what it took and
 * leaves nothing half-built (tests/test_oom.c, the way SQLite tests its
 * out-of-memory paths).  Memory from these calls is released with free():
 * they are libc's allocator with a counter in front, nothing more.
 *
 * An element count times an element size goes through kvq_malloc_n /
 * kvq_realloc_n (kvq_mul_size saturates at SIZE_MAX on overflow), so an
 * overflowing size is an allocation that fails rather than a short
 * buffer; the counts themselves are products of dimensions the loaders
 * have bounded. */
#ifndef KVQ_ALLOC_H
#define KVQ_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *kvq_malloc(size_t n);
void *kvq_calloc(size_t count, size_t size);        /* count * size checked, as calloc does */
void *kvq_realloc(void *p, size_t n);               /* on failure p is untouched, as realloc */
/* n zeroed bytes starting at a multiple of KVQ_PAGE_BYTES; *block gets
 * what to free() (NULL on failure). */
void *kvq_calloc_paged(size_t n, void **block);
enum { KVQ_PAGE_BYTES = 4096 };

/* a * b, or SIZE_MAX when it overflows (and SIZE_MAX stays SIZE_MAX
 * through further products with a non-zero factor). */
static inline size_t kvq_mul_size(size_t a, size_t b) {
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}
/* count elements of size bytes, the product checked: NULL on overflow,
 * without asking libc for SIZE_MAX bytes (AddressSanitizer reports that). */
static inline void *kvq_malloc_n(size_t count, size_t size) {
    const size_t n = kvq_mul_size(count, size);
    return n == SIZE_MAX ? NULL : kvq_malloc(n);
}
static inline void *kvq_realloc_n(void *p, size_t count, size_t size) {
    const size_t n = kvq_mul_size(count, size);
    return n == SIZE_MAX ? NULL : kvq_realloc(p, n);
}

/* ---- failure injection, for tests only (not exported from libkvq.so) ----
 * kvq_alloc_fail_at(n, persist): counting from this call, allocation
 * number n (1 = the next one) fails; with persist, every later one fails
 * too.  n = 0 disarms.  Thread-safe (an atomic counter), but which call is
 * "the Nth" is only deterministic when one thread allocates.
 * kvq_alloc_calls: allocations attempted since the last kvq_alloc_fail_at.
 * kvq_alloc_failed: allocations made to fail since then. */
void kvq_alloc_fail_at(long n, int persist);
long kvq_alloc_calls(void);
long kvq_alloc_failed(void);

#endif
