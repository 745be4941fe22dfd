/*
 * knapsack.c - exact multiple-choice knapsack by dynamic programming.
 *
 * best_g[w] = least cost of groups 0..g-1 with total (scaled) weight <= w;
 *   best_0[w] = 0,  best_{g+1}[w] = min_c best_g[w - e(g,c)] + cost(g,c).
 * The answer is best_n[W]; the option that achieved each minimum is kept
 * (one byte per group and capacity cell) to walk back to the picks.
 *
 * Two reductions make W small without changing the optimum:
 *   - every group pays at least its lightest option, so only the extra
 *     weight e = w - min_c w above it competes for the remaining room;
 *   - the extras of all options share their greatest common divisor (for
 *     cache rows: whole blocks times heads), so they are divided by it.
 * Only when the table would still exceed max_cells are the extras rounded
 * UP to a coarser unit: the pick then stays within the capacity (rounding
 * up only overestimates weight) but may miss the optimum (exact = false).
 */
#include "knapsack.h"

#include <math.h>
#include <stdlib.h>

enum { DEFAULT_MAX_CELLS = 1 << 26, MAX_CHOICES = 255 };

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static kvq_status check_problem(const kvq_mck *p, const int *pick, const kvq_mck_result *res, kvq_error *err) {
    if (!p || !pick || !res || !p->weight || !p->cost) return kvq_fail(err, KVQ_ERR_ARG, "knapsack: NULL argument");
    if (p->n_group < 1 || p->n_choice < 1 || p->n_choice > MAX_CHOICES)
        return kvq_fail(err, KVQ_ERR_ARG, "knapsack: %d groups of %d options (need >= 1 groups, 1..%d options)",
                        p->n_group, p->n_choice, MAX_CHOICES);
    for (size_t i = 0; i < (size_t)p->n_group * (size_t)p->n_choice; i++)
        if (!isfinite(p->cost[i])) return kvq_fail(err, KVQ_ERR_ARG, "knapsack: cost %zu is not finite", i);
    return KVQ_OK;
}

static uint64_t lightest(const kvq_mck *p, int g) {
    const uint64_t *w = p->weight + (size_t)g * (size_t)p->n_choice;
    uint64_t m = w[0];
    for (int c = 1; c < p->n_choice; c++) m = KVQ_MIN(m, w[c]);
    return m;
}

/* Weight quantum: the gcd of all extras, coarsened (rounding extras up)
 * until (room / unit + 1) cells per group fit in max_cells. */
static uint64_t choose_unit(const kvq_mck *p, const uint64_t *min_w, uint64_t room) {
    uint64_t g = 0;
    for (int i = 0; i < p->n_group; i++)
        for (int c = 0; c < p->n_choice; c++)
            g = gcd_u64(g, p->weight[(size_t)i * (size_t)p->n_choice + (size_t)c] - min_w[i]);
    if (g == 0) g = 1;   /* all options of every group weigh the same */
    const size_t max_cells = p->max_cells ? p->max_cells : DEFAULT_MAX_CELLS;
    const uint64_t per_group = KVQ_MAX((uint64_t)1, (uint64_t)(max_cells / (size_t)p->n_group));
    const uint64_t cells = room / g + 1;
    if (cells <= per_group) return g;
    /* k = ceil(cells / per_group) makes floor(room / (g k)) + 1 <= per_group */
    const uint64_t k = cells / per_group + (cells % per_group != 0);
    return g * k;
}

kvq_status kvq_mck_solve(const kvq_mck *p, int *pick, kvq_mck_result *res, kvq_error *err) {
    kvq_status st = check_problem(p, pick, res, err);
    if (st) return st;
    const int G = p->n_group, C = p->n_choice;
    uint64_t *min_w = kvq_malloc_n((size_t)G, sizeof *min_w);
    if (!min_w) return kvq_fail(err, KVQ_ERR_NOMEM, "knapsack: out of memory");
    uint64_t base = 0;
    bool overflow = false;
    for (int g = 0; g < G; g++) {
        min_w[g] = lightest(p, g);
        overflow |= min_w[g] > UINT64_MAX - base;
        base += min_w[g];
    }
    if (overflow || base > p->capacity) {
        free(min_w);
        return kvq_fail(err, KVQ_ERR_ARG, "knapsack: the lightest options weigh %s%llu, over the capacity %llu",
                        overflow ? "more than " : "", (unsigned long long)(overflow ? UINT64_MAX : base),
                        (unsigned long long)p->capacity);
    }
    const uint64_t room = p->capacity - base;
    /* exact while every extra is a multiple of the unit: then
     * sum(e) <= room  <=>  sum(e / unit) <= floor(room / unit) */
    bool exact = true;
    const uint64_t unit = choose_unit(p, min_w, room);
    const size_t W = (size_t)(room / unit);

    double *best = kvq_malloc_n(W + 1, sizeof *best), *next = kvq_malloc_n(W + 1, sizeof *next);
    uint64_t *extra = kvq_malloc_n((size_t)G * (size_t)C, sizeof *extra);
    uint8_t *choice = kvq_malloc_n((size_t)G, W + 1);
    if (!best || !next || !extra || !choice) {
        st = kvq_fail(err, KVQ_ERR_NOMEM, "knapsack: out of memory for %d x %zu cells", G, W + 1);
        goto done;
    }
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) {
            const size_t i = (size_t)g * (size_t)C + (size_t)c;
            const uint64_t e = p->weight[i] - min_w[g];
            extra[i] = e / unit + (e % unit != 0);    /* rounded up: never under-counts */
            if (e % unit) exact = false;
        }
    for (size_t w = 0; w <= W; w++) best[w] = 0.0;
    for (int g = 0; g < G; g++) {
        const uint64_t *e = extra + (size_t)g * (size_t)C;
        const double *cost = p->cost + (size_t)g * (size_t)C;
        uint8_t *ch = choice + (size_t)g * (W + 1);
        for (size_t w = 0; w <= W; w++) {
            double v_best = INFINITY;
            int c_best = -1;
            for (int c = 0; c < C; c++) {
                if (e[c] > w) continue;
                const double v = best[w - e[c]] + cost[c];
                if (v < v_best) { v_best = v; c_best = c; }
            }
            next[w] = v_best;          /* finite: the lightest option has e = 0 */
            ch[w] = (uint8_t)c_best;
        }
        double *t = best; best = next; next = t;
    }
    res->cost = 0.0;
    res->weight = 0;
    size_t w = W;
    for (int g = G - 1; g >= 0; g--) {
        const int c = choice[(size_t)g * (W + 1) + w];
        const size_t i = (size_t)g * (size_t)C + (size_t)c;
        pick[g] = c;
        w -= (size_t)extra[i];
        res->weight += p->weight[i];
    }
    for (int g = 0; g < G; g++) res->cost += p->cost[(size_t)g * (size_t)C + (size_t)pick[g]];
    res->unit = unit;
    res->exact = exact;
done:
    free(min_w);
    free(best);
    free(next);
    free(extra);
    free(choice);
    return st;
}
