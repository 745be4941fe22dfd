/*
 * quant_iq4nl.c - iq4_nl: 32 values, fp16 d, 16 4-bit indices into a fixed
 * non-linear codebook (ggml's layout: byte j = idx[j] | idx[j+16] << 4).
 *
 * Decoding is fixed by the format.  The encoders are kvq's own, both
 * minimising the block's plain (unweighted) squared error:
 *   - the scale search (kvq_iq4_nl_quantize, every cache write): 16
 *     candidate scales around the reference's max|x|/127, of both signs,
 *     the 8 best of them refined twice by least squares; the max-magnitude rule
 *     d = m / -127 is one of them, so the result is never worse than it
 *     (the golden test compares llama.cpp's own output row by row).
 *     Within 0.1 % of the exact optimum's error on average (most blocks:
 *     the optimum itself), at a fraction of its cost (docs/formats.md);
 *   - the exact search (kvq_iq4_nl_quantize_exact): the fp16 scale of
 *     least error over all of them (sweep_scales below).
 * Blocks holding NaN or +-inf are stored "poisoned": d = NaN, indices 0.
 */
#include "quant_block.h"
#include "vec1.h"

#include <math.h>

const int8_t kvq_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* Midpoints between neighbouring codebook entries (exact halves), and +inf
 * past the last: "no midpoint" for the SIMD searches' table look-up. */
const float kvq_iq4nl_mids[16] = {
    -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f, 7.0f, 19.0f, 31.5f, 45.5f, 61.0f, 79.0f, 101.0f,
    INFINITY,
};

/* Index k minimising (x - d*T[k])^2 for d != 0: x lies above d*mid_i for
 * exactly the midpoints below its nearest entry (for d > 0), so k is the
 * count of those, found by a branch-free binary search over the 15 sorted
 * midpoints.  d*mid_i is exact in double (24 x 8 bits), so the choice is
 * exact; a tie takes the lower entry (same error). */
static int best_index(float x, float d) {
    const double xd = d > 0 ? x : -(double)x, ad = fabs((double)d);
    int k = 0;
    k += xd > ad * kvq_iq4nl_mids[k + 7] ? 8 : 0;
    k += xd > ad * kvq_iq4nl_mids[k + 3] ? 4 : 0;
    k += xd > ad * kvq_iq4nl_mids[k + 1] ? 2 : 0;
    k += xd > ad * kvq_iq4nl_mids[k] ? 1 : 0;
    return k;
}

/*
 * Exact scale search.  For a fixed d > 0 the best index of x_j is the
 * codebook entry nearest to x_j/d, so the block's squared error
 *     SSE(d) = sum_j min_k (x_j - d*T_k)^2
 * is piecewise quadratic in d: the index of x_j changes only where x_j/d
 * crosses the midpoint of two neighbouring entries, d = x_j / mid_k.
 * Between consecutive breakpoints [lo, hi] the indices are fixed and
 *     SSE(d) = Sxx - 2 d Sxt + d^2 Stt     (Sxt = sum x_j T_j, Stt = sum T_j^2),
 * a convex parabola with minimum at d* = Sxt/Stt.  The stored d is fp16,
 * so the best stored scale inside [lo, hi] is one of the two fp16 values
 * around clamp(d*, lo, hi).  Sweeping all intervals in order of d, with
 * Sxt and Stt updated at each breakpoint, visits every fp16 candidate that
 * can be optimal: the result is the global minimum of SSE over all fp16
 * scales of one sign.  d < 0 is the same search on -x.
 */
typedef struct scale_event {
    float d;            /* breakpoint                                   */
    float x;            /* the value whose index changes                */
    int16_t t_from, t_to; /* codebook values before and after            */
} scale_event;

/* Sort events by d (all > 0, so their float bits order like integers):
 * one counting pass into 256 buckets spanning the keys' range, then an
 * insertion sort that only has to fix the order inside buckets.  The
 * range is narrow (d_lo prunes the small scales), so buckets hold one or
 * two events and this is several times faster than qsort or a full radix
 * sort; it matters because it runs at every cache write. */
static void sort_events(scale_event *ev, int n) {
    enum { BUCKETS = 256 };
    uint32_t key[KVQ_BLOCK * 8], kmin = UINT32_MAX, kmax = 0;
    for (int i = 0; i < n; i++) {
        key[i] = kvq_f32_bits(ev[i].d);
        kmin = KVQ_MIN(kmin, key[i]);
        kmax = KVQ_MAX(kmax, key[i]);
    }
    int shift = 0;
    while (((kmax - kmin) >> shift) >= BUCKETS) shift++;
    int start[BUCKETS + 1] = {0};
    for (int i = 0; i < n; i++) start[((key[i] - kmin) >> shift) + 1]++;
    for (int b = 0; b < BUCKETS; b++) start[b + 1] += start[b];
    scale_event sorted[KVQ_BLOCK * 8];
    for (int i = 0; i < n; i++) sorted[start[(key[i] - kmin) >> shift]++] = ev[i];
    for (int i = 1; i < n; i++) {
        const scale_event e = sorted[i];
        int j = i;
        for (; j > 0 && sorted[j - 1].d > e.d; j--) sorted[j] = sorted[j - 1];
        sorted[j] = e;
    }
    memcpy(ev, sorted, (size_t)n * sizeof *ev);
}

typedef struct scale_choice { float d; double sse; } scale_choice;

/* Score the fp16 scales around clamp(d*, lo, hi) that lie in [lo, hi]. */
static void try_interval(double sxx, double sxt, double stt, float lo, float hi, scale_choice *best) {
    double dstar = sxt / stt;
    float c = dstar <= lo ? lo : dstar >= hi ? hi : (float)dstar;
    if (!(c > 0.0f)) c = lo;
    uint16_t h = kvq_float_to_half(c);
    if (h >= 0x7c00u) h = 0x7bffu;                    /* largest finite half */
    float v = kvq_half_to_float(h);
    uint16_t h2 = (v < c || h == 0) ? (uint16_t)(h + 1) : (uint16_t)(h - 1);
    const uint16_t cand[2] = { h, h2 };
    for (int i = 0; i < 2; i++) {
        if (cand[i] == 0 || cand[i] >= 0x7c00u) continue;
        float dv = kvq_half_to_float(cand[i]);
        if (dv < lo || dv > hi) continue;
        double sse = sxx - 2.0 * dv * sxt + (double)dv * dv * stt;
        if (sse < best->sse) { best->sse = sse; best->d = dv; }
    }
}

/* Best fp16 d > 0 for x scaled by sign (+1 / -1); updates best with
 * d carrying the sign. */
static void sweep_scales(const float *x, float sign, double sxx, scale_choice *best) {
    /* Pruning: the largest positive value p can at best reach 113*d and the
     * largest negative one n -127*d, so SSE(d) >= (p - 113 d)^2 and
     * >= (|n| - 127 d)^2.  Below d_lo either bound reaches the best error
     * already found: those scales cannot win, and their breakpoints are
     * applied up front instead of sorted (about half of them). */
    float pmax = 0.0f, nmax = 0.0f;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        const float xs = sign * x[j];
        pmax = KVQ_MAX(pmax, xs);
        nmax = KVQ_MAX(nmax, -xs);
    }
    const double root = sqrt(best->sse);
    const float d_lo = (float)KVQ_MAX(0.0, KVQ_MAX((pmax - root) / 113.0, (nmax - root) / 127.0));

    scale_event ev[KVQ_BLOCK * 8];
    int nev = 0;
    double sxt = 0, stt = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        const float xs = sign * x[j];
        /* as d grows from 0+, x/d moves from +-inf towards 0: the index
         * steps towards the entry 1 (index 8) */
        int k = xs > 0 ? 15 : xs < 0 ? 0 : 8;
        const int step = xs > 0 ? -1 : 1;
        /* breakpoints at or below d_lo are applied now, the others queued */
        for (; k != 8; k += step) {
            const int to = k + step;
            const float mid = kvq_iq4nl_mids[KVQ_MIN(k, to)];
            if (xs / mid > d_lo) break;
        }
        sxt += (double)xs * kvq_iq4nl_values[k];
        stt += (double)kvq_iq4nl_values[k] * kvq_iq4nl_values[k];
        for (; k != 8; k += step) {
            const int to = k + step;
            const float mid = kvq_iq4nl_mids[KVQ_MIN(k, to)];
            ev[nev++] = (scale_event){ xs / mid, xs, kvq_iq4nl_values[k], kvq_iq4nl_values[to] };
        }
    }
    if (nev > 0) sort_events(ev, nev);
    scale_choice local = { 0.0f, best->sse };
    float lo = d_lo;
    for (int e = 0; e <= nev; e++) {
        const float hi = e < nev ? ev[e].d : INFINITY;
        /* the parabola's minimum bounds every candidate of the interval */
        double floor_sse = sxx - sxt * sxt / stt;
        if (hi >= lo && floor_sse < local.sse) try_interval(sxx, sxt, stt, lo, hi, &local);
        if (e == nev) break;
        sxt += (double)ev[e].x * (ev[e].t_to - ev[e].t_from);
        stt += (double)ev[e].t_to * ev[e].t_to - (double)ev[e].t_from * ev[e].t_from;
        lo = hi;
    }
    if (local.sse < best->sse) { best->sse = local.sse; best->d = sign * local.d; }
}

/* Exact squared error of the block stored with scale d (best indices). */
static double block_sse(const float *x, float d) {
    double sse = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) {
        const double e = d != 0.0f ? (double)x[j] - (double)d * kvq_iq4nl_values[best_index(x[j], d)] : x[j];
        sse += e * e;
    }
    return sse;
}

/* The block stored with scale d and its indices. */
static void pack_block(float d, const uint8_t idx[KVQ_BLOCK], uint8_t *dst) {
    kvq_wr16(dst, kvq_float_to_half(d));
    for (int j = 0; j < 16; j++) dst[2 + j] = (uint8_t)(idx[j] | (idx[j + 16] << 4));
}

/* The block stored with scale d: the best index per value (8, the entry
 * nearest 0, for d = 0). */
static void store_block(const float *x, float d, uint8_t *dst) {
    uint8_t idx[KVQ_BLOCK];
    for (int j = 0; j < KVQ_BLOCK; j++) idx[j] = d != 0.0f ? (uint8_t)best_index(x[j], d) : 8;
    pack_block(d, idx, dst);
}

/* docs/formats.md: a block holding NaN or +-inf decodes to NaN everywhere */
static void store_poisoned(uint8_t *dst) {
    kvq_wr16(dst, KVQ_HALF_NAN);
    memset(dst + 2, 0, 16);
}

/* The exact search's block: the best fp16 scale, then its indices. */
static void encode_block_exact(const float *x, uint8_t *dst) {
    if (!kvq_block_is_finite(x)) { store_poisoned(dst); return; }
    double sxx = 0;
    for (int j = 0; j < KVQ_BLOCK; j++) sxx += (double)x[j] * x[j];
    scale_choice best = { 0.0f, sxx };       /* d = 0 decodes to zeros */
    if (sxx > 0) {
        /* a good first candidate makes the sweeps' pruning effective: the
         * reference's rule, the largest magnitude onto the entry -127 */
        float vmax = 0.0f;
        for (int j = 0; j < KVQ_BLOCK; j++) if (fabsf(x[j]) > fabsf(vmax)) vmax = x[j];
        const float d_ref = kvq_half_to_float(kvq_float_to_half(vmax / -127.0f));
        const double sse_ref = block_sse(x, d_ref);
        if (d_ref != 0.0f && sse_ref < best.sse) { best.sse = sse_ref; best.d = d_ref; }
        sweep_scales(x, 1.0f, sxx, &best);
        sweep_scales(x, -1.0f, sxx, &best);
    }
    store_block(x, best.d, dst);
}

static void decode_block(const uint8_t *src, float *y) {
    const float d = kvq_half_to_float(kvq_rd16(src));
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)kvq_iq4nl_values[src[2 + j] & 15];
        y[j + 16] = d * (float)kvq_iq4nl_values[src[2 + j] >> 4];
    }
}

void kvq_iq4_nl_quantize_exact(const float *x, void *dst, int64_t n) {
    uint8_t *out = dst;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, out += KVQ_BYTES_IQ4_NL) encode_block_exact(x + i, out);
}

/* ------------------------------------------------------- the scale search */

/* The candidates' |d| as multiples of the reference's max|x|/127 (which
 * maps the largest value onto the entry -127).  The exact optimum lies at
 * 0.86-1.9 of it on Gaussian, Laplace, uniform and outlier blocks, most
 * often at 0.9-1.2; of the 8-value sets tried, refined twice, this one
 * came closest to the optimum (docs/formats.md). */
static const float search_ratio[8] = { 0.90f, 0.96f, 1.0f, 1.04f, 1.09f, 1.15f, 1.25f, 1.42f };
enum { SEARCH_PASSES = 3 };
_Static_assert(SEARCH_PASSES >= 2, "the first pass refines, and keep comes after it");

/*
 * Lanes 0-7 take the sign that maps the largest-magnitude value m onto the
 * negative end of the codebook (-127), lanes 8-15 the other (113).  Each
 * pass scores every lane's scale; between passes a lane moves to its
 * least-squares scale sxt/stt for the indices it chose (rounded to fp16).
 * After the first pass only the 8 lanes that scored lowest go on (the
 * levels' `keep`, moved to lanes 0-7 in their order; the others' errors
 * cannot win: each kept lane scored at most as much in the same pass,
 * and a lane's error only goes down).  Refining the 8 weakest of the 16
 * rarely paid: on Gaussian blocks the mean error against the exact
 * optimum went from 1.00053 to 1.00067 (docs/formats.md), for 4 vector
 * passes at AVX2 where 6 went.  The block keeps the
 * lowest error seen (ties: the earlier pass and lane; d = 0 when nothing
 * beats storing zeros).  Lane 2 of the first pass is the max-magnitude
 * rule, d = fp16(m / -127).  The level's steps (ops) score the lanes,
 * round their scales and find the stored indices; the choices between
 * them are made here, once for every level.
 */
typedef struct block_search {
    float sxx;              /* the error of storing zeros               */
    kvq_iq4nl_lanes L;      /* the candidates and each lane's best      */
} block_search;

/* Store the blocks that need no search (non-finite, all zeros, too large
 * for float sums), or set up the lanes of one that does: returns whether
 * it does. */
static bool search_start(const float *x, uint8_t *dst, const kvq_iq4nl_ops *ops, block_search *bs) {
    /* the sum of squares in four interleaved parts, not one chain of 32
     * adds (this runs for every block of every cache write); the square
     * its own statement, so that no compiler fuses it into the add */
    float part[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
    for (int j = 0; j < KVQ_BLOCK; j += 4)
        for (int k = 0; k < 4; k++) {
            const float xx = x[j + k] * x[j + k];
            part[k] += xx;
        }
    const float sxx = (part[0] + part[1]) + (part[2] + part[3]);
    /* the lanes sum in float: a block anywhere near FLT_MAX goes to the
     * exact search, which sums in double.  NaN or +-inf anywhere fails
     * the test too, and the exact search stores those blocks poisoned. */
    if (!(sxx < 1e30f)) { encode_block_exact(x, dst); return false; }
    float amax = 0.0f;
    for (int j = 0; j < KVQ_BLOCK; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    if (!(amax > 0.0f)) { store_block(x, 0.0f, dst); return false; }
    int jm = 0;
    while (fabsf(x[jm]) != amax) jm++;   /* the first value of largest magnitude */
    const float m = x[jm];
    kvq_iq4nl_lanes *L = &bs->L;
    float want[KVQ_IQ4NL_LANES];
    const float ref = amax / 127.0f;
    for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {
        want[i] = ref * search_ratio[i % 8];
        L->sg[i] = (i < 8) == (m > 0.0f) ? -1.0f : 1.0f;
        L->best_sse[i] = sxx;
        L->best_d[i] = 0.0f;
        L->best_pass[i] = (float)SEARCH_PASSES;
    }
    ops->scales(want, L->ad);
    bs->sxx = sxx;
    return true;
}

/* After the passes: the best lane (the first of the lowest errors in
 * (pass, lane) order, each lane having kept its own first lowest), its
 * indices, the block. */
static void search_finish(const float *x, uint8_t *dst, const kvq_iq4nl_ops *ops, const block_search *bs) {
    const kvq_iq4nl_lanes *L = &bs->L;
    float best_d = 0.0f, best_sse = bs->sxx, best_p = (float)SEARCH_PASSES;
    for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {   /* selects, not branches: the winner is data */
        const bool take = L->best_sse[i] < best_sse || (L->best_sse[i] == best_sse && L->best_pass[i] < best_p);
        best_sse = take ? L->best_sse[i] : best_sse;
        best_d = take ? L->best_d[i] : best_d;
        best_p = take ? L->best_pass[i] : best_p;
    }
    if (best_d == 0.0f) { store_block(x, 0.0f, dst); return; }   /* nothing beat storing zeros */
    uint8_t idx[KVQ_BLOCK];
    ops->indices(x, best_d, idx);
    pack_block(best_d, idx, dst);
}

/* Blocks are searched in groups, pass by pass: the passes of different
 * blocks are independent, so one block's pass overlaps the next one's in
 * the CPU, where a block's own passes wait for each other (each starts
 * from the scales the previous one refined). */
enum { SEARCH_GROUP = 8 };

void kvq_iq4nl_quantize_with(const float *x, void *dst, int64_t n, const kvq_iq4nl_ops *ops) {
    uint8_t *out = dst;
    for (int64_t g = 0; g < n; g += SEARCH_GROUP * KVQ_BLOCK) {
        const int nb = (int)KVQ_MIN((int64_t)SEARCH_GROUP, (n - g) / KVQ_BLOCK);
        block_search bs[SEARCH_GROUP];
        int live[SEARCH_GROUP], nlive = 0;
        for (int b = 0; b < nb; b++) {
            const int64_t i = g + (int64_t)b * KVQ_BLOCK;
            if (search_start(x + i, out + i / KVQ_BLOCK * KVQ_BYTES_IQ4_NL, ops, &bs[b])) live[nlive++] = b;
        }
        for (int k = 0; k < nlive; k++) {
            ops->pass(x + g + (int64_t)live[k] * KVQ_BLOCK, &bs[live[k]].L, 0, true);
            ops->keep(&bs[live[k]].L);
        }
        for (int p = 1; p < SEARCH_PASSES; p++) {
            int k = 0;
            for (; ops->pass_pair && k + 1 < nlive; k += 2)   /* two blocks' kept lanes in one vector */
                ops->pass_pair(x + g + (int64_t)live[k] * KVQ_BLOCK, x + g + (int64_t)live[k + 1] * KVQ_BLOCK,
                               &bs[live[k]].L, &bs[live[k + 1]].L, p, p + 1 < SEARCH_PASSES);
            for (; k < nlive; k++)
                ops->pass(x + g + (int64_t)live[k] * KVQ_BLOCK, &bs[live[k]].L, p, p + 1 < SEARCH_PASSES);
        }
        for (int k = 0; k < nlive; k++) {
            const int64_t i = g + (int64_t)live[k] * KVQ_BLOCK;
            search_finish(x + i, out + i / KVQ_BLOCK * KVQ_BYTES_IQ4_NL, ops, &bs[live[k]]);
        }
    }
}

/* The scalar level's steps: the same source as the SIMD levels', one lane
 * per "vector". */
#define IQ4NL_OPS iq4nl_ops_scalar
#include "iq4nl_search.inc"
const kvq_iq4nl_ops *kvq_iq4nl_ops_scalar(void) { return &iq4nl_ops_scalar; }

void kvq_iq4_nl_quantize(const float *x, void *dst, int64_t n) {
    kvq_iq4nl_quantize_with(x, dst, n, &iq4nl_ops_scalar);
}

void kvq_iq4_nl_dequantize(const void *src, float *y, int64_t n) {
    const uint8_t *in = src;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_IQ4_NL) decode_block(in, y + i);
}

float kvq_iq4_nl_dot(const void *row, const float *x, int64_t n) {
    const uint8_t *in = row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_IQ4_NL) {
        float s = 0.0f;
        for (int j = 0; j < 16; j++)
            s += (float)kvq_iq4nl_values[in[2 + j] & 15] * x[i + j] +
                 (float)kvq_iq4nl_values[in[2 + j] >> 4] * x[i + j + 16];
        sum += kvq_half_to_float(kvq_rd16(in)) * s;
    }
    return sum;
}

void kvq_iq4_nl_axpy(float w, const void *row, float *y, int64_t n) {
    const uint8_t *in = row;
    float tmp[KVQ_BLOCK];
    for (int64_t i = 0; i < n; i += KVQ_BLOCK, in += KVQ_BYTES_IQ4_NL) {
        decode_block(in, tmp);
        for (int j = 0; j < KVQ_BLOCK; j++) y[i + j] += w * tmp[j];
    }
}
