/* cache_flags.h - the cache options shared by run, perplexity, kld and
 * bench: one parser, one help text, one start-up log. */
#ifndef KVQ_CACHE_FLAGS_H
#define KVQ_CACHE_FLAGS_H

#include "kvq.h"

#include <stdio.h>

typedef struct cache_flags {
    kvq_cache_params params;   /* types, tail, sink, rotation request */
    bool tail_auto;            /* --kv-tail-tokens auto               */
} cache_flags;

void cache_flags_init(cache_flags *cf);
/* If argv[*i] is a cache flag, consume it (and its value) and return 1;
 * return 0 when it is not one; -1 after printing an error. */
int cache_flags_parse(const char *cmd, cache_flags *cf, int argc, char **argv, int *i);
/* Settle what depends on the context size (auto tail = 1024, capped). */
void cache_flags_resolve(cache_flags *cf, int n_ctx);
void cache_flags_usage(FILE *f);
/* Log the cache's memory figures and rotation choice to stderr. */
void cache_flags_log(const char *cmd, const kvq_cache *c);
/* Short "k/v" name such as "q4_0/q8_0" for tables. */
void cache_flags_name(const cache_flags *cf, char *buf, size_t cap);

#endif
