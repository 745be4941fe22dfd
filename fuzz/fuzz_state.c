/*
 * fuzz_state.c - libFuzzer target for the cache state loader
 * (kvq_cache_load_memory, src/cache/cache_state.c).
 *
 * One small cache of every family's settings is made once (state_caches.h);
 * any input must either restore (then attention over what it holds must
 * run) or fail with a message and leave the cache empty; ASan/UBSan catch
 * the rest.  Each input is tried as it is and with its checksum resealed,
 * so that mutations get past the checksum into the settings and data.
 * Seeds: fuzz/corpus/state/ (make fuzz-corpus).
 */
#include "cache.h"
#include "fuzz_input.h"
#include "hash64.h"
#include "state_caches.h"

#include <stdlib.h>

static void try_load(kvq_cache *c, const uint8_t *data, size_t size) {
    int32_t *toks = NULL;
    int n = 0;
    kvq_error err = { 0, "" };
    if (kvq_cache_load_memory(c, data, size, 0, &toks, &n, &err) == KVQ_OK) {
        if (n > 0) {
            float q[64], out[64];
            memset(q, 0, sizeof q);
            if (kvq_cache_attend(c, 0, n - 1, 1, 1, q, 1.0f, out, NULL, &err) != KVQ_OK && !err.msg[0]) abort();
        }
    } else if (!err.msg[0] || c->n_stored[0] != 0) {
        abort();                         /* a refusal says why and leaves nothing behind */
    }
    free(toks);
    kvq_cache_clear(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static kvq_cache *caches[STATE_CACHES];
    if (!caches[0])
        for (int i = 0; i < STATE_CACHES; i++)
            if (!(caches[i] = state_cache_make(i))) abort();
    uint8_t *sealed = fuzz_copy_input(data, size);
    if (!sealed) abort();
    if (size >= 8) kvq_wr64(sealed + size - 8, kvq_hash64_of(sealed, size - 8));
    for (int i = 0; i < STATE_CACHES; i++) {
        try_load(caches[i], data, size);
        try_load(caches[i], sealed, size);
    }
    free(sealed);
    return 0;
}
