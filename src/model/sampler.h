/*
 * sampler.h - choosing the next token from a row of logits.
 *
 * temp <= 0: greedy (the highest logit, lowest id on ties).  Otherwise, in
 * llama.cpp's order: keep the top_k highest logits (top_k <= 0: all), then
 * the smallest set of those whose probabilities (softmax at temperature 1)
 * sum to at least top_p (top_p >= 1: all), then draw from the softmax of
 * the survivors' logits / temp.  The random numbers come from the
 * sampler's own splitmix64 generator: the same seed gives the same
 * choices on every platform.  NaN logits count as -inf.
 */
#ifndef KVQ_SAMPLER_H
#define KVQ_SAMPLER_H

#include "kvq_internal.h"

typedef struct kvq_sampler_params {
    float temp;        /* <= 0: greedy                        */
    int top_k;         /* <= 0: no limit                      */
    float top_p;       /* >= 1: no limit                      */
    uint64_t seed;
} kvq_sampler_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95; seed 0 (the
 * CLI draws a random one when --seed is not given, see below). */
void kvq_sampler_params_default(kvq_sampler_params *p);

/* A fresh seed in 0..2^32-1 (the range --seed accepts, so that a run can
 * be replayed): 8 bytes of /dev/urandom, or the clock and process id
 * when that cannot be read. */
uint64_t kvq_sampler_random_seed(void);

typedef struct kvq_sampler kvq_sampler;

kvq_status kvq_sampler_create(const kvq_sampler_params *p, kvq_sampler **out, kvq_error *err);
void kvq_sampler_free(kvq_sampler *s);
/* Restart the random sequence from a seed. */
void kvq_sampler_reseed(kvq_sampler *s, uint64_t seed);

/* The chosen token id, or -1 for bad input (no logits, n_vocab < 1) or
 * when out of memory.  Not thread-safe per sampler (it advances its
 * generator and reuses scratch memory). */
int kvq_sample(kvq_sampler *s, const float *logits, int n_vocab);

#endif
