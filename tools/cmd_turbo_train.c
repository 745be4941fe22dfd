/* cmd_turbo_train.c - `kvq turbo-train`: train the trellis codebooks of
 * turbo2/3/4_tcq (generalised Lloyd, src/format/turbo_tcq_train.c) and print
 * them as the C source of src/format/turbo_tcq_tables.c.  The committed table
 * is exactly this command's output with the default options. */
#include "cli.h"
#include "kvq_eval.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "turbo-train"

typedef struct train_opts { long vectors, iters, seed; const char *out; } train_opts;
static const train_opts g_defaults = { 4096, 60, 1, NULL };

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq " CMD " [options]\n\n"
        "Train the turbo2/3/4_tcq trellis codebooks and print src/format/turbo_tcq_tables.c.\n\n"
        "  -n, --vectors N   training vectors of 128 Gaussian values (default %ld)\n"
        "  -i, --iters N     Lloyd rounds (default %ld)\n"
        "  -s, --seed N      data seed, splitmix64 (default %ld)\n"
        "  -o, --output F    write the C source to F (default stdout)\n"
        "  -h, --help        this text\n",
        g_defaults.vectors, g_defaults.iters, g_defaults.seed);
}

static int parse(int argc, char **argv, train_opts *o, bool *help) {
    *o = g_defaults;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long *dst = NULL, lo = 0, hi = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { *help = true; return 0; }
        if (!strcmp(a, "-n") || !strcmp(a, "--vectors")) dst = &o->vectors, lo = 1, hi = 10000000;
        else if (!strcmp(a, "-i") || !strcmp(a, "--iters")) dst = &o->iters, lo = 0, hi = 10000;
        else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) dst = &o->seed, lo = 0, hi = 0x7fffffffL;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(o->out = cli_value(CMD, argc, argv, &i))) return 1;
            continue;
        } else return cli_error(CMD, "unknown option '%s' (see kvq %s --help)", a, CMD);
        if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
        if (!cli_parse_long(v, lo, hi, dst))
            return cli_error(CMD, "%s: '%s' is not an integer in %ld..%ld (see kvq %s --help)", a, v, lo, hi, CMD);
    }
    return 0;
}

static void print_table(FILE *f, int k, const float *c, const double *mse, const train_opts *o) {
    int n = 1 << (KVQ_TURBO_TCQ_CONTEXT + k);
    fprintf(f, "\n/* k = %d: %d states; mean squared error per unit-variance value %.6f after\n"
               " * %ld rounds (start %.6f; scalar Lloyd-Max at %d bits: %.6f). */\n",
            k, n, mse[o->iters], o->iters, mse[0], k, kvq_turbo_lloyd_mse(k));
    fprintf(f, "const float kvq_turbo_tcq_table%d[1 << %d] = {\n", k, KVQ_TURBO_TCQ_CONTEXT + k);
    for (int s = 0; s < n; s++)
        fprintf(f, "%s%.9g,%s", s % 8 ? " " : "    ", c[s], s % 8 == 7 ? "\n" : "");
    fprintf(f, "};\nconst double kvq_turbo_tcq_mse%d = %.6f;\n", k, mse[o->iters]);
}

int cmd_turbo_train(int argc, char **argv) {
    train_opts o;
    bool help = false;
    if (parse(argc, argv, &o, &help)) return 1;
    if (help) { usage(stdout); return 0; }
    FILE *f = o.out ? fopen(o.out, "w") : stdout;
    if (!f) return cli_error(CMD, "cannot write '%s'", o.out);
    fprintf(f, "/* turbo_tcq_tables.c - trellis codebooks of turbo2/3/4_tcq (unit variance,\n"
               " * indexed by state).  GENERATED, do not edit: reproduce with\n"
               " *   make && build/kvq turbo-train -n %ld -i %ld -s %ld > src/format/turbo_tcq_tables.c\n"
               " * Procedure (src/format/turbo_tcq_train.c): %ld vectors of 128 Gaussian values at\n"
               " * norm sqrt(128) from splitmix64(seed %ld) + Box-Muller; random N(0,1)\n"
               " * start; %ld generalised Lloyd rounds (Viterbi-encode all, move each state\n"
               " * to the mean of its targets). */\n#include \"turbo_internal.h\"\n",
            o.vectors, o.iters, o.seed, o.vectors, o.seed, o.iters);
    int status = 0;
    for (int k = 2; k <= 4 && !status; k++) {
        float *c = malloc(sizeof(float) << (KVQ_TURBO_TCQ_CONTEXT + k));
        double *mse = malloc(sizeof(double) * (size_t)(o.iters + 1));
        kvq_error err = { 0 };
        if (!c || !mse) status = cli_error(CMD, "out of memory");
        else if (kvq_turbo_tcq_train(k, (int)o.vectors, (int)o.iters, (uint64_t)o.seed, c, mse, &err))
            status = cli_error(CMD, "%s", err.msg);
        else {
            for (long i = 0; i <= o.iters; i++)
                fprintf(stderr, "k=%d round %ld: mse %.6f\n", k, i, mse[i]);
            print_table(f, k, c, mse, &o);
        }
        free(c), free(mse);
    }
    if (o.out && fclose(f) && !status) status = cli_error(CMD, "error writing '%s'", o.out);
    return status;
}
