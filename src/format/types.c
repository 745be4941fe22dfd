/*
 * types.c - the table of type traits: one row per storage type.
 *
 * Adding a type is adding a row here (plus its kernels).  The table below
 * holds the scalar reference kernels; kvq_type_get() returns a copy in
 * which the SIMD files have replaced what they implement for this CPU.
 */
#include "quant_block.h"
#include "quant_kquants.h"
#include "simd.h"
#include "kquants_simd.h"
#include "turbo_traits.h"
#include "tile_ops.h"
#include "calib.h"

#include <pthread.h>
#include <stdlib.h>

#define ROW(T, NAME, BS, BYTES, GGML, CACHE, BLOCKQ, K)                        \
    [T] = { NAME, BS, BYTES, GGML, CACHE, BLOCKQ, KVQ_LAYOUT_ROWS, KVQ_FMT_ROT_NONE, 0, NULL, NULL, \
            kvq_##K##_quantize, kvq_##K##_dequantize, kvq_##K##_dot, kvq_##K##_axpy, 0 }

/* Weight-only rows have no quantiser: kvq reads them, it never writes them. */
#define WROW(T, NAME, BS, BYTES, GGML, K)                                      \
    [T] = { NAME, BS, BYTES, GGML, false, false, KVQ_LAYOUT_ROWS, KVQ_FMT_ROT_NONE, 0, NULL, NULL, \
            NULL, kvq_##K##_dequantize, kvq_##K##_dot, kvq_##K##_axpy, 0 }

/* KVarN tile rows: the "block" is one 128x128 record (2048*b + 768 bytes,
 * docs/spec/formats.md §3), rotated per slice by the format; no row kernels: the
 * cache quantises and reads tiles through the tile hooks (src/format/tile_ops.h,
 * KVarN's in src/cache/cache_tiles.c). */
#define TILE_ROW(T, NAME, BITS)                                                \
    [T] = { NAME, 128 * 128, 2048 * (BITS) + 768, -1, true, false,             \
            KVQ_LAYOUT_TILES, KVQ_FMT_ROT_SLICE, BITS, NULL, &kvq_kvarn_tile_ops,      \
            NULL, NULL, NULL, NULL, 0 }

/* TurboQuant rows (src/format/turbo_traits.c): blocks of 128 values, their own
 * row layout (row_bytes hook), the format's rotation, scalar kernels here
 * (kvq_simd_table installs the dispatching ones for avx2/avx512). */
#define TURBO_ROW(T, NAME, BYTES128, K)                                        \
    [T] = { NAME, 128, BYTES128, -1, true, false, KVQ_LAYOUT_ROWS, KVQ_FMT_ROT_TURBO, 0, \
            kvq_##K##_row_bytes, NULL, kvq_##K##_quantize_scalar, kvq_##K##_dequantize, \
            kvq_##K##_dot_scalar, kvq_##K##_axpy_scalar, 0 }

/* Calibrated rows (src/cache_calib.c, docs/calibration.md): ceil(rate * n
 * / 800) bytes per row of n values; block 32 gives kvq_type_bpv the rate.
 * No row kernels: a row's layout is its KV head's bit allocation, known
 * only from a calibration, so the cache reads them through `tile`'s hooks. */
#define CAL_ROW_BYTES(RATE)                                                          \
    static size_t cal##RATE##_row_bytes(int64_t n) {                                 \
        return n > 0 && n <= 65536 ? (size_t)kvq_calib_row_bytes(RATE, (int)n) : 0; \
    }
CAL_ROW_BYTES(225)
CAL_ROW_BYTES(250)
CAL_ROW_BYTES(300)
CAL_ROW_BYTES(325)
CAL_ROW_BYTES(350)
CAL_ROW_BYTES(425)
#define CAL_ROW(T, NAME, RATE)                                                      \
    [T] = { NAME, 32, (RATE) * 32 / 800, -1, true, false, KVQ_LAYOUT_ROWS, KVQ_FMT_ROT_CALIB, 0, \
            cal##RATE##_row_bytes, &kvq_calib_row_ops, NULL, NULL, NULL, NULL, RATE }

static const kvq_type_traits g_scalar[KVQ_TYPE_COUNT] = {
    /*   type             name      block bytes ggml cache blockq kernels */
    ROW(KVQ_TYPE_F32,    "f32",     1,   4,    0, true, false, f32),
    ROW(KVQ_TYPE_F16,    "f16",     1,   2,    1, true, false, f16),
    ROW(KVQ_TYPE_BF16,   "bf16",    1,   2,   30, true, false, bf16),
    ROW(KVQ_TYPE_Q8_0,   "q8_0",   32,  34,    8, true, true,  q8_0),
    ROW(KVQ_TYPE_Q6_0,   "q6_0",   32,  26,   -1, true, true,  q6_0),
    ROW(KVQ_TYPE_Q6_1,   "q6_1",   32,  28,   -1, true, true,  q6_1),
    ROW(KVQ_TYPE_Q5_0,   "q5_0",   32,  22,    6, true, true,  q5_0),
    ROW(KVQ_TYPE_Q5_1,   "q5_1",   32,  24,    7, true, true,  q5_1),
    ROW(KVQ_TYPE_Q4_0,   "q4_0",   32,  18,    2, true, true,  q4_0),
    ROW(KVQ_TYPE_Q4_1,   "q4_1",   32,  20,    3, true, true,  q4_1),
    ROW(KVQ_TYPE_IQ4_NL, "iq4_nl", 32,  18,   20, true, true,  iq4_nl),
    ROW(KVQ_TYPE_Q3_0,   "q3_0",   32,  14,   -1, true, true,  q3_0),
    ROW(KVQ_TYPE_Q3_1,   "q3_1",   32,  16,   -1, true, true,  q3_1),
    ROW(KVQ_TYPE_Q2_0,   "q2_0",   32,  10,   -1, true, true,  q2_0),
    ROW(KVQ_TYPE_Q2_1,   "q2_1",   32,  12,   -1, true, true,  q2_1),
    WROW(KVQ_TYPE_Q4_K,  "q4_K",  256, 144,   12, q4_K),
    WROW(KVQ_TYPE_Q5_K,  "q5_K",  256, 176,   13, q5_K),
    WROW(KVQ_TYPE_Q6_K,  "q6_K",  256, 210,   14, q6_K),
    /*        type              name     bits */
    TILE_ROW(KVQ_TYPE_KVARN2, "kvarn2", 2),
    TILE_ROW(KVQ_TYPE_KVARN3, "kvarn3", 3),
    TILE_ROW(KVQ_TYPE_KVARN4, "kvarn4", 4),
    TILE_ROW(KVQ_TYPE_KVARN5, "kvarn5", 5),
    TILE_ROW(KVQ_TYPE_KVARN6, "kvarn6", 6),
    TILE_ROW(KVQ_TYPE_KVARN8, "kvarn8", 8),
    /*        type                  name         bytes/128 kernels */
    TURBO_ROW(KVQ_TYPE_TURBO2,     "turbo2",     34, turbo2),
    TURBO_ROW(KVQ_TYPE_TURBO3,     "turbo3",     50, turbo3),
    TURBO_ROW(KVQ_TYPE_TURBO4,     "turbo4",     66, turbo4),
    TURBO_ROW(KVQ_TYPE_TURBO2_TCQ, "turbo2_tcq", 36, turbo2_tcq),
    TURBO_ROW(KVQ_TYPE_TURBO3_TCQ, "turbo3_tcq", 52, turbo3_tcq),
    TURBO_ROW(KVQ_TYPE_TURBO4_TCQ, "turbo4_tcq", 68, turbo4_tcq),
    /*      type             name      rate */
    CAL_ROW(KVQ_TYPE_CAL225, "cal225", 225),
    CAL_ROW(KVQ_TYPE_CAL250, "cal250", 250),
    CAL_ROW(KVQ_TYPE_CAL300, "cal300", 300),
    CAL_ROW(KVQ_TYPE_CAL325, "cal325", 325),
    CAL_ROW(KVQ_TYPE_CAL350, "cal350", 350),
    CAL_ROW(KVQ_TYPE_CAL425, "cal425", 425),
};

static kvq_type_traits g_active[KVQ_TYPE_COUNT];
static const char *g_level = "scalar";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

bool kvq_simd_table(const char *level, kvq_type_traits table[KVQ_TYPE_COUNT]) {
    const kvq_cpu *cpu = kvq_cpu_features();
    const bool want512 = strcmp(level, "avx512") == 0, want2 = strcmp(level, "avx2") == 0;
    if (!want512 && !want2 && strcmp(level, "scalar") != 0) return false;
    if ((want512 && !cpu->avx512) || (want2 && !cpu->avx2)) return false;
    memcpy(table, g_scalar, sizeof g_scalar);
#if defined(__x86_64__)
    if (want2 || want512) kvq_simd_install_avx2(table);
    if (want2 || want512) kvq_kquants_install_avx2(table);
    if (want512) kvq_simd_install_avx512(table);
    if (want512) kvq_kquants_install_avx512(table);
#endif
    if (want2 || want512) kvq_turbo_install_active(table);
    return true;
}

static void init_active(void) {
    const kvq_cpu *cpu = kvq_cpu_features();
    g_level = cpu->avx512 ? "avx512" : cpu->avx2 ? "avx2" : "scalar";
    if (!kvq_simd_table(g_level, g_active)) {
        memcpy(g_active, g_scalar, sizeof g_active);
        g_level = "scalar";
    }
}

static bool valid(kvq_type t) { return (unsigned)t < KVQ_TYPE_COUNT && g_scalar[t].name; }

const kvq_type_traits *kvq_type_get(kvq_type t) {
    if (!valid(t)) return NULL;
    pthread_once(&g_once, init_active);
    return &g_active[t];
}

const kvq_type_traits *kvq_type_get_scalar(kvq_type t) { return valid(t) ? &g_scalar[t] : NULL; }

const char *kvq_simd_level(void) {
    pthread_once(&g_once, init_active);
    return g_level;
}

const char *kvq_type_name(kvq_type t) { return valid(t) ? g_scalar[t].name : "?"; }

kvq_type kvq_type_from_name(const char *name) {
    if (!name) return KVQ_TYPE_COUNT;
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)
        if (g_scalar[t].name && strcmp(g_scalar[t].name, name) == 0) return (kvq_type)t;
    return KVQ_TYPE_COUNT;
}

kvq_type kvq_type_from_ggml_id(int id) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)
        if (g_scalar[t].name && g_scalar[t].ggml_id == id && id >= 0) return (kvq_type)t;
    return KVQ_TYPE_COUNT;
}

double kvq_type_bpv(kvq_type t) {
    if (!valid(t)) return 0.0;
    return 8.0 * g_scalar[t].block_bytes / g_scalar[t].block_size;
}

size_t kvq_row_bytes(kvq_type t, int64_t n) {
    if (!valid(t) || n <= 0) return 0;
    const kvq_type_traits *tr = &g_scalar[t];
    if (tr->layout != KVQ_LAYOUT_ROWS) return 0;
    if (tr->row_bytes) return tr->row_bytes(n);
    return (size_t)((n + tr->block_size - 1) / tr->block_size) * (size_t)tr->block_bytes;
}

/* The kernels take whole blocks; the tail of a row that is not a multiple
 * of the block size goes through a zero-padded block on the stack. */
enum { MAX_BLOCK = 256 };

void kvq_quantize_row_tr(const kvq_type_traits *tr, const float *x, void *dst, int64_t n) {
    if (!tr || !tr->quantize || n <= 0) return;
    if (tr->row_bytes) { tr->quantize(x, dst, n); return; }   /* the row's own layout */
    const int64_t full = n / tr->block_size * tr->block_size;
    if (full) tr->quantize(x, dst, full);
    if (full < n) {
        float pad[MAX_BLOCK] = {0};
        memcpy(pad, x + full, (size_t)(n - full) * sizeof(float));
        tr->quantize(pad, (uint8_t *)dst + full / tr->block_size * tr->block_bytes, tr->block_size);
    }
}

void kvq_dequantize_row_tr(const kvq_type_traits *tr, const void *src, float *y, int64_t n) {
    if (!tr || !tr->dequantize || n <= 0) return;
    if (tr->row_bytes) { tr->dequantize(src, y, n); return; }
    const int64_t full = n / tr->block_size * tr->block_size;
    if (full) tr->dequantize(src, y, full);
    if (full < n) {
        float pad[MAX_BLOCK];
        tr->dequantize((const uint8_t *)src + full / tr->block_size * tr->block_bytes, pad, tr->block_size);
        memcpy(y + full, pad, (size_t)(n - full) * sizeof(float));
    }
}

void kvq_quantize_row(kvq_type t, const float *x, void *dst, int64_t n) {
    kvq_quantize_row_tr(kvq_type_get(t), x, dst, n);
}

void kvq_dequantize_row(kvq_type t, const void *src, float *y, int64_t n) {
    kvq_dequantize_row_tr(kvq_type_get(t), src, y, n);
}

float kvq_dot_row(kvq_type t, const void *row, const float *x, int64_t n) {
    const kvq_type_traits *tr = kvq_type_get(t);
    if (!tr || !tr->dot || n <= 0) return 0.0f;
    if (tr->row_bytes) return tr->dot(row, x, n);
    const int64_t full = n / tr->block_size * tr->block_size;
    float s = full ? tr->dot(row, x, full) : 0.0f;
    if (full < n) {
        float xpad[MAX_BLOCK] = {0};
        memcpy(xpad, x + full, (size_t)(n - full) * sizeof(float));
        s += tr->dot((const uint8_t *)row + full / tr->block_size * tr->block_bytes, xpad, tr->block_size);
    }
    return s;
}

void kvq_axpy_row(kvq_type t, float w, const void *row, float *y, int64_t n) {
    const kvq_type_traits *tr = kvq_type_get(t);
    if (!tr || !tr->axpy || n <= 0) return;
    if (tr->row_bytes) { tr->axpy(w, row, y, n); return; }
    const int64_t full = n / tr->block_size * tr->block_size;
    if (full) tr->axpy(w, row, y, full);
    if (full < n) {
        float pad[MAX_BLOCK] = {0};
        tr->axpy(w, (const uint8_t *)row + full / tr->block_size * tr->block_bytes, pad, tr->block_size);
        for (int64_t i = full; i < n; i++) y[i] += pad[i - full];
    }
}

uint16_t kvq_fp32_to_fp16(float f) { return kvq_float_to_half(f); }
float kvq_fp16_to_fp32(uint16_t h) { return kvq_half_to_float(h); }
uint16_t kvq_fp32_to_bf16(float f) { return kvq_float_to_bfloat(f); }
float kvq_bf16_to_fp32(uint16_t h) { return kvq_bfloat_to_float(h); }
