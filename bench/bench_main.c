/* bench_main.c - runs the named benchmark groups of bench.h's table. */
#include "bench.h"
#include "bench_matmul.h"
#include "attn_block.h"
#include "cache.h"
#include "kvq.h"
#include "../tools/bench_bound.h"
#include "../tools/cache_fill.h"
#include "../tools/cli.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One line per group. */
static const bench_group g_groups[] = {
    { "formats", "per type: quantise / dequantise / dot / axpy throughput, scalar vs SIMD", bench_formats },
    { "matmul", "kvq_matmul GFLOP/s per weight type, decode and prefill, 1-2 threads (--model FILE: a model's decode products)", bench_matmul },
    { "attention", "decode attention over 4k/32k cached tokens per cache type, vs f16", bench_attention },
    { "decode", "one decode step at depth per cache type and kernel level vs the bandwidth bound (-c -t --types --levels)", bench_decode_step },
    { "chunk", "the chunk kernels alone (K scores, V sums) on rows in L1, ns per key, per type and level", bench_chunk },
    { "cachefmt", "KVarN/TurboQuant: decode attention over 32k tokens vs q4_0/f16, tile and row encode cost", bench_cachefmt },
    { "cachewrite", "cache writes per type (rows, KVarN tiles, TurboQuant trellis) vs the model's prefill, 1 and N threads", bench_cachewrite },
    { "vecops", "throughput of the vector instructions the attention kernels use, per level, per cycle", bench_vecops },
    { "engine", "kvq bench on the synth qwen3 q8_0/q4_k models: prompt and generation t/s, 1 and 2 threads", bench_engine },
};
enum { N_GROUPS = sizeof g_groups / sizeof g_groups[0] };

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bench_time(void (*fn)(void *ctx), void *ctx, int reps, double min_batch_s) {
    enum { MAX_REPS = 101 };
    double t[MAX_REPS];
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    /* warm-up, and the batch size that makes one batch last min_batch_s */
    long batch = 1;
    for (;;) {
        const double t0 = bench_cpu_now();
        for (long i = 0; i < batch; i++) fn(ctx);
        const double dt = bench_cpu_now() - t0;
        if (dt >= min_batch_s || batch > (1L << 30)) break;
        batch = dt > 0 ? (long)(batch * 1.2 * min_batch_s / dt) + 1 : batch * 16;
    }
    for (int r = 0; r < reps; r++) {
        const double t0 = bench_cpu_now();
        for (long i = 0; i < batch; i++) fn(ctx);
        t[r] = (bench_cpu_now() - t0) / (double)batch;
    }
    return bench_median(t, reps);
}

static volatile double g_sink;
void bench_consume(double v) { g_sink += v; }

uint64_t bench_rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

float bench_gauss(uint64_t *s) {
    float acc = 0.0f;
    for (int i = 0; i < 4; i++) acc += (float)(bench_rng_next(s) >> 11) * (1.0f / 9007199254740992.0f);
    return (acc - 2.0f) * 1.7320508f;
}

bool bench_in_list(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, word, n)) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

const char *bench_list_word(const char *p, char *word, size_t cap) {
    const char *e = strchr(p, ',');
    const size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(word, cap, "%.*s", (int)(len < cap ? len : cap - 1), p);
    return e ? e + 1 : NULL;
}

int bench_parse_types(const char *group, const char *list, kvq_type *types, int max) {
    int n = 0;
    for (const char *p = list; p && *p;) {
        char name[64];
        p = bench_list_word(p, name, sizeof name);
        if (!*name) continue;   /* ",," and a trailing comma, as strtok */
        if (n == max) {
            fprintf(stderr, "%s: more than %d types\n", group, max);
            return -1;
        }
        if (!cli_parse_type(group, name, true, &types[n++])) return -1;
    }
    return n;
}

bool bench_evict_caches(const char *group) {
    static uint64_t *buf;
    static size_t words;
    if (!buf) {
        size_t bytes = 2 * bench_llc_bytes();
        if (bytes < ((size_t)64 << 20)) bytes = (size_t)64 << 20;
        words = bytes / sizeof *buf;
        buf = malloc(words * sizeof *buf);
        if (!buf) {
            fprintf(stderr, "%s: out of memory for the %zu MiB cache-eviction buffer\n", group, bytes >> 20);
            return false;
        }
        for (size_t i = 0; i < words; i++) buf[i] = i;   /* real pages, not the shared zero page */
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < words; i += 64 / sizeof *buf) sum += buf[i];
    bench_consume((double)sum);
    return true;
}

double bench_decode_median(const char *group, kvq_cache *c, int n_ctx, int n_head, int head_dim, const float *q,
                           float *out, kvq_pool *pool, const kvq_attend_loop *loop) {
    enum { MAX_STEPS = 50 };
    const float scale = 1.0f / sqrtf((float)head_dim);
    double (*clock)(void) = pool ? bench_now : bench_cpu_now;
    double times[MAX_STEPS], spent = 0.0;
    int reps = 0;
    while (reps < MAX_STEPS && (reps < 5 || spent < 0.5)) {
        if (!bench_evict_caches(group)) return -1.0;   /* each step from memory, as in a model */
        kvq_error err;
        const double t0 = clock();
        if (kvq_cache_attend_loop(c, 0, n_ctx - 1, 1, n_head, q, scale, out, pool, NULL, loop, &err) != KVQ_OK) {
            fprintf(stderr, "%s: %s\n", group, err.msg);
            return -1.0;
        }
        times[reps] = clock() - t0;
        spent += times[reps++];
    }
    return bench_median(times, reps);
}

kvq_cache *bench_written_cache(const char *group, const kvq_cache_params *p, int n_pos) {
    kvq_cache *c = NULL;
    kvq_error err;
    if (kvq_cache_create(p, &c, &err)) { fprintf(stderr, "%s: %s\n", group, err.msg); return NULL; }
    const int batch = KVQ_MIN(p->max_batch, n_pos);
    const size_t nk = (size_t)batch * p->n_head_kv * p->head_dim_k, nv = (size_t)batch * p->n_head_kv * p->head_dim_v;
    float *kv = malloc((nk + nv) * sizeof(float));
    if (!kv) { fprintf(stderr, "%s: out of memory\n", group); kvq_cache_free(c); return NULL; }
    cli_fill_noise(kv, nk + nv, 1);
    if (cli_fill_cache(c, 1, n_pos, batch, kv, kv + nk, true, NULL, &err)) {
        fprintf(stderr, "%s: writing %s: %s\n", group, kvq_type_name(p->type_k), err.msg);
        kvq_cache_free(c);
        c = NULL;
    }
    free(kv);
    return c;
}

bool bench_flag_query(const char *group, const char *v, bool *int8) {
    if (v && (!strcmp(v, "int16") || !strcmp(v, "int8"))) {
        *int8 = !strcmp(v, "int8");
        return true;
    }
    fprintf(stderr, "%s: --query wants int16 or int8\n", group);
    return false;
}

bool bench_flag_int(const char *group, const char *flag, const char *v, int lo, int hi, int *out) {
    long x;
    if (!v) fprintf(stderr, "%s: %s needs a value\n", group, flag);
    else if (cli_parse_long(v, lo, hi, &x)) {
        *out = (int)x;
        return true;
    } else fprintf(stderr, "%s: %s: '%s' is not an integer in %d..%d\n", group, flag, v, lo, hi);
    return false;
}

int bench_levels(const char *group, const char *list, const char *const *known, int n_known, const char **out) {
    for (const char *p = list; p && *p;) {   /* every named level must exist and run here */
        char name[32];
        p = bench_list_word(p, name, sizeof name);
        if (!*name) continue;
        int k = 0;
        while (k < n_known && strcmp(known[k], name)) k++;
        if (k == n_known) {
            fprintf(stderr, "%s: unknown level '%s' (levels:", group, name);
            for (int i = 0; i < n_known; i++) fprintf(stderr, " %s", known[i]);
            fprintf(stderr, ")\n");
            return -1;
        }
        if (!attn_block_level(name)) {
            fprintf(stderr, "%s: level '%s' does not run on this CPU (best: %s)\n", group, name, kvq_simd_level());
            return -1;
        }
    }
    int n = 0;
    for (int i = 0; i < n_known; i++)
        if (attn_block_level(known[i]) && (list ? bench_in_list(list, known[i]) : strcmp(known[i], "scalar") != 0))
            out[n++] = known[i];
    if (!n) fprintf(stderr, "%s: no kernel level chosen\n", group);
    return n ? n : -1;
}

/* A chain of dependent integer adds runs at one per cycle on every x86
 * core: 8 x 10^7 of them, best of 3 (the CPU time of the fastest is the
 * least disturbed by the host).  Register operands, not immediates:
 * Intel's Golden Cove and later cores
 * fold a chain of `add $imm, reg` in the renamer, several per cycle (the
 * immediate form read 10.7 GHz on a Sapphire-Rapids-class Xeon), while a
 * register-register add still waits one cycle for its input.  An estimate
 * outside 0.3-7 GHz is no clock: 0, and the tables print "-". */
double bench_clock_hz(void) {
#if defined(__x86_64__)
    enum { ITERS = 10000000 };
    double best = 0.0;
    for (int r = 0; r < 3; r++) {
        unsigned long x = 0, one = 1;
        const double t0 = bench_cpu_now();
        for (long i = 0; i < ITERS; i++)
            __asm__ volatile("add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
                             "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0"
                             : "+r"(x)
                             : "r"(one));
        const double dt = bench_cpu_now() - t0;
        bench_consume((double)x);
        if (dt > 0 && 8.0 * ITERS / dt > best) best = 8.0 * ITERS / dt;
    }
    return best >= 0.3e9 && best <= 7e9 ? best : 0.0;
#else
    return 0.0;
#endif
}

const char *bench_clock_text(double hz, char *buf, size_t cap) {
    if (hz > 0) snprintf(buf, cap, "clock ~%.2f GHz", hz * 1e-9);
    else snprintf(buf, cap, "clock not estimated");
    return buf;
}

static void usage(FILE *out) {
    fprintf(out, "usage: kvq-bench [GROUP [ARGS...]] | --list | -h\n"
                 "Runs every benchmark group, or the one named (ARGS go to it; GROUP -h for its flags).\n");
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) { usage(stdout); return 0; }
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (int g = 0; g < N_GROUPS; g++) printf("%-12s %s\n", g_groups[g].name, g_groups[g].what);
        return 0;
    }
    if (argc > 1) {
        for (int g = 0; g < N_GROUPS; g++) {
            if (strcmp(argv[1], g_groups[g].name)) continue;
            printf("# kvq benchmarks (kvq %s, SIMD level %s)\n\n", KVQ_VERSION, kvq_simd_level());
            return g_groups[g].run(argc - 1, argv + 1);
        }
        fprintf(stderr, "kvq-bench: error: unknown group '%s' (see --list)\n", argv[1]);
        return 1;
    }
    printf("# kvq benchmarks (kvq %s, SIMD level %s)\n\n", KVQ_VERSION, kvq_simd_level());
    int status = 0;
    for (int g = 0; g < N_GROUPS; g++) {
        char *args[] = { (char *)g_groups[g].name, NULL };
        status |= g_groups[g].run(1, args);
    }
    return status;
}
