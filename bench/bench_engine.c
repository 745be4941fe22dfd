/*
 * bench_engine.c - end to end: `kvq bench` (tools/cmd_bench.c) on the
 * synthetic qwen3 models of ../shared (q8_0 and q4_k weights) at 1 and 2
 * threads: prompt (one batch) and generation (single steps) tokens/s.
 *
 *   kvq-bench engine [KVQ BENCH FLAGS]
 *
 * Without flags each model runs `-p 128 -n 64 -r 5 -ctk f16 -ctv f16`
 * (depth 0); flags replace those, e.g. `--types default -d 0,4096`.
 * The models are found under $KVQ_SHARED (default ../shared); without
 * them the group says so and succeeds.
 */
#include "bench.h"
#include "../tools/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_ARGS = 64 };

static const char *const MODELS[] = { "models/synth/qwen3-h128-q8_0.gguf", "models/synth/qwen3-h128-q4_k.gguf" };
static const char *const THREADS[] = { "1", "2" };
static const char *const DEFAULT_FLAGS[] = { "-p", "128", "-n", "64", "-r", "5", "-ctk", "f16", "-ctv", "f16" };

static const char *shared_dir(void) {
    const char *env = getenv("KVQ_SHARED");
    return env && *env ? env : "../shared";
}

/* kvq bench -m MODEL -t THREADS FLAGS... */
static int run_one(const char *model, const char *threads, int n_flags, char **flags) {
    char *args[MAX_ARGS];
    int n = 0;
    args[n++] = "bench";
    args[n++] = "-m";
    args[n++] = (char *)model;
    args[n++] = "-t";
    args[n++] = (char *)threads;
    for (int i = 0; i < n_flags && n < MAX_ARGS - 1; i++) args[n++] = flags[i];
    args[n] = NULL;
    fflush(stdout);
    const int rc = cmd_bench(n, args);
    printf("\n");
    return rc;
}

int bench_engine(int argc, char **argv) {
    if (argc > MAX_ARGS - 8) { fprintf(stderr, "bench engine: too many flags\n"); return 1; }
    char **flags = argv + 1;
    int n_flags = argc - 1;
    for (int i = 0; i < n_flags; i++)   /* the group sets these itself: a user's would replace them silently */
        if (!strcmp(flags[i], "-m") || !strcmp(flags[i], "--model") || !strcmp(flags[i], "-t") ||
            !strcmp(flags[i], "--threads")) {
            fprintf(stderr, "bench engine: %s is set by the group (its models, 1 and 2 threads)\n", flags[i]);
            return 1;
        }
    char *defaults[sizeof DEFAULT_FLAGS / sizeof DEFAULT_FLAGS[0]];
    if (n_flags == 0) {
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) defaults[i] = (char *)DEFAULT_FLAGS[i];
        flags = defaults;
        n_flags = (int)(sizeof defaults / sizeof defaults[0]);
    }
    printf("## engine (end to end, kvq bench)\n\n");
    int status = 0;
    for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", shared_dir(), MODELS[m]);
        if (access(path, R_OK) != 0) {
            printf("skipped: %s not found (set KVQ_SHARED to the shared assets)\n\n", path);
            continue;
        }
        for (size_t t = 0; t < sizeof THREADS / sizeof THREADS[0]; t++) status |= run_one(path, THREADS[t], n_flags, flags);
    }
    return status;
}
