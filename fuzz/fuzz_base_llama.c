/*
 * fuzz_base_llama.c - libFuzzer target for llama.cpp's KLD base files
 * (src/eval/kld.c), through kvq_kld_base_parse: the reader every kvq kld,
 * sweep and plan run with a --base FILE of that format uses.
 *
 * Any input must either parse (then every scored position compares
 * against two logit vectors with finite results: a parsed base never
 * yields a NaN KLD) or fail with KVQ_ERR_FORMAT and a message.
 */
#include "kld_ref.h"

#include <math.h>
#include <stdlib.h>

static void compare_all(const kvq_kld_base *b) {
    kvq_kld_ref r;
    kvq_kld_ref_from_llama(&r, b);
    float *logits = malloc((size_t)r.n_vocab * sizeof *logits);
    if (!logits) abort();
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < r.n_vocab; i++) logits[i] = pass ? (float)(i % 7) - 3.0f : 0.0f;
        for (size_t pos = 0; pos < r.n_pos; pos++) {
            kvq_kld_token t;
            kvq_error err = { 0 };
            const int next = r.tokens[pos % ((size_t)r.n_ctx * (size_t)r.n_chunk)];
            if (kvq_kld_ref_compare(&r, pos, logits, next, &t, &err) != KVQ_OK) abort();
            if (!isfinite(t.kld) || !isfinite(t.nll) || !isfinite(t.nll_base) || !isfinite(t.dp)) abort();
        }
    }
    free(logits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvq_kld_base *b = NULL;
    kvq_error err = { 0 };
    kvq_status s = kvq_kld_base_parse(data, size, "fuzz", &b, &err);
    if (s != KVQ_OK) {
        if ((s != KVQ_ERR_FORMAT && s != KVQ_ERR_NOMEM) || b || !err.msg[0]) abort();
        return 0;
    }
    compare_all(b);
    kvq_kld_base_free(b);
    return 0;
}
