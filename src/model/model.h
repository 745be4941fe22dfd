/* model.h - the loaded model (internal): hyper-parameters, weight views
 * into the GGUF file's bytes (mapped, or read into memory:
 * kvq_model_load_ex), and the tokenizer.
 *
 * Matrices stay in the file's storage type and are read in place by
 * kvq_matmul; the small vectors (norm weights, biases) are converted to
 * f32 once at load, so the forward pass never needs their file type. */
#ifndef KVQ_MODEL_H
#define KVQ_MODEL_H

#include "gguf.h"
#include "kvq_internal.h"

struct kvq_tokenizer;

/* A matrix of `rows` output rows, each `cols` values of `type`, in place
 * in the file (ggml order: ne[0] = cols, contiguous). */
typedef struct kvq_weight {
    kvq_type type;
    const void *data;
    int64_t rows, cols;
    size_t row_bytes;
} kvq_weight;

typedef struct kvq_layer {
    float *attn_norm, *ffn_norm;        /* [n_embd]                      */
    kvq_weight wq, wk, wv, wo;          /* attention projections         */
    float *bq, *bk, *bv;                /* qwen2 biases, NULL otherwise  */
    float *q_norm, *k_norm;             /* qwen3 [head_dim_k], else NULL */
    kvq_weight ffn_gate, ffn_up, ffn_down;
} kvq_layer;

/* A layer's matrices in the order the forward pass multiplies them (what
 * a decode step's bytes and `kvq-bench matmul --model` walk). */
enum { KVQ_LAYER_MATRICES = 7 };
static inline void kvq_layer_matrices(const kvq_layer *L, const kvq_weight *w[KVQ_LAYER_MATRICES]) {
    w[0] = &L->wq; w[1] = &L->wk; w[2] = &L->wv; w[3] = &L->wo;
    w[4] = &L->ffn_gate; w[5] = &L->ffn_up; w[6] = &L->ffn_down;
}

struct kvq_model {
    kvq_model_info info;
    float rope_freq_scale;              /* 1 / linear scaling factor     */
    gguf_file *file;
    struct kvq_tokenizer *tok;
    kvq_weight tok_embd;                /* [n_vocab][n_embd]             */
    kvq_weight output;                  /* [n_vocab][n_embd], maybe tied */
    float *output_norm;                 /* [n_embd]                      */
    kvq_layer *layers;                  /* [n_layer]                     */
    char arch_name[16];
};

/* kvq_model_load of a GGUF file already in memory (the fuzz target's way
 * in): data must outlive the model, which reads its weights in place. */
kvq_status kvq_model_load_memory(const void *data, size_t size, kvq_model **out, kvq_error *err);

/* Load-time checks (src/model/model_check.c), each one error naming the tensor
 * or key.  kvq_check_finite: every value of a rows x cols tensor of type
 * (as decoded: block scales included) is finite.  kvq_check_block_count:
 * the file's blk.N tensors are exactly blocks 0 .. n_layer-1. */
kvq_status kvq_check_finite(const char *name, kvq_type type, const void *data, int64_t cols, int64_t rows,
                            kvq_error *err);
kvq_status kvq_check_block_count(const gguf_file *f, const char *arch, int n_layer, kvq_error *err);

/* Internal accessor of an evaluation context (src/model/forward.c); the
 * model, vocabulary, threads and batch ones are public (kvq.h). */
kvq_pool *kvq_ctx_pool(const kvq_ctx *c);

/* Called by the forward pass in every layer of every batch, after the
 * batch's K and V are written to the cache and before attention reads it:
 * q [n][n_head][head_dim_k] as attention gets it (after RoPE), k and v as
 * written.  For calibration (src/calib_stats.c); an error stops the pass.
 * fn NULL removes the observer. */
typedef kvq_status (*kvq_layer_observer)(void *ud, int layer, int pos, int n, const float *q, const float *k,
                                         const float *v, kvq_error *err);
void kvq_ctx_set_observer(kvq_ctx *c, kvq_layer_observer fn, void *ud);
/* kvq_ctx_eval with logits (if not NULL) for rows first_row..n-1 only,
 * written from logits[0]: the output projection, the widest product of
 * a big-vocabulary model, is skipped for rows nobody scores. */
kvq_status kvq_ctx_eval_rows(kvq_ctx *c, const int32_t *tokens, int n, int pos, int first_row, float *logits,
                             kvq_error *err);

#endif
