/* kvq_internal.h - helpers shared by the library's source files (not part
 * of the public API). */
#ifndef KVQ_INTERNAL_H
#define KVQ_INTERNAL_H

#include "kvq.h"
#include "alloc.h"   /* kvq_malloc & co: every allocation of src/ */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define KVQ_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVQ_MAX(a, b) ((a) > (b) ? (a) : (b))
#define KVQ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Unroll the loop that follows n times (gcc's and clang's pragma; the
 * kernels unroll so that accumulators stay in registers). */
#define KVQ_PRAGMA_(x) _Pragma(#x)
#define KVQ_UNROLL_N(n) KVQ_PRAGMA_(GCC unroll n)

/* 1.5 * 2^23: for |x| < 2^22, (x + KVQ_ROUND_MAGIC) - KVQ_ROUND_MAGIC is x
 * rounded to the nearest integer, ties to even (in the default rounding
 * mode, with no reassociation: -std=c11, no -ffast-math), in two adds
 * that vectorise where rintf is a call. */
#define KVQ_ROUND_MAGIC 12582912.0f

/* KVQ_MAX_HEAD_DIM, the largest head the cache holds, is public (kvq.h). */

/* kvq_fail (record an error and return its code) is public: kvq.h. */

/* ---- prefetch ---- */
/* Every cache line of [from, to) fetched ahead of its use into L2
 * (prefetcht1, locality 2).  Not into L1 (prefetcht0), nor as a line
 * read once (prefetchnta, locality 0, which this Zen 4 host also fills
 * into L1): a chunk is 36-136 lines (64 for 16 f16 rows), more than L1's
 * outstanding misses, and they queue there behind the chunk's own loads.
 * One layer's decode step from memory, 16384 keys, 2 threads, the hints
 * alternated (docs/performance.md, "Prefetched into L2 again"): L2 took
 * it to 0.55-0.80x of the non-temporal hint's time for every cache type
 * (f16 0.6x, q4_0 0.7x, kvarn4 0.65x; TurboQuant 0.9x), at both kernel
 * levels and on 1 thread; the non-temporal hint had measured 0.93x of
 * L2's on 2026-12-06, the one measurement that favoured it.  Measured on
 * Zen 4 only.  A hint, never a read: addresses past an array are safe. */
static inline void kvq_prefetch_once(uintptr_t from, uintptr_t to) {
    for (uintptr_t a = from & ~(uintptr_t)63; a < to; a += 64) __builtin_prefetch((const void *)a, 0, 2);
}

/* ---- spans of a pool ---- */
/* fn(ctx, begin, end, thread) over items [begin, end) covering [0,
 * n_items) once, in chunks of `chunk` items (the last may be shorter).
 * Each thread streams a contiguous share of the chunks from its front;
 * a thread whose share is done takes chunks from the back of the share
 * with the most left.  For a memory-bound pass over rows (a decode
 * product): every thread reads one long run, as a fixed split would, and
 * the threads still end within about a chunk of each other, as small
 * tasks claimed in turn would.  Which thread runs which items depends on
 * timing: fn's results must not (each item's output its own). */
typedef void (*kvq_span_fn)(void *ctx, int64_t begin, int64_t end, int thread);
void kvq_pool_run_spans(kvq_pool *p, kvq_span_fn fn, void *ctx, int64_t n_items, int64_t chunk);

/* ---- IEEE half / bfloat16, inline for use inside kernels ---- */
static inline uint32_t kvq_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float kvq_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float kvq_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return kvq_bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf/nan */
    if (exp == 0) {                                   /* zero or subnormal: mant * 2^-24 */
        float v = (float)mant * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return kvq_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round to nearest even, overflow to inf, NaN stays NaN (quiet). */
static inline uint16_t kvq_float_to_half(float f) {
    uint32_t x = kvq_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                            /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                           /* below 2^-14: subnormal half */
        /* Adding 0.5 aligns the value so that the FPU's own round-to-
         * nearest-even rounds at 2^-24, the subnormal half's step. */
        float r = kvq_bits_f32(ax) + 0.5f;
        return (uint16_t)(sign | (kvq_f32_bits(r) - 0x3f000000u));
    }
    uint32_t odd = (ax >> 13) & 1u;                   /* ties to even */
    ax += 0xc8000fffu + odd;                          /* rebias exponent (-112<<23), round */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float kvq_bfloat_to_float(uint16_t h) { return kvq_bits_f32((uint32_t)h << 16); }
static inline uint16_t kvq_float_to_bfloat(float f) {
    uint32_t x = kvq_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline uint16_t kvq_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline void kvq_wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline uint32_t kvq_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void kvq_wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static inline uint64_t kvq_rd64(const uint8_t *p) { return (uint64_t)kvq_rd32(p) | (uint64_t)kvq_rd32(p + 4) << 32; }
static inline void kvq_wr64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }

/* x[i] *= s for n floats, four at a step so that the compiler turns each
 * step into one vector operation: -O2 leaves a plain loop over a runtime
 * n scalar, which was a fifth of KVarN's decode time (cache_tiles.c) and
 * a third of the trellis scores' glue (turbo.c). */
static inline void kvq_scale_floats(float *x, int n, float s) {
    int i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) x[i + k] *= s;
    for (; i < n; i++) x[i] *= s;
}

/* ---- CPU features (src/base/cpu.c) ---- */
/* avx512vnni: AVX512_VNNI with AVX-512 (vpdpbusd/vpdpwssd, the int8
 * activation kernels of src/format/act8_vnni.c); avx512vbmi: AVX512_VBMI
 * with AVX-512 (byte permutes, the trellis look-ups of
 * src/format/turbo_tcq64_vbmi.c); avx512_halves: AVX-512 on a core that
 * runs a 512-bit operation as two 256-bit halves (AMD family 19h, Zen 4),
 * where a kernel that wins by wide permutes elsewhere may lose; all three
 * false when avx512 is. */
typedef struct kvq_cpu { bool avx2, fma, f16c, avx512, avx512vnni, avx512vbmi, avx512_halves; } kvq_cpu;
/* Detected once (thread-safe); forced scalar when KVQ_FORCE_SCALAR=1. */
const kvq_cpu *kvq_cpu_features(void);

/* The SIMD levels kernels are written for, widest last.  kvq_isa_best()
 * is the level this process runs, decided once at first use from
 * kvq_cpu_features (KVQ_FORCE_SCALAR=1: scalar; KVQ_FORCE_AVX2=1: at most
 * avx2); every per-level kernel table is indexed by it. */
typedef enum kvq_isa { KVQ_ISA_SCALAR = 0, KVQ_ISA_AVX2, KVQ_ISA_AVX512, KVQ_ISA_COUNT } kvq_isa;
kvq_isa kvq_isa_best(void);
const char *kvq_isa_name(kvq_isa isa);

/* kvq_quantize_row / kvq_dequantize_row on traits the caller looked up
 * once (the cache's write and read paths), padding handled the same way. */
void kvq_quantize_row_tr(const kvq_type_traits *tr, const float *x, void *dst, int64_t n);
void kvq_dequantize_row_tr(const kvq_type_traits *tr, const void *src, float *y, int64_t n);

#endif
