/* cmd_bench.c - `kvq bench`: prompt and generation speed of a model per
 * cache type and depth, relative to the f16 cache, and the cost of the
 * Hadamard rotation (docs/spec/eval.md §6).
 *
 * Every (type, rotation) configuration is run `reps` times at each depth,
 * the configurations interleaved run by run (rep 1 of every one, then rep
 * 2, ...) so that a change of machine load hits them all alike; medians
 * are reported.  The rotation cost compares each rotated run with the
 * unrotated run of the same type right after it (paired ratios).
 *
 * Next to each generation speed: the memory-bandwidth bound (the read
 * bandwidth, measured with the run's threads before the runs and again
 * after each depth's, the higher of a depth's two readings over the bytes
 * a step reads: weights + the cache at that depth, exact rows included;
 * tools/bench_bound.h) and the fraction of it reached.  (One reading
 * taken before the runs alone had caught the bus shared on a VM, 34 GB/s
 * where the hour's others read 55-62, and put every % of that run's
 * bound at 84-92 %.) */
#include "bench_bound.h"
#include "bench_run.h"
#include "cli.h"
#include "engine_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *CMD = "bench";

enum { MAX_DEPTHS = 16, MAX_CONFIGS = 2 * KVQ_TYPE_COUNT, MAX_REPS = 100, DEFAULT_FILL_BATCH = 2048 };

/* Rotation of the configurations: as the cache flags say, or forced. */
typedef enum rot_choice { ROT_FROM_FLAGS = 0, ROT_AUTO, ROT_ON, ROT_OFF, ROT_BOTH } rot_choice;

typedef struct bench_opts {
    const char *model;
    bench_run_opts run;
    int reps;
    int depths[MAX_DEPTHS], n_depths;   /* tokens already in the cache */
    const char *types;                  /* --types list, NULL: none given */
    bool kv_types_given;                /* -ctk / -ctv given */
    rot_choice rot;
    bool json;                          /* one JSON object per row instead of tables */
    bool no_mmap;                       /* --no-mmap: weights read into memory */
    double bandwidth_gbs;               /* read before the runs (the first depth's "before") */
    cache_flags cache;
} bench_opts;

/* One cache configuration and its times at the current depth. */
typedef struct bench_config {
    kvq_cache_params cache;
    int off_twin;             /* --rot both: its unrotated twin, or -1 */
    bool is_twin;             /* the unrotated twin of the one before  */
    kvq_rot_plan plan;        /* what the cache chose (first run)     */
    bench_times t[MAX_REPS];
} bench_config;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq bench -m MODEL [options]\n"
        "Prompt (pp) and generation (tg) tokens/s per cache type and depth, median of -r runs.\n"
        "  -p, --n-prompt N       prompt tokens, evaluated as one batch (default 128)\n"
        "  -n, --n-gen N          generated tokens, one step each (default 64)\n"
        "  -r, --repetitions N    runs per figure; the median is reported (default 5)\n"
        "  -d, --depth LIST       cache depths to measure at, e.g. 0,4096,16384 (default 0)\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_ACT_USAGE
        CLI_NO_MMAP_USAGE
        "  --types LIST           cache types, each run with -ctk = -ctv = TYPE: names separated by\n"
        "                         commas, 'default' (every cache type but f32, bf16 and the rarely\n"
        "                         used q6_0 q6_1 q5_1 q4_1 q3_1 q2_1) or 'all'.  Without --types\n"
        "                         and without -ctk/-ctv: default\n"
        "  --rot auto|on|off|both rotation of every configuration; both = on and off for each\n"
        "                         block-quantised type, and the rotation cost line (default: the\n"
        "                         cache flags, i.e. auto)\n"
        "  --fill synthetic|model how the depth is filled (not timed): random K/V rows written into\n"
        "                         the cache (default; linear in the depth), or the model's own\n"
        "                         prefill (quadratic: minutes at 16384 on a small machine)\n"
        "  -b, --batch-size N     tokens per fill batch (default 2048)\n"
        "  --json                 one JSON object per line and row (configuration x depth) instead\n"
        "                         of the tables\n"
        "Each tg figure comes with its memory-bandwidth bound: read bandwidth (measured with the\n"
        "run's threads before the runs and after each depth's; the higher of a depth's two readings)\n"
        "/ bytes a step reads (weights + cache at that depth).\n"
        "Depths past the model's trained context are allowed with a warning: RoPE\n"
        "extrapolates, the speed is the same, the outputs are not meaningful.\n");
    cache_flags_usage(f);
}

/* "0,4096,16384": each depth in 0..CLI_MAX_CTX. */
static bool parse_depths(bench_opts *o, const char *list) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    o->n_depths = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long d;
        if (o->n_depths == MAX_DEPTHS || !cli_parse_long(tok, 0, CLI_MAX_CTX, &d)) {
            cli_error(CMD, "-d: '%s' is not a list of at most %d depths in 0..%d", list, MAX_DEPTHS, CLI_MAX_CTX);
            return false;
        }
        o->depths[o->n_depths++] = (int)d;
    }
    if (!o->n_depths) { cli_error(CMD, "-d: empty list"); return false; }
    return true;
}

static bool parse_rot(const char *s, rot_choice *out) {
    static const struct { const char *name; rot_choice v; } names[] = {
        { "auto", ROT_AUTO }, { "on", ROT_ON }, { "off", ROT_OFF }, { "both", ROT_BOTH } };
    for (size_t i = 0; i < CLI_ARRAY_LEN(names); i++)
        if (!strcmp(s, names[i].name)) { *out = names[i].v; return true; }
    cli_error(CMD, "--rot: '%s' is not one of auto, on, off, both", s);
    return false;
}

static bool is_kv_type_flag(const char *a) {
    return !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v");
}

static int parse_one(bench_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int *dst;
    long l, lo = 1, hi = CLI_MAX_CTX;
    const cli_model_flags common = { .model = &o->model, .n_batch = &o->run.fill_batch, .n_threads = &o->run.n_threads,
                                     .act = &o->run.act, .no_mmap = &o->no_mmap };
    const int r = cli_model_flag(CMD, &common, argc, argv, i);
    if (r) return r;
    if (!strcmp(a, "--json")) { o->json = true; return 1; }
    if (!strcmp(a, "--types")) { if (!(v = cli_value(CMD, argc, argv, i))) return -1; o->types = v; return 1; }
    if (!strcmp(a, "--rot")) { if (!(v = cli_value(CMD, argc, argv, i))) return -1; return parse_rot(v, &o->rot) ? 1 : -1; }
    if (!strcmp(a, "--fill")) {
        if (!(v = cli_value(CMD, argc, argv, i))) return -1;
        if (!strcmp(v, "synthetic")) o->run.fill = BENCH_FILL_SYNTHETIC;
        else if (!strcmp(v, "model")) o->run.fill = BENCH_FILL_MODEL;
        else { cli_error(CMD, "--fill: '%s' is not one of synthetic, model", v); return -1; }
        return 1;
    }
    if (!strcmp(a, "-d") || !strcmp(a, "--depth")) {
        if (!(v = cli_value(CMD, argc, argv, i))) return -1;
        return parse_depths(o, v) ? 1 : -1;
    }
    if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) dst = &o->run.n_prompt;
    else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) { dst = &o->run.n_gen; lo = 0; }
    else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) { dst = &o->reps; hi = MAX_REPS; }
    else {
        o->kv_types_given |= is_kv_type_flag(a);
        return cache_flags_parse(CMD, &o->cache, argc, argv, i);
    }
    if (!(v = cli_value(CMD, argc, argv, i))) return -1;
    if (!cli_parse_long(v, lo, hi, &l)) { cli_error(CMD, "%s: '%s' is not an integer in %ld..%ld", a, v, lo, hi); return -1; }
    *dst = (int)l;
    return 1;
}

/* ------------------------------------------------------------ configs */

/* Left out of --types default: full precision, and the variants that
 * only trade a little size for a little accuracy against their sibling. */
static bool in_default_set(kvq_type t) {
    static const kvq_type skipped[] = { KVQ_TYPE_F32, KVQ_TYPE_BF16, KVQ_TYPE_Q6_0, KVQ_TYPE_Q6_1, KVQ_TYPE_Q5_1,
                                        KVQ_TYPE_Q4_1, KVQ_TYPE_Q3_1, KVQ_TYPE_Q2_1 };
    for (size_t i = 0; i < CLI_ARRAY_LEN(skipped); i++)
        if (t == skipped[i]) return false;
    return true;
}

static bool is_block_quant(kvq_type t) { return kvq_type_get(t)->is_block_quant; }

/* Add the configuration(s) of a K/V type pair (--rot both: rotated and
 * not when either side is block-quantised); false when full. */
static bool add_config(const bench_opts *o, kvq_type tk, kvq_type tv, bench_config *cfg, int *n) {
    const bool both = o->rot == ROT_BOTH && (is_block_quant(tk) || is_block_quant(tv));
    if (*n + (both ? 2 : 1) > MAX_CONFIGS) return false;
    bench_config *c = &cfg[(*n)++];
    c->cache = o->cache.params;
    c->cache.type_k = tk;
    c->cache.type_v = tv;
    c->off_twin = -1;
    static const kvq_rot_mode forced[] = { [ROT_AUTO] = KVQ_ROT_AUTO, [ROT_ON] = KVQ_ROT_ON, [ROT_OFF] = KVQ_ROT_OFF,
                                           [ROT_BOTH] = KVQ_ROT_ON };
    if (o->rot != ROT_FROM_FLAGS) {
        c->cache.rot.mode = both || o->rot != ROT_BOTH ? forced[o->rot] : KVQ_ROT_AUTO;
        c->cache.rot.mode_k = c->cache.rot.mode_v = KVQ_ROT_AUTO;   /* the single switch decides */
    }
    if (both) {
        bench_config *off = &cfg[(*n)++];
        *off = *c;
        off->cache.rot.mode = KVQ_ROT_OFF;
        off->is_twin = true;
        c->off_twin = *n - 1;
    }
    return true;
}

/* The configurations to run; 0 after printing an error. */
static int make_configs(const bench_opts *o, bench_config *cfg) {
    int n = 0;
    if (!o->types) {   /* -ctk/-ctv given: exactly that cache */
        add_config(o, o->cache.params.type_k, o->cache.params.type_v, cfg, &n);
        return n;
    }
    const bool all = !strcmp(o->types, "all"), dflt = !strcmp(o->types, "default");
    if (all || dflt) {
        for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
            const kvq_type_traits *tr = kvq_type_get((kvq_type)t);
            if (tr && tr->is_cache_type && (!tr->calib_rate || o->cache.calib_path) && (all || in_default_set((kvq_type)t)))
                add_config(o, (kvq_type)t, (kvq_type)t, cfg, &n);
        }
        return n;
    }
    char buf[512];
    snprintf(buf, sizeof buf, "%s", o->types);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        kvq_type t;
        if (!cli_parse_type(CMD, tok, true, &t)) return 0;
        if (!add_config(o, t, t, cfg, &n)) { cli_error(CMD, "--types: more than %d configurations", MAX_CONFIGS); return 0; }
    }
    if (!n) cli_error(CMD, "--types: empty list");
    return n;
}

/* ------------------------------------------------------------ figures */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Median over the runs of one field of bench_times. */
static double median_of(const bench_config *c, int reps, size_t field_offset) {
    double v[MAX_REPS];
    for (int r = 0; r < reps; r++) v[r] = *(const double *)((const char *)&c->t[r] + field_offset);
    return median(v, reps);
}

/* Median over paired runs of (rotated / unrotated) - 1 for one field. */
static double paired_cost(const bench_config *on, const bench_config *off, int reps, size_t field_offset) {
    double v[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        const double a = *(const double *)((const char *)&on->t[r] + field_offset);
        const double b = *(const double *)((const char *)&off->t[r] + field_offset);
        v[r] = b > 0 ? a / b - 1.0 : 0.0;
    }
    return median(v, reps);
}

static double per_second(int tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; }

/* "q4_0", or "q8_0/q4_0" when K and V differ. */
static void config_name(const bench_config *c, char *buf, size_t cap) {
    if (c->cache.type_k == c->cache.type_v) snprintf(buf, cap, "%s", kvq_type_name(c->cache.type_k));
    else snprintf(buf, cap, "%s/%s", kvq_type_name(c->cache.type_k), kvq_type_name(c->cache.type_v));
}

/* One side: "format" for types that rotate inside their format (KVarN,
 * TurboQuant: the plan's block is 0 for them), the plan's block, or "off". */
static void side_rot(kvq_type t, int block, char *buf, size_t cap) {
    if (kvq_type_get(t)->format_rot != KVQ_FMT_ROT_NONE) snprintf(buf, cap, "format");
    else if (block) snprintf(buf, cap, "%d", block);
    else snprintf(buf, cap, "off");
}

static void plan_name(const bench_config *c, char *buf, size_t cap) {
    char k[16], v[16];
    side_rot(c->cache.type_k, c->plan.block_k, k, sizeof k);
    side_rot(c->cache.type_v, c->plan.block_v, v, sizeof v);
    const bool same_word = !strcmp(k, v) && (!strcmp(k, "off") || !strcmp(k, "format"));
    if (same_word) snprintf(buf, cap, "%s", k);
    else snprintf(buf, cap, "K %s / V %s", k, v);
}

static void print_header(const bench_opts *o, const kvq_model_info *in, int n_threads) {
    const char *base = strrchr(o->model, '/');
    printf("## kvq bench: %s, %d thread%s, context %d (trained %d), pp%d / tg%d, median of %d run%s, %s activations, "
           "weights %s\n\n",
           base ? base + 1 : o->model, n_threads, n_threads == 1 ? "" : "s", o->run.n_ctx, in->n_ctx_train,
           o->run.n_prompt, o->run.n_gen, o->reps, o->reps == 1 ? "" : "s", cli_act_name(o->run.act),
           o->no_mmap ? "read into memory (--no-mmap)" : "mapped");
    printf("Depth filled (untimed) by %s; pp: one batch of %d tokens after it, tg: %d single steps.\n"
           "t/s from wall-clock time; CPU t/s from the process's CPU time (all threads), which on a\n"
           "shared machine leaves out the time spent waiting for a core.  \"vs f16\": speed / f16's.\n",
           o->run.fill == BENCH_FILL_MODEL ? "the model's prefill" : "synthetic K/V rows", o->run.n_prompt,
           o->run.n_gen);
    if (!(o->bandwidth_gbs > 0)) {
        printf("Read bandwidth not measured before the runs (no buffer or threads for it); read again after each\n"
               "depth's runs: a depth without a reading has no bound and no %% of it.\n");
        return;
    }
    printf("Read bandwidth %.1f GB/s before the runs (%d thread%s, best of 5 passes over 256 MiB), read again after\n"
           "each depth's runs; \"bound\" = the higher of a depth's two readings / the bytes a generation step reads\n"
           "(\"MB/tok\": weights + the cache at that depth, exact rows included), \"%% bound\" = median tg t/s /\n"
           "bound, \"best\" = the fastest run's tg t/s.\n",
           o->bandwidth_gbs, n_threads, n_threads == 1 ? "" : "s");
}

/* The bandwidth bound of a configuration's generation steps. */
typedef struct row_bound {
    double bytes;       /* per generated token: weights + cache */
    double tps;         /* bandwidth / bytes                     */
    double fraction;    /* median tg t/s / tps                   */
    double best_tps;    /* the fastest run's tg t/s              */
} row_bound;

static row_bound bound_of(const bench_opts *o, const bench_config *c, double gbs, double tg_median_s) {
    row_bound b = { c->t[0].tg_weight_bytes + c->t[0].tg_cache_bytes, 0, 0, 0 };
    b.tps = bench_bound_tps(gbs, b.bytes);
    b.fraction = b.tps > 0 ? per_second(o->run.n_gen, tg_median_s) / b.tps : 0.0;
    for (int r = 0; r < o->reps; r++) b.best_tps = CLI_MAX(b.best_tps, per_second(o->run.n_gen, c->t[r].tg_s));
    return b;
}

/* "1.23" = this configuration's speed / f16's (time of f16 / this). */
static void ratio(char *buf, size_t cap, double ref_s, double s) {
    if (ref_s > 0 && s > 0) snprintf(buf, cap, "%.2f", ref_s / s);
    else snprintf(buf, cap, "-");
}

/* A depth's bandwidth readings, before and after its runs, and the one
 * its bound uses (bench_bound_bandwidth). */
typedef struct depth_bandwidth {
    double before_gbs, after_gbs, gbs;
} depth_bandwidth;

static void print_table(const bench_opts *o, bench_config *cfg, int n_cfg, int depth, const depth_bandwidth *bw) {
    static const size_t fields[4] = { offsetof(bench_times, pp_s), offsetof(bench_times, tg_s),
                                      offsetof(bench_times, pp_cpu_s), offsetof(bench_times, tg_cpu_s) };
    const int tokens[4] = { o->run.n_prompt, o->run.n_gen, o->run.n_prompt, o->run.n_gen };
    int f16 = -1;
    for (int c = 0; c < n_cfg && f16 < 0; c++)
        if (cfg[c].cache.type_k == KVQ_TYPE_F16 && cfg[c].cache.type_v == KVQ_TYPE_F16) f16 = c;
    double ref[4] = { 0, 0, 0, 0 };
    for (int f = 0; f < 4 && f16 >= 0; f++) ref[f] = median_of(&cfg[f16], o->reps, fields[f]);
    printf("\n### depth %d\n\n| cache K/V | rotation | pp%d t/s | tg%d t/s | pp CPU t/s | tg CPU t/s "
           "| pp vs f16 | tg vs f16 | tg CPU vs f16 | tg best | MB/tok | tg bound | %% bound |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
           depth, o->run.n_prompt, o->run.n_gen);
    for (int c = 0; c < n_cfg; c++) {
        double med[4];
        for (int f = 0; f < 4; f++) med[f] = median_of(&cfg[c], o->reps, fields[f]);
        char rot[48], pr[16], tr[16], tcr[16];
        plan_name(&cfg[c], rot, sizeof rot);
        ratio(pr, sizeof pr, ref[0], med[0]);
        ratio(tr, sizeof tr, ref[1], med[1]);
        ratio(tcr, sizeof tcr, ref[3], med[3]);
        printf("| %s/%s | %s |", kvq_type_name(cfg[c].cache.type_k), kvq_type_name(cfg[c].cache.type_v), rot);
        for (int f = 0; f < 4; f++)
            if (tokens[f]) printf(" %.1f |", per_second(tokens[f], med[f]));
            else printf(" - |");   /* -n 0: no generation was timed */
        const row_bound b = bound_of(o, &cfg[c], bw->gbs, med[1]);
        if (!o->run.n_gen) printf(" %s | - | - | - | - | - | - |\n", pr);
        else if (b.tps > 0)
            printf(" %s | %s | %s | %.1f | %.1f | %.1f | %.0f%% |\n", pr, tr, tcr, b.best_tps, b.bytes / 1e6, b.tps,
                   100.0 * b.fraction);
        else   /* the bandwidth could not be measured: no bound */
            printf(" %s | %s | %s | %.1f | %.1f | - | - |\n", pr, tr, tcr, b.best_tps, b.bytes / 1e6);
    }
    if (bw->before_gbs > 0 && bw->after_gbs > 0)
        printf("\nRead bandwidth before / after the runs at depth %d: %.1f / %.1f GB/s (the bound: %.1f).\n", depth,
               bw->before_gbs, bw->after_gbs, bw->gbs);
    else if (bw->gbs > 0)
        printf("\nRead bandwidth at depth %d: one of the readings before and after the runs not measured (no buffer "
               "or threads for it); the bound: %.1f GB/s.\n", depth, bw->gbs);
}

/* One JSON object per configuration at this depth, one per line. */
static void print_json(const bench_opts *o, bench_config *cfg, int n_cfg, int depth, int n_threads,
                       const depth_bandwidth *bw) {
    const char *base = strrchr(o->model, '/');
    for (int c = 0; c < n_cfg; c++) {
        double med[4];
        static const size_t fields[4] = { offsetof(bench_times, pp_s), offsetof(bench_times, tg_s),
                                          offsetof(bench_times, pp_cpu_s), offsetof(bench_times, tg_cpu_s) };
        for (int f = 0; f < 4; f++) med[f] = median_of(&cfg[c], o->reps, fields[f]);
        const row_bound b = bound_of(o, &cfg[c], bw->gbs, med[1]);
        char rot[48], tg[6][32];
        plan_name(&cfg[c], rot, sizeof rot);
        /* -n 0 times no generation: its fields are null, not a number */
        const double tg_v[6] = { per_second(o->run.n_gen, med[1]), per_second(o->run.n_gen, med[3]), b.best_tps,
                                 cfg[c].t[0].tg_cache_bytes, b.bytes, b.tps };
        for (int f = 0; f < 6; f++)
            if (o->run.n_gen) snprintf(tg[f], sizeof tg[f], f == 3 || f == 4 ? "%.0f" : f == 5 ? "%.4f" : "%.3f", tg_v[f]);
            else snprintf(tg[f], sizeof tg[f], "null");
        char frac[32];
        if (o->run.n_gen && b.tps > 0) snprintf(frac, sizeof frac, "%.4f", b.fraction);
        else snprintf(frac, sizeof frac, "null");
        if (!(b.tps > 0)) snprintf(tg[5], sizeof tg[5], "null");   /* no bandwidth measured: no bound */
        printf("{\"model\": \"%s\", \"threads\": %d, \"act\": \"%s\", \"use_mmap\": %s, \"cache_k\": \"%s\", \"cache_v\": \"%s\", \"rotation\": \"%s\", "
               "\"depth\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"reps\": %d, \"pp_tps\": %.3f, \"tg_tps\": %s, "
               "\"pp_cpu_tps\": %.3f, \"tg_cpu_tps\": %s, \"tg_best_tps\": %s, \"bandwidth_gbs\": %.3f, "
               "\"bandwidth_before_gbs\": %.3f, \"bandwidth_after_gbs\": %.3f, "
               "\"tg_weight_bytes\": %.0f, \"tg_cache_bytes\": %s, \"tg_bytes_per_token\": %s, "
               "\"tg_bound_tps\": %s, \"tg_bound_fraction\": %s}\n",
               base ? base + 1 : o->model, n_threads, cli_act_name(o->run.act), o->no_mmap ? "false" : "true",
               kvq_type_name(cfg[c].cache.type_k),
               kvq_type_name(cfg[c].cache.type_v), rot, depth, o->run.n_prompt, o->run.n_gen, o->reps,
               per_second(o->run.n_prompt, med[0]), tg[0], per_second(o->run.n_prompt, med[2]), tg[1], tg[2],
               bw->gbs, bw->before_gbs, bw->after_gbs, cfg[c].t[0].tg_weight_bytes, tg[3], tg[4], tg[5], frac);
    }
}

/* The cost of rotating: tg time of each rotated run over its unrotated
 * twin's (their steps interleaved), wall clock and process CPU time. */
static void print_rotation_cost(const bench_opts *o, const bench_config *cfg, int n_cfg, int depth) {
    bool any = false;
    for (int c = 0; c < n_cfg; c++) {
        if (cfg[c].off_twin < 0 || !o->run.n_gen) continue;
        if (!any) printf("\nRotation cost at depth %d (tg time rotated / unrotated - 1, steps of the two "
                         "interleaved, median of %d runs; CPU time, then wall clock; target <= 2%%):",
                         depth, o->reps);
        const bench_config *off = &cfg[cfg[c].off_twin];
        char name[32];
        config_name(&cfg[c], name, sizeof name);
        printf("%s %s %+.1f%% (wall %+.1f%%)", any ? "," : "", name,
               100.0 * paired_cost(&cfg[c], off, o->reps, offsetof(bench_times, tg_cpu_s)),
               100.0 * paired_cost(&cfg[c], off, o->reps, offsetof(bench_times, tg_s)));
        any = true;
    }
    if (any) printf("\n");
}

/* ---------------------------------------------------------------- run */

/* Run r of configuration c; a rotated configuration runs step by step
 * against its unrotated twin (bench_run_pair). */
static kvq_status run_config(const bench_opts *o, const kvq_model *m, bench_config *cfg, int c, int depth, int r,
                             kvq_error *err) {
    bench_config *a = &cfg[c];
    kvq_rot_plan *plan_a = r == 0 ? &a->plan : NULL;
    if (a->off_twin < 0) return bench_run_once(m, &a->cache, &o->run, depth, &a->t[r], plan_a, err);
    bench_config *b = &cfg[a->off_twin];
    return bench_run_pair(m, &a->cache, &b->cache, &o->run, depth, &a->t[r], &b->t[r], plan_a,
                          r == 0 ? &b->plan : NULL, err);
}

/* Each depth's runs, then the bandwidth read again: that reading is the
 * depth's "after" and the next depth's "before". */
static int bench(const bench_opts *o, const kvq_model *m, bench_config *cfg, int n_cfg, int n_threads) {
    kvq_error err = { 0 };
    double before_gbs = o->bandwidth_gbs;
    for (int d = 0; d < o->n_depths; d++) {
        for (int r = 0; r < o->reps; r++)
            for (int c = 0; c < n_cfg; c++) {
                if (cfg[c].is_twin) continue;   /* measured with its rotated sibling */
                if (run_config(o, m, cfg, c, o->depths[d], r, &err)) return cli_error(CMD, "%s", err.msg);
            }
        depth_bandwidth bw = { before_gbs, bench_read_bandwidth(n_threads), 0 };
        bw.gbs = bench_bound_bandwidth(bw.before_gbs, bw.after_gbs);
        if (o->json) {
            print_json(o, cfg, n_cfg, o->depths[d], n_threads, &bw);
        } else {
            print_table(o, cfg, n_cfg, o->depths[d], &bw);
            print_rotation_cost(o, cfg, n_cfg, o->depths[d]);
        }
        fflush(stdout);
        if (bench_bandwidth_moved(bw.before_gbs, bw.after_gbs))
            fprintf(stderr, "kvq %s: warning: at depth %d the read bandwidth moved from %.1f GB/s before the runs to "
                    "%.1f after: the memory bus was shared, and each %% of bound (on the higher reading) may be low "
                    "by as much\n", CMD, o->depths[d], bw.before_gbs, bw.after_gbs);
        before_gbs = bw.after_gbs;
    }
    return 0;
}

/* What kvq_ctx_create does with 0 threads. */
static int online_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 1024 ? (int)n : 1;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = { .run = { .n_prompt = 128, .n_gen = 64, .fill_batch = DEFAULT_FILL_BATCH }, .reps = 5,
                     .n_depths = 1 };
    cache_flags_init(&o.cache);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        int r = parse_one(&o, argc, argv, &i);
        if (r < 0) return 1;
        if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq bench --help)", argv[i]);
    }
    if (o.types && o.kv_types_given) return cli_error(CMD, "give either --types or -ctk/-ctv, not both");
    if (!o.types && !o.kv_types_given) o.types = "default";
    int max_depth = 0;
    for (int d = 0; d < o.n_depths; d++) max_depth = CLI_MAX(max_depth, o.depths[d]);
    o.run.n_ctx = max_depth + o.run.n_prompt + o.run.n_gen;
    if (!cache_flags_resolve(CMD, &o.cache, o.run.n_ctx)) return 1;
    static bench_config cfg[MAX_CONFIGS];
    memset(cfg, 0, sizeof cfg);
    const int n_cfg = make_configs(&o, cfg);
    if (!n_cfg) return 1;
    kvq_model *m = cli_load_model(CMD, o.model, o.no_mmap);
    if (!m) return 1;
    kvq_calib *cal = NULL;   /* --calib: every configuration's cache copies it */
    kvq_error cerr = { 0 };
    if (o.cache.calib_path && kvq_calib_load(o.cache.calib_path, m, &cal, &cerr) != KVQ_OK) {
        kvq_model_free(m);
        return cli_error(CMD, "--calib: %s", cerr.msg);
    }
    for (int i = 0; i < n_cfg; i++) cfg[i].cache.calib = cal;
    const kvq_model_info *in = kvq_model_get_info(m);
    if (o.run.n_ctx > in->n_ctx_train)
        fprintf(stderr, "kvq %s: warning: context %d exceeds the model's trained context %d: RoPE extrapolates "
                "past it (the speed is the same; the outputs are not meaningful)\n", CMD, o.run.n_ctx, in->n_ctx_train);
    const int n_threads = o.run.n_threads ? o.run.n_threads : online_threads();
    o.bandwidth_gbs = bench_read_bandwidth(n_threads);
    if (!o.json) print_header(&o, in, n_threads);
    const int rc = bench(&o, m, cfg, n_cfg, n_threads);
    kvq_calib_free(cal);
    kvq_model_free(m);
    return rc;
}
