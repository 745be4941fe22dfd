/* base_check.h - is a llama.cpp KLD base this model's?  Such a file
 * carries no model hash (kvq's own base format does), so the only sound
 * test is to ask the model: evaluate the base's first chunk with an exact
 * (f32) cache and compare it with the base.  A base made by this model
 * lies within the engines' agreement of it: chunk-1 mean KLD at most
 * 1.4e-4 nats on every golden base of llama.cpp (docs/engine.md, "KLD
 * bases from llama.cpp"); a base from another model with the same
 * vocabulary is far away (0.10 for the same model trained further, 1 to
 * 7 for unrelated ones).  The PPLs are printed beside it, but two models
 * of similar PPL can still disagree token by token. */
#ifndef KVQ_BASE_CHECK_H
#define KVQ_BASE_CHECK_H

#include "kvq_eval.h"

/* Mean KLD on chunk 1 above which a base is refused as another model's:
 * 350x the largest same-model figure measured, half the closest sibling's. */
#define BASE_CHECK_MAX_KLD 0.05

typedef struct base_check {
    size_t n;                  /* positions compared (chunk 1's scored ones) */
    double mean_kld;           /* KL(base || this model, f32 cache), nats    */
    double ppl_model, ppl_base;
} base_check;

/* Evaluates the reference's first chunk (bos: the id replacing its first
 * token, -1: none) in batches of n_batch with an f32 cache; 0, or 1 after
 * one error line. */
int base_check_run(const char *cmd, const kvq_model *m, const kvq_kld_ref *ref, int bos, int n_batch,
                   int n_threads, base_check *out);

/* Prints the check to stderr (with a loud warning first when the base's
 * tokens were not checked against a text); refuses (one error line,
 * returns 1) a base above BASE_CHECK_MAX_KLD unless `allow` (the
 * --no-base-check flag).  0 = go ahead. */
int base_check_report(const char *cmd, const char *path, const base_check *c, int n_vocab, bool text_checked,
                      bool allow);

#endif
