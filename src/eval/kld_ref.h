/* kld_ref.h - a KLD reference of either format (docs/spec/eval.md §2): llama.cpp's
 * 16-bit base file (kld.h) or kvq's exact base (base_kvq.h), behind one
 * view, and the one per-token comparison every KLD run (kvq kld, sweep,
 * plan) uses. */
#ifndef KVQ_KLD_REF_H
#define KVQ_KLD_REF_H

#include "base_kvq.h"
#include "stats.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
