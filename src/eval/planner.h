/*
 * planner.h - the KV-cache budget planner (docs/spec/eval.md §5): per-layer K/V
 * types that fit a byte budget with the least predicted KLD.
 *
 *  1. reference: the exact (f32) cache's log-probs, computed once
 *     (kvq_plan_reference) or read from a base file;
 *  2. sensitivity: for every layer l, side s (K or V) and candidate type t,
 *     one real KLD run with ONLY (l, s) quantised to t, every other layer
 *     and side exact: S(l,s,t) = mean KLD - mean KLD of the all-exact cache
 *     (the floor, not zero against a 16-bit base file), clamped at 0;
 *  3. choice: the additive model predicts
 *         KLD(plan) ~= floor + sum over (l,s) of S(l, s, type(l,s)),
 *     and the multiple-choice knapsack (knapsack.h) finds the plan with
 *     the least prediction whose bytes per token fit the budget, exactly;
 *  4. verification: one real KLD run of the chosen plan.
 *
 * Sizes are per token: every (layer, side) stores n_head_kv rows of its
 * type per position, so "bytes of the cache / bf16 bytes at the same
 * context" (docs/spec/eval.md §3 size %) is the same ratio at any context, and the
 * MiB at the model's trained context is bytes per token * n_ctx_train.
 * The planner works without tail or sink (they would add fixed bytes).
 */
#ifndef KVQ_PLANNER_H
#define KVQ_PLANNER_H

#include "kld_ref.h"

enum { KVQ_PLAN_MAX_TYPES = 32 };

/* Called after every KLD run of the sensitivity pass: run `done` of
 * `total`, which (layer, side 0 = K / 1 = V, type) and its mean KLD. */
typedef void (*kvq_plan_progress_fn)(void *ud, int done, int total, int layer, int side, kvq_type type,
                                     double mean_kld);

typedef struct kvq_plan_setup {
    const kvq_model *model;
    const kvq_kld_ref *reference;  /* tokens and exact log-probs (either format) */
    int n_chunk;                   /* chunks used, 1..reference->n_chunk        */
    int n_batch;                   /* tokens per evaluation (<= n_ctx)          */
    int n_threads;                 /* 0: online cores                           */
    kvq_cache_params cache;        /* rotation request; types are set per run   */
    kvq_type exact_type;           /* "all else exact" (f32)                    */
    kvq_plan_progress_fn progress; /* may be NULL                               */
    void *progress_ud;
} kvq_plan_setup;

/* Defaults: f32 exact, batch kvq_eval_batch(0, n_ctx) (chunks.h), every chunk. */
void kvq_plan_setup_init(kvq_plan_setup *s, const kvq_model *m, const kvq_kld_ref *reference);

/* The exact cache's logits over n_chunk chunks of n_ctx tokens, held in
 * memory in the base-file encoding (kld.h), so that every comparison
 * reads the same thing as with a file made by llama.cpp. */
kvq_status kvq_plan_reference(const kvq_model *m, const int32_t *tokens, int n_ctx, int n_chunk, int n_threads,
                              kvq_kld_base **out, kvq_error *err);

/* One real KLD run of a configuration (types_k/types_v: n_layer each). */
typedef struct kvq_plan_measurement {
    kvq_kld_summary kld;
    size_t kv_bytes;        /* the cache at the reference's context            */
    size_t work_bytes;      /* its transient working memory                    */
    size_t kv_bytes_bf16;   /* a bf16 cache of the same shape and context      */
    double size_pct;        /* 100 * kv_bytes / kv_bytes_bf16                  */
} kvq_plan_measurement;
kvq_status kvq_plan_measure(const kvq_plan_setup *s, const kvq_type *types_k, const kvq_type *types_v,
                            kvq_plan_measurement *out, kvq_error *err);

/* Sensitivity table of a model for a list of candidate types. */
typedef struct kvq_plan_table {
    int n_layer, n_types;
    kvq_type types[KVQ_PLAN_MAX_TYPES];
    size_t row_bytes[2][KVQ_PLAN_MAX_TYPES]; /* per token, one layer: [K/V][type] */
    size_t bf16_bytes_per_token;             /* all layers, both sides           */
    double floor_kld;                        /* mean KLD of the all-exact cache  */
    double *measured;                        /* [n_layer][2][n_types] mean KLD   */
    double *sens;                            /* same shape: max(0, measured - floor) */
} kvq_plan_table;

/* Runs 1 + 2 * n_layer * n_types KLD runs. */
kvq_status kvq_plan_sensitivities(const kvq_plan_setup *s, const kvq_type *types, int n_types,
                                  kvq_plan_table *out, kvq_error *err);
void kvq_plan_table_free(kvq_plan_table *t);
static inline size_t kvq_plan_table_index(const kvq_plan_table *t, int layer, int side, int type) {
    return ((size_t)layer * 2 + (size_t)side) * (size_t)t->n_types + (size_t)type;
}

/* Byte budgets in bytes per token (all layers, both sides). */
size_t kvq_plan_budget_pct(const kvq_model_info *in, double pct);
/* MiB at the model's trained context; 0 when n_ctx_train is unknown. */
size_t kvq_plan_budget_mib(const kvq_model_info *in, double mib);
size_t kvq_plan_bf16_bytes_per_token(const kvq_model_info *in);
/* Bytes per token of the smallest plan the candidates allow (each side in
 * its lightest type): checked before any measuring. */
size_t kvq_plan_smallest_bytes(const kvq_model_info *in, const kvq_type *types, int n_types);

typedef struct kvq_plan {
    int n_layer;
    kvq_type *types_k, *types_v;  /* [n_layer], owned                    */
    double predicted_kld;         /* floor + sum of the picked sensitivities */
    size_t bytes_per_token;       /* all layers, both sides               */
    size_t budget_bytes_per_token;
    bool exact;                   /* the knapsack's optimum (see knapsack.h) */
} kvq_plan;

/* The plan with the least predicted KLD within the budget; KVQ_ERR_ARG
 * (with the smallest possible size in the message) when nothing fits. */
kvq_status kvq_plan_choose(const kvq_plan_table *t, size_t budget_bytes_per_token, kvq_plan *out, kvq_error *err);
/* Prediction of any per-layer configuration whose types are in the table
 * (-1 when some type is not a candidate). */
double kvq_plan_predict(const kvq_plan_table *t, const kvq_type *types_k, const kvq_type *types_v);
void kvq_plan_free(kvq_plan *p);

/* The plan as cache flags for kvq run / kvq kld:
 *   "-ctk q4_0 -ctv q4_0 --cache-type-k-layers 0:q8_0 --cache-type-v-layers 1-2:q5_0"
 * (-ctk/-ctv: each side's most used type; runs of other layers as ranges).
 * Returns the length it needs (as snprintf). */
size_t kvq_plan_format_flags(const kvq_type *types_k, const kvq_type *types_v, int n_layer, char *buf, size_t cap);

#endif
