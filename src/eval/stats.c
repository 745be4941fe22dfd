/* stats.c - summary statistics of a KLD / perplexity run. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

const double kvq_pct_levels[KVQ_N_PCT] = { 0.001, 0.01, 0.05, 0.10, 0.90, 0.95, 0.99, 0.999 };

void kvq_tokstats_init(kvq_tokstats *s) { memset(s, 0, sizeof *s); }

void kvq_tokstats_free(kvq_tokstats *s) {
    free(s->kld); free(s->nll); free(s->nll_base); free(s->dp);
    kvq_tokstats_init(s);
}

static bool grow(double **p, size_t cap) {
    double *q = kvq_realloc_n(*p, cap, sizeof **p);
    if (!q) return false;
    *p = q;
    return true;
}

kvq_status kvq_tokstats_add(kvq_tokstats *s, const kvq_kld_token *tok, kvq_error *err) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        if (!grow(&s->kld, cap) || !grow(&s->nll, cap) || !grow(&s->nll_base, cap) || !grow(&s->dp, cap))
            return kvq_fail(err, KVQ_ERR_NOMEM, "statistics: out of memory at %zu tokens", s->n);
        s->cap = cap;
    }
    s->kld[s->n] = tok->kld;
    s->nll[s->n] = tok->nll;
    s->nll_base[s->n] = tok->nll_base;
    s->dp[s->n] = tok->dp;
    s->n_same_top += tok->same_top;
    s->n++;
    return KVQ_OK;
}

void kvq_mean_se(const double *x, size_t n, double *mean, double *se) {
    double s = 0.0, s2 = 0.0;
    for (size_t i = 0; i < n; i++) { s += x[i]; s2 += x[i] * x[i]; }
    const double m = n ? s / (double)n : 0.0;
    const double var = n ? s2 / (double)n - m * m : 0.0;
    *mean = m;
    *se = n > 1 && var > 0.0 ? sqrt(var / (double)(n - 1)) : 0.0;
}

void kvq_ppl_from_nll(const double *nll, size_t n, double *ppl, double *ppl_se) {
    double m, se;
    kvq_mean_se(nll, n, &m, &se);
    *ppl = exp(m);
    *ppl_se = se * *ppl;   /* first-order error propagation through exp */
}

double kvq_percentile_sorted(const double *v, size_t n, double f) {
    if (n == 0) return 0.0;
    const double at = f * (double)(n - 1);
    size_t lo = (size_t)at;
    if (lo >= n - 1) return v[n - 1];
    const double frac = at - (double)lo;
    return v[lo] + frac * (v[lo + 1] - v[lo]);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sort a copy of x and read its percentiles, median, min and max. */
static kvq_status distribution(const double *x, size_t n, double pct[KVQ_N_PCT], double *median,
                               double *min, double *max, kvq_error *err) {
    double *v = kvq_malloc_n(n, sizeof *v);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "statistics: out of memory");
    memcpy(v, x, n * sizeof *v);
    qsort(v, n, sizeof *v, cmp_double);
    for (int i = 0; i < KVQ_N_PCT; i++) pct[i] = kvq_percentile_sorted(v, n, kvq_pct_levels[i]);
    *median = kvq_percentile_sorted(v, n, 0.5);
    *min = v[0];
    *max = v[n - 1];
    free(v);
    return KVQ_OK;
}

static double correlation(const double *a, const double *b, size_t n) {
    double ma = 0, mb = 0;
    for (size_t i = 0; i < n; i++) { ma += a[i]; mb += b[i]; }
    ma /= (double)n; mb /= (double)n;
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 1.0;
}

kvq_status kvq_kld_summarize(const kvq_tokstats *s, kvq_kld_summary *o, kvq_error *err) {
    memset(o, 0, sizeof *o);
    const size_t n = s->n;
    if (n < 2) return kvq_fail(err, KVQ_ERR_ARG, "statistics: %zu scored tokens (need at least 2)", n);
    o->n = n;
    kvq_ppl_from_nll(s->nll, n, &o->ppl_q, &o->ppl_q_se);
    kvq_ppl_from_nll(s->nll_base, n, &o->ppl_base, &o->ppl_base_se);
    o->cor = correlation(s->nll, s->nll_base, n);

    double *tmp = kvq_malloc_n(n, sizeof *tmp);
    if (!tmp) return kvq_fail(err, KVQ_ERR_NOMEM, "statistics: out of memory");
    for (size_t i = 0; i < n; i++) tmp[i] = s->nll[i] - s->nll_base[i];
    kvq_mean_se(tmp, n, &o->ln_ratio, &o->ln_ratio_se);
    /* PPL(Q) - PPL(base) to first order: PPL_q * nll - PPL_base * nll_base per token */
    double unused;
    for (size_t i = 0; i < n; i++) tmp[i] = o->ppl_q * s->nll[i] - o->ppl_base * s->nll_base[i];
    kvq_mean_se(tmp, n, &unused, &o->ppl_diff_se);
    for (size_t i = 0; i < n; i++) tmp[i] = s->dp[i] * s->dp[i];
    double ms, ms_se;
    kvq_mean_se(tmp, n, &ms, &ms_se);
    free(tmp);
    o->rms_dp = sqrt(ms);
    o->rms_dp_se = o->rms_dp > 0 ? 0.5 * ms_se / o->rms_dp : 0.0;   /* d sqrt(x) = dx / (2 sqrt x) */

    kvq_mean_se(s->kld, n, &o->mean_kld, &o->mean_kld_se);
    kvq_mean_se(s->dp, n, &o->mean_dp, &o->mean_dp_se);
    const double p = (double)s->n_same_top / (double)n;
    o->same_top = p;
    o->same_top_se = sqrt(p * (1.0 - p) / (double)(n - 1));
    kvq_status st = distribution(s->kld, n, o->p_kld, &o->median_kld, &o->min_kld, &o->max_kld, err);
    if (!st) st = distribution(s->dp, n, o->p_dp, &o->median_dp, &o->min_dp, &o->max_dp, err);
    return st;
}
