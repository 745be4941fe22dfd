/* drift_jobs.h - the work of `kvq drift` and `kvq sweep --drift`: the
 * exact reference (prompts shared out among jobs), then every cache
 * configuration against it (configurations shared out), each job with its
 * own context and threads / jobs threads, with a progress bar on stderr.
 * Results do not depend on the number of jobs: every prompt and every
 * configuration is computed the same way whichever job takes it. */
#ifndef KVQ_DRIFT_JOBS_H
#define KVQ_DRIFT_JOBS_H

#include "cache_flags.h"
#include "kvq_eval.h"

/* The prompts of a run, tokenised. */
typedef struct drift_prompts {
    char *text;            /* a prompt file's bytes (lines point into it)  */
    char **lines;          /* NULL for prompts cut from a token stream     */
    size_t n;
    int32_t **tokens;
    int *n_tokens;
    int longest;
} drift_prompts;

/* Each returns 0, or 1 after one error line. */
int drift_prompts_one(const char *cmd, const char *prompt, drift_prompts *p);
/* The lines of a prompt file (at most max of them; 0 = all); an empty
 * file is an error. */
int drift_prompts_read(const char *cmd, const char *path, size_t max, drift_prompts *p);
/* Tokenise the lines (BOS as the model says) and check that each prompt
 * and n_gen generated tokens fit in limit positions; path names the file
 * in the message (NULL: a -p prompt). */
int drift_prompts_tokenize(const char *cmd, const kvq_model *m, drift_prompts *p, const char *path, int n_gen,
                           int limit);
/* count windows of len tokens cut at evenly spaced places from a token
 * stream (bos >= 0: each window starts with it, and a leading bos of the
 * stream is skipped), checked like drift_prompts_tokenize. */
int drift_prompts_windows(const char *cmd, const int32_t *tokens, size_t n, int bos, size_t count, int len, int n_gen,
                          int limit, drift_prompts *p);
void drift_prompts_free(drift_prompts *p);

typedef struct drift_config {
    cache_flags cache;                  /* types, tail, sink, rotation, layers */
    char label[KVQ_EVAL_LABEL_MAX];
    bool rot_off;
} drift_config;

typedef struct drift_job_spec {
    const char *cmd;                    /* for messages: "drift", "sweep"     */
    const kvq_model *m;
    const int32_t *const *prompts;      /* [n_prompts] token lists            */
    const int *n_prompt;
    size_t n_prompts;
    int n_gen, n_ctx;                   /* contexts hold n_ctx positions      */
    int n_threads, n_jobs;              /* 0 threads = online cores           */
    drift_config *cfg;                  /* resolved in place                  */
    size_t n_cfg;
    bool log_cache;                     /* print the cache's start-up log     */
} drift_job_spec;

/* Runs the reference and then every configuration; rows[i] (zeroed by
 * the caller) is filled and marked done for each configuration that ran.
 * Errors are printed; returns 0 when everything ran, else 1 (a failed
 * reference stops everything, a failed configuration only itself).
 * *threads receives the threads each job used. */
int drift_run_jobs(const drift_job_spec *spec, kvq_drift_row *rows, int *threads);

#endif
