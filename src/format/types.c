/*
 * types.c - the table of storage types: one row per type (format_row.h).
 *
 * A row is written with designated initialisers; its sizes come from the
 * format's block description (KVQ_BLOCK_BYTES, TURBO_BYTES, ...), derived
 * once here and checked against the numbers of docs/spec/formats.md by
 * _Static_assert.  The table holds the scalar reference kernels;
 * kvq_type_get() returns a copy in which the SIMD files have replaced
 * what they implement for this CPU.  The cache installs each cache type's
 * attention and record hooks into its row at start-up (src/cache/row_hooks.c).
 */
#include "format_row.h"
#include "quant_block.h"
#include "quant_kquants.h"
#include "simd.h"
#include "kquants_simd.h"
#include "turbo_traits.h"
#include "calib.h"
#include "kvarn.h"

#include <pthread.h>
#include <stdlib.h>

/* ------------------------------------------------------------ sizes */

/* TurboQuant (src/format/turbo.h): per 128 values an fp16 norm, then the
 * code stream: b bits per value, or (trellis) 6 state bits and k bits per
 * value padded to whole fp16 words. */
#define TURBO_BYTES(BITS) (2 + 128 * (BITS) / 8)
#define TURBO_TCQ_BYTES(BITS) ((2 + (6 + 128 * (BITS) + 7) / 8 + 1) / 2 * 2)
/* KVarN (src/format/kvarn.h): one 128 x 128 record, b-bit codes and fp16
 * S, Z per row and O per column of its matrix (2 x 128 + 128 halves). */
#define KVARN_TILE_VALUES (KVQ_KVARN_TILE * 128)
#define KVARN_RECORD_BYTES(BITS) (KVARN_TILE_VALUES * (BITS) / 8 + 2 * (2 * 128 + 128))

/* The sizes that are facts of the formats (ggml's blocks; the spec's
 * TurboQuant and KVarN records). */
_Static_assert(KVQ_BYTES_Q8_0 == 34 && KVQ_BYTES_Q4_0 == 18 && KVQ_BYTES_Q4_1 == 20 && KVQ_BYTES_Q5_0 == 22 &&
               KVQ_BYTES_Q5_1 == 24 && KVQ_BYTES_IQ4_NL == 18, "ggml's block sizes");
_Static_assert(TURBO_BYTES(2) == 34 && TURBO_BYTES(3) == 50 && TURBO_BYTES(4) == 66, "turbo block sizes");
_Static_assert(TURBO_TCQ_BYTES(2) == 36 && TURBO_TCQ_BYTES(3) == 52 && TURBO_TCQ_BYTES(4) == 68,
               "turbo trellis block sizes");
_Static_assert(KVARN_RECORD_BYTES(4) == 2048 * 4 + 768, "KVarN record size");

/* ------------------------------------------------------------ rows */

#define KERNELS(K) .quantize = kvq_##K##_quantize, .dequantize = kvq_##K##_dequantize, .dot = kvq_##K##_dot, \
                   .axpy = kvq_##K##_axpy
/* f32, f16, bf16: one value per "block", stored exactly enough for the cache's exact rows. */
#define PLAIN(NAME, BYTES, GGML, K) \
    { .name = NAME, .block_size = 1, .block_bytes = BYTES, .ggml_id = GGML, .is_cache_type = true, KERNELS(K) }
/* The 32-value block types (src/format/quant_block.c): codes of BITS bits, a min or not. */
#define BLOCK32(NAME, BITS, HAS_MIN, GGML, K)                                                           \
    { .name = NAME, .block_size = KVQ_BLOCK, .block_bytes = KVQ_BLOCK_BYTES(BITS, HAS_MIN), .ggml_id = GGML, \
      .is_cache_type = true, .is_block_quant = true, KERNELS(K) }
/* Weight-only K-quants: kvq reads them, it never writes them (no quantiser). */
#define KQUANT(NAME, BYTES, GGML, K)                                                                     \
    { .name = NAME, .block_size = 256, .block_bytes = BYTES, .ggml_id = GGML, .dequantize = kvq_##K##_dequantize, \
      .dot = kvq_##K##_dot, .axpy = kvq_##K##_axpy }
/* KVarN tiles: the "block" is one 128 x 128 record, rotated per slice by
 * the format; no row kernels: the cache quantises and reads records
 * through the row's hooks (src/cache/cache_tiles.c). */
#define KVARN(NAME, BITS)                                                                                 \
    { .name = NAME, .block_size = KVARN_TILE_VALUES, .block_bytes = KVARN_RECORD_BYTES(BITS), .ggml_id = -1, \
      .is_cache_type = true, .layout = KVQ_LAYOUT_TILES, .format_rot = KVQ_FMT_ROT_SLICE, .bits = BITS }
/* TurboQuant (src/format/turbo_traits.c): blocks of 128 values, its own
 * row layout (row_bytes), the format's rotation, scalar kernels here
 * (kvq_simd_table installs the dispatching ones for avx2/avx512). */
#define TURBO(NAME, BYTES128, K)                                                                         \
    { .name = NAME, .block_size = 128, .block_bytes = BYTES128, .ggml_id = -1, .is_cache_type = true,      \
      .format_rot = KVQ_FMT_ROT_TURBO, .row_bytes = kvq_##K##_row_bytes, .quantize = kvq_##K##_quantize_scalar, \
      .dequantize = kvq_##K##_dequantize, .dot = kvq_##K##_dot_scalar, .axpy = kvq_##K##_axpy_scalar }
/* Calibrated rows (src/cache/cache_calib.c, docs/calibration.md): ceil(rate *
 * n / 800) bytes per row of n values; block 32 gives kvq_type_bpv the
 * rate.  No row kernels: a row's layout is its KV head's bit allocation,
 * known only from a calibration, so the cache reads them through the
 * row's hooks. */
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
#define CALIBRATED(NAME, RATE)                                                                          \
    { .name = NAME, .block_size = 32, .block_bytes = (RATE) * 32 / 800, .ggml_id = -1, .is_cache_type = true, \
      .format_rot = KVQ_FMT_ROT_CALIB, .row_bytes = cal##RATE##_row_bytes, .calib_rate = RATE }

static kvq_format_row g_rows[KVQ_TYPE_COUNT] = {
    [KVQ_TYPE_F32]        = { .traits = PLAIN("f32", 4, 0, f32) },
    [KVQ_TYPE_F16]        = { .traits = PLAIN("f16", 2, 1, f16) },
    [KVQ_TYPE_BF16]       = { .traits = PLAIN("bf16", 2, 30, bf16) },
    [KVQ_TYPE_Q8_0]       = { .traits = BLOCK32("q8_0", 8, false, 8, q8_0) },
    [KVQ_TYPE_Q6_0]       = { .traits = BLOCK32("q6_0", 6, false, -1, q6_0) },
    [KVQ_TYPE_Q6_1]       = { .traits = BLOCK32("q6_1", 6, true, -1, q6_1) },
    [KVQ_TYPE_Q5_0]       = { .traits = BLOCK32("q5_0", 5, false, 6, q5_0) },
    [KVQ_TYPE_Q5_1]       = { .traits = BLOCK32("q5_1", 5, true, 7, q5_1) },
    [KVQ_TYPE_Q4_0]       = { .traits = BLOCK32("q4_0", 4, false, 2, q4_0) },
    [KVQ_TYPE_Q4_1]       = { .traits = BLOCK32("q4_1", 4, true, 3, q4_1) },
    [KVQ_TYPE_IQ4_NL]     = { .traits = BLOCK32("iq4_nl", 4, false, 20, iq4_nl) },
    [KVQ_TYPE_Q3_0]       = { .traits = BLOCK32("q3_0", 3, false, -1, q3_0) },
    [KVQ_TYPE_Q3_1]       = { .traits = BLOCK32("q3_1", 3, true, -1, q3_1) },
    [KVQ_TYPE_Q2_0]       = { .traits = BLOCK32("q2_0", 2, false, -1, q2_0) },
    [KVQ_TYPE_Q2_1]       = { .traits = BLOCK32("q2_1", 2, true, -1, q2_1) },
    [KVQ_TYPE_Q4_K]       = { .traits = KQUANT("q4_K", 144, 12, q4_K) },
    [KVQ_TYPE_Q5_K]       = { .traits = KQUANT("q5_K", 176, 13, q5_K) },
    [KVQ_TYPE_Q6_K]       = { .traits = KQUANT("q6_K", 210, 14, q6_K) },
    [KVQ_TYPE_KVARN2]     = { .traits = KVARN("kvarn2", 2) },
    [KVQ_TYPE_KVARN3]     = { .traits = KVARN("kvarn3", 3) },
    [KVQ_TYPE_KVARN4]     = { .traits = KVARN("kvarn4", 4) },
    [KVQ_TYPE_KVARN5]     = { .traits = KVARN("kvarn5", 5) },
    [KVQ_TYPE_KVARN6]     = { .traits = KVARN("kvarn6", 6) },
    [KVQ_TYPE_KVARN8]     = { .traits = KVARN("kvarn8", 8) },
    [KVQ_TYPE_TURBO2]     = { .traits = TURBO("turbo2", TURBO_BYTES(2), turbo2) },
    [KVQ_TYPE_TURBO3]     = { .traits = TURBO("turbo3", TURBO_BYTES(3), turbo3) },
    [KVQ_TYPE_TURBO4]     = { .traits = TURBO("turbo4", TURBO_BYTES(4), turbo4) },
    [KVQ_TYPE_TURBO2_TCQ] = { .traits = TURBO("turbo2_tcq", TURBO_TCQ_BYTES(2), turbo2_tcq) },
    [KVQ_TYPE_TURBO3_TCQ] = { .traits = TURBO("turbo3_tcq", TURBO_TCQ_BYTES(3), turbo3_tcq) },
    [KVQ_TYPE_TURBO4_TCQ] = { .traits = TURBO("turbo4_tcq", TURBO_TCQ_BYTES(4), turbo4_tcq) },
    [KVQ_TYPE_CAL225]     = { .traits = CALIBRATED("cal225", 225) },
    [KVQ_TYPE_CAL250]     = { .traits = CALIBRATED("cal250", 250) },
    [KVQ_TYPE_CAL300]     = { .traits = CALIBRATED("cal300", 300) },
    [KVQ_TYPE_CAL325]     = { .traits = CALIBRATED("cal325", 325) },
    [KVQ_TYPE_CAL350]     = { .traits = CALIBRATED("cal350", 350) },
    [KVQ_TYPE_CAL425]     = { .traits = CALIBRATED("cal425", 425) },
};

static kvq_type_traits g_active[KVQ_TYPE_COUNT];
static const char *g_level = "scalar";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The row kernels of one level: the scalar rows with what the SIMD files
 * implement installed over them (each install overwrites only its own). */
static void fill_table(kvq_isa isa, kvq_type_traits table[KVQ_TYPE_COUNT]) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) table[t] = g_rows[t].traits;
#if defined(__x86_64__)
    if (isa >= KVQ_ISA_AVX2) kvq_simd_install_avx2(table);
    if (isa >= KVQ_ISA_AVX2) kvq_kquants_install_avx2(table);
    if (isa >= KVQ_ISA_AVX512) kvq_simd_install_avx512(table);
    if (isa >= KVQ_ISA_AVX512) kvq_kquants_install_avx512(table);
#endif
    if (isa >= KVQ_ISA_AVX2) kvq_turbo_install_active(table);
}

/* The level named `level` if this CPU (and KVQ_FORCE_*) allows it. */
static bool allowed_level(const char *level, kvq_isa *isa) {
    for (int i = 0; i <= (int)kvq_isa_best(); i++)
        if (strcmp(level, kvq_isa_name((kvq_isa)i)) == 0) {
            *isa = (kvq_isa)i;
            return true;
        }
    return false;
}

bool kvq_simd_table(const char *level, kvq_type_traits table[KVQ_TYPE_COUNT]) {
    kvq_isa isa;
    if (!allowed_level(level, &isa)) return false;
    fill_table(isa, table);
    return true;
}

const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops(const char *level) {
    kvq_isa isa;
    if (!allowed_level(level, &isa)) return NULL;
    switch (isa) {
    case KVQ_ISA_SCALAR: return kvq_iq4nl_ops_scalar();
    case KVQ_ISA_AVX2: return kvq_simd_iq4nl_ops_avx2();
    case KVQ_ISA_AVX512: return kvq_simd_iq4nl_ops_avx512();
    default: return NULL;
    }
}

static void init_active(void) {
    g_level = kvq_isa_name(kvq_isa_best());
    fill_table(kvq_isa_best(), g_active);
}

static bool valid(kvq_type t) { return (unsigned)t < KVQ_TYPE_COUNT && g_rows[t].traits.name; }

const kvq_type_traits *kvq_type_get(kvq_type t) {
    if (!valid(t)) return NULL;
    pthread_once(&g_once, init_active);
    return &g_active[t];
}

const kvq_type_traits *kvq_type_get_scalar(kvq_type t) { return valid(t) ? &g_rows[t].traits : NULL; }

const kvq_format_row *kvq_format_row_get(kvq_type t) { return valid(t) ? &g_rows[t] : NULL; }

void kvq_format_set_hooks(kvq_type t, const struct kvq_row_hooks *hooks) {
    if (valid(t)) g_rows[t].hooks = hooks;
}

const char *kvq_simd_level(void) {
    pthread_once(&g_once, init_active);
    return g_level;
}

const char *kvq_type_name(kvq_type t) { return valid(t) ? g_rows[t].traits.name : "?"; }

kvq_type kvq_type_from_name(const char *name) {
    if (!name) return KVQ_TYPE_COUNT;
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)
        if (g_rows[t].traits.name && strcmp(g_rows[t].traits.name, name) == 0) return (kvq_type)t;
    return KVQ_TYPE_COUNT;
}

kvq_type kvq_type_from_ggml_id(int id) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)
        if (g_rows[t].traits.name && g_rows[t].traits.ggml_id == id && id >= 0) return (kvq_type)t;
    return KVQ_TYPE_COUNT;
}

double kvq_type_bpv(kvq_type t) {
    if (!valid(t)) return 0.0;
    return 8.0 * g_rows[t].traits.block_bytes / g_rows[t].traits.block_size;
}

size_t kvq_row_bytes(kvq_type t, int64_t n) {
    if (!valid(t) || n <= 0) return 0;
    const kvq_type_traits *tr = &g_rows[t].traits;
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
