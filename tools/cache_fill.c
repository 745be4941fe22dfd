/* cache_fill.c - synthetic K/V rows written into a cache (cache_fill.h). */
#include "cache_fill.h"

void cli_fill_noise(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (int j = 0; j < 4; j++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            acc += (float)(seed >> 40) * (1.0f / 16777216.0f);
        }
        x[i] = (acc - 2.0f) * 1.7320508f;   /* mean 0, variance 1 */
    }
}

kvq_status cli_fill_cache(kvq_cache *c, int n_layer, int n_pos, int batch, const float *k, const float *v,
                          bool lone_last, kvq_pool *pool, kvq_error *err) {
    if (batch < 1) return kvq_fail(err, KVQ_ERR_ARG, "cache fill: batch %d, want at least 1", batch);
    const int body = lone_last && n_pos > 0 ? n_pos - 1 : n_pos;
    for (int pos = 0; pos < n_pos;) {
        const int n = pos < body ? (body - pos < batch ? body - pos : batch) : 1;
        for (int il = 0; il < n_layer; il++) {
            const kvq_status st = kvq_cache_write_pool(c, il, pos, n, k, v, pool, err);
            if (st != KVQ_OK) return st;
        }
        pos += n;
    }
    return KVQ_OK;
}
