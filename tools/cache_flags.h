/* cache_flags.h - the cache options shared by run, perplexity, kld and
 * bench: one parser, one help text, one start-up log. */
#ifndef KVQ_CACHE_FLAGS_H
#define KVQ_CACHE_FLAGS_H

#include "kvq.h"

#include <stdio.h>

/* Per-layer overrides (--cache-type-k-layers / --cache-type-v-layers):
 * "0-3:q8_0,4-27:q4_0", ranges inclusive, later entries win, layers not
 * listed keep -ctk/-ctv.  The syntax is checked while parsing; layer
 * numbers against the model once it is loaded (cache_flags_apply_layers). */
enum { CACHE_FLAGS_MAX_RANGES = KVQ_LAYER_SPEC_MAX, CACHE_FLAGS_MAX_LAYERS = 1024 };

/* The library's parsed form (kvq.h, "per-layer types"); n 0: no override
 * on this side. */
typedef kvq_layer_range layer_range;
typedef kvq_layer_spec layer_spec;

typedef struct cache_flags {
    kvq_cache_params params;   /* types, tail, sink, rotation request */
    bool tail_auto;            /* --kv-tail-tokens auto               */
    bool tail_type_given;      /* --kv-tail-type was on the command line */
    layer_spec layers[2];      /* [0] K, [1] V                        */
    const char *calib_path;    /* --calib FILE (loaded with the model) */
    /* storage behind params.layer_type_k / layer_type_v once applied */
    kvq_type layer_types[2][CACHE_FLAGS_MAX_LAYERS];
} cache_flags;

void cache_flags_init(cache_flags *cf);
/* If argv[*i] is a cache flag, consume it (and its value) and return 1;
 * return 0 when it is not one; -1 after printing an error. */
int cache_flags_parse(const char *cmd, cache_flags *cf, int argc, char **argv, int *i);
/* Parse one override SPEC.  On failure writes one line (without the
 * "kvq CMD: error: " prefix) into msg and returns false. */
bool layer_spec_parse(const char *spec, layer_spec *out, char *msg, size_t cap);
/* Expand the overrides for a model of n_layer layers into
 * params.layer_type_k/v (left NULL on a side without overrides); prints
 * one error line and returns false when a range names a layer >= n_layer. */
bool cache_flags_apply_layers(const char *cmd, cache_flags *cf, int n_layer);
/* Settle what depends on the context size (auto tail = 1024, capped) and
 * on the types (tail type f16 when a side is KVarN and none was given,
 * docs/cache.md; per-layer types count once applied).  A tail or sink
 * longer than n_ctx is an error (one line on stderr; false). */
bool cache_flags_resolve(const char *cmd, cache_flags *cf, int n_ctx);
/* The tail and sink check of cache_flags_resolve alone, for commands that
 * know the context before loading anything. */
bool cache_flags_fit(const char *cmd, const cache_flags *cf, int n_ctx);
void cache_flags_usage(FILE *f);
/* Log the cache's memory figures and rotation choice to stderr. */
void cache_flags_log(const char *cmd, const kvq_cache *c);
/* Short "k/v" name such as "q4_0/q8_0" for tables. */
void cache_flags_name(const cache_flags *cf, char *buf, size_t cap);

#endif
