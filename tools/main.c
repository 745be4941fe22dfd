/* main.c - the kvq command-line tool: dispatch to one subcommand. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command g_commands[] = {
    { "quant-test", cmd_quant_test, "round-trip error of every cache type (Gaussian, outliers, rotation)" },
    { "info",       cmd_info,       "model architecture, shapes, types, KV bytes per token per cache type" },
    { "run",        cmd_run,        "generate text from a prompt" },
    { "perplexity", cmd_perplexity, "perplexity of a text (llama.cpp's protocol)" },
    { "kld",        cmd_kld,        "KL divergence against a reference (llama.cpp base files)" },
    { "bench",      cmd_bench,      "prompt and generation tokens/s" },
    { "drift",      cmd_drift,      "KLD per generated position and first divergence in greedy generation" },
    { "sweep",      cmd_sweep,      "KLD, size and speed of every cache configuration: table, ladder, plot" },
    { "tokenize",   cmd_tokenize,   "token ids of a text under a model's vocabulary (as llama-tokenize)" },
    { "turbo-bench", cmd_turbo_bench, "NMSE and speed of the TurboQuant types on Gaussian vectors" },
    { "turbo-train", cmd_turbo_train, "train the turbo*_tcq trellis codebooks (prints src/format/turbo_tcq_tables.c)" },
    { "plan",       cmd_plan,       "per-layer K/V types within a byte budget with the least predicted KLD" },
    { "synth",      cmd_synth,      "write a random-weight GGUF of a real model shape (for benchmarks)" },
    { "calibrate",  cmd_calibrate,  "fit the calibrated cache types' transforms and bits on a model's own K/V" },
};

static void usage(FILE *f) {
    fprintf(f, "kvq %s - quantised KV caches for language models\n\nusage: kvq COMMAND [options]\n\n", KVQ_VERSION);
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(f, "  %-12s %s\n", g_commands[i].name, g_commands[i].summary);
    fprintf(f, "\n'kvq COMMAND --help' describes each command's options.\n");
}

/* Every command's results go to stdout: a write that failed (a full disk,
 * /dev/full, a closed pipe's EIO) must fail the command, or a script
 * reading the output gets a truncated table with exit status 0.  The
 * error flag of stdout is sticky, so one check at exit sees any failed
 * write; a command that already failed keeps its own single error line. */
static int finish(int rc) {
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (rc == 0)
            fprintf(stderr, "kvq: error: writing standard output: %s\n", errno ? strerror(errno) : "write error");
        return rc ? rc : 1;
    }
    return rc;
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 1; }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("kvq %s (sources %s)\n", KVQ_VERSION, kvq_source_id()); return 0; }
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (!strcmp(argv[1], g_commands[i].name)) return g_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "kvq: error: unknown command '%s' (try 'kvq --help')\n", argv[1]);
    return 1;
}

int main(int argc, char **argv) { return finish(dispatch(argc, argv)); }
