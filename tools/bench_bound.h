/* bench_bound.h - the memory-bandwidth bound of a generation step, for
 * `kvq bench`: the machine's read bandwidth, measured with the run's
 * threads, and the bytes a step reads (weights + cache at its depth);
 * bound t/s = bandwidth / bytes per token. */
#ifndef KVQ_BENCH_BOUND_H
#define KVQ_BENCH_BOUND_H

#include "kvq.h"

#include <stdbool.h>

/* The buffer the bandwidth is measured on: 4 x the last-level caches
 * (llc_bytes, all of them), at least 256 MiB, at most 4 GiB, so that no
 * pass is served by a cache; and the machine's total level-3 cache in
 * bytes (Linux sysfs; 0 where it cannot be read). */
size_t bench_bandwidth_bytes(size_t llc_bytes);
size_t bench_llc_bytes(void);

/* Read bandwidth from memory in GB/s (1e9 bytes/s): n_threads threads each
 * sum their part of a buffer far larger than the caches; the best of
 * several passes (the machine may be shared: the best pass is the one
 * least disturbed).  0 when its buffer or threads cannot be had (callers
 * print no bound then). */
double bench_read_bandwidth(int n_threads);

/* Bytes of weights one decode step reads: every matrix of every layer and
 * the output matrix once (tied embeddings: the embedding matrix, as the
 * output), one embedding row, the norm vectors and biases. */
double bench_decode_weight_bytes(const kvq_model *m);

/* Cache bytes per generated token, averaged over n_gen steps whose
 * queries sit at positions first..first+n_gen-1 (kvq_cache_query_bytes,
 * every layer). */
double bench_decode_cache_bytes(const kvq_cache *c, int first, int n_gen);

/* tokens/s at `gbs` GB/s for `bytes` per token (0 when either is 0). */
double bench_bound_tps(double gbs, double bytes);

/* Whether the read bandwidth measured before some runs and again after
 * them differ by more than a quarter of the larger: the memory bus was
 * shared during the runs, so each "% of bound" is uncertain by as much.
 * False when either is 0 (not measured). */
bool bench_bandwidth_moved(double before_gbs, double after_gbs);

/* The bandwidth a bound is made of, from the readings before and after
 * its runs: the higher (a reading that caught the bus shared would make
 * the bound too low and the % of it too high), or the one that was
 * measured; 0 when neither was. */
double bench_bound_bandwidth(double before_gbs, double after_gbs);

#endif
