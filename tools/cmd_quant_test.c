/*
 * cmd_quant_test.c - `kvq quant-test`: round-trip error of every cache type
 * on synthetic K/V-like rows, without and with Hadamard rotation.
 *
 * Two row distributions: unit Gaussian, and unit Gaussian with a few fixed
 * outlier channels scaled x10 (what real K caches look like).  Each row is
 * optionally rotated (block = kvq_rot_block_for(dim, 8)), quantised,
 * dequantised and rotated back; the error is measured against the
 * original row.  NMSE = sum (x' - x)^2 / sum x^2 over all rows.  For
 * comparison the table shows bits per value and the Shannon bound for a
 * Gaussian source at that rate, D(R) = 2^(-2R), which no scalar quantiser
 * can beat.
 */
#include "cli.h"
#include "kvq_eval.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "quant-test";

enum { MAX_DIM = 16384, MAX_ROWS = 100000, DEFAULT_ROWS = 256, OUTLIER_SCALE = 10 };
/* dim * rows values per distribution: two f32 copies of 64 M values are
 * 512 MiB, the most a round-trip table needs (each limit alone allowed
 * 1.6 G values, 13 GiB). */
#define MAX_VALUES (64L << 20)

typedef struct qt_options {
    int type;            /* a kvq_type, or -1 for every cache type */
    int dim, rows;
    uint64_t seed;
    bool outliers_only;
    bool json;
} qt_options;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq quant-test [--type T] [--dim D] [--outliers] [--rows N] [--seed S] [--json]\n"
        "\n"
        "Round-trip error (NMSE, max abs error) of every cache type on unit-Gaussian\n"
        "rows and on rows with a few outlier channels (x%d), each without and with\n"
        "Hadamard rotation (block = largest power of two >= 8 dividing D, at most 512).\n"
        "KVarN types take the rows as tokens: each whole group of 128 rows is a K tile\n"
        "per 64/128-wide slice; KVarN and TurboQuant always rotate as their format says\n"
        "(both columns alike).\n"
        "\n"
        "  --type T     only this cache type (default: all)\n"
        "  --dim D      values per row, the head size (default 128, 1..%d)\n"
        "  --outliers   only the rows with outlier channels (default: both kinds)\n"
        "  --rows N     rows per distribution (default %d, 1..%d; D x N at most 64 M)\n"
        "  --seed S     random seed (default 1)\n"
        "  --json       JSON instead of the table\n"
        "  -h, --help   this text\n",
        OUTLIER_SCALE, MAX_DIM, DEFAULT_ROWS, MAX_ROWS);
}

/* 0 = parsed, 1 = error (already printed), 2 = help printed. */
static int parse_args(int argc, char **argv, qt_options *o) {
    *o = (qt_options){ .type = -1, .dim = 128, .rows = DEFAULT_ROWS, .seed = 1 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 2; }
        else if (!strcmp(a, "--outliers")) o->outliers_only = true;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--type")) {
            kvq_type t;
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_type(CMD, v, true, &t)) return 1;
            o->type = (int)t;
        } else if (!strcmp(a, "--dim")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
            if (!cli_parse_long(v, 1, MAX_DIM, &n))
                return cli_error(CMD, "--dim '%s' is not an integer in 1..%d (see kvq quant-test --help)", v, MAX_DIM);
            o->dim = (int)n;
        } else if (!strcmp(a, "--rows")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
            if (!cli_parse_long(v, 1, MAX_ROWS, &n))
                return cli_error(CMD, "--rows '%s' is not an integer in 1..%d (see kvq quant-test --help)", v, MAX_ROWS);
            o->rows = (int)n;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
            if (!cli_parse_long(v, 0, LONG_MAX, &n))
                return cli_error(CMD, "--seed '%s' is not a non-negative integer (see kvq quant-test --help)", v);
            o->seed = (uint64_t)n;
        } else {
            return cli_error(CMD, "unknown option '%s' (see kvq quant-test --help)", a);
        }
    }
    if ((long)o->dim * o->rows > MAX_VALUES)
        return cli_error(CMD, "--dim %d x --rows %d is %ld values, more than the %ld M allowed (see kvq quant-test --help)",
                         o->dim, o->rows, (long)o->dim * o->rows, MAX_VALUES >> 20);
    return 0;
}

/* ---- synthetic rows ---- */

typedef struct rng { uint64_t s; } rng;
static uint64_t rng_u64(rng *r) { /* splitmix64 */
    uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
static double rng_uniform(rng *r) { return (double)((rng_u64(r) >> 11) + 1) * 0x1p-53; } /* (0,1] */
static double rng_gauss(rng *r) { /* Box-Muller, one value per call: simple, fast enough */
    return sqrt(-2.0 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r));
}

static void fill_gaussian(float *x, size_t n, rng *r) {
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_gauss(r);
}

/* A few distinct channels (dim/32, at least one), the same in every row
 * as in real K caches, are scaled up; which ones is drawn from the seed. */
static int outlier_count(int dim) { return dim / 32 > 1 ? dim / 32 : 1; }

static void pick_outlier_channels(int dim, rng *r, int *chosen) {
    for (int k = 0; k < outlier_count(dim); k++) {
        bool fresh;
        do {
            chosen[k] = (int)(rng_u64(r) % (uint64_t)dim);
            fresh = true;
            for (int j = 0; j < k; j++) fresh = fresh && chosen[j] != chosen[k];
        } while (!fresh);
    }
}

static void scale_outlier_channels(float *x, int rows, int dim, const int *chosen) {
    for (int k = 0; k < outlier_count(dim); k++)
        for (int row = 0; row < rows; row++) x[(size_t)row * dim + chosen[k]] *= OUTLIER_SCALE;
}

/* ---- measurement ---- */

typedef struct qt_error { double nmse, max_abs; } qt_error;

/* Sums over every measured value: squared error, squared reference, the
 * largest absolute error. */
typedef struct qt_acc { double err2, ref2, max_abs; } qt_acc;

static void add_row(qt_acc *a, const float *ref, const float *got, int n) {
    for (int i = 0; i < n; i++) {
        const double e = (double)got[i] - ref[i];
        a->err2 += e * e;
        a->ref2 += (double)ref[i] * ref[i];
        if (fabs(e) > a->max_abs) a->max_abs = fabs(e);
    }
}

/* NMSE (error energy over signal energy) and the largest error. */
static qt_error acc_error(const qt_acc *a) {
    return (qt_error){ a->ref2 > 0 ? a->err2 / a->ref2 : 0.0, a->max_abs };
}

/* Round-trip every row through type t the way a cache stores one KV
 * head's rows (kvq_codec, kvq_eval.h): row types alone, rotated with
 * `block` when > 0; TurboQuant with its own rotation; the calibrated
 * types with a code fitted (plain squared error) on `train`, other rows
 * of the same distribution.  KVarN (tile types): the rows are tokens and
 * every complete group of 128 is one tile per slice (64 wide for dim <=
 * 64, else 128); rows after the last whole tile are not measured (a cache
 * keeps them exact).  The formats with their own rotation have no
 * unrotated variant.  NAN when the type cannot code these rows. */
enum { TRAIN_ROWS_PER_VALUE = 64 };

typedef struct qt_train { const float *rows; int n; } qt_train;

static qt_error round_trip(kvq_type t, const float *x, int rows, int dim, int block, qt_train train, float *decoded) {
    const kvq_codec_opts co = { block, train.rows, train.n };
    kvq_codec *c = NULL;
    if (kvq_codec_create(t, dim, &co, &c, NULL) != KVQ_OK) return (qt_error){ NAN, NAN };
    const int group = kvq_codec_group(c), width = dim <= 64 ? 64 : 128, n_slices = (dim + width - 1) / width;
    qt_acc acc = { 0, 0, 0 };
    for (int g = 0; (g + 1) * group <= rows; g++) {
        const float *x0 = x + (size_t)g * group * dim;
        if (kvq_codec_round_trip(c, x0, group, decoded, NULL) != KVQ_OK) {
            kvq_codec_free(c);
            return (qt_error){ NAN, NAN };
        }
        if (group == 1) {
            add_row(&acc, x0, decoded, dim);
            continue;
        }
        for (int sl = 0; sl < n_slices; sl++) {   /* slice by slice, as the tiles are coded */
            const int c0 = sl * width, nc = CLI_MIN(width, dim - c0);
            for (int r = 0; r < group; r++) add_row(&acc, x0 + (size_t)r * dim + c0, decoded + (size_t)r * dim + c0, nc);
        }
    }
    kvq_codec_free(c);
    return acc_error(&acc);
}

/* One table row: a type on one distribution, plain and rotated. */
typedef struct qt_pair { qt_error plain, rotated; } qt_pair;

typedef struct qt_result {
    kvq_type type;
    double bpv, shannon;
    qt_pair gauss, outl;
} qt_result;

/* ---- output ---- */

enum { NUM_W = 10 };

static void cell_num(char *buf, size_t cap, double v, bool present) {
    if (present) snprintf(buf, cap, "%.3e", v);
    else snprintf(buf, cap, "-");
}

static void print_header(const qt_options *o, int block) {
    printf("quant-test: dim %d, %d rows per distribution, seed %llu, simd %s\n", o->dim, o->rows,
           (unsigned long long)o->seed, kvq_simd_level());
    if (block) printf("rotation: hadamard, block %d (block-diagonal over the row)\n", block);
    else printf("rotation: none (no power-of-two block >= 8 divides dim %d)\n", o->dim);
    printf("outliers: %d channel(s) x%d; nmse = sum err^2 / sum x^2; shannon = 2^(-2 bpv)\n\n",
           outlier_count(o->dim), OUTLIER_SCALE);
    printf("| %-6s | %5s | %-*s ", "type", "bpv", NUM_W, "shannon");
    if (!o->outliers_only)
        printf("| %-*s | %-*s | %-*s | %-*s ", NUM_W, "gauss nmse", NUM_W, "+rot nmse",
               NUM_W, "gauss max", NUM_W, "+rot max");
    printf("| %-*s | %-*s | %-*s | %-*s |\n", NUM_W, "outl nmse", NUM_W, "+rot nmse",
           NUM_W, "outl max", NUM_W, "+rot max");
    printf("|--------|-------|------------");
    for (int k = 0; k < (o->outliers_only ? 4 : 8); k++) printf("|------------");
    printf("|\n");
}

static void print_pair(const qt_pair *p, bool rotated) {
    char a[32], b[32], c[32], d[32];
    cell_num(a, sizeof a, p->plain.nmse, true);
    cell_num(b, sizeof b, p->rotated.nmse, rotated);
    cell_num(c, sizeof c, p->plain.max_abs, true);
    cell_num(d, sizeof d, p->rotated.max_abs, rotated);
    printf("| %-*s | %-*s | %-*s | %-*s ", NUM_W, a, NUM_W, b, NUM_W, c, NUM_W, d);
}

static void print_row(const qt_options *o, const qt_result *r, int block) {
    char bound[32];
    cell_num(bound, sizeof bound, r->shannon, true);
    printf("| %-6s | %5.2f | %-*s ", kvq_type_name(r->type), r->bpv, NUM_W, bound);
    if (!o->outliers_only) print_pair(&r->gauss, block != 0);
    print_pair(&r->outl, block != 0);
    printf("|\n");
}

static void json_num(double v, bool present) {
    if (present) printf("%.6e", v);
    else printf("null");
}

static void json_pair(const char *name, const qt_pair *p, bool rotated) {
    printf("\"%s\": {\"nmse\": ", name);
    json_num(p->plain.nmse, true);
    printf(", \"max_abs\": ");
    json_num(p->plain.max_abs, true);
    printf(", \"nmse_rot\": ");
    json_num(p->rotated.nmse, rotated);
    printf(", \"max_abs_rot\": ");
    json_num(p->rotated.max_abs, rotated);
    printf("}");
}

static void print_json(const qt_options *o, const qt_result *res, int n, int block) {
    printf("{\"dim\": %d, \"rows\": %d, \"seed\": %llu, \"rot_block\": %d, \"outlier_channels\": %d, "
           "\"outlier_scale\": %d, \"types\": [\n", o->dim, o->rows, (unsigned long long)o->seed, block,
           outlier_count(o->dim), OUTLIER_SCALE);
    for (int i = 0; i < n; i++) {
        printf("  {\"type\": \"%s\", \"bpv\": %.4f, \"shannon\": %.6e, ", kvq_type_name(res[i].type),
               res[i].bpv, res[i].shannon);
        if (!o->outliers_only) { json_pair("gaussian", &res[i].gauss, block != 0); printf(", "); }
        json_pair("outliers", &res[i].outl, block != 0);
        printf("}%s\n", i + 1 < n ? "," : "");
    }
    printf("]}\n");
}

/* ---- the command ---- */

/* Rows a tile type codes together (a KVarN tile is 128 tokens). */
enum { TILE_ROWS = 128 };

static qt_pair measure(kvq_type t, const float *x, int rows, int dim, int block, qt_train train, float *decoded) {
    const kvq_type_traits *tr = kvq_type_get(t);
    if (tr->calib_rate || tr->layout == KVQ_LAYOUT_TILES || tr->format_rot == KVQ_FMT_ROT_TURBO) {
        const qt_error e = round_trip(t, x, rows, dim, 0, train, decoded);   /* both columns: the format's own */
        return (qt_pair){ e, e };
    }
    qt_pair p = { round_trip(t, x, rows, dim, 0, train, decoded), { 0, 0 } };
    if (block) p.rotated = round_trip(t, x, rows, dim, block, train, decoded);
    return p;
}

int cmd_quant_test(int argc, char **argv) {
    qt_options o;
    const int parsed = parse_args(argc, argv, &o);
    if (parsed) return parsed == 2 ? 0 : 1;

    const size_t n = (size_t)o.rows * (size_t)o.dim;
    float *gauss = malloc(n * sizeof(float)), *outl = malloc(n * sizeof(float));
    /* decoded rows: one tile's worth (the most a codec returns at once) */
    float *decoded = malloc((size_t)TILE_ROWS * o.dim * sizeof(float));
    qt_result *res = malloc(KVQ_TYPE_COUNT * sizeof *res);
    float *train_g = NULL, *train_o = NULL;
    int status = 0;
    if (!gauss || !outl || !decoded || !res) {
        status = cli_error(CMD, "out of memory for %d rows of %d values", o.rows, o.dim);
        goto done;
    }
    /* Both distributions share the Gaussian draw, so the only difference
     * between them is the outlier channels. */
    rng r = { o.seed };
    int chosen[MAX_DIM / 32 + 1];
    fill_gaussian(gauss, n, &r);
    memcpy(outl, gauss, n * sizeof(float));
    pick_outlier_channels(o.dim, &r, chosen);
    scale_outlier_channels(outl, o.rows, o.dim, chosen);
    /* training rows of the calibrated types: other draws, same channels */
    const int n_train = o.dim <= KVQ_MAX_HEAD_DIM ? TRAIN_ROWS_PER_VALUE * o.dim : 0;
    train_g = n_train ? malloc((size_t)n_train * o.dim * sizeof(float)) : NULL;
    train_o = n_train ? malloc((size_t)n_train * o.dim * sizeof(float)) : NULL;
    if (n_train && (!train_g || !train_o)) {
        status = cli_error(CMD, "out of memory for %d training rows", n_train);
        goto done;
    }
    if (n_train) {
        rng rt = { o.seed ^ UINT64_C(0x747261696e) };   /* "train" */
        fill_gaussian(train_g, (size_t)n_train * o.dim, &rt);
        memcpy(train_o, train_g, (size_t)n_train * o.dim * sizeof(float));
        scale_outlier_channels(train_o, n_train, o.dim, chosen);
    }

    const int block = kvq_rot_block_for(o.dim, 8);
    int count = 0;
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)t);
        if (!tr || !tr->is_cache_type || (o.type >= 0 && t != o.type)) continue;
        if (tr->calib_rate && !n_train) {
            fprintf(stderr, "kvq %s: note: %s skipped: heads above %d values are not calibrated\n", CMD, tr->name,
                    KVQ_MAX_HEAD_DIM);
            continue;
        }
        if (tr->layout == KVQ_LAYOUT_TILES && o.rows < TILE_ROWS) {
            fprintf(stderr, "kvq %s: note: %s skipped: it needs --rows >= %d (one %d-token tile)\n", CMD, tr->name,
                    TILE_ROWS, TILE_ROWS);
            continue;
        }
        qt_result *q = &res[count++];
        q->type = (kvq_type)t;
        q->bpv = kvq_type_bpv(q->type);
        q->shannon = exp2(-2.0 * q->bpv);
        if (!o.outliers_only) q->gauss = measure(q->type, gauss, o.rows, o.dim, block, (qt_train){ train_g, n_train }, decoded);
        q->outl = measure(q->type, outl, o.rows, o.dim, block, (qt_train){ train_o, n_train }, decoded);
    }
    if (o.json) print_json(&o, res, count, block);
    else {
        print_header(&o, block);
        for (int i = 0; i < count; i++) print_row(&o, &res[i], block);
    }
done:
    free(gauss); free(outl); free(decoded); free(res); free(train_g); free(train_o);
    return status;
}
