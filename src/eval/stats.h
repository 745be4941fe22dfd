/* stats.h - per-token statistics of a KLD run and their summary
 * (docs/spec/eval.md §3; definitions as llama.cpp's perplexity tool).
 *
 * Tokens are collected one by one (kvq_tokstats_add) and summarised at
 * the end: percentiles need the whole sorted list. */
#ifndef KVQ_STATS_H
#define KVQ_STATS_H

#include "kld.h"
#include "kvq_eval.h"


extern const double kvq_pct_levels[KVQ_N_PCT];   /* .001 .01 .05 .10 .90 .95 .99 .999 */


/* Percentile of sorted values: linear interpolation at f*(n-1). */
double kvq_percentile_sorted(const double *sorted, size_t n, double f);
/* Mean and standard error sqrt(var/(n-1)) of n values. */
void kvq_mean_se(const double *x, size_t n, double *mean, double *se);


#endif
