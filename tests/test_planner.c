/* test_planner.c - the budget planner (docs/spec/eval.md §5): the multiple-choice
 * knapsack against brute force, budgets, the flag string read back by the
 * cache-flag parser, and on toy-h64 a plan that beats every uniform
 * configuration of no larger size, measured the same way. */
#include "test.h"
#include "knapsack.h"
#include "kld_ref.h"
#include "planner.h"
#include "../tools/cache_flags.h"

#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ knapsack */

enum { BF_MAX_GROUPS = 7, BF_MAX_CHOICES = 4 };

/* Least cost over every combination with total weight <= capacity;
 * INFINITY when none fits. */
static double brute_force(int G, int C, const uint64_t *w, const double *cost, uint64_t capacity) {
    int pick[BF_MAX_GROUPS] = { 0 };
    double best = INFINITY;
    for (;;) {
        uint64_t tw = 0;
        double tc = 0;
        for (int g = 0; g < G; g++) {
            tw += w[g * C + pick[g]];
            tc += cost[g * C + pick[g]];
        }
        if (tw <= capacity && tc < best) best = tc;
        int g = 0;
        while (g < G && ++pick[g] == C) pick[g++] = 0;
        if (g == G) return best;
    }
}

static void random_problem(test_rng *rng, int *G, int *C, uint64_t *w, double *cost, uint64_t *capacity) {
    *G = 1 + (int)(test_rng_u64(rng) % BF_MAX_GROUPS);
    *C = 1 + (int)(test_rng_u64(rng) % BF_MAX_CHOICES);
    const uint64_t scale = 1 + test_rng_u64(rng) % 3 * 17;   /* 1, 18 or 35: exercises the gcd */
    uint64_t lo = 0, hi = 0;
    for (int g = 0; g < *G; g++) {
        uint64_t gmin = UINT64_MAX, gmax = 0;
        for (int c = 0; c < *C; c++) {
            const int i = g * *C + c;
            w[i] = scale * (test_rng_u64(rng) % 40);
            /* mostly "heavier is better", with random exceptions */
            cost[i] = test_rng_uniform(rng) < 0.8 ? 1.0 / (1.0 + (double)w[i]) + 0.01 * test_rng_uniform(rng)
                                                   : test_rng_uniform(rng);
            gmin = KVQ_MIN(gmin, w[i]);
            gmax = KVQ_MAX(gmax, w[i]);
        }
        lo += gmin;
        hi += gmax;
    }
    *capacity = lo + test_rng_u64(rng) % (hi - lo + 1);
}

TEST(knapsack_matches_brute_force) {
    test_rng rng = { 42, 0, 0 };
    for (int trial = 0; trial < 400; trial++) {
        int G, C, pick[BF_MAX_GROUPS];
        uint64_t w[BF_MAX_GROUPS * BF_MAX_CHOICES], capacity;
        double cost[BF_MAX_GROUPS * BF_MAX_CHOICES];
        random_problem(&rng, &G, &C, w, cost, &capacity);
        kvq_mck p = { G, C, w, cost, capacity, 0 };
        kvq_mck_result res;
        kvq_error err;
        CHECK(kvq_mck_solve(&p, pick, &res, &err) == KVQ_OK, "trial %d: %s", trial, err.msg);
        const double want = brute_force(G, C, w, cost, capacity);
        uint64_t tw = 0;
        double tc = 0;
        for (int g = 0; g < G; g++) {
            CHECK(pick[g] >= 0 && pick[g] < C, "trial %d: pick %d out of range", trial, pick[g]);
            tw += w[g * C + pick[g]];
            tc += cost[g * C + pick[g]];
        }
        CHECK(res.exact && tw == res.weight && tw <= capacity, "trial %d: weight %llu > capacity %llu", trial,
              (unsigned long long)tw, (unsigned long long)capacity);
        CHECK(fabs(tc - res.cost) < 1e-12 && fabs(tc - want) < 1e-9, "trial %d: cost %.12g, brute force %.12g", trial,
              tc, want);
    }
}

/* A table too large for max_cells: weights are rounded up to a coarser
 * unit, the pick still fits, and it is at least as good as the exact
 * optimum with the capacity reduced by what rounding can lose. */
TEST(knapsack_coarse_unit_stays_feasible) {
    test_rng rng = { 7, 0, 0 };
    for (int trial = 0; trial < 100; trial++) {
        int G, C, pick[BF_MAX_GROUPS];
        uint64_t w[BF_MAX_GROUPS * BF_MAX_CHOICES], capacity;
        double cost[BF_MAX_GROUPS * BF_MAX_CHOICES];
        random_problem(&rng, &G, &C, w, cost, &capacity);
        for (int i = 0; i < G * C; i++) w[i] = w[i] * 1000 + test_rng_u64(&rng) % 997;  /* no common divisor */
        capacity = capacity * 1000 + 997 * (uint64_t)G;   /* the lightest options still fit */
        kvq_mck p = { G, C, w, cost, capacity, (size_t)G * 8 };
        kvq_mck_result res;
        kvq_error err;
        CHECK(kvq_mck_solve(&p, pick, &res, &err) == KVQ_OK, "trial %d: %s", trial, err.msg);
        uint64_t tw = 0;
        for (int g = 0; g < G; g++) tw += w[g * C + pick[g]];
        CHECK(tw <= capacity && tw == res.weight, "trial %d: over capacity", trial);
        CHECK(res.unit > 1, "trial %d: unit %llu, expected coarsening", trial, (unsigned long long)res.unit);
        const double exact = brute_force(G, C, w, cost, capacity);
        const uint64_t loss = res.unit * (uint64_t)(G + 1);
        const double reduced = capacity > loss ? brute_force(G, C, w, cost, capacity - loss) : INFINITY;
        CHECK(res.cost >= exact - 1e-12, "trial %d: better than the optimum?", trial);
        CHECK(res.cost <= reduced + 1e-12, "trial %d: cost %g worse than optimum %g at capacity - %llu", trial,
              res.cost, reduced, (unsigned long long)loss);
    }
}

TEST(knapsack_rejects_impossible_capacity) {
    const uint64_t w[4] = { 5, 9, 7, 3 };
    const double cost[4] = { 1, 0, 1, 0 };
    int pick[2];
    kvq_mck_result res;
    kvq_error err = { 0 };
    kvq_mck p = { 2, 2, w, cost, 7, 0 };   /* lightest: 5 + 3 = 8 > 7 */
    CHECK(kvq_mck_solve(&p, pick, &res, &err) == KVQ_ERR_ARG && strstr(err.msg, "8"), "accepted: %s", err.msg);
    p.capacity = 8;
    CHECK(kvq_mck_solve(&p, pick, &res, &err) == KVQ_OK && pick[0] == 0 && pick[1] == 1 && res.cost == 1.0, "cap 8");
    p.capacity = 12;                        /* 9 + 3 beats 5 + 7 */
    CHECK(kvq_mck_solve(&p, pick, &res, &err) == KVQ_OK && pick[0] == 1 && pick[1] == 1 && res.cost == 0.0, "cap 12");
    const double bad_cost[4] = { 1, NAN, 1, 0 };
    kvq_mck q = { 2, 2, w, bad_cost, 100, 0 };
    CHECK(kvq_mck_solve(&q, pick, &res, &err) == KVQ_ERR_ARG, "NaN cost accepted");
}

/* -------------------------------------------------------------- planner */

/* A hand-made table: 3 layers, candidates q8_0 / q4_0 / q3_0, K 64 wide,
 * V 32 wide, one KV head.  Row bytes: K 68 / 36 / 28, V 34 / 18 / 14;
 * bf16 per token 3 x (128 + 64) = 576. */
static void hand_table(kvq_plan_table *t, double *sens) {
    memset(t, 0, sizeof *t);
    t->n_layer = 3;
    t->n_types = 3;
    const kvq_type types[3] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q3_0 };
    const size_t rk[3] = { 68, 36, 28 }, rv[3] = { 34, 18, 14 };
    for (int i = 0; i < 3; i++) {
        t->types[i] = types[i];
        t->row_bytes[0][i] = rk[i];
        t->row_bytes[1][i] = rv[i];
    }
    t->bf16_bytes_per_token = 576;
    t->floor_kld = 1e-6;
    /* [layer][side][type]: layer 0 K is very sensitive, layer 1 barely */
    const double s[18] = { 1e-5, 4e-3, 2e-2,  1e-6, 3e-4, 1e-3,
                           1e-7, 2e-5, 9e-5,  1e-7, 1e-5, 5e-5,
                           2e-6, 9e-4, 4e-3,  1e-6, 2e-4, 8e-4 };
    memcpy(sens, s, sizeof s);
    t->sens = sens;
    t->measured = NULL;
}

TEST(plan_choose_is_the_brute_force_optimum) {
    kvq_plan_table tab;
    double sens[18];
    hand_table(&tab, sens);
    /* smallest: 3 x (28 + 14) = 126; largest 3 x (68 + 34) = 306 */
    for (size_t budget = 126; budget <= 310; budget += 4) {
        kvq_plan plan;
        kvq_error err;
        CHECK(kvq_plan_choose(&tab, budget, &plan, &err) == KVQ_OK, "budget %zu: %s", budget, err.msg);
        double best = INFINITY;
        for (int code = 0; code < 729; code++) {        /* 3^6 assignments */
            int c = code;
            size_t bytes = 0;
            double kld = tab.floor_kld;
            for (int g = 0; g < 6; g++, c /= 3) {
                bytes += tab.row_bytes[g % 2][c % 3];
                kld += sens[g * 3 + c % 3];
            }
            if (bytes <= budget && kld < best) best = kld;
        }
        size_t bytes = 0;
        for (int l = 0; l < 3; l++)
            for (int i = 0; i < 3; i++)
                bytes += (plan.types_k[l] == tab.types[i] ? tab.row_bytes[0][i] : 0) +
                         (plan.types_v[l] == tab.types[i] ? tab.row_bytes[1][i] : 0);
        const double pred = kvq_plan_predict(&tab, plan.types_k, plan.types_v);
        kvq_plan_free(&plan);
        CHECK(bytes == plan.bytes_per_token && bytes <= budget, "budget %zu: plan has %zu bytes", budget, bytes);
        CHECK(fabs(pred - best) < 1e-15 && fabs(plan.predicted_kld - best) < 1e-15,
              "budget %zu: predicted %.9g, brute force %.9g", budget, plan.predicted_kld, best);
    }
    kvq_plan plan;
    kvq_error err = { 0 };
    CHECK(kvq_plan_choose(&tab, 125, &plan, &err) == KVQ_ERR_ARG && strstr(err.msg, "smallest plan: 126"),
          "budget below the smallest plan: '%s'", err.msg);
}

TEST(plan_budgets_in_percent_and_mib) {
    kvq_model_info in;
    memset(&in, 0, sizeof in);
    in.n_layer = 4;
    in.n_head_kv = 2;
    in.head_dim_k = in.head_dim_v = 64;
    in.n_ctx_train = 128;
    /* bf16: 4 layers x 2 sides x 2 heads x 64 x 2 bytes = 2048 per token */
    CHECK(kvq_plan_bf16_bytes_per_token(&in) == 2048, "bf16 bytes");
    CHECK(kvq_plan_budget_pct(&in, 30.0) == 614, "30%% -> %zu", kvq_plan_budget_pct(&in, 30.0));
    CHECK(kvq_plan_budget_pct(&in, 28.125) == 576, "28.125%% -> %zu", kvq_plan_budget_pct(&in, 28.125));
    /* 0.0625 MiB over 128 positions = 512 bytes per token */
    CHECK(kvq_plan_budget_mib(&in, 0.0625) == 512, "MiB -> %zu", kvq_plan_budget_mib(&in, 0.0625));
    in.n_ctx_train = 0;
    CHECK(kvq_plan_budget_mib(&in, 1.0) == 0, "no trained context");
}

/* The flag string, split on spaces and fed to the shared cache-flag
 * parser, gives back exactly the plan's per-layer types. */
TEST(plan_flags_read_back_by_the_cache_flag_parser) {
    static const kvq_type pool[4] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q3_0, KVQ_TYPE_F16 };
    test_rng rng = { 3, 0, 0 };
    static cache_flags cf;
    for (int trial = 0; trial < 200; trial++) {
        const int n_layer = 1 + (int)(test_rng_u64(&rng) % 12);
        kvq_type tk[12], tv[12];
        const int spread = 1 + (int)(test_rng_u64(&rng) % 4);   /* 1: uniform plans too */
        for (int l = 0; l < n_layer; l++) {
            tk[l] = pool[test_rng_u64(&rng) % (uint64_t)spread];
            tv[l] = pool[test_rng_u64(&rng) % (uint64_t)spread];
        }
        char flags[1024];
        const size_t need = kvq_plan_format_flags(tk, tv, n_layer, flags, sizeof flags);
        CHECK(need == strlen(flags), "trial %d: length %zu vs %zu", trial, need, strlen(flags));
        char *argv[64];
        int argc = 0;
        for (char *save = NULL, *tok = strtok_r(flags, " ", &save); tok && argc < 64; tok = strtok_r(NULL, " ", &save))
            argv[argc++] = tok;
        cache_flags_init(&cf);
        int r = 1;
        for (int i = 0; i < argc && r == 1; i++) r = cache_flags_parse("test", &cf, argc, argv, &i);
        CHECK(r == 1 && cache_flags_apply_layers("test", &cf, n_layer), "trial %d: flags rejected", trial);
        for (int l = 0; l < n_layer; l++) {
            const kvq_type gk = cf.params.layer_type_k ? cf.params.layer_type_k[l] : cf.params.type_k;
            const kvq_type gv = cf.params.layer_type_v ? cf.params.layer_type_v[l] : cf.params.type_v;
            CHECK(gk == tk[l] && gv == tv[l], "trial %d layer %d: %s/%s read back as %s/%s", trial, l,
                  kvq_type_name(tk[l]), kvq_type_name(tv[l]), kvq_type_name(gk), kvq_type_name(gv));
        }
        if (spread == 1) CHECK(argc == 4, "trial %d: a uniform plan printed %d words, want -ctk T -ctv T", trial, argc);
    }
    const kvq_type k3[3] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0 };
    const kvq_type v3[3] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q5_0 };
    char flags[256];
    kvq_plan_format_flags(k3, v3, 3, flags, sizeof flags);
    CHECK(!strcmp(flags, "-ctk q4_0 -ctv q5_0 --cache-type-k-layers 0:q8_0 --cache-type-v-layers 0:q4_0"), "'%s'", flags);
}

/* --------------------------------------------------- toy-h64, for real */

/* With the golden f32 base as the reference, a 30% budget: the plan's
 * measured size fits, and its measured mean KLD is no worse than that of
 * every candidate used uniformly (both sides, every layer, rotation on)
 * whose size is no larger than the plan's budget. */
TEST(plan_on_toy_h64_beats_uniform_types_within_budget) {
    char model_path[1024], base_path[1024];
    if (!test_shared_path(model_path, sizeof model_path, "models/toy-h64.gguf") ||
        !test_shared_path(base_path, sizeof base_path, "golden/toy-h64.gpl3.c128.kld"))
        SKIP("../shared not found");
    kvq_model *m = NULL;
    kvq_kld_base *base = NULL;
    kvq_error err = { 0 };
    CHECK(kvq_model_load(model_path, &m, &err) == KVQ_OK, "%s", err.msg);
    if (kvq_kld_base_read(base_path, &base, &err)) { kvq_model_free(m); CHECK(0, "%s", err.msg); }
    kvq_kld_ref ref;
    kvq_kld_ref_from_llama(&ref, base);
    kvq_plan_setup s;
    kvq_plan_setup_init(&s, m, &ref);
    s.n_chunk = test_sanitized() ? 1 : 4;
    s.n_threads = 2;
    /* q3_0 is what frees bytes for q5_0 where it matters: without it a
     * 30% plan can only upgrade two sides, a gain within the noise of
     * one chunk (seen under sanitizers) */
    const kvq_type cands[] = { KVQ_TYPE_Q5_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q3_0 };
    const int n_cand = 3;
    kvq_plan_table table;
    kvq_plan plan = { 0 };
    kvq_plan_measurement got, uni[3];
    int n_uni = 0;
    double uni_kld[3];
    kvq_type uni_type[3];
    const size_t budget = kvq_plan_budget_pct(kvq_model_get_info(m), 30.0);
    kvq_status st = kvq_plan_sensitivities(&s, cands, n_cand, &table, &err);
    if (!st) st = kvq_plan_choose(&table, budget, &plan, &err);
    if (!st) st = kvq_plan_measure(&s, plan.types_k, plan.types_v, &got, &err);
    for (int i = 0; !st && i < n_cand; i++) {
        kvq_type all[4] = { cands[i], cands[i], cands[i], cands[i] };
        if (4 * (table.row_bytes[0][i] + table.row_bytes[1][i]) > budget) continue;
        st = kvq_plan_measure(&s, all, all, &uni[n_uni], &err);
        uni_kld[n_uni] = uni[n_uni].kld.mean_kld;
        uni_type[n_uni++] = cands[i];
    }
    const double predicted = plan.predicted_kld;
    kvq_plan_free(&plan);
    kvq_plan_table_free(&table);
    kvq_kld_base_free(base);
    kvq_model_free(m);
    CHECK(!st, "%s", err.msg);
    CHECK(n_uni >= 1, "no uniform candidate fits 30%%");
    CHECK(got.size_pct <= 30.0 && got.kv_bytes * 100 <= got.kv_bytes_bf16 * 30, "plan is %.3f%% of bf16", got.size_pct);
    for (int u = 0; u < n_uni; u++)
        CHECK(got.kld.mean_kld <= uni_kld[u], "plan mean KLD %.6g worse than uniform %s %.6g (size %.2f%%)",
              got.kld.mean_kld, kvq_type_name(uni_type[u]), uni_kld[u], uni[u].size_pct);
    /* the additive model should be in the right ballpark for this model */
    CHECK(predicted > 0.5 * got.kld.mean_kld && predicted < 2.0 * got.kld.mean_kld,
          "predicted %.6g vs measured %.6g", predicted, got.kld.mean_kld);
}

/* ------------------------------------------------- through the kvq binary */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The string value of "key" in a one-line JSON object (no escapes). */
static bool json_string(const char *json, const char *key, char *out, size_t cap) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": \"", key);
    const char *p = strstr(json, k);
    if (!p) return false;
    p += strlen(k);
    const char *end = strchr(p, '"');
    if (!end || (size_t)(end - p) >= cap) return false;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = 0;
    return true;
}

static double json_number(const char *json, const char *key) {
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(json, k);
    return p ? atof(p + strlen(k)) : NAN;
}

/* kvq plan's flag string, given to kvq kld, reproduces the plan's
 * verification run exactly: the plan's in-memory f32 reference and a base
 * file written by kvq kld with an f32 cache hold the same numbers.  Short
 * chunks (-c 32) keep the 18 runs fast under sanitizers. */
TEST(cli_plan_flags_reproduce_its_verification_in_kld) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024], cmd[4096], flags[1024], base[256];
    static char plan_out[16384], kld_out[8192];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    snprintf(cmd, sizeof cmd, "{ %s plan -m %s -f %s -c 32 --chunks 2 -t 2 --types q4_0,q3_0 --budget 25%% --json 2>/dev/null; }",
             bin, model, text);
    int rc = test_run(cmd, plan_out, sizeof plan_out);
    CHECK(rc == 0 && count_lines(plan_out) == 1, "kvq plan exited %d: %s", rc, plan_out);
    CHECK(json_string(plan_out, "flags", flags, sizeof flags), "no flags in %s", plan_out);
    /* 25% of toy-h64's 2048 bf16 bytes per token = 512; all q3_0 = 448 */
    const double bpt = json_number(plan_out, "bytes_per_token");
    CHECK(json_number(plan_out, "budget_bytes_per_token") == 512 && bpt <= 512 && bpt >= 448,
          "bytes per token %g for a budget of 512", bpt);
    CHECK(strstr(flags, "q4_0") && strstr(flags, "q3_0"), "a 25%% plan should mix q4_0 and q3_0: '%s'", flags);

    snprintf(base, sizeof base, "/tmp/kvq_test_plan_%d.kld", (int)getpid());
    /* llama.cpp's 16-bit format, the encoding of the plan's in-memory reference */
    snprintf(cmd, sizeof cmd, "{ %s kld -m %s -f %s -c 32 --chunks 2 -t 2 -ctk f32 -ctv f32 --kl-divergence-base %s 2>/dev/null; }",
             bin, model, text, base);
    rc = test_run(cmd, kld_out, sizeof kld_out);
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "{ %s kld -m %s --base %s -t 2 %s --json 2>/dev/null; }", bin, model, base, flags);
        rc = test_run(cmd, kld_out, sizeof kld_out);
    }
    remove(base);
    CHECK(rc == 0, "kvq kld with '%s' exited %d: %s", flags, rc, kld_out);
    CHECK(json_number(kld_out, "mean_kld") == json_number(plan_out, "mean_kld"), "kld %s vs plan %s",
          strstr(kld_out, "mean_kld"), strstr(plan_out, "\"mean_kld"));
    CHECK(json_number(kld_out, "kv_bytes") == json_number(plan_out, "kv_bytes") &&
          json_number(kld_out, "kv_bytes") == 32 * bpt, "kv_bytes differ");
}

TEST(cli_plan_bad_input_one_line) {
    const char *bin = test_kvq_bin();
    char model[1024], base[1024], cmd[4096];
    static char out[4096];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(base, sizeof base, "golden/toy-h64.gpl3.c128.kld"))
        SKIP("../shared not found");
    static const struct { const char *args, *says; } bad[] = {
        { "--budget 30", "needs a unit" },
        { "--budget 5%", "smallest plan" },
        { "--budget 30% -ctk q4_0", "chooses the cache types" },
        { "--budget 30% --types q4_0,q9_0", "q9_0" },
        { "--budget 30% --types q4_0,q4_0", "twice" },
        { "--budget 30% -c 64", "context" },
        { "", "no budget" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s plan -m %s --base %s %s 2>&1", bin, model, base, bad[i].args);
        int rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 1 && count_lines(out) == 1 && strstr(out, bad[i].says), "'%s': rc %d, '%s'", bad[i].args, rc, out);
    }
}
