/* cmd_tokenize.c - `kvq tokenize`: print the token ids of a text under a
 * GGUF model's vocabulary, with llama-tokenize's flags and output, so the
 * two can be compared directly.  Reads only the vocabulary, not weights. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "tokenize";

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: kvq tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [options]\n\n"
            "  -m, --model FILE      GGUF model whose vocabulary is used\n"
            "  -p, --prompt TEXT     text to tokenize (\\n, \\t, \\xNN... are unescaped)\n"
            "  -f, --file FILE       read the text from a file (raw bytes)\n"
            "  --stdin               read the text from standard input (raw bytes)\n"
            "  --ids                 print only the ids, as [1, 2, 3]\n"
            "  --no-bos              do not add BOS (or EOS) tokens\n"
            "  --no-escape           take -p TEXT literally\n"
            "  --no-parse-special    treat special-token text like <s> as plain text\n"
            "  --show-count          print the number of tokens at the end\n"
            "  -h, --help            this help\n");
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* llama.cpp's prompt escapes: \n \r \t \' \" \\ \xNN; others stay as they are. */
static size_t unescape(char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\\' || i + 1 == len) { s[o++] = s[i]; continue; }
        char c = s[++i];
        int hi, lo;
        switch (c) {
        case 'n': s[o++] = '\n'; break;
        case 'r': s[o++] = '\r'; break;
        case 't': s[o++] = '\t'; break;
        case '\'': case '"': case '\\': s[o++] = c; break;
        case 'x':
            if (i + 2 < len && (hi = hex_value(s[i + 1])) >= 0 && (lo = hex_value(s[i + 2])) >= 0) {
                s[o++] = (char)(hi * 16 + lo);
                i += 2;
                break;
            }
            /* fall through */
        default: s[o++] = '\\'; s[o++] = c; break;
        }
    }
    return o;
}

typedef struct tokenize_opts {
    const char *model, *prompt, *file;
    bool from_stdin, ids_only, add_special, escape, parse_special, show_count;
} tokenize_opts;

/* 0: parsed; 1: error (reported); -1: help printed. */
static int parse_args(int argc, char **argv, tokenize_opts *o) {
    *o = (tokenize_opts){.add_special = true, .escape = true, .parse_special = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tokenize_usage(stdout); return -1; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!(o->model = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!(o->prompt = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!(o->file = cli_value(CMD, argc, argv, &i))) return 1; }
        else if (!strcmp(a, "--stdin")) o->from_stdin = true;
        else if (!strcmp(a, "--ids")) o->ids_only = true;
        else if (!strcmp(a, "--no-bos")) o->add_special = false;
        else if (!strcmp(a, "--no-escape")) o->escape = false;
        else if (!strcmp(a, "--no-parse-special")) o->parse_special = false;
        else if (!strcmp(a, "--show-count")) o->show_count = true;
        else if (!strcmp(a, "--log-disable")) { /* llama-tokenize compatibility: nothing is logged */ }
        else return cli_error(CMD, "unknown option '%s' (see kvq tokenize --help)", a);
    }
    if (!o->model) return cli_error(CMD, "no model given (-m MODEL)");
    if ((o->prompt != NULL) + (o->file != NULL) + o->from_stdin != 1)
        return cli_error(CMD, "give exactly one of -p TEXT, -f FILE, --stdin");
    return 0;
}

static char *load_text(const tokenize_opts *o, size_t *len) {
    if (o->prompt) {
        size_t n = strlen(o->prompt);
        char *s = malloc(n + 1);
        if (!s) { cli_error(CMD, "out of memory"); return NULL; }
        memcpy(s, o->prompt, n + 1);
        *len = o->escape ? unescape(s, n) : n;
        return s;
    }
    char *s = NULL;
    kvq_error err = { 0 };
    kvq_status st = o->file ? kvq_read_file(o->file, "text file", KVQ_TEXT_CAP, &s, len, &err)
                            : kvq_read_stream(stdin, "standard input", KVQ_TEXT_CAP, &s, len, &err);
    if (st != KVQ_OK) cli_error(CMD, "%s", err.msg);
    return s;
}

static void print_tokens(const kvq_tokenizer *tok, const int32_t *ids, int n, const tokenize_opts *o) {
    if (o->ids_only) {
        putchar('[');
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        printf("]\n");
    } else {
        char piece[256];
        for (int i = 0; i < n; i++) {
            int l = kvq_tokenizer_piece(tok, ids[i], piece, sizeof piece);
            printf("%6d -> '%.*s'\n", ids[i], l < 0 ? 0 : CLI_MIN(l, (int)sizeof piece), piece);
        }
    }
    if (o->show_count) printf("Total number of tokens: %d\n", n);
}

static int tokenize_run(const tokenize_opts *o, const char *text, size_t len) {
    kvq_error err;
    kvq_tokenizer *tok = NULL;
    if (kvq_tokenizer_open(o->model, &tok, &err) != KVQ_OK) return cli_error(CMD, "%s", err.msg);
    int n = kvq_tokenizer_encode(tok, text, len, o->add_special, o->parse_special, NULL, 0);
    int32_t *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    int rc = 0;
    if (!ids || kvq_tokenizer_encode(tok, text, len, o->add_special, o->parse_special, ids, n) != n)
        rc = cli_error(CMD, "out of memory");
    else
        print_tokens(tok, ids, n, o);
    free(ids);
    kvq_tokenizer_free(tok);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    tokenize_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    size_t len = 0;
    char *text = load_text(&o, &len);
    if (!text) return 1;
    if (len > (size_t)INT32_MAX / 4) { free(text); return cli_error(CMD, "text too long (%zu bytes)", len); }
    rc = tokenize_run(&o, text, len);
    free(text);
    return rc;
}
