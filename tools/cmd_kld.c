/* cmd_kld.c - `kvq kld`: KL divergence of a cache configuration against
 * a reference (llama.cpp's --kl-divergence-base file), or writing such a
 * reference (--save-base).  Protocol: EVAL.md §1; statistics: §3. */
#include "chunks.h"
#include "cli.h"
#include "engine_cli.h"
#include "kld.h"
#include "model.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "kld";

enum { TG_TOKENS = 32 };   /* decode steps timed for tg_tps */

typedef struct kld_opts {
    const char *model, *text, *base_in, *base_out, *llama_base;
    bool llama_compare, json;
    int n_ctx, n_batch, n_chunks, n_threads;
    cache_flags cache;
} kld_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq kld -m MODEL --base FILE [-f TEXT] [options]\n"
        "       kvq kld -m MODEL -f TEXT --save-base FILE [options]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -f, --file FILE        text (compare: checked against the base's tokens)\n"
        "  --base FILE            reference logits (llama.cpp --kl-divergence-base format)\n"
        "  --save-base FILE       write the reference logits of this run\n"
        "  --kl-divergence-base FILE [--kl-divergence]   llama.cpp's spelling: without\n"
        "                         --kl-divergence it writes FILE, with it it compares\n"
        "  -c, --ctx-size N       chunk length when writing (default 512; compare: the base's)\n"
        "  -b, --batch-size N     tokens per evaluation batch (default 512, at most the chunk)\n"
        "  --chunks N             use at most N chunks\n"
        "  -t, --threads N        threads (default: online cores)\n"
        "  --json                 print one JSON object instead of the tables\n");
    cache_flags_usage(f);
}

static int parse_one(kld_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    const char **str = NULL;
    int *num = NULL;
    long l, lo = 1, hi = CLI_MAX_CTX;
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    if (!strcmp(a, "--kl-divergence")) { o->llama_compare = true; return 1; }
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) str = &o->model;
    else if (!strcmp(a, "-f") || !strcmp(a, "--file")) str = &o->text;
    else if (!strcmp(a, "--base")) str = &o->base_in;
    else if (!strcmp(a, "--save-base")) str = &o->base_out;
    else if (!strcmp(a, "--kl-divergence-base")) str = &o->llama_base;
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { num = &o->n_ctx; lo = 4; }
    else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) num = &o->n_batch;
    else if (!strcmp(a, "--chunks")) num = &o->n_chunks;
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { num = &o->n_threads; hi = CLI_MAX_THREADS; }
    else return cache_flags_parse(CMD, &o->cache, argc, argv, i);
    if (!(v = cli_value(CMD, argc, argv, i))) return -1;
    if (str) { *str = v; return 1; }
    if (!cli_parse_long(v, lo, hi, &l)) { cli_error(CMD, "%s: '%s' is not an integer in %ld..%ld", a, v, lo, hi); return -1; }
    *num = (int)l;
    return 1;
}

/* ------------------------------------------------------------ helpers */

typedef struct kld_job {
    kld_opts *o;
    kvq_model *m;
    kvq_ctx *ctx;
    int32_t *tokens;         /* n_ctx * n_chunk, owned */
    int n_ctx, n_chunk, bos;
    double eval_secs, tg_tps;
} kld_job;

/* Decode speed: prefill half a chunk, then time single-token steps. */
static kvq_status measure_tg(kld_job *j, kvq_error *err) {
    const int n_prompt = j->n_ctx / 2;
    const int steps = KVQ_MIN(TG_TOKENS, j->n_ctx - n_prompt);
    kvq_cache_clear(kvq_ctx_cache(j->ctx));
    for (int start = 0; start < n_prompt; start += kvq_ctx_max_batch(j->ctx)) {
        int n = KVQ_MIN(kvq_ctx_max_batch(j->ctx), n_prompt - start);
        kvq_status st = kvq_ctx_eval(j->ctx, j->tokens + start, n, start, NULL, false, err);
        if (st) return st;
    }
    float *logits = malloc((size_t)kvq_ctx_n_vocab(j->ctx) * sizeof *logits);
    if (!logits) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    double t0 = kvq_now_seconds();
    kvq_status st = KVQ_OK;
    for (int s = 0; !st && s < steps; s++)
        st = kvq_ctx_eval(j->ctx, j->tokens + n_prompt + s, 1, n_prompt + s, logits, true, err);
    double dt = kvq_now_seconds() - t0;
    free(logits);
    j->tg_tps = dt > 0 ? steps / dt : 0.0;
    return st;
}

/* The text's tokens must be the base's (same model vocabulary, same text). */
static int check_text_tokens(const kld_job *j, const int32_t *base_toks) {
    size_t len = 0;
    char *text = cli_read_text(CMD, j->o->text, &len);
    if (!text) return 1;
    const kvq_model_info *in = kvq_model_get_info(j->m);
    int n = 0;
    int32_t *toks = cli_tokenize(CMD, j->m, text, len, in->add_bos, &n);
    free(text);
    if (!toks) return 1;
    const int need = j->n_ctx * j->n_chunk;
    int rc = 0;
    if (n < need) rc = cli_error(CMD, "'%s' has %d tokens, the base file holds %d", j->o->text, n, need);
    for (int i = 0; !rc && i < need; i++)
        if (toks[i] != base_toks[i])
            rc = cli_error(CMD, "'%s' does not match the base file: token %d is %d, the base has %d (other text or vocabulary?)",
                           j->o->text, i, (int)toks[i], (int)base_toks[i]);
    free(toks);
    return rc;
}

/* ------------------------------------------------------------ compare */

typedef struct compare_acc {
    const kvq_kld_base *base;
    int n_vocab;
    kvq_tokstats stats;
} compare_acc;

static kvq_status compare_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    compare_acc *a = ud;
    kvq_kld_token t = kvq_kld_compare(logits, a->n_vocab, kvq_kld_base_record(a->base, index), next);
    return kvq_tokstats_add(&a->stats, &t, err);
}

static void print_tables(const kvq_kld_summary *s) {
    const double ratio = exp(s->ln_ratio);
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f ± %10.6f\n", s->ppl_q, s->ppl_q_se);
    printf("Mean PPL(base)                : %10.6f ± %10.6f\n", s->ppl_base, s->ppl_base_se);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * s->cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s->ln_ratio, s->ln_ratio_se);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", ratio, ratio * s->ln_ratio_se);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n", s->ppl_q - s->ppl_base, s->ppl_diff_se);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", s->mean_kld, s->mean_kld_se);
    printf("Maximum KLD: %10.6f\n", s->max_kld);
    static const char *const labels[KVQ_N_PCT] = { " 0.1%", " 1.0%", " 5.0%", "10.0%", "90.0%", "95.0%", "99.0%", "99.9%" };
    for (int i = KVQ_N_PCT - 1; i >= KVQ_N_PCT / 2; i--) printf("%s   KLD: %10.6f\n", labels[i], s->p_kld[i]);
    printf("Median  KLD: %10.6f\n", s->median_kld);
    for (int i = KVQ_N_PCT / 2 - 1; i >= 0; i--) printf("%s   KLD: %10.6f\n", labels[i], s->p_kld[i]);
    printf("Minimum KLD: %10.6f\n", s->min_kld);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    Δp: %6.3f ± %5.3f %%\n", 100.0 * s->mean_dp, 100.0 * s->mean_dp_se);
    printf("Maximum Δp: %6.3f%%\n", 100.0 * s->max_dp);
    for (int i = KVQ_N_PCT - 1; i >= KVQ_N_PCT / 2; i--) printf("%s   Δp: %6.3f%%\n", labels[i], 100.0 * s->p_dp[i]);
    printf("Median  Δp: %6.3f%%\n", 100.0 * s->median_dp);
    for (int i = KVQ_N_PCT / 2 - 1; i >= 0; i--) printf("%s   Δp: %6.3f%%\n", labels[i], 100.0 * s->p_dp[i]);
    printf("Minimum Δp: %6.3f%%\n", 100.0 * s->min_dp);
    printf("RMS Δp    : %6.3f ± %5.3f %%\n", 100.0 * s->rms_dp, 100.0 * s->rms_dp_se);
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * s->same_top, 100.0 * s->same_top_se);
}

/* KV bytes of a plain bf16 cache of the same shape and context: the
 * denominator of size %. */
static size_t bf16_bytes(const kvq_model_info *in, int n_ctx) {
    return (size_t)in->n_layer * (size_t)n_ctx *
           (kvq_cache_row_bytes(KVQ_TYPE_BF16, in->n_head_kv, in->head_dim_k) +
            kvq_cache_row_bytes(KVQ_TYPE_BF16, in->n_head_kv, in->head_dim_v));
}

static void print_json(const kld_job *j, const kvq_kld_summary *s) {
    const kvq_cache *c = kvq_ctx_cache(j->ctx);
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    const size_t ref = bf16_bytes(kvq_model_get_info(j->m), j->n_ctx);
    const kvq_rot_plan *rot = kvq_cache_rotation(c);
    const kvq_cache_params *p = &j->o->cache.params;
    const double n_eval = (double)j->n_ctx * j->n_chunk;
    printf("{\"n_tokens\": %zu, \"ppl_q\": %.6f, \"ppl_q_se\": %.6f, \"ppl_base\": %.6f, \"ppl_base_se\": %.6f, "
           "\"ln_ratio\": %.8f, \"mean_kld\": %.8g, \"mean_kld_se\": %.8g, \"median_kld\": %.8g, "
           "\"p90_kld\": %.8g, \"p99_kld\": %.8g, \"p99_9_kld\": %.8g, \"max_kld\": %.8g, "
           "\"same_top_p\": %.6f, \"rms_dp\": %.8g, \"kv_bytes\": %zu, \"kv_bytes_bf16\": %zu, \"size_pct\": %.4f, "
           "\"cache_k\": \"%s\", \"cache_v\": \"%s\", \"rot_k\": %d, \"rot_v\": %d, "
           "\"tail_tokens\": %d, \"sink_tokens\": %d, \"pp_tps\": %.2f, \"tg_tps\": %.2f}\n",
           s->n, s->ppl_q, s->ppl_q_se, s->ppl_base, s->ppl_base_se, s->ln_ratio, s->mean_kld, s->mean_kld_se,
           s->median_kld, s->p_kld[4], s->p_kld[6], s->p_kld[7], s->max_kld, 100.0 * s->same_top, s->rms_dp,
           b.total, ref, ref ? 100.0 * (double)b.total / (double)ref : 0.0, kvq_type_name(p->type_k),
           kvq_type_name(p->type_v), rot ? rot->block_k : 0, rot ? rot->block_v : 0, p->tail_tokens,
           p->sink_tokens, j->eval_secs > 0 ? n_eval / j->eval_secs : 0.0, j->tg_tps);
}

static int compare(kld_job *j, const kvq_kld_base *base) {
    compare_acc acc = { base, base->n_vocab, { 0 } };
    kvq_tokstats_init(&acc.stats);
    kvq_chunk_run run = { j->tokens, j->n_ctx, j->n_chunk, j->o->n_batch, j->bos };
    kvq_error err = { 0 };
    kvq_kld_summary sum;
    kvq_status st = kvq_eval_chunks(j->ctx, &run, compare_token, &acc, &j->eval_secs, &err);
    if (!st) st = measure_tg(j, &err);
    if (!st) st = kvq_kld_summarize(&acc.stats, &sum, &err);
    kvq_tokstats_free(&acc.stats);
    if (st) return cli_error(CMD, "%s", err.msg);
    if (j->o->json) print_json(j, &sum);
    else print_tables(&sum);
    return 0;
}

static int run_compare(kld_job *j, const char *path) {
    kvq_error err = { 0 };
    kvq_kld_base *base = NULL;
    if (kvq_kld_base_read(path, &base, &err)) return cli_error(CMD, "%s", err.msg);
    const kvq_model_info *in = kvq_model_get_info(j->m);
    int rc = 1;
    j->n_ctx = (int)base->n_ctx;
    j->n_chunk = j->o->n_chunks && j->o->n_chunks < base->n_chunk ? j->o->n_chunks : base->n_chunk;
    if (base->n_vocab != in->n_vocab)
        cli_error(CMD, "base file '%s' has a vocabulary of %d, the model %d", path, base->n_vocab, in->n_vocab);
    else if (j->o->n_ctx && j->o->n_ctx != j->n_ctx)
        cli_error(CMD, "-c %d differs from the base file's context %d", j->o->n_ctx, j->n_ctx);
    else if (!(j->tokens = malloc((size_t)j->n_ctx * j->n_chunk * sizeof *j->tokens)))
        cli_error(CMD, "out of memory");
    else {
        memcpy(j->tokens, base->tokens, (size_t)j->n_ctx * j->n_chunk * sizeof *j->tokens);
        rc = j->o->text ? check_text_tokens(j, base->tokens) : 0;
    }
    if (!rc) rc = cli_check_scored(CMD, j->n_ctx, j->n_chunk);
    if (!rc) {
        const int batch = kvq_eval_batch(j->o->n_batch, j->n_ctx);
        j->o->n_batch = batch;
        j->ctx = cli_create_ctx(CMD, j->m, &j->o->cache, j->n_ctx, batch, j->o->n_threads);
        rc = j->ctx ? compare(j, base) : 1;
    }
    kvq_kld_base_free(base);
    return rc;
}

/* --------------------------------------------------------------- save */

typedef struct save_acc {
    kvq_kld_writer *w;
    int n_vocab;
    double *nll;
} save_acc;

static kvq_status save_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    save_acc *a = ud;
    a->nll[index] = kvq_nll(logits, a->n_vocab, next);
    return kvq_kld_writer_add(a->w, logits, err);
}

static int run_save(kld_job *j, const char *path) {
    if (!j->o->text) return cli_error(CMD, "writing a base needs the text (-f TEXT)");
    size_t len = 0;
    char *text = cli_read_text(CMD, j->o->text, &len);
    if (!text) return 1;
    const kvq_model_info *in = kvq_model_get_info(j->m);
    int n_tok = 0;
    int32_t *all = cli_tokenize(CMD, j->m, text, len, in->add_bos, &n_tok);
    free(text);
    if (!all) return 1;
    j->tokens = all;
    j->n_ctx = j->o->n_ctx ? j->o->n_ctx : 512;
    j->n_chunk = n_tok / j->n_ctx;
    if (j->o->n_chunks && j->o->n_chunks < j->n_chunk) j->n_chunk = j->o->n_chunks;
    if (j->n_chunk < 1) return cli_error(CMD, "the text has %d tokens, fewer than one chunk of %d", n_tok, j->n_ctx);
    if (cli_check_scored(CMD, j->n_ctx, j->n_chunk)) return 1;
    const int batch = kvq_eval_batch(j->o->n_batch, j->n_ctx);
    j->o->n_batch = batch;
    j->ctx = cli_create_ctx(CMD, j->m, &j->o->cache, j->n_ctx, batch, j->o->n_threads);
    if (!j->ctx) return 1;

    const size_t n_scored = (size_t)j->n_chunk * (size_t)kvq_kld_scored_per_chunk(j->n_ctx);
    save_acc acc = { NULL, in->n_vocab, malloc(n_scored * sizeof(double)) };
    if (!acc.nll) return cli_error(CMD, "out of memory");
    kvq_error err = { 0 };
    kvq_status st = kvq_kld_writer_open(path, j->n_ctx, in->n_vocab, j->n_chunk, j->tokens, &acc.w, &err);
    kvq_chunk_run run = { j->tokens, j->n_ctx, j->n_chunk, batch, j->bos };
    if (!st) st = kvq_eval_chunks(j->ctx, &run, save_token, &acc, &j->eval_secs, &err);
    kvq_error cerr = { 0 };
    kvq_status cst = acc.w ? kvq_kld_writer_close(acc.w, &cerr) : KVQ_OK;
    if (!st && cst) { st = cst; err = cerr; }
    double ppl = 0, se = 0;
    if (!st) kvq_ppl_from_nll(acc.nll, n_scored, &ppl, &se);
    free(acc.nll);
    if (st) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "kvq kld: wrote %zu positions to '%s'\n", n_scored, path);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, se);
    return 0;
}

/* --------------------------------------------------------------- main */

int cmd_kld(int argc, char **argv) {
    kld_opts o = { 0 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq kld --help)", argv[i]);
    }
    /* llama.cpp: --kl-divergence-base alone writes, with --kl-divergence reads */
    if (o.llama_base) {
        if (o.llama_compare) o.base_in = o.base_in ? o.base_in : o.llama_base;
        else o.base_out = o.base_out ? o.base_out : o.llama_base;
    }
    if (!o.model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o.base_in == !o.base_out)
        return cli_error(CMD, "give exactly one of --base FILE (compare) and --save-base FILE (write)");
    kld_job j = { .o = &o };
    j.m = cli_load_model(CMD, o.model);
    if (!j.m) return 1;
    const kvq_model_info *in = kvq_model_get_info(j.m);
    j.bos = in->add_bos ? in->bos_id : -1;
    int rc = o.base_in ? run_compare(&j, o.base_in) : run_save(&j, o.base_out);
    kvq_ctx_free(j.ctx);
    free(j.tokens);
    kvq_model_free(j.m);
    return rc;
}
