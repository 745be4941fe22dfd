/* cmd_drift.c - `kvq drift` (docs/spec/eval.md §7, docs/drift.md): greedy generation
 * with the exact cache, then every tested cache configuration teacher-
 * forced on the exact run's tokens: KLD per generated position, first
 * divergence, same top-1.  The method lives in src/eval/drift.h; this file is
 * options, checks, the jobs (tools/drift_jobs.c) and the outputs. */
#include "cli.h"
#include "drift_jobs.h"
#include "kvq_eval.h"
#include "engine_cli.h"
#include "svg_png.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *CMD = "drift";

enum { PATH_CAP = 4096, DEFAULT_N_GEN = 256, MAX_N_GEN = 1 << 24 };

typedef struct drift_opts {
    const char *model, *prompt, *prompt_file, *outdir, *types, *pairs, *tails, *rot;
    int n_gen, n_ctx, n_threads, n_jobs, n_prompts;
    bool json, no_mmap;
    bool types_given_ct, tail_flag, rot_flag;   /* cache flags that a grid list replaces */
    cache_flags cache;
} drift_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq drift -m MODEL (-p PROMPT | --prompts FILE) [-n N] [options]\n"
        "Generates N tokens greedily from each prompt with the exact (f32) cache, then\n"
        "runs each tested cache on the same prompts fed the exact run's tokens: KLD at\n"
        "every generated position, the first position whose greedy token differs, and\n"
        "same top-1 (docs/drift.md).\n"
        "  -m, --model FILE      GGUF model\n"
        "  -p, --prompt TEXT     one prompt\n"
        "  --prompts FILE        one prompt per line (blank lines skipped)\n"
        "  --n-prompts K         use only the first K prompts of the file\n"
        "  -n, --n-predict N     tokens generated per prompt (default %d)\n"
        "  -c, --ctx-size N      positions of every cache; a prompt and its N tokens must\n"
        "                        fit (default: the model's trained context)\n"
        "  -t, --threads N       threads in all (default: online cores)\n"
        CLI_NO_MMAP_USAGE
        "  --jobs N              prompts / configurations run at the same time (threads\n"
        "                        shared; default 1); results do not depend on it\n"
        "  --json                one JSON object per configuration instead of the tables\n"
        "  -o, --output DIR      also write drift.md, drift.json, prompts.csv, drift.svg\n"
        "                        (+ drift.png when rsvg-convert exists) into DIR\n"
        "several configurations at once (the exact run is made once), as kvq sweep:\n"
        "  --types LIST          same-type K/V pairs, e.g. q8_0,q4_0\n"
        "  --pairs LIST          mixed pairs K/V, e.g. q8_0/q4_0\n"
        "  --tails LIST          exact-tail lengths, e.g. 0,128\n"
        "  --rot both|on|off     rotation of block-quantised pairs (default on)\n"
        "  without them the one configuration of the cache flags below is tested;\n"
        "  other cache flags (sink, tail type, KVarN iterations) apply to every one.\n",
        DEFAULT_N_GEN);
    cache_flags_usage(f);
}

static bool is_any(const char *a, const char *const *names, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!strcmp(a, names[k])) return true;
    return false;
}

/* Remember the cache flags a grid list would contradict, then parse. */
static int parse_cache_flag(drift_opts *o, int argc, char **argv, int *i) {
    static const char *const types[] = { "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "--cache-type-k-layers",
                                         "--cache-type-v-layers" };
    static const char *const rot[] = { "--attn-rot", "--attn-rot-k", "--attn-rot-v" };
    const char *a = argv[*i];
    o->types_given_ct |= is_any(a, types, CLI_ARRAY_LEN(types));
    o->tail_flag |= !strcmp(a, "--kv-tail-tokens");
    o->rot_flag |= is_any(a, rot, CLI_ARRAY_LEN(rot));
    return cache_flags_parse(CMD, &o->cache, argc, argv, i);
}

static int parse_one(drift_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const cli_model_flags common = { &o->model, NULL, &o->n_ctx, NULL, NULL, &o->n_threads, NULL, &o->no_mmap };
    const char **str = NULL;
    long l;
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    const int r = cli_model_flag(CMD, &common, argc, argv, i);
    if (r) return r;
    if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) str = &o->prompt;
    else if (!strcmp(a, "--prompts")) str = &o->prompt_file;
    else if (!strcmp(a, "-o") || !strcmp(a, "--output")) str = &o->outdir;
    else if (!strcmp(a, "--types")) str = &o->types;
    else if (!strcmp(a, "--pairs")) str = &o->pairs;
    else if (!strcmp(a, "--tails")) str = &o->tails;
    else if (!strcmp(a, "--rot")) str = &o->rot;
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--jobs") || !strcmp(a, "--n-prompts")) {
        const char *v = cli_value(CMD, argc, argv, i);
        const bool jobs = !strcmp(a, "--jobs"), count = !strcmp(a, "--n-prompts");
        if (!v || !cli_flag_long(CMD, a, v, 1, jobs ? 64 : count ? 1L << 24 : MAX_N_GEN, &l)) return -1;
        *(jobs ? &o->n_jobs : count ? &o->n_prompts : &o->n_gen) = (int)l;
        return 1;
    } else return parse_cache_flag(o, argc, argv, i);
    return (*str = cli_value(CMD, argc, argv, i)) ? 1 : -1;
}

static bool grid_mode(const drift_opts *o) { return o->types || o->pairs || o->tails || o->rot; }

/* The option combinations that cannot mean anything. */
static int check_opts(const drift_opts *o) {
    if (!o->model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (o->n_prompts && !o->prompt_file) return cli_error(CMD, "--n-prompts counts the lines of --prompts FILE");
    if (!o->prompt == !o->prompt_file)
        return cli_error(CMD, o->prompt ? "give either -p PROMPT or --prompts FILE, not both"
                                        : "no prompt given (use -p TEXT or --prompts FILE)");
    if ((o->types || o->pairs) && o->types_given_ct)
        return cli_error(CMD, "--types/--pairs list the K/V types; -ctk/-ctv and per-layer types cannot be added");
    if (o->tails && o->tail_flag) return cli_error(CMD, "give the tail with --tails or --kv-tail-tokens, not both");
    if (o->rot && o->rot_flag) return cli_error(CMD, "give the rotation with --rot or --attn-rot*, not both");
    if (o->rot && strcmp(o->rot, "both") && strcmp(o->rot, "on") && strcmp(o->rot, "off"))
        return cli_error(CMD, "--rot: '%s' is not one of both, on, off", o->rot);
    return 0;
}

/* ------------------------------------------------------------ prompts */

/* Read before the model loads: an empty file costs nothing. */
static int read_prompts(const drift_opts *o, drift_prompts *p) {
    if (o->prompt) {
        if (!*o->prompt) return cli_error(CMD, "-p: the prompt is empty");
        return drift_prompts_one(CMD, o->prompt, p);
    }
    return drift_prompts_read(CMD, o->prompt_file, (size_t)o->n_prompts, p);
}

/* ------------------------------------------------------ configurations */

static void name_single(const cache_flags *cf, drift_config *c) {
    char name[KVQ_EVAL_LABEL_MAX], tail[16] = "", sink[16] = "";
    cache_flags_name(cf, name, sizeof name);
    if (cf->params.tail_tokens) snprintf(tail, sizeof tail, " tail%d", cf->params.tail_tokens);
    if (cf->params.sink_tokens) snprintf(sink, sizeof sink, " sink%d", cf->params.sink_tokens);
    snprintf(c->label, sizeof c->label, "%.30s%.12s%.12s%s", name, tail, sink, cf->params.rot.mode == KVQ_ROT_OFF ? " rot-off" : "");
    c->rot_off = cf->params.rot.mode == KVQ_ROT_OFF;
}

static bool lists_type(const kvq_type *types, size_t n, kvq_type t) {
    for (size_t i = 0; i < n; i++)
        if (types[i] == t) return true;
    return false;
}

/* The grid of --types/--pairs/--tails/--rot (kvq sweep's rules; the K/V
 * pair of -ctk/-ctv when no list names types); the f32 reference row only
 * when f32 is listed. */
static int grid_configs(const drift_opts *o, int n_ctx, drift_config **out, size_t *n_out) {
    kvq_error err = { 0 };
    kvq_type *types = NULL;
    kvq_sweep_pair *pairs = NULL, single = { o->cache.params.type_k, o->cache.params.type_v };
    /* without --tails: the tail of the cache flags (auto = 1024, as cache_flags_resolve) */
    int *tails = NULL, no_tail = o->cache.tail_auto ? CLI_MIN(1024, n_ctx) : o->cache.params.tail_tokens;
    size_t n_types = 0, n_pairs = 0, n_tails = 1;
    kvq_status st = o->types ? kvq_sweep_parse_types(o->types, &types, &n_types, &err) : KVQ_OK;
    if (!st && o->pairs) st = kvq_sweep_parse_pairs(o->pairs, &pairs, &n_pairs, &err);
    if (!st && o->tails) st = kvq_sweep_parse_tails(o->tails, &tails, &n_tails, &err);
    const bool listed = o->types || o->pairs;
    const kvq_sweep_rot rot = !o->rot || !strcmp(o->rot, "on") ? KVQ_SWEEP_ROT_ON
                            : !strcmp(o->rot, "off") ? KVQ_SWEEP_ROT_OFF : KVQ_SWEEP_ROT_BOTH;
    kvq_sweep_config *cfg = NULL;
    size_t n_cfg = 0;
    char notes[4096] = "";
    if (!st) {
        kvq_sweep_spec spec = { KVQ_TYPE_F32, types, n_types, listed ? pairs : &single, listed ? n_pairs : 1,
                                tails ? tails : &no_tail, n_tails, rot, n_ctx, notes, sizeof notes };
        st = kvq_sweep_grid(&spec, &cfg, &n_cfg, &err);
    }
    for (const char *line = notes; !st && *line;) {    /* what did not apply, said once */
        const char *nl = strchr(line, '\n');
        const int len = nl ? (int)(nl - line) : (int)strlen(line);
        fprintf(stderr, "kvq drift: note: %.*s\n", len, line);
        line += len + (nl != NULL);
    }
    bool keep_ref = lists_type(types, n_types, KVQ_TYPE_F32);
    for (size_t i = 0; i < n_pairs; i++) keep_ref |= pairs[i].k == KVQ_TYPE_F32 && pairs[i].v == KVQ_TYPE_F32;
    if (!listed) keep_ref = single.k == KVQ_TYPE_F32 && single.v == KVQ_TYPE_F32;
    free(types);
    free(pairs);
    free(tails);
    if (st) { free(cfg); return cli_error(CMD, "%s", err.msg); }
    *out = calloc(n_cfg ? n_cfg : 1, sizeof **out);
    if (!*out) { free(cfg); return cli_error(CMD, "out of memory"); }
    size_t n = 0;
    for (size_t i = 0; i < n_cfg; i++) {
        if (cfg[i].is_reference && !keep_ref) continue;
        drift_config *c = &(*out)[n++];
        c->cache = o->cache;
        c->cache.params.type_k = cfg[i].type_k;
        c->cache.params.type_v = cfg[i].type_v;
        c->cache.params.tail_tokens = cfg[i].tail_tokens;
        c->cache.tail_auto = false;
        c->cache.params.rot.mode = cfg[i].rot;
        c->rot_off = cfg[i].rot == KVQ_ROT_OFF;
        if (o->cache.params.sink_tokens) snprintf(c->label, sizeof c->label, "%.40s sink%d", cfg[i].label, o->cache.params.sink_tokens);
        else snprintf(c->label, sizeof c->label, "%s", cfg[i].label);
    }
    free(cfg);
    *n_out = n;
    return n ? 0 : cli_error(CMD, "the lists give no configuration to test");
}

static int make_configs(const drift_opts *o, int n_ctx, drift_config **out, size_t *n) {
    if (grid_mode(o)) return grid_configs(o, n_ctx, out, n);
    *out = calloc(1, sizeof **out);
    if (!*out) return cli_error(CMD, "out of memory");
    (*out)->cache = o->cache;
    /* an auto tail gets its length before the label; a tail or sink longer
     * than the context is refused here, before the exact run */
    if (!cache_flags_resolve(CMD, &(*out)->cache, n_ctx)) return 1;
    name_single(&(*out)->cache, *out);
    *n = 1;
    return 0;
}

/* ------------------------------------------------------------- outputs */

static void series_of(const kvq_drift_row *r, kvq_drift_series *s, int *lo, int *hi, double *y) {
    s->label = r->label;
    s->colour_key = r->colour_key;
    s->dash = r->tail_tokens && r->rot_off ? KVQ_DASH_DASHDOT : r->tail_tokens ? KVQ_DASH_DOTTED
            : r->rot_off ? KVQ_DASH_DASHED : KVQ_DASH_SOLID;
    s->lo = lo;
    s->hi = hi;
    s->y = y;
    s->n = kvq_drift_curve(&r->run, lo, hi, y, KVQ_DRIFT_CURVE_MAX);
    s->median_first_div = r->sum.median_first_div;
}

static int write_plot(const char *dir, const kvq_drift_row *rows, size_t n, const drift_opts *o, int n_gen,
                      size_t n_prompts, bool *png) {
    kvq_drift_series *s = calloc(n ? n : 1, sizeof *s);
    int *lo = malloc((n ? n : 1) * KVQ_DRIFT_CURVE_MAX * sizeof *lo), *hi = malloc((n ? n : 1) * KVQ_DRIFT_CURVE_MAX * sizeof *hi);
    double *y = malloc((n ? n : 1) * KVQ_DRIFT_CURVE_MAX * sizeof *y);
    int rc = s && lo && hi && y ? 0 : cli_error(CMD, "out of memory");
    size_t m = 0;
    for (size_t i = 0; !rc && i < n; i++)
        if (rows[i].done) {
            series_of(&rows[i], &s[m], lo + m * KVQ_DRIFT_CURVE_MAX, hi + m * KVQ_DRIFT_CURVE_MAX, y + m * KVQ_DRIFT_CURVE_MAX);
            m++;
        }
    char title[200], svg[PATH_CAP], pngp[PATH_CAP];
    const char *slash = strrchr(o->model, '/');
    snprintf(title, sizeof title, "KLD vs generated position: %.80s, %zu prompt%s x %d tokens", slash ? slash + 1 : o->model,
             n_prompts, n_prompts == 1 ? "" : "s", n_gen);
    snprintf(svg, sizeof svg, "%s/drift.svg", dir);
    snprintf(pngp, sizeof pngp, "%s/drift.png", dir);
    kvq_error err = { 0 };
    if (!rc && kvq_plot_drift_save(svg, s, m, n_gen, title, &err)) rc = cli_error(CMD, "%s", err.msg);
    if (!rc) {
        kvq_status st = cli_svg_to_png(svg, pngp, &err);
        *png = st == KVQ_OK;
        if (st == KVQ_ERR_UNSUPPORTED) fprintf(stderr, "kvq drift: note: no drift.png (%s)\n", err.msg);
        else if (st) fprintf(stderr, "kvq drift: warning: no drift.png: %s\n", err.msg);
    }
    free(s); free(lo); free(hi); free(y);
    return rc;
}

typedef enum out_kind { OUT_MD, OUT_JSON, OUT_CSV } out_kind;

static int write_file(const char *dir, const char *name, out_kind kind, const kvq_drift_row *rows, size_t n,
                      const kvq_drift_meta *meta) {
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CMD, "cannot create '%s': %s", path, strerror(errno));
    kvq_error err = { 0 };
    kvq_status st = kind == OUT_MD ? kvq_drift_write_md(f, rows, n, meta, true, &err)
                  : kind == OUT_JSON ? kvq_drift_write_json(f, rows, n, meta, &err)
                  : kvq_drift_write_prompts_csv(f, rows, n, &err);
    if (fclose(f) != 0 && !st) st = kvq_fail(&err, KVQ_ERR_IO, "cannot write '%s'", path);
    return st ? cli_error(CMD, "%s", err.msg) : 0;
}

static int write_outputs(const drift_opts *o, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                         int n_gen, size_t n_prompts) {
    kvq_error err = { 0 };
    if (o->json) {
        for (size_t i = 0; i < n; i++)
            if (rows[i].done && kvq_drift_write_json_row(stdout, &rows[i], meta, &err)) return cli_error(CMD, "%s", err.msg);
    } else if (kvq_drift_write_md(stdout, rows, n, meta, n == 1, &err)) {
        return cli_error(CMD, "%s", err.msg);
    }
    fflush(stdout);
    if (!o->outdir) return 0;
    if (mkdir(o->outdir, 0777) != 0 && errno != EEXIST)
        return cli_error(CMD, "cannot create directory '%s': %s", o->outdir, strerror(errno));
    bool png = false;
    int rc = write_file(o->outdir, "drift.md", OUT_MD, rows, n, meta);
    if (!rc) rc = write_file(o->outdir, "drift.json", OUT_JSON, rows, n, meta);
    if (!rc) rc = write_file(o->outdir, "prompts.csv", OUT_CSV, rows, n, meta);
    if (!rc) rc = write_plot(o->outdir, rows, n, o, n_gen, n_prompts, &png);
    if (!rc) fprintf(stderr, "kvq drift: wrote drift.md, drift.json, prompts.csv, drift.svg%s in %s\n",
                     png ? ", drift.png" : "", o->outdir);
    return rc;
}

/* ---------------------------------------------------------------- main */

static int run(drift_opts *o, drift_prompts *ps) {
    if (o->outdir && cli_check_output_dir(CMD, o->outdir)) return 1;
    if (read_prompts(o, ps)) return 1;
    kvq_model *m = cli_load_model(CMD, o->model, o->no_mmap);
    if (!m) return 1;
    kvq_calib *cal = NULL;   /* --calib: every configuration's cache copies it */
    kvq_error cerr = { 0 };
    if (o->cache.calib_path && kvq_calib_load(o->cache.calib_path, m, &cal, &cerr) != KVQ_OK) {
        kvq_model_free(m);
        return cli_error(CMD, "--calib: %s", cerr.msg);
    }
    o->cache.params.calib = cal;
    const kvq_model_info *in = kvq_model_get_info(m);
    const int limit = o->n_ctx ? o->n_ctx : in->n_ctx_train > 0 ? in->n_ctx_train : 4096;
    drift_config *cfg = NULL;
    kvq_drift_row *rows = NULL;
    size_t n_cfg = 0;
    int rc = 0;
    if (o->n_gen >= limit)
        rc = cli_error(CMD, "-n %d: %d generated tokens and a prompt do not fit a context of %d positions (-c; the "
                       "model was trained for %d)", o->n_gen, o->n_gen, limit, in->n_ctx_train);
    if (!rc) rc = drift_prompts_tokenize(CMD, m, ps, o->prompt_file, o->n_gen, limit);
    const int n_ctx = limit;   /* every cache holds the whole context, as in the other commands */
    if (!rc) rc = make_configs(o, n_ctx, &cfg, &n_cfg);
    if (!rc && !(rows = calloc(n_cfg, sizeof *rows))) rc = cli_error(CMD, "out of memory");
    if (!rc) {
        drift_job_spec spec = { CMD, m, (const int32_t *const *)ps->tokens, ps->n_tokens, ps->n, o->n_gen, n_ctx,
                                o->n_threads, o->n_jobs, cfg, n_cfg, n_cfg == 1 };
        int threads = 0;
        rc = drift_run_jobs(&spec, rows, &threads);
        const kvq_drift_meta meta = { o->model, o->prompt_file, n_ctx, threads };
        size_t n_done = 0;
        for (size_t i = 0; i < n_cfg; i++) n_done += rows[i].done;
        if (n_done) {
            int orc = write_outputs(o, rows, n_cfg, &meta, o->n_gen, ps->n);
            rc = rc ? rc : orc;
        }
    }
    for (size_t i = 0; rows && i < n_cfg; i++) kvq_drift_run_free(&rows[i].run);
    free(rows);
    free(cfg);
    o->cache.params.calib = NULL;
    kvq_calib_free(cal);
    kvq_model_free(m);
    return rc;
}

int cmd_drift(int argc, char **argv) {
    drift_opts o = { .n_gen = DEFAULT_N_GEN, .n_jobs = 1 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq drift --help)", argv[i]);
    }
    if (check_opts(&o)) return 1;
    drift_prompts ps = { 0 };
    int rc = run(&o, &ps);
    drift_prompts_free(&ps);
    return rc;
}
