/*
 * bench_vecops.h - the vector instructions the attention kernels are made
 * of, timed alone (kvq-bench vecops): each level's file times
 * independent chains of one instruction and reports seconds per
 * instruction.  Built with that level's flags (the Makefile's *_avx2.c,
 * *_avx512.c, *_vnni.c rule; their table: bench_vecops.inc) and called
 * only where the CPU has it.
 */
#ifndef KVQ_BENCH_VECOPS_H
#define KVQ_BENCH_VECOPS_H

enum { VECOPS_MAX = 16 };

typedef struct vecop_time {
    const char *name;    /* the instruction and its register width */
    const char *used;    /* which kernels use it                    */
    double seconds;      /* per instruction, VECOPS_CHAINS in flight */
} vecop_time;

/* Fill up to VECOPS_MAX rows, `iters` iterations of VECOPS_CHAINS
 * instructions each; returns the number of rows. */
int bench_vecops_avx2(vecop_time *out, long iters);
int bench_vecops_avx512(vecop_time *out, long iters);
int bench_vecops_vnni(vecop_time *out, long iters);

/* The loop every level's file times: VECOPS_CHAINS independent chains of
 * OP, kept in registers (the empty asm stops the compiler from merging
 * them or moving them to memory), the thread's CPU time per instruction.
 * 12 chains: enough that an instruction of latency up to 6 cycles issues
 * at 2 per cycle, what the throughput is, not the latency. */
double bench_cpu_now(void);
enum { VECOPS_CHAINS = 12 };
#define VECOPS_TIME(T, init, OP, iters, seconds_out)                                                   \
    do {                                                                                              \
        T a0 = (init), a1 = (init), a2 = (init), a3 = (init), a4 = (init), a5 = (init);               \
        T a6 = (init), a7 = (init), a8 = (init), a9 = (init), a10 = (init), a11 = (init);             \
        const double t0_ = bench_cpu_now();                                                           \
        for (long i_ = 0; i_ < (iters); i_++) {                                                       \
            a0 = OP(a0); a1 = OP(a1); a2 = OP(a2); a3 = OP(a3); a4 = OP(a4); a5 = OP(a5);             \
            a6 = OP(a6); a7 = OP(a7); a8 = OP(a8); a9 = OP(a9); a10 = OP(a10); a11 = OP(a11);         \
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));        \
            __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));      \
        }                                                                                             \
        __asm__ volatile("" : : "v"(a0), "v"(a1), "v"(a2), "v"(a3), "v"(a4), "v"(a5));               \
        __asm__ volatile("" : : "v"(a6), "v"(a7), "v"(a8), "v"(a9), "v"(a10), "v"(a11));             \
        (seconds_out) = (bench_cpu_now() - t0_) / ((double)VECOPS_CHAINS * (double)(iters));          \
    } while (0)

#endif
