/*
 * fuzz_model.c - libFuzzer target for the model loader (src/model/model.c)
 * on top of the GGUF reader: architecture, hyperparameters, every tensor's
 * type and shape, the finite-value checks and the tokenizer.
 *
 * An input must either fail to load with a message, or load into a model
 * that can run: a context with a q4_0 cache is created and evaluates a
 * short prompt (two tokens, then one more), so shapes the loader accepted
 * are shapes the forward pass can use.  Logits of random weights may be
 * anything; memory errors and undefined behaviour are what is caught.
 */
#include "fuzz_input.h"
#include "model.h"

#include <stdlib.h>

/* Small enough for a fuzzer's rate, big enough to hold the prompt (every
 * tensor lies inside the input, so the model itself is small). */
enum { N_CTX = 8 };

static void run_model(const kvq_model *m) {
    const kvq_model_info *in = kvq_model_get_info(m);
    if (!in || in->n_vocab < 1 || in->n_layer < 1) abort();
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.type_k = p.type_v = KVQ_TYPE_Q4_0;
    p.n_ctx = N_CTX;
    p.max_batch = 2;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0 };
    if (kvq_ctx_create(m, &p, 1, &ctx, &err) != KVQ_OK) {
        if (!err.msg[0] || ctx) abort();
        return;
    }
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    if (!logits) abort();
    const int32_t prompt[2] = { 0, in->n_vocab - 1 };
    const int32_t next = in->n_vocab / 2;
    if (kvq_ctx_eval(ctx, prompt, 2, 0, logits, true, &err) != KVQ_OK ||
        kvq_ctx_eval(ctx, &next, 1, 2, logits, true, &err) != KVQ_OK)
        if (!err.msg[0]) abort();
    free(logits);
    kvq_ctx_free(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_copy_input(data, size);   /* the model reads its weights in place */
    if (!buf) return 0;
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = kvq_model_load_memory(buf, size, &m, &err);
    if (st != KVQ_OK) {
        if (m || !err.msg[0]) abort();
    } else {
        run_model(m);
        kvq_model_free(m);
    }
    free(buf);
    return 0;
}
