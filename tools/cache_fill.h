/* cache_fill.h - synthetic K/V rows written into a cache as a prefill
 * writes them: how `kvq bench` and kvq-bench reach a depth without
 * running the model (the speed of a step does not depend on the values;
 * their distribution matters only to the quantisers' search time). */
#ifndef KVQ_TOOLS_CACHE_FILL_H
#define KVQ_TOOLS_CACHE_FILL_H

#include "kvq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* n roughly unit-Gaussian values (a sum of 4 uniforms, scaled): the K and
 * V rows of a normed model, seeded. */
void cli_fill_noise(float *x, size_t n, uint64_t seed);

/* Positions 0..n_pos-1 of layers 0..n_layer-1 written through
 * kvq_cache_write_pool, `batch` positions per call, each batch into every
 * layer before the next one (a prefill's order), every batch from the
 * same rows k and v (`batch` rows each).  With lone_last the last
 * position is written alone, as a decode step writes its own row (what
 * stays in a staged type's stage).  The first failing write's status
 * (KVQ_ERR_ARG for a batch below 1). */
kvq_status cli_fill_cache(kvq_cache *c, int n_layer, int n_pos, int batch, const float *k, const float *v,
                          bool lone_last, kvq_pool *pool, kvq_error *err);

#endif
