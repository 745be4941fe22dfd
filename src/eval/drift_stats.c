/* drift_stats.c - the statistics of a drift run (drift.h): buckets of
 * generated positions, first divergence, per-prompt figures, the plot's
 * log-binned curve; and the prompt-file splitter. */
#include "drift.h"
#include "stats.h"

#include <math.h>
#include <stdlib.h>

int kvq_drift_buckets(int n_gen, kvq_drift_bucket *b) {
    int n = 0;
    for (int64_t first = 1, last = 16; first <= n_gen && n < KVQ_DRIFT_MAX_BUCKETS; first = last + 1, last *= 4) {
        memset(&b[n], 0, sizeof b[n]);
        b[n].first = (int)first;
        b[n].last = (int)KVQ_MIN(last, (int64_t)n_gen);
        n++;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Mean, median and 99th percentile of v (sorted in place). */
static void describe(double *v, size_t n, double *mean, double *median, double *p99) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += v[i];
    qsort(v, n, sizeof *v, cmp_double);
    *mean = n ? s / (double)n : NAN;
    *median = n ? kvq_percentile_sorted(v, n, 0.5) : NAN;
    *p99 = n ? kvq_percentile_sorted(v, n, 0.99) : NAN;
}

/* The KLDs of positions first..last (1-based) of every prompt, into v. */
static size_t gather(const kvq_drift_run *r, int first, int last, double *v) {
    size_t n = 0;
    for (size_t p = 0; p < r->n_prompts; p++)
        for (int i = first; i <= last; i++) v[n++] = r->kld[p * (size_t)r->n_gen + (size_t)(i - 1)];
    return n;
}

static void first_divergence(const kvq_drift_run *r, kvq_drift_summary *o, double *v) {
    size_t identical = 0, diverged = 0;
    double at_div = 0.0;
    o->min_first_div = r->n_gen + 1;
    for (size_t p = 0; p < r->n_prompts; p++) {
        const int d = r->first_div[p];
        v[p] = d;
        o->min_first_div = KVQ_MIN(o->min_first_div, d);
        if (d > r->n_gen) { identical++; continue; }
        diverged++;
        at_div += r->kld[p * (size_t)r->n_gen + (size_t)(d - 1)];
    }
    qsort(v, r->n_prompts, sizeof *v, cmp_double);
    o->median_first_div = kvq_percentile_sorted(v, r->n_prompts, 0.5);
    o->q1_first_div = kvq_percentile_sorted(v, r->n_prompts, 0.25);
    o->q3_first_div = kvq_percentile_sorted(v, r->n_prompts, 0.75);
    o->frac_identical = (double)identical / (double)r->n_prompts;
    o->mean_kld_at_div = diverged ? at_div / (double)diverged : NAN;
}

kvq_status kvq_drift_summarize(const kvq_drift_run *r, kvq_drift_summary *o, kvq_error *err) {
    memset(o, 0, sizeof *o);
    if (!r || r->n_prompts < 1 || r->n_gen < 1) return kvq_fail(err, KVQ_ERR_ARG, "drift: an empty run");
    const size_t cells = r->n_prompts * (size_t)r->n_gen;
    double *v = kvq_malloc_n(KVQ_MAX(cells, r->n_prompts), sizeof *v);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "drift statistics: out of memory");
    o->n_prompts = r->n_prompts;
    o->n_gen = r->n_gen;
    size_t same = 0;
    for (size_t k = 0; k < cells; k++) same += r->same_top[k];
    o->same_top_p = 100.0 * (double)same / (double)cells;
    gather(r, 1, r->n_gen, v);
    describe(v, cells, &o->mean_kld, &o->median_kld, &o->p99_kld);
    o->max_kld = v[cells - 1];
    o->n_buckets = kvq_drift_buckets(r->n_gen, o->bucket);
    for (int b = 0; b < o->n_buckets; b++) {
        kvq_drift_bucket *bk = &o->bucket[b];
        bk->n = gather(r, bk->first, bk->last, v);
        describe(v, bk->n, &bk->mean, &bk->median, &bk->p99);
    }
    first_divergence(r, o, v);
    free(v);
    return KVQ_OK;
}

void kvq_drift_prompt_summary(const kvq_drift_run *r, size_t p, kvq_drift_prompt_stats *o) {
    const double *kld = r->kld + p * (size_t)r->n_gen;
    const uint8_t *same = r->same_top + p * (size_t)r->n_gen;
    double s = 0.0, mx = kld[0];
    size_t n_same = 0;
    for (int i = 0; i < r->n_gen; i++) {
        s += kld[i];
        mx = fmax(mx, kld[i]);
        n_same += same[i];
    }
    o->first_div = r->first_div[p];
    o->kld_at_div = o->first_div <= r->n_gen ? kld[o->first_div - 1] : NAN;
    o->mean_kld = s / r->n_gen;
    o->max_kld = mx;
    o->same_top_p = 100.0 * (double)n_same / r->n_gen;
}

size_t kvq_drift_curve(const kvq_drift_run *r, int *lo, int *hi, double *y, size_t cap) {
    size_t n = 0;
    int first = 1;
    for (int k = 0; first <= r->n_gen && n < cap; k++) {
        /* bins end at round(8 * 2^(j/4)): single positions up to 8, then
         * four bins per doubling */
        const int end = k < 8 ? k + 1 : (int)lround(8.0 * pow(2.0, (k - 7) / 4.0));
        if (end < first) continue;
        const int last = KVQ_MIN(end, r->n_gen);
        double s = 0.0;
        for (size_t p = 0; p < r->n_prompts; p++)
            for (int i = first; i <= last; i++) s += r->kld[p * (size_t)r->n_gen + (size_t)(i - 1)];
        lo[n] = first;
        hi[n] = last;
        y[n++] = s / ((double)r->n_prompts * (last - first + 1));
        first = last + 1;
    }
    return n;
}

/* ------------------------------------------------------------- prompts */

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\v' && *s != '\f') return false;
    return true;
}

kvq_status kvq_drift_split_prompts(char *text, size_t len, char ***lines, size_t *n, kvq_error *err) {
    *lines = NULL;
    *n = 0;
    size_t cap = 1;
    for (size_t i = 0; i < len; i++) cap += text[i] == '\n';
    char **v = kvq_malloc_n(cap, sizeof *v);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "prompts: out of memory");
    size_t line = 0;
    for (size_t start = 0; start < len;) {
        line++;
        char *nl = memchr(text + start, '\n', len - start);
        const size_t end = nl ? (size_t)(nl - text) : len;
        size_t e = end;
        if (e > start && text[e - 1] == '\r') e--;
        text[e] = 0;   /* the newline, CR or the buffer's own NUL */
        if (memchr(text + start, 0, e - start))
            { free(v); return kvq_fail(err, KVQ_ERR_FORMAT, "prompts: line %zu holds a NUL byte", line); }
        if (!blank(text + start)) v[(*n)++] = text + start;
        start = end + 1;
    }
    *lines = v;
    return KVQ_OK;
}
