/* ladder.h - the recommendation ladder of a sweep (docs/spec/eval.md §4): the Pareto
 * frontier of (size %, median KLD), smaller being better on both, from the
 * exact cache down to the smallest configuration, each step labelled with
 * a tier by thresholds on median KLD.
 *
 * Frontier rule (deterministic):
 *   - rows whose size or median KLD is NAN, or whose size is negative, take
 *     no part (a failed run cannot be recommended);
 *   - a row is on the frontier when no other row is at most as large and at
 *     most as far (median KLD) with one of the two strictly smaller;
 *   - rows equal on both coordinates: only the first by label (then by
 *     input order) is kept;
 *   - the reference row (is_reference) always heads the ladder, even when
 *     a configuration dominates it numerically (a run-to-run wobble must
 *     not drop the exact cache); rows as large as the reference or larger
 *     are never listed after it, since they cannot beat the exact cache.
 * The ladder is ordered by size, largest (the reference) first; along it
 * the median KLD strictly increases. */
#ifndef KVQ_LADDER_H
#define KVQ_LADDER_H

#include "eval_row.h"

typedef enum kvq_tier {
    KVQ_TIER_REFERENCE = 0,
    KVQ_TIER_HIGH_FIDELITY,
    KVQ_TIER_BALANCED,
    KVQ_TIER_COMPACT,
    KVQ_TIER_EMERGENCY,
    KVQ_TIER_COUNT
} kvq_tier;

/* Upper bounds (inclusive) on median KLD, in nats, of the tiers below the
 * reference; above `compact` a configuration is "emergency". */
typedef struct kvq_ladder_thresholds {
    double high_fidelity, balanced, compact;
} kvq_ladder_thresholds;

/* 0.001 / 0.01 / 0.05 nats: a median token keeps >= 99.9% / 99% / 95%
 * "precision" (exp(-KLD)); beyond 0.05 quality loss is usually visible. */
kvq_ladder_thresholds kvq_ladder_default_thresholds(void);

const char *kvq_tier_name(kvq_tier t);   /* "high fidelity", ...     */
kvq_tier kvq_tier_of(const kvq_eval_row *row, const kvq_ladder_thresholds *th);

/* Writes the frontier's row indices, reference first, into idx (room for
 * n entries) and returns how many; 0 when no row qualifies. */
size_t kvq_ladder_frontier(const kvq_eval_row *rows, size_t n, size_t *idx);

/* What the frontier weighs against size (kvq sweep --rank): median KLD
 * (the default, everything above), or with kvq sweep --drift the mean
 * KLD over the generated positions, or the median first divergence
 * (later is better).  The same rule with that measure in place of median
 * KLD; rows without it take no part.  Tiers stay by median KLD. */
typedef enum kvq_ladder_rank { KVQ_RANK_MEDIAN_KLD = 0, KVQ_RANK_DRIFT_KLD, KVQ_RANK_FIRST_DIV } kvq_ladder_rank;
const char *kvq_ladder_rank_name(kvq_ladder_rank r);           /* "median KLD", ... */
/* "median_kld", "drift_kld", "first_div"; false for anything else. */
bool kvq_ladder_rank_parse(const char *s, kvq_ladder_rank *out);
size_t kvq_ladder_frontier_by(const kvq_eval_row *rows, size_t n, kvq_ladder_rank rank, size_t *idx);

/* ladder.md: the thresholds line, then a markdown table of the frontier
 * (tier, cache, size %, MiB, median KLD, mean KLD, 99.9% KLD, same-top). */
kvq_status kvq_ladder_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                               const kvq_ladder_thresholds *th, kvq_error *err);
/* The same ranked by `rank`; with drift figures in the rows two more
 * columns (first divergence, drift KLD). */
kvq_status kvq_ladder_write_md_by(FILE *f, const kvq_eval_row *rows, size_t n, const kvq_ladder_thresholds *th,
                                  kvq_ladder_rank rank, kvq_error *err);

#endif
