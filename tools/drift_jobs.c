/* drift_jobs.c - the reference and the configurations of a drift run,
 * shared out among jobs, with the progress bar (drift_jobs.h). */
#include "drift_jobs.h"
#include "kvq_eval.h"
#include "cli.h"
#include "engine_cli.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAX_JOBS = 64, BAR_WIDTH = 30 };

typedef struct drift_state {
    const drift_job_spec *s;
    kvq_drift_row *rows;
    kvq_drift_ref ref;
    int threads, batch;
    pthread_mutex_t lock;
    size_t next;                 /* next task of the phase               */
    bool ref_failed;
    int n_failed, n_cfg_done;
    /* progress */
    int64_t steps_done, steps_total;
    double t0, last_draw;
    bool tty, bar_shown;
    int last_decile;
} drift_state;

/* ------------------------------------------------------------- prompts */

void drift_prompts_free(drift_prompts *p) {
    for (size_t i = 0; p->tokens && i < p->n; i++) free(p->tokens[i]);
    free(p->tokens);
    free(p->n_tokens);
    free(p->lines);
    free(p->text);
    memset(p, 0, sizeof *p);
}

int drift_prompts_one(const char *cmd, const char *prompt, drift_prompts *p) {
    p->lines = malloc(sizeof *p->lines);
    if (!p->lines) return cli_error(cmd, "out of memory");
    p->lines[0] = (char *)prompt;
    p->n = 1;
    return 0;
}

int drift_prompts_read(const char *cmd, const char *path, size_t max, drift_prompts *p) {
    kvq_error err = { 0 };
    size_t len = 0;
    if (kvq_read_file(path, "prompt file", KVQ_TEXT_CAP, &p->text, &len, &err)) return cli_error(cmd, "%s", err.msg);
    if (kvq_drift_split_prompts(p->text, len, &p->lines, &p->n, &err)) return cli_error(cmd, "'%s': %s", path, err.msg);
    if (p->n == 0)
        return cli_error(cmd, "prompt file '%s' holds no prompt (one prompt per line; blank lines are skipped)", path);
    if (max && max < p->n) p->n = max;
    return 0;
}

static int alloc_tokens(const char *cmd, drift_prompts *p) {
    p->tokens = calloc(p->n, sizeof *p->tokens);
    p->n_tokens = calloc(p->n, sizeof *p->n_tokens);
    return p->tokens && p->n_tokens ? 0 : cli_error(cmd, "out of memory");
}

/* Prompt i and n_gen generated tokens must fit in limit positions. */
static int check_fit(const char *cmd, drift_prompts *p, size_t i, const char *path, int n_gen, int limit) {
    const int64_t need = (int64_t)p->n_tokens[i] + n_gen;
    if (p->n_tokens[i] < 1 || need > limit) {
        char which[96] = "the prompt";
        if (path) snprintf(which, sizeof which, "prompt %zu of '%.60s'", i + 1, path);
        return cli_error(cmd, "%s has %d tokens: with %d generated it needs %lld positions, the context (-c) holds %d",
                         which, p->n_tokens[i], n_gen, (long long)need, limit);
    }
    p->longest = CLI_MAX(p->longest, p->n_tokens[i]);
    return 0;
}

int drift_prompts_tokenize(const char *cmd, const kvq_model *m, drift_prompts *p, const char *path, int n_gen,
                           int limit) {
    const kvq_model_info *in = kvq_model_get_info(m);
    if (alloc_tokens(cmd, p)) return 1;
    for (size_t i = 0; i < p->n; i++) {
        p->tokens[i] = cli_tokenize(cmd, m, p->lines[i], strlen(p->lines[i]), in->add_bos, &p->n_tokens[i]);
        if (!p->tokens[i] || check_fit(cmd, p, i, path, n_gen, limit)) return 1;
    }
    return 0;
}

int drift_prompts_windows(const char *cmd, const int32_t *tokens, size_t n, int bos, size_t count, int len, int n_gen,
                          int limit, drift_prompts *p) {
    if (bos >= 0 && n > 0 && tokens[0] == bos) { tokens++; n--; }
    if (n < (size_t)len) return cli_error(cmd, "the text has %zu tokens, too few for drift prompts of %d", n, len);
    p->n = count;
    if (alloc_tokens(cmd, p)) return 1;
    const int head = bos >= 0 ? 1 : 0;
    for (size_t i = 0; i < count; i++) {
        const size_t at = count > 1 ? i * (n - (size_t)len) / (count - 1) : 0;
        p->tokens[i] = malloc(((size_t)len + 1) * sizeof **p->tokens);
        if (!p->tokens[i]) return cli_error(cmd, "out of memory");
        if (head) p->tokens[i][0] = bos;
        memcpy(p->tokens[i] + head, tokens + at, (size_t)len * sizeof *tokens);
        p->n_tokens[i] = len + head;
        if (check_fit(cmd, p, i, NULL, n_gen, limit)) return 1;
    }
    return 0;
}

/* ------------------------------------------------------------ progress */

static void eta_text(const drift_state *d, char *buf, size_t cap) {
    const double el = kvq_now_seconds() - d->t0;
    char a[32], b[32];
    kvq_format_duration(a, sizeof a, el);
    if (d->steps_done > 0) kvq_format_duration(b, sizeof b, el / d->steps_done * (d->steps_total - d->steps_done));
    else snprintf(b, sizeof b, "?");
    snprintf(buf, cap, "%s elapsed, %s left", a, b);
}

/* With the lock held. */
static void draw_bar(drift_state *d) {
    const double f = d->steps_total > 0 ? fmin(1.0, (double)d->steps_done / (double)d->steps_total) : 1.0;
    char bar[BAR_WIDTH + 1], eta[80];
    const int full = (int)(f * BAR_WIDTH);
    for (int k = 0; k < BAR_WIDTH; k++) bar[k] = k < full ? '#' : '-';
    bar[BAR_WIDTH] = 0;
    eta_text(d, eta, sizeof eta);
    if (d->tty) {
        fprintf(stderr, "\r\033[Kkvq %s: [%s] %3.0f%% | configurations %d/%zu | %s", d->s->cmd, bar, 100.0 * f,
                d->n_cfg_done, d->s->n_cfg, eta);
        d->bar_shown = true;
    } else {
        fprintf(stderr, "kvq %s: %3.0f%% done, configurations %d/%zu, %s\n", d->s->cmd, 100.0 * f, d->n_cfg_done,
                d->s->n_cfg, eta);
    }
    fflush(stderr);
}

/* A whole line on stderr (with the lock held): the bar is cleared first
 * and drawn again after it. */
static void say(drift_state *d, const char *line) {
    if (d->bar_shown) fputs("\r\033[K", stderr);
    fprintf(stderr, "%s\n", line);
    if (d->tty) draw_bar(d);
}

static void on_steps(void *ud, int64_t steps) {
    drift_state *d = ud;
    pthread_mutex_lock(&d->lock);
    d->steps_done += steps;
    const double now = kvq_now_seconds();
    const int decile = d->steps_total > 0 ? (int)(10 * d->steps_done / d->steps_total) : 10;
    /* nothing for the first second: short runs need no bar */
    const bool due = d->tty ? now - d->last_draw >= 0.25 : decile > d->last_decile && decile < 10;
    if (due && now - d->t0 >= 1.0) {
        d->last_draw = now;
        d->last_decile = decile;
        draw_bar(d);
    }
    pthread_mutex_unlock(&d->lock);
}

/* --------------------------------------------------------------- tasks */

static kvq_ctx *exact_ctx(const drift_state *d, kvq_error *err) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.type_k = p.type_v = KVQ_TYPE_F32;
    p.n_ctx = d->s->n_ctx;
    p.max_batch = d->batch;
    kvq_ctx *ctx = NULL;
    return kvq_ctx_create(d->s->m, &p, d->threads, &ctx, err) == KVQ_OK ? ctx : NULL;
}

/* Take the next task of a phase of n tasks; false when none is left or
 * the reference failed. */
static bool take(drift_state *d, size_t n, size_t *task) {
    pthread_mutex_lock(&d->lock);
    const bool ok = !d->ref_failed && d->next < n;
    if (ok) *task = d->next++;
    pthread_mutex_unlock(&d->lock);
    return ok;
}

static void *reference_job(void *arg) {
    drift_state *d = arg;
    kvq_ctx *ctx = NULL;
    size_t p;
    while (take(d, d->s->n_prompts, &p)) {
        kvq_error err = { 0 };
        if (!ctx) ctx = exact_ctx(d, &err);
        kvq_status st = ctx ? kvq_drift_ref_run(&d->ref, p, ctx, d->s->prompts[p], d->s->n_prompt[p], on_steps, d, &err)
                            : (err.code ? err.code : KVQ_ERR_NOMEM);
        if (st) {
            pthread_mutex_lock(&d->lock);
            if (!d->ref_failed) {
                char line[400];
                snprintf(line, sizeof line, "kvq %s: error: the exact run of prompt %zu: %s", d->s->cmd, p + 1, err.msg);
                say(d, line);
            }
            d->ref_failed = true;
            pthread_mutex_unlock(&d->lock);
        }
    }
    kvq_ctx_free(ctx);
    return NULL;
}

/* The configuration's cache parameters, settled for the run's context. */
static kvq_ctx *config_ctx(const drift_state *d, drift_config *c, kvq_error *err) {
    if (!cache_flags_apply_layers(d->s->cmd, &c->cache, kvq_model_get_info(d->s->m)->n_layer)) {
        kvq_fail(err, KVQ_ERR_ARG, "per-layer types do not fit the model");
        return NULL;
    }
    if (!cache_flags_resolve(d->s->cmd, &c->cache, d->s->n_ctx)) {
        kvq_fail(err, KVQ_ERR_ARG, "the tail or sink does not fit the context");
        return NULL;
    }
    c->cache.params.max_batch = d->batch;
    kvq_ctx *ctx = NULL;
    if (kvq_ctx_create(d->s->m, &c->cache.params, d->threads, &ctx, err) != KVQ_OK) return NULL;
    return ctx;
}

static void fill_row(const drift_state *d, const drift_config *c, kvq_ctx *ctx, kvq_drift_row *r) {
    const kvq_model_info *in = kvq_model_get_info(d->s->m);
    const kvq_cache_params *p = &c->cache.params;
    const kvq_cache *cache = kvq_ctx_cache(ctx);
    const kvq_rot_plan *rot = kvq_cache_rotation(cache);
    kvq_cache_bytes b;
    kvq_cache_memory(cache, &b);
    kvq_cache_params bf16 = *p;
    bf16.type_k = bf16.type_v = KVQ_TYPE_BF16;
    bf16.layer_type_k = bf16.layer_type_v = NULL;
    kvq_eval_copy_str(r->label, sizeof r->label, c->label);
    snprintf(r->colour_key, sizeof r->colour_key, "%s/%s%s", kvq_type_name(p->type_k), kvq_type_name(p->type_v),
             p->layer_type_k || p->layer_type_v ? "+layers" : "");
    kvq_eval_copy_str(r->cache_k, sizeof r->cache_k, kvq_type_name(p->type_k));
    kvq_eval_copy_str(r->cache_v, sizeof r->cache_v, kvq_type_name(p->type_v));
    r->rot_k = rot ? rot->block_k : 0;
    r->rot_v = rot ? rot->block_v : 0;
    r->tail_tokens = p->tail_tokens;
    r->sink_tokens = p->sink_tokens;
    r->rot_off = c->rot_off;
    r->kv_bytes = (double)b.total;
    r->size_pct = 100.0 * r->kv_bytes / cli_kv_bytes(in, &bf16, d->s->n_ctx);
}

static void report_config(drift_state *d, const kvq_drift_row *r, const kvq_error *err, bool ok) {
    char line[512];
    if (!ok) {
        snprintf(line, sizeof line, "kvq %s: error: %s: %s", d->s->cmd, d->s->cfg[r - d->rows].label, err->msg);
    } else {
        char div[32];
        if (r->sum.median_first_div > r->sum.n_gen) snprintf(div, sizeof div, "never");
        else snprintf(div, sizeof div, "%g", r->sum.median_first_div);
        snprintf(line, sizeof line, "kvq %s: [%d/%zu] %s: median first divergence %s, identical %.0f%%, mean KLD %.3g "
                 "(%.1f s)", d->s->cmd, d->n_cfg_done, d->s->n_cfg, r->label, div, 100.0 * r->sum.frac_identical,
                 r->sum.mean_kld, r->seconds);
    }
    say(d, line);
}

static void *config_job(void *arg) {
    drift_state *d = arg;
    size_t i;
    while (take(d, d->s->n_cfg, &i)) {
        drift_config *c = &d->s->cfg[i];
        kvq_drift_row *r = &d->rows[i];
        kvq_error err = { 0 };
        const double t0 = kvq_now_seconds();
        kvq_ctx *ctx = config_ctx(d, c, &err);
        kvq_status st = ctx ? KVQ_OK : (err.code ? err.code : KVQ_ERR_NOMEM);
        if (!st && d->s->log_cache) {
            pthread_mutex_lock(&d->lock);
            if (d->bar_shown) fputs("\r\033[K", stderr);
            cache_flags_log(d->s->cmd, kvq_ctx_cache(ctx));
            pthread_mutex_unlock(&d->lock);
        }
        if (!st) st = kvq_drift_measure(ctx, &d->ref, on_steps, d, &r->run, &err);
        if (!st) st = kvq_drift_summarize(&r->run, &r->sum, &err);
        if (!st) {
            fill_row(d, c, ctx, r);
            r->seconds = kvq_now_seconds() - t0;
        }
        kvq_ctx_free(ctx);
        pthread_mutex_lock(&d->lock);
        if (st) { d->n_failed++; kvq_drift_run_free(&r->run); }
        else { d->n_cfg_done++; r->done = true; }
        report_config(d, r, &err, !st);
        pthread_mutex_unlock(&d->lock);
    }
    return NULL;
}

/* Run fn on `jobs` threads (this one included). */
static void run_phase(drift_state *d, void *(*fn)(void *), int jobs) {
    pthread_t tid[MAX_JOBS];
    int started = 0;
    d->next = 0;
    for (int j = 1; j < jobs && j < MAX_JOBS; j++)
        if (pthread_create(&tid[started], NULL, fn, d) == 0) started++;
    fn(d);
    for (int j = 0; j < started; j++) pthread_join(tid[j], NULL);
}

/* ---------------------------------------------------------------- main */

static void note_eos(drift_state *d) {
    size_t with = 0;
    for (size_t p = 0; p < d->ref.n_prompts; p++) with += d->ref.prompts[p].n_eos > 0;
    char line[300];
    snprintf(line, sizeof line, "kvq %s: note: the exact run of %zu prompt(s) produced end-of-text within %d tokens; "
             "generation goes on past it, so every prompt scores %d positions", d->s->cmd, with, d->s->n_gen, d->s->n_gen);
    if (with) say(d, line);
}

int drift_run_jobs(const drift_job_spec *s, kvq_drift_row *rows, int *threads) {
    const kvq_model_info *in = kvq_model_get_info(s->m);
    drift_state d = { .s = s, .rows = rows, .tty = isatty(STDERR_FILENO) == 1, .last_decile = 0 };
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int total = s->n_threads > 0 ? s->n_threads : (int)(cores > 0 ? cores : 1);
    const int jobs = CLI_MAX(1, CLI_MIN(s->n_jobs, MAX_JOBS));
    d.threads = CLI_MAX(1, total / jobs);
    d.batch = kvq_eval_batch(0, s->n_ctx);
    *threads = d.threads;
    /* the exact f32 cache is the largest of the run: one check for all */
    kvq_cache_params big;
    kvq_cache_params_default(&big);
    big.type_k = big.type_v = KVQ_TYPE_F32;
    big.max_batch = d.batch;
    if (cli_check_context(s->cmd, in, &big, s->n_ctx)) return 1;
    const double ref_bytes = kvq_drift_ref_bytes(s->n_prompts, s->n_gen, in->n_vocab);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && ref_bytes > 0.5 * (double)pages * (double)page)
        return cli_error(s->cmd, "the exact run's logits (%zu prompts x %d positions x %d tokens) need %.1f GiB, more "
                         "than half of this machine's memory: use fewer prompts or a smaller -n", s->n_prompts, s->n_gen,
                         in->n_vocab, ref_bytes / 1073741824.0);
    kvq_error err = { 0 };
    if (kvq_drift_ref_init(&d.ref, s->n_prompts, s->n_gen, in->n_vocab, in->eos_id, &err))
        return cli_error(s->cmd, "%s", err.msg);
    for (size_t p = 0; p < s->n_prompts; p++) d.steps_total += s->n_prompt[p] + s->n_gen - 1;
    d.steps_total *= (int64_t)(1 + s->n_cfg);
    pthread_mutex_init(&d.lock, NULL);
    d.t0 = kvq_now_seconds();
    fprintf(stderr, "kvq %s: %zu prompt(s) x %d generated tokens, %zu configuration(s), contexts of %d positions, "
            "%d thread(s) x %d job(s)\n", s->cmd, s->n_prompts, s->n_gen, s->n_cfg, s->n_ctx, d.threads, jobs);
    run_phase(&d, reference_job, (int)CLI_MIN((size_t)jobs, s->n_prompts));
    if (!d.ref_failed) {
        char line[160], eta[80];
        eta_text(&d, eta, sizeof eta);
        pthread_mutex_lock(&d.lock);
        snprintf(line, sizeof line, "kvq %s: exact run done (%s)", s->cmd, eta);
        say(&d, line);
        note_eos(&d);
        pthread_mutex_unlock(&d.lock);
        run_phase(&d, config_job, (int)CLI_MIN((size_t)jobs, s->n_cfg));
    }
    if (d.bar_shown) fputs("\r\033[K", stderr);
    pthread_mutex_destroy(&d.lock);
    kvq_drift_ref_free(&d.ref);
    if (d.ref_failed) return 1;
    if (d.n_failed) return cli_error(s->cmd, "%d configuration(s) failed", d.n_failed);
    return 0;
}
