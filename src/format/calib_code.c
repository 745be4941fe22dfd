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
            const float *cb = tcq ? kvq_turbo_tcq_codebook(b) : kvq_turbo_lloyd_centroids(b);
            p->group[p->n_groups++] = (kvq_calib_group){ b, first, len, pos, tcq, gain, cb };
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
    const float *cb = g->codebook;
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

static uint32_t load_le32(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t w;
    memcpy(&w, p, 4);
    return w;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

/* out[t] = scale * codebook[index of coefficient t] for one run: one
 * 32-bit load per coefficient while 4 bytes remain in the stream, the
 * byte-wise read for the last ones. */
static void decode_run(const kvq_calib_group *gr, const uint8_t *codes, int code_bytes, float scale, float *out) {
    const int width = gr->tcq ? KVQ_TURBO_TCQ_CONTEXT + gr->bits : gr->bits;
    const uint32_t mask = (1u << width) - 1u;
    const float *cb = gr->codebook;
    int t = 0;
    for (; t < gr->n; t++) {
        const int pos = gr->bit0 + t * gr->bits;
        if ((pos >> 3) + 4 > code_bytes) break;
        out[t] = scale * cb[(load_le32(codes + (pos >> 3)) >> (pos & 7)) & mask];
    }
    for (; t < gr->n; t++) out[t] = scale * cb[get_bits(codes, code_bytes, gr->bit0 + t * gr->bits, width)];
}

void kvq_calib_decode(const kvq_calib_profile *p, const uint8_t *row, float *y) {
    const float g = kvq_half_to_float(kvq_rd16(row));
    for (int k = 0; k < p->n_groups; k++) {
        const kvq_calib_group *gr = &p->group[k];
        decode_run(gr, row + SCALE_BYTES, p->row_bytes - SCALE_BYTES, g * gr->gain, y + gr->first);
    }
    for (int i = p->n_coded; i < p->d; i++) y[i] = 0.0f;
}

float kvq_calib_dot(const kvq_calib_profile *p, const uint8_t *row, const float *q) {
    float y[KVQ_MAX_HEAD_DIM];
    kvq_calib_decode(p, row, y);
    float s = 0.0f;
    for (int i = 0; i < p->n_coded; i++) s += q[i] * y[i];
    return s;
}

void kvq_calib_axpy(const kvq_calib_profile *p, float w, const uint8_t *row, float *acc) {
    float y[KVQ_MAX_HEAD_DIM];
    kvq_calib_decode(p, row, y);
    for (int i = 0; i < p->n_coded; i++) acc[i] += w * y[i];
}
