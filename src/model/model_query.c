/* model_query.c - the public questions a caller asks a loaded model
 * beyond kvq_model_get_info (kvq.h, "model queries"): RoPE scale, weight
 * types and bytes, the file's tensors and metadata. */
#include "model.h"

#include <limits.h>
#include <string.h>

float kvq_model_rope_freq_scale(const kvq_model *m) { return m ? m->rope_freq_scale : 0.0f; }

static double matrix_bytes(const kvq_weight *w) { return (double)w->row_bytes * (double)w->rows; }

/* Every matrix once, one embedding row, the norms and biases: what a
 * decode step streams from memory (tools/bench_bound.h's bound). */
static double decode_bytes(const kvq_model *m) {
    const kvq_model_info *in = &m->info;
    const double f = sizeof(float);
    double sum = matrix_bytes(&m->output) + (double)m->tok_embd.row_bytes + f * in->n_embd;   /* + output norm */
    const double q = (double)in->n_head * in->head_dim_k, kv = (double)in->n_head_kv * in->head_dim_k;
    const double v = (double)in->n_head_kv * in->head_dim_v;
    for (int il = 0; il < in->n_layer; il++) {
        const kvq_layer *L = &m->layers[il];
        const kvq_weight *w[KVQ_LAYER_MATRICES];
        kvq_layer_matrices(L, w);
        for (int i = 0; i < KVQ_LAYER_MATRICES; i++) sum += matrix_bytes(w[i]);
        sum += 2 * f * in->n_embd;                                    /* attention and FFN norms */
        if (L->q_norm) sum += f * 2 * in->head_dim_k;
        if (L->bq) sum += f * (q + kv + v);
    }
    return sum;
}

void kvq_model_get_weights(const kvq_model *m, kvq_model_weights *out) {
    memset(out, 0, sizeof *out);
    if (!m) return;
    out->embd_type = m->tok_embd.type;
    out->output_type = m->output.type;
    out->output_tied = m->output.data == m->tok_embd.data;
    out->decode_bytes = decode_bytes(m);
}

int64_t kvq_model_n_tensors(const kvq_model *m) { return m ? (int64_t)m->file->n_tensors : 0; }

kvq_status kvq_model_tensor(const kvq_model *m, int64_t i, kvq_tensor_info *out, kvq_error *err) {
    if (!m || !out) return kvq_fail(err, KVQ_ERR_ARG, "kvq_model_tensor: no model or no output");
    if (i < 0 || (uint64_t)i >= m->file->n_tensors)
        return kvq_fail(err, KVQ_ERR_ARG, "tensor %lld: the model has %llu tensors", (long long)i,
                        (unsigned long long)m->file->n_tensors);
    const gguf_tensor *t = &m->file->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = t->name.ptr;
    out->name_len = (int)t->name.len;
    out->type = t->type;
    out->n_dims = (int)t->n_dims;
    for (int d = 0; d < 4; d++) out->ne[d] = t->ne[d];
    out->nbytes = t->nbytes;
    out->data = t->data;
    return KVQ_OK;
}

long kvq_model_meta_str(const kvq_model *m, const char *key, char *buf, size_t cap) {
    gguf_str s;
    if (!m || !key || !gguf_get_str(m->file, key, &s) || s.len > (uint64_t)LONG_MAX) return -1;
    if (buf && cap) {
        const size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
        memcpy(buf, s.ptr, n);
        buf[n] = 0;
    }
    return (long)s.len;
}

bool kvq_model_meta_int(const kvq_model *m, const char *key, int64_t *out) {
    return m && key && out && gguf_get_i64(m->file, key, out);
}

bool kvq_model_meta_float(const kvq_model *m, const char *key, float *out) {
    return m && key && out && gguf_get_f32(m->file, key, out);
}

long kvq_model_chat_template(const kvq_model *m, char *buf, size_t cap) {
    return kvq_model_meta_str(m, "tokenizer.chat_template", buf, cap);
}
