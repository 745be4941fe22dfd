/* engine_cli.c - shared steps of the model commands (see engine_cli.h). */
#include "engine_cli.h"
#include "cli.h"
#include "file_read.h"
#include "kld.h"

#include <stdio.h>
#include <stdlib.h>

kvq_model *cli_load_model(const char *cmd, const char *path) {
    if (!path) { cli_error(cmd, "no model given (use -m MODEL.gguf)"); return NULL; }
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    if (kvq_model_load(path, &m, &err) != KVQ_OK) {
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

int cli_check_scored(const char *cmd, int n_ctx, int n_chunk) {
    const size_t n = (size_t)n_chunk * (size_t)kvq_kld_scored_per_chunk(n_ctx);
    if (n >= 2) return 0;
    return cli_error(cmd, "%d chunk(s) of %d tokens score %zu token(s) (positions %d..%d of each chunk); at least 2 are "
                     "needed: raise -c or --chunks", n_chunk, n_ctx, n, n_ctx / 2, n_ctx - 2);
}

kvq_ctx *cli_create_ctx(const char *cmd, const kvq_model *m, cache_flags *cf, int n_ctx, int max_batch, int n_threads) {
    if (!cache_flags_apply_layers(cmd, cf, kvq_model_get_info(m)->n_layer)) return NULL;
    cache_flags_resolve(cf, n_ctx);
    cf->params.max_batch = max_batch;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0 };
    if (kvq_ctx_create(m, &cf->params, n_threads, &ctx, &err) != KVQ_OK) {
        cli_error(cmd, "cannot create the context: %s", err.msg);
        return NULL;
    }
    cache_flags_log(cmd, kvq_ctx_cache(ctx));
    return ctx;
}
