/* cache_query.c - the public questions about a created cache (kvq.h,
 * "cache queries"): its parameters, per-layer types, sink rows and the
 * positions each layer holds. */
#include "cache.h"

const kvq_cache_params *kvq_cache_get_params(const kvq_cache *c) { return c ? &c->p : NULL; }

kvq_type kvq_cache_layer_type(const kvq_cache *c, int layer, bool is_v) {
    if (!c || layer < 0 || layer >= c->p.n_layer) return KVQ_TYPE_COUNT;
    return is_v ? c->types_v[layer] : c->types_k[layer];
}

int kvq_cache_sink_rows(const kvq_cache *c) {
    int rows = 0;
    for (int l = 0; c && l < c->p.n_layer; l++) rows = KVQ_MAX(rows, KVQ_MAX(c->k[l].sink_rows, c->v[l].sink_rows));
    return rows;
}

int kvq_cache_n_stored(const kvq_cache *c, int layer) {
    if (!c || layer < 0 || layer >= c->p.n_layer) return -1;
    return c->n_stored[layer];
}
