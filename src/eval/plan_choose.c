/*
 * plan_choose.c - the deciding half of the budget planner (planner.h):
 * byte budgets, the additive prediction, the knapsack that picks the
 * plan, and the plan written as cache flags.
 */
#include "planner.h"
#include "knapsack.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- budget */

/* The tiny slack keeps "28.125%" of 2048 bytes at 576, not 575.99... */
static size_t floor_bytes(double x) { return x > 0 ? (size_t)floor(x + 1e-9) : 0; }

size_t kvq_plan_budget_pct(const kvq_model_info *in, double pct) {
    return floor_bytes(pct / 100.0 * (double)kvq_plan_bf16_bytes_per_token(in));
}

size_t kvq_plan_budget_mib(const kvq_model_info *in, double mib) {
    if (in->n_ctx_train <= 0) return 0;
    return floor_bytes(mib * 1048576.0 / (double)in->n_ctx_train);
}

size_t kvq_plan_smallest_bytes(const kvq_model_info *in, const kvq_type *types, int n_types) {
    const int dims[2] = { in->head_dim_k, in->head_dim_v };
    size_t total = 0;
    for (int s = 0; s < 2; s++) {
        size_t least = SIZE_MAX;
        for (int i = 0; i < n_types; i++) least = KVQ_MIN(least, kvq_cache_row_bytes(types[i], in->n_head_kv, dims[s]));
        total += n_types > 0 ? least * (size_t)in->n_layer : 0;
    }
    return total;
}

/* ------------------------------------------------------------ prediction */

static int candidate_index(const kvq_plan_table *t, kvq_type type) {
    for (int i = 0; i < t->n_types; i++)
        if (t->types[i] == type) return i;
    return -1;
}

double kvq_plan_predict(const kvq_plan_table *t, const kvq_type *types_k, const kvq_type *types_v) {
    const kvq_type *sides[2] = { types_k, types_v };
    double kld = t->floor_kld;
    for (int l = 0; l < t->n_layer; l++)
        for (int s = 0; s < 2; s++) {
            const int i = candidate_index(t, sides[s][l]);
            if (i < 0) return -1.0;
            kld += t->sens[kvq_plan_table_index(t, l, s, i)];
        }
    return kld;
}

/* ---------------------------------------------------------------- choice */

void kvq_plan_free(kvq_plan *p) {
    if (!p) return;
    free(p->types_k);
    free(p->types_v);
    p->types_k = p->types_v = NULL;
}

/* The smallest plan: every layer and side in its lightest candidate. */
static size_t smallest_bytes(const kvq_plan_table *t, int *lightest) {
    size_t total = 0;
    for (int s = 0; s < 2; s++) {
        size_t m = t->row_bytes[s][0];
        lightest[s] = 0;
        for (int i = 1; i < t->n_types; i++)
            if (t->row_bytes[s][i] < m) { m = t->row_bytes[s][i]; lightest[s] = i; }
        total += m * (size_t)t->n_layer;
    }
    return total;
}

static double pct_of(const kvq_plan_table *t, size_t bytes) {
    return t->bf16_bytes_per_token ? 100.0 * (double)bytes / (double)t->bf16_bytes_per_token : 0.0;
}

/* Groups are (layer, side) pairs, options the candidate types, weights
 * bytes per token, costs the sensitivities. */
static void fill_problem(const kvq_plan_table *t, uint64_t *weight, double *cost) {
    for (int l = 0; l < t->n_layer; l++)
        for (int s = 0; s < 2; s++)
            for (int i = 0; i < t->n_types; i++) {
                const size_t at = kvq_plan_table_index(t, l, s, i);
                weight[at] = t->row_bytes[s][i];
                cost[at] = t->sens[at];
            }
}

kvq_status kvq_plan_choose(const kvq_plan_table *t, size_t budget, kvq_plan *out, kvq_error *err) {
    if (!t || !out || !t->sens || t->n_layer < 1 || t->n_types < 1) return kvq_fail(err, KVQ_ERR_ARG, "plan: no table");
    memset(out, 0, sizeof *out);
    int lightest[2];
    const size_t smallest = smallest_bytes(t, lightest);
    if (smallest > budget)
        return kvq_fail(err, KVQ_ERR_ARG,
                        "budget %zu bytes/token (%.2f%% of bf16) is below the smallest plan: %zu bytes/token "
                        "(%.2f%%, K %s / V %s everywhere)", budget, pct_of(t, budget), smallest, pct_of(t, smallest),
                        kvq_type_name(t->types[lightest[0]]), kvq_type_name(t->types[lightest[1]]));
    const int G = 2 * t->n_layer;
    const size_t cells = (size_t)G * (size_t)t->n_types;
    uint64_t *weight = kvq_malloc_n(cells, sizeof *weight);
    double *cost = kvq_malloc_n(cells, sizeof *cost);
    int *pick = kvq_malloc_n((size_t)G, sizeof *pick);
    out->types_k = kvq_malloc_n((size_t)t->n_layer, sizeof *out->types_k);
    out->types_v = kvq_malloc_n((size_t)t->n_layer, sizeof *out->types_v);
    kvq_status st = weight && cost && pick && out->types_k && out->types_v
                        ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "plan: out of memory");
    kvq_mck_result res = { 0 };
    if (!st) {
        fill_problem(t, weight, cost);
        kvq_mck problem = { G, t->n_types, weight, cost, budget, 0 };
        st = kvq_mck_solve(&problem, pick, &res, err);
    }
    if (!st) {
        for (int l = 0; l < t->n_layer; l++) {
            out->types_k[l] = t->types[pick[2 * l]];
            out->types_v[l] = t->types[pick[2 * l + 1]];
        }
        out->n_layer = t->n_layer;
        out->predicted_kld = t->floor_kld + res.cost;
        out->bytes_per_token = (size_t)res.weight;
        out->budget_bytes_per_token = budget;
        out->exact = res.exact;
    }
    free(weight);
    free(cost);
    free(pick);
    if (st) kvq_plan_free(out);
    return st;
}

/* ----------------------------------------------------------------- flags */

/* The type most layers of one side use (the first one on a tie). */
static kvq_type most_used(const kvq_type *types, int n_layer) {
    kvq_type best = types[0];
    int best_n = 0;
    for (int l = 0; l < n_layer; l++) {
        int n = 0;
        for (int j = 0; j < n_layer; j++) n += types[j] == types[l];
        if (n > best_n) { best = types[l]; best_n = n; }
    }
    return best;
}

/* Append to buf as snprintf would, tracking the length needed. */
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

/* " --cache-type-X-layers a-b:t,c:u" for the runs of layers that differ
 * from the side's -ctk/-ctv type. */
static void append_overrides(char *buf, size_t cap, size_t *len, const char *flag, const kvq_type *types,
                             int n_layer, kvq_type global) {
    bool first = true;
    for (int l = 0; l < n_layer;) {
        int end = l;
        while (end + 1 < n_layer && types[end + 1] == types[l]) end++;
        if (types[l] != global) {
            append(buf, cap, len, "%s", first ? " " : ",");
            if (first) append(buf, cap, len, "%s ", flag);
            if (end > l) append(buf, cap, len, "%d-%d:%s", l, end, kvq_type_name(types[l]));
            else append(buf, cap, len, "%d:%s", l, kvq_type_name(types[l]));
            first = false;
        }
        l = end + 1;
    }
}

size_t kvq_plan_format_flags(const kvq_type *types_k, const kvq_type *types_v, int n_layer, char *buf, size_t cap) {
    if (cap) buf[0] = 0;
    if (!types_k || !types_v || n_layer < 1) return 0;
    const kvq_type gk = most_used(types_k, n_layer), gv = most_used(types_v, n_layer);
    size_t len = 0;
    append(buf, cap, &len, "-ctk %s -ctv %s", kvq_type_name(gk), kvq_type_name(gv));
    append_overrides(buf, cap, &len, "--cache-type-k-layers", types_k, n_layer, gk);
    append_overrides(buf, cap, &len, "--cache-type-v-layers", types_v, n_layer, gv);
    return len;
}
