/*
 * test.h - kvq's minimal test framework.
 *
 * A test is a function declared with TEST(name); it registers itself at
 * start-up (constructor attribute, gcc and clang) so adding a test file
 * needs no list to edit.  Inside a test:
 *   CHECK(cond, fmt, ...)   fail the test (and return) when cond is false
 *   SKIP(fmt, ...)          mark the test skipped with a reason and return
 * The runner (tests/test_main.c) prints one line per failure or skip and
 * ends with "N passed, N failed, N skipped".
 */
#ifndef KVQ_TEST_H
#define KVQ_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum { TEST_PASS, TEST_FAIL, TEST_SKIP } test_result;
typedef struct test_ctx { test_result result; char msg[512]; } test_ctx;
typedef void (*test_fn)(test_ctx *t);

void test_register(const char *name, const char *file, test_fn fn);
void test_fail(test_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void test_skip(test_ctx *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TEST(name)                                                          \
    static void test_##name(test_ctx *t);                                   \
    __attribute__((constructor)) static void test_reg_##name(void) {        \
        test_register(#name, __FILE__, test_##name);                        \
    }                                                                       \
    static void test_##name(test_ctx *t)

#define CHECK(cond, ...)                                                    \
    do { if (!(cond)) { test_fail(t, __FILE__, __LINE__, __VA_ARGS__); return; } } while (0)
#define SKIP(...) do { test_skip(t, __VA_ARGS__); return; } while (0)

/* Path of the shared assets directory ($KVQ_SHARED or ../shared), or NULL
 * when it does not exist; tests that need it SKIP with a message. */
const char *test_shared_dir(void);
/* snprintf into a static-per-call buffer: shared asset path "dir/rel",
 * NULL when the shared dir or the file is missing. */
const char *test_shared_path(char *buf, size_t n, const char *rel);
/* Path of the kvq CLI ($KVQ_BIN), or NULL. */
const char *test_kvq_bin(void);
/* Run a shell command, capturing stdout+stderr (truncated to cap) and
 * returning the exit status (or -1); the command's own redirections hold
 * (its "2>/dev/null" keeps stderr out). */
int test_run(const char *cmd, char *out, size_t cap);
/* True when running under sanitizers (slow): long tests shrink. */
int test_sanitized(void);

/* Deterministic random numbers for tests (splitmix64 + Box-Muller). */
typedef struct test_rng { uint64_t s; int has_spare; double spare; } test_rng;
static inline uint64_t test_rng_u64(test_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline double test_rng_uniform(test_rng *r) { /* [0,1) */
    return (double)(test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}
static inline double test_rng_gauss(test_rng *r) {
    if (r->has_spare) { r->has_spare = 0; return r->spare; }
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    double m = sqrt(-2.0 * log(u1));
    r->spare = m * sin(6.283185307179586 * u2);
    r->has_spare = 1;
    return m * cos(6.283185307179586 * u2);
}

#endif
