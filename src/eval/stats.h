/* stats.h - per-token statistics of a KLD run and their summary
 * (docs/spec/eval.md §3; definitions as llama.cpp's perplexity tool).
 *
 * Tokens are collected one by one (kvq_tokstats_add) and summarised at
 * the end: percentiles need the whole sorted list. */
#ifndef KVQ_STATS_H
#define KVQ_STATS_H

#include "kld.h"

typedef struct kvq_tokstats {
    double *kld, *nll, *nll_base, *dp;
    size_t n, cap, n_same_top;
} kvq_tokstats;

void kvq_tokstats_init(kvq_tokstats *s);
void kvq_tokstats_free(kvq_tokstats *s);
kvq_status kvq_tokstats_add(kvq_tokstats *s, const kvq_kld_token *tok, kvq_error *err);

/* The percentile levels reported (fractions), in the order of p_kld/p_dp. */
enum { KVQ_N_PCT = 8 };
extern const double kvq_pct_levels[KVQ_N_PCT];   /* .001 .01 .05 .10 .90 .95 .99 .999 */

typedef struct kvq_kld_summary {
    size_t n;
    double ppl_q, ppl_q_se, ppl_base, ppl_base_se;
    double ln_ratio, ln_ratio_se;         /* mean of ln p_base - ln p_test   */
    double ppl_diff_se;                   /* se of PPL(Q) - PPL(base)        */
    double cor;                           /* corr(nll, nll_base)             */
    double mean_kld, mean_kld_se, median_kld, min_kld, max_kld;
    double p_kld[KVQ_N_PCT];
    double same_top, same_top_se;         /* fractions (0..1)                */
    double mean_dp, mean_dp_se, rms_dp, rms_dp_se, min_dp, max_dp, median_dp;
    double p_dp[KVQ_N_PCT];
} kvq_kld_summary;

/* Fails (KVQ_ERR_ARG) with fewer than 2 tokens or on allocation failure. */
kvq_status kvq_kld_summarize(const kvq_tokstats *s, kvq_kld_summary *out, kvq_error *err);

/* Percentile of sorted values: linear interpolation at f*(n-1). */
double kvq_percentile_sorted(const double *sorted, size_t n, double f);
/* Mean and standard error sqrt(var/(n-1)) of n values. */
void kvq_mean_se(const double *x, size_t n, double *mean, double *se);

/* PPL of a run from its per-token NLLs: exp(mean) and llama.cpp's ±. */
void kvq_ppl_from_nll(const double *nll, size_t n, double *ppl, double *ppl_se);

#endif
