/*
 * planner.h - the KV-cache budget planner (docs/spec/eval.md §5): per-layer K/V
 * types that fit a byte budget with the least predicted KLD.
 *
 *  1. reference: the exact (f32) cache's log-probs, computed once
 *     (kvq_plan_reference) or read from a base file;
 *  2. sensitivity: for every layer l, side s (K or V) and candidate type t,
 *     one real KLD run with ONLY (l, s) quantised to t, every other layer
 *     and side exact: S(l,s,t) = mean KLD - mean KLD of the all-exact cache
 *     (the floor, not zero against a 16-bit base file), clamped at 0;
 *  3. choice: the additive model predicts
 *         KLD(plan) ~= floor + sum over (l,s) of S(l, s, type(l,s)),
 *     and the multiple-choice knapsack (knapsack.h) finds the plan with
 *     the least prediction whose bytes per token fit the budget, exactly;
 *  4. verification: one real KLD run of the chosen plan.
 *
 * Sizes are per token: every (layer, side) stores n_head_kv rows of its
 * type per position, so "bytes of the cache / bf16 bytes at the same
 * context" (docs/spec/eval.md §3 size %) is the same ratio at any context, and the
 * MiB at the model's trained context is bytes per token * n_ctx_train.
 * The planner works without tail or sink (they would add fixed bytes).
 */
#ifndef KVQ_PLANNER_H
#define KVQ_PLANNER_H

#include "kld_ref.h"
#include "kvq_eval.h"

/* The declarations are public: include/kvq_eval.h. */

#endif
