/* cmd_kld.c - `kvq kld`: KL divergence of a cache configuration against
 * a reference base file of either format (kvq's exact one or llama.cpp's
 * --kl-divergence-base), or writing one (--save-base: kvq's exact format;
 * --kl-divergence-base FILE alone: llama.cpp's).  Protocol: docs/spec/eval.md §1;
 * statistics: §3; units of the JSON keys: docs/engine.md. */
#include "base_check.h"
#include "kvq_eval.h"
#include "cli.h"
#include "engine_cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "kld";

enum { TG_TOKENS = 32 };   /* decode steps timed for tg_tps */

typedef struct kld_opts {
    const char *model, *text, *base_in, *base_out, *llama_base;
    bool llama_compare, json;
    bool no_mmap;             /* --no-mmap */
    bool no_base_check;       /* compare against a llama.cpp base that fails base_check */
    bool save_llama;          /* the base written is llama.cpp's format */
    int n_ctx, n_batch, n_chunks, n_threads;
    kvq_act act;
    cache_flags cache;
} kld_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq kld -m MODEL --base FILE [-f TEXT] [options]\n"
        "       kvq kld -m MODEL -f TEXT --save-base FILE [options]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -f, --file FILE        text (compare: checked against the base's tokens)\n"
        "  --base FILE            reference logits: kvq's exact base or llama.cpp's\n"
        "                         --kl-divergence-base file (told apart by their magic)\n"
        "  --save-base FILE       write this run's reference in kvq's exact format (float\n"
        "                         log-probs, model and token hashes, checksum)\n"
        "  --kl-divergence-base FILE [--kl-divergence]   llama.cpp's spelling: without\n"
        "                         --kl-divergence it writes FILE in llama.cpp's format,\n"
        "                         with it it compares against FILE (either format)\n"
        "  -c, --ctx-size N       chunk length when writing (default 512; compare: the base's)\n"
        "  -b, --batch-size N     tokens per evaluation batch (default 512, at most the chunk)\n"
        "  --chunks N             use at most N chunks\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_ACT_USAGE
        CLI_NO_MMAP_USAGE
        "  --json                 print one JSON object instead of the tables\n"
        "  --no-base-check        compare against a llama.cpp base even when this model with an\n"
        "                         exact cache is far from it (another model's base; see\n"
        "                         docs/engine.md)\n");
    cache_flags_usage(f);
}

static int parse_one(kld_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const cli_model_flags common = { &o->model, &o->text, &o->n_ctx, &o->n_batch, &o->n_chunks, &o->n_threads, &o->act, &o->no_mmap };
    const char **str = NULL;
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    if (!strcmp(a, "--kl-divergence")) { o->llama_compare = true; return 1; }
    if (!strcmp(a, "--no-base-check")) { o->no_base_check = true; return 1; }
    const int r = cli_model_flag(CMD, &common, argc, argv, i);
    if (r) return r;
    if (!strcmp(a, "--base")) str = &o->base_in;
    else if (!strcmp(a, "--save-base")) str = &o->base_out;
    else if (!strcmp(a, "--kl-divergence-base")) str = &o->llama_base;
    else return cache_flags_parse(CMD, &o->cache, argc, argv, i);
    return (*str = cli_value(CMD, argc, argv, i)) ? 1 : -1;
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
    const int steps = CLI_MIN(TG_TOKENS, j->n_ctx - n_prompt);
    kvq_cache_clear(kvq_ctx_cache(j->ctx));
    for (int start = 0; start < n_prompt; start += kvq_ctx_max_batch(j->ctx)) {
        int n = CLI_MIN(kvq_ctx_max_batch(j->ctx), n_prompt - start);
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

/* -f TEXT's tokens (NULL after one error line). */
static int32_t *text_tokens(const kld_job *j, int *n) {
    return cli_text_tokens(CMD, j->m, j->o->text, n);
}

/* ------------------------------------------------------------ compare */

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

/* The run as one result row (eval_row.h, the sweep's row): sizes with
 * tail and sink on both sides of the ratio, MiB at the trained context,
 * speeds, and precision when the reference's own KLD is known to be 0 (an
 * exact base is the exact cache itself; a 16-bit llama.cpp base has an
 * unmeasured floor, so no precision is claimed against it). */
static void fill_row(const kld_job *j, const kvq_kld_ref *ref, const kvq_kld_summary *s, kvq_eval_row *r) {
    const kvq_model_info *in = kvq_model_get_info(j->m);
    const kvq_cache *c = kvq_ctx_cache(j->ctx);
    const kvq_cache_params *p = &j->o->cache.params;
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    kvq_cache_params bf16 = *p;
    bf16.type_k = bf16.type_v = KVQ_TYPE_BF16;
    bf16.layer_type_k = bf16.layer_type_v = NULL;
    const kvq_rot_plan *rot = kvq_cache_rotation(c);
    const int full_ctx = in->n_ctx_train > 0 ? in->n_ctx_train : j->n_ctx;

    kvq_eval_row_init(r);
    kvq_eval_copy_str(r->cache_k, sizeof r->cache_k, kvq_type_name(p->type_k));
    kvq_eval_copy_str(r->cache_v, sizeof r->cache_v, kvq_type_name(p->type_v));
    r->rot_k = rot ? rot->block_k : 0;
    r->rot_v = rot ? rot->block_v : 0;
    r->tail_tokens = p->tail_tokens;
    r->sink_tokens = p->sink_tokens;
    r->n_tokens = (double)s->n;
    r->kv_bytes = (double)b.total;
    r->work_bytes = (double)b.work;
    r->kv_bytes_bf16 = cli_kv_bytes(in, &bf16, j->n_ctx);
    r->size_pct = 100.0 * r->kv_bytes / r->kv_bytes_bf16;
    r->mib = cli_kv_bytes(in, p, full_ctx) / 1048576.0;
    r->mean_kld = s->mean_kld;
    r->mean_kld_se = s->mean_kld_se;
    r->median_kld = s->median_kld;
    r->p90_kld = s->p_kld[4];      /* levels: .001 .01 .05 .10 .90 .95 .99 .999 */
    r->p99_kld = s->p_kld[6];
    r->p99_9_kld = s->p_kld[7];
    r->max_kld = s->max_kld;
    r->same_top_p = 100.0 * s->same_top;
    r->same_top_se = 100.0 * s->same_top_se;
    r->rms_dp = 100.0 * s->rms_dp;
    r->ppl_q = s->ppl_q;
    r->ppl_q_se = s->ppl_q_se;
    r->ppl_base = s->ppl_base;
    r->pp_tps = j->eval_secs > 0 ? (double)j->n_ctx * j->n_chunk / j->eval_secs : NAN;
    r->tg_tps = j->tg_tps;
    if (ref->format == KVQ_BASE_KVQ) kvq_eval_rows_precision(r, 1);
}

static void print_cache_block(const kld_job *j, const kvq_eval_row *r) {
    const kvq_model_info *in = kvq_model_get_info(j->m);
    printf("\n====== KV cache, precision and speed ======\n");
    printf("Cache K/V     : %s/%s (Hadamard block K %d, V %d; tail %d, sink %d)\n", r->cache_k, r->cache_v, r->rot_k,
           r->rot_v, r->tail_tokens, r->sink_tokens);
    printf("KV size       : %.3f MiB at n_ctx %d = %.2f%% of bf16; %.3f MiB at the trained context %d; "
           "working memory %.3f MiB\n", r->kv_bytes / 1048576.0, j->n_ctx, r->size_pct, r->mib,
           in->n_ctx_train > 0 ? in->n_ctx_train : j->n_ctx, r->work_bytes / 1048576.0);
    if (isnan(r->mean_precision)) printf("Precision     : - (a llama.cpp base's own KLD floor is unknown)\n");
    else printf("Precision     : mean %.3f%%, 99.9%% %.3f%%\n", r->mean_precision, r->p99_9_precision);
    printf("Speed         : prompt %.1f tokens/s, generation %.1f tokens/s\n", r->pp_tps, r->tg_tps);
}

/* A JSON number, or null when not measured. */
static void json_num(const char *key, const char *fmt, double v, bool last) {
    printf("\"%s\": ", key);
    if (isnan(v)) printf("null");
    else printf(fmt, v);
    printf(last ? "}\n" : ", ");
}

static void print_json(const kvq_kld_summary *s, const kvq_eval_row *r) {
    printf("{\"n_tokens\": %zu, \"ppl_q\": %.6f, \"ppl_q_se\": %.6f, \"ppl_base\": %.6f, \"ppl_base_se\": %.6f, "
           "\"ln_ratio\": %.8f, \"mean_kld\": %.8g, \"mean_kld_se\": %.8g, \"median_kld\": %.8g, "
           "\"p90_kld\": %.8g, \"p99_kld\": %.8g, \"p99_9_kld\": %.8g, \"max_kld\": %.8g, "
           "\"same_top_p\": %.6f, \"same_top_se\": %.6f, \"rms_dp\": %.8g, \"kv_bytes\": %.0f, \"work_bytes\": %.0f, \"kv_bytes_bf16\": %.0f, "
           "\"size_pct\": %.4f, \"kv_mib_full_ctx\": %.6f, \"cache_k\": \"%s\", \"cache_v\": \"%s\", \"rot_k\": %d, "
           "\"rot_v\": %d, \"tail_tokens\": %d, \"sink_tokens\": %d, ",
           s->n, s->ppl_q, s->ppl_q_se, s->ppl_base, s->ppl_base_se, s->ln_ratio, s->mean_kld, s->mean_kld_se,
           s->median_kld, r->p90_kld, r->p99_kld, r->p99_9_kld, s->max_kld, r->same_top_p, r->same_top_se, r->rms_dp,
           r->kv_bytes, r->work_bytes, r->kv_bytes_bf16, r->size_pct, r->mib, r->cache_k, r->cache_v, r->rot_k, r->rot_v,
           r->tail_tokens, r->sink_tokens);
    json_num("mean_precision", "%.6f", r->mean_precision, false);
    json_num("p99_9_precision", "%.6f", r->p99_9_precision, false);
    json_num("pp_tps", "%.2f", r->pp_tps, false);
    json_num("tg_tps", "%.2f", r->tg_tps, true);
}

/* Running figures after each chunk on stderr, in the columns of
 * llama.cpp's perplexity --kl-divergence (stdout stays the results). */
typedef struct kld_progress {
    kvq_kld_acc acc;
    size_t per_chunk;
} kld_progress;

/* The summary of the positions so far (the final one's definitions; its
 * sort is small next to a chunk's evaluation); nothing before 2 tokens. */
static void print_progress_row(const kvq_tokstats *st, size_t chunk) {
    kvq_kld_summary s;
    if (kvq_kld_summarize(st, &s, NULL) != KVQ_OK) return;
    fprintf(stderr, "%5zu %12.4f ± %9.4f %12.5f ± %9.5f %12.5f ± %9.5f %9.3f %% %8.3f ± %6.3f %%\n", chunk, s.ppl_q,
            s.ppl_q_se, s.ln_ratio, s.ln_ratio_se, s.mean_kld, s.mean_kld_se, 100.0 * s.rms_dp, 100.0 * s.same_top,
            100.0 * s.same_top_se);
}

static kvq_status progress_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    kld_progress *p = ud;
    kvq_status st = kvq_kld_acc_token(&p->acc, index, logits, next, err);
    if (!st && (index + 1) % p->per_chunk == 0) print_progress_row(&p->acc.stats, (index + 1) / p->per_chunk);
    return st;
}

static int compare(kld_job *j, const kvq_kld_ref *ref) {
    kld_progress prog = { .per_chunk = (size_t)kvq_kld_scored_per_chunk(j->n_ctx) };
    kvq_kld_acc_init(&prog.acc, ref);
    kvq_chunk_run run = { j->tokens, j->n_ctx, j->n_chunk, j->o->n_batch, j->bos };
    kvq_error err = { 0 };
    kvq_kld_summary sum;
    fprintf(stderr, "chunk  PPL(Q)                   ln(PPL(Q)/PPL(base))     KL divergence            "
            "Δp RMS      same top p\n");
    kvq_status st = kvq_eval_chunks(j->ctx, &run, progress_token, &prog, &j->eval_secs, &err);
    if (!st) st = measure_tg(j, &err);
    if (!st) st = kvq_kld_summarize(&prog.acc.stats, &sum, &err);
    kvq_kld_acc_free(&prog.acc);
    if (st) return cli_error(CMD, "%s", err.msg);
    kvq_eval_row row;
    fill_row(j, ref, &sum, &row);
    if (j->o->json) print_json(&sum, &row);
    else {
        print_tables(&sum);
        print_cache_block(j, &row);
    }
    return 0;
}

/* The base must be this model's (vocabulary; model hash for kvq's
 * format), match -c and -f, and score at least 2 tokens. */
static int check_base(kld_job *j, const kvq_kld_ref *ref, const char *path) {
    kvq_error err = { 0 };
    if (kvq_kld_ref_check_model(ref, j->o->model, kvq_model_get_info(j->m), &err))
        return cli_error(CMD, "base file '%s': %s", path, err.msg);
    if (j->o->n_ctx && j->o->n_ctx != j->n_ctx)
        return cli_error(CMD, "-c %d differs from the base file's context %d", j->o->n_ctx, j->n_ctx);
    if (j->o->text) {
        int n = 0;
        int32_t *toks = text_tokens(j, &n);
        if (!toks) return 1;
        kvq_status st = kvq_kld_ref_check_tokens(ref, toks, (size_t)n, j->n_chunk, &err);
        free(toks);
        if (st) return cli_error(CMD, "'%s' does not match base file '%s': %s", j->o->text, path, err.msg);
    }
    return cli_check_scored(CMD, j->n_ctx, j->n_chunk);
}

static int run_compare(kld_job *j, const char *path) {
    kvq_error err = { 0 };
    kvq_kld_ref ref;
    if (kvq_kld_ref_open(path, &ref, &err)) return cli_error(CMD, "%s", err.msg);
    j->n_ctx = ref.n_ctx;
    j->n_chunk = j->o->n_chunks && j->o->n_chunks < ref.n_chunk ? j->o->n_chunks : ref.n_chunk;
    int rc = check_base(j, &ref, path);
    if (!rc && !(j->tokens = malloc((size_t)j->n_ctx * j->n_chunk * sizeof *j->tokens))) rc = cli_error(CMD, "out of memory");
    if (!rc) {   /* the cache flags are checked (by creating the context) before any evaluation */
        memcpy(j->tokens, ref.tokens, (size_t)j->n_ctx * j->n_chunk * sizeof *j->tokens);
        j->o->n_batch = kvq_eval_batch(j->o->n_batch, j->n_ctx);
        j->ctx = cli_create_ctx(CMD, j->m, &j->o->cache, j->n_ctx, j->o->n_batch, j->o->n_threads);
        rc = j->ctx && cli_set_act(CMD, j->ctx, j->o->act) ? 0 : 1;
    }
    if (!rc && ref.format == KVQ_BASE_LLAMA) {   /* no model hash: ask the model (base_check.h) */
        base_check bc;
        rc = base_check_run(CMD, j->m, &ref, j->bos, j->o->n_batch, j->o->n_threads, &bc);
        if (!rc) rc = base_check_report(CMD, path, &bc, ref.n_vocab, j->o->text != NULL, j->o->no_base_check);
    }
    if (!rc) rc = compare(j, &ref);
    kvq_kld_ref_close(&ref);
    return rc;
}

/* --------------------------------------------------------------- save */

/* A base writer of either format behind one add/close. */
typedef struct save_acc {
    kvq_kld_writer *llama;
    kvq_base_kvq_writer *exact;
    int n_vocab;
    double *nll;
    size_t per_chunk;
} save_acc;

/* One position into the base; after each chunk the running PPL on
 * stderr, as kvq perplexity prints it. */
static kvq_status save_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    save_acc *a = ud;
    a->nll[index] = kvq_nll(logits, a->n_vocab, next);
    if ((index + 1) % a->per_chunk == 0) {
        double ppl, se;
        kvq_ppl_from_nll(a->nll, index + 1, &ppl, &se);
        fprintf(stderr, "[%zu]%.4f,", (index + 1) / a->per_chunk, ppl);
    }
    return a->exact ? kvq_base_kvq_writer_add(a->exact, logits, err) : kvq_kld_writer_add(a->llama, logits, err);
}

static kvq_status open_writer(const kld_job *j, const char *path, save_acc *a, kvq_error *err) {
    const int n_vocab = kvq_model_get_info(j->m)->n_vocab;
    if (j->o->save_llama) return kvq_kld_writer_open(path, j->n_ctx, n_vocab, j->n_chunk, j->tokens, &a->llama, err);
    uint64_t hash = 0;
    kvq_status st = kvq_model_file_hash(j->o->model, &hash, err);
    return st ? st : kvq_base_kvq_writer_open(path, hash, j->n_ctx, n_vocab, j->n_chunk, j->tokens, &a->exact, err);
}

static kvq_status close_writer(save_acc *a, kvq_error *err) {
    if (a->exact) return kvq_base_kvq_writer_close(a->exact, err);
    return a->llama ? kvq_kld_writer_close(a->llama, err) : KVQ_OK;
}

static int run_save(kld_job *j, const char *path) {
    int n_tok = 0;
    if (!(j->tokens = text_tokens(j, &n_tok))) return 1;
    j->n_ctx = j->o->n_ctx ? j->o->n_ctx : 512;
    j->n_chunk = n_tok / j->n_ctx;
    if (j->o->n_chunks && j->o->n_chunks < j->n_chunk) j->n_chunk = j->o->n_chunks;
    if (j->n_chunk < 1) return cli_error(CMD, "the text has %d tokens, fewer than one chunk of %d", n_tok, j->n_ctx);
    if (cli_check_scored(CMD, j->n_ctx, j->n_chunk)) return 1;
    const int batch = kvq_eval_batch(j->o->n_batch, j->n_ctx);
    j->ctx = cli_create_ctx(CMD, j->m, &j->o->cache, j->n_ctx, batch, j->o->n_threads);
    if (!j->ctx || !cli_set_act(CMD, j->ctx, j->o->act)) return 1;

    const size_t n_scored = (size_t)j->n_chunk * (size_t)kvq_kld_scored_per_chunk(j->n_ctx);
    save_acc acc = { NULL, NULL, kvq_model_get_info(j->m)->n_vocab, malloc(n_scored * sizeof(double)),
                     (size_t)kvq_kld_scored_per_chunk(j->n_ctx) };
    if (!acc.nll) return cli_error(CMD, "out of memory");
    kvq_error err = { 0 };
    kvq_status st = open_writer(j, path, &acc, &err);
    kvq_chunk_run run = { j->tokens, j->n_ctx, j->n_chunk, batch, j->bos };
    if (!st) st = kvq_eval_chunks(j->ctx, &run, save_token, &acc, &j->eval_secs, &err);
    fputc('\n', stderr);
    kvq_error cerr = { 0 };
    kvq_status cst = close_writer(&acc, &cerr);
    if (!st && cst) { st = cst; err = cerr; }
    double ppl = 0, se = 0;
    if (!st) kvq_ppl_from_nll(acc.nll, n_scored, &ppl, &se);
    free(acc.nll);
    if (st) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "kvq kld: wrote %zu positions to '%s' (%s format)\n", n_scored, path,
            j->o->save_llama ? "llama.cpp's 16-bit" : "kvq's exact");
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, se);
    return 0;
}

/* --------------------------------------------------------------- main */

/* Which file is read or written, in which format (llama.cpp's spelling:
 * --kl-divergence-base alone writes its format, with --kl-divergence it
 * is read); 0, or 1 after one error line. */
static int resolve_files(kld_opts *o) {
    if (o->llama_base) {
        if (o->llama_compare) {
            if (o->base_in) return cli_error(CMD, "give the base once: --base or --kl-divergence-base");
            o->base_in = o->llama_base;
        } else {
            if (o->base_out) return cli_error(CMD, "give one output: --save-base (kvq's format) or "
                                              "--kl-divergence-base (llama.cpp's)");
            o->base_out = o->llama_base;
            o->save_llama = true;
        }
    }
    if (!o->model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o->base_in == !o->base_out)
        return cli_error(CMD, "give exactly one of --base FILE (compare) and --save-base FILE (write)");
    if (o->base_out && !o->text) return cli_error(CMD, "writing a base needs the text (-f TEXT)");
    /* an output that cannot be created is refused before the model loads */
    return o->base_out ? cli_check_writable(CMD, o->base_out) : 0;
}

int cmd_kld(int argc, char **argv) {
    kld_opts o = { 0 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq kld --help)", argv[i]);
    }
    if (resolve_files(&o)) return 1;
    kld_job j = { .o = &o };
    j.m = cli_load_model(CMD, o.model, o.no_mmap);
    if (!j.m) return 1;
    const kvq_model_info *in = kvq_model_get_info(j.m);
    j.bos = in->add_bos ? in->bos_id : -1;
    int rc = o.base_in ? run_compare(&j, o.base_in) : run_save(&j, o.base_out);
    kvq_ctx_free(j.ctx);
    free(j.tokens);
    kvq_model_free(j.m);
    return rc;
}
