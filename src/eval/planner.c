/*
 * planner.c - the measuring half of the budget planner (planner.h): the
 * exact reference, one KLD run of a per-layer configuration, and the
 * sensitivity table (one run per layer, side and candidate type).
 * Choosing and printing a plan lives in plan_choose.c.
 */
#include "planner.h"
#include "chunks.h"

#include <stdlib.h>

void kvq_plan_setup_init(kvq_plan_setup *s, const kvq_model *m, const kvq_kld_ref *reference) {
    memset(s, 0, sizeof *s);
    s->model = m;
    s->reference = reference;
    s->n_chunk = reference ? reference->n_chunk : 0;
    s->n_batch = reference ? kvq_eval_batch(0, reference->n_ctx) : 0;
    kvq_cache_params_default(&s->cache);
    s->exact_type = KVQ_TYPE_F32;
}

static int bos_of(const kvq_model *m) {
    const kvq_model_info *in = kvq_model_get_info(m);
    return in->add_bos ? in->bos_id : -1;
}

size_t kvq_plan_bf16_bytes_per_token(const kvq_model_info *in) {
    return (size_t)in->n_layer * (kvq_cache_row_bytes(KVQ_TYPE_BF16, in->n_head_kv, in->head_dim_k) +
                                  kvq_cache_row_bytes(KVQ_TYPE_BF16, in->n_head_kv, in->head_dim_v));
}

/* ------------------------------------------------------------ reference */

typedef struct encode_acc {
    uint16_t *records;
    size_t record_len;
    int n_vocab;
} encode_acc;

static kvq_status encode_token(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    (void)next;
    (void)err;
    encode_acc *a = ud;
    kvq_kld_encode(logits, a->n_vocab, a->records + index * a->record_len);
    return KVQ_OK;
}

kvq_status kvq_plan_reference(const kvq_model *m, const int32_t *tokens, int n_ctx, int n_chunk, int n_threads,
                              kvq_kld_base **out, kvq_error *err) {
    if (!m || !tokens || !out || n_ctx < 4 || n_chunk < 1)
        return kvq_fail(err, KVQ_ERR_ARG, "plan: bad reference arguments");
    *out = NULL;
    const kvq_model_info *in = kvq_model_get_info(m);
    kvq_kld_base *b = kvq_calloc(1, sizeof *b);
    if (!b) return kvq_fail(err, KVQ_ERR_NOMEM, "plan: out of memory");
    b->n_ctx = (uint32_t)n_ctx;
    b->n_vocab = in->n_vocab;
    b->n_chunk = n_chunk;
    b->record_len = kvq_kld_record_len(in->n_vocab);
    b->n_pos = (size_t)n_chunk * (size_t)kvq_kld_scored_per_chunk(n_ctx);
    const size_t n_tok = (size_t)n_ctx * (size_t)n_chunk;
    b->tokens = kvq_malloc_n(n_tok, sizeof *b->tokens);
    b->records = kvq_malloc_n(b->n_pos * b->record_len, sizeof *b->records);
    if (!b->tokens || !b->records) {
        const size_t n_pos = b->n_pos;     /* the message is made after b is freed */
        kvq_kld_base_free(b);
        return kvq_fail(err, KVQ_ERR_NOMEM, "plan: out of memory for %zu reference positions", n_pos);
    }
    memcpy(b->tokens, tokens, n_tok * sizeof *b->tokens);

    kvq_cache_params cp;
    kvq_cache_params_default(&cp);
    cp.type_k = cp.type_v = KVQ_TYPE_F32;
    cp.n_ctx = n_ctx;
    cp.max_batch = kvq_eval_batch(0, n_ctx);
    kvq_ctx *ctx = NULL;
    kvq_status st = kvq_ctx_create(m, &cp, n_threads, &ctx, err);
    encode_acc acc = { b->records, b->record_len, in->n_vocab };
    kvq_chunk_run run = { b->tokens, n_ctx, n_chunk, cp.max_batch, bos_of(m) };
    if (!st) st = kvq_eval_chunks(ctx, &run, encode_token, &acc, NULL, err);
    kvq_ctx_free(ctx);
    if (st) { kvq_kld_base_free(b); return st; }
    *out = b;
    return KVQ_OK;
}

/* -------------------------------------------------------------- measure */

static kvq_status check_setup(const kvq_plan_setup *s, kvq_error *err) {
    if (!s || !s->model || !s->reference) return kvq_fail(err, KVQ_ERR_ARG, "plan: no model or reference");
    const kvq_kld_ref *r = s->reference;
    if (r->n_vocab != kvq_model_get_info(s->model)->n_vocab)
        return kvq_fail(err, KVQ_ERR_ARG, "plan: the reference has a vocabulary of %d, the model %d", r->n_vocab,
                        kvq_model_get_info(s->model)->n_vocab);
    if (s->n_chunk < 1 || s->n_chunk > r->n_chunk)
        return kvq_fail(err, KVQ_ERR_ARG, "plan: %d chunks asked, the reference has %d", s->n_chunk, r->n_chunk);
    if (s->n_batch < 1) return kvq_fail(err, KVQ_ERR_ARG, "plan: batch %d must be >= 1", s->n_batch);
    return KVQ_OK;
}

kvq_status kvq_plan_measure(const kvq_plan_setup *s, const kvq_type *types_k, const kvq_type *types_v,
                            kvq_plan_measurement *out, kvq_error *err) {
    kvq_status st = check_setup(s, err);
    if (st) return st;
    if (!types_k || !types_v || !out) return kvq_fail(err, KVQ_ERR_ARG, "plan: NULL layer types");
    const kvq_kld_ref *r = s->reference;
    const int n_ctx = r->n_ctx;
    kvq_cache_params cp = s->cache;
    cp.n_ctx = n_ctx;
    cp.max_batch = KVQ_MIN(s->n_batch, n_ctx);
    cp.type_k = types_k[0];
    cp.type_v = types_v[0];
    cp.layer_type_k = types_k;
    cp.layer_type_v = types_v;
    kvq_ctx *ctx = NULL;
    if ((st = kvq_ctx_create(s->model, &cp, s->n_threads, &ctx, err))) return st;
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, r);
    kvq_chunk_run run = { r->tokens, n_ctx, s->n_chunk, cp.max_batch, bos_of(s->model) };
    st = kvq_eval_chunks(ctx, &run, kvq_kld_acc_token, &acc, NULL, err);
    if (!st) st = kvq_kld_summarize(&acc.stats, &out->kld, err);
    kvq_cache_bytes b;
    kvq_cache_memory(kvq_ctx_cache(ctx), &b);
    kvq_kld_acc_free(&acc);
    kvq_ctx_free(ctx);
    out->kv_bytes = b.total;
    out->work_bytes = b.work;
    out->kv_bytes_bf16 = kvq_plan_bf16_bytes_per_token(kvq_model_get_info(s->model)) * (size_t)n_ctx;
    out->size_pct = out->kv_bytes_bf16 ? 100.0 * (double)out->kv_bytes / (double)out->kv_bytes_bf16 : 0.0;
    return st;
}

/* ---------------------------------------------------------- sensitivity */

void kvq_plan_table_free(kvq_plan_table *t) {
    if (!t) return;
    free(t->measured);
    free(t->sens);
    t->measured = t->sens = NULL;
}

static kvq_status init_table(const kvq_plan_setup *s, const kvq_type *types, int n_types, kvq_plan_table *t,
                             kvq_error *err) {
    const kvq_model_info *in = kvq_model_get_info(s->model);
    memset(t, 0, sizeof *t);
    if (n_types < 1 || n_types > KVQ_PLAN_MAX_TYPES)
        return kvq_fail(err, KVQ_ERR_ARG, "plan: %d candidate types (1..%d)", n_types, KVQ_PLAN_MAX_TYPES);
    t->n_layer = in->n_layer;
    t->n_types = n_types;
    for (int i = 0; i < n_types; i++) {
        const kvq_type_traits *tr = kvq_type_get(types[i]);
        if (!tr || !tr->is_cache_type) return kvq_fail(err, KVQ_ERR_ARG, "plan: type %d is not a cache type", (int)types[i]);
        for (int j = 0; j < i; j++)
            if (types[j] == types[i])
                return kvq_fail(err, KVQ_ERR_ARG, "plan: candidate %s listed twice", kvq_type_name(types[i]));
        t->types[i] = types[i];
        t->row_bytes[0][i] = kvq_cache_row_bytes(types[i], in->n_head_kv, in->head_dim_k);
        t->row_bytes[1][i] = kvq_cache_row_bytes(types[i], in->n_head_kv, in->head_dim_v);
    }
    t->bf16_bytes_per_token = kvq_plan_bf16_bytes_per_token(in);
    const size_t cells = (size_t)t->n_layer * 2 * (size_t)n_types;
    t->measured = kvq_malloc_n(cells, sizeof *t->measured);
    t->sens = kvq_malloc_n(cells, sizeof *t->sens);
    if (!t->measured || !t->sens) {
        kvq_plan_table_free(t);
        return kvq_fail(err, KVQ_ERR_NOMEM, "plan: out of memory");
    }
    return KVQ_OK;
}

kvq_status kvq_plan_sensitivities(const kvq_plan_setup *s, const kvq_type *types, int n_types,
                                  kvq_plan_table *out, kvq_error *err) {
    kvq_status st = check_setup(s, err);
    if (st || !types || !out) return st ? st : kvq_fail(err, KVQ_ERR_ARG, "plan: NULL argument");
    if ((st = init_table(s, types, n_types, out, err))) return st;
    const int L = out->n_layer;
    kvq_type *layer_types = kvq_malloc_n(2 * (size_t)L, sizeof *layer_types);
    if (!layer_types) { kvq_plan_table_free(out); return kvq_fail(err, KVQ_ERR_NOMEM, "plan: out of memory"); }
    kvq_type *side_types[2] = { layer_types, layer_types + L };
    for (int l = 0; l < 2 * L; l++) layer_types[l] = s->exact_type;

    kvq_plan_measurement m;
    st = kvq_plan_measure(s, side_types[0], side_types[1], &m, err);   /* the floor */
    out->floor_kld = m.kld.mean_kld;
    const int total = 2 * L * n_types;
    for (int l = 0, done = 0; !st && l < L; l++)
        for (int side = 0; !st && side < 2; side++)
            for (int i = 0; !st && i < n_types; i++) {
                side_types[side][l] = types[i];         /* only this layer and side */
                st = kvq_plan_measure(s, side_types[0], side_types[1], &m, err);
                side_types[side][l] = s->exact_type;
                if (st) break;
                const size_t at = kvq_plan_table_index(out, l, side, i);
                out->measured[at] = m.kld.mean_kld;
                out->sens[at] = KVQ_MAX(0.0, m.kld.mean_kld - out->floor_kld);
                if (s->progress) s->progress(s->progress_ud, ++done, total, l, side, types[i], m.kld.mean_kld);
            }
    free(layer_types);
    if (st) kvq_plan_table_free(out);
    return st;
}
