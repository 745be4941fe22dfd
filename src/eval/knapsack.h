/* knapsack.h - the multiple-choice knapsack problem, solved exactly by
 * dynamic programming: from each of n_group groups pick exactly one of
 * n_choice options so that the total weight stays within the capacity
 * and the total cost is least.  The budget planner (planner.h) uses it
 * with one group per layer and side, one option per cache type, weights
 * in bytes per token and costs in predicted KLD. */
#ifndef KVQ_KNAPSACK_H
#define KVQ_KNAPSACK_H

#include "kvq_internal.h"

typedef struct kvq_mck {
    int n_group, n_choice;     /* every group offers n_choice options (1..255) */
    const uint64_t *weight;    /* [n_group][n_choice]                          */
    const double *cost;        /* [n_group][n_choice], finite                  */
    uint64_t capacity;         /* the most total weight allowed                 */
    size_t max_cells;          /* DP table limit (groups x capacity); 0: 1<<26  */
} kvq_mck;

typedef struct kvq_mck_result {
    double cost;               /* sum of the picked costs                       */
    uint64_t weight;           /* sum of the picked weights (<= capacity)        */
    uint64_t unit;             /* weight quantum of the DP: 1 when exact         */
    bool exact;                /* true: the optimum; false: weights were rounded
                                  up to `unit` to fit max_cells, so the pick is
                                  feasible but may be slightly suboptimal       */
} kvq_mck_result;

/* pick[g] receives the chosen option of group g.  Fails with KVQ_ERR_ARG
 * when even the lightest options exceed the capacity (the message says by
 * how much) or on bad arguments, KVQ_ERR_NOMEM when the table does not fit. */
kvq_status kvq_mck_solve(const kvq_mck *p, int *pick, kvq_mck_result *res, kvq_error *err);

#endif
