/* synth_model.h - random-weight GGUF models of real shapes (`kvq synth`),
 * so that every machine can run the speed benchmarks on a model of the
 * size people run, without downloading one.
 *
 * A shape names a published architecture's hyper-parameters (layers,
 * widths, heads, vocabulary rows); the weights are random, seeded and
 * deterministic: the same (shape, weight type, seed) gives the same bytes.
 * The weights are good for speed only, never for quality claims.
 *
 * Vocabulary: token_embd has the shape's real number of rows (so the
 * output projection reads what the real model's does), but the tokenizer
 * is a small synthetic SentencePiece one: <unk>, <s>, </s> and the 256
 * byte tokens <0x00>..<0xFF> (any text encodes to bytes); ids past it
 * have an embedding row and no text. */
#ifndef KVQ_SYNTH_MODEL_H
#define KVQ_SYNTH_MODEL_H

#include "kvq.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct synth_shape {
    const char *name;          /* "qwen3-0.6B"                               */
    const char *arch;          /* GGUF architecture: "qwen3", "llama"        */
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_ctx_train;
    float rope_base, rms_eps;
    /* The published parameter count (tied embeddings counted once); 0 for
     * the test shapes.  synth_params must give exactly this. */
    int64_t published_params;
} synth_shape;

/* The named shapes, NULL-name terminated. */
extern const synth_shape synth_shapes[];
/* A shape by name (case-sensitive), NULL when unknown. */
const synth_shape *synth_find_shape(const char *name);

/* Weight type choices: one type for every matrix, or the K-quant mix. */
typedef enum synth_wtype {
    SYNTH_W_F32 = 0, SYNTH_W_F16, SYNTH_W_Q8_0, SYNTH_W_Q4_0, SYNTH_W_Q4_K, SYNTH_W_Q6_K,
    SYNTH_W_Q4_K_M,            /* q4_K, with q6_K for token_embd and for attn_v
                                * and ffn_down of some layers (see synth.c) */
    SYNTH_W_COUNT
} synth_wtype;

/* "q4_K_M" -> SYNTH_W_Q4_K_M; SYNTH_W_COUNT when unknown. */
synth_wtype synth_wtype_from_name(const char *name);
const char *synth_wtype_name(synth_wtype w);

/* One tensor of the file. */
typedef struct synth_tensor {
    char name[64];
    int64_t ne0, ne1;          /* ne0 = values per row (input), ne1 = rows    */
    kvq_type type;
    bool is_norm;              /* a norm weight: all ones, f32               */
} synth_tensor;

/* The file's tensors in order: n written into out (at most cap); returns
 * the total count (call with cap 0 for the count). */
int synth_tensors(const synth_shape *s, synth_wtype w, synth_tensor *out, int cap);
/* Parameters of the shape (every tensor's values, tied embeddings once);
 * non_embedding leaves token_embd out. */
int64_t synth_params(const synth_shape *s, bool non_embedding);
/* Bytes of the tensor data of the file (what kvq maps, without metadata). */
int64_t synth_weight_bytes(const synth_shape *s, synth_wtype w);

/* Write the model to `path`.  Rows of f32/f16/q8_0/q4_0 are Gaussian
 * (std 0.02) quantised with the library's own quantiser; K-quant blocks
 * are random valid blocks (scales and codes drawn directly: kvq has no
 * K-quant quantiser) whose values have about the same spread. */
kvq_status synth_write(const synth_shape *s, synth_wtype w, uint64_t seed, const char *path, kvq_error *err);

#endif
