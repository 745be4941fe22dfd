/* ladder.c - Pareto frontier of (size %, median KLD) and its tiers; the
 * rule is spelled out in ladder.h. */
#include "ladder.h"

#include <math.h>
#include <stdlib.h>

kvq_ladder_thresholds kvq_ladder_default_thresholds(void) {
    kvq_ladder_thresholds th = { .high_fidelity = 0.001, .balanced = 0.01, .compact = 0.05 };
    return th;
}

const char *kvq_tier_name(kvq_tier t) {
    static const char *const names[KVQ_TIER_COUNT] = {
        "reference", "high fidelity", "balanced", "compact", "emergency",
    };
    return (unsigned)t < KVQ_TIER_COUNT ? names[t] : "?";
}

kvq_tier kvq_tier_of(const kvq_eval_row *row, const kvq_ladder_thresholds *th) {
    double kld = row->median_kld;
    if (row->is_reference) return KVQ_TIER_REFERENCE;
    if (kld <= th->high_fidelity) return KVQ_TIER_HIGH_FIDELITY;
    if (kld <= th->balanced) return KVQ_TIER_BALANCED;
    if (kld <= th->compact) return KVQ_TIER_COMPACT;
    return KVQ_TIER_EMERGENCY;               /* also NAN: never recommended */
}

const char *kvq_ladder_rank_name(kvq_ladder_rank r) {
    return r == KVQ_RANK_DRIFT_KLD ? "drift KLD" : r == KVQ_RANK_FIRST_DIV ? "first divergence" : "median KLD";
}

bool kvq_ladder_rank_parse(const char *s, kvq_ladder_rank *out) {
    static const char *const names[] = { "median_kld", "drift_kld", "first_div" };
    for (int k = 0; k < 3; k++)
        if (!strcmp(s, names[k])) { *out = (kvq_ladder_rank)k; return true; }
    return false;
}

/* The measure a rank weighs against size, smaller being better (a later
 * first divergence is better: its negative); NAN when not measured. */
static double score(const kvq_eval_row *r, kvq_ladder_rank rank) {
    return rank == KVQ_RANK_DRIFT_KLD ? r->drift_kld : rank == KVQ_RANK_FIRST_DIV ? -r->drift_first_div : r->median_kld;
}

/* Order of the frontier sweep: size, then the score, then label, then
 * input position, all ascending (the last two make ties deterministic). */
static int sweep_cmp(const kvq_eval_row *rows, kvq_ladder_rank rank, size_t a, size_t b) {
    const kvq_eval_row *x = &rows[a], *y = &rows[b];
    const double sx = score(x, rank), sy = score(y, rank);
    if (x->size_pct != y->size_pct) return x->size_pct < y->size_pct ? -1 : 1;
    if (sx != sy) return sx < sy ? -1 : 1;
    int c = strcmp(x->label, y->label);
    if (c) return c;
    return a < b ? -1 : (a > b);
}

/* Insertion sort: sweeps have tens of rows, and qsort has no context. */
static void sort_indices(const kvq_eval_row *rows, kvq_ladder_rank rank, size_t *idx, size_t n) {
    for (size_t i = 1; i < n; i++) {
        size_t v = idx[i], j = i;
        while (j > 0 && sweep_cmp(rows, rank, idx[j - 1], v) > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = v;
    }
}

static bool row_measured(const kvq_eval_row *r, kvq_ladder_rank rank) {
    return !isnan(r->size_pct) && !isnan(score(r, rank)) && r->size_pct >= 0;
}

size_t kvq_ladder_frontier(const kvq_eval_row *rows, size_t n, size_t *idx) {
    return kvq_ladder_frontier_by(rows, n, KVQ_RANK_MEDIAN_KLD, idx);
}

size_t kvq_ladder_frontier_by(const kvq_eval_row *rows, size_t n, kvq_ladder_rank rank, size_t *idx) {
    long ref = kvq_eval_rows_reference(rows, n);
    /* Only configurations smaller than the exact cache can follow it. */
    double cap = ref >= 0 && !isnan(rows[ref].size_pct) ? rows[ref].size_pct : INFINITY;

    size_t n_cand = 0;
    size_t start = ref >= 0 ? 1 : 0;     /* idx[0] is reserved for the reference */
    for (size_t i = 0; i < n; i++)
        if ((long)i != ref && row_measured(&rows[i], rank) && rows[i].size_pct < cap)
            idx[start + n_cand++] = i;
    sort_indices(rows, rank, idx + start, n_cand);

    /* Smallest first: a row is kept when it is strictly closer than every
     * row at most its size, i.e. nothing dominates it. */
    size_t kept = 0;
    double best = INFINITY;
    for (size_t k = 0; k < n_cand; k++) {
        size_t i = idx[start + k];
        if (score(&rows[i], rank) < best) {
            best = score(&rows[i], rank);
            idx[start + kept++] = i;
        }
    }
    /* Largest first, so the ladder walks down from the exact cache. */
    for (size_t a = start, b = start + kept; a + 1 < b; a++, b--) {
        size_t t = idx[a];
        idx[a] = idx[b - 1];
        idx[b - 1] = t;
    }
    if (ref >= 0) idx[0] = (size_t)ref;
    return start + kept;
}

static void write_thresholds(FILE *f, const kvq_ladder_thresholds *th) {
    fprintf(f, "Tiers by median KLD (nats; precision = exp(-KLD)): "
               "reference = the exact cache; "
               "high fidelity <= %g (precision >= %.2f%%); "
               "balanced <= %g (>= %.2f%%); "
               "compact <= %g (>= %.2f%%); "
               "emergency > %g.\n\n",
            th->high_fidelity, 100.0 * exp(-th->high_fidelity),
            th->balanced, 100.0 * exp(-th->balanced),
            th->compact, 100.0 * exp(-th->compact), th->compact);
}

kvq_status kvq_ladder_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                               const kvq_ladder_thresholds *th, kvq_error *err) {
    return kvq_ladder_write_md_by(f, rows, n, th, KVQ_RANK_MEDIAN_KLD, err);
}

kvq_status kvq_ladder_write_md_by(FILE *f, const kvq_eval_row *rows, size_t n, const kvq_ladder_thresholds *th,
                                  kvq_ladder_rank rank, kvq_error *err) {
    size_t *idx = kvq_malloc_n(n ? n : 1, sizeof *idx);
    if (!idx) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory for the ladder of %zu rows", n);
    size_t m = kvq_ladder_frontier_by(rows, n, rank, idx);
    const bool drift = kvq_eval_rows_have_drift(rows, n);

    fprintf(f, "# KV-cache recommendation ladder\n\n"
               "The Pareto frontier of (size %%, %s): no other configuration is both smaller and %s.  "
               "Size is relative to a bf16 cache at the same context.\n\n", kvq_ladder_rank_name(rank),
            rank == KVQ_RANK_FIRST_DIV ? "later to diverge from the exact cache's greedy tokens"
                                       : "closer to the exact cache");
    write_thresholds(f, th);
    fprintf(f, "| tier | cache | size %% | MiB | median KLD | mean KLD | 99.9%% KLD | same-top %% |%s\n",
            drift ? " first divergence | drift KLD |" : "");
    fprintf(f, "|---|---|---:|---:|---:|---:|---:|---:|%s\n", drift ? "---:|---:|" : "");
    for (size_t k = 0; k < m; k++) {
        const kvq_eval_row *r = &rows[idx[k]];
        char b[6][32];
        fprintf(f, "| %s | ", kvq_tier_name(kvq_tier_of(r, th)));
        kvq_eval_write_md_text(f, r->label);
        fprintf(f, " | %s | %s | %s | %s | %s | %s |",
                kvq_eval_fmt(b[0], 32, "%.2f", r->size_pct),
                kvq_eval_fmt(b[1], 32, "%.2f", r->mib),
                kvq_eval_fmt(b[2], 32, "%.6f", r->median_kld),
                kvq_eval_fmt(b[3], 32, "%.6f", r->mean_kld),
                kvq_eval_fmt(b[4], 32, "%.6f", r->p99_9_kld),
                kvq_eval_fmt(b[5], 32, "%.2f", r->same_top_p));
        if (drift) fprintf(f, " %s | %s |", kvq_eval_fmt_first_div(b[0], 32, r), kvq_eval_fmt(b[1], 32, "%.3g", r->drift_kld));
        fputc('\n', f);
    }
    if (m == 0) fprintf(f, "\n(no configuration has a measured size and %s)\n", kvq_ladder_rank_name(rank));
    free(idx);
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the ladder");
    return KVQ_OK;
}
