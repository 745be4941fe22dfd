/* engine_cli.c - shared steps of the model commands (see engine_cli.h). */
#include "engine_cli.h"
#include "cli.h"
#include "kvq_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_flag(const char *a, const char *short_name, const char *long_name) {
    return (short_name && !strcmp(a, short_name)) || !strcmp(a, long_name);
}

int cli_model_flag(const char *cmd, const cli_model_flags *f, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    const char **str = NULL;
    int *num = NULL;
    long l, lo = 1, hi = CLI_MAX_CTX;
    if (f->model && is_flag(a, "-m", "--model")) str = f->model;
    else if (f->text && is_flag(a, "-f", "--file")) str = f->text;
    else if (f->n_ctx && is_flag(a, "-c", "--ctx-size")) { num = f->n_ctx; lo = 4; }
    else if (f->n_batch && is_flag(a, "-b", "--batch-size")) num = f->n_batch;
    else if (f->n_chunks && is_flag(a, NULL, "--chunks")) num = f->n_chunks;
    else if (f->n_threads && is_flag(a, "-t", "--threads")) { num = f->n_threads; hi = CLI_MAX_THREADS; }
    else if (f->no_mmap && is_flag(a, NULL, "--no-mmap")) { *f->no_mmap = true; return 1; }
    else if (f->act && is_flag(a, NULL, "--act")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        for (int a = 0; a < KVQ_ACT_COUNT; a++)
            if (!strcmp(v, cli_act_name((kvq_act)a))) { *f->act = (kvq_act)a; return 1; }
        cli_error(cmd, "--act: expected f32, int8 or query8, not '%s'", v);
        return -1;
    }
    else return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (str) { *str = v; return 1; }
    if (!cli_flag_long(cmd, a, v, lo, hi, &l)) return -1;
    *num = (int)l;
    return 1;
}

const char *cli_act_name(kvq_act act) {
    static const char *const names[KVQ_ACT_COUNT] = { [KVQ_ACT_F32] = "f32", [KVQ_ACT_INT8] = "int8",
                                                      [KVQ_ACT_QUERY8] = "query8" };
    return (unsigned)act < KVQ_ACT_COUNT ? names[act] : "?";
}

bool cli_set_act(const char *cmd, kvq_ctx *ctx, kvq_act act) {
    kvq_error err = { 0 };
    if (kvq_ctx_set_activations(ctx, act, &err) == KVQ_OK) return true;
    cli_error(cmd, "--act %s: %s", cli_act_name(act), err.msg);
    return false;
}

kvq_model *cli_load_model(const char *cmd, const char *path, bool no_mmap) {
    if (!path) { cli_error(cmd, "no model given (use -m MODEL.gguf)"); return NULL; }
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    if (kvq_model_load_ex(path, no_mmap ? KVQ_LOAD_READ : KVQ_LOAD_MMAP, &m, &err) != KVQ_OK) {
        cli_error(cmd, "cannot load '%s': %s", path, err.msg);
        return NULL;
    }
    return m;
}

char *cli_read_text(const char *cmd, const char *path, size_t *len) {
    char *buf = NULL;
    kvq_error err = { 0 };
    if (kvq_read_file(path, "text file", KVQ_TEXT_CAP, &buf, len, &err) != KVQ_OK) {
        cli_error(cmd, "%s", err.msg);
        return NULL;
    }
    return buf;
}

int32_t *cli_tokenize(const char *cmd, const kvq_model *m, const char *text, size_t len, bool add_bos, int *n_out) {
    int cap = (int)(len + 16 < ((size_t)1 << 30) ? len + 16 : ((size_t)1 << 30));
    int32_t *toks = malloc((size_t)cap * sizeof *toks);
    int n = toks ? kvq_tokenize(m, text, len, add_bos, true, toks, cap) : -1;
    if (n > cap) {  /* more tokens than bytes: only with odd vocabularies */
        int32_t *bigger = realloc(toks, (size_t)n * sizeof *toks);
        if (!bigger) { free(toks); toks = NULL; n = -1; }
        else { toks = bigger; n = kvq_tokenize(m, text, len, add_bos, true, toks, n); }
    }
    if (n < 0) { free(toks); cli_error(cmd, "tokenizing the text failed"); return NULL; }
    *n_out = n;
    return toks;
}

int32_t *cli_text_tokens(const char *cmd, const kvq_model *m, const char *path, int *n_out) {
    size_t len = 0;
    char *text = cli_read_text(cmd, path, &len);
    if (!text) return NULL;
    int32_t *toks = cli_tokenize(cmd, m, text, len, kvq_model_get_info(m)->add_bos, n_out);
    free(text);
    return toks;
}

/* Rows in the body, the tail's and the sink's exact rows: the estimate
 * when the parameters cannot make a cache (sizes overflowing). */
static double formula_bytes(const kvq_model_info *in, const kvq_cache_params *p, int n_ctx) {
    double body = 0.0;
    for (int l = 0; l < in->n_layer; l++) {
        const kvq_type tk = p->layer_type_k ? p->layer_type_k[l] : p->type_k;
        const kvq_type tv = p->layer_type_v ? p->layer_type_v[l] : p->type_v;
        body += (double)kvq_cache_row_bytes(tk, in->n_head_kv, in->head_dim_k) +
                (double)kvq_cache_row_bytes(tv, in->n_head_kv, in->head_dim_v);
    }
    const double exact_row = (double)kvq_cache_row_bytes(p->tail_type, in->n_head_kv, in->head_dim_k) +
                             (double)kvq_cache_row_bytes(p->tail_type, in->n_head_kv, in->head_dim_v);
    const int ring = CLI_MIN(CLI_MAX(p->tail_tokens, 0), n_ctx);
    const int sink = CLI_MIN(CLI_MAX(p->sink_tokens, 0), n_ctx);
    return (double)n_ctx * body + (double)in->n_layer * (double)(ring + sink) * exact_row;
}

/* kv_bytes (kvq.h) from the cache's own layout (kvq_cache_plan_bytes:
 * every type's exact rows, KVarN's tiles, padded heads) at n_ctx with the
 * model's shape; the plain formula when no cache can be made (too large). */
bool cli_cache_plan(const kvq_model_info *in, const kvq_cache_params *p, int n_ctx, kvq_cache_bytes *b) {
    kvq_cache_params q = *p;
    q.n_layer = in->n_layer;
    q.n_head_kv = in->n_head_kv;
    q.head_dim_k = in->head_dim_k;
    q.head_dim_v = in->head_dim_v;
    q.n_ctx = n_ctx;
    q.max_batch = p->max_batch > 0 ? CLI_MIN(p->max_batch, n_ctx) : n_ctx;
    return kvq_cache_plan_bytes(&q, b, NULL) == KVQ_OK;
}

double cli_kv_bytes(const kvq_model_info *in, const kvq_cache_params *p, int n_ctx) {
    kvq_cache_bytes b;
    return cli_cache_plan(in, p, n_ctx, &b) ? (double)b.total : formula_bytes(in, p, n_ctx);
}

/* Physical memory, lowered to RLIMIT_AS when that is set. */
static double memory_limit(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double lim = pages > 0 && page > 0 ? (double)pages * (double)page : 1e300;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) lim = CLI_MIN(lim, (double)rl.rlim_cur);
    return lim;
}

int cli_check_context(const char *cmd, const kvq_model_info *in, const kvq_cache_params *p, int n_ctx) {
    const double need = cli_kv_bytes(in, p, n_ctx), have = memory_limit();
    if (need > have)
        return cli_error(cmd, "a KV cache of %d positions needs %.1f GiB, more than the %.1f GiB of memory available "
                         "(lower -c or use a smaller cache type)", n_ctx, need / 1073741824.0, have / 1073741824.0);
    if (in->n_ctx_train > 0 && n_ctx > in->n_ctx_train)
        fprintf(stderr, "kvq %s: warning: context %d is longer than the model was trained for (%d); quality past %d "
                "positions is not what the model was made for\n", cmd, n_ctx, in->n_ctx_train, in->n_ctx_train);
    return 0;
}

/* The directory part of path ("." when none). */
static void dir_of(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    while (slash && slash > path && slash[1] == 0) {   /* "a/b/" names b */
        const char *prev = slash - 1;
        while (prev > path && *prev != '/') prev--;
        slash = *prev == '/' ? prev : NULL;
    }
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

static int check_dir_writable(const char *cmd, const char *what, const char *path, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return cli_error(cmd, "cannot create %s '%s': directory '%s' does not exist", what, path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return cli_error(cmd, "cannot create %s '%s': directory '%s' is not writable", what, path, dir);
    return 0;
}

int cli_check_writable(const char *cmd, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return cli_error(cmd, "'%s' is a directory, not a file to write", path);
    char dir[4096];
    dir_of(path, dir, sizeof dir);
    return check_dir_writable(cmd, "file", path, dir);
}

int cli_check_output_dir(const char *cmd, const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return cli_error(cmd, "'%s' exists and is not a directory", dir);
        if (access(dir, W_OK | X_OK) != 0) return cli_error(cmd, "directory '%s' is not writable", dir);
        return 0;
    }
    char parent[4096];
    dir_of(dir, parent, sizeof parent);
    return check_dir_writable(cmd, "directory", dir, parent);
}

int cli_check_scored(const char *cmd, int n_ctx, int n_chunk) {
    const size_t n = (size_t)n_chunk * (size_t)kvq_kld_scored_per_chunk(n_ctx);
    if (n >= 2) return 0;
    return cli_error(cmd, "%d chunk(s) of %d tokens score %zu token(s) (positions %d..%d of each chunk); at least 2 are "
                     "needed: raise -c or --chunks", n_chunk, n_ctx, n, n_ctx / 2, n_ctx - 2);
}

kvq_ctx *cli_create_ctx(const char *cmd, const kvq_model *m, cache_flags *cf, int n_ctx, int max_batch, int n_threads) {
    if (!cache_flags_apply_layers(cmd, cf, kvq_model_get_info(m)->n_layer)) return NULL;
    if (!cache_flags_resolve(cmd, cf, n_ctx)) return NULL;
    cf->params.max_batch = max_batch;
    if (cli_check_context(cmd, kvq_model_get_info(m), &cf->params, n_ctx)) return NULL;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0 };
    kvq_calib *cal = NULL;   /* --calib: the cache copies what it needs */
    if (cf->calib_path && kvq_calib_load(cf->calib_path, m, &cal, &err) != KVQ_OK) {
        cli_error(cmd, "--calib: %s", err.msg);
        return NULL;
    }
    cf->params.calib = cal;
    const kvq_status st = kvq_ctx_create(m, &cf->params, n_threads, &ctx, &err);
    cf->params.calib = NULL;
    kvq_calib_free(cal);
    if (st != KVQ_OK) {
        cli_error(cmd, "cannot create the context: %s", err.msg);
        return NULL;
    }
    cache_flags_log(cmd, kvq_ctx_cache(ctx));
    return ctx;
}
