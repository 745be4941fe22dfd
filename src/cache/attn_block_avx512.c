/* attn_block_avx512.c - the chunked attention kernels (attn_block.inc)
 * with AVX-512 (16 lanes), and the fused packed-row kernels
 * (attn_codes.inc; their int8 code primitives in 256-bit registers,
 * attn_codes_x86.h).
 *
 * attn_block_avx512_vnni.c builds this file again with ATTN_BLOCK_VNNI
 * and AVX512_VNNI: the lanes and pairs kernels' multiply-adds then add
 * into their accumulator in one instruction (vpdpwssd) instead of two
 * (vpmaddwd, vpaddd).  The int32 sums are exact either way, so the two
 * builds give the same bits; the VNNI one is the level "avx512-vnni". */
#include "attn_block.h"
#include "attn_codes_x86.h"
#include "attn_kvarn_x86.h"
#include "vec16.h"

#include <immintrin.h>
#include <math.h>

#define BLOCK_ISA KVQ_ISA_AVX512
#ifdef ATTN_BLOCK_VNNI
#define BLOCK_LEVEL "avx512-vnni"
#define BLOCK_KERNELS g_block_avx512_vnni
#else
#define BLOCK_LEVEL "avx512"
#define BLOCK_KERNELS g_block_avx512
#define BLOCK_TILE_KERNELS g_block_avx512_tile
#endif

/* s[i] = sum of the lanes of acc[i] for 16 accumulators: each step adds
 * two halves of every accumulator (256-bit, 128-bit, 64-bit, 32-bit
 * halves), packing two accumulators' partial sums into one register, so
 * all 16 sums take 15 adds; the lanes end up as a0 a2 a1 a3 a8 a10 a9 a11
 * a4 a6 a5 a7 a12 a14 a13 a15, put back in order by one permute. */
static inline void vsum_lanes(const __m512 acc[16], float *s) {
    __m512 b[8], c[4], d[2];
    KVQ_UNROLL_N(8) for (int i = 0; i < 8; i++)
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[i], acc[i + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(acc[i], acc[i + 8], _MM_SHUFFLE(3, 2, 3, 2)));
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++)
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[i], b[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[i], b[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
    KVQ_UNROLL_N(2) for (int i = 0; i < 2; i++)
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[i], c[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    _mm512_storeu_ps(s, _mm512_permutexvar_ps(order, e));
}

/* attn_codes.inc's float side. */
static inline void vb_floats(__m256i c, __m512 x[2]) {
    x[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(c)));
    x[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(c, 1)));
}
static inline void vf_s8(const uint8_t *p, __m512 x[2]) {
    x[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
    x[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p + 16))));
}
/* vpermps reads only the low 4 bits of each index: one instruction for
 * the nibble mask and the conversion (or codebook) to float. */
#define VF_BOOK 1
static inline void vf_book(const uint8_t *p, const int8_t *book_codes, __m512 x[2]) {
    const __m512 book = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)book_codes)));
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    x[0] = _mm512_permutexvar_ps(bytes, book);
    x[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), book);
}
/* attn_codes.inc's 16-key integer sums: a block's 32 codes as int16 in
 * one register. */
#define VWZ __m512i
#define vwz_load(p) _mm512_loadu_si512((const void *)(p))
static inline __m512i vwz_widen(__m256i c) { return _mm512_cvtepi8_epi16(c); }
static inline __m512i vwz_s8(const uint8_t *p) {
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
/* attn_kvarn_x86.h's two-register codes as one register. */
static inline __m512i vwz_of_vw(vw_x86 c) { return _mm512_inserti64x4(_mm512_castsi256_si512(c.lo), c.hi, 1); }
/* 16 int32 partial sums of one key's block (|pair| <= 2 * 128 * 32767). */
#define vwz_madd(c, q) _mm512_madd_epi16((c), (q))

/* A transposing add tree over 16 keys' partial-sum registers, pushed in
 * key order t = 0..15 (t a constant after unrolling).  Each fold adds two
 * registers' halves so that one register carries twice as many keys at
 * half the lanes each: 2 keys x 8 lanes, 4 x 4, 8 x 2, 16 x 1.  The last
 * fold leaves key 4m + i... in lane 4i + m; vwz_tree_store permutes them
 * into key order. */
typedef struct vwz_tree { __m512i p, r1, r2, r3, out; } vwz_tree;
static inline __m512i vwz_fold_256(__m512i a, __m512i b) {   /* 2 keys: a in lanes 0-7, b in 8-15 */
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
static inline __m512i vwz_fold_128(__m512i a, __m512i b) {   /* 4 keys: key j in 128-bit chunk j */
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}
static inline __m512i vwz_fold_64(__m512i a, __m512i b) {    /* 8 keys: chunk j = keys j, 4 + j */
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
static inline __m512i vwz_fold_32(__m512i a, __m512i b) {    /* 16 keys: lane 4j + m = key j + 4m */
    const __m512 x = _mm512_castsi512_ps(a), y = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0))),
                            _mm512_castps_si512(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1))));
}
/* Keys t-1 and t (t odd) already folded: key t-1's partial sums in
 * lanes 0-7 of r, key t's in 8-15 (what vwz_fold_256 makes). */
static inline __attribute__((always_inline)) void vwz_tree_push_pair(vwz_tree *tr, __m512i r, const int t) {
    if (!(t & 2)) { tr->r1 = r; return; }
    r = vwz_fold_128(tr->r1, r);
    if (!(t & 4)) { tr->r2 = r; return; }
    r = vwz_fold_64(tr->r2, r);
    if (!(t & 8)) { tr->r3 = r; return; }
    tr->out = vwz_fold_32(tr->r3, r);
}
static inline __attribute__((always_inline)) void vwz_tree_push(vwz_tree *tr, __m512i p, const int t) {
    if (!(t & 1)) { tr->p = p; return; }
    vwz_tree_push_pair(tr, vwz_fold_256(tr->p, p), t);
}
/* attn_codes.inc's paired K sums of the one-4-bit-plane types: two keys'
 * block codes as int16, codes 0-15 of key t then of key t+1 in lo, codes
 * 16-31 likewise in hi (the 16 bytes of each key's plane widened in one
 * instruction: low nibbles are codes 0-15, high nibbles 16-31). */
typedef struct vwz_pair { __m512i lo, hi; } vwz_pair;
#define VWZ_PAIR vwz_pair
static inline __m256i vwzp_bytes(const uint8_t *p0, const uint8_t *p1) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p0)),
                                   _mm_loadu_si128((const __m128i *)(const void *)p1), 1);
}
static inline vwz_pair vwzp_nib(const uint8_t *p0, const uint8_t *p1) {
    const __m512i x = _mm512_cvtepu8_epi16(vwzp_bytes(p0, p1));
    return (vwz_pair){ _mm512_and_si512(x, _mm512_set1_epi16(15)), _mm512_srli_epi16(x, 4) };
}
/* the nibbles as indices of a 16-entry int8 book (iq4_nl) */
static inline vwz_pair vwzp_nib_book(const uint8_t *p0, const uint8_t *p1, const int8_t *book) {
    const __m256i x = vwzp_bytes(p0, p1), m = _mm256_set1_epi8(15);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)book));
    const __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(x, m));
    const __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(x, 4), m));
    return (vwz_pair){ _mm512_cvtepi8_epi16(lo), _mm512_cvtepi8_epi16(hi) };
}
/* a query block's 32 int16: 0-15 in both halves of lo, 16-31 of hi */
static inline vwz_pair vwzp_query(const int16_t *q) {
    return (vwz_pair){ _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)q)),
                       _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(q + 16))) };
}
/* lanes 0-7: key t's partial sums, 8-15: key t+1's */
static inline __m512i vwzp_madd(vwz_pair c, vwz_pair q) {
    return _mm512_add_epi32(_mm512_madd_epi16(c.lo, q.lo), _mm512_madd_epi16(c.hi, q.hi));
}
/* attn_codes.inc's int8-query sums of q4_0/q4_1 (VB8): two keys at a
 * time in one 512-bit register, each key's 16 code bytes twice, the
 * second copy shifted down a nibble (codes 0-15 | 16-31 | key t+1's). */
#define VB8 1
typedef struct vb8_pair { __m512i v; } vb8_pair;
static inline vb8_pair vb8_pair_nib(const uint8_t *p0, const uint8_t *p1) {
    const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p0));
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p1));
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    return (vb8_pair){ _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                                        _mm512_set1_epi8(15)) };
}
/* the query block's 32 values twice: one copy per key */
static inline vb8_pair vb8_pair_query(__m256i q8) { return (vb8_pair){ _mm512_broadcast_i64x4(q8) }; }
/* lanes 0-7: key t's partial sums, 8-15: key t+1's */
static inline __m512i vb8_pair_madd(vb8_pair c, vb8_pair q) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(c.v, q.v), _mm512_set1_epi16(1));
}

/* s[t] = sum of key t - sub, t < 16. */
static inline void vwz_tree_store(const vwz_tree *tr, int32_t sub, int32_t *s) {
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512((void *)s, _mm512_sub_epi32(_mm512_permutexvar_epi32(order, tr->out), _mm512_set1_epi32(sub)));
}
#define vcvt_i32(p) _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(p)))
#define vhalf(p) vload_h(p)
#define VI __m512i
#define vi_set1(x) _mm512_set1_epi32(x)
#define vi_load(p) _mm512_loadu_si512((const void *)(p))
#define vi_float(x) _mm512_cvtepi32_ps(x)
#define vhalf_bytes(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
static inline __m512 vhalf_bytes_in(const uint8_t *p, int lo, int hi) {
    lo = lo < 0 ? 0 : lo > 16 ? 16 : lo;
    hi = hi < lo ? lo : hi > 16 ? 16 : hi;
    const __mmask16 m = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const void *)p));
}
#ifdef ATTN_BLOCK_VNNI
#define vi_madd(acc, c, w) _mm512_dpwssd_epi32((acc), (c), (w))
#else
#define vi_madd(acc, c, w) _mm512_add_epi32((acc), _mm512_madd_epi16((c), (w)))
#endif
#define VI_HELD(x) __asm__("" : "+v"(x))
static inline __attribute__((always_inline)) __m512i vi_field(__m512i x, const int s, uint32_t m) {
    return _mm512_and_si512(s >= 0 ? _mm512_srli_epi32(x, (unsigned)s) : _mm512_slli_epi32(x, (unsigned)-s),
                            _mm512_set1_epi32((int)m));
}
#define vi_or(a, b) _mm512_or_si512((a), (b))
#define vi_nib_bytes(x, s) _mm512_and_si512(_mm512_srli_epi32((x), (unsigned)(s)), _mm512_set1_epi8(15))
#define vi_s8_even(x) _mm512_srai_epi16(_mm512_slli_epi16((x), 8), 8)
#define vi_s8_odd(x) _mm512_srai_epi16((x), 8)
static inline __m512i vi_book(__m512i x, const int8_t *book) {
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)book)), x);
}
/* the V pairs kernel's (attn_codes.inc pairs_accumulate) */
static inline __attribute__((always_inline)) __m512i vi_snib(__m512i x, const int k) {
    return _mm512_srai_epi16(k == 3 ? x : _mm512_slli_epi16(x, (unsigned)(12 - 4 * k)), 12);
}
#define vi_sra16(x, n) _mm512_srai_epi16((x), (unsigned)(n))
/* the int8 query's lanes sums (attn_codes.inc lanes_nib_sums8): with
 * VNNI four byte products added into an int32 by one instruction, else
 * pairs of them by vpmaddubsw */
#ifdef ATTN_BLOCK_VNNI
#define vi_dpbusd(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#else
#define vi_ubs16(u, s) _mm512_maddubs_epi16((u), (s))
#define vi_add16(a, b) _mm512_add_epi16((a), (b))
#define vi_sum16(acc, x) _mm512_add_epi32((acc), _mm512_madd_epi16((x), _mm512_set1_epi16(1)))
#endif
#define vi_shl16(x, n) ((n) >= 0 ? _mm512_slli_epi16((x), (unsigned)(n)) : _mm512_srli_epi16((x), (unsigned)-(n)))
/* m's bits from a, the others from b: one ternary logic op (0xCA) */
#define vi_select(m, a, b) _mm512_ternarylogic_epi32(_mm512_set1_epi32((int)(m)), (a), (b), 0xCA)
#define vi_load_b2w(p) _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define vi_load_b2d(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p)))
static inline __m512i vi_pair_w(const int16_t *p, int lane) {
    (void)lane;
    long long q;
    memcpy(&q, p, sizeof q);
    return _mm512_set1_epi64(q);
}
/* the low int16 of each int32: key t of a at 4 (t/2) + t%2, of b 2 further */
static inline void vw_store_pairs(int16_t *p, __m512 a, __m512 b, int lane) {
    (void)lane;
    static const int16_t order[32] = { 0,  2,  32, 34, 4,  6,  36, 38, 8,  10, 40, 42, 12, 14, 44, 46,
                                       16, 18, 48, 50, 20, 22, 52, 54, 24, 26, 56, 58, 28, 30, 60, 62 };
    const __m512i idx = _mm512_loadu_si512((const void *)order);
    _mm512_storeu_si512((void *)p, _mm512_permutex2var_epi16(_mm512_cvtps_epi32(a), idx, _mm512_cvtps_epi32(b)));
}
#define vi_store(p, x) _mm512_storeu_si512((void *)(p), (x))
#define vi_add(a, b) _mm512_add_epi32((a), (b))
#define vi_round(x) _mm512_cvtps_epi32(x)
#define vi_hsum(x) _mm512_reduce_add_epi32(x)
static inline void vf_unzip(__m512 a, __m512 b, __m512 *e, __m512 *o) {
    *e = _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
    *o = _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}
#define PAIRS_ACC 16
#define FUSED_V_HEADS 4
#define FUSED_TABLE g_fused_avx512

/* attn_kvarn.inc's float side: codes (int16, < 256) as floats, |x|, and
 * rounding to int16 (cvtps rounds to nearest even, like lrintf). */
/* 4-bit codes: the 16 bytes zero-extended to 32 bits, low nibbles (even
 * channels) in x[0], high (odd) in x[1]. */
static inline __attribute__((always_inline)) void vf_kvarn(const kvd_x86 *d, const uint8_t *p, const int bits,
                                                           __m512 x[2]) {
    if (bits == 4) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
        x[0] = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
        x[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
        return;
    }
    const vw_x86 c = vw_kvarn(d, p, bits);
    x[0] = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(c.lo));
    x[1] = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(c.hi));
}
static inline __attribute__((always_inline)) void vf_kvarn_order(__m512 a[2], const int bits) {
    if (bits != 4) return;
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 n0 = _mm512_permutex2var_ps(a[0], lo, a[1]), n1 = _mm512_permutex2var_ps(a[0], hi, a[1]);
    a[0] = n0;
    a[1] = n1;
}
#define vabs(x) _mm512_abs_ps(x)
static inline void vstore_i16(int16_t *p, __m512 x) {
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(x)));
}
#define KVARN_TABLE g_kvarn_avx512

#include "attn_block.inc"

#ifdef ATTN_BLOCK_VNNI
const attn_block_kernels *attn_block_avx512_vnni(void) { return &g_block_avx512_vnni; }
#else
const attn_block_kernels *attn_block_avx512(void) { return &g_block_avx512; }
const attn_block_kernels *attn_block_avx512_tile(void) { return &g_block_avx512_tile; }
#endif
