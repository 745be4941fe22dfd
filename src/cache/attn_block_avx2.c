/* attn_block_avx2.c - the chunked attention kernels (attn_block.inc) with
 * AVX2 + FMA (8 lanes), and the fused packed-row kernels (attn_codes.inc,
 * attn_kvarn.inc). */
#include "attn_block.h"
#include "attn_codes_x86.h"
#include "attn_kvarn_x86.h"
#include "vec8.h"

#include <immintrin.h>
#include <math.h>

#define BLOCK_LEVEL "avx2"
#define BLOCK_ISA KVQ_ISA_AVX2
#define BLOCK_KERNELS g_block_avx2
#define BLOCK_TILE_KERNELS g_block_avx2_tile

/* s[i] = sum of the lanes of acc[i] for 8 accumulators: each step adds
 * two halves of every accumulator (128-bit, 64-bit, 32-bit), packing two
 * accumulators' partial sums into one register; the lanes end up as
 * a0 a2 a1 a3 a4 a6 a5 a7, put back in order by one in-lane permute. */
static inline void vsum_lanes(const __m256 acc[8], float *s) {
    __m256 b[4], c[2];
    KVQ_UNROLL_N(4) for (int i = 0; i < 4; i++)
        b[i] = _mm256_add_ps(_mm256_permute2f128_ps(acc[i], acc[i + 4], 0x20),
                             _mm256_permute2f128_ps(acc[i], acc[i + 4], 0x31));
    KVQ_UNROLL_N(2) for (int i = 0; i < 2; i++)
        c[i] = _mm256_add_ps(_mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(b[i], b[i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 e = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(s, _mm256_permute_ps(e, _MM_SHUFFLE(3, 1, 2, 0)));
}

/* attn_codes.inc's 8-key integer sums: a block's 32 codes as int16 in two
 * registers (attn_codes_x86.h's vw_x86), 8 int32 partial sums per key. */
#define VWZ vw_x86
static inline vw_x86 vwz_load(const int16_t *p) {
    const vw_x86 w = { _mm256_loadu_si256((const __m256i *)(const void *)p),
                       _mm256_loadu_si256((const __m256i *)(const void *)(p + 16)) };
    return w;
}
#define vwz_widen(c) vb_widen(c)
#define vwz_s8(p) vw_s8(p)
#define vwz_madd(c, q) vw_partial((c), (q).lo, (q).hi)

/* A transposing add tree over 8 keys' partial-sum registers, pushed in key
 * order t = 0..7 (a constant after unrolling): 2 keys x 4 lanes, 4 x 2,
 * 8 x 1; the last fold leaves keys 0 2 4 6 1 3 5 7, put in order by
 * vwz_tree_store. */
typedef struct vwz_tree { __m256i p, r1, r2, out; } vwz_tree;
static inline __m256i vwz_fold_128(__m256i a, __m256i b) {   /* a in lanes 0-3, b in 4-7 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
static inline __m256i vwz_fold_64(__m256i a, __m256i b) {    /* 128-bit lane j: keys j, 2 + j */
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}
static inline __m256i vwz_fold_32(__m256i a, __m256i b) {    /* keys 0 2 4 6 | 1 3 5 7 */
    const __m256 x = _mm256_castsi256_ps(a), y = _mm256_castsi256_ps(b);
    return _mm256_add_epi32(_mm256_castps_si256(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0))),
                            _mm256_castps_si256(_mm256_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1))));
}
/* Keys t-1 and t (t odd) already folded: key t-1's partial sums in
 * lanes 0-3 of r, key t's in 4-7 (what vwz_fold_128 makes). */
static inline __attribute__((always_inline)) void vwz_tree_push_pair(vwz_tree *tr, __m256i r, const int t) {
    if (!(t & 2)) { tr->r1 = r; return; }
    r = vwz_fold_64(tr->r1, r);
    if (!(t & 4)) { tr->r2 = r; return; }
    tr->out = vwz_fold_32(tr->r2, r);
}
static inline __attribute__((always_inline)) void vwz_tree_push(vwz_tree *tr, __m256i p, const int t) {
    if (!(t & 1)) { tr->p = p; return; }
    vwz_tree_push_pair(tr, vwz_fold_128(tr->p, p), t);
}
/* attn_codes.inc's paired K sums of the one-4-bit-plane types: two keys'
 * block codes as int16, each register key t's 8 codes in its low 128-bit
 * lane and key t+1's in its high one: codes 0-7 (x_lo), 16-23 (x_hi),
 * 8-15 (y_lo), 24-31 (y_hi); bytes 0-7 of both keys widened in one
 * instruction, bytes 8-15 in another. */
typedef struct vwz_pair { __m256i x_lo, x_hi, y_lo, y_hi; } vwz_pair;
#define VWZ_PAIR vwz_pair
static inline void vwzp_bytes(const uint8_t *p0, const uint8_t *p1, __m128i *x, __m128i *y) {
    const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)p0);
    const __m128i b = _mm_loadu_si128((const __m128i *)(const void *)p1);
    *x = _mm_unpacklo_epi64(a, b);
    *y = _mm_unpackhi_epi64(a, b);
}
static inline vwz_pair vwzp_nib(const uint8_t *p0, const uint8_t *p1) {
    __m128i x8, y8;
    vwzp_bytes(p0, p1, &x8, &y8);
    const __m256i x = _mm256_cvtepu8_epi16(x8), y = _mm256_cvtepu8_epi16(y8), m = _mm256_set1_epi16(15);
    return (vwz_pair){ _mm256_and_si256(x, m), _mm256_srli_epi16(x, 4), _mm256_and_si256(y, m), _mm256_srli_epi16(y, 4) };
}
/* the nibbles as indices of a 16-entry int8 book (iq4_nl) */
static inline vwz_pair vwzp_nib_book(const uint8_t *p0, const uint8_t *p1, const int8_t *book) {
    __m128i x8, y8;
    vwzp_bytes(p0, p1, &x8, &y8);
    const __m128i tbl = _mm_loadu_si128((const __m128i *)(const void *)book), m = _mm_set1_epi8(15);
#define BOOK(v) _mm256_cvtepi8_epi16(_mm_shuffle_epi8(tbl, (v)))
    return (vwz_pair){ BOOK(_mm_and_si128(x8, m)), BOOK(_mm_and_si128(_mm_srli_epi16(x8, 4), m)),
                       BOOK(_mm_and_si128(y8, m)), BOOK(_mm_and_si128(_mm_srli_epi16(y8, 4), m)) };
#undef BOOK
}
/* a query block's 32 int16, each 8-value quarter in both 128-bit lanes in
 * the order of vwz_pair's registers */
static inline vwz_pair vwzp_query(const int16_t *q) {
#define QUARTER(o) _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(q + (o))))
    return (vwz_pair){ QUARTER(0), QUARTER(16), QUARTER(8), QUARTER(24) };
#undef QUARTER
}
/* lanes 0-3: key t's partial sums, 4-7: key t+1's */
static inline __m256i vwzp_madd(vwz_pair c, vwz_pair q) {
    return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(c.x_lo, q.x_lo), _mm256_madd_epi16(c.x_hi, q.x_hi)),
                            _mm256_add_epi32(_mm256_madd_epi16(c.y_lo, q.y_lo), _mm256_madd_epi16(c.y_hi, q.y_hi)));
}
/* attn_codes.inc's int8-query sums of q4_0/q4_1 (VB8): two keys at a
 * time, codes 0-15 of both in one register and 16-31 in another. */
#define VB8 1
typedef struct vb8_pair { __m256i lo, hi; } vb8_pair;
static inline vb8_pair vb8_pair_nib(const uint8_t *p0, const uint8_t *p1) {
    const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p0)),
                                              _mm_loadu_si128((const __m128i *)(const void *)p1), 1);
    const __m256i m = _mm256_set1_epi8(15);
    return (vb8_pair){ _mm256_and_si256(x, m), _mm256_and_si256(_mm256_srli_epi16(x, 4), m) };
}
/* the query block's values 0-15 in both 128-bit lanes of lo, 16-31 of hi */
static inline vb8_pair vb8_pair_query(__m256i q8) {
    return (vb8_pair){ _mm256_permute2x128_si256(q8, q8, 0x00), _mm256_permute2x128_si256(q8, q8, 0x11) };
}
/* lanes 0-3: key t's partial sums, 4-7: key t+1's (codes < 16: the two
 * halves' int16 sums add without overflow) */
static inline __m256i vb8_pair_madd(vb8_pair c, vb8_pair q) {
    const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(c.lo, q.lo), _mm256_maddubs_epi16(c.hi, q.hi));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* s[t] = sum of key t - sub, t < 8. */
static inline void vwz_tree_store(const vwz_tree *tr, int32_t sub, int32_t *s) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256((__m256i *)(void *)s,
                        _mm256_sub_epi32(_mm256_permutevar8x32_epi32(tr->out, order), _mm256_set1_epi32(sub)));
}

/* attn_codes.inc's float side (the int8 code primitives: attn_codes_x86.h). */
static inline void vb_floats(__m256i c, __m256 x[4]) {
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    x[0] = kvq_v8_s8_to_f32(lo);
    x[1] = kvq_v8_s8_to_f32(_mm_srli_si128(lo, 8));
    x[2] = kvq_v8_s8_to_f32(hi);
    x[3] = kvq_v8_s8_to_f32(_mm_srli_si128(hi, 8));
}
static inline void vf_s8(const uint8_t *p, __m256 x[4]) {
    /* unrolled, or gcc keeps x in memory: a store and reload per vector */
    KVQ_UNROLL_N(4) for (int k = 0; k < 4; k++)
        x[k] = kvq_v8_s8_to_f32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8 * k)));
}
/* A 4-bit plane's codes as floats, without the int8 step: the 16 bytes
 * zero-extended to int32 in two halves, low nibbles masked and high ones
 * shifted down, converted (exact).  2 shuffles per block instead of 8;
 * q4_0's offset is not subtracted here but added once per block
 * (attn_codes.inc, folds_offset). */
#define VF_NIB 1
static inline void vf_nib(const uint8_t *p, __m256 x[4]) {
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8)));
    const __m256i m = _mm256_set1_epi32(15);
    x[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, m));    /* codes 0-7   */
    x[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, m));    /* codes 8-15  */
    x[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));   /* codes 16-23 */
    x[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));   /* codes 24-31 */
}
#define vcvt_i32(p) _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p)))
#define vhalf(p) vload_h(p)
#define VI __m256i
#define vi_set1(x) _mm256_set1_epi32(x)
#define vi_load(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define vi_float(x) _mm256_cvtepi32_ps(x)
#define vhalf_bytes(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
static inline __m256 vhalf_bytes_in(const uint8_t *p, int lo, int hi) {
    const __m128i idx = _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7);
    const __m128i in = _mm_andnot_si128(_mm_cmpgt_epi16(_mm_set1_epi16((short)(lo < -1 ? -1 : lo > 8 ? 8 : lo)), idx),
                                        _mm_cmpgt_epi16(_mm_set1_epi16((short)(hi < 0 ? 0 : hi > 8 ? 8 : hi)), idx));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)p), in));
}
#define vi_madd(acc, c, w) _mm256_add_epi32((acc), _mm256_madd_epi16((c), (w)))
#define VI_CHAIN(x) __asm__("" : "+x"(x))
#define VI_HELD(x) __asm__("" : "+x"(x))
static inline __attribute__((always_inline)) __m256i vi_field(__m256i x, const int s, uint32_t m) {
    return _mm256_and_si256(s >= 0 ? _mm256_srli_epi32(x, s) : _mm256_slli_epi32(x, -s), _mm256_set1_epi32((int)m));
}
#define vi_or(a, b) _mm256_or_si256((a), (b))
#define vi_nib_bytes(x, s) _mm256_and_si256(_mm256_srli_epi32((x), (s)), _mm256_set1_epi8(15))
#define vi_s8_even(x) _mm256_srai_epi16(_mm256_slli_epi16((x), 8), 8)
#define vi_s8_odd(x) _mm256_srai_epi16((x), 8)
static inline __m256i vi_book(__m256i x, const int8_t *book) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)book)), x);
}
/* the V pairs kernel's (attn_codes.inc pairs_accumulate) */
static inline __attribute__((always_inline)) __m256i vi_snib(__m256i x, const int k) {
    return _mm256_srai_epi16(k == 3 ? x : _mm256_slli_epi16(x, 12 - 4 * k), 12);
}
#define vi_sra16(x, n) _mm256_srai_epi16((x), (n))
/* the int8 query's lanes sums (attn_codes.inc lanes_nib_sums8) */
#define vi_ubs16(u, s) _mm256_maddubs_epi16((u), (s))
#define vi_add16(a, b) _mm256_add_epi16((a), (b))
#define vi_sum16(acc, x) _mm256_add_epi32((acc), _mm256_madd_epi16((x), _mm256_set1_epi16(1)))
#define vi_shl16(x, n) ((n) >= 0 ? _mm256_slli_epi16((x), (n)) : _mm256_srli_epi16((x), -(n)))
#define vi_select(m, a, b) \
    _mm256_or_si256(_mm256_and_si256(_mm256_set1_epi32((int)(m)), (a)), _mm256_andnot_si256(_mm256_set1_epi32((int)(m)), (b)))
#define vi_load_b2w(p) _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define vi_load_b2d(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))
static inline __m256i vi_pair_w(const int16_t *p, int lane) {
    (void)lane;
    int64_t q;
    memcpy(&q, p, sizeof q);
    return _mm256_set1_epi64x(q);
}
/* packs: per 128 bits a's 4 keys then b's, as dwords (a01 a23 b01 b23);
 * the shuffle puts each key pair's a and b side by side */
static inline void vw_store_pairs(int16_t *p, __m256 a, __m256 b, int lane) {
    (void)lane;
    const __m256i x = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm256_shuffle_epi32(x, _MM_SHUFFLE(3, 1, 2, 0)));
}
#define vi_store(p, x) _mm256_storeu_si256((__m256i *)(void *)(p), (x))
#define vi_add(a, b) _mm256_add_epi32((a), (b))
#define vi_round(x) _mm256_cvtps_epi32(x)
static inline int32_t vi_hsum(__m256i x) {
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
}
static inline void vf_unzip(__m256 a, __m256 b, __m256 *e, __m256 *o) {
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}
#define PAIRS_ACC 8
#define FUSED_V_HEADS 2
#define FUSED_TABLE g_fused_avx2

/* attn_kvarn.inc's float side: codes (int16, < 256) as floats, |x|, and
 * rounding to int16 (cvtps rounds to nearest even, like lrintf). */
/* 4-bit codes: bytes 0-7 and 8-15 zero-extended to 32 bits, low and high
 * nibbles: x = even channels 0-14, even 16-30, odd 1-15, odd 17-31. */
static inline __attribute__((always_inline)) void vf_kvarn(const kvd_x86 *d, const uint8_t *p, const int bits,
                                                           __m256 x[4]) {
    if (bits == 4) {   /* the same nibble split as the block types' vf_nib */
        vf_nib(p, x);
        return;
    }
    const vw_x86 c = vw_kvarn(d, p, bits);
    x[0] = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(c.lo)));
    x[1] = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(c.lo, 1)));
    x[2] = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(c.hi)));
    x[3] = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(c.hi, 1)));
}
/* Interleave even e and odd o channels of 8 each into channels 0-15. */
static inline void interleave8(__m256 e, __m256 o, __m256 *lo, __m256 *hi) {
    const __m256 a = _mm256_unpacklo_ps(e, o), b = _mm256_unpackhi_ps(e, o);   /* 0-3 | 8-11, 4-7 | 12-15 */
    *lo = _mm256_permute2f128_ps(a, b, 0x20);
    *hi = _mm256_permute2f128_ps(a, b, 0x31);
}
static inline __attribute__((always_inline)) void vf_kvarn_order(__m256 a[4], const int bits) {
    if (bits != 4) return;
    __m256 n[4];
    interleave8(a[0], a[2], &n[0], &n[1]);
    interleave8(a[1], a[3], &n[2], &n[3]);
    for (int j = 0; j < 4; j++) a[j] = n[j];
}
#define vabs(x) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (x))
static inline void vstore_i16(int16_t *p, __m256 x) {
    const __m256i i = _mm256_cvtps_epi32(x);
    _mm_storeu_si128((__m128i *)(void *)p, _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1)));
}
#define KVARN_TABLE g_kvarn_avx2

#include "attn_block.inc"

const attn_block_kernels *attn_block_avx2(void) { return &g_block_avx2; }
const attn_block_kernels *attn_block_avx2_tile(void) { return &g_block_avx2_tile; }
