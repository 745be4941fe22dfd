/* cache_reads.h - the bytes attention reads from the cache (src/cache/cache_reads.c),
 * for the memory-bandwidth bound that `kvq bench` prints next to each
 * speed (bytes per generated token / bandwidth = the fastest a step can
 * be).  Internal: tools and tests. */
#ifndef KVQ_CACHE_READS_H
#define KVQ_CACHE_READS_H

#include "cache.h"

/* Bytes one query row at position qp reads from layer `layer`: for each
 * side (K, V) and KV head, the row of every key 0..qp from the copy that
 * key is read from (kvq_cache_side_split: exact sink and ring rows in
 * tail_type, body rows in the layer's type; a tile body's key costs its
 * tile's records / 128).  What the kernel loads, not what it skips: a
 * key of weight 0 still counts. */
double kvq_cache_query_bytes(const kvq_cache *c, int layer, int qp);

/* The same summed over every layer. */
double kvq_cache_query_bytes_all(const kvq_cache *c, int qp);

#endif
