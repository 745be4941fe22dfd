/* cli.c - argument parsing helpers shared by every kvq subcommand. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kvq %s: error: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 1;
}

bool cli_parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double lo, double hi, double *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool cli_flag_long(const char *cmd, const char *flag, const char *v, long lo, long hi, long *out) {
    if (cli_parse_long(v, lo, hi, out)) return true;
    cli_error(cmd, "%s: '%s' is not an integer in %ld..%ld (see kvq %s --help)", flag, v, lo, hi, cmd);
    return false;
}

bool cli_flag_double(const char *cmd, const char *flag, const char *v, double lo, double hi, double *out) {
    if (cli_parse_double(v, lo, hi, out)) return true;
    cli_error(cmd, "%s: '%s' is not a number in %g..%g (see kvq %s --help)", flag, v, lo, hi, cmd);
    return false;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "option %s needs a value (see kvq %s --help)", argv[*i], cmd);
        return NULL;
    }
    return argv[++*i];
}

bool cli_parse_type(const char *cmd, const char *s, bool cache_only, kvq_type *out) {
    kvq_type t = kvq_type_from_name(s);
    if (t == KVQ_TYPE_COUNT || (cache_only && !kvq_type_get(t)->is_cache_type)) {
        char list[1024] = "";
        for (int k = 0; k < KVQ_TYPE_COUNT; k++) {
            const kvq_type_traits *tr = kvq_type_get((kvq_type)k);
            if (!tr || (cache_only && !tr->is_cache_type)) continue;
            strncat(list, " ", sizeof list - strlen(list) - 1);
            strncat(list, tr->name, sizeof list - strlen(list) - 1);
        }
        cli_error(cmd, "unknown type '%s' (known:%s)", s, list);
        return false;
    }
    *out = t;
    return true;
}
