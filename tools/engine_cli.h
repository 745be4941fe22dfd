/* engine_cli.h - what the model commands (run, perplexity, kld, bench,
 * info) share: loading a model, reading a text, tokenising it, creating
 * an evaluation context, each failure reported as one error line. */
#ifndef KVQ_ENGINE_CLI_H
#define KVQ_ENGINE_CLI_H

#include "cache_flags.h"
#include "kvq.h"

#include <stddef.h>

/* Largest context any command accepts (positions). */
enum { CLI_MAX_CTX = 1 << 20, CLI_MAX_THREADS = 512 };

/* The flags the model commands share, in llama.cpp's spelling:
 * -m/--model, -f/--file, -c/--ctx-size (>= 4: a chunk scores at least two
 * positions), -b/--batch-size, --chunks, -t/--threads, and kvq's
 * --act f32|int8|query8 (activations of the weight products and the query
 * of a q4_0/q4_1/kvarn4/trellis K, kvq_ctx_set_activations), --no-mmap (kvq_model_load_ex's
 * KVQ_LOAD_READ).
 * A command points the fields it takes at its options; NULL fields are
 * flags it lacks. */
typedef struct cli_model_flags {
    const char **model, **text;
    int *n_ctx, *n_batch, *n_chunks, *n_threads;
    kvq_act *act;
    bool *no_mmap;              /* --no-mmap: read the model into memory */
} cli_model_flags;
/* The help line of --no-mmap. */
#define CLI_NO_MMAP_USAGE "  --no-mmap              read the model into memory instead of mapping it (llama.cpp's flag)\n"

/* The help line of --act, for the commands that take it. */
#define CLI_ACT_USAGE "  --act f32|int8|query8  activations of the q8_0/q4_0/K-quant weight products and the query\n" \
                      "                         of a q4_0/q4_1/kvarn4/turbo*_tcq K cache (default f32); query8:\n" \
                      "                         int8 for that query alone, f32 for the weights\n"
/* "f32" / "int8" / "query8" (what --act reads) */
const char *cli_act_name(kvq_act act);
/* kvq_ctx_set_activations, or one error line and false. */
bool cli_set_act(const char *cmd, kvq_ctx *ctx, kvq_act act);
/* argv[*i] as one of those flags: 1 = consumed (its value too, *i
 * advanced), 0 = not one of them, -1 = bad value (error line printed). */
int cli_model_flag(const char *cmd, const cli_model_flags *f, int argc, char **argv, int *i);

/* Each returns NULL after printing "kvq CMD: error: ..." */
kvq_model *cli_load_model(const char *cmd, const char *path, bool no_mmap);
char *cli_read_text(const char *cmd, const char *path, size_t *len);
int32_t *cli_tokenize(const char *cmd, const kvq_model *m, const char *text, size_t len, bool add_bos, int *n_out);
/* The tokens of the text file at path (cli_read_text + cli_tokenize, BOS
 * as the model's vocabulary says): what -f TEXT means to every command. */
int32_t *cli_text_tokens(const char *cmd, const kvq_model *m, const char *path, int *n_out);
/* kv_bytes (kvq.h) of the cache of p (types, per-layer overrides, tail,
 * sink) for a model at n_ctx positions: K and V rows of every layer and
 * position, plus the exact rows it keeps at that length (tail, sink, KVarN's
 * first and incomplete tiles), as src/cache/cache.c lays them out. */
double cli_kv_bytes(const kvq_model_info *in, const kvq_cache_params *p, int n_ctx);
/* Every figure of kvq_cache_bytes for p with the model's shape at n_ctx
 * (max_batch capped at n_ctx); false when no such cache can be made. */
bool cli_cache_plan(const kvq_model_info *in, const kvq_cache_params *p, int n_ctx, kvq_cache_bytes *b);
/* Before a context of n_ctx is created: warn (stderr, once per call)
 * when n_ctx exceeds the model's trained context, as llama.cpp does, and
 * refuse (one error line, returns 1) a cache larger than this machine's
 * memory or the process's address-space limit.  0 = go ahead. */
int cli_check_context(const char *cmd, const kvq_model_info *in, const kvq_cache_params *p, int n_ctx);
/* path can be created: its directory exists and is writable, and path
 * is not a directory; else one error line and 1.  Checked before a model
 * loads, so a typo costs no evaluation. */
int cli_check_writable(const char *cmd, const char *path);
/* dir is an existing writable directory, or one that mkdir can create
 * (its parent exists and is writable); else one error line and 1. */
int cli_check_output_dir(const char *cmd, const char *dir);

/* 0 when n_chunk chunks of n_ctx give at least the 2 scored tokens a
 * PPL or KLD estimate (and its error) needs; else 1 after one error line. */
int cli_check_scored(const char *cmd, int n_ctx, int n_chunk);
kvq_ctx *cli_create_ctx(const char *cmd, const kvq_model *m, cache_flags *cf, int n_ctx, int max_batch, int n_threads);

#endif
