/* base_check.c - the exact-cache check of a llama.cpp base (base_check.h). */
#include "base_check.h"
#include "kvq_eval.h"
#include "cli.h"

#include <stdio.h>

int base_check_run(const char *cmd, const kvq_model *m, const kvq_kld_ref *ref, int bos, int n_batch,
                   int n_threads, base_check *out) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_ctx = ref->n_ctx;
    p.max_batch = kvq_eval_batch(n_batch, ref->n_ctx);
    p.type_k = p.type_v = KVQ_TYPE_F32;
    p.rot.mode = KVQ_ROT_OFF;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0 };
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, ref);
    kvq_kld_summary s;
    kvq_chunk_run run = { ref->tokens, ref->n_ctx, 1, p.max_batch, bos };
    kvq_status st = kvq_ctx_create(m, &p, n_threads, &ctx, &err);
    if (!st) st = kvq_eval_chunks(ctx, &run, kvq_kld_acc_token, &acc, NULL, &err);
    if (!st) st = kvq_kld_summarize(&acc.stats, &s, &err);
    kvq_kld_acc_free(&acc);
    kvq_ctx_free(ctx);
    if (st) return cli_error(cmd, "checking the base with an exact cache: %s", err.msg);
    out->n = s.n;
    out->mean_kld = s.mean_kld;
    out->ppl_model = s.ppl_q;
    out->ppl_base = s.ppl_base;
    return 0;
}

int base_check_report(const char *cmd, const char *path, const base_check *c, int n_vocab, bool text_checked,
                      bool allow) {
    if (!text_checked)
        fprintf(stderr, "kvq %s: WARNING: no -f TEXT: the tokens of llama.cpp base '%s' cannot be checked against "
                "a text, and the file has no model hash; all that can be checked is below\n", cmd, path);
    fprintf(stderr, "kvq %s: base check: vocabulary %d = the model's; this model with an exact f32 cache on the "
            "base's chunk 1 (%zu positions): mean KLD %.3g, PPL %.4f (the base's own %.4f)\n", cmd, n_vocab, c->n,
            c->mean_kld, c->ppl_model, c->ppl_base);
    if (c->mean_kld <= BASE_CHECK_MAX_KLD) return 0;
    if (allow) {
        fprintf(stderr, "kvq %s: WARNING: the base is not this model's (mean KLD %.4f > %.2f with an exact cache); "
                "compared anyway (--no-base-check): every figure includes that difference\n", cmd, c->mean_kld,
                BASE_CHECK_MAX_KLD);
        return 0;
    }
    return cli_error(cmd, "base file '%s' was made with another model: with an exact cache this model is %.4f nats "
                     "(mean KLD) from it on chunk 1, a base of its own is within %.2f (PPL %.2f here, %.2f in the "
                     "base); --no-base-check compares anyway", path, c->mean_kld, BASE_CHECK_MAX_KLD, c->ppl_model,
                     c->ppl_base);
}
