/* turbo_tcq64.c - the byte tables of the trellis look-up kernels, and the
 * kernels' scalar instance: turbo_tcq64.inc with every vector primitive
 * written out on arrays (64 bytes, 16 floats), one statement per lane, so
 * the logic of the AVX-512 VBMI kernels (spreading the codes, the
 * multishifts, the table look-ups and blends, the bytes' widening and
 * the transposes) runs on every machine.  Its float operations are the
 * VBMI instance's, lane for lane (fmaf per lane, the same add tree), so
 * the two give the same bits; the tests compare them, and this instance
 * with the reference kernels of turbo_tcq.c to float rounding.  It is
 * not installed at any level: the scalar level's reference is faster in
 * plain C. */
#include "turbo_tcq64.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ------------------------------------------------------------ tables */

static tcq64_tables g_tables[3];
static pthread_once_t g_tables_once = PTHREAD_ONCE_INIT;

static void make_tables(void) {
    for (int k = 2; k <= 4; k++) {
        tcq64_tables *tb = &g_tables[k - 2];
        static const int widen_order[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
        for (int i = 0; i < 8; i++)
            for (int j = 0; j < 8; j++) {
                tb->word_bytes[8 * i + j] = (uint8_t)(k * i + j);
                tb->word_bytes_w[8 * i + j] = (uint8_t)(k * widen_order[i] + j);
                tb->shift_lo[8 * i + j] = (uint8_t)(j * k);
                tb->shift_hi[8 * i + j] = (uint8_t)(j * k + 7);
            }
        const int8_t *n = turbo_tcq_codebook_steps(k);
        for (int e = 0; e < 1 << (KVQ_TURBO_TCQ_CONTEXT + k); e++) {
            tb->steps[e >> 7][e & 127] = (uint8_t)n[e];
            tb->steps_u[e >> 7][e & 127] = (uint8_t)(n[e] + 128);
        }
    }
}

const tcq64_tables *tcq64_tables_for(int k) {
    pthread_once(&g_tables_once, make_tables);
    return &g_tables[k < 2 ? 0 : k > 4 ? 2 : k - 2];
}

/* ---------------------------------------- the primitives, lane by lane */

#define ALWAYS_INLINE static inline
#define UNROLL64

typedef struct bv_scalar { uint8_t b[64]; } BV;
typedef uint64_t BM;

static inline BV bv_load(const uint8_t *p) { BV r; memcpy(r.b, p, 64); return r; }
static inline BV bv_load_n(const uint8_t *p, int n) {
    BV r;
    memset(r.b, 0, sizeof r.b);
    memcpy(r.b, p, (size_t)n);
    return r;
}
static inline BV bv_loadu(const void *p) { BV r; memcpy(r.b, p, 64); return r; }
static inline BV bv_zero(void) { BV r; memset(r.b, 0, sizeof r.b); return r; }
/* punpcklbw / punpckhbw: per 16-byte quarter, its low (high) 8 bytes of a
 * and b interleaved */
static inline BV bv_unpack8(BV a, BV b, int high) {
    BV r;
    for (int q = 0; q < 4; q++)
        for (int i = 0; i < 8; i++) {
            r.b[16 * q + 2 * i] = a.b[16 * q + 8 * high + i];
            r.b[16 * q + 2 * i + 1] = b.b[16 * q + 8 * high + i];
        }
    return r;
}
static inline BV bv_unpacklo8(BV a, BV b) { return bv_unpack8(a, b, 0); }
static inline BV bv_unpackhi8(BV a, BV b) { return bv_unpack8(a, b, 1); }
static inline BV bv_set1_pair(const int16_t *p) {
    BV r;
    for (int l = 0; l < 16; l++) memcpy(r.b + 4 * l, p, 4);
    return r;
}
static inline BV bv_permute(BV idx, BV a) {
    BV r;
    for (int i = 0; i < 64; i++) r.b[i] = a.b[idx.b[i] & 63];
    return r;
}
static inline BV bv_multishift(BV c, BV a) {
    BV r;
    for (int w = 0; w < 8; w++) {
        const uint64_t x = kvq_rd64(a.b + 8 * w);
        for (int j = 0; j < 8; j++) {
            const unsigned s = c.b[8 * w + j] & 63u;
            r.b[8 * w + j] = (uint8_t)(s ? x >> s | x << (64 - s) : x);
        }
    }
    return r;
}
static inline BV bv_lookup2(BV t0, BV idx, BV t1) {
    BV r;
    for (int i = 0; i < 64; i++) r.b[i] = (idx.b[i] & 64 ? t1 : t0).b[idx.b[i] & 63];
    return r;
}
static inline BM bv_test(BV a, int bit) {
    BM m = 0;
    for (int i = 0; i < 64; i++) m |= (BM)((a.b[i] & bit) != 0) << i;
    return m;
}
static inline BV bv_blend(BM m, BV a, BV b) {
    BV r;
    for (int i = 0; i < 64; i++) r.b[i] = (m >> i & 1) ? b.b[i] : a.b[i];
    return r;
}

typedef struct lf_scalar { float f[16]; } LF;
static inline LF lf_zero(void) { LF r; for (int l = 0; l < 16; l++) r.f[l] = 0.0f; return r; }
static inline LF lf_load(const float *p) { LF r; memcpy(r.f, p, sizeof r.f); return r; }
static inline void lf_store(float *p, LF v) { memcpy(p, v.f, sizeof v.f); }
static inline LF lf_set1(float x) { LF r; for (int l = 0; l < 16; l++) r.f[l] = x; return r; }
static inline LF lf_fma(LF a, LF b, LF c) {
    LF r;
    for (int l = 0; l < 16; l++) r.f[l] = fmaf(a.f[l], b.f[l], c.f[l]);
    return r;
}
static inline LF lf_mul(LF a, LF b) {
    LF r;
    for (int l = 0; l < 16; l++) r.f[l] = a.f[l] * b.f[l];
    return r;
}
static inline void lf_from_steps(BV p, LF *v) {
    for (int m = 0; m < 4; m++)
        for (int l = 0; l < 16; l++) v[m].f[l] = (float)(int8_t)p.b[16 * (l / 4) + 4 * m + l % 4] * 0x1p24f;
}
static inline void lf_transpose4(LF *v) {
    for (int m = 0; m < 4; m++)
        for (int q = m + 1; q < 4; q++)
            for (int j = 0; j < 4; j++) {
                const float x = v[m].f[4 * q + j];
                v[m].f[4 * q + j] = v[q].f[4 * m + j];
                v[q].f[4 * m + j] = x;
            }
}
typedef struct li_scalar { int32_t i[16]; } LI;
static inline LI li_zero(void) { LI r; for (int l = 0; l < 16; l++) r.i[l] = 0; return r; }
/* vpdpbusd: lane l += the 4 products of unsigned bytes u and signed s */
static inline LI li_dpbusd(LI acc, BV u, BV s) {
    for (int l = 0; l < 16; l++)
        for (int j = 0; j < 4; j++) acc.i[l] += (int32_t)u.b[4 * l + j] * (int8_t)s.b[4 * l + j];
    return acc;
}
/* vpdpwssd: lane l += the 2 products of the int16 pairs of a and b */
static inline LI li_dpwssd(LI acc, BV a, BV b) {
    for (int l = 0; l < 16; l++)
        for (int j = 0; j < 2; j++)
            acc.i[l] += (int32_t)(int16_t)kvq_rd16(a.b + 4 * l + 2 * j) * (int16_t)kvq_rd16(b.b + 4 * l + 2 * j);
    return acc;
}
static inline LI li_set1(int32_t x) { LI r; for (int l = 0; l < 16; l++) r.i[l] = x; return r; }
static inline LI li_sub(LI a, LI b) { for (int l = 0; l < 16; l++) a.i[l] -= b.i[l]; return a; }
static inline LF lf_add(LF a, LF b) { for (int l = 0; l < 16; l++) a.f[l] += b.f[l]; return a; }
static inline LI li_add(LI a, LI b) { for (int l = 0; l < 16; l++) a.i[l] += b.i[l]; return a; }
static inline int32_t li_hsum(LI a) { int32_t s = 0; for (int l = 0; l < 16; l++) s += a.i[l]; return s; }
static inline void li_store_i16(int16_t *p, LI a) { for (int l = 0; l < 16; l++) p[l] = (int16_t)a.i[l]; }
static inline LF lf_load_m(const float *p, uint32_t m) {
    LF r;
    for (int l = 0; l < 16; l++) r.f[l] = m >> l & 1 ? p[l] : 0.0f;
    return r;
}
static inline LF lf_coef(LF w, LF bs) { for (int l = 0; l < 16; l++) w.f[l] = turbo_value_coef(w.f[l], bs.f[l]); return w; }
static inline bool lf_finite(LF a) { bool f = true; for (int l = 0; l < 16; l++) f &= isfinite(a.f[l]) != 0; return f; }
static inline float lf_absmax(LF a) { float m = 0.0f; for (int l = 0; l < 16; l++) m = fmaxf(m, fabsf(a.f[l])); return m; }
/* ties to even, as vcvtps2dq (|x| < 2^22 here) */
static inline LI lf_round(LF a) {
    LI r;
    for (int l = 0; l < 16; l++) r.i[l] = (int32_t)((a.f[l] + KVQ_ROUND_MAGIC) - KVQ_ROUND_MAGIC);
    return r;
}
static inline LF li_to_lf(LI a) { LF r; for (int l = 0; l < 16; l++) r.f[l] = (float)a.i[l]; return r; }
typedef struct f4_scalar { float f[4]; } F4;
/* The VBMI instance's tree (kvq_v16_hsum4, src/base/simd512.h): lane j
 * of quarters 0 + 2 and 1 + 3 first, then those two, then the 4 lanes in
 * pairs. */
static inline float lanes_sum(LF a) {
    float x[4];
    for (int j = 0; j < 4; j++) x[j] = (a.f[j] + a.f[8 + j]) + (a.f[4 + j] + a.f[12 + j]);
    return (x[0] + x[1]) + (x[2] + x[3]);
}
static inline F4 lanes_reduce4(LF a, LF b, LF c, LF d) {
    F4 r = { { lanes_sum(a), lanes_sum(b), lanes_sum(c), lanes_sum(d) } };
    return r;
}

#define TCQ64_NAME(x) tcq64_##x##_scalar
#include "turbo_tcq64.inc"
