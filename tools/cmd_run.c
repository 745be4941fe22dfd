/* cmd_run.c - `kvq run`: generate text from a prompt.
 *
 * stdout is what llama-completion prints: the prompt's pieces (without
 * BOS), every generated piece as soon as it exists, then "\n\n"; logs and
 * timings go to stderr. */
#include "cli.h"
#include "engine_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "run";

typedef struct run_opts {
    const char *model, *prompt, *prompt_cache;
    int n_predict, n_ctx, n_threads;
    kvq_act act;
    int n_keep;                 /* --keep: positions a context shift keeps */
    kvq_sampler_params sp;
    bool seed_given, context_shift;
    bool no_mmap;               /* --no-mmap */
    cache_flags cache;
} run_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq run -m MODEL -p PROMPT [options]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -p, --prompt TEXT      prompt\n"
        "  -n, --n-predict N      tokens to generate (default 64)\n"
        "  -c, --ctx-size N       context size (default: the model's, at most 4096)\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_ACT_USAGE
        CLI_NO_MMAP_USAGE
        "  --temp T               temperature, 0 = greedy (default 0.8)\n"
        "  --top-k K, --top-p P   sampling filters (defaults 40, 0.95)\n"
        "  --seed S               sampler seed, 0..4294967295 (default -1: a random one,\n"
        "                         printed to stderr so the run can be replayed; greedy\n"
        "                         decoding (--temp 0) never uses it)\n"
        "  --context-shift        at the end of the context, drop the older half of what\n"
        "                         follows the kept start and go on (the cache's stored K\n"
        "                         re-RoPEd, every cache type); without it generation stops\n"
        "  --keep N               positions a context shift keeps from the start (default 0;\n"
        "                         BOS and the cache's exact sink rows are always kept)\n"
        "  --prompt-cache FILE    reuse the cache state saved in FILE for the prompt's common\n"
        "                         prefix, then save the prompt's state there (llama.cpp's\n"
        "                         --prompt-cache; a file saved with other cache settings or\n"
        "                         another model is refused)\n");
    cache_flags_usage(f);
}

/* 1 = consumed, 0 = unknown, -1 = error already printed. */
static int parse_one(run_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v;
    long l;
    double d;
    /* the flags run shares with the other model commands (engine_cli.h) */
    const cli_model_flags shared = { .act = &o->act, .no_mmap = &o->no_mmap };
    const int r = cli_model_flag(CMD, &shared, argc, argv, i);
    if (r) return r;
#define VALUE() if (!(v = cli_value(CMD, argc, argv, i))) return -1
#define LONG(lo, hi, dst) do { VALUE(); if (!cli_flag_long(CMD, a, v, lo, hi, &l)) return -1; dst = (int)l; } while (0)
#define REAL(lo, hi, dst) do { VALUE(); if (!cli_flag_double(CMD, a, v, lo, hi, &d)) return -1; dst = (float)d; } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VALUE(); o->model = v; }
    else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { VALUE(); o->prompt = v; }
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) LONG(0, 1 << 24, o->n_predict);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) LONG(1, CLI_MAX_CTX, o->n_ctx);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) LONG(1, CLI_MAX_THREADS, o->n_threads);
    else if (!strcmp(a, "--temp")) REAL(0.0, 100.0, o->sp.temp);
    else if (!strcmp(a, "--top-k")) LONG(0, 1 << 24, o->sp.top_k);
    else if (!strcmp(a, "--context-shift")) o->context_shift = true;
    else if (!strcmp(a, "--prompt-cache")) { VALUE(); o->prompt_cache = v; }
    else if (!strcmp(a, "--keep")) LONG(0, CLI_MAX_CTX, o->n_keep);
    else if (!strcmp(a, "--top-p")) REAL(0.0, 1.0, o->sp.top_p);
    else if (!strcmp(a, "--seed")) {   /* -1: random, as llama.cpp */
        VALUE();
        if (!cli_flag_long(CMD, a, v, -1, 4294967295L, &l)) return -1;
        o->seed_given = l >= 0;
        o->sp.seed = l >= 0 ? (uint64_t)l : 0;
    }
    else return cache_flags_parse(CMD, &o->cache, argc, argv, i);
#undef VALUE
#undef LONG
#undef REAL
    return 1;
}

/* false when stdout cannot be written (generation then stops: nobody
 * would see the rest). */
static bool print_piece(const kvq_model *m, int32_t tok) {
    char buf[256];
    int n = kvq_token_to_piece(m, tok, buf, sizeof buf);
    if (n > 0) fwrite(buf, 1, (size_t)n, stdout);
    return fflush(stdout) == 0 && !ferror(stdout);
}

/* Evaluate the prompt from position `from` in batches; logits of its last
 * token in `logits`. */
static kvq_status eval_prompt(kvq_ctx *ctx, const int32_t *toks, int from, int n, int max_batch, float *logits,
                              kvq_error *err) {
    for (int start = from; start < n; start += max_batch) {
        int len = n - start < max_batch ? n - start : max_batch;
        kvq_status st = kvq_ctx_eval(ctx, toks + start, len, start, start + len == n ? logits : NULL, true, err);
        if (st) return st;
    }
    return KVQ_OK;
}

/* Sampling without --seed: a fresh seed, printed (once everything that
 * can be refused was checked) so that the run can be replayed. */
static void choose_seed(run_opts *o) {
    if (o->sp.temp <= 0 || o->seed_given) return;
    o->sp.seed = kvq_sampler_random_seed();
    fprintf(stderr, "kvq run: seed %llu (replay with --seed %llu)\n", (unsigned long long)o->sp.seed,
            (unsigned long long)o->sp.seed);
}

/* Positions a context shift keeps: --keep, BOS, and every layer's exact
 * sink rows (KVarN's first tile), which a shift may not cut. */
static int shift_keep(const run_opts *o, const kvq_model_info *in, kvq_ctx *ctx) {
    const int keep = o->n_keep + (in->add_bos ? 1 : 0);
    return CLI_MAX(keep, kvq_cache_sink_rows(kvq_ctx_cache(ctx)));
}

/* Make room at the end of the context: drop half of the positions after
 * the kept start (llama.cpp's rule); the new next position, or -1 (err). */
static int shift_context(const run_opts *o, const kvq_model_info *in, kvq_ctx *ctx, int pos, kvq_error *err) {
    const int keep = shift_keep(o, in, ctx), n_discard = (pos - keep) / 2;
    if (n_discard < 1) {
        kvq_fail(err, KVQ_ERR_ARG, "context shift: the %d kept positions leave nothing to drop in a context of %d",
                 keep, o->n_ctx);
        return -1;
    }
    if (kvq_ctx_shift(ctx, n_discard, keep, err) != KVQ_OK) return -1;
    fprintf(stderr, "\nkvq run: context shift: kept %d, dropped %d positions, %d left\n", keep, n_discard,
            pos - n_discard);
    return pos - n_discard;
}

/* --prompt-cache: restore FILE's state (when it exists) and keep its
 * longest common prefix with the prompt, at least one prompt token short
 * so that the last one is evaluated for its logits (the file holds all
 * but the last token of the prompt it was saved with).  *reused: positions
 * kept; a deeper cut than the rollback horizon starts afresh.  A state of
 * other settings or another model is an error. */
static kvq_status reuse_prompt_cache(const char *path, const kvq_model *m, kvq_ctx *ctx, const int32_t *prompt,
                                     int n_prompt, int *reused, kvq_error *err) {
    *reused = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return KVQ_OK;                 /* first run: saved after the prompt */
    fclose(f);
    int32_t *saved = NULL;
    int n_saved = 0;
    kvq_cache *c = kvq_ctx_cache(ctx);
    kvq_status st = kvq_cache_load(c, path, kvq_model_hash(m), &saved, &n_saved, err);
    if (st != KVQ_OK) {
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        return kvq_fail(err, st, "--prompt-cache %s: %s; or delete the file to start afresh", path, why);
    }
    int common = 0;
    while (common < n_saved && common < n_prompt - 1 && saved[common] == prompt[common]) common++;
    free(saved);
    if (kvq_cache_truncate(c, common, NULL) != KVQ_OK) {   /* deeper than the rollback horizon */
        fprintf(stderr, "kvq run: prompt cache %s: the %d common tokens need a rollback of %d positions; the cache keeps "
                "%d (--kv-rollback-tokens): starting afresh\n", path, common, n_saved - common,
                kvq_cache_get_params(c)->rollback_tokens);
        kvq_cache_clear(c);
        common = 0;
    }
    fprintf(stderr, "kvq run: prompt cache %s: %d of %d prompt tokens reused\n", path, common, n_prompt);
    *reused = common;
    return KVQ_OK;
}

static int generate(const run_opts *o, const kvq_model *m, kvq_ctx *ctx, const int32_t *prompt, int n_prompt,
                    int reused, int max_batch) {
    const kvq_model_info *in = kvq_model_get_info(m);
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    kvq_sampler *smp = NULL;
    kvq_error err = { 0 };
    if (!logits || kvq_sampler_create(&o->sp, &smp, &err)) {
        free(logits);
        return cli_error(CMD, "%s", logits ? err.msg : "out of memory");
    }
    bool out_ok = true;
    for (int i = in->add_bos && n_prompt > 0 && prompt[0] == in->bos_id ? 1 : 0; out_ok && i < n_prompt; i++)
        out_ok = print_piece(m, prompt[i]);
    double t0 = kvq_now_seconds();
    /* with a prompt cache: all but the last prompt token, saved, then the
     * last one (so an identical prompt reuses everything saved) */
    const int saved_part = o->prompt_cache ? n_prompt - 1 : 0;
    kvq_status st = out_ok ? eval_prompt(ctx, prompt, reused, saved_part, max_batch, NULL, &err) : KVQ_OK;
    if (!st && out_ok && o->prompt_cache && reused < saved_part) {
        const kvq_state_tag tag = { kvq_model_hash(m), prompt, saved_part };
        st = kvq_cache_save(kvq_ctx_cache(ctx), o->prompt_cache, &tag, &err);
    }
    if (!st && out_ok) st = eval_prompt(ctx, prompt, CLI_MAX(reused, saved_part), n_prompt, max_batch, logits, &err);
    double t_prompt = kvq_now_seconds() - t0, t_gen = 0.0;
    int pos = n_prompt, n_gen = 0;
    bool full = false;          /* stopped because the context has no position left */
    while (!st && out_ok && n_gen < o->n_predict) {
        int32_t tok = kvq_sample(smp, logits, in->n_vocab);
        if (tok == in->eos_id) break;
        out_ok = print_piece(m, tok);
        n_gen++;
        if (n_gen < o->n_predict && pos + 1 >= o->n_ctx && o->context_shift) {
            if ((pos = shift_context(o, in, ctx, pos, &err)) < 0) { st = KVQ_ERR_ARG; break; }
        }
        if (n_gen == o->n_predict) break;                          /* no need for more logits */
        if (pos + 1 >= o->n_ctx) { full = true; break; }           /* tok took the last position */
        t0 = kvq_now_seconds();
        st = kvq_ctx_eval(ctx, &tok, 1, pos++, logits, true, &err);
        t_gen += kvq_now_seconds() - t0;
    }
    if (out_ok) {
        fputs("\n\n", stdout);
        out_ok = fflush(stdout) == 0 && !ferror(stdout);
    }
    free(logits);
    kvq_sampler_free(smp);
    if (!out_ok) return cli_error(CMD, "writing standard output: %s", strerror(errno));
    if (st) return cli_error(CMD, "evaluation failed: %s", err.msg);
    if (full)   /* the output is complete up to here, but shorter than asked: say so */
        fprintf(stderr, "kvq run: warning: the context is full (-c %d): stopped after %d of the %d tokens asked for "
                "(-n); a larger -c generates more\n", o->n_ctx, n_gen, o->n_predict);
    fprintf(stderr, "kvq run: prompt %d tokens, %.1f tokens/s; generated %d tokens, %.1f tokens/s\n", n_prompt,
            t_prompt > 0 ? n_prompt / t_prompt : 0.0, n_gen, t_gen > 0 && n_gen > 1 ? (n_gen - 1) / t_gen : 0.0);
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = { .n_predict = 64 };
    kvq_sampler_params_default(&o.sp);
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq run --help)", argv[i]);
    }
    if (!o.model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o.prompt) return cli_error(CMD, "no prompt given (use -p TEXT)");
    kvq_model *m = cli_load_model(CMD, o.model, o.no_mmap);
    if (!m) return 1;
    const kvq_model_info *in = kvq_model_get_info(m);
    if (!o.n_ctx) o.n_ctx = in->n_ctx_train < 4096 ? in->n_ctx_train : 4096;
    int n_prompt = 0;
    int32_t *prompt = cli_tokenize(CMD, m, o.prompt, strlen(o.prompt), in->add_bos, &n_prompt);
    int rc = 1;
    kvq_ctx *ctx = NULL;
    if (!prompt) goto done;
    if (n_prompt < 1 || n_prompt >= o.n_ctx) {
        cli_error(CMD, "the prompt has %d tokens; the context (-c) holds %d", n_prompt, o.n_ctx);
        goto done;
    }
    const int max_batch = o.n_ctx < 512 ? o.n_ctx : 512;
    ctx = cli_create_ctx(CMD, m, &o.cache, o.n_ctx, max_batch, o.n_threads);
    if (ctx && !cli_set_act(CMD, ctx, o.act)) goto done;
    int reused = 0;
    kvq_error err = { 0 };
    if (ctx && o.prompt_cache && reuse_prompt_cache(o.prompt_cache, m, ctx, prompt, n_prompt, &reused, &err) != KVQ_OK) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    if (ctx) {
        choose_seed(&o);
        rc = generate(&o, m, ctx, prompt, n_prompt, reused, max_batch);
    }
done:
    kvq_ctx_free(ctx);
    free(prompt);
    kvq_model_free(m);
    return rc;
}
