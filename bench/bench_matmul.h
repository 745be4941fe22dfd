/* bench_matmul.h - the matmul benchmark group (bench/bench_matmul.c), for
 * the bench driver to call. */
#ifndef KVQ_BENCH_MATMUL_H
#define KVQ_BENCH_MATMUL_H

/* GFLOP/s of kvq_matmul per weight type, 2048x2048 weights, n_tok 1 and
 * 64, 1 and 2 threads, median of 5 runs; prints one line per case.
 * Without --types it then prints the threads break-even table: q8_0
 * decode products from 128x256 to 2048x2048 at 1 and 2 threads
 * (--break-even: that table only).
 * Options: --rows N --cols N --reps N --types a,b,c --break-even.  Returns 0, or 1 on a
 * bad option or failed allocation. */
int bench_matmul(int argc, char **argv);

#endif
