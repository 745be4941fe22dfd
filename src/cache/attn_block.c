/*
 * attn_block.c - the chunked key loop of attention (attn_block.h): the
 * scalar instance of the kernels (the same kernel source as the SIMD
 * levels, attn_block.inc and attn_codes.inc, so their logic runs on every
 * machine), the query's rounding to int16, the choice of ISA, and the row
 * hooks (row_hooks.h) of the plain and block types: the two steps the
 * attention pass calls per chunk (scores of the K rows, weighted sum of
 * the V rows) through the level's fused kernels (the 32-value block
 * types), in place (f32, f16, bf16), by decode (the default: unpacked
 * with the type's dequantize first) or per key (the reference).
 */
#include "attn_block.h"
#include "cache_lanes.h"
#include "format_row.h"
#include "row_hooks.h"
#include "turbo.h"
#include "turbo_traits.h"
#include "vec1.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ------------------------------------------------ the scalar instance */

#define BLOCK_LEVEL "scalar"
#define BLOCK_ISA KVQ_ISA_SCALAR
#define vsum_lanes(acc, s) ((s)[0] = (acc)[0])
#define BLOCK_KERNELS g_block_scalar
#define BLOCK_TILE_KERNELS g_block_scalar_tile
#define KVQ_UNROLL KVQ_UNROLL_N(2)   /* see attn_block.inc */

/* attn_codes.inc's primitives: a block's codes as an array of 32 int8,
 * one value per "vector". */
typedef struct vb_scalar { int8_t v[32]; } vb_scalar;
#define VB vb_scalar
static inline VB vb_load(const uint8_t *p) { VB r; memcpy(r.v, p, 32); return r; }
static inline VB vb_nib(const uint8_t *p) {
    VB r;
    for (int j = 0; j < 16; j++) { r.v[j] = (int8_t)(p[j] & 15); r.v[j + 16] = (int8_t)(p[j] >> 4); }
    return r;
}
static inline VB vb_crumb(const uint8_t *p) {
    VB r;
    for (int j = 0; j < 8; j++)
        for (int k = 0; k < 4; k++) r.v[j + 8 * k] = (int8_t)((p[j] >> (2 * k)) & 3);
    return r;
}
static inline VB vb_bit(const uint8_t *p) {
    const uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    VB r;
    for (int j = 0; j < 32; j++) r.v[j] = (int8_t)((bits >> j) & 1);
    return r;
}
static inline VB vb_or_shl(VB a, VB b, int s) {
    for (int j = 0; j < 32; j++) a.v[j] = (int8_t)(a.v[j] | (b.v[j] << s));
    return a;
}
static inline VB vb_sub(VB a, int k) {
    for (int j = 0; j < 32; j++) a.v[j] = (int8_t)(a.v[j] - k);
    return a;
}
static inline VB vb_lut(VB a, const int8_t *tbl) {
    for (int j = 0; j < 32; j++) a.v[j] = tbl[a.v[j] & 15];
    return a;
}
typedef struct vw_scalar { int16_t v[32]; } vw_scalar;
#define VW vw_scalar
static inline VW vb_widen(VB c) {
    VW r;
    for (int j = 0; j < 32; j++) r.v[j] = c.v[j];
    return r;
}
static inline VW vw_nib(const uint8_t *p) {
    VW r;
    for (int j = 0; j < 16; j++) { r.v[j] = (int16_t)(p[j] & 15); r.v[j + 16] = (int16_t)(p[j] >> 4); }
    return r;
}
static inline VW vw_s8(const uint8_t *p) {
    VW r;
    for (int j = 0; j < 32; j++) r.v[j] = (int8_t)p[j];
    return r;
}
static inline void vf_s8(const uint8_t *p, float *x) {
    for (int j = 0; j < 32; j++) x[j] = (float)(int8_t)p[j];
}
static inline void vw_dot4(const VW *c, const int16_t *qi, int32_t sub, int32_t *s) {
    for (int t = 0; t < 4; t++) {
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) sum += c[t].v[j] * qi[j];
        s[t] = sum - sub;
    }
}
static inline void vb_floats(VB c, float *x) {
    for (int j = 0; j < 32; j++) x[j] = (float)c.v[j];
}
#define vcvt_i32(p) ((float)*(p))
#define vhalf(p) kvq_half_to_float(*(p))
#define VI int32_t
#define vi_set1(x) ((int32_t)(x))
#define vi_load(p) ((int32_t)kvq_rd32(p))
#define vi_float(x) ((float)(x))
#define vhalf_bytes(p) kvq_half_to_float(kvq_rd16(p))
#define vhalf_bytes_in(p, lo, hi) ((lo) <= 0 && (hi) > 0 ? vhalf_bytes(p) : 0.0f)
static inline int16_t lo16(int32_t x) { return (int16_t)(uint16_t)((uint32_t)x & 0xFFFFu); }
static inline int16_t hi16(int32_t x) { return (int16_t)(uint16_t)((uint32_t)x >> 16); }
static inline int32_t pair16(int a, int b) { return (int32_t)((uint32_t)(uint16_t)a | (uint32_t)(uint16_t)b << 16); }
static inline int32_t vi_madd(int32_t acc, int32_t c, int32_t w) {
    return acc + lo16(c) * lo16(w) + hi16(c) * hi16(w);
}
static inline int32_t vi_field(int32_t x, int s, uint32_t m) {
    return (int32_t)((s >= 0 ? (uint32_t)x >> s : (uint32_t)x << -s) & m);
}
#define vi_or(a, b) ((int32_t)((uint32_t)(a) | (uint32_t)(b)))
#define vi_nib_bytes(x, s) ((int32_t)(((uint32_t)(x) >> (s)) & 0x0F0F0F0Fu))
static inline int32_t vi_byte(int32_t x, int i) { return (int8_t)(uint8_t)((uint32_t)x >> (8 * i)); }
#define vi_s8_even(x) pair16(vi_byte((x), 0), vi_byte((x), 2))
#define vi_s8_odd(x) pair16(vi_byte((x), 1), vi_byte((x), 3))
static inline int32_t vi_book(int32_t x, const int8_t *book) {
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(uint8_t)book[((uint32_t)x >> (8 * i)) & 15] << (8 * i);
    return (int32_t)r;
}
/* the V pairs kernel's (attn_codes.inc pairs_accumulate): one lane */
static inline int snib16(int16_t h, int k) { return (int)(((unsigned)(uint16_t)h >> (4 * k) & 15u) ^ 8u) - 8; }
#define vi_snib(x, k) pair16(snib16(lo16(x), (k)), snib16(hi16(x), (k)))
/* int16 x >> n, arithmetic (two's complement by the flipped top bit, not
 * by the compiler's >> of a negative number) */
static inline int sra16(int16_t h, int n) {
    const unsigned top = 0x8000u >> n;
    return (int)(((unsigned)(uint16_t)h >> n) ^ top) - (int)top;
}
#define vi_sra16(x, n) pair16(sra16(lo16(x), (n)), sra16(hi16(x), (n)))
/* the int8 query's lanes sums (attn_codes.inc lanes_nib_sums8): four
 * products of unsigned and signed bytes added into an int32, as VNNI's
 * vpdpbusd does (so that the form the VNNI level runs also runs here, on
 * every machine; the AVX2 and AVX-512 levels run the vpmaddubsw form) */
static inline int ubyte(int32_t x, int i) { return (int)(((uint32_t)x >> (8 * i)) & 0xFFu); }
static inline int32_t vi_dpbusd(int32_t acc, int32_t u, int32_t s) {
    int32_t sum = 0;
    for (int i = 0; i < 4; i++) sum += ubyte(u, i) * vi_byte(s, i);
    return (int32_t)((uint32_t)acc + (uint32_t)sum);
}
#define vi_dpbusd vi_dpbusd
static inline int shl16(int16_t h, int n) { return (int)(uint16_t)(n >= 0 ? (unsigned)(uint16_t)h << n : (unsigned)(uint16_t)h >> -n); }
#define vi_shl16(x, n) pair16(shl16(lo16(x), (n)), shl16(hi16(x), (n)))
#define vi_select(m, a, b) ((int32_t)(((uint32_t)(a) & (uint32_t)(m)) | ((uint32_t)(b) & ~(uint32_t)(m))))
#define vi_load_b2w(p) pair16((p)[0], (p)[1])
#define vi_load_b2d(p) ((int32_t)(p)[0])
#define vi_pair_w(p, lane) pair16((p)[2 * ((lane) % 2)], (p)[2 * ((lane) % 2) + 1])
#define vi_store(p, x) (*(p) = (x))
#define vi_add(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define vi_round(x) ((int32_t)lrintf(x))
#define vi_hsum(x) (x)
static inline void vf_unzip(float a, float b, float *e, float *o) { *e = a; *o = b; }
#define PAIRS_ACC 8
#define FUSED_V_HEADS 4
#define FUSED_TABLE g_fused_scalar

/* attn_kvarn.inc's primitives: a token's 32 codes of a block unpacked
 * from its bit stream (as kvq_kvarn_unpack), |x|, rounding to int16. */
typedef struct kvd_scalar { int bits; } kvd_scalar;
#define KVD kvd_scalar
static inline KVD kvd_make(int bits) { KVD d = { bits }; return d; }
static inline VW vw_kvarn(const KVD *d, const uint8_t *p, int bits) {
    (void)d;
    VW r;
    const uint64_t mask = (1u << bits) - 1;
    for (int g = 0; g < 4; g++, p += bits) {
        uint64_t word = 0;
        for (int k = 0; k < bits; k++) word |= (uint64_t)p[k] << (8 * k);
        for (int j = 0; j < 8; j++) r.v[8 * g + j] = (int16_t)((word >> (j * bits)) & mask);
    }
    return r;
}
#define vw_kvarn_k vw_kvarn
static inline void vf_kvarn(const KVD *d, const uint8_t *p, int bits, float *x) {
    const VW c = vw_kvarn(d, p, bits);
    for (int j = 0; j < 32; j++) x[j] = (float)c.v[j];
}
#define vf_kvarn_order(a, bits) ((void)(a), (void)(bits))
#define vabs(x) fabsf(x)
static inline void vstore_i16(int16_t *p, float x) {
    const long r = lrintf(x);
    *p = (int16_t)(r > 32767 ? 32767 : r < -32767 ? -32767 : r);
}
static inline void vw_store_pairs(int16_t *p, float a, float b, int lane) {
    int16_t *at = p + 4 * (lane / 2) + lane % 2 - 2 * lane;
    vstore_i16(at, a);
    vstore_i16(at + 2, b);
}
#define KVARN_TABLE g_kvarn_scalar


#include "attn_block.inc"

float attn_block_exp(float x) { return vexp(x); }

/* ------------------------------------------------ the rounded query */

float attn_block_round_half_away(float x) { return kvq_round_half_away(x); }

/* Round each 32-block of q to integers in [-top, top] (top = 32767 for
 * int16, 127 for int8; kvq_round_levels) and sum each block's codes. */
static void round_blocks(const float *q, int64_t len, const int top, int16_t *qi, float *scale, int32_t *sum) {
    for (int64_t b = 0; b < len / 32; b++) {
        int16_t *out = qi + b * 32;
        scale[b] = kvq_round_levels(q + b * 32, 32, top, out);
        int32_t s = 0;
        for (int i = 0; i < 32; i++) s += out[i];
        sum[b] = s;
    }
}

void attn_block_round_query(const float *q, int64_t len, int16_t *qi, float *scale, int32_t *sum) {
    round_blocks(q, len, 32767, qi, scale, sum);
}

void attn_block_round_query8(const float *q, int64_t len, int16_t *qi, float *scale, int32_t *sum) {
    round_blocks(q, len, 127, qi, scale, sum);
}

/* Per 8 values: the first 4 at the even bytes, the last 4 at the odd ones
 * (0 4 1 5 2 6 3 7), written as that interleave so that it compiles to
 * straight stores (KVarN folds a query per tile with it). */
void attn_block_query_bytes(const int16_t *qi, int64_t len, int8_t *qb) {
    for (int64_t i = 0; i < len; i += 8)
        for (int m = 0; m < 4; m++) {
            qb[i + 2 * m] = (int8_t)qi[i + m];
            qb[i + 2 * m + 1] = (int8_t)qi[i + 4 + m];
        }
}

static void rounded_values(const float *q, int64_t len, const int top, float *qhat) {
    int16_t qi[32];
    float scale;
    int32_t sum;
    for (int64_t b = 0; b < len / 32; b++) {
        round_blocks(q + b * 32, 32, top, qi, &scale, &sum);
        for (int i = 0; i < 32; i++) qhat[b * 32 + i] = scale * (float)qi[i];
    }
}

void attn_block_rounded_values(const float *q, int64_t len, float *qhat) { rounded_values(q, len, 32767, qhat); }
void attn_block_rounded_values8(const float *q, int64_t len, float *qhat) { rounded_values(q, len, 127, qhat); }

/* attn_codes.inc's int8_pays (the one-4-bit-plane types of its table), and
 * kvarn4 (its records' K codes are q4_1's lanes) */
bool attn_block_int8_type(kvq_type t) {
    return (attn_block_int_type(t) && nib_plane_of((int)t) == 1) || t == KVQ_TYPE_KVARN4 ||
           kvq_turbo_is_tcq(kvq_turbo_of(t));
}

bool attn_block_int_type(kvq_type t) { return (unsigned)t < KVQ_TYPE_COUNT && g_fused_scalar[t].block_bytes; }

/* ------------------------------------------------------- ISA choice */

/* Whether the AVX-512 level's kernels run with AVX512_VNNI here. */
static bool has_vnni(void) {
#if defined(__x86_64__)
    return kvq_isa_best() >= KVQ_ISA_AVX512 && kvq_cpu_features()->avx512vnni;
#else
    return false;
#endif
}

#if defined(__x86_64__)
/* On a core that runs 512-bit operations as two 256-bit halves (Zen 4,
 * kvq_cpu.avx512_halves) the 8-lane f16 kernels beat the 16-lane ones
 * (their transposing add trees' 512-bit shuffles; `kvq-bench chunk
 * --types f16`: 15.7 against 17.6 ns per key): there the AVX-512 levels
 * read f16 rows with the AVX2 level's in-place kernels. */
static attn_block_kernels g_halves[2];   /* avx512, avx512-vnni */
static pthread_once_t g_halves_once = PTHREAD_ONCE_INIT;

static void make_halves(void) {
    const attn_block_kernels *avx2 = attn_block_avx2();
    g_halves[0] = *attn_block_avx512();
    g_halves[1] = has_vnni() ? *attn_block_avx512_vnni() : g_halves[0];
    for (int i = 0; i < 2; i++) {
        g_halves[i].scores_as[ATTN_ROW_F16] = avx2->scores_as[ATTN_ROW_F16];
        g_halves[i].accumulate_as[ATTN_ROW_F16] = avx2->accumulate_as[ATTN_ROW_F16];
    }
}

/* An AVX-512 level (vnni: its VNNI build) as this CPU runs it. */
static const attn_block_kernels *avx512_level(bool vnni) {
    if (!kvq_cpu_features()->avx512_halves) return vnni ? attn_block_avx512_vnni() : attn_block_avx512();
    pthread_once(&g_halves_once, make_halves);
    return &g_halves[vnni];
}
#endif

/* The kernels of an ISA level, or of its -tile variant. */
static const attn_block_kernels *level_of(kvq_isa isa, bool tile) {
#if defined(__x86_64__)
    if (isa == KVQ_ISA_AVX512) return tile ? attn_block_avx512_tile() : avx512_level(false);
    if (isa == KVQ_ISA_AVX2) return tile ? attn_block_avx2_tile() : attn_block_avx2();
#endif
    return tile ? &g_block_scalar_tile : &g_block_scalar;
}

const attn_block_kernels *attn_block_level(const char *level) {
    if (!level) return NULL;
#if defined(__x86_64__)
    if (strcmp(level, "avx512-vnni") == 0) return has_vnni() ? avx512_level(true) : NULL;
#endif
    const kvq_isa best = kvq_isa_best();
    for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
        const char *name = kvq_isa_name((kvq_isa)isa);
        const size_t n = strlen(name);
        if (strncmp(level, name, n) != 0 || (level[n] && strcmp(level + n, "-tile") != 0)) continue;
        return isa <= (int)best ? level_of((kvq_isa)isa, level[n] != 0) : NULL;
    }
    return NULL;
}

const attn_block_kernels *attn_block_best(void) {
#if defined(__x86_64__)
    if (has_vnni()) return avx512_level(true);
#endif
    return level_of(kvq_isa_best(), false);
}

/* ------------------------------------------------ the steps of a chunk */

/* Row t of the chunk as f32: in place for f32 rows, else unpacked into
 * slot t of the tile. */
static const float *unpack_row(const attn_block_rows *src, const uint8_t *row, int t) {
    if (src->f32) return (const float *)(const void *)row;
    float *dst = src->tile + (size_t)t * (size_t)src->len;
    src->tr->dequantize(row, dst, src->len);
    return dst;
}

const attn_block_fused *attn_block_fused_for(const attn_block_kernels *kr, const attn_block_rows *src) {
    if (src->f32 || !kr->fused || src->len > 32 * ATTN_FUSED_MAX_BLOCKS || (unsigned)src->type >= KVQ_TYPE_COUNT)
        return NULL;
    const attn_block_fused *f = &kr->fused[src->type];
    return f->block_bytes ? f : NULL;
}

int attn_block_row_kind(const attn_block_kernels *kr, const attn_block_rows *src) {
    if (src->f32) return ATTN_ROW_F32;
    const int kind = src->type == KVQ_TYPE_F16 ? ATTN_ROW_F16 : src->type == KVQ_TYPE_BF16 ? ATTN_ROW_BF16 : -1;
    return kind > 0 && kr->scores_as[kind] && kr->accumulate_as[kind] ? kind : -1;
}

/* The next chunk's rows, when the rows are evenly spaced (one KV head's
 * rows, the usual case), are fetched into the cache while this chunk is
 * computed: the hardware prefetchers stop at 4 KiB pages and fetch too
 * little ahead for a stream this fast.  Here for the rows the hooks pass
 * on; f16 / bf16 rows and K bodies in lanes are fetched by their kernels,
 * a few lines at a time beside the ones they read (attn_block.inc
 * rows_ahead, attn_codes.inc lanes_scores_pair).  One chunk ahead, not four: at
 * 16384 keys one layer's step took 0.83x (f16), 0.91x (q4_0) and 0.77x
 * (q8_0) the time on 2 threads, the whole model ran f16 1.28x and q8_0
 * 1.10x faster, q4_0 the same (docs/performance.md); further ahead,
 * the lines were evicted or queued behind the chunk's own.  Only a hint:
 * a wrong guess (past the end of the cache) costs a wasted fetch, never
 * a fault. */
enum { PREFETCH_CHUNKS = 1 };

static void prefetch_ahead(const uint8_t *const *rows, int nk) {
    const uintptr_t step = attn_rows_step((const void *const *)rows, nk);
    if (!step) return;
    const uintptr_t from = (uintptr_t)rows[0] + step * (uintptr_t)nk * PREFETCH_CHUNKS;
    kvq_prefetch_once(from, from + step * (uintptr_t)nk);
}

static bool row_is_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* Add a non-finite row x only to the heads that weight it (0 * inf
 * would turn the others into NaN). */
static void add_where_weighted(const float *x, int64_t len, const float *w, int ldw, int t, int G, float *acc,
                               int acc_stride) {
    for (int g = 0; g < G; g++) {
        const float wt = w[(size_t)g * ldw + t];
        if (wt == 0.0f) continue;
        for (int64_t d = 0; d < len; d++) acc[(size_t)g * acc_stride + d] += wt * x[d];
    }
}

/* How many of the G heads give key t a nonzero weight. */
static int heads_weighting(const float *w, int ldw, int G, int t) {
    int weighted = 0;
    for (int g = 0; g < G; g++) weighted += w[(size_t)g * ldw + t] != 0.0f;
    return weighted;
}

/* A packed row's values are finite iff its fp16 headers are (codes are
 * small integers): exponent bits all ones is inf or NaN. */
static bool packed_row_is_finite(const attn_block_fused *f, const uint8_t *row, int64_t len) {
    for (int64_t b = 0; b < len / 32; b++, row += f->block_bytes) {
        if ((kvq_rd16(row) & 0x7c00) == 0x7c00) return false;
        if (f->has_min && (kvq_rd16(row + 2) & 0x7c00) == 0x7c00) return false;
    }
    return true;
}

/* An f16 / bf16 row is finite iff no value has all exponent bits set. */
static bool half_row_is_finite(int kind, const uint8_t *row, int64_t len) {
    const uint16_t exp = kind == ATTN_ROW_F16 ? 0x7c00 : 0x7f80;
    for (int64_t i = 0; i < len; i++)
        if ((kvq_rd16(row + 2 * i) & exp) == exp) return false;
    return true;
}

/* Whether key t's row must be kept out of the in-place / fused V sum: it
 * is weighted 0 by some head but not by all (a weight of 0 for every head
 * removes the row: nothing to add) and holds inf or NaN.  Such a row is
 * added here only to the heads that weight it, as in the per-key pass
 * (which skips zero weights), through the type's dequantize.  Checked
 * only for partly weighted rows: a finite row is added with its weights
 * as they are (a weight of 0 adds 0), and a non-finite one weighted by
 * every head poisons them all, as it does in the per-key pass. */
static bool set_aside(const attn_block_rows *v, const attn_block_fused *fz, int kind, const uint8_t *row,
                      const float *w, int ldw, int G, int t, float *acc, int acc_stride) {
    const int weighted = heads_weighting(w, ldw, G, t);
    if (weighted == G) return false;
    if (!weighted) return true;
    const bool finite = fz ? packed_row_is_finite(fz, row, v->len)
                      : kind == ATTN_ROW_F32 ? row_is_finite((const float *)(const void *)row, v->len)
                                             : half_row_is_finite(kind, row, v->len);
    if (finite) return false;
    const float *x = (const float *)(const void *)row;
    if (kind != ATTN_ROW_F32) {
        v->tr->dequantize(row, v->tile, v->len);
        x = v->tile;
    }
    add_where_weighted(x, v->len, w, ldw, t, G, acc, acc_stride);
    return true;
}

/* ---- decode: the default hooks of every row type (rows unpacked into
 * an f32 tile by the traits' dequantize, f32 rows read in place) */

static void decode_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows, int nk,
                          const attn_query *q, int G, float scale, float *w, int ldw) {
    prefetch_ahead(rows, nk);
    const float *keys[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) keys[t] = unpack_row(k, rows[t], t);
    kr->scores(keys, nk, q->q, G, q->stride, k->len, scale, w, ldw);
}

static void decode_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows, int nk,
                          const float *w, int ldw, int G, float *acc, int acc_stride) {
    prefetch_ahead(rows, nk);
    const float *vals[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) {
        const int weighted = heads_weighting(w, ldw, G, t);
        if (!weighted) { vals[t] = v->zero; continue; }
        vals[t] = unpack_row(v, rows[t], t);
        if (weighted == G || row_is_finite(vals[t], v->len)) continue;
        add_where_weighted(vals[t], v->len, w, ldw, t, G, acc, acc_stride);
        vals[t] = v->zero;
    }
    kr->accumulate(vals, nk, w, ldw, G, acc, acc_stride, v->len);
}

const kvq_row_hooks attn_hooks_decode = { .name = "decode", .score = decode_scores, .accumulate = decode_values };

/* Whether one of n weights is 0, in one pass without branches. */
static inline int any_zero_weight(const float *wg, int n) {
    int zero = 0;
    for (int t = 0; t < n; t++) zero |= wg[t] == 0.0f;
    return zero;
}

/* attn_block.h.  The common chunk skips the per-key checks; over a full
 * chunk (a block type's, or a KVarN run of ATTN_RUN_KEYS) the count is a
 * constant and the compiler vectorises the pass (counting to nk was ~6 %
 * of a warm kvarn4 step).  A weight is 0 only where exp underflowed; NaN
 * counts as nonzero, as in heads_weighting. */
bool attn_block_all_weighted(const float *w, int ldw, int G, int nk) {
    int zero = 0;
    for (int g = 0; g < G; g++) {
        const float *wg = w + (size_t)g * ldw;
        zero |= nk == ATTN_BLOCK_KEYS ? any_zero_weight(wg, ATTN_BLOCK_KEYS)
                : nk == ATTN_RUN_KEYS ? any_zero_weight(wg, ATTN_RUN_KEYS)
                                      : any_zero_weight(wg, nk);
    }
    return !zero;
}

/* The packed rows of V kept for the in-place / fused sums: a row set
 * aside (set_aside) is NULL. */
static void keep_rows(const attn_block_rows *v, const attn_block_fused *fz, int kind, const uint8_t *const *rows,
                      int nk, const float *w, int ldw, int G, float *acc, int acc_stride, const uint8_t **keep) {
    if (attn_block_all_weighted(w, ldw, G, nk)) {   /* no row is set aside */
        memcpy(keep, rows, (size_t)nk * sizeof *keep);
        return;
    }
    for (int t = 0; t < nk; t++)
        keep[t] = set_aside(v, fz, kind, rows[t], w, ldw, G, t, acc, acc_stride) ? NULL : rows[t];
}

/* ---- f32, f16, bf16: read in place, converted in registers, where the
 * level has the kernels */

static void in_place_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows,
                            int nk, const attn_query *q, int G, float scale, float *w, int ldw) {
    const int kind = attn_block_row_kind(kr, k);
    if (kind < 0) { decode_scores(kr, k, rows, nk, q, G, scale, w, ldw); return; }
    if (!attn_row_kind_fetched_in_kernel(kind)) prefetch_ahead(rows, nk);
    kr->scores_as[kind]((const float *const *)(const void *)rows, nk, q->q, G, q->stride, k->len, scale, w, ldw);
}

static void in_place_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows,
                            int nk, const float *w, int ldw, int G, float *acc, int acc_stride) {
    const int kind = attn_block_row_kind(kr, v);
    if (kind < 0) { decode_values(kr, v, rows, nk, w, ldw, G, acc, acc_stride); return; }
    if (!attn_row_kind_fetched_in_kernel(kind)) prefetch_ahead(rows, nk);
    const uint8_t *keep[ATTN_BLOCK_KEYS];
    keep_rows(v, NULL, kind, rows, nk, w, ldw, G, acc, acc_stride, keep);
    /* a row set aside reads the zero row instead (its bytes are zeros
     * as f32, f16 and bf16 alike) */
    const float *vals[ATTN_BLOCK_KEYS];
    for (int t = 0; t < nk; t++) vals[t] = keep[t] ? (const float *)(const void *)keep[t] : v->zero;
    kr->accumulate_as[kind](vals, nk, w, ldw, G, acc, acc_stride, v->len);
}

/* A decode step over these rows runs in chunks of 4 KiB of one KV head's
 * rows per side: 16 keys of f16 at head_dim 128, 8 at 256, 32 (the most)
 * at 64.  Measured on a 2-core AMD EPYC (Zen 5), one layer at 16384 keys
 * (kvq-bench decode, AVX-512 and AVX2 levels alike): head_dim 128, f16 in
 * 2.5-3.1 ms in chunks of 16 against 3.6-5.3 in chunks of 32; head_dim
 * 256, ~7 ms in chunks of 8 against 10-15 in chunks of 16; head_dim 64,
 * 32 keys faster than 16.  The whole model's f16 tg at 16384 (qwen3-0.6B
 * shape) rose 12-17 % (measured then; git history), though these
 * kernels are slower per key in L1 in short chunks.  Neither the prefetch
 * distance (1 to 8 chunks) nor the weights' row stride moved it; the
 * cause is on the memory side and not pinned down (no hardware counters
 * on that machine).  Prefill groups lose in short chunks (pp64 at 4096:
 * about 15 %) and keep 32 keys; the packed types' chunks are counted in
 * keys (32, or 64: g_hooks_fused64), whose per-chunk scale gathers and
 * add trees want them long. */
enum { IN_PLACE_DECODE_BYTES = 4096 };

static const kvq_row_hooks g_hooks_in_place = { .name = "in place", .score = in_place_scores,
                                                .accumulate = in_place_values,
                                                .chunk_bytes = IN_PLACE_DECODE_BYTES };

/* ---- the 32-value block types: fused integer kernels (attn_codes.inc)
 * where the level has them and the query is rounded, else decode */

static void fused_row_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows, int nk,
                         const attn_query *q, int G, float scale, float *w, int ldw) {
    const attn_block_fused *fz = q->qi ? attn_block_fused_for(kr, k) : NULL;
    if (!fz) { decode_scores(kr, k, rows, nk, q, G, scale, w, ldw); return; }
    prefetch_ahead(rows, nk);
    fz->scores(rows, nk, q, G, k->len, scale, w, ldw);
}

static void fused_row_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows, int nk,
                         const float *w, int ldw, int G, float *acc, int acc_stride) {
    const attn_block_fused *fz = attn_block_fused_for(kr, v);
    if (!fz) { decode_values(kr, v, rows, nk, w, ldw, G, acc, acc_stride); return; }
    prefetch_ahead(rows, nk);
    const uint8_t *keep[ATTN_BLOCK_KEYS];
    keep_rows(v, fz, -1, rows, nk, w, ldw, G, acc, acc_stride, keep);
    fz->accumulate(keep, nk, w, ldw, G, acc, acc_stride, v->len);
}

static bool fused_lanes_scores(const attn_block_kernels *kr, const attn_block_rows *k, int nk, const attn_query *q,
                               int G, float scale, float *w, int ldw) {
    const attn_block_fused *fz = q->qi ? attn_block_fused_for(kr, k) : NULL;
    if (!fz || !fz->scores_lanes) return false;
    fz->scores_lanes(k->lanes, k->key0, nk, q, G, k->len, scale, w, ldw);
    return true;
}

static bool fused_pairs_values(const attn_block_kernels *kr, const attn_block_rows *v, int nk, const float *w,
                               int ldw, int G, float *acc, int acc_stride) {
    const attn_block_fused *fz = attn_block_fused_for(kr, v);
    if (!fz || !fz->accumulate_pairs) return false;
    return fz->accumulate_pairs(v->lanes, v->key0, nk, w, ldw, G, acc, acc_stride, v->len);
}

/* The fused kernels' hooks; `keys`: the most keys a call takes (0: ATTN_CHUNK_KEYS). */
#define FUSED_HOOKS(label, keys)                                                                                   \
    { .name = (label), .score = fused_row_scores, .accumulate = fused_row_values, .score_lanes = fused_lanes_scores, \
      .accumulate_lanes = fused_pairs_values, .max_keys = (keys) }
static const kvq_row_hooks g_hooks_fused = FUSED_HOOKS("fused", 0);
/* The same with chunks of ATTN_BLOCK_KEYS, for codes of 4 bits or fewer:
 * a chunk's glue (the V weights' rounding and scale, the sums' unzip and
 * add, the softmax update) paid once per 64 keys instead of 32: one
 * layer's warm step 0.86-0.90x at AVX-512, 0.93-0.96x at AVX2.  The
 * wider codes keep 32: q8_0's V prefetch for 64 keys (136 lines at once)
 * stalled its step to 1.3x (docs/performance.md). */
static const kvq_row_hooks g_hooks_fused64 = FUSED_HOOKS("fused, 64-key chunks", ATTN_BLOCK_KEYS);
#undef FUSED_HOOKS

/* ---- the per-key reference: the traits' dot and axpy per key and head */

static void per_key_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows, int nk,
                           const attn_query *q, int G, float scale, float *w, int ldw) {
    (void)kr;
    for (int t = 0; t < nk; t++)
        for (int j = 0; j < G; j++)
            w[(size_t)j * ldw + t] = k->tr->dot(rows[t], q->q + (size_t)j * q->stride, k->len) * scale;
}

static void per_key_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows, int nk,
                           const float *w, int ldw, int G, float *acc, int acc_stride) {
    (void)kr;
    for (int t = 0; t < nk; t++)
        for (int j = 0; j < G; j++) {
            const float wt = w[(size_t)j * ldw + t];
            if (wt != 0.0f) v->tr->axpy(wt, rows[t], acc + (size_t)j * acc_stride, v->len);
        }
}

const kvq_row_hooks attn_hooks_per_key = { .name = "per key", .score = per_key_scores, .accumulate = per_key_values };

void attn_block_register(void) {
    kvq_format_set_hooks(KVQ_TYPE_F32, &g_hooks_in_place);
    kvq_format_set_hooks(KVQ_TYPE_F16, &g_hooks_in_place);
    kvq_format_set_hooks(KVQ_TYPE_BF16, &g_hooks_in_place);
    for (int t = 0; t < KVQ_TYPE_COUNT; t++)      /* every type the fused kernels decode */
        if (g_fused_scalar[t].block_bytes)   /* attn_codes.inc's code_bits_of */
            kvq_format_set_hooks((kvq_type)t, code_bits_of(t) <= 4 ? &g_hooks_fused64 : &g_hooks_fused);
}

/* ------------------------------------------------ one chunk, by its row */

void attn_block_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows,
                       int nk, const attn_query *q, int G, float scale, float *w, int ldw) {
    kvq_row_hooks_of(k->type)->score(kr, k, rows, nk, q, G, scale, w, ldw);
}

void attn_block_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows,
                       int nk, const float *w, int ldw, int G, float *acc, int acc_stride) {
    kvq_row_hooks_of(v->type)->accumulate(kr, v, rows, nk, w, ldw, G, acc, acc_stride);
}
