/* cache_calib_avx2.c - fused AVX2/FMA reads of calibrated rows (compiled
 * with -mavx2 -mfma, used by cache_calib.c only after run-time detection).
 *
 * No float row per key: eight coefficients of a run are decoded in
 * registers (each codebook index from the 32-bit word at its byte
 * offset, shifted and masked; each level by a scalar load from the run's
 * codebook: 8-lane gathers of the same words and levels were slower) and
 * used at once by every query head of the group
 * (scores) or added into every head's accumulator (values).  A run's last
 * coefficients whose 32-bit word would reach past the row's code bytes
 * take the scalar read, so no byte outside the row is touched.  Same
 * arithmetic as the scalar hooks up to summation order (tested to 1e-5). */
#include "cache.h"
#include "calib.h"
#include "turbo.h"

#include "simd256.h"

#include <immintrin.h>

#if defined(__x86_64__) || defined(__i386__)

enum { HEADS_PER_PASS = 4 };


static const uint8_t *row_of(const kvq_cache_side *sd, int head, int pos) {
    return sd->body + (size_t)head * sd->body_head_bytes + (size_t)pos * sd->row_bytes;
}

/* How a run is read: index width, its step in the stream, how many of its
 * coefficients (a multiple of 8, or the whole run with a partial last
 * block) can be read eight at a time with whole 32-bit words. */
typedef struct run_reader {
    int width, step, bit0, n, fast;
    const float *cb;
} run_reader;

/* Lanes t < n of the block starting at coefficient i (all eight when
 * i + 8 <= n): loads and stores of the query and the accumulators never
 * touch a float past the run. */
#define lanes_below(n_left) kvq_v8_lanes_below(n_left)
#define hsum(v) kvq_v8_hsum(v)

static run_reader reader_of(const kvq_calib_group *gr, int code_bytes) {
    run_reader r;
    r.width = gr->tcq ? KVQ_TURBO_TCQ_CONTEXT + gr->bits : gr->bits;
    r.step = gr->bits;
    r.bit0 = gr->bit0;
    r.n = gr->n;
    r.cb = gr->codebook;
    /* a block of eight is read by words when its last lane's word,
     * (bit0 + (i+7) step)/8 .. +3, lies inside the code bytes (lanes past
     * the run read the next run's bits, which are masked off) */
    int fast = 0;
    while (fast < r.n && (r.bit0 + (fast + 7) * r.step) / 8 + 4 <= code_bytes) fast += 8;
    r.fast = KVQ_MIN(fast, r.n);
    return r;
}

/* Levels of coefficients i..i+7 of the run: each index from its 32-bit
 * word at its byte offset, each level by a scalar load (the same values
 * as two 8-lane gathers, which took longer on AMD Zen 5). */
static inline __m256 decode8(const run_reader *r, const uint8_t *codes, int i) {
    const uint32_t mask = (1u << r->width) - 1u;
    const int p0 = r->bit0 + i * r->step;
    float lv[8];
    for (int j = 0; j < 8; j++) {
        const int pos = p0 + j * r->step;
        uint32_t w;
        memcpy(&w, codes + (pos >> 3), sizeof w);
        lv[j] = r->cb[(w >> (pos & 7)) & mask];
    }
    return _mm256_loadu_ps(lv);
}

/* The level of coefficient t read byte by byte (the run's end). */
static float decode1(const run_reader *r, const uint8_t *codes, int code_bytes, int t) {
    const int pos = r->bit0 + t * r->step, byte = pos >> 3;
    uint32_t w = 0;
    for (int i = 0; i < 3 && byte + i < code_bytes; i++) w |= (uint32_t)codes[byte + i] << (8 * i);
    return r->cb[(w >> (pos & 7)) & ((1u << r->width) - 1u)];
}

void kvq_calib_score_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                          int q_stride, float scale, float *w, int w_stride) {
    const kvq_calib_profile *p = &sd->calib[kv_head].prof;
    const int code_bytes = p->row_bytes - 2;
    run_reader rd[KVQ_CALIB_MAX_GROUPS];
    for (int k = 0; k < p->n_groups; k++) rd[k] = reader_of(&p->group[k], code_bytes);
    for (int t = 0; t < nk; t++) {
        const uint8_t *row = row_of(sd, kv_head, key0 + t), *codes = row + 2;
        const float g = kvq_half_to_float(kvq_rd16(row));
        for (int j0 = 0; j0 < G; j0 += HEADS_PER_PASS) {
            const int nh = KVQ_MIN(HEADS_PER_PASS, G - j0);
            float total[HEADS_PER_PASS] = { 0 };
            for (int k = 0; k < p->n_groups; k++) {
                const run_reader *r = &rd[k];
                const int first = p->group[k].first;
                __m256 a[HEADS_PER_PASS] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                             _mm256_setzero_ps() };
                for (int i = 0; i < r->fast; i += 8) {
                    const __m256i m = lanes_below(r->fast - i);
                    const __m256 v = decode8(r, codes, i);
                    for (int h = 0; h < nh; h++)
                        a[h] = _mm256_fmadd_ps(v, _mm256_maskload_ps(q + (size_t)(j0 + h) * q_stride + first + i, m), a[h]);
                }
                float rest[HEADS_PER_PASS] = { 0 };
                for (int i = r->fast; i < r->n; i++) {
                    const float v = decode1(r, codes, code_bytes, i);
                    for (int h = 0; h < nh; h++) rest[h] += v * q[(size_t)(j0 + h) * q_stride + first + i];
                }
                for (int h = 0; h < nh; h++) total[h] += p->group[k].gain * (hsum(a[h]) + rest[h]);
            }
            for (int h = 0; h < nh; h++) w[(size_t)(j0 + h) * w_stride + t] = scale * g * total[h];
        }
    }
}

void kvq_calib_accumulate_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                               int w_stride, float *acc, int acc_stride) {
    const kvq_calib_profile *p = &sd->calib[kv_head].prof;
    const int code_bytes = p->row_bytes - 2;
    run_reader rd[KVQ_CALIB_MAX_GROUPS];
    for (int k = 0; k < p->n_groups; k++) rd[k] = reader_of(&p->group[k], code_bytes);
    for (int t = 0; t < nk; t++) {
        bool any = false;
        for (int j = 0; j < G; j++) any |= w[(size_t)j * w_stride + t] != 0.0f;
        if (!any) continue;                 /* not decoded, nor a non-finite row added */
        const uint8_t *row = row_of(sd, kv_head, key0 + t), *codes = row + 2;
        const float g = kvq_half_to_float(kvq_rd16(row));
        for (int k = 0; k < p->n_groups; k++) {
            const run_reader *r = &rd[k];
            const int first = p->group[k].first;
            const float gg = g * p->group[k].gain;
            for (int i = 0; i < r->fast; i += 8) {
                const __m256i m = lanes_below(r->fast - i);
                const __m256 v = _mm256_mul_ps(decode8(r, codes, i), _mm256_set1_ps(gg));
                for (int j = 0; j < G; j++) {
                    const float wt = w[(size_t)j * w_stride + t];
                    if (wt == 0.0f) continue;
                    float *a = acc + (size_t)j * acc_stride + first + i;
                    _mm256_maskstore_ps(a, m, _mm256_fmadd_ps(_mm256_set1_ps(wt), v, _mm256_maskload_ps(a, m)));
                }
            }
            for (int i = r->fast; i < r->n; i++) {
                const float v = gg * decode1(r, codes, code_bytes, i);
                for (int j = 0; j < G; j++) {
                    const float wt = w[(size_t)j * w_stride + t];
                    if (wt != 0.0f) acc[(size_t)j * acc_stride + first + i] += wt * v;
                }
            }
        }
    }
}

#else
void kvq_calib_score_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *q, int G,
                          int q_stride, float scale, float *w, int w_stride) {
    (void)sd; (void)kv_head; (void)key0; (void)nk; (void)q; (void)G; (void)q_stride; (void)scale; (void)w; (void)w_stride;
}
void kvq_calib_accumulate_avx2(const kvq_cache_side *sd, int kv_head, int key0, int nk, const float *w, int G,
                               int w_stride, float *acc, int acc_stride) {
    (void)sd; (void)kv_head; (void)key0; (void)nk; (void)w; (void)G; (void)w_stride; (void)acc; (void)acc_stride;
}
#endif
