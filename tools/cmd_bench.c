/* cmd_bench.c - `kvq bench`: prompt and generation speed of a model with
 * a cache configuration (median of several runs; EVAL.md §6). */
#include "chunks.h"
#include "cli.h"
#include "engine_cli.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "bench";

enum { MAX_DEPTHS = 16 };

typedef struct bench_opts {
    const char *model;
    int n_prompt, n_gen, n_threads, reps;
    int depths[MAX_DEPTHS], n_depths;   /* tokens already in the cache */
    cache_flags cache;
} bench_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq bench -m MODEL [options]\n"
        "  -p, --n-prompt N       prompt tokens (default 128)\n"
        "  -n, --n-gen N          generated tokens (default 64)\n"
        "  -r, --repetitions N    runs; the median is reported (default 5)\n"
        "  -d, --depth LIST       cache depths to measure at, e.g. 0,4096 (default 0)\n"
        "  -t, --threads N        threads (default: online cores)\n");
    cache_flags_usage(f);
}

/* "0,4096,16384": each depth in 0..CLI_MAX_CTX. */
static bool parse_depths(bench_opts *o, const char *list) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    o->n_depths = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long d;
        if (o->n_depths == MAX_DEPTHS || !cli_parse_long(tok, 0, CLI_MAX_CTX, &d)) {
            cli_error(CMD, "-d: '%s' is not a list of at most %d depths in 0..%d", list, MAX_DEPTHS, CLI_MAX_CTX);
            return false;
        }
        o->depths[o->n_depths++] = (int)d;
    }
    if (!o->n_depths) { cli_error(CMD, "-d: empty list"); return false; }
    return true;
}

static int parse_one(bench_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int *dst;
    long l, lo = 1, hi = CLI_MAX_CTX;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(v = cli_value(CMD, argc, argv, i))) return -1; o->model = v; return 1; }
    if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
        if (!(v = cli_value(CMD, argc, argv, i))) return -1;
        return parse_depths(o, v) ? 1 : -1;
    }
    if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) dst = &o->n_prompt;
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) dst = &o->n_gen;
    else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) { dst = &o->reps; hi = 1000; }
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { dst = &o->n_threads; hi = CLI_MAX_THREADS; }
    else return cache_flags_parse(CMD, &o->cache, argc, argv, i);
    if (!(v = cli_value(CMD, argc, argv, i))) return -1;
    if (!cli_parse_long(v, lo, hi, &l)) { cli_error(CMD, "%s: '%s' is not an integer in %ld..%ld", a, v, lo, hi); return -1; }
    *dst = (int)l;
    return 1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A fixed, spread-out token sequence: speed does not depend on the ids. */
static int32_t bench_token(int i, int n_vocab) { return (int32_t)(((unsigned)i * 7919u + 3u) % (unsigned)n_vocab); }

/* Fill the cache with `depth` tokens (not timed), in batches. */
static kvq_status fill(kvq_ctx *ctx, int depth, int n_vocab, int32_t *buf, int batch, kvq_error *err) {
    for (int start = 0; start < depth; start += batch) {
        const int n = depth - start < batch ? depth - start : batch;
        for (int i = 0; i < n; i++) buf[i] = bench_token(start + i, n_vocab);
        kvq_status st = kvq_ctx_eval(ctx, buf, n, start, NULL, false, err);
        if (st) return st;
    }
    return KVQ_OK;
}

/* One run at one depth: prefill n_prompt tokens in one batch, then n_gen
 * single-token steps feeding back the argmax.  Times in seconds. */
static kvq_status one_run(kvq_ctx *ctx, const bench_opts *o, int depth, int n_vocab, int32_t *buf, float *logits,
                          double *t_pp, double *t_tg, kvq_error *err) {
    kvq_cache_clear(kvq_ctx_cache(ctx));
    kvq_status st = fill(ctx, depth, n_vocab, buf, o->n_prompt, err);
    for (int i = 0; i < o->n_prompt; i++) buf[i] = bench_token(depth + i, n_vocab);
    double t0 = kvq_now_seconds();
    if (!st) st = kvq_ctx_eval(ctx, buf, o->n_prompt, depth, logits, true, err);
    *t_pp = kvq_now_seconds() - t0;
    t0 = kvq_now_seconds();
    for (int s = 0; !st && s < o->n_gen; s++) {
        int32_t tok = 0;
        for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[tok]) tok = i;
        st = kvq_ctx_eval(ctx, &tok, 1, depth + o->n_prompt + s, logits, true, err);
    }
    *t_tg = kvq_now_seconds() - t0;
    return st;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static int bench(const bench_opts *o, kvq_ctx *ctx, const kvq_model_info *in) {
    int32_t *buf = malloc((size_t)o->n_prompt * sizeof *buf);
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    double *pp = malloc((size_t)o->reps * sizeof *pp), *tg = malloc((size_t)o->reps * sizeof *tg);
    int rc = 0;
    if (!buf || !logits || !pp || !tg) rc = cli_error(CMD, "out of memory");
    char name[64];
    cache_flags_name(&o->cache, name, sizeof name);
    const char *base = strrchr(o->model, '/');
    if (!rc) printf("| model | threads | cache | depth | pp%d t/s | tg%d t/s |\n|---|---|---|---|---|---|\n",
                    o->n_prompt, o->n_gen);
    kvq_error err = { 0 };
    for (int d = 0; !rc && d < o->n_depths; d++) {
        for (int r = 0; !rc && r < o->reps; r++)
            if (one_run(ctx, o, o->depths[d], in->n_vocab, buf, logits, &pp[r], &tg[r], &err))
                rc = cli_error(CMD, "%s", err.msg);
        if (rc) break;
        const double mp = median(pp, o->reps), mt = median(tg, o->reps);
        printf("| %s | %d | %s | %d | %.1f | %.1f |\n", base ? base + 1 : o->model, kvq_ctx_threads(ctx), name,
               o->depths[d], mp > 0 ? o->n_prompt / mp : 0.0, mt > 0 && o->n_gen ? o->n_gen / mt : 0.0);
        fflush(stdout);
    }
    free(buf); free(logits); free(pp); free(tg);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = { .n_prompt = 128, .n_gen = 64, .reps = 5, .n_depths = 1 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq bench --help)", argv[i]);
    }
    kvq_model *m = cli_load_model(CMD, o.model);
    if (!m) return 1;
    const kvq_model_info *in = kvq_model_get_info(m);
    int max_depth = 0;
    for (int d = 0; d < o.n_depths; d++) max_depth = o.depths[d] > max_depth ? o.depths[d] : max_depth;
    kvq_ctx *ctx = cli_create_ctx(CMD, m, &o.cache, max_depth + o.n_prompt + o.n_gen, o.n_prompt, o.n_threads);
    int rc = ctx ? bench(&o, ctx, in) : 1;
    kvq_ctx_free(ctx);
    kvq_model_free(m);
    return rc;
}
