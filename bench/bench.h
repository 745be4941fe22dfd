/*
 * bench.h - kvq's benchmark driver: named groups of benchmarks.
 *
 *   build/kvq-bench                 run every group
 *   build/kvq-bench GROUP [ARGS]    run one group, ARGS passed to it
 *   build/kvq-bench --list          list the groups
 *
 * Adding a group: write bench/bench_NAME.c with
 *   int bench_NAME(int argc, char **argv)     (argv[0] = group name)
 * declare it below (or in its own header, as bench_matmul.h) and add one
 * line to the table in bench/bench_main.c.
 * A group prints markdown (a heading and tables) to stdout and returns 0,
 * or non-zero after printing an error.
 */
#ifndef KVQ_BENCH_H
#define KVQ_BENCH_H

#include "kvq.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*bench_fn)(int argc, char **argv);
typedef struct bench_group {
    const char *name;
    const char *what;   /* one line for --list */
    bench_fn run;
} bench_group;

int bench_formats(int argc, char **argv);
int bench_cachefmt(int argc, char **argv);
int bench_attention(int argc, char **argv);
int bench_decode_step(int argc, char **argv);
int bench_chunk(int argc, char **argv);
int bench_engine(int argc, char **argv);
int bench_cachewrite(int argc, char **argv);
int bench_vecops(int argc, char **argv);

/* ---- helpers shared by groups (bench_main.c) ---- */

/* Monotonic wall time in seconds. */
double bench_now(void);
/* CPU time of the calling thread in seconds: what bench_time measures,
 * because the machines kvq is developed on are shared (wall time there
 * counts other people's work). */
double bench_cpu_now(void);
/* Median of n values (sorts v in place). */
double bench_median(double *v, int n);
/* Seconds per call of fn(ctx): calls are batched so that one timed batch
 * lasts at least min_batch_s, and the median over `reps` batches is
 * returned (one untimed warm-up batch first).  Single-threaded fn only:
 * the clock is the calling thread's CPU time. */
double bench_time(void (*fn)(void *ctx), void *ctx, int reps, double min_batch_s);
/* A value the optimiser must assume is used. */
void bench_consume(double v);
/* Seeded test data: splitmix64's next word, and a cheap near-Gaussian
 * (sum of four uniforms, unit variance) from it. */
uint64_t bench_rng_next(uint64_t *s);
float bench_gauss(uint64_t *s);
/* A cache of params p whose layer 0 holds positions 0..n_pos-1, written
 * through kvq_cache_write as the engine writes them, so that every
 * type's rows, KVarN tiles and exact regions are what a step at that
 * depth reads: p->max_batch Gaussian rows repeated, in calls of that many
 * positions, then the last position alone (a decode step's own write,
 * left in the stage).  NULL after an error line naming the group. */
kvq_cache *bench_written_cache(const char *group, const kvq_cache_params *p, int n_pos);
/* Push every cache level's contents out before a timed step, as the
 * other layers' reads do in a model (one layer's quantised cache at
 * depth, 10-40 MB, would otherwise be read from the L3 on every repeat
 * of the step, and compared with an f16 cache that does not fit):
 * reads one word per 64-byte line of a buffer twice the size of all
 * level-3 caches sysfs lists (at least 64 MiB), written once so that
 * its pages are real.  Untimed by the callers.  False, after an error
 * line naming the group, when the buffer cannot be allocated. */
bool bench_evict_caches(const char *group);
/* Median seconds of one decode step of layer 0 of c (the query of n_head
 * heads at position n_ctx - 1, scale 1/sqrt(head_dim)) through `loop`
 * (NULL: the default), each step after bench_evict_caches: at least 5
 * steps, more while under half a second, at most 50.  Without a pool the
 * thread's CPU time, with one the wall clock.  -1 when a step or the
 * eviction fails (after an error line naming the group). */
struct kvq_attend_loop;   /* src/cache/cache.h */
double bench_decode_median(const char *group, kvq_cache *c, int n_ctx, int n_head, int head_dim, const float *q,
                           float *out, kvq_pool *pool, const struct kvq_attend_loop *loop);
/* --query int16|int8 (the rounding of the query for the integer K
 * kernels, kvq_attend_opts.int8_query) into *int8, or one error line. */
bool bench_flag_query(const char *group, const char *v, bool *int8);
/* A flag's integer value v (NULL: missing) in [lo, hi] into *out, or one
 * error line naming the group, the flag and the range, and false. */
bool bench_flag_int(const char *group, const char *flag, const char *v, int lo, int hi, int *out);
/* The attention kernel levels to run: those of list (comma-separated;
 * NULL: every level this CPU runs but "scalar") in the order of known[];
 * their number, or -1 after one error line for a name not in known[], a
 * level this CPU does not run, or nothing chosen. */
int bench_levels(const char *group, const char *list, const char *const *known, int n_known, const char **out);
/* The core's clock in Hz, estimated by a chain of dependent adds (one
 * cycle each on x86); 0 where it cannot be estimated. */
double bench_clock_hz(void);
/* "clock ~3.80 GHz" or "clock not estimated" (hz 0) into buf. */
const char *bench_clock_text(double hz, char *buf, size_t cap);
/* The comma-separated word at p into word (at most cap - 1 bytes; empty
 * for ",,"); returns where the next word starts, NULL after the last. */
const char *bench_list_word(const char *p, char *word, size_t cap);
/* Whether word is one of list's comma-separated words (whole words only:
 * "avx2" is not in "avx2-tile"). */
bool bench_in_list(const char *list, const char *word);
/* list's comma-separated cache type names into types[]: their number,
 * or -1 after an error on stderr (cli_parse_type's, naming the known
 * types, or more than max). */
int bench_parse_types(const char *group, const char *list, kvq_type *types, int max);

#endif
