/* calib_code.c - the row code of the calibrated types (calib.h).
 *
 * A row holds one KV head's transformed vector y (d unit-variance
 * coefficients, most important first):
 *
 *   bytes 0-1  fp16 scale g
 *   bytes 2-   code stream, LSB first, one run after another in
 *              coefficient order (bits descending):
 *                trellis run (2-4 bits, <= 128 coefficients): 6 start
 *                  bits, then k bits per coefficient; coefficient t's
 *                  codebook index is the (6+k)-bit window at bit t*k of
 *                  the run (the turbo*_tcq trellis, docs/turbo.md);
 *                scalar run (1, 5-8 bits): b-bit Lloyd-Max indices of
 *                  N(0,1), ascending centroids;
 *              zero padding to row_bytes.
 *   y_hat_i = gain_b * g * c_i for the coded coefficients (gain_b = 1, or
 *   for K sides 1 / (1 - D(b)): unbiased logits), 0 for those with no bits.
 *
 * Reading is O(1) per coefficient (every index sits at a known bit), so
 * dot and axpy never decode a row sequentially. */
#include "calib.h"
#include "turbo.h"

#include <math.h>

#define SCALE_BYTES 2
#define FP16_MAX 65504.0

/* Lowest `n` (<= 16) bits of the stream at bit `pos`, reading no byte at
 * or after `end`. */
static unsigned get_bits(const uint8_t *s, int end, int pos, int n) {
    uint32_t w = 0;
    const int byte = pos >> 3;
    for (int i = 0; i < 3 && byte + i < end; i++) w |= (uint32_t)s[byte + i] << (8 * i);
    return (w >> (pos & 7)) & ((1u << n) - 1u);
}

static void put_bits(uint8_t *s, int pos, unsigned v, int n) {
    for (int i = 0; i < n; i++, pos++)
        if (v >> i & 1u) s[pos >> 3] |= (uint8_t)(1u << (pos & 7));
}

static const float *group_codebook(const kvq_calib_group *g) {
    return g->tcq ? kvq_turbo_tcq_codebook(g->bits) : kvq_turbo_lloyd_centroids(g->bits);
}

/* Codebook index of coefficient t (0-based in the run). */
static unsigned group_index(const kvq_calib_group *g, const uint8_t *codes, int code_bytes, int t) {
    if (g->tcq) return get_bits(codes, code_bytes, g->bit0 + t * g->bits, KVQ_TURBO_TCQ_CONTEXT + g->bits);
    return get_bits(codes, code_bytes, g->bit0 + t * g->bits, g->bits);
}

static int run_bits(int bits, int n, bool tcq) { return n * bits + (tcq ? KVQ_TURBO_TCQ_CONTEXT : 0); }

kvq_status kvq_calib_profile_make(const uint8_t *bits, const float *weight, int d, int row_bytes, bool unbiased,
                                  kvq_calib_profile *p, kvq_error *err) {
    memset(p, 0, sizeof *p);
    p->d = d;
    p->row_bytes = row_bytes;
    p->weight = weight;
    if (d < 1 || d > KVQ_MAX_HEAD_DIM) return kvq_fail(err, KVQ_ERR_ARG, "calibrated row: %d coefficients", d);
    int pos = 0;
    for (int i = 0; i < d;) {
        const int b = bits[i];
        if (b > KVQ_CALIB_MAX_BITS || (i && b > bits[i - 1]))
            return kvq_fail(err, KVQ_ERR_FORMAT, "calibrated row: allocation not descending in 0..%d bits at %d",
                            KVQ_CALIB_MAX_BITS, i);
        if (b == 0) break;
        int n = 1;
        while (i + n < d && bits[i + n] == b) n++;
        const bool tcq = b >= 2 && b <= 4;
        for (int first = i; first < i + n;) {           /* trellis runs of <= 128 */
            const int len = tcq ? KVQ_MIN(KVQ_TURBO_BLOCK, i + n - first) : i + n - first;
            if (p->n_groups == KVQ_CALIB_MAX_GROUPS)
                return kvq_fail(err, KVQ_ERR_FORMAT, "calibrated row: more than %d runs", KVQ_CALIB_MAX_GROUPS);
            const float gain = unbiased ? (float)kvq_calib_logit_gain(b) : 1.0f;
            p->group[p->n_groups++] = (kvq_calib_group){ b, first, len, pos, tcq, gain };
            pos += run_bits(b, len, tcq);
            first += len;
        }
        i += n;
        p->n_coded = i;
    }
    for (int i = p->n_coded; i < d; i++)
        if (bits[i]) return kvq_fail(err, KVQ_ERR_FORMAT, "calibrated row: allocation not descending at %d", i);
    if (pos > 8 * (row_bytes - SCALE_BYTES))
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibrated row: the allocation needs %d bits, a %d-byte row holds %d",
                        pos, row_bytes, 8 * (row_bytes - SCALE_BYTES));
    return KVQ_OK;
}

/* ------------------------------------------------------------- encoding */

/* Index of the centroid nearest to x (ascending centroids c of n). */
static int nearest(const float *c, int n, float x) {
    int lo = 0, hi = n - 1;                    /* c[lo] <= x < c[hi] narrowed */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < c[mid]) hi = mid;
        else lo = mid;
    }
    return fabsf(x - c[lo]) <= fabsf(c[hi] - x) ? lo : hi;
}

/* Code u[first..first+n) of one run; c_hat receives the chosen values. */
static void encode_group(const kvq_calib_group *g, const float *u, uint8_t *codes, float *c_hat) {
    const float *cb = group_codebook(g);
    if (g->tcq) {
        uint16_t states[KVQ_TURBO_BLOCK];
        kvq_turbo_tcq_viterbi(g->bits, cb, u + g->first, g->n, states);
        put_bits(codes, g->bit0, states[0], KVQ_TURBO_TCQ_CONTEXT + g->bits);
        for (int t = 1; t < g->n; t++)
            put_bits(codes, g->bit0 + KVQ_TURBO_TCQ_CONTEXT + t * g->bits, states[t] >> KVQ_TURBO_TCQ_CONTEXT,
                     g->bits);
        for (int t = 0; t < g->n; t++) c_hat[g->first + t] = cb[states[t]];
        return;
    }
    for (int t = 0; t < g->n; t++) {
        const int idx = nearest(cb, 1 << g->bits, u[g->first + t]);
        put_bits(codes, g->bit0 + t * g->bits, (unsigned)idx, g->bits);
        c_hat[g->first + t] = cb[idx];
    }
}

void kvq_calib_encode(const kvq_calib_profile *p, const float *y, uint8_t *row) {
    memset(row, 0, (size_t)p->row_bytes);
    const int n = p->n_coded;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)y[i] * y[i];
    const double g0 = n ? sqrt(ss / n) : 0.0;
    if (!(g0 > 0) || !isfinite(g0)) {          /* zero row, or NaN/Inf: stored as such */
        kvq_wr16(row, kvq_float_to_half(n ? (float)g0 : 0.0f));
        return;
    }
    float u[KVQ_MAX_HEAD_DIM], c_hat[KVQ_MAX_HEAD_DIM];
    for (int i = 0; i < n; i++) u[i] = (float)(y[i] / g0);
    uint8_t *codes = row + SCALE_BYTES;
    for (int k = 0; k < p->n_groups; k++) encode_group(&p->group[k], u, codes, c_hat);
    /* the scale minimising sum_i w_i (y_i - g c_i)^2 for the chosen codes
     * (w: importance, the weight of each coefficient's error) */
    double yc = 0.0, cc = 0.0;
    for (int i = 0; i < n; i++) {
        yc += (double)p->weight[i] * y[i] * c_hat[i];
        cc += (double)p->weight[i] * c_hat[i] * c_hat[i];
    }
    const double g = cc > 0 ? yc / cc : 0.0;
    kvq_wr16(row, kvq_float_to_half((float)fmax(-FP16_MAX, fmin(g, FP16_MAX))));
}

/* ------------------------------------------------------------- reading */

void kvq_calib_decode(const kvq_calib_profile *p, const uint8_t *row, float *y) {
    const float g = kvq_half_to_float(kvq_rd16(row));
    const uint8_t *codes = row + SCALE_BYTES;
    const int code_bytes = p->row_bytes - SCALE_BYTES;
    for (int k = 0; k < p->n_groups; k++) {
        const kvq_calib_group *gr = &p->group[k];
        const float *cb = group_codebook(gr);
        const float gg = g * gr->gain;
        for (int t = 0; t < gr->n; t++) y[gr->first + t] = gg * cb[group_index(gr, codes, code_bytes, t)];
    }
    for (int i = p->n_coded; i < p->d; i++) y[i] = 0.0f;
}

float kvq_calib_dot(const kvq_calib_profile *p, const uint8_t *row, const float *q) {
    const uint8_t *codes = row + SCALE_BYTES;
    const int code_bytes = p->row_bytes - SCALE_BYTES;
    float s = 0.0f;
    for (int k = 0; k < p->n_groups; k++) {
        const kvq_calib_group *gr = &p->group[k];
        const float *cb = group_codebook(gr);
        float sg = 0.0f;
        for (int t = 0; t < gr->n; t++) sg += q[gr->first + t] * cb[group_index(gr, codes, code_bytes, t)];
        s += gr->gain * sg;
    }
    return s * kvq_half_to_float(kvq_rd16(row));
}

void kvq_calib_axpy(const kvq_calib_profile *p, float w, const uint8_t *row, float *acc) {
    const float wg = w * kvq_half_to_float(kvq_rd16(row));
    const uint8_t *codes = row + SCALE_BYTES;
    const int code_bytes = p->row_bytes - SCALE_BYTES;
    for (int k = 0; k < p->n_groups; k++) {
        const kvq_calib_group *gr = &p->group[k];
        const float *cb = group_codebook(gr);
        const float wgg = wg * gr->gain;
        for (int t = 0; t < gr->n; t++) acc[gr->first + t] += wgg * cb[group_index(gr, codes, code_bytes, t)];
    }
}
