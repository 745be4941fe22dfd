/* cache_reads.c - bytes attention reads from the cache (cache_reads.h). */
#include "cache_reads.h"

#include <limits.h>

/* One side: sink rows [0, sink_end), body [sink_end, ring_start), ring
 * and stage [ring_start, qp] (the cuts attention makes, attention.c
 * part_at; ring and stage rows are both exact rows of tail_type). */
static double side_bytes(const kvq_cache *c, const kvq_cache_side *sd, int qp) {
    const kvq_key_split s = kvq_cache_side_split(sd, qp, INT_MAX);
    const int sink = KVQ_MIN(s.sink_end, qp + 1);
    const int ring_start = KVQ_MIN(KVQ_MAX(s.ring_start, sink), qp + 1);
    const double exact = (double)(sink + (qp + 1 - ring_start)) * (double)sd->exact_row_bytes;
    const double body_row = sd->layout == KVQ_LAYOUT_TILES
                                ? (double)sd->n_slices * (double)sd->record_bytes / KVQ_KVARN_TILE
                                : (double)sd->row_bytes;
    return (double)c->p.n_head_kv * (exact + (double)(ring_start - sink) * body_row);
}

double kvq_cache_query_bytes(const kvq_cache *c, int layer, int qp) {
    if (!c || layer < 0 || layer >= c->p.n_layer || qp < 0) return 0.0;
    return side_bytes(c, &c->k[layer], qp) + side_bytes(c, &c->v[layer], qp);
}

double kvq_cache_query_bytes_all(const kvq_cache *c, int qp) {
    double sum = 0.0;
    for (int il = 0; c && il < c->p.n_layer; il++) sum += kvq_cache_query_bytes(c, il, qp);
    return sum;
}
