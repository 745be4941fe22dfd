/* cmd_plan.c - `kvq plan`: per-layer K/V cache types within a byte budget
 * with the least predicted KLD (docs/spec/eval.md §5; method in src/eval/planner.h and
 * docs/planner.md).  Results on stdout (tables, or --json), progress on
 * stderr. */
#include "base_check.h"
#include "kvq_eval.h"
#include "cli.h"
#include "engine_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "plan";

enum { DEFAULT_CHUNKS = 16, DEFAULT_CTX = 512, FLAGS_CAP = 16384 };

/* A 1-bit ladder of the symmetric block types, 8.5 down to 3.5 bits. */
static const kvq_type DEFAULT_TYPES[] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q6_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q3_0 };

typedef struct plan_opts {
    const char *model, *text, *base, *budget_arg;
    int n_ctx, n_chunks, n_threads;
    bool json, compare_uniform, no_mmap;
    bool no_base_check;       /* use a llama.cpp base that fails base_check */
    double budget;            /* percent or MiB */
    bool budget_is_mib;
    kvq_type types[KVQ_PLAN_MAX_TYPES];
    int n_types;
    cache_flags cache;        /* rotation switches only */
    char rot_flags[256];      /* the rotation switches as given, for the flag string */
} plan_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq plan -m MODEL (-f TEXT | --base FILE) --budget PCT%%|MIBMiB [options]\n"
        "  Measures each layer's and side's sensitivity (KLD added when only that layer/side\n"
        "  is quantised), picks per-layer K/V types within the budget with the least\n"
        "  predicted KLD (sum of sensitivities), verifies the plan with a real KLD run and\n"
        "  prints it as flags for kvq run / kvq kld.\n"
        "  -m, --model FILE       GGUF model\n"
        "  -f, --file FILE        text (reference computed with an f32 cache)\n"
        "  --base FILE            reference logits instead: kvq's exact base (kvq kld --save-base)\n"
        "                         or llama.cpp's --kl-divergence-base file\n"
        "  --budget B             30%% = size of the bf16 cache at the same context, or\n"
        "                         120MiB = MiB at the model's trained context\n"
        "  --types LIST           candidate types, comma-separated (default q8_0,q6_0,q5_0,q4_0,q3_0)\n"
        "  -c, --ctx-size N       chunk length (default %d; with --base: the base's)\n"
        "  --chunks N             chunks used (default %d)\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_NO_MMAP_USAGE
        "  --compare-uniform      also measure every candidate type used everywhere that fits\n"
        "  --json                 print one JSON object\n"
        "  --no-base-check        use a llama.cpp base even when this model is far from it (kvq kld)\n"
        "  --attn-rot MODE, --attn-rot-k MODE, --attn-rot-v MODE, --attn-rot-random\n"
        "                         rotation switches, as for kvq kld (default auto: on)\n",
        DEFAULT_CTX, DEFAULT_CHUNKS);
}

/* "30%" or "120MiB" (also "120M"). */
static bool parse_budget(plan_opts *o, const char *s) {
    char num[64];
    size_t n = strlen(s);
    const char *suffix = NULL;
    if (n > 1 && s[n - 1] == '%') { suffix = "%"; n -= 1; }
    else if (n > 3 && !strcmp(s + n - 3, "MiB")) { suffix = "MiB"; n -= 3; }
    else if (n > 1 && s[n - 1] == 'M') { suffix = "M"; n -= 1; }
    if (!suffix || n >= sizeof num) {
        cli_error(CMD, "--budget: '%s' needs a unit: a percentage of the bf16 cache (30%%) or MiB (120MiB)", s);
        return false;
    }
    memcpy(num, s, n);
    num[n] = 0;
    o->budget_is_mib = suffix[0] == 'M';
    if (!cli_parse_double(num, 1e-9, o->budget_is_mib ? 1e9 : 1000.0, &o->budget)) {
        cli_error(CMD, "--budget: '%s' is not a positive %s (see kvq plan --help)", s,
                  o->budget_is_mib ? "size in MiB" : "percentage up to 1000%");
        return false;
    }
    return true;
}

static bool parse_types(plan_opts *o, const char *list) {
    char buf[1024];
    if (strlen(list) >= sizeof buf) { cli_error(CMD, "--types: list too long"); return false; }
    strcpy(buf, list);
    o->n_types = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        kvq_type t;
        if (!cli_parse_type(CMD, tok, true, &t)) return false;
        for (int i = 0; i < o->n_types; i++)
            if (o->types[i] == t) { cli_error(CMD, "--types: %s listed twice", tok); return false; }
        if (o->n_types == KVQ_PLAN_MAX_TYPES) { cli_error(CMD, "--types: more than %d types", KVQ_PLAN_MAX_TYPES); return false; }
        o->types[o->n_types++] = t;
    }
    if (!o->n_types) { cli_error(CMD, "--types: empty list"); return false; }
    return true;
}

/* Rotation switches go to the shared parser; the planner picks the types
 * and measures without tail or sink, so those flags are refused. */
static int parse_cache_flag(plan_opts *o, int argc, char **argv, int *i) {
    static const char *const refused[] = { "-ctk", "--cache-type-k", "-ctv", "--cache-type-v", "--cache-type-k-layers",
        "--cache-type-v-layers", "--kv-tail-tokens", "--kv-tail-type", "--kv-sink-tokens" };
    const char *a = argv[*i];
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
        if (!strcmp(a, refused[k])) {
            cli_error(CMD, "%s: kvq plan chooses the cache types itself (candidates: --types) and plans without "
                      "tail or sink", a);
            return -1;
        }
    const int first = *i;
    int r = cache_flags_parse(CMD, &o->cache, argc, argv, i);
    for (int k = first; r == 1 && k <= *i; k++) {   /* keep them for the printed flags */
        size_t len = strlen(o->rot_flags);
        snprintf(o->rot_flags + len, sizeof o->rot_flags - len, " %s", argv[k]);
    }
    return r;
}

static int parse_one(plan_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    const cli_model_flags common = { &o->model, &o->text, &o->n_ctx, NULL, &o->n_chunks, &o->n_threads, NULL, &o->no_mmap };
    const char **str = NULL;
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    if (!strcmp(a, "--compare-uniform")) { o->compare_uniform = true; return 1; }
    if (!strcmp(a, "--no-base-check")) { o->no_base_check = true; return 1; }
    const int r = cli_model_flag(CMD, &common, argc, argv, i);
    if (r) return r;
    if (!strcmp(a, "--base")) str = &o->base;
    else if (!strcmp(a, "--budget")) str = &o->budget_arg;
    else if (!strcmp(a, "--types")) {
        if (!(v = cli_value(CMD, argc, argv, i))) return -1;
        return parse_types(o, v) ? 1 : -1;
    }
    else return parse_cache_flag(o, argc, argv, i);
    return (*str = cli_value(CMD, argc, argv, i)) ? 1 : -1;
}

/* ------------------------------------------------------------ reference */

/* The text's tokens must be the base's (same model vocabulary, same text). */
static int check_text(const plan_opts *o, const kvq_model *m, const kvq_kld_ref *r, int n_chunk) {
    int n = 0;
    int32_t *toks = cli_text_tokens(CMD, m, o->text, &n);
    if (!toks) return 1;
    kvq_error err = { 0 };
    int rc = kvq_kld_ref_check_tokens(r, toks, (size_t)n, n_chunk, &err) ? cli_error(CMD, "'%s': %s", o->text, err.msg) : 0;
    free(toks);
    return rc;
}

/* --base FILE of either format (kld_ref.h), checked against the model,
 * -c and the text. */
static int read_base(plan_opts *o, const kvq_model *m, kvq_kld_ref *r, int *n_chunk) {
    kvq_error err = { 0 };
    if (kvq_kld_ref_open(o->base, r, &err)) return cli_error(CMD, "%s", err.msg);
    *n_chunk = CLI_MIN(o->n_chunks, r->n_chunk);
    int rc = 0;
    if (kvq_kld_ref_check_model(r, o->model, kvq_model_get_info(m), &err))
        rc = cli_error(CMD, "base file '%s': %s", o->base, err.msg);
    else if (o->n_ctx && o->n_ctx != r->n_ctx)
        rc = cli_error(CMD, "-c %d differs from the base file's context %d", o->n_ctx, r->n_ctx);
    else if (o->text)
        rc = check_text(o, m, r, *n_chunk);
    if (!rc) rc = cli_check_scored(CMD, r->n_ctx, *n_chunk);
    if (!rc && r->format == KVQ_BASE_LLAMA) {   /* no model hash: ask the model (base_check.h) */
        const kvq_model_info *in = kvq_model_get_info(m);
        base_check bc;
        rc = base_check_run(CMD, m, r, in->add_bos ? in->bos_id : -1, 0, o->n_threads, &bc);
        if (!rc) rc = base_check_report(CMD, o->base, &bc, r->n_vocab, o->text != NULL, o->no_base_check);
    }
    if (rc) { kvq_kld_ref_close(r); return 1; }
    fprintf(stderr, "kvq plan: reference '%s': %d of %d chunks of %d tokens\n", o->base, *n_chunk, r->n_chunk, r->n_ctx);
    return 0;
}

/* The f32 cache's reference of -f TEXT, held in memory. */
static int compute_base(plan_opts *o, const kvq_model *m, kvq_kld_ref *r, int *n_chunk) {
    int n_tok = 0;
    int32_t *toks = cli_text_tokens(CMD, m, o->text, &n_tok);
    if (!toks) return 1;
    const int n_ctx = o->n_ctx ? o->n_ctx : DEFAULT_CTX;
    *n_chunk = CLI_MIN(o->n_chunks, n_tok / n_ctx);
    kvq_kld_base *b = NULL;
    kvq_cache_params exact;   /* the planner's largest cache: f32 everywhere */
    kvq_cache_params_default(&exact);
    exact.type_k = exact.type_v = KVQ_TYPE_F32;
    exact.max_batch = kvq_eval_batch(0, n_ctx);
    if (*n_chunk < 1) cli_error(CMD, "the text has %d tokens, fewer than one chunk of %d (-c)", n_tok, n_ctx);
    else if (!cli_check_scored(CMD, n_ctx, *n_chunk) && !cli_check_context(CMD, kvq_model_get_info(m), &exact, n_ctx)) {
        fprintf(stderr, "kvq plan: reference: f32 cache, %d chunks of %d tokens\n", *n_chunk, n_ctx);
        kvq_error err = { 0 };
        if (kvq_plan_reference(m, toks, n_ctx, *n_chunk, o->n_threads, &b, &err)) cli_error(CMD, "%s", err.msg);
    }
    free(toks);
    if (!b) return 1;
    kvq_kld_ref_from_llama(r, b);
    r->own_llama = b;
    return 0;
}

/* ------------------------------------------------------------- progress */

typedef struct progress {
    double t0;
} progress;

static void on_progress(void *ud, int done, int total, int layer, int side, kvq_type type, double mean_kld) {
    const progress *p = ud;
    const double elapsed = kvq_now_seconds() - p->t0;
    fprintf(stderr, "kvq plan: [%*d/%d] layer %d %s %-6s mean KLD %.6g   ETA %.0f s\n", total >= 100 ? 3 : 2, done,
            total, layer, side ? "V" : "K", kvq_type_name(type), mean_kld, elapsed / done * (total - done));
}

/* ------------------------------------------------------------- printing */

typedef struct plan_result {
    const kvq_model_info *in;
    int n_ctx, n_chunk;
    size_t budget;                   /* bytes per token */
    kvq_plan_table table;
    kvq_plan plan;
    kvq_plan_measurement measured;
    char flags[FLAGS_CAP];
    int n_uniform;                   /* --compare-uniform rows */
    kvq_type uniform_type[KVQ_PLAN_MAX_TYPES];
    kvq_plan_measurement uniform[KVQ_PLAN_MAX_TYPES];
    double uniform_predicted[KVQ_PLAN_MAX_TYPES];
} plan_result;

static double mib_at_train(const plan_result *r, size_t bytes_per_token) {
    return (double)bytes_per_token * (double)r->in->n_ctx_train / 1048576.0;
}

static double pct(size_t bytes, size_t of) { return of ? 100.0 * (double)bytes / (double)of : 0.0; }

static void print_table(const plan_result *r) {
    const kvq_plan_table *t = &r->table;
    printf("sensitivity: mean KLD added when only this layer and side is quantised (exact cache: %.3g)\n\n",
           t->floor_kld);
    printf("| layer | side |");
    for (int i = 0; i < t->n_types; i++) printf(" %10s |", kvq_type_name(t->types[i]));
    printf("\n|-------|------|");
    for (int i = 0; i < t->n_types; i++) printf("------------|");
    printf("\n");
    for (int l = 0; l < t->n_layer; l++)
        for (int s = 0; s < 2; s++) {
            printf("| %5d |  %s   |", l, s ? "V" : "K");
            for (int i = 0; i < t->n_types; i++) printf(" %10.3e |", t->sens[kvq_plan_table_index(t, l, s, i)]);
            printf("\n");
        }
}

static void print_human(const plan_result *r) {
    const kvq_plan *p = &r->plan;
    const size_t bf16 = r->table.bf16_bytes_per_token;
    print_table(r);
    printf("\nplan for a budget of %zu of %zu bytes per token (%.2f%% of bf16, %.3f MiB at n_ctx_train %d):\n\n",
           r->budget, bf16, pct(r->budget, bf16), mib_at_train(r, r->budget), r->in->n_ctx_train);
    printf("| layer | K      | V      |\n|-------|--------|--------|\n");
    for (int l = 0; l < p->n_layer; l++)
        printf("| %5d | %-6s | %-6s |\n", l, kvq_type_name(p->types_k[l]), kvq_type_name(p->types_v[l]));
    const kvq_kld_summary *k = &r->measured.kld;
    printf("\npredicted mean KLD: %.6f  (additive model: exact cache + sum of the chosen sensitivities%s)\n",
           p->predicted_kld, p->exact ? "" : "; knapsack on rounded sizes");
    printf("measured  mean KLD: %.6f ± %.6f  (median %.6f, 99.9%% %.6f, same top %.2f%%; %zu tokens)\n", k->mean_kld,
           k->mean_kld_se, k->median_kld, k->p_kld[7], 100.0 * k->same_top, k->n);
    printf("size: %.2f%% of bf16 (%zu bytes per token, %zu bytes at n_ctx %d), %.3f MiB at n_ctx_train %d\n",
           r->measured.size_pct, p->bytes_per_token, r->measured.kv_bytes, r->n_ctx,
           mib_at_train(r, p->bytes_per_token), r->in->n_ctx_train);
    for (int u = 0; u < r->n_uniform; u++)
        printf("uniform %-6s: %.2f%% of bf16, measured mean KLD %.6f ± %.6f, predicted %.6f\n",
               kvq_type_name(r->uniform_type[u]), r->uniform[u].size_pct, r->uniform[u].kld.mean_kld,
               r->uniform[u].kld.mean_kld_se, r->uniform_predicted[u]);
    printf("flags: %s\n", r->flags);
}

static void print_type_array(const kvq_type *types, int n) {
    printf("[");
    for (int i = 0; i < n; i++) printf("%s\"%s\"", i ? ", " : "", kvq_type_name(types[i]));
    printf("]");
}

static void print_json(const plan_result *r) {
    const kvq_plan *p = &r->plan;
    const kvq_plan_table *t = &r->table;
    const kvq_kld_summary *k = &r->measured.kld;
    printf("{\"n_layer\": %d, \"n_ctx\": %d, \"n_chunks\": %d, \"n_tokens\": %zu, ", p->n_layer, r->n_ctx, r->n_chunk, k->n);
    printf("\"budget_bytes_per_token\": %zu, \"bf16_bytes_per_token\": %zu, \"budget_pct\": %.4f, ", r->budget,
           t->bf16_bytes_per_token, pct(r->budget, t->bf16_bytes_per_token));
    printf("\"types_k\": ");
    print_type_array(p->types_k, p->n_layer);
    printf(", \"types_v\": ");
    print_type_array(p->types_v, p->n_layer);
    printf(", \"flags\": \"%s\", \"predicted_mean_kld\": %.8g, \"exact_optimum\": %s, ", r->flags, p->predicted_kld,
           p->exact ? "true" : "false");
    printf("\"mean_kld\": %.8g, \"mean_kld_se\": %.8g, \"median_kld\": %.8g, \"p99_9_kld\": %.8g, \"same_top_p\": %.6f, ",
           k->mean_kld, k->mean_kld_se, k->median_kld, k->p_kld[7], 100.0 * k->same_top);
    printf("\"bytes_per_token\": %zu, \"kv_bytes\": %zu, \"work_bytes\": %zu, \"kv_bytes_bf16\": %zu, \"size_pct\": %.4f, "
           "\"mib_at_train_ctx\": %.6f, \"n_ctx_train\": %d, ", p->bytes_per_token, r->measured.kv_bytes, r->measured.work_bytes,
           r->measured.kv_bytes_bf16, r->measured.size_pct, mib_at_train(r, p->bytes_per_token), r->in->n_ctx_train);
    printf("\"exact_mean_kld\": %.8g, \"candidates\": ", t->floor_kld);
    print_type_array(t->types, t->n_types);
    for (int s = 0; s < 2; s++) {
        printf(", \"sensitivity_%s\": [", s ? "v" : "k");
        for (int l = 0; l < t->n_layer; l++) {
            printf("%s[", l ? ", " : "");
            for (int i = 0; i < t->n_types; i++) printf("%s%.8g", i ? ", " : "", t->sens[kvq_plan_table_index(t, l, s, i)]);
            printf("]");
        }
        printf("]");
    }
    printf(", \"uniform\": [");
    for (int u = 0; u < r->n_uniform; u++)
        printf("%s{\"type\": \"%s\", \"size_pct\": %.4f, \"mean_kld\": %.8g, \"mean_kld_se\": %.8g}", u ? ", " : "",
               kvq_type_name(r->uniform_type[u]), r->uniform[u].size_pct, r->uniform[u].kld.mean_kld,
               r->uniform[u].kld.mean_kld_se);
    printf("]}\n");
}

/* ------------------------------------------------------------------ run */

/* Every candidate used for every layer and side, when it fits the budget. */
static kvq_status measure_uniform(const kvq_plan_setup *s, plan_result *r, kvq_error *err) {
    const int L = r->in->n_layer;
    kvq_type *types = malloc((size_t)L * sizeof *types);
    if (!types) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_status st = KVQ_OK;
    for (int i = 0; !st && i < r->table.n_types; i++) {
        const size_t bytes = (size_t)L * (r->table.row_bytes[0][i] + r->table.row_bytes[1][i]);
        if (bytes > r->budget) continue;
        for (int l = 0; l < L; l++) types[l] = r->table.types[i];
        fprintf(stderr, "kvq plan: measuring uniform %s\n", kvq_type_name(types[0]));
        r->uniform_type[r->n_uniform] = types[0];
        r->uniform_predicted[r->n_uniform] = kvq_plan_predict(&r->table, types, types);
        st = kvq_plan_measure(s, types, types, &r->uniform[r->n_uniform], err);
        r->n_uniform += !st;
    }
    free(types);
    return st;
}

static int plan_with(plan_opts *o, kvq_plan_setup *sp, plan_result *r);

static int plan_and_verify(plan_opts *o, const kvq_model *m, const kvq_kld_ref *base, int n_chunk, plan_result *r) {
    kvq_plan_setup s;
    kvq_plan_setup_init(&s, m, base);
    s.n_chunk = n_chunk;
    s.n_threads = o->n_threads;
    s.cache = o->cache.params;
    kvq_calib *cal = NULL;   /* --calib: calibrated candidates (--types cal325,...); every cache copies it */
    kvq_error cerr = { 0 };
    if (o->cache.calib_path && kvq_calib_load(o->cache.calib_path, m, &cal, &cerr) != KVQ_OK)
        return cli_error(CMD, "--calib: %s", cerr.msg);
    s.cache.calib = cal;
    r->n_ctx = base->n_ctx;
    r->n_chunk = n_chunk;
    const int rc = plan_with(o, &s, r);
    kvq_calib_free(cal);
    return rc;
}

/* The sensitivity runs, the choice and the verification run. */
static int plan_with(plan_opts *o, kvq_plan_setup *sp, plan_result *r) {
    kvq_plan_setup s = *sp;
    progress pr = { kvq_now_seconds() };
    s.progress = on_progress;
    s.progress_ud = &pr;
    kvq_error err = { 0 };
    fprintf(stderr, "kvq plan: %d sensitivity runs (%d layers x K,V x %d types) + exact + verification\n",
            2 * r->in->n_layer * o->n_types, r->in->n_layer, o->n_types);
    if (kvq_plan_sensitivities(&s, o->types, o->n_types, &r->table, &err)) return cli_error(CMD, "%s", err.msg);
    if (kvq_plan_choose(&r->table, r->budget, &r->plan, &err)) return cli_error(CMD, "%s", err.msg);
    kvq_plan_format_flags(r->plan.types_k, r->plan.types_v, r->plan.n_layer, r->flags, sizeof r->flags - sizeof o->rot_flags);
    strcat(r->flags, o->rot_flags);
    fprintf(stderr, "kvq plan: verifying %s\n", r->flags);
    if (kvq_plan_measure(&s, r->plan.types_k, r->plan.types_v, &r->measured, &err)) return cli_error(CMD, "%s", err.msg);
    if (o->compare_uniform && measure_uniform(&s, r, &err)) return cli_error(CMD, "%s", err.msg);
    if (o->json) print_json(r);
    else print_human(r);
    return 0;
}

static int check_opts(plan_opts *o) {
    if (!o->model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o->text && !o->base) return cli_error(CMD, "no reference: give -f TEXT or --base FILE");
    if (!o->budget_arg) return cli_error(CMD, "no budget given (use --budget 30%% or --budget 120MiB)");
    if (!parse_budget(o, o->budget_arg)) return 1;
    if (!o->n_types) {
        o->n_types = (int)(sizeof DEFAULT_TYPES / sizeof DEFAULT_TYPES[0]);
        memcpy(o->types, DEFAULT_TYPES, sizeof DEFAULT_TYPES);
    }
    if (!o->n_chunks) o->n_chunks = DEFAULT_CHUNKS;
    return 0;
}

int cmd_plan(int argc, char **argv) {
    static plan_opts o;
    memset(&o, 0, sizeof o);
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq plan --help)", argv[i]);
    }
    if (check_opts(&o)) return 1;
    kvq_model *m = cli_load_model(CMD, o.model, o.no_mmap);
    if (!m) return 1;
    plan_result *r = calloc(1, sizeof *r);
    int rc = 1, n_chunk = 0;
    kvq_kld_ref base = { 0 };
    if (!r) { cli_error(CMD, "out of memory"); goto done; }
    r->in = kvq_model_get_info(m);
    r->budget = o.budget_is_mib ? kvq_plan_budget_mib(r->in, o.budget) : kvq_plan_budget_pct(r->in, o.budget);
    if (o.budget_is_mib && r->in->n_ctx_train <= 0) {
        cli_error(CMD, "--budget in MiB needs the model's trained context, which '%s' does not give", o.model);
        goto done;
    }
    const size_t smallest = kvq_plan_smallest_bytes(r->in, o.types, o.n_types);
    const size_t bf16 = kvq_plan_bf16_bytes_per_token(r->in);
    if (smallest > r->budget) {
        cli_error(CMD, "--budget %s is %zu bytes per token (%.2f%% of bf16); the smallest plan of these types needs "
                  "%zu (%.2f%%)", o.budget_arg, r->budget, pct(r->budget, bf16), smallest, pct(smallest, bf16));
        goto done;
    }
    if (!(o.base ? read_base(&o, m, &base, &n_chunk) : compute_base(&o, m, &base, &n_chunk)))
        rc = plan_and_verify(&o, m, &base, n_chunk, r);
done:
    if (r) {
        kvq_plan_table_free(&r->table);
        kvq_plan_free(&r->plan);
    }
    free(r);
    kvq_kld_ref_close(&base);
    kvq_model_free(m);
    return rc;
}
