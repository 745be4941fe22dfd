/*
 * model.c - load a GGUF model: hyper-parameters from the `ARCH.*` keys,
 * every tensor located and its shape and type checked, the tokenizer.
 *
 * Everything that can be wrong with a file is found here, once, with an
 * error naming the key or tensor; the forward pass then trusts the model.
 * That includes the values: a NaN or inf weight or block scale, or a
 * block_count that disagrees with the tensors, is refused here
 * (src/model/model_check.c) rather than giving a NaN perplexity later.
 */
#include "model.h"
#include "tokenizer.h"

#include <math.h>
#include <stdlib.h>

/* Largest values accepted from a file: far above any real model, low
 * enough that products of them cannot overflow the sizes computed later. */
/* Head sizes are parsed up to MAX_EMBD and then held to KVQ_MAX_HEAD_DIM
 * (kvq_internal.h), the cache's limit, with a message that says so. */
enum { MAX_EMBD = 1 << 16, MAX_LAYERS = 1024, MAX_HEADS = 1024,
       MAX_FF = 1 << 20, MAX_VOCAB = 1 << 22 };

typedef struct arch_desc {
    const char *name;
    kvq_arch arch;
    bool rope_neox;      /* half-split RoPE pairs                 */
    bool qkv_bias;       /* attn_q/k/v.bias present                */
    bool qk_norm;        /* per-head RMS norm of q and k           */
} arch_desc;

static const arch_desc g_archs[] = {
    { "llama", KVQ_ARCH_LLAMA, false, false, false },
    { "qwen2", KVQ_ARCH_QWEN2, true,  true,  false },
    { "qwen3", KVQ_ARCH_QWEN3, true,  false, true  },
};

/* ------------------------------------------------------------ metadata */

static kvq_status get_int(const gguf_file *f, const char *arch, const char *suffix, bool required,
                          int64_t lo, int64_t hi, int *out, kvq_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int64_t v;
    if (!gguf_get_i64(f, key, &v)) {
        if (!required) return KVQ_OK;
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: missing or non-integer metadata key '%s'", key);
    }
    if (v < lo || v > hi)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s' = %lld is out of range [%lld, %lld]", key,
                        (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return KVQ_OK;
}

static kvq_status get_float(const gguf_file *f, const char *arch, const char *suffix, bool required,
                            float *out, kvq_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    if (!gguf_get_f32(f, key, &v)) {
        if (!required) return KVQ_OK;
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: missing or non-float metadata key '%s'", key);
    }
    if (!isfinite(v) || v <= 0.0f)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s' = %g must be a positive number", key, (double)v);
    *out = v;
    return KVQ_OK;
}

/* RoPE scaling: 'none' and 'linear' (positions divided by the factor) are
 * what kvq implements; yarn/longrope change the frequencies per dimension
 * and are refused rather than silently ignored. */
static kvq_status read_rope_scaling(const gguf_file *f, const char *arch, kvq_model *m, kvq_error *err) {
    char key[128];
    gguf_str type = { "none", 4 };
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const gguf_kv *kv = gguf_find(f, key);
    if (kv && !gguf_get_str(f, key, &type))
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s' is not a string", key);
    float factor = 1.0f;
    kvq_status st = get_float(f, arch, "rope.scaling.factor", false, &factor, err);
    if (st) return st;
    if (!kv) {  /* older files: only rope.scale_linear */
        float lin = 1.0f;
        if ((st = get_float(f, arch, "rope.scale_linear", false, &lin, err))) return st;
        if (lin != 1.0f) { type = (gguf_str){ "linear", 6 }; factor = lin; }
    }
    if (gguf_str_eq(type, "none")) factor = 1.0f;
    else if (!gguf_str_eq(type, "linear"))
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: RoPE scaling type '%.*s' is not supported (only none, linear)",
                        (int)KVQ_MIN(type.len, 32), type.ptr);
    m->rope_freq_scale = 1.0f / factor;
    return KVQ_OK;
}

/* The status is returned (not read back from err, which may be NULL). */
static kvq_status find_arch(const gguf_file *f, char *name, size_t cap, const arch_desc **out, kvq_error *err) {
    gguf_str s;
    if (!gguf_get_str(f, "general.architecture", &s))
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: missing metadata key 'general.architecture'");
    snprintf(name, cap, "%.*s", (int)KVQ_MIN(s.len, cap - 1), s.ptr);
    for (size_t i = 0; i < KVQ_ARRAY_LEN(g_archs); i++)
        if (gguf_str_eq(s, g_archs[i].name)) {
            *out = &g_archs[i];
            return KVQ_OK;
        }
    return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: architecture '%s' is not supported (llama, qwen2, qwen3)", name);
}

static kvq_status read_hparams(const gguf_file *f, const arch_desc *a, kvq_model *m, kvq_error *err) {
    kvq_model_info *in = &m->info;
    const char *an = a->name;
    kvq_status st;
    if ((st = get_int(f, an, "embedding_length", true, 1, MAX_EMBD, &in->n_embd, err)) ||
        (st = get_int(f, an, "block_count", true, 1, MAX_LAYERS, &in->n_layer, err)) ||
        (st = get_int(f, an, "attention.head_count", true, 1, MAX_HEADS, &in->n_head, err)) ||
        (st = get_int(f, an, "feed_forward_length", true, 1, MAX_FF, &in->n_ff, err)))
        return st;
    in->n_head_kv = in->n_head;
    in->n_ctx_train = 2048;
    in->rope_base = 10000.0f;
    in->rms_eps = 1e-5f;
    if ((st = get_int(f, an, "attention.head_count_kv", false, 1, MAX_HEADS, &in->n_head_kv, err)) ||
        (st = get_int(f, an, "context_length", false, 1, INT32_MAX, &in->n_ctx_train, err)) ||
        (st = get_float(f, an, "rope.freq_base", false, &in->rope_base, err)) ||
        (st = get_float(f, an, "attention.layer_norm_rms_epsilon", false, &in->rms_eps, err)))
        return st;
    if (in->n_head % in->n_head_kv)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: head_count %d is not a multiple of head_count_kv %d",
                        in->n_head, in->n_head_kv);
    in->head_dim_k = in->head_dim_v = in->n_embd / in->n_head;
    if ((st = get_int(f, an, "attention.key_length", false, 1, MAX_EMBD, &in->head_dim_k, err)) ||
        (st = get_int(f, an, "attention.value_length", false, 1, MAX_EMBD, &in->head_dim_v, err)))
        return st;
    if (in->head_dim_k > KVQ_MAX_HEAD_DIM || in->head_dim_v > KVQ_MAX_HEAD_DIM)
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: head size %d (K) / %d (V) is above the KV cache's limit of %d",
                        in->head_dim_k, in->head_dim_v, KVQ_MAX_HEAD_DIM);
    if (in->head_dim_k < 2 || in->head_dim_k % 2)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: key head size %d must be even and >= 2", in->head_dim_k);
    int rope_dims = in->head_dim_k;
    if ((st = get_int(f, an, "rope.dimension_count", false, 1, MAX_EMBD, &rope_dims, err))) return st;
    if (rope_dims != in->head_dim_k)
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: partial RoPE (%d of %d dims) is not supported",
                        rope_dims, in->head_dim_k);
    in->rope_neox = a->rope_neox;
    in->arch = a->arch;
    return read_rope_scaling(f, an, m, err);
}

/* -------------------------------------------------------------- tensors */

static kvq_status find_tensor(const gguf_file *f, const char *name, const gguf_tensor **out, kvq_error *err) {
    *out = gguf_find_tensor(f, name);
    if (!*out) return kvq_fail(err, KVQ_ERR_FORMAT, "model: missing tensor '%s'", name);
    return KVQ_OK;
}

static kvq_status check_shape(const gguf_tensor *t, const char *name, int64_t ne0, int64_t ne1, kvq_error *err) {
    int64_t extra = 1;
    for (uint32_t d = 2; d < t->n_dims && d < 4; d++) extra *= t->ne[d];
    int64_t got1 = t->n_dims >= 2 ? t->ne[1] : 1;
    if (t->ne[0] != ne0 || got1 != ne1 || extra != 1)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                        name, (long long)t->ne[0], (long long)got1, (long long)ne0, (long long)ne1);
    return KVQ_OK;
}

/* A matrix used by kvq_matmul: its type must have a dot kernel and its
 * rows must be whole blocks (ggml files always are). */
static kvq_status load_matrix(const gguf_file *f, const char *name, int64_t cols, int64_t rows,
                              kvq_weight *w, kvq_error *err) {
    const gguf_tensor *t;
    kvq_status st;
    if ((st = find_tensor(f, name, &t, err)) || (st = check_shape(t, name, cols, rows, err))) return st;
    const kvq_type_traits *tr = kvq_type_get(t->type);
    if (!tr || !tr->dot || !tr->dequantize)
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which kvq cannot compute with",
                        name, kvq_type_name(t->type));
    if (cols % tr->block_size)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: tensor '%s' rows of %lld are not whole %s blocks of %d",
                        name, (long long)cols, tr->name, tr->block_size);
    w->type = t->type;
    w->data = t->data;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = kvq_row_bytes(t->type, cols);
    if (w->row_bytes * (size_t)rows > t->nbytes)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: tensor '%s' data is shorter than its shape", name);
    return kvq_check_finite(name, t->type, t->data, cols, rows, err);
}

/* A vector (norm weight, bias) converted to f32; the model owns it. */
static kvq_status load_vector(const gguf_file *f, const char *name, int64_t n, float **out, kvq_error *err) {
    const gguf_tensor *t;
    kvq_status st;
    if ((st = find_tensor(f, name, &t, err)) || (st = check_shape(t, name, n, 1, err))) return st;
    if (kvq_row_bytes(t->type, n) > t->nbytes || !kvq_type_get(t->type)->dequantize)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: tensor '%s' cannot be read as %lld values", name, (long long)n);
    if ((st = kvq_check_finite(name, t->type, t->data, n, 1, err))) return st;
    *out = kvq_malloc_n((size_t)n, sizeof(float));
    if (!*out) return kvq_fail(err, KVQ_ERR_NOMEM, "model: out of memory for '%s'", name);
    kvq_dequantize_row(t->type, t->data, *out, n);
    return KVQ_OK;
}

static kvq_status load_layer(const gguf_file *f, const arch_desc *a, const kvq_model_info *in, int il,
                             kvq_layer *L, kvq_error *err) {
    const int64_t E = in->n_embd, q_out = (int64_t)in->n_head * in->head_dim_k;
    const int64_t k_out = (int64_t)in->n_head_kv * in->head_dim_k, v_out = (int64_t)in->n_head_kv * in->head_dim_v;
    const int64_t o_in = (int64_t)in->n_head * in->head_dim_v;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    kvq_status st;
    if ((st = load_vector(f, NAME("attn_norm.weight"), E, &L->attn_norm, err)) ||
        (st = load_matrix(f, NAME("attn_q.weight"), E, q_out, &L->wq, err)) ||
        (st = load_matrix(f, NAME("attn_k.weight"), E, k_out, &L->wk, err)) ||
        (st = load_matrix(f, NAME("attn_v.weight"), E, v_out, &L->wv, err)) ||
        (st = load_matrix(f, NAME("attn_output.weight"), o_in, E, &L->wo, err)) ||
        (st = load_vector(f, NAME("ffn_norm.weight"), E, &L->ffn_norm, err)) ||
        (st = load_matrix(f, NAME("ffn_gate.weight"), E, in->n_ff, &L->ffn_gate, err)) ||
        (st = load_matrix(f, NAME("ffn_up.weight"), E, in->n_ff, &L->ffn_up, err)) ||
        (st = load_matrix(f, NAME("ffn_down.weight"), in->n_ff, E, &L->ffn_down, err)))
        return st;
    if (a->qkv_bias &&
        ((st = load_vector(f, NAME("attn_q.bias"), q_out, &L->bq, err)) ||
         (st = load_vector(f, NAME("attn_k.bias"), k_out, &L->bk, err)) ||
         (st = load_vector(f, NAME("attn_v.bias"), v_out, &L->bv, err))))
        return st;
    if (a->qk_norm &&
        ((st = load_vector(f, NAME("attn_q_norm.weight"), in->head_dim_k, &L->q_norm, err)) ||
         (st = load_vector(f, NAME("attn_k_norm.weight"), in->head_dim_k, &L->k_norm, err))))
        return st;
#undef NAME
    return KVQ_OK;
}

static kvq_status load_tensors(const gguf_file *f, const arch_desc *a, kvq_model *m, kvq_error *err) {
    kvq_model_info *in = &m->info;
    const gguf_tensor *emb;
    kvq_status st = find_tensor(f, "token_embd.weight", &emb, err);
    if (st) return st;
    if (emb->ne[1] < 1 || emb->ne[1] > MAX_VOCAB)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: token_embd.weight has %lld rows (vocabulary size)", (long long)emb->ne[1]);
    in->n_vocab = (int)emb->ne[1];
    if ((st = load_matrix(f, "token_embd.weight", in->n_embd, in->n_vocab, &m->tok_embd, err)) ||
        (st = load_vector(f, "output_norm.weight", in->n_embd, &m->output_norm, err)))
        return st;
    if (gguf_find_tensor(f, "output.weight")) {
        if ((st = load_matrix(f, "output.weight", in->n_embd, in->n_vocab, &m->output, err))) return st;
    } else {
        m->output = m->tok_embd;  /* tied embeddings */
    }
    if ((st = kvq_check_block_count(f, a->name, in->n_layer, err))) return st;
    m->layers = kvq_calloc((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers) return kvq_fail(err, KVQ_ERR_NOMEM, "model: out of memory for %d layers", in->n_layer);
    for (int il = 0; il < in->n_layer; il++)
        if ((st = load_layer(f, a, in, il, &m->layers[il], err))) return st;
    return KVQ_OK;
}

/* ------------------------------------------------------------ tokenizer */

static kvq_status load_tokenizer(kvq_model *m, kvq_error *err) {
    kvq_model_info *in = &m->info;
    kvq_status st = kvq_tokenizer_load(m->file, &m->tok, err);
    if (st) return st;
    const int32_t n_tok = kvq_tokenizer_n_vocab(m->tok);
    if (n_tok > in->n_vocab)   /* ids the embedding has no row for */
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: the tokenizer has %d tokens, token_embd only %d rows",
                        (int)n_tok, in->n_vocab);
    in->bos_id = kvq_tokenizer_bos(m->tok);
    in->eos_id = kvq_tokenizer_eos(m->tok);
    in->add_bos = kvq_tokenizer_add_bos(m->tok) && in->bos_id >= 0;
    return KVQ_OK;
}

/* ---------------------------------------------------------------- API */

/* The model in an opened GGUF file (owned by the model from here on). */
static kvq_status model_from_file(gguf_file *file, kvq_model **out, kvq_error *err) {
    kvq_model *m = kvq_calloc(1, sizeof *m);
    if (!m) { gguf_close(file); return kvq_fail(err, KVQ_ERR_NOMEM, "model: out of memory"); }
    m->file = file;
    const arch_desc *a = NULL;
    kvq_status st = find_arch(m->file, m->arch_name, sizeof m->arch_name, &a, err);
    if (!st) st = read_hparams(m->file, a, m, err);
    if (!st) st = load_tensors(m->file, a, m, err);
    if (!st) st = load_tokenizer(m, err);
    if (st) { kvq_model_free(m); return st; }
    m->info.arch_name = m->arch_name;
    *out = m;
    return KVQ_OK;
}

kvq_status kvq_model_load(const char *path, kvq_model **out, kvq_error *err) {
    return kvq_model_load_ex(path, KVQ_LOAD_MMAP, out, err);
}

kvq_status kvq_model_load_ex(const char *path, kvq_load_mode mode, kvq_model **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "kvq_model_load: out is NULL");
    *out = NULL;
    if (!path) return kvq_fail(err, KVQ_ERR_ARG, "kvq_model_load: path is NULL");
    if (mode != KVQ_LOAD_MMAP && mode != KVQ_LOAD_READ)
        return kvq_fail(err, KVQ_ERR_ARG, "kvq_model_load_ex: load mode %d: expected KVQ_LOAD_MMAP or KVQ_LOAD_READ",
                        (int)mode);
    gguf_file *file;
    kvq_status st = mode == KVQ_LOAD_READ ? gguf_open_read(path, &file, err) : gguf_open(path, &file, err);
    return st ? st : model_from_file(file, out, err);
}

kvq_status kvq_model_load_memory(const void *data, size_t size, kvq_model **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "kvq_model_load_memory: out is NULL");
    *out = NULL;
    gguf_file *file;
    kvq_status st = gguf_open_memory(data, size, &file, err);
    return st ? st : model_from_file(file, out, err);
}

void kvq_model_free(kvq_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int il = 0; il < m->info.n_layer; il++) {
            kvq_layer *L = &m->layers[il];
            free(L->attn_norm); free(L->ffn_norm);
            free(L->bq); free(L->bk); free(L->bv);
            free(L->q_norm); free(L->k_norm);
        }
        free(m->layers);
    }
    free(m->output_norm);
    if (m->tok) kvq_tokenizer_free(m->tok);
    if (m->file) gguf_close(m->file);
    free(m);
}

const kvq_model_info *kvq_model_get_info(const kvq_model *m) { return m ? &m->info : NULL; }

int kvq_tokenize(const kvq_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                 int32_t *out, int cap) {
    if (!m || (!text && len)) return -1;
    return kvq_tokenizer_encode(m->tok, text ? text : "", len, add_bos, parse_special, out, cap);
}

int kvq_token_to_piece(const kvq_model *m, int32_t token, char *buf, int cap) {
    if (!m || token < 0 || token >= m->info.n_vocab) return -1;
    return kvq_tokenizer_piece(m->tok, token, buf, cap);
}
