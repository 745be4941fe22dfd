/* state_caches.h - the caches the state fuzz target restores into, shared
 * with make_corpus.c so that its seeds are states of exactly these caches:
 * rows (q4_0/q8_0 with tail and rollback), KVarN tiles, TurboQuant with f16. */
#ifndef KVQ_FUZZ_STATE_CACHES_H
#define KVQ_FUZZ_STATE_CACHES_H

#include "kvq.h"

#include <string.h>

enum { STATE_CACHES = 3 };

static inline kvq_cache *state_cache_make(int which) {
    static const struct { kvq_type k, v; int tail; } fam[STATE_CACHES] = {
        { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, 16 }, { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 0 }, { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_F16, 4 },
    };
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_layer = 1;
    p.n_head_kv = 1;
    p.head_dim_k = p.head_dim_v = 64;
    p.n_ctx = 300;
    p.max_batch = 64;
    p.type_k = fam[which].k;
    p.type_v = fam[which].v;
    p.tail_tokens = fam[which].tail;
    p.rollback_tokens = 8;
    kvq_cache *c = NULL;
    return kvq_cache_create(&p, &c, NULL) == KVQ_OK ? c : NULL;
}

#endif
