/* cmd_sweep.c - `kvq sweep` (docs/spec/eval.md §4): run the exact reference once,
 * then every cache configuration of the grid against it, and write the
 * table, CSV, JSON, recommendation ladder and plot into OUTDIR.
 *
 * OUTDIR layout:
 *   reference.kvqb     the reference's exact log-probs (base_kvq.h format;
 *                      reference.act-int8.kvqb and runs/SLUG.act-int8.srcID.csv
 *                      with --act int8)
 *   runs/SLUG.srcID.csv  one finished configuration (a row of results.csv)
 *                      of the build whose sources hash to ID (kvq_source_id)
 *   table.md results.csv results.json ladder.md plot.svg [plot.png]
 * Resuming: a run whose runs/SLUG.srcID.csv exists is not repeated; the
 * reference is reused when it matches this model, text, context and chunk
 * count (otherwise the sweep stops rather than mix two experiments). */
#include "kvq_eval.h"
#include "cli.h"
#include "engine_cli.h"
#include "svg_png.h"
#include "sweep_drift.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *CMD = "sweep";

enum { TG_STEPS = 32, PATH_CAP = 4096 };

/* The mixed pairs run by default (docs/spec/eval.md §4) when their types exist. */
static const char *const DEFAULT_PAIRS[] = { "q8_0/q4_0", "q8_0/turbo3", "kvarn4/kvarn3" };
static const char *const DEFAULT_TAILS = "0,128";

typedef struct sweep_opts {
    const char *model, *text, *outdir, *types, *pairs, *tails;
    int n_ctx, n_batch, n_chunks, n_threads, n_jobs;
    kvq_sweep_rot rot;
    kvq_type ref_type;
    int drift_n;                  /* --drift N: generated tokens per prompt, 0 = none */
    const char *drift_prompts;
    kvq_ladder_rank rank;
    const char *calib;            /* --calib FILE: the calibrated types join the grid */
    kvq_act act;                  /* --act: every run's and the reference's activations */
    bool no_mmap;                 /* --no-mmap */
} sweep_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq sweep -m MODEL -f TEXT -o OUTDIR [options]\n"
        "Runs the exact reference once, then every cache configuration against it, and\n"
        "writes table.md, results.csv, results.json, ladder.md and plot.svg (+ plot.png\n"
        "when rsvg-convert exists) into OUTDIR.  Finished configurations are kept in\n"
        "OUTDIR/runs and not run again.\n"
        "  -m, --model FILE      GGUF model\n"
        "  -f, --file FILE       evaluation text\n"
        "  -o, --output DIR      output directory (created)\n"
        "  -c, --ctx-size N      chunk length (default 512)\n"
        "  -b, --batch-size N    tokens per evaluation batch (default 512, at most the chunk)\n"
        "  --chunks N            use at most N chunks of the text\n"
        "  --types LIST          same-type K/V pairs, e.g. q8_0,q4_0 (default: every cache type)\n"
        "  --pairs LIST|none     mixed pairs K/V, e.g. q8_0/q4_0 (default: q8_0/q4_0,\n"
        "                        q8_0/turbo3, kvarn4/kvarn3 where those types exist)\n"
        "  --tails LIST          exact-tail lengths, at most the context (default 0,128; KVarN:\n"
        "                        whole 128-token tiles)\n"
        "  --rot both|on|off     rotation of block-quantised pairs (default both)\n"
        "  --ref-type TYPE       exact cache of the reference (default f32)\n"
        "  -t, --threads N       threads in all (default: online cores)\n"
        CLI_NO_MMAP_USAGE
        "  --jobs N              configurations run at the same time (threads shared; default 1)\n"
        "  --drift N             also generate N tokens greedily per drift prompt with every\n"
        "                        configuration: columns first divergence and drift KLD\n"
        "                        (docs/drift.md; measured again on every run)\n"
        "  --drift-prompts FILE  one prompt per line (default: %d windows of %d tokens of -f)\n"
        "  --rank median_kld|drift_kld|first_div   what the ladder weighs against size\n"
        "                        (default median_kld; the drift ones need --drift)\n"
        "  --calib FILE          the model's calibration (kvq calibrate): the calibrated types\n"
        "                        cal225 ... cal425 join the default types (docs/calibration.md)\n"
        "  --act f32|int8|query8 activations of the q8_0/q4_0/K-quant weight products and a\n"
        "                        q4_0/q4_1/kvarn4/turbo*_tcq K's query (query8: that query alone), the\n"
        "                        reference's too (default f32; int8 and query8 results are\n"
        "                        kept apart in OUTDIR, not mixed with f32 ones; not with --drift)\n",
        SWEEP_DRIFT_WINDOWS, SWEEP_DRIFT_WINDOW_TOKENS);
}

static int parse_args(sweep_opts *o, int argc, char **argv) {
    const cli_model_flags common = { &o->model, &o->text, &o->n_ctx, &o->n_batch, &o->n_chunks, &o->n_threads, &o->act, &o->no_mmap };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        const char **str = NULL;
        int *num = NULL;
        long l;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        const int r = cli_model_flag(CMD, &common, argc, argv, &i);
        if (r < 0) return -1;
        if (r) continue;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) str = &o->outdir;
        else if (!strcmp(a, "--types")) str = &o->types;
        else if (!strcmp(a, "--pairs")) str = &o->pairs;
        else if (!strcmp(a, "--tails")) str = &o->tails;
        else if (!strcmp(a, "--jobs")) num = &o->n_jobs;
        else if (!strcmp(a, "--drift")) num = &o->drift_n;
        else if (!strcmp(a, "--drift-prompts")) str = &o->drift_prompts;
        else if (!strcmp(a, "--calib")) str = &o->calib;
        else if (!strcmp(a, "--rot") || !strcmp(a, "--ref-type") || !strcmp(a, "--rank")) { /* handled below */ }
        else {
            cli_error(CMD, "unknown option '%s' (see kvq sweep --help)", a);
            return -1;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return -1;
        if (str) { *str = v; continue; }
        if (num) {   /* --jobs, --drift */
            if (!cli_flag_long(CMD, a, v, 1, num == &o->drift_n ? 1L << 24 : 64, &l)) return -1;
            *num = (int)l;
            continue;
        }
        if (!strcmp(a, "--rot")) {
            if (!strcmp(v, "both")) o->rot = KVQ_SWEEP_ROT_BOTH;
            else if (!strcmp(v, "on")) o->rot = KVQ_SWEEP_ROT_ON;
            else if (!strcmp(v, "off")) o->rot = KVQ_SWEEP_ROT_OFF;
            else { cli_error(CMD, "--rot: '%s' is not one of both, on, off", v); return -1; }
        } else if (!strcmp(a, "--rank")) {
            if (!kvq_ladder_rank_parse(v, &o->rank)) {
                cli_error(CMD, "--rank: '%s' is not one of median_kld, drift_kld, first_div", v);
                return -1;
            }
        } else if (!cli_parse_type(CMD, v, true, &o->ref_type)) {
            return -1;
        }
    }
    if (!o->model) { cli_error(CMD, "no model given (use -m MODEL.gguf)"); return -1; }
    if (!o->text) { cli_error(CMD, "no text given (use -f TEXT)"); return -1; }
    if (!o->outdir) { cli_error(CMD, "no output directory given (use -o OUTDIR)"); return -1; }
    if (!o->drift_n && (o->drift_prompts || o->rank != KVQ_RANK_MEDIAN_KLD)) {
        cli_error(CMD, "%s needs --drift N", o->drift_prompts ? "--drift-prompts" : "--rank drift_kld/first_div");
        return -1;
    }
    if (o->drift_n && o->act != KVQ_ACT_F32) {   /* the drift runs (drift_jobs.c) generate with f32 */
        cli_error(CMD, "--act %s with --drift: the drift runs have f32 activations only", cli_act_name(o->act));
        return -1;
    }
    return 1;
}

/* ------------------------------------------------------------ the grid */

/* Default same-type list: every cache type kvq has, the calibrated ones
 * when there is a calibration (they need the model's). */
static kvq_status default_types(bool calibrated, kvq_type **out, size_t *n, kvq_error *err) {
    *out = malloc(KVQ_TYPE_COUNT * sizeof **out);
    *n = 0;
    if (!*out) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)t);
        if (tr->is_cache_type && (calibrated || !tr->calib_rate)) (*out)[(*n)++] = (kvq_type)t;
    }
    return KVQ_OK;
}

/* Default mixed pairs: those whose types this build has (noted if not). */
static kvq_status default_pairs(kvq_sweep_pair **out, size_t *n, kvq_error *err) {
    *out = malloc(CLI_ARRAY_LEN(DEFAULT_PAIRS) * sizeof **out);
    *n = 0;
    if (!*out) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < CLI_ARRAY_LEN(DEFAULT_PAIRS); i++) {
        kvq_sweep_pair *p = NULL;
        size_t np = 0;
        if (kvq_sweep_parse_pairs(DEFAULT_PAIRS[i], &p, &np, NULL) == KVQ_OK) (*out)[(*n)++] = p[0];
        else fprintf(stderr, "kvq sweep: note: default pair %s skipped (type not in this build)\n", DEFAULT_PAIRS[i]);
        free(p);
    }
    return KVQ_OK;
}

static int build_grid(const sweep_opts *o, int n_ctx, kvq_sweep_config **cfg, size_t *n_cfg) {
    kvq_error err = { 0 };
    kvq_type *types = NULL;
    kvq_sweep_pair *pairs = NULL;
    int *tails = NULL;
    size_t n_types = 0, n_pairs = 0, n_tails = 0;
    kvq_status st = o->types ? kvq_sweep_parse_types(o->types, &types, &n_types, &err)
                             : default_types(o->calib != NULL, &types, &n_types, &err);
    if (st == KVQ_OK)
        st = !o->pairs                ? default_pairs(&pairs, &n_pairs, &err)
             : !strcmp(o->pairs, "none") ? KVQ_OK
                                         : kvq_sweep_parse_pairs(o->pairs, &pairs, &n_pairs, &err);
    if (st == KVQ_OK) st = kvq_sweep_parse_tails(o->tails ? o->tails : DEFAULT_TAILS, &tails, &n_tails, &err);
    if (st == KVQ_OK) {
        char notes[4096] = "";
        kvq_sweep_spec spec = { o->ref_type, types, n_types, pairs, n_pairs, tails, n_tails, o->rot, n_ctx,
                                notes, sizeof notes };
        st = kvq_sweep_grid(&spec, cfg, n_cfg, &err);
        for (const char *line = notes; st == KVQ_OK && *line;) {    /* what did not apply, said once */
            const char *nl = strchr(line, '\n');
            const int len = nl ? (int)(nl - line) : (int)strlen(line);
            fprintf(stderr, "kvq sweep: note: %.*s\n", len, line);
            line += len + (nl != NULL);
        }
        if (st == KVQ_OK) fprintf(stderr, "kvq sweep: %zu configurations (the reference included)\n", *n_cfg);
    }
    free(types);
    free(pairs);
    free(tails);
    return st == KVQ_OK ? 0 : cli_error(CMD, "%s", err.msg);
}

/* ----------------------------------------------------------- the state */

typedef struct sweep {
    const sweep_opts *o;
    kvq_model *m;
    const kvq_model_info *info;
    uint64_t model_hash;
    int32_t *tokens;
    int n_ctx, n_chunk, n_batch, bos, threads_per_job;
    kvq_base_kvq *base;
    kvq_sweep_config *cfg;
    size_t n_cfg;
    kvq_eval_row *rows;
    bool *pending, *failed;
    /* work queue and progress, shared by the jobs */
    pthread_mutex_t lock;
    size_t next;
    int n_to_run, n_started, n_finished;
    double t_start;
    drift_prompts drift;          /* --drift: the prompts, checked in setup */
    kvq_calib *calib;             /* --calib, loaded in setup; each cache copies it */
} sweep;

static void path_in(char *buf, const sweep *s, const char *rel) {
    snprintf(buf, PATH_CAP, "%s/%s", s->o->outdir, rel);
}

/* A calibrated configuration's result belongs to its calibration too:
 * its file name carries the calibration's checksum. */
/* Results with activations other than f32 carry ".act-NAME" (".act-int8",
 * ".act-query8"; the reference's file too), so that a sweep with other
 * activations never reuses them. */
typedef struct act_tag { char s[24]; } act_tag;
static act_tag act_suffix(const sweep *s) {
    act_tag t = { "" };
    if (s->o->act != KVQ_ACT_F32) snprintf(t.s, sizeof t.s, ".act-%s", cli_act_name(s->o->act));
    return t;
}

/* A stored result belongs to the build that made it, too: its file name
 * ends in ".src" and the sources' hash (kvq_source_id), so a rebuilt kvq
 * (other kernels, other roundings: other numbers) runs every
 * configuration again instead of mixing two builds' figures in one
 * table. */
static void run_path(char *buf, const sweep *s, const kvq_sweep_config *c) {
    const bool cal = kvq_type_get(c->type_k)->calib_rate || kvq_type_get(c->type_v)->calib_rate;
    kvq_calib_info ci;
    kvq_calib_get_info(s->calib, &ci);
    if (cal && s->calib)
        snprintf(buf, PATH_CAP, "%s/runs/%s.cal%016llx%s.src%s.csv", s->o->outdir, c->slug,
                 (unsigned long long)ci.checksum, act_suffix(s).s, kvq_source_id());
    else snprintf(buf, PATH_CAP, "%s/runs/%s%s.src%s.csv", s->o->outdir, c->slug, act_suffix(s).s, kvq_source_id());
}

static int make_dir(const char *path) {
    struct stat st;
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return cli_error(CMD, "cannot create directory '%s': %s", path, strerror(errno));
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_error(CMD, "'%s' exists and is not a directory", path);
    return 0;
}

/* The cache parameters of configuration c at n_ctx positions: the same
 * for the context a run creates and for the sizes reported for it. */
static void sweep_params(const sweep *s, const kvq_sweep_config *c, int n_ctx, cache_flags *cf) {
    cache_flags_init(cf);
    kvq_cache_params *p = &cf->params;
    p->type_k = c->type_k;
    p->type_v = c->type_v;
    p->tail_tokens = c->tail_tokens;
    p->rot.mode = c->rot;
    cache_flags_resolve(CMD, cf, n_ctx);   /* tails were checked against the context with the grid */
    p->max_batch = s->n_batch;
    p->calib = s->calib;
}

static kvq_ctx *make_ctx(const sweep *s, const kvq_sweep_config *c, kvq_error *err) {
    cache_flags cf;
    sweep_params(s, c, s->n_ctx, &cf);
    kvq_ctx *ctx = NULL;
    if (kvq_ctx_create(s->m, &cf.params, s->threads_per_job, &ctx, err) != KVQ_OK) return NULL;
    if (kvq_ctx_set_activations(ctx, s->o->act, err) != KVQ_OK) {
        kvq_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

/* -------------------------------------------------------- the reference */

static kvq_status save_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    (void)index;
    (void)next;
    return kvq_base_kvq_writer_add(ud, logits, err);
}

static kvq_status write_reference(sweep *s, const char *path, kvq_error *err) {
    kvq_ctx *ctx = make_ctx(s, &s->cfg[0], err);
    if (!ctx) return err->code ? err->code : KVQ_ERR_ARG;
    kvq_base_kvq_writer *w = NULL;
    kvq_status st = kvq_base_kvq_writer_open(path, s->model_hash, s->n_ctx, s->info->n_vocab, s->n_chunk, s->tokens,
                                             &w, err);
    kvq_chunk_run run = { s->tokens, s->n_ctx, s->n_chunk, s->n_batch, s->bos };
    double t0 = kvq_now_seconds();
    if (st == KVQ_OK) st = kvq_eval_chunks(ctx, &run, save_token, w, NULL, err);
    kvq_error cerr = { 0 };
    kvq_status cst = w ? kvq_base_kvq_writer_close(w, &cerr) : KVQ_OK;
    if (st == KVQ_OK && cst != KVQ_OK) { st = cst; *err = cerr; }
    kvq_ctx_free(ctx);
    if (st == KVQ_OK)
        fprintf(stderr, "kvq sweep: reference (%s) written to %s in %.1f s\n", s->cfg[0].label, path,
                kvq_now_seconds() - t0);
    return st;
}

/* Reuse OUTDIR/reference.kvqb when it belongs to this experiment; make it
 * when absent or unreadable; refuse to mix experiments. */
static int ensure_reference(sweep *s) {
    char path[PATH_CAP];
    char name[64];
    snprintf(name, sizeof name, "reference%s.kvqb", act_suffix(s).s);
    path_in(path, s, name);
    kvq_error err = { 0 };
    if (access(path, F_OK) == 0) {
        kvq_status st = kvq_base_kvq_open(path, &s->base, &err);
        if (st == KVQ_ERR_FORMAT) {
            fprintf(stderr, "kvq sweep: note: %s; making the reference again\n", err.msg);
        } else if (st != KVQ_OK) {
            return cli_error(CMD, "%s", err.msg);
        } else {
            kvq_base_info bi;
            kvq_base_kvq_get_info(s->base, &bi);
            st = kvq_base_kvq_check_model(s->base, s->model_hash, &err);
            if (st == KVQ_OK && bi.n_chunk != s->n_chunk)
                st = kvq_fail(&err, KVQ_ERR_ARG, "the KLD base holds %d chunks, this run uses %d", bi.n_chunk,
                              s->n_chunk);
            if (st == KVQ_OK)
                st = kvq_base_kvq_check_tokens(s->base, s->tokens, (size_t)s->n_ctx * s->n_chunk, s->n_ctx,
                                               s->n_chunk, &err);
            if (st != KVQ_OK)
                return cli_error(CMD, "'%s' belongs to another experiment: %s (use another -o, or delete the "
                                 "directory)", s->o->outdir, err.msg);
            fprintf(stderr, "kvq sweep: reusing the reference in %s\n", path);
            return 0;
        }
    }
    if (write_reference(s, path, &err) != KVQ_OK) return cli_error(CMD, "reference run: %s", err.msg);
    if (kvq_base_kvq_open(path, &s->base, &err) != KVQ_OK) return cli_error(CMD, "%s", err.msg);
    return 0;
}

/* ------------------------------------------------------ one configuration */

/* Generation speed: prefill half a chunk, then time single-token steps. */
static kvq_status measure_tg(const sweep *s, kvq_ctx *ctx, double *tps, kvq_error *err) {
    const int n_prompt = s->n_ctx / 2, steps = CLI_MIN(TG_STEPS, s->n_ctx - n_prompt);
    const int batch = kvq_ctx_max_batch(ctx);
    kvq_cache_clear(kvq_ctx_cache(ctx));
    kvq_status st = KVQ_OK;
    for (int pos = 0; st == KVQ_OK && pos < n_prompt; pos += batch)
        st = kvq_ctx_eval(ctx, s->tokens + pos, CLI_MIN(batch, n_prompt - pos), pos, NULL, false, err);
    float *logits = st == KVQ_OK ? malloc((size_t)s->info->n_vocab * sizeof *logits) : NULL;
    if (st == KVQ_OK && !logits) st = kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    double t0 = kvq_now_seconds();
    for (int k = 0; st == KVQ_OK && k < steps; k++)
        st = kvq_ctx_eval(ctx, s->tokens + n_prompt + k, 1, n_prompt + k, logits, true, err);
    double dt = kvq_now_seconds() - t0;
    free(logits);
    *tps = st == KVQ_OK && dt > 0 ? steps / dt : NAN;
    return st;
}

/* KV bytes of one configuration at n_ctx positions, as the cache lays
 * them out (cli_kv_bytes: the cache's own layout code, so every type's
 * exact rows count, KVarN's first tile and incomplete tile included),
 * with the cache parameters make_ctx would use. */
static double cache_bytes_at(const sweep *s, const kvq_sweep_config *c, int n_ctx) {
    cache_flags cf;
    sweep_params(s, c, n_ctx, &cf);
    return cli_kv_bytes(s->info, &cf.params, n_ctx);
}

static void fill_row(const sweep *s, const kvq_sweep_config *c, kvq_ctx *ctx, const kvq_kld_summary *sum,
                     double pp_tps, double tg_tps, kvq_eval_row *r) {
    const kvq_cache *cache = kvq_ctx_cache(ctx);
    kvq_cache_bytes b;
    kvq_cache_memory(cache, &b);
    const kvq_rot_plan *rot = kvq_cache_rotation(cache);
    const kvq_sweep_config bf16 = { .type_k = KVQ_TYPE_BF16, .type_v = KVQ_TYPE_BF16 };
    const int n_full = s->info->n_ctx_train > 0 ? s->info->n_ctx_train : s->n_ctx;

    r->rot_k = rot ? rot->block_k : 0;
    r->rot_v = rot ? rot->block_v : 0;
    r->n_tokens = (double)sum->n;
    r->kv_bytes = (double)b.total;
    r->work_bytes = (double)b.work;
    r->kv_bytes_bf16 = cache_bytes_at(s, &bf16, s->n_ctx);
    r->size_pct = 100.0 * r->kv_bytes / r->kv_bytes_bf16;
    r->mib = cache_bytes_at(s, c, n_full) / (1024.0 * 1024.0);
    r->mean_kld = sum->mean_kld;
    r->mean_kld_se = sum->mean_kld_se;
    r->median_kld = sum->median_kld;
    r->p90_kld = sum->p_kld[4];      /* levels: .001 .01 .05 .10 .90 .95 .99 .999 */
    r->p99_kld = sum->p_kld[6];
    r->p99_9_kld = sum->p_kld[7];
    r->max_kld = sum->max_kld;
    r->same_top_p = 100.0 * sum->same_top;       /* percent, as kvq kld --json */
    r->same_top_se = 100.0 * sum->same_top_se;
    r->rms_dp = 100.0 * sum->rms_dp;             /* percent, as kvq kld --json */
    r->ppl_q = sum->ppl_q;
    r->ppl_q_se = sum->ppl_q_se;
    r->ppl_base = sum->ppl_base;
    r->pp_tps = pp_tps;
    r->tg_tps = tg_tps;
}

static kvq_status run_config(const sweep *s, const kvq_sweep_config *c, kvq_eval_row *r, kvq_error *err) {
    kvq_ctx *ctx = make_ctx(s, c, err);
    if (!ctx) return err->code ? err->code : KVQ_ERR_ARG;
    kvq_kld_ref ref;
    kvq_kld_ref_from_exact(&ref, s->base);
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, &ref);
    kvq_chunk_run run = { s->tokens, s->n_ctx, s->n_chunk, s->n_batch, s->bos };
    double secs = 0, tg = NAN;
    kvq_kld_summary sum;
    kvq_status st = kvq_eval_chunks(ctx, &run, kvq_kld_acc_token, &acc, &secs, err);
    if (st == KVQ_OK) st = measure_tg(s, ctx, &tg, err);
    if (st == KVQ_OK) st = kvq_kld_summarize(&acc.stats, &sum, err);
    if (st == KVQ_OK) fill_row(s, c, ctx, &sum, secs > 0 ? (double)s->n_ctx * s->n_chunk / secs : NAN, tg, r);
    kvq_kld_acc_free(&acc);
    kvq_ctx_free(ctx);
    return st;
}

/* ------------------------------------------------------------- the jobs */

static void init_row(kvq_eval_row *r, const kvq_sweep_config *c) {
    kvq_eval_row_init(r);
    kvq_eval_copy_str(r->label, sizeof r->label, c->label);
    kvq_eval_copy_str(r->cache_k, sizeof r->cache_k, kvq_type_name(c->type_k));
    kvq_eval_copy_str(r->cache_v, sizeof r->cache_v, kvq_type_name(c->type_v));
    r->tail_tokens = c->tail_tokens;
    r->is_reference = c->is_reference;
}

/* A stored result counts when it holds exactly this configuration. */
static bool load_stored(const sweep *s, const kvq_sweep_config *c, kvq_eval_row *r) {
    char path[PATH_CAP];
    run_path(path, s, c);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    kvq_eval_row *rows = NULL;
    size_t n = 0;
    kvq_error err = { 0 };
    bool ok = kvq_report_read_csv(f, &rows, &n, &err) == KVQ_OK && n == 1 && !strcmp(rows[0].label, c->label);
    fclose(f);
    if (ok) *r = rows[0];
    else fprintf(stderr, "kvq sweep: note: %s unusable (%s); running it again\n", path, err.msg[0] ? err.msg : "other row");
    free(rows);
    return ok;
}

static void *job_main(void *arg) {
    sweep *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (s->next < s->n_cfg && !s->pending[s->next]) s->next++;
        if (s->next == s->n_cfg) { pthread_mutex_unlock(&s->lock); return NULL; }
        size_t i = s->next++;
        char line[256];
        kvq_progress_format(line, sizeof line, ++s->n_started, s->n_to_run, s->cfg[i].label,
                            kvq_now_seconds() - s->t_start, s->n_finished);
        fprintf(stderr, "%s\n", line);
        pthread_mutex_unlock(&s->lock);

        kvq_error err = { 0 };
        kvq_eval_row r = s->rows[i];
        double t0 = kvq_now_seconds();
        kvq_status st = run_config(s, &s->cfg[i], &r, &err);
        char path[PATH_CAP];
        run_path(path, s, &s->cfg[i]);
        kvq_error werr = { 0 };
        kvq_status wst = st == KVQ_OK ? kvq_report_save(path, KVQ_REPORT_CSV, &r, 1, NULL, &werr) : KVQ_OK;

        pthread_mutex_lock(&s->lock);
        s->n_finished++;
        s->rows[i] = r;
        s->failed[i] = st != KVQ_OK;
        if (st != KVQ_OK) cli_error(CMD, "%s: %s", s->cfg[i].label, err.msg);
        else if (wst != KVQ_OK) fprintf(stderr, "kvq sweep: warning: %s (the result will not be resumed)\n", werr.msg);
        else fprintf(stderr, "       %s: median KLD %.6f, size %.2f%% (%.1f s)\n", s->cfg[i].label, r.median_kld,
                     r.size_pct, kvq_now_seconds() - t0);
        pthread_mutex_unlock(&s->lock);
    }
}

static int run_pending(sweep *s) {
    s->t_start = kvq_now_seconds();
    int jobs = CLI_MAX(1, CLI_MIN(s->o->n_jobs, s->n_to_run));
    pthread_t tid[64];
    int started = 0;
    for (int j = 1; j < jobs; j++) {
        if (pthread_create(&tid[started], NULL, job_main, s) != 0) break;
        started++;
    }
    job_main(s);
    for (int j = 0; j < started; j++) pthread_join(tid[j], NULL);
    return 0;
}

/* ------------------------------------------------------------- outputs */

static int write_outputs(sweep *s) {
    kvq_eval_rows_precision(s->rows, s->n_cfg);
    kvq_report_meta meta = { s->o->model, s->o->text, s->n_ctx, s->n_chunk, cli_act_name(s->o->act) };
    kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    kvq_plot_opts po;
    kvq_plot_opts_default(&po);
    char title[160];
    const char *slash = strrchr(s->o->model, '/');
    snprintf(title, sizeof title, "KV-cache quality vs size: %s, ctx %d", slash ? slash + 1 : s->o->model, s->n_ctx);
    po.title = title;

    char path[PATH_CAP], svg[PATH_CAP];
    kvq_error err = { 0 };
    static const struct { const char *name; kvq_report_kind kind; } files[] = {
        { "table.md", KVQ_REPORT_MD }, { "results.csv", KVQ_REPORT_CSV }, { "results.json", KVQ_REPORT_JSON },
    };
    for (size_t k = 0; k < CLI_ARRAY_LEN(files); k++) {
        path_in(path, s, files[k].name);
        if (kvq_report_save(path, files[k].kind, s->rows, s->n_cfg, &meta, &err) != KVQ_OK)
            return cli_error(CMD, "%s", err.msg);
    }
    path_in(path, s, "ladder.md");
    FILE *f = fopen(path, "w");
    if (!f) return cli_error(CMD, "cannot create '%s': %s", path, strerror(errno));
    kvq_status st = kvq_ladder_write_md_by(f, s->rows, s->n_cfg, &th, s->o->rank, &err);
    if (fclose(f) != 0 && st == KVQ_OK) st = kvq_fail(&err, KVQ_ERR_IO, "cannot write '%s'", path);
    if (st != KVQ_OK) return cli_error(CMD, "%s", err.msg);
    path_in(svg, s, "plot.svg");
    if (kvq_plot_svg_save(svg, s->rows, s->n_cfg, &th, &po, &err) != KVQ_OK) return cli_error(CMD, "%s", err.msg);
    path_in(path, s, "plot.png");
    st = cli_svg_to_png(svg, path, &err);
    if (st == KVQ_ERR_UNSUPPORTED) fprintf(stderr, "kvq sweep: note: no plot.png (%s)\n", err.msg);
    else if (st != KVQ_OK) fprintf(stderr, "kvq sweep: warning: no plot.png: %s\n", err.msg);

    /* print the full table, then the ladder: the answer most readers want */
    kvq_report_write_md(stdout, s->rows, s->n_cfg, &meta, NULL);
    printf("\n");
    kvq_ladder_write_md_by(stdout, s->rows, s->n_cfg, &th, s->o->rank, NULL);
    fprintf(stderr, "kvq sweep: wrote table.md, results.csv, results.json, ladder.md, plot.svg%s in %s\n",
            st == KVQ_OK ? ", plot.png" : "", s->o->outdir);
    return 0;
}

/* ---------------------------------------------------------------- main */

static int prepare_tokens(sweep *s) {
    int n_tok = 0;
    s->tokens = cli_text_tokens(CMD, s->m, s->o->text, &n_tok);
    if (!s->tokens) return 1;
    s->n_chunk = n_tok / s->n_ctx;
    if (s->o->n_chunks && s->o->n_chunks < s->n_chunk) s->n_chunk = s->o->n_chunks;
    if (s->n_chunk < 1)
        return cli_error(CMD, "'%s' has %d tokens, fewer than one chunk of %d (-c)", s->o->text, n_tok, s->n_ctx);
    return cli_check_scored(CMD, s->n_ctx, s->n_chunk);
}

/* --drift's prompts: the file's lines or windows of the text, each with
 * room for N generated tokens within -c. */
static int prepare_drift(sweep *s) {
    const sweep_opts *o = s->o;
    if (!o->drift_n) return 0;
    if (o->drift_prompts)
        return drift_prompts_read(CMD, o->drift_prompts, 0, &s->drift) ||
               drift_prompts_tokenize(CMD, s->m, &s->drift, o->drift_prompts, o->drift_n, s->n_ctx);
    return drift_prompts_windows(CMD, s->tokens, (size_t)s->n_ctx * s->n_chunk, s->bos, SWEEP_DRIFT_WINDOWS,
                                 SWEEP_DRIFT_WINDOW_TOKENS, o->drift_n, s->n_ctx, &s->drift);
}

static void drift_params(const void *ud, const kvq_sweep_config *c, cache_flags *cf) {
    const sweep *s = ud;
    sweep_params(s, c, s->n_ctx, cf);
}

static int run_drift(sweep *s) {
    if (!s->o->drift_n) return 0;
    const sweep_drift_spec spec = { CMD, s->m, &s->drift, s->o->drift_n, s->n_ctx, s->o->n_threads, s->o->n_jobs,
                                    s->cfg, s->n_cfg, drift_params, s };
    return sweep_drift_run(&spec, s->rows);
}

/* Everything that can be refused is checked before OUTDIR is created. */
static int setup(sweep *s) {
    kvq_error err = { 0 };
    /* OUTDIR first: a typo there must not cost a model load or print notes */
    if (cli_check_output_dir(CMD, s->o->outdir)) return 1;
    if (!(s->m = cli_load_model(CMD, s->o->model, s->o->no_mmap))) return 1;
    s->info = kvq_model_get_info(s->m);
    s->bos = s->info->add_bos ? s->info->bos_id : -1;
    if (kvq_model_file_hash(s->o->model, &s->model_hash, &err) != KVQ_OK) return cli_error(CMD, "%s", err.msg);
    if (s->o->calib && kvq_calib_load(s->o->calib, s->m, &s->calib, &err) != KVQ_OK)
        return cli_error(CMD, "--calib: %s", err.msg);
    if (prepare_tokens(s) || prepare_drift(s)) return 1;
    s->n_batch = kvq_eval_batch(s->o->n_batch, s->n_ctx);
    kvq_cache_params ref;   /* the largest cache of the grid: the exact reference */
    kvq_cache_params_default(&ref);
    ref.type_k = ref.type_v = s->o->ref_type;
    ref.max_batch = s->n_batch;
    if (cli_check_context(CMD, s->info, &ref, s->n_ctx)) return 1;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = s->o->n_threads ? s->o->n_threads : (int)(cores > 0 ? cores : 1);
    s->threads_per_job = CLI_MAX(1, threads / CLI_MAX(1, s->o->n_jobs));
    if (build_grid(s->o, s->n_ctx, &s->cfg, &s->n_cfg)) return 1;
    char runs[PATH_CAP];
    path_in(runs, s, "runs");
    return make_dir(s->o->outdir) || make_dir(runs);
}

/* Rows start as their configuration's identity; stored results replace
 * them; the rest are queued. */
static int plan_runs(sweep *s) {
    s->rows = calloc(s->n_cfg, sizeof *s->rows);
    s->pending = calloc(s->n_cfg, sizeof *s->pending);
    s->failed = calloc(s->n_cfg, sizeof *s->failed);
    if (!s->rows || !s->pending || !s->failed) return cli_error(CMD, "out of memory");
    for (size_t i = 0; i < s->n_cfg; i++) {
        init_row(&s->rows[i], &s->cfg[i]);
        s->pending[i] = !load_stored(s, &s->cfg[i], &s->rows[i]);
        s->n_to_run += s->pending[i];
    }
    fprintf(stderr, "kvq sweep: %zu configurations (%zu already done), %d chunks of %d tokens, %d thread(s) x %d job(s)\n",
            s->n_cfg, s->n_cfg - (size_t)s->n_to_run, s->n_chunk, s->n_ctx, s->threads_per_job,
            CLI_MAX(1, s->o->n_jobs));
    return 0;
}

int cmd_sweep(int argc, char **argv) {
    sweep_opts o = { .n_ctx = 512, .n_jobs = 1, .rot = KVQ_SWEEP_ROT_BOTH, .ref_type = KVQ_TYPE_F32 };
    int pr = parse_args(&o, argc, argv);
    if (pr <= 0) return pr < 0 ? 1 : 0;
    sweep s = { .o = &o, .n_ctx = o.n_ctx };
    pthread_mutex_init(&s.lock, NULL);
    int rc = setup(&s);
    if (!rc) rc = ensure_reference(&s);
    if (!rc) rc = plan_runs(&s);
    if (!rc) rc = run_pending(&s);
    const int drift_rc = rc ? 0 : run_drift(&s);   /* a failed drift still leaves the KLD results written */
    if (!rc) rc = write_outputs(&s);
    if (!rc) rc = drift_rc;
    int n_failed = 0;
    for (size_t i = 0; !rc && i < s.n_cfg; i++) n_failed += s.failed[i];
    if (n_failed) rc = cli_error(CMD, "%d configuration(s) failed; their rows are empty (rerun to retry them)", n_failed);
    pthread_mutex_destroy(&s.lock);
    kvq_base_kvq_close(s.base);
    free(s.rows);
    free(s.pending);
    free(s.failed);
    free(s.cfg);
    free(s.tokens);
    drift_prompts_free(&s.drift);
    kvq_calib_free(s.calib);
    kvq_model_free(s.m);
    return rc;
}
