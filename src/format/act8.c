/*
 * act8.c - int8 activations (act8.h): the quantiser every level shares,
 * the scalar dot kernels that define the order of the float sums, and the
 * table of each level.
 */
#include "act8.h"
#include "quant_block.h"
#include "quant_kquants.h"

#include <math.h>
#include <pthread.h>

/* One block of n values: the scale, codes in q.  The rounding adds and
 * subtracts 1.5 * 2^23, which leaves |v| <= 127 rounded to the nearest
 * integer, ties to even, in the default rounding mode (the one kvq runs
 * in); v is clamped first, so the conversion to int is always defined. */
static float quantize_block(const float *x, int n, int8_t *q) {
    uint32_t worst = 0;
    for (int i = 0; i < n; i++) worst = KVQ_MAX(worst, kvq_f32_bits(x[i]) & 0x7fffffffu);
    if (worst >= 0x7f800000u || kvq_bits_f32(worst) < KVQ_ACT8_TINY) {
        memset(q, 0, (size_t)n);                       /* non-finite: d NaN; tiny or zero: d 0 */
        return worst >= 0x7f800000u ? NAN : 0.0f;
    }
    const float amax = kvq_bits_f32(worst);
    const float id = 127.0f / amax, magic = KVQ_ROUND_MAGIC;
    for (int i = 0; i < n; i++) {
        float v = x[i] * id;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        v = (v + magic) - magic;
        q[i] = (int8_t)(int)v;
    }
    return amax / 127.0f;
}

int kvq_act8_block(kvq_type t) {
    switch (t) {
    case KVQ_TYPE_Q8_0: case KVQ_TYPE_Q4_0: return 32;
    case KVQ_TYPE_Q4_K: case KVQ_TYPE_Q5_K: case KVQ_TYPE_Q6_K: return KVQ_QK_K;
    default: return 0;
    }
}

size_t kvq_act8_row_bytes(kvq_type t, int64_t n) {
    const int b = kvq_act8_block(t);
    if (!b || n < 0) return 0;
    const size_t blocks = (size_t)((n + b - 1) / b);
    return blocks * (b == 32 ? sizeof(kvq_xq32) : sizeof(kvq_xq256));
}

size_t kvq_act8_row_bytes_max(int64_t n) {
    return KVQ_MAX(kvq_act8_row_bytes(KVQ_TYPE_Q8_0, n), kvq_act8_row_bytes(KVQ_TYPE_Q4_K, n));
}

void kvq_act8_quantize(kvq_type t, const float *x, int64_t n, void *xq) {
    const int b = kvq_act8_block(t);
    if (b == 32) {
        kvq_xq32 *o = xq;
        for (int64_t i = 0; i < n; i += 32, o++) o->d = quantize_block(x + i, 32, o->q);
    } else if (b == KVQ_QK_K) {
        kvq_xq256 *o = xq;
        for (int64_t i = 0; i < n; i += KVQ_QK_K, o++) {
            o->d = quantize_block(x + i, KVQ_QK_K, o->q);
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int k = 0; k < 16; k++) s += o->q[16 * g + k];
                o->sum[g] = (int16_t)s;
            }
        }
    }
}

/* ------------------------------------------------ scalar: the definition */

/* acc[l] += scale * (float)lanes[l], two roundings each. */
static void add_lanes(float acc[8], float scale, const int32_t lanes[8]) {
    for (int l = 0; l < 8; l++) {
        const float p = scale * (float)lanes[l];
        acc[l] = acc[l] + p;
    }
}

/* Lane sums of 32 signed codes times 32 int8 activations. */
static void lanes32(const int8_t *w, const int8_t *x, int32_t lanes[8]) {
    for (int l = 0; l < 8; l++) {
        int32_t s = 0;
        for (int i = 4 * l; i < 4 * l + 4; i++) s += (int32_t)w[i] * x[i];
        lanes[l] = s;
    }
}

/* The 32 codes of a q8_0 / q4_0 block as signed bytes. */
static void codes_q8_0(const uint8_t *b, int8_t c[32]) { memcpy(c, b + 2, 32); }
static void codes_q4_0(const uint8_t *b, int8_t c[32]) {
    for (int j = 0; j < 16; j++) {
        c[j] = (int8_t)((b[2 + j] & 15) - 8);
        c[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
    }
}

#define SCALAR_DOT32(name, BYTES)                                                     \
    static float scalar_##name(const void *row, const void *xq, int64_t n) {          \
        const uint8_t *b = row;                                                       \
        const kvq_xq32 *x = xq;                                                       \
        float acc[4][8] = { { 0 } }, sum[8];                                          \
        for (int64_t i = 0; i < n; i += 32, b += (BYTES), x++) {                      \
            int8_t c[32];                                                             \
            int32_t lanes[8];                                                         \
            codes_##name(b, c);                                                       \
            lanes32(c, x->q, lanes);                                                  \
            add_lanes(acc[(i / 32) % 4], kvq_half_to_float(kvq_rd16(b)) * x->d, lanes); \
        }                                                                             \
        for (int l = 0; l < 8; l++) {                                                 \
            const float s01 = acc[0][l] + acc[1][l], s23 = acc[2][l] + acc[3][l];     \
            sum[l] = s01 + s23;                                                       \
        }                                                                             \
        return kvq_act8_hsum(sum);                                                    \
    }
SCALAR_DOT32(q8_0, KVQ_BYTES_Q8_0)
SCALAR_DOT32(q4_0, KVQ_BYTES_Q4_0)

/* One K-quant super-block's lane sums in integers: S[l] = sum over the
 * 8 steps of 32 values of (lane l's 4 products u * x) times the scale of
 * their group of 16 (scale16).  u: unsigned codes. */
static void kq_lanes(const uint8_t *u, const int8_t *x, const int *scale16, int32_t S[8]) {
    for (int l = 0; l < 8; l++) S[l] = 0;
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 8; l++) {
            const int v0 = 32 * s + 4 * l;
            int32_t t = 0;
            for (int i = v0; i < v0 + 4; i++) t += (int32_t)u[i] * x[i];
            S[l] += scale16[v0 / 16] * t;
        }
}

/* Unsigned codes (0..31) and the per-16 scales of a Q4_K / Q5_K block. */
static void unpack_q45_K(const uint8_t *b, bool has_qh, uint8_t u[256], int scale16[16], int min8[8]) {
    uint64_t scw, mw;
    kvq_kq_scales_words(b, &scw, &mw);
    const uint8_t *qh = b + 16, *qs = has_qh ? b + 48 : b + 16;
    for (int j = 0; j < 8; j++) {
        scale16[2 * j] = scale16[2 * j + 1] = (int)(scw >> 8 * j) & 0xff;
        min8[j] = (int)(mw >> 8 * j) & 0xff;
        const uint8_t *q = qs + 32 * (j / 2);
        for (int l = 0; l < 32; l++) {
            int code = j & 1 ? q[l] >> 4 : q[l] & 15;
            if (has_qh) code |= ((qh[l] >> j) & 1) << 4;
            u[32 * j + l] = (uint8_t)code;
        }
    }
}

static float scalar_q45_K(const uint8_t *b, bool has_qh, int bytes, const kvq_xq256 *x, int64_t n) {
    float acc[8] = { 0 }, macc = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_QK_K, b += bytes, x++) {
        uint8_t u[256];
        int scale16[16], min8[8];
        int32_t S[8], M = 0;
        unpack_q45_K(b, has_qh, u, scale16, min8);
        kq_lanes(u, x->q, scale16, S);
        for (int j = 0; j < 8; j++) M += min8[j] * (x->sum[2 * j] + x->sum[2 * j + 1]);
        add_lanes(acc, kvq_half_to_float(kvq_rd16(b)) * x->d, S);
        const float pm = (kvq_half_to_float(kvq_rd16(b + 2)) * x->d) * (float)M;
        macc = macc + pm;
    }
    return kvq_act8_hsum(acc) - macc;
}

static float scalar_q4_K(const void *row, const void *xq, int64_t n) {
    return scalar_q45_K(row, false, KVQ_Q4_K_BYTES, xq, n);
}
static float scalar_q5_K(const void *row, const void *xq, int64_t n) {
    return scalar_q45_K(row, true, KVQ_Q5_K_BYTES, xq, n);
}

/* Q6_K: unsigned q (0..63, value d*sc*(q-32)); the -32 goes into M. */
static float scalar_q6_K(const void *row, const void *xq, int64_t n) {
    const uint8_t *b = row;
    const kvq_xq256 *x = xq;
    float acc[8] = { 0 }, macc = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_QK_K, b += KVQ_Q6_K_BYTES, x++) {
        uint8_t u[256];
        int scale16[16];
        int32_t S[8], M = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
            for (int l = 0; l < 32; l++) {
                const int lo[4] = { ql[l] & 15, ql[l + 32] & 15, ql[l] >> 4, ql[l + 32] >> 4 };
                for (int k = 0; k < 4; k++) u[128 * h + 32 * k + l] = (uint8_t)(lo[k] | (((qh[l] >> (2 * k)) & 3) << 4));
            }
        }
        for (int g = 0; g < 16; g++) scale16[g] = (int8_t)b[192 + g];
        kq_lanes(u, x->q, scale16, S);
        for (int g = 0; g < 16; g++) M += scale16[g] * x->sum[g];
        const float dd = kvq_half_to_float(kvq_rd16(b + 208)) * x->d;
        add_lanes(acc, dd, S);
        const float pm = dd * (float)(32 * M);
        macc = macc + pm;
    }
    return kvq_act8_hsum(acc) - macc;
}

/* -------------------------------------------------------------- tables */

static kvq_act8_dot_fn g_tables[KVQ_ACT8_LEVELS][KVQ_TYPE_COUNT];
static kvq_act8_dot4_fn g_tables4[KVQ_ACT8_LEVELS][KVQ_TYPE_COUNT];
static kvq_act8_level g_best = KVQ_ACT8_SCALAR;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void fill_tables(void) {
    kvq_act8_dot_fn *s = g_tables[KVQ_ACT8_SCALAR];
    s[KVQ_TYPE_Q8_0] = scalar_q8_0;
    s[KVQ_TYPE_Q4_0] = scalar_q4_0;
    s[KVQ_TYPE_Q4_K] = scalar_q4_K;
    s[KVQ_TYPE_Q5_K] = scalar_q5_K;
    s[KVQ_TYPE_Q6_K] = scalar_q6_K;
#if defined(__x86_64__)
    const kvq_isa isa = kvq_isa_best();
    if (isa >= KVQ_ISA_AVX2) {
        kvq_act8_install_avx2(g_tables[KVQ_ACT8_AVX2], g_tables4[KVQ_ACT8_AVX2]);
        g_best = KVQ_ACT8_AVX2;
    }
    if (isa >= KVQ_ISA_AVX512 && kvq_cpu_features()->avx512vnni) {
        kvq_act8_install_vnni(g_tables[KVQ_ACT8_VNNI], g_tables4[KVQ_ACT8_VNNI]);
        kvq_act8_install_vnni512(g_tables[KVQ_ACT8_VNNI512], g_tables4[KVQ_ACT8_VNNI512]);
        g_best = KVQ_ACT8_VNNI512;
    }
#endif
}

kvq_act8_level kvq_act8_level_best(void) {
    pthread_once(&g_once, fill_tables);
    return g_best;
}

kvq_act8_dot_fn kvq_act8_dot_level(kvq_type t, kvq_act8_level level) {
    pthread_once(&g_once, fill_tables);
    if ((unsigned)t >= KVQ_TYPE_COUNT || (unsigned)level >= KVQ_ACT8_LEVELS) return NULL;
    return g_tables[level][t];
}

kvq_act8_dot_fn kvq_act8_dot(kvq_type t) { return kvq_act8_dot_level(t, kvq_act8_level_best()); }

kvq_act8_dot4_fn kvq_act8_dot4_level(kvq_type t, kvq_act8_level level) {
    pthread_once(&g_once, fill_tables);
    if ((unsigned)t >= KVQ_TYPE_COUNT || (unsigned)level >= KVQ_ACT8_LEVELS) return NULL;
    return g_tables4[level][t];
}

kvq_act8_dot4_fn kvq_act8_dot4(kvq_type t) { return kvq_act8_dot4_level(t, kvq_act8_level_best()); }

const char *kvq_act8_level_name(kvq_act8_level level) {
    static const char *const names[KVQ_ACT8_LEVELS] = { "scalar", "avx2", "avx512-vnni", "avx512-vnni-zmm" };
    return (unsigned)level < KVQ_ACT8_LEVELS ? names[level] : "?";
}
