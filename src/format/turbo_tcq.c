/* turbo_tcq.c - the bit-shift trellis of turbo2/3/4_tcq (docs/spec/formats.md §5):
 * Viterbi encoder, greedy encoder (the test's scalar baseline), decoder
 * and the scalar rotated-domain kernels.
 *
 * With k bits per value and L = 6 + k state bits, s_t = (s_{t-1} >> k) |
 * (o_t << 6).  Written as a bit stream (6 initial bits, then o_0, o_1, ...)
 * the state s_t is simply the L-bit window at bit t*k, so decoding needs no
 * sequential state: every value's codebook index is read directly.
 *
 * The predecessors of s are the 2^k states p with p >> k == s & 63, so the
 * best path into s is  min_j cost[((s & 63) << k) | j] + (x_t - c[s])^2:
 * the minimum depends only on the 6-bit context s & 63.  One step is
 * therefore 2^L comparisons (64 minima over 2^k each) plus 2^L squared
 * errors, O(2^L) and not O(2^L * 2^k).
 *
 * Two searches.  The encoder's (kvq_turbo_tcq_viterbi, its scalar form
 * here and its vector forms in turbo_viterbi16.inc) runs on 16-bit
 * integer costs on a fixed-point grid of the row (turbo_internal.h):
 * twice the states per vector of a float search, a path within a
 * rounding bound of the least.  The float search
 * (kvq_turbo_tcq_viterbi_exact) finds the least error itself (its minima
 * over tagged costs, a cost fmaf(e, e, in)); the tests measure the
 * integer one against it. */
#include "turbo_internal.h"

#include <math.h>
#include <pthread.h>

#define CTX_BITS KVQ_TURBO_TCQ_CONTEXT
#define CTX_MASK ((1 << CTX_BITS) - 1)
#define N_CTX (1 << CTX_BITS)

/* The committed codebooks: the trained tables (turbo_tcq_tables.c)
 * rounded to the nearest multiple of 2^-TURBO_TCQ_STEP_BITS, so that every
 * value is a signed byte times one power of two (turbo_internal.h).  A
 * decoder then reads one byte per value where it read a float's four
 * (turbo_tcq64.inc), and every level still decodes the same floats: n
 * 2^-5 is exact.  The rounding alone would add about 2^-10 / 12 = 8.1e-5
 * (a uniform error within half a step) to the error per unit-variance
 * value; the encoder searches against the rounded values and loses almost
 * none of it (docs/turbo.md, "The codebook's grid"). */
static float g_codebook[TURBO_TCQ_WIDTHS][TURBO_MAX_STATES];
static int8_t g_codebook_steps[TURBO_TCQ_WIDTHS][TURBO_MAX_STATES];
static pthread_once_t g_codebook_once = PTHREAD_ONCE_INIT;

static const float *trained_table(int k) {
    return k == 2 ? kvq_turbo_tcq_table2 : k == 3 ? kvq_turbo_tcq_table3 : kvq_turbo_tcq_table4;
}

static void round_codebooks(void) {
    const float step = ldexpf(1.0f, -TURBO_TCQ_STEP_BITS);
    for (int k = 2; k <= 4; k++)
        for (int s = 0; s < 1 << (CTX_BITS + k); s++) {
            /* |value| < 4 in every trained table: n within the byte */
            const long n = lrintf(trained_table(k)[s] / step);
            const int8_t b = (int8_t)(n < -128 ? -128 : n > 127 ? 127 : n);
            g_codebook_steps[k - 2][s] = b;
            g_codebook[k - 2][s] = (float)b * step;
        }
}

const float *kvq_turbo_tcq_codebook(int k) {
    if (k < 2 || k > 4) return NULL;
    pthread_once(&g_codebook_once, round_codebooks);
    return g_codebook[k - 2];
}

const int8_t *turbo_tcq_codebook_steps(int k) {
    if (k < 2 || k > 4) return NULL;
    pthread_once(&g_codebook_once, round_codebooks);
    return g_codebook_steps[k - 2];
}

static bool viterbi_args_ok(int k, const float *c, int d) {
    return k >= 2 && k <= 4 && c && d >= 1 && d <= KVQ_TURBO_BLOCK;
}

/* Walk the back-pointers from the final state. */
void turbo_tcq_backtrack(int k, const uint8_t (*back)[N_CTX], int d, int last, uint16_t *states) {
    int s = last;
    states[d - 1] = (uint16_t)s;
    for (int t = d - 1; t > 0; t--) {
        int ctx = s & CTX_MASK;
        s = (ctx << k) | back[t][ctx];
        states[t - 1] = (uint16_t)s;
    }
}

static float g_pairs2[2 << (CTX_BITS + 4)], g_pairs3[2 << (CTX_BITS + 6)], g_pairs4[2 << (CTX_BITS + 8)];
static pthread_once_t g_pairs_once = PTHREAD_ONCE_INIT;

static void make_pairs(void) {
    float *const tables[3] = { g_pairs2, g_pairs3, g_pairs4 };
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k);
        const uint32_t mask = (1u << (CTX_BITS + k)) - 1;
        for (uint32_t i = 0; i < 1u << (CTX_BITS + 2 * k); i++) {
            tables[k - 2][2 * i] = c[i & mask];
            tables[k - 2][2 * i + 1] = c[i >> k];
        }
    }
}

const float *turbo_tcq_pairs(int k) {
    pthread_once(&g_pairs_once, make_pairs);
    return k == 2 ? g_pairs2 : k == 3 ? g_pairs3 : g_pairs4;
}

/* ----------------------------------------------- the 16-bit search */

float turbo_tcq_xmax(const float *x, int d) {
    float m = 0.0f;
    for (int t = 0; t < d; t++) {
        const float v = fabsf(x[t]);
        if (v > m && isfinite(v)) m = v;
    }
    return m;
}

/* The largest a <= 13 at which the codebook's largest magnitude cmax and
 * the row's xmax are at most 32767 2^-a: the finest grid that clamps
 * nothing finite. */
int turbo_tcq_shift(float cmax, float xmax) {
    const float m = fmaxf(cmax, xmax);
    int a = TURBO_TCQ_TOP_SHIFT;
    while (a > TURBO_TCQ_MIN_SHIFT && ldexpf(m, a) > 32767.0f) a--;
    return a;
}

double turbo_tcq_path_error(const float *c, const float *x, const uint16_t *states, int d) {
    double err = 0.0;
    for (int t = 0; t < d; t++) {
        const double e = (double)x[t] - c[states[t]];
        err += e * e;
    }
    return err;
}

static void make_layout(int k, const float *c, int shift, turbo_tcq_layout *l) {
    const int K = 1 << k;
    l->shift = shift;
    l->scale = ldexpf(1.0f, shift);
    for (int s = 0; s < (N_CTX << k); s++) {
        l->cstate[s] = turbo_tcq_fixed(c[s], l->scale);
        l->cpos[(s & (K - 1)) * N_CTX + (s >> k)] = l->cstate[s];
    }
}

/* The committed codebooks' layouts at the top shifts and their largest
 * magnitudes, made once. */
static turbo_tcq_layout g_layouts[TURBO_TCQ_WIDTHS][TURBO_TCQ_CACHED_SHIFTS];
static float g_cmax[TURBO_TCQ_WIDTHS];
static pthread_once_t g_layouts_once = PTHREAD_ONCE_INIT;

static void make_layouts(void) {
    for (int k = 2; k <= 4; k++) {
        g_cmax[k - 2] = turbo_tcq_xmax(kvq_turbo_tcq_codebook(k), N_CTX << k);
        for (int i = 0; i < TURBO_TCQ_CACHED_SHIFTS; i++)
            make_layout(k, kvq_turbo_tcq_codebook(k), TURBO_TCQ_TOP_SHIFT - i, &g_layouts[k - 2][i]);
    }
}

const turbo_tcq_layout *turbo_tcq_layout_of(int k, const float *c, int shift, turbo_tcq_layout *own) {
    const int i = TURBO_TCQ_TOP_SHIFT - shift;
    if (c == kvq_turbo_tcq_codebook(k) && i >= 0 && i < TURBO_TCQ_CACHED_SHIFTS) {   /* const: made once */
        pthread_once(&g_layouts_once, make_layouts);
        return &g_layouts[k - 2][i];
    }
    make_layout(k, c, shift, own);
    return own;
}

const turbo_tcq_layout *turbo_tcq_row_layout(int k, const float *c, float xmax, turbo_tcq_layout *own) {
    const bool committed = c == kvq_turbo_tcq_codebook(k);
    if (committed) pthread_once(&g_layouts_once, make_layouts);
    const float cmax = committed ? g_cmax[k - 2] : turbo_tcq_xmax(c, N_CTX << k);
    return turbo_tcq_layout_of(k, c, turbo_tcq_shift(cmax, xmax), own);
}

/* The 16-bit search (turbo_internal.h) in plain C: the oracle of the
 * vector forms (turbo_viterbi16.inc).  At each step, for each context, the
 * best of its 2^k predecessors' costs (unsigned; the first on ties) less
 * the floor (the least of the step's own arrival costs), then every
 * state's cost; at the end the first state of least cost, and the walk
 * back. */
void turbo_tcq_search_scalar(int k, const float *c, const float *x, int d, uint16_t *states) {
    turbo_tcq_layout own;
    const turbo_tcq_layout *lay = turbo_tcq_row_layout(k, c, turbo_tcq_xmax(x, d), &own);
    const int n_states = 1 << (CTX_BITS + k), branches = 1 << k;
    uint16_t cost[TURBO_MAX_STATES], in[N_CTX];
    uint8_t back[KVQ_TURBO_BLOCK][N_CTX];
    int16_t X = turbo_tcq_fixed(x[0], lay->scale);
    for (int s = 0; s < n_states; s++) cost[s] = turbo_tcq_cost16(0, X, lay->cstate[s]);
    memset(in, 0, sizeof in);
    for (int t = 1; t < d; t++) {
        uint16_t low = UINT16_MAX;   /* the previous arrivals' least: no cost of step t-1 is below it */
        for (int ctx = 0; ctx < N_CTX; ctx++)
            if (in[ctx] < low) low = in[ctx];
        for (int ctx = 0; ctx < N_CTX; ctx++) {
            const uint16_t *pred = cost + (ctx << k);
            int bj = 0;
            for (int j = 1; j < branches; j++)
                if (pred[j] < pred[bj]) bj = j;
            in[ctx] = (uint16_t)(pred[bj] - low);
            back[t][ctx] = (uint8_t)bj;
        }
        X = turbo_tcq_fixed(x[t], lay->scale);
        for (int s = 0; s < n_states; s++) cost[s] = turbo_tcq_cost16(in[s & CTX_MASK], X, lay->cstate[s]);
    }
    int last = 0;
    for (int s = 1; s < n_states; s++)
        if (cost[s] < cost[last]) last = s;
    turbo_tcq_backtrack(k, (const uint8_t (*)[N_CTX])back, d, last, states);
}

double kvq_turbo_tcq_viterbi_scalar(int k, const float *c, const float *x, int d, uint16_t *states) {
    if (!viterbi_args_ok(k, c, d)) return NAN;
    turbo_tcq_search_scalar(k, c, x, d, states);
    return turbo_tcq_path_error(c, x, states, d);
}

/* The best predecessor of a context among the n = 2^k costs at pred:
 * their smallest tagged pattern (its tag j is the back-pointer). */
static uint32_t tagged_min(const float *pred, int n) {
    const uint32_t mask = (uint32_t)n - 1;
    uint32_t best = turbo_tcq_tag(pred[0], 0, mask);
    for (int j = 1; j < n; j++) {
        const uint32_t t = turbo_tcq_tag(pred[j], j, mask);
        if (t < best) best = t;
    }
    return best;
}

static int argmin_first(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] < v[best]) best = i;
    return best;
}

double kvq_turbo_tcq_viterbi_exact(int k, const float *c, const float *x, int d, uint16_t *states) {
    if (!viterbi_args_ok(k, c, d)) return NAN;
    const int n_states = 1 << (CTX_BITS + k), branches = 1 << k;
    float cost[TURBO_MAX_STATES], min_in[N_CTX];
    uint8_t back[KVQ_TURBO_BLOCK][N_CTX];
    /* t = 0: the 6 initial bits are free, so every state can start */
    for (int s = 0; s < n_states; s++) {
        float e = x[0] - c[s];
        cost[s] = e * e;
    }
    for (int t = 1; t < d; t++) {
        for (int ctx = 0; ctx < N_CTX; ctx++) {     /* best predecessor per context */
            const uint32_t best = tagged_min(cost + (ctx << k), branches);
            min_in[ctx] = kvq_bits_f32(best);
            back[t][ctx] = (uint8_t)(best & (uint32_t)(branches - 1));
        }
        for (int s = 0; s < n_states; s++) {
            float e = x[t] - c[s];
            cost[s] = fmaf(e, e, min_in[s & CTX_MASK]);
        }
    }
    int last = argmin_first(cost, n_states);
    turbo_tcq_backtrack(k, (const uint8_t (*)[N_CTX])back, d, last, states);
    return cost[last];
}

double kvq_turbo_tcq_viterbi(int k, const float *c, const float *x, int d, uint16_t *states) {
    if (!viterbi_args_ok(k, c, d)) return NAN;
    turbo_active_kernels()->viterbi(k, c, x, d, states);
    return turbo_tcq_path_error(c, x, states, d);
}

/* Each step takes the branch nearest to x_t from the current context; the
 * first step may pick any state (its 6 context bits are free). */
double kvq_turbo_tcq_greedy(int k, const float *c, const float *x, int d, uint16_t *states) {
    if (!viterbi_args_ok(k, c, d)) return NAN;
    double err = 0.0;
    int ctx = -1;
    for (int t = 0; t < d; t++) {
        int best = -1;
        float best_e = INFINITY;
        for (int s = 0; s < (1 << (CTX_BITS + k)); s++) {
            if (ctx >= 0 && (s & CTX_MASK) != ctx) continue;
            float e = (x[t] - c[s]) * (x[t] - c[s]);
            if (e < best_e) best_e = e, best = s;
        }
        states[t] = (uint16_t)best;
        err += best_e;
        ctx = best >> k;
    }
    return err;
}

/* ----------------------------------------------------------- bit stream */

static void put_bits(uint8_t *codes, int pos, uint32_t value, int bits) {
    for (int i = 0; i < bits; i++)
        if (value >> i & 1u) codes[(pos + i) >> 3] |= (uint8_t)(1u << ((pos + i) & 7));
}

/* The stream put_bits writes (6 context bits, then k bits per value,
 * OR-ed in little-endian order), a byte at a time through a bit buffer. */
static inline __attribute__((always_inline)) void put_stream_k(uint8_t *codes, const uint16_t *states, int d,
                                                               const int k) {
    uint64_t acc = states[0] & CTX_MASK;
    int nbits = CTX_BITS, pos = 0, t = 0;
    /* 8 values are k whole bytes: a group's codes in one word, put after
     * the 6 bits still pending, and k bytes out at once (the loop below
     * tests for a whole byte after every value) */
    for (; t + 8 <= d; t += 8) {
        uint64_t w = 0;
        for (int j = 0; j < 8; j++) w |= (uint64_t)(states[t + j] >> CTX_BITS) << (j * k);
        acc |= w << CTX_BITS;
        for (int b = 0; b < k; b++) codes[pos++] |= (uint8_t)(acc >> (8 * b));
        acc >>= 8 * k;
    }
    for (; t < d; t++) {
        acc |= (uint64_t)(states[t] >> CTX_BITS) << nbits;
        for (nbits += k; nbits >= 8; nbits -= 8, acc >>= 8) codes[pos++] |= (uint8_t)acc;
    }
    if (nbits) codes[pos] |= (uint8_t)acc;
}

/* k a constant in each case: the group's shifts are immediates */
static void put_stream(uint8_t *codes, const uint16_t *states, int d, int k) {
    switch (k) {
    case 2: put_stream_k(codes, states, d, 2); break;
    case 3: put_stream_k(codes, states, d, 3); break;
    default: put_stream_k(codes, states, d, 4); break;
    }
}

/* sum c[s_t]^2 of a path: the reconstruction's squared norm */
static double path_sumsq(const float *c, const uint16_t *states, int d) {
    double sumsq = 0.0;
    for (int t = 0; t < d; t++) sumsq += (double)c[states[t]] * c[states[t]];
    return sumsq;
}

double turbo_tcq_store(int k, const uint16_t *states, int d, uint8_t *codes) {
    put_stream(codes, states, d, k);
    return path_sumsq(kvq_turbo_tcq_codebook(k), states, d);
}

void turbo_tcq_store2(int k, const uint16_t *const states[2], int d, uint8_t *const codes[2], double sumsq[2]) {
    for (int r = 0; r < 2; r++) put_stream(codes[r], states[r], d, k);
    /* path_sumsq of both rows in one loop: each row's sum in its own
     * order (the same value), the two chains of dependent adds side by
     * side */
    const float *c = kvq_turbo_tcq_codebook(k);
    double s0 = 0.0, s1 = 0.0;
    for (int t = 0; t < d; t++) {
        s0 += (double)c[states[0][t]] * c[states[0][t]];
        s1 += (double)c[states[1][t]] * c[states[1][t]];
    }
    sumsq[0] = s0;
    sumsq[1] = s1;
}

double turbo_tcq_encode(int k, const float *x, int d, uint8_t *codes, turbo_viterbi_fn viterbi) {
    uint16_t states[KVQ_TURBO_BLOCK];
    viterbi(k, kvq_turbo_tcq_codebook(k), x, d, states);
    if (viterbi != turbo_tcq_search_scalar) return turbo_tcq_store(k, states, d, codes);
    put_bits(codes, 0, states[0] & CTX_MASK, CTX_BITS);      /* the reference: bit by bit */
    for (int t = 0; t < d; t++) put_bits(codes, CTX_BITS + t * k, (uint32_t)states[t] >> CTX_BITS, k);
    return path_sumsq(kvq_turbo_tcq_codebook(k), states, d);
}

float turbo_tcq_dot_ref(const uint8_t *codes, const float *codebook, int k,
                        const float *q_rot, int d) {
    uint64_t mask = (1u << (CTX_BITS + k)) - 1;
    float sum = 0.0f;
    for (int g = 0; g < d / 8; g++) {
        uint64_t w = turbo_tcq_group(codes, k, g);
        for (int j = 0; j < 8; j++) sum += codebook[(w >> (j * k)) & mask] * q_rot[8 * g + j];
    }
    return sum;
}

void turbo_tcq_axpy_ref(const uint8_t *codes, const float *codebook, int k,
                        float w_scale, float *acc_rot, int d) {
    uint64_t mask = (1u << (CTX_BITS + k)) - 1;
    for (int g = 0; g < d / 8; g++) {
        uint64_t w = turbo_tcq_group(codes, k, g);
        for (int j = 0; j < 8; j++) acc_rot[8 * g + j] += w_scale * codebook[(w >> (j * k)) & mask];
    }
}
