/*
 * fuzz_base_kvq.c - libFuzzer target for kvq's exact KLD base files
 * (src/eval/base_kvq.c), through kvq_base_kvq_open_memory.
 *
 * Each input is read twice: as it is (a mutated file almost always fails
 * a checksum there), and again after kvq_base_kvq_reseal has made its
 * hashes match its bytes, so that the checks behind the checksums (sizes
 * against the header, tokens, log-prob values) see mutated content too.
 * Either read must succeed (then every row compares with finite results)
 * or fail with KVQ_ERR_FORMAT and a message.
 */
#include "base_kvq.h"
#include "fuzz_input.h"

#include <math.h>
#include <stdlib.h>

static void compare_all(const kvq_base_kvq *b) {
    float *logits = calloc((size_t)b->n_vocab, sizeof *logits);
    if (!logits) abort();
    for (size_t pos = 0; pos < b->n_pos; pos++) {
        const float *row = kvq_base_kvq_row(b, pos);
        if (!row) abort();
        const int next = b->tokens[pos % ((size_t)b->n_ctx * (size_t)b->n_chunk)];
        kvq_kld_token t = kvq_base_kvq_compare(logits, b->n_vocab, row, next);
        if (!isfinite(t.kld) || !isfinite(t.nll) || !isfinite(t.nll_base) || !isfinite(t.dp)) abort();
    }
    if (kvq_base_kvq_row(b, b->n_pos) != NULL) abort();
    free(logits);
}

static void read_once(const void *buf, size_t size) {
    kvq_base_kvq *b = NULL;
    kvq_error err = { 0 };
    kvq_status s = kvq_base_kvq_open_memory(buf, size, "fuzz", &b, &err);
    if (s != KVQ_OK) {
        if ((s != KVQ_ERR_FORMAT && s != KVQ_ERR_NOMEM) || b || !err.msg[0]) abort();
        return;
    }
    compare_all(b);
    kvq_base_kvq_close(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_copy_input(data, size);
    if (!buf) return 0;
    read_once(buf, size);
    kvq_base_kvq_reseal(buf, size);
    read_once(buf, size);
    free(buf);
    return 0;
}
