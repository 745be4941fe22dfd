/* cmd_perplexity.c - `kvq perplexity`: llama.cpp's perplexity protocol
 * (docs/spec/eval.md §1) over a text file, ending with llama.cpp's
 * "Final estimate: PPL = X +/- Y" line. */
#include "kvq_eval.h"
#include "cli.h"
#include "engine_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "perplexity";

typedef struct ppl_opts {
    const char *model, *text;
    int n_ctx, n_batch, n_chunks, n_threads;
    kvq_act act;
    bool json, no_mmap;
    cache_flags cache;
} ppl_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq perplexity -m MODEL -f TEXT [options]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -f, --file FILE        text to score\n"
        "  -c, --ctx-size N       chunk length in tokens (default 512)\n"
        "  -b, --batch-size N     tokens per evaluation batch (default 512, at most the chunk)\n"
        "  --chunks N             score at most N chunks (default: all)\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_ACT_USAGE
        CLI_NO_MMAP_USAGE
        "  --json                 print one JSON object instead of the Final estimate line\n");
    cache_flags_usage(f);
}

static int parse_one(ppl_opts *o, int argc, char **argv, int *i) {
    const cli_model_flags common = { &o->model, &o->text, &o->n_ctx, &o->n_batch, &o->n_chunks, &o->n_threads, &o->act, &o->no_mmap };
    if (!strcmp(argv[*i], "--json")) { o->json = true; return 1; }
    const int r = cli_model_flag(CMD, &common, argc, argv, i);
    return r ? r : cache_flags_parse(CMD, &o->cache, argc, argv, i);
}

typedef struct ppl_acc {
    double *nll;        /* one per scored position */
    int n_vocab, per_chunk;
} ppl_acc;

/* Record one position's NLL; after each chunk print llama.cpp's running
 * "[chunk]ppl," progress to stderr. */
static kvq_status add_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    (void)err;
    ppl_acc *a = ud;
    a->nll[index] = kvq_nll(logits, a->n_vocab, next);
    if ((index + 1) % (size_t)a->per_chunk == 0) {
        double ppl, se;
        kvq_ppl_from_nll(a->nll, index + 1, &ppl, &se);
        fprintf(stderr, "[%zu]%.4f,", (index + 1) / (size_t)a->per_chunk, ppl);
    }
    return KVQ_OK;
}

/* One JSON object; sizes as kvq kld --json (docs/engine.md). */
static void print_json(const ppl_opts *o, kvq_ctx *ctx, size_t n_scored, double ppl, double se, double tps) {
    const kvq_model_info *in = kvq_model_get_info(kvq_ctx_model(ctx));
    const kvq_cache_params *p = &o->cache.params;
    kvq_cache_bytes b;
    kvq_cache_memory(kvq_ctx_cache(ctx), &b);
    kvq_cache_params bf16 = *p;
    bf16.type_k = bf16.type_v = KVQ_TYPE_BF16;
    bf16.layer_type_k = bf16.layer_type_v = NULL;
    const double ref = cli_kv_bytes(in, &bf16, o->n_ctx);
    const int full_ctx = in->n_ctx_train > 0 ? in->n_ctx_train : o->n_ctx;
    printf("{\"n_tokens\": %zu, \"ppl\": %.6f, \"ppl_se\": %.6f, \"n_ctx\": %d, \"n_batch\": %d, \"cache_k\": \"%s\", "
           "\"cache_v\": \"%s\", \"tail_tokens\": %d, \"sink_tokens\": %d, \"kv_bytes\": %zu, \"work_bytes\": %zu, \"kv_bytes_bf16\": %.0f, "
           "\"size_pct\": %.4f, \"kv_mib_full_ctx\": %.6f, \"pp_tps\": %.2f}\n",
           n_scored, ppl, se, o->n_ctx, o->n_batch, kvq_type_name(p->type_k), kvq_type_name(p->type_v), p->tail_tokens,
           p->sink_tokens, b.total, b.work, ref, 100.0 * (double)b.total / ref, cli_kv_bytes(in, p, full_ctx) / 1048576.0, tps);
}

static int score(const ppl_opts *o, kvq_ctx *ctx, const int32_t *toks, int n_chunk, int bos) {
    ppl_acc acc = { NULL, kvq_ctx_n_vocab(ctx), kvq_kld_scored_per_chunk(o->n_ctx) };
    const size_t n_scored = (size_t)n_chunk * (size_t)acc.per_chunk;
    acc.nll = malloc(n_scored * sizeof *acc.nll);
    if (!acc.nll) return cli_error(CMD, "out of memory");
    kvq_chunk_run run = { toks, o->n_ctx, n_chunk, o->n_batch, bos };
    kvq_error err = { 0 };
    double secs = 0.0;
    kvq_status st = kvq_eval_chunks(ctx, &run, add_token, &acc, &secs, &err);
    fputc('\n', stderr);
    if (st) { free(acc.nll); return cli_error(CMD, "evaluation failed: %s", err.msg); }
    double ppl, se;
    kvq_ppl_from_nll(acc.nll, n_scored, &ppl, &se);
    free(acc.nll);
    const double tps = secs > 0 ? (double)n_chunk * o->n_ctx / secs : 0.0;
    fprintf(stderr, "kvq perplexity: %d chunks of %d tokens, %.1f tokens/s\n", n_chunk, o->n_ctx, tps);
    if (o->json) print_json(o, ctx, n_scored, ppl, se, tps);
    else printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, se);
    return 0;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o = { .n_ctx = 512 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq perplexity --help)", argv[i]);
    }
    if (!o.model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o.text) return cli_error(CMD, "no text given (use -f TEXT)");
    o.n_batch = kvq_eval_batch(o.n_batch, o.n_ctx);
    if (!cache_flags_fit(CMD, &o.cache, o.n_ctx)) return 1;
    size_t len = 0;
    char *text = cli_read_text(CMD, o.text, &len);
    if (!text) return 1;
    kvq_model *m = cli_load_model(CMD, o.model, o.no_mmap);
    int32_t *toks = NULL;
    kvq_ctx *ctx = NULL;
    int rc = 1, n_tok = 0;
    if (!m) goto done;
    const kvq_model_info *in = kvq_model_get_info(m);
    toks = cli_tokenize(CMD, m, text, len, in->add_bos, &n_tok);
    if (!toks) goto done;
    int n_chunk = n_tok / o.n_ctx;
    if (o.n_chunks && o.n_chunks < n_chunk) n_chunk = o.n_chunks;
    if (n_chunk < 1) {
        cli_error(CMD, "the text has %d tokens, fewer than one chunk of %d (-c)", n_tok, o.n_ctx);
        goto done;
    }
    if (cli_check_scored(CMD, o.n_ctx, n_chunk)) goto done;
    fprintf(stderr, "kvq perplexity: %d tokens, %d chunks of %d, batch %d\n", n_tok, n_chunk, o.n_ctx, o.n_batch);
    ctx = cli_create_ctx(CMD, m, &o.cache, o.n_ctx, o.n_batch, o.n_threads);
    if (ctx && !cli_set_act(CMD, ctx, o.act)) goto done;
    if (ctx) rc = score(&o, ctx, toks, n_chunk, in->add_bos ? in->bos_id : -1);
done:
    kvq_ctx_free(ctx);
    free(toks);
    kvq_model_free(m);
    free(text);
    return rc;
}
