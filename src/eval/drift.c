/* drift.c - the exact generation and the teacher-forced comparison of
 * kvq drift (method in drift.h). */
#include "drift.h"
#include "cache.h"
#include "kld.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>

enum { PROGRESS_EVERY = 64 };   /* decoding steps between progress calls */

double kvq_drift_ref_bytes(size_t n_prompts, int n_gen, int n_vocab) {
    return (double)n_prompts * (double)n_gen * ((double)n_vocab * sizeof(float) + sizeof(double) + sizeof(int32_t));
}

static void prompt_free(kvq_drift_prompt *p) {
    free(p->tokens);
    free(p->logits);
    free(p->log_norm);
    memset(p, 0, sizeof *p);
}

kvq_status kvq_drift_ref_init(kvq_drift_ref *ref, size_t n_prompts, int n_gen, int n_vocab, int eos_id,
                              kvq_error *err) {
    memset(ref, 0, sizeof *ref);
    if (n_prompts < 1 || n_gen < 1 || n_vocab < 1)
        return kvq_fail(err, KVQ_ERR_ARG, "drift: %zu prompts, %d tokens to generate, a vocabulary of %d", n_prompts,
                        n_gen, n_vocab);
    ref->prompts = kvq_calloc(n_prompts, sizeof *ref->prompts);
    if (!ref->prompts) return kvq_fail(err, KVQ_ERR_NOMEM, "drift: out of memory for %zu prompts", n_prompts);
    ref->n_prompts = n_prompts;
    ref->n_gen = n_gen;
    ref->n_vocab = n_vocab;
    ref->eos_id = eos_id;
    return KVQ_OK;
}

void kvq_drift_ref_free(kvq_drift_ref *ref) {
    if (!ref) return;
    for (size_t i = 0; ref->prompts && i < ref->n_prompts; i++) prompt_free(&ref->prompts[i]);
    free(ref->prompts);
    memset(ref, 0, sizeof *ref);
}

/* The context must take n_prompt + n_gen positions; checked before any
 * evaluation so that a long prompt is one clear error. */
static kvq_status check_fits(kvq_ctx *ctx, int n_prompt, int n_gen, kvq_error *err) {
    const int n_ctx = kvq_ctx_cache(ctx)->p.n_ctx;
    if (n_prompt < 1) return kvq_fail(err, KVQ_ERR_ARG, "drift: empty prompt");
    if ((int64_t)n_prompt + n_gen > n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "drift: a prompt of %d tokens and %d generated ones need %lld positions; "
                        "the context holds %d", n_prompt, n_gen, (long long)n_prompt + n_gen, n_ctx);
    return KVQ_OK;
}

/* Clear the cache and prefill the prompt in the context's batches; the
 * logits of its last token (generated position 1) go to logits. */
static kvq_status prefill(kvq_ctx *ctx, const int32_t *prompt, int n_prompt, float *logits,
                          kvq_drift_progress_fn progress, void *ud, kvq_error *err) {
    kvq_cache_clear(kvq_ctx_cache(ctx));
    const int batch = kvq_ctx_max_batch(ctx);
    for (int start = 0; start < n_prompt; start += batch) {
        const int n = KVQ_MIN(batch, n_prompt - start);
        kvq_status st = kvq_ctx_eval(ctx, prompt + start, n, start, start + n == n_prompt ? logits : NULL, true, err);
        if (st) return st;
    }
    if (progress) progress(ud, n_prompt);
    return KVQ_OK;
}

kvq_status kvq_drift_ref_run(kvq_drift_ref *ref, size_t index, kvq_ctx *exact, const int32_t *prompt, int n_prompt,
                             kvq_drift_progress_fn progress, void *ud, kvq_error *err) {
    if (!ref || !exact || !prompt) return kvq_fail(err, KVQ_ERR_ARG, "drift: NULL argument");
    if (index >= ref->n_prompts) return kvq_fail(err, KVQ_ERR_ARG, "drift: prompt slot %zu of %zu", index, ref->n_prompts);
    if (kvq_ctx_n_vocab(exact) != ref->n_vocab)
        return kvq_fail(err, KVQ_ERR_ARG, "drift: the context's vocabulary (%d) is not the reference's (%d)",
                        kvq_ctx_n_vocab(exact), ref->n_vocab);
    const int n_gen = ref->n_gen, n_vocab = ref->n_vocab;
    kvq_status st = check_fits(exact, n_prompt, n_gen, err);
    if (st) return st;
    kvq_drift_prompt *pr = &ref->prompts[index];
    prompt_free(pr);
    pr->n_prompt = n_prompt;
    pr->tokens = kvq_malloc_n((size_t)n_prompt + n_gen, sizeof *pr->tokens);
    pr->logits = kvq_malloc_n((size_t)n_gen * n_vocab, sizeof *pr->logits);
    pr->log_norm = kvq_malloc_n((size_t)n_gen, sizeof *pr->log_norm);
    if (!pr->tokens || !pr->logits || !pr->log_norm) {
        prompt_free(pr);
        return kvq_fail(err, KVQ_ERR_NOMEM, "drift: out of memory for %d generated positions", n_gen);
    }
    memcpy(pr->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    st = prefill(exact, prompt, n_prompt, pr->logits, progress, ud, err);
    for (int i = 0; !st && i < n_gen; i++) {
        const float *row = pr->logits + (size_t)i * n_vocab;
        const int32_t tok = kvq_argmax(row, n_vocab);
        pr->log_norm[i] = kvq_log_sum_exp(row, n_vocab);
        pr->tokens[n_prompt + i] = tok;
        pr->n_eos += tok == ref->eos_id;
        if (i + 1 == n_gen) break;   /* the last token's successor is not asked for */
        st = kvq_ctx_eval(exact, &tok, 1, n_prompt + i, pr->logits + (size_t)(i + 1) * n_vocab, true, err);
        if (!st && progress && (i + 1) % PROGRESS_EVERY == 0) progress(ud, PROGRESS_EVERY);
    }
    if (st) { prompt_free(pr); return st; }
    if (progress) progress(ud, (n_gen - 1) % PROGRESS_EVERY);
    return KVQ_OK;
}

/* ------------------------------------------------------------ measuring */

/* KL(exact || tested) of one position: sum p_e (log p_e - log p_t) in
 * double, the log-probs written as (x - log_norm), so that identical
 * logits give exactly 0. */
static double position_kld(const float *exact, double norm_e, const float *test, int n_vocab) {
    const double norm_t = kvq_log_sum_exp(test, n_vocab);
    double kl = 0.0;
    for (int k = 0; k < n_vocab; k++) {
        const double lp_e = (double)exact[k] - norm_e, lp_t = (double)test[k] - norm_t;
        kl += exp(lp_e) * (lp_e - lp_t);
    }
    return kl;
}

static kvq_status measure_prompt(kvq_ctx *ctx, const kvq_drift_ref *ref, const kvq_drift_prompt *pr, float *logits,
                                 double *kld, uint8_t *same, int *first_div, kvq_drift_progress_fn progress, void *ud,
                                 kvq_error *err) {
    const int n_gen = ref->n_gen, n_vocab = ref->n_vocab, n_prompt = pr->n_prompt;
    kvq_status st = check_fits(ctx, n_prompt, n_gen, err);
    if (!st) st = prefill(ctx, pr->tokens, n_prompt, logits, progress, ud, err);
    *first_div = n_gen + 1;
    for (int i = 0; !st && i < n_gen; i++) {
        const int32_t want = pr->tokens[n_prompt + i];
        kld[i] = position_kld(pr->logits + (size_t)i * n_vocab, pr->log_norm[i], logits, n_vocab);
        same[i] = kvq_argmax(logits, n_vocab) == want;
        if (!same[i] && *first_div > n_gen) *first_div = i + 1;
        if (i + 1 == n_gen) break;
        st = kvq_ctx_eval(ctx, &want, 1, n_prompt + i, logits, true, err);   /* teacher forcing */
        if (!st && progress && (i + 1) % PROGRESS_EVERY == 0) progress(ud, PROGRESS_EVERY);
    }
    if (!st && progress) progress(ud, (n_gen - 1) % PROGRESS_EVERY);
    return st;
}

void kvq_drift_run_free(kvq_drift_run *r) {
    if (!r) return;
    free(r->kld);
    free(r->same_top);
    free(r->first_div);
    memset(r, 0, sizeof *r);
}

kvq_status kvq_drift_measure(kvq_ctx *ctx, const kvq_drift_ref *ref, kvq_drift_progress_fn progress, void *ud,
                             kvq_drift_run *out, kvq_error *err) {
    memset(out, 0, sizeof *out);
    if (!ctx || !ref || ref->n_prompts < 1) return kvq_fail(err, KVQ_ERR_ARG, "drift: no reference prompts");
    if (kvq_ctx_n_vocab(ctx) != ref->n_vocab)
        return kvq_fail(err, KVQ_ERR_ARG, "drift: the context's vocabulary (%d) is not the reference's (%d)",
                        kvq_ctx_n_vocab(ctx), ref->n_vocab);
    const size_t cells = ref->n_prompts * (size_t)ref->n_gen;
    out->n_prompts = ref->n_prompts;
    out->n_gen = ref->n_gen;
    out->kld = kvq_malloc_n(cells, sizeof *out->kld);
    out->same_top = kvq_malloc(cells);
    out->first_div = kvq_malloc_n(ref->n_prompts, sizeof *out->first_div);
    float *logits = kvq_malloc_n((size_t)ref->n_vocab, sizeof *logits);
    kvq_status st = out->kld && out->same_top && out->first_div && logits
                        ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "drift: out of memory");
    for (size_t p = 0; !st && p < ref->n_prompts; p++)
        if (!ref->prompts[p].tokens) st = kvq_fail(err, KVQ_ERR_ARG, "drift: reference prompt %zu was not run", p + 1);
    for (size_t p = 0; !st && p < ref->n_prompts; p++) {
        const size_t at = p * (size_t)ref->n_gen;
        st = measure_prompt(ctx, ref, &ref->prompts[p], logits, out->kld + at, out->same_top + at, &out->first_div[p],
                            progress, ud, err);
    }
    free(logits);
    if (st) kvq_drift_run_free(out);
    return st;
}
