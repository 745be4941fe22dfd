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

typedef struct bench_opts {
    const char *model;
    int n_prompt, n_gen, n_threads, reps;
    cache_flags cache;
} bench_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq bench -m MODEL [options]\n"
        "  -p, --n-prompt N       prompt tokens (default 128)\n"
        "  -n, --n-gen N          generated tokens (default 64)\n"
        "  -r, --repetitions N    runs; the median is reported (default 5)\n"
        "  -t, --threads N        threads (default: online cores)\n");
    cache_flags_usage(f);
}

static int parse_one(bench_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int *dst;
    long l, lo = 1, hi = CLI_MAX_CTX;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(v = cli_value(CMD, argc, argv, i))) return -1; o->model = v; return 1; }
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

/* One run: prefill n_prompt tokens in one batch, then n_gen single-token
 * steps feeding back the argmax. Times in seconds. */
static kvq_status one_run(kvq_ctx *ctx, const bench_opts *o, int n_vocab, const int32_t *prompt, float *logits,
                          double *t_pp, double *t_tg, kvq_error *err) {
    kvq_cache_clear(kvq_ctx_cache(ctx));
    double t0 = kvq_now_seconds();
    kvq_status st = kvq_ctx_eval(ctx, prompt, o->n_prompt, 0, logits, true, err);
    *t_pp = kvq_now_seconds() - t0;
    t0 = kvq_now_seconds();
    for (int s = 0; !st && s < o->n_gen; s++) {
        int32_t tok = 0;
        for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[tok]) tok = i;
        st = kvq_ctx_eval(ctx, &tok, 1, o->n_prompt + s, logits, true, err);
    }
    *t_tg = kvq_now_seconds() - t0;
    return st;
}

static int bench(const bench_opts *o, kvq_ctx *ctx, const kvq_model_info *in) {
    int32_t *prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    double *pp = malloc((size_t)o->reps * sizeof *pp), *tg = malloc((size_t)o->reps * sizeof *tg);
    int rc = 0;
    if (!prompt || !logits || !pp || !tg) rc = cli_error(CMD, "out of memory");
    /* a fixed, spread-out token sequence: speed does not depend on the ids */
    for (int i = 0; !rc && i < o->n_prompt; i++) prompt[i] = (int32_t)((i * 7919u + 3u) % (unsigned)in->n_vocab);
    kvq_error err = { 0 };
    for (int r = 0; !rc && r < o->reps; r++)
        if (one_run(ctx, o, in->n_vocab, prompt, logits, &pp[r], &tg[r], &err)) rc = cli_error(CMD, "%s", err.msg);
    if (!rc) {
        qsort(pp, (size_t)o->reps, sizeof *pp, cmp_double);
        qsort(tg, (size_t)o->reps, sizeof *tg, cmp_double);
        const double mp = pp[o->reps / 2], mt = tg[o->reps / 2];
        char name[64];
        cache_flags_name(&o->cache, name, sizeof name);
        printf("| model | threads | cache | pp%d t/s | tg%d t/s |\n|---|---|---|---|---|\n", o->n_prompt, o->n_gen);
        const char *base = strrchr(o->model, '/');
        printf("| %s | %d | %s | %.1f | %.1f |\n", base ? base + 1 : o->model, kvq_ctx_threads(ctx), name,
               mp > 0 ? o->n_prompt / mp : 0.0, mt > 0 && o->n_gen ? o->n_gen / mt : 0.0);
    }
    free(prompt); free(logits); free(pp); free(tg);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = { .n_prompt = 128, .n_gen = 64, .reps = 5 };
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
    kvq_ctx *ctx = cli_create_ctx(CMD, m, &o.cache, o.n_prompt + o.n_gen, o.n_prompt, o.n_threads);
    int rc = ctx ? bench(&o, ctx, in) : 1;
    kvq_ctx_free(ctx);
    kvq_model_free(m);
    return rc;
}
