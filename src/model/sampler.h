/* sampler.h - choosing the next token from a row of logits: the API is
 * public (kvq.h, "sampler"); src/model/sampler.c implements it. */
#ifndef KVQ_SAMPLER_H
#define KVQ_SAMPLER_H

#include "kvq_internal.h"

#endif
