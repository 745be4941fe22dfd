/* drift.h - how quantisation errors accumulate while the model writes its
 * own tokens (docs/spec/eval.md §7, docs/drift.md).
 *
 * The reference: for every prompt, the exact cache (f32) generates n_gen
 * tokens greedily (argmax, first on ties; end-of-text does not stop it,
 * so every prompt contributes exactly n_gen positions).  Its logits at
 * every generated position are kept in memory.
 *
 * A tested cache is then run teacher-forced: the prompt is prefilled in
 * the same batches, then the reference's tokens are fed one decoding step
 * at a time, exactly as a generation would feed them, and at generated
 * position i (1-based: the distribution of the i-th generated token) the
 * tested next-token distribution is compared with the reference's:
 * KL(exact || tested), over the whole vocabulary, in double.
 *
 * Free-running greedy decoding with the tested cache is the same
 * computation up to and including the first position where its greedy
 * token differs from the reference's (the same tokens in, the same cache
 * contents, the same logits).  So the first divergence (the first i whose
 * tested argmax is not the reference's token; n_gen + 1 when there is
 * none) and the KLD there come out of the teacher-forced run;
 * tests/test_drift.c checks that against a real free-running decode.
 *
 * Both contexts must evaluate the same way: the same max_batch (the
 * prompt's prefill batches) and enough positions for the longest prompt
 * plus n_gen.  With an f32 tested cache the logits are bit-identical to
 * the reference's and every KLD is exactly 0. */
#ifndef KVQ_DRIFT_H
#define KVQ_DRIFT_H

#include "kvq_internal.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
