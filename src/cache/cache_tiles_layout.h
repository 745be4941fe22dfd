/* cache_tiles_layout.h - the order of a KVarN record's codes in the
 * cache's memory (cache_tiles_layout.c): K in lanes and V in pairs, as
 * the block types' bodies (cache_lanes.h), so that the attention kernels
 * sum 16 keys, or two keys per lane, in integers; token-major (kvarn.h)
 * in files and codecs.  A property of the memory only, like the block
 * types' layouts: the same bytes, the same values. */
#ifndef KVQ_CACHE_TILES_LAYOUT_H
#define KVQ_CACHE_TILES_LAYOUT_H

#include "kvarn.h"

/* Whether records of shape s are kept in that order in the cache. */
bool kvq_tiles_layout_applies(kvq_kvarn_shape s);
/* A whole tile's token-major payload (128 * width * bits / 8 bytes) into the
 * cache order (its orientation's), and tokens t0 .. t0 + n - 1 back out
 * as n token-major rows of codes. */
void kvq_tiles_layout_put(kvq_kvarn_shape s, const uint8_t *tokens, uint8_t *payload);
void kvq_tiles_layout_get(kvq_kvarn_shape s, const uint8_t *payload, int t0, int n, uint8_t *tokens);

#endif
