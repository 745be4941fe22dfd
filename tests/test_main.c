/* test_main.c - runs every registered test; optional argument: a substring
 * filter on test names.  Exit status is non-zero when any test failed. */
#include "test.h"

#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define MAX_TESTS 1024
static struct { const char *name, *file; test_fn fn; } g_tests[MAX_TESTS];
static int g_ntests;

void test_register(const char *name, const char *file, test_fn fn) {
    if (g_ntests < MAX_TESTS) {
        g_tests[g_ntests].name = name;
        g_tests[g_ntests].file = file;
        g_tests[g_ntests].fn = fn;
        g_ntests++;
    } else {
        fprintf(stderr, "too many tests (raise MAX_TESTS)\n");
        exit(2);
    }
}

void test_fail(test_ctx *t, const char *file, int line, const char *fmt, ...) {
    int k = snprintf(t->msg, sizeof t->msg, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    if (k > 0 && (size_t)k < sizeof t->msg) vsnprintf(t->msg + k, sizeof t->msg - (size_t)k, fmt, ap);
    va_end(ap);
    t->result = TEST_FAIL;
}

void test_skip(test_ctx *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->msg, sizeof t->msg, fmt, ap);
    va_end(ap);
    t->result = TEST_SKIP;
}

const char *test_shared_dir(void) {
    static char dir[1024];
    const char *env = getenv("KVQ_SHARED");
    snprintf(dir, sizeof dir, "%s", env && *env ? env : "../shared");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
    return dir;
}

const char *test_shared_path(char *buf, size_t n, const char *rel) {
    const char *dir = test_shared_dir();
    if (!dir) return NULL;
    snprintf(buf, n, "%s/%s", dir, rel);
    struct stat st;
    if (stat(buf, &st) != 0) return NULL;
    return buf;
}

const char *test_kvq_bin(void) {
    const char *b = getenv("KVQ_BIN");
    return b && *b ? b : NULL;
}

int test_sanitized(void) { const char *s = getenv("KVQ_SANITIZE"); return s && *s == '1'; }

int test_run(const char *cmd, char *out, size_t cap) {
    char full[8192];
    /* In braces, so that a command's own "2>/dev/null" still holds: a
     * plain "CMD 2>/dev/null 2>&1" sends stderr to the pipe after all. */
    snprintf(full, sizeof full, "{ %s; } 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) return -1;
    size_t len = 0;
    if (out && cap) out[0] = 0;
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        if (out && len + 1 < cap) {
            size_t take = got < cap - 1 - len ? got : cap - 1 - len;
            memcpy(out + len, buf, take);
            len += take;
            out[len] = 0;
        }
    }
    int st = pclose(p);
    if (st == -1) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < g_ntests; i++) {
        if (filter && !strstr(g_tests[i].name, filter)) continue;
        test_ctx t = { TEST_PASS, "" };
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        g_tests[i].fn(&t);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double sec = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        switch (t.result) {
        case TEST_PASS: passed++; printf("ok    %-44s (%.2fs)\n", g_tests[i].name, sec); break;
        case TEST_FAIL: failed++; printf("FAIL  %-44s %s\n", g_tests[i].name, t.msg); break;
        case TEST_SKIP: skipped++; printf("skip  %-44s %s\n", g_tests[i].name, t.msg); break;
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
