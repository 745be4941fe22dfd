/* cli.h - shared pieces of the kvq command-line tool: the command table
 * entry points and strict argument parsing helpers.  Every parse failure
 * prints one clear error line plus a hint and makes the command return 1. */
#ifndef KVQ_CLI_H
#define KVQ_CLI_H

#include "kvq.h"

#include <stdbool.h>

/* The tools' own small helpers (libkvq's are internal). */
#define CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CLI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CLI_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* One function per subcommand; argv[0] is the subcommand name. */
int cmd_quant_test(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_kld(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_drift(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_turbo_train(int argc, char **argv);
int cmd_turbo_bench(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

/* Print "kvq CMD: error: ..." to stderr; returns 1 (the exit status). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict numeric parsing: the whole string must be a number in [lo, hi]. */
bool cli_parse_long(const char *s, long lo, long hi, long *out);
bool cli_parse_double(const char *s, double lo, double hi, double *out);

/* A flag's integer value in [lo, hi]; otherwise one error line with the
 * range and a hint ("see kvq CMD --help") and false. */
bool cli_flag_long(const char *cmd, const char *flag, const char *v, long lo, long hi, long *out);
bool cli_flag_double(const char *cmd, const char *flag, const char *v, double lo, double hi, double *out);

/* Fetch the value of flag argv[*i] (advancing *i); NULL + error if absent. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* Parse a type name; prints the list of known names on failure. */
bool cli_parse_type(const char *cmd, const char *s, bool cache_only, kvq_type *out);

#endif
