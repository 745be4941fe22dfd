/* test_turbo.c - the TurboQuant module (src/format/turbo.h): sizes, codebooks,
 * round-trip error against the published figures, the trellis really
 * being a trellis, inner-product bias, rotated-domain kernels, SIMD vs
 * scalar, determinism, heads of 64 and odd sizes, bad input. */
#include "test.h"
#include "turbo.h"
#include "turbo_internal.h"
#include "kvq_internal.h"

#include <string.h>

#define MAX_DIM 256
#define ALL_TYPES(ty) for (kvq_turbo_type ty = 0; ty < KVQ_TURBO_COUNT; ty++)

static void gauss_vec(test_rng *r, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = (float)test_rng_gauss(r);
}

static double dot_d(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Round trip of one vector; returns ||x - x_hat||^2 / ||x||^2 and, when
 * paper_err is given, the paper's direction error ||u - c_hat||^2 with
 * c_hat = x_hat / norm' (the reconstruction without the norm correction;
 * norm' is the block's first fp16, see turbo.h). */
static double round_trip(kvq_turbo_type ty, const float *x, int d, double *paper_err) {
    uint8_t row[256];
    float y[MAX_DIM];
    kvq_turbo_quantize(ty, x, row, d, NULL);
    kvq_turbo_dequantize(ty, row, y, d, NULL);
    double n2 = dot_d(x, x, d), e = 0.0, pe = 0.0, n = sqrt(n2);
    double norm_prime = kvq_half_to_float(kvq_rd16(row));
    for (int i = 0; i < d; i++) {
        e += (x[i] - y[i]) * (double)(x[i] - y[i]);
        double diff = x[i] / n - y[i] / norm_prime;
        pe += diff * diff;
    }
    if (paper_err) *paper_err = pe;
    return e / n2;
}

typedef struct nmse { double format, paper; } nmse;

static nmse mean_nmse(kvq_turbo_type ty, int d, int n_vec, uint64_t seed) {
    test_rng r = { seed, 0, 0 };
    float x[MAX_DIM];
    nmse m = { 0, 0 };
    for (int v = 0; v < n_vec; v++) {
        gauss_vec(&r, x, d);
        double pe;
        m.format += round_trip(ty, x, d, &pe);
        m.paper += pe;
    }
    m.format /= n_vec, m.paper /= n_vec;
    return m;
}

static int n_vectors(int full) { return test_sanitized() ? full / 8 : full; }

/* ------------------------------------------------------------------ sizes */

TEST(turbo_sizes) {
    static const size_t want128[] = { 34, 50, 66, 36, 52, 68 }, want64[] = { 18, 26, 34, 20, 28, 36 };
    ALL_TYPES(ty) {
        CHECK(kvq_turbo_block_bytes(ty, 128) == want128[ty], "%s: %zu bytes per 128", kvq_turbo_name(ty),
              kvq_turbo_block_bytes(ty, 128));
        CHECK(kvq_turbo_block_bytes(ty, 64) == want64[ty], "%s: %zu bytes per 64", kvq_turbo_name(ty),
              kvq_turbo_block_bytes(ty, 64));
        CHECK(kvq_turbo_row_bytes(ty, 128) == want128[ty], "%s row 128", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 64) == want64[ty], "%s row 64", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 256) == 2 * want128[ty], "%s row 256", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 192) == want128[ty] + want64[ty], "%s row 192", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 96) == want128[ty], "%s row 96 (one padded 128)", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 1) == want64[ty], "%s row 1 (one padded 64)", kvq_turbo_name(ty));
        CHECK(kvq_turbo_row_bytes(ty, 0) == 0 && kvq_turbo_row_bytes(ty, -5) == 0, "bad head size accepted");
        CHECK(kvq_turbo_from_name(kvq_turbo_name(ty)) == ty, "name round trip %s", kvq_turbo_name(ty));
    }
    CHECK(fabs(kvq_turbo_bpv(KVQ_TURBO3, 128) - 3.125) < 1e-12, "turbo3 bpv %g", kvq_turbo_bpv(KVQ_TURBO3, 128));
    CHECK(fabs(kvq_turbo_bpv(KVQ_TURBO2_TCQ, 128) - 2.25) < 1e-12, "turbo2_tcq bpv");
    CHECK(kvq_turbo_rot_dim(96) == 128 && kvq_turbo_rot_dim(192) == 192 && kvq_turbo_rot_dim(200) == 256,
          "rot dims %d %d %d", kvq_turbo_rot_dim(96), kvq_turbo_rot_dim(192), kvq_turbo_rot_dim(200));
    CHECK(kvq_turbo_row_bytes(KVQ_TURBO_COUNT, 128) == 0, "unknown type has a size");
    CHECK(kvq_turbo_from_name("turbo5") == KVQ_TURBO_COUNT, "unknown name accepted");
}

/* -------------------------------------------------------------- codebooks */

TEST(turbo_lloyd_centroids_match_published) {
    static const double pub2[] = { 0.4528, 1.5104 };
    static const double pub3[] = { 0.2451, 0.7560, 1.3439, 2.1519 };
    static const double pub4[] = { 0.1284, 0.3881, 0.6568, 0.9423, 1.2562, 1.6180, 2.0690, 2.7326 };
    const double *pub[] = { NULL, NULL, pub2, pub3, pub4 };
    for (int b = 2; b <= 4; b++) {
        const float *c = kvq_turbo_lloyd_centroids(b);
        int n = 1 << b, half = n / 2;
        for (int i = 0; i < half; i++) {
            CHECK(fabs(c[half + i] - pub[b][i]) < 1e-3, "b=%d centroid +%d: %.5f vs %.4f", b, i, c[half + i], pub[b][i]);
            CHECK(fabs(c[half - 1 - i] + pub[b][i]) < 1e-3, "b=%d centroid -%d: %.5f", b, i, c[half - 1 - i]);
        }
    }
    /* the distortions the NMSE targets come from */
    CHECK(fabs(kvq_turbo_lloyd_mse(2) - 0.1175) < 2e-4, "D2 %.5f", kvq_turbo_lloyd_mse(2));
    CHECK(fabs(kvq_turbo_lloyd_mse(3) - 0.03455) < 1e-4, "D3 %.5f", kvq_turbo_lloyd_mse(3));
    CHECK(fabs(kvq_turbo_lloyd_mse(4) - 0.0095) < 1e-4, "D4 %.5f", kvq_turbo_lloyd_mse(4));
}

TEST(turbo_tcq_codebooks_sane) {
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k);
        int n = 1 << (6 + k);
        double mean = 0, var = 0;
        for (int s = 0; s < n; s++) mean += c[s], var += (double)c[s] * c[s];
        mean /= n, var /= n;
        CHECK(fabs(mean) < 0.1 && var > 0.6 && var < 1.5, "k=%d codebook mean %.3f var %.3f", k, mean, var);
    }
    CHECK(kvq_turbo_tcq_codebook(1) == NULL && kvq_turbo_tcq_codebook(5) == NULL, "bad k has a codebook");
}

/* The format's codebook is the trained table on the grid of 2^-5
 * (turbo_tcq.c): every value a signed byte of steps, exactly, and the
 * nearest grid point to the trained value; the steps the VBMI tables
 * read are those bytes. */
TEST(turbo_tcq_codebook_on_its_grid) {
    const float step = ldexpf(1.0f, -TURBO_TCQ_STEP_BITS);
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k), *trained = k == 2 ? kvq_turbo_tcq_table2
                                                              : k == 3 ? kvq_turbo_tcq_table3
                                                                       : kvq_turbo_tcq_table4;
        const int8_t *n = turbo_tcq_codebook_steps(k);
        int off = 0, moved = 0;
        for (int s = 0; s < 1 << (6 + k); s++) {
            off += c[s] != (float)n[s] * step;
            off += fabsf(c[s] - trained[s]) > 0.5f * step;
            moved += c[s] != trained[s];
        }
        CHECK(!off, "k=%d: %d values off the grid or not the nearest point", k, off);
        CHECK(moved > 0, "k=%d: the codebook is the trained table itself", k);
        CHECK(kvq_turbo_tcq_codebook(k) == c, "k=%d: the codebook moved", k);
    }
    CHECK(!turbo_tcq_codebook_steps(1) && !turbo_tcq_codebook_steps(5), "bad k has steps");
}

/* -------------------------------------------------------- round-trip error */

TEST(turbo_nmse_matches_paper) {
    static const double target[] = { 0.1175, 0.03455, 0.0095 };
    int n = n_vectors(1500);
    for (kvq_turbo_type ty = KVQ_TURBO2; ty <= KVQ_TURBO4; ty++) {
        nmse m = mean_nmse(ty, 128, n, 11 + ty);
        /* paper's definition (no norm correction) and the stored format */
        CHECK(fabs(m.paper / target[ty] - 1) < 0.05, "%s paper NMSE %.5f vs %.5f", kvq_turbo_name(ty), m.paper, target[ty]);
        CHECK(fabs(m.format / target[ty] - 1) < 0.05, "%s NMSE %.5f vs %.5f", kvq_turbo_name(ty), m.format, target[ty]);
        /* norm correction (||x_hat|| = ||x||) costs little: 2 - 2 sqrt(1 - D) > D */
        CHECK(m.format < 1.05 * m.paper, "%s NMSE %.5f vs paper %.5f", kvq_turbo_name(ty), m.format, m.paper);
    }
}

TEST(turbo_tcq_beats_scalar_by_1db) {
    int n = n_vectors(800);
    for (int b = 2; b <= 4; b++) {
        kvq_turbo_type scalar = (kvq_turbo_type)(KVQ_TURBO2 + b - 2), tcq = (kvq_turbo_type)(KVQ_TURBO2_TCQ + b - 2);
        double es = mean_nmse(scalar, 128, n, 21).format, et = mean_nmse(tcq, 128, n, 21).format;
        double db = 10 * log10(et / es);
        CHECK(db <= -1.0, "%s %.5f vs %s %.5f: only %.2f dB", kvq_turbo_name(tcq), et, kvq_turbo_name(scalar), es, db);
    }
}

TEST(turbo_head64_nmse) {
    static const double target[] = { 0.1175, 0.03455, 0.0095 };
    int n = n_vectors(1500);
    for (kvq_turbo_type ty = KVQ_TURBO2; ty <= KVQ_TURBO4; ty++) {
        nmse m = mean_nmse(ty, 64, n, 31 + ty);
        /* the sphere in 64 dimensions is a little less Gaussian: 8% */
        CHECK(fabs(m.paper / target[ty] - 1) < 0.08, "%s d=64 paper NMSE %.5f", kvq_turbo_name(ty), m.paper);
    }
    for (int b = 2; b <= 4; b++) {
        double es = mean_nmse((kvq_turbo_type)(KVQ_TURBO2 + b - 2), 64, n, 41).format;
        double et = mean_nmse((kvq_turbo_type)(KVQ_TURBO2_TCQ + b - 2), 64, n, 41).format;
        CHECK(10 * log10(et / es) < -0.8, "d=64 k=%d trellis %.5f vs scalar %.5f", b, et, es);
    }
}

/* ------------------------------------------------------ the trellis itself */

/* Exhaustive search over every path of a short sequence: the least sum
 * over t of step(ctx, t, s_t). */
typedef double (*step_cost_fn)(const void *ctx, int t, int s);

static double least_path_cost(int k, int d, step_cost_fn step, const void *ctx) {
    const int L = 6 + k;
    double best = INFINITY;
    const long paths = (1L << L) << (k * (d - 1));
    for (long p = 0; p < paths; p++) {
        int s = (int)(p & ((1 << L) - 1));
        double e = step(ctx, 0, s);
        for (int t = 1; t < d; t++) {
            s = (s >> k) | ((int)((p >> (L + k * (t - 1))) & ((1 << k) - 1)) << 6);
            e += step(ctx, t, s);
        }
        if (e < best) best = e;
    }
    return best;
}

/* The true error: (x_t - c[s])^2. */
typedef struct row_codebook { const float *c, *x; } row_codebook;

static double squared_error(const void *ctx, int t, int s) {
    const row_codebook *rc = ctx;
    return (rc->x[t] - rc->c[s]) * (double)(rc->x[t] - rc->c[s]);
}

static double brute_force(int k, const float *c, const float *x, int d) {
    const row_codebook rc = { c, x };
    return least_path_cost(k, d, squared_error, &rc);
}

TEST(turbo_viterbi_is_optimal) {
    test_rng r = { 5, 0, 0 };
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k);
        int d = k == 4 ? 2 : 3;
        for (int rep = 0; rep < 3; rep++) {
            float x[3];
            uint16_t st[3];
            gauss_vec(&r, x, d);
            double v = kvq_turbo_tcq_viterbi_exact(k, c, x, d, st), bf = brute_force(k, c, x, d);
            CHECK(fabs(v - bf) <= 1e-5 * (1 + bf), "k=%d Viterbi %.7f, exhaustive %.7f", k, v, bf);
            for (int ty = 1; ty < d; ty++)
                CHECK((st[ty] & 63) == st[ty - 1] >> k, "k=%d illegal transition %d -> %d", k, st[ty - 1], st[ty]);
        }
    }
}

/* The 16-bit search's own metric, sum_t sq(X_t, C[s_t]) on the row's grid
 * (turbo_internal.h), of a path. */
static long grid_metric(const turbo_tcq_layout *lay, const int16_t *X, const uint16_t *st, int d) {
    long m = 0;
    for (int t = 0; t < d; t++) m += turbo_tcq_cost16(0, X[t], lay->cstate[st[t]]);
    return m;
}

/* The 16-bit search's step cost on the row's grid, sq(X_t, C[s]) (exact
 * in a double, and so are the sums). */
typedef struct row_grid { const turbo_tcq_layout *lay; const int16_t *X; } row_grid;

static double grid_cost(const void *ctx, int t, int s) {
    const row_grid *g = ctx;
    return turbo_tcq_cost16(0, g->X[t], g->lay->cstate[s]);
}

/* The 16-bit search finds a path of least metric on its grid (exhaustive
 * search on short rows, every k; the subtracted floors are common to
 * every path, and nothing here comes near saturation), on the fine grid
 * of unit-variance rows and on the coarser grid a large value forces. */
TEST(turbo_viterbi16_is_optimal_on_its_grid) {
    test_rng r = { 6, 0, 0 };
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k);
        const int d = k == 4 ? 2 : 3;
        for (int rep = 0; rep < 6; rep++) {
            float x[3];
            gauss_vec(&r, x, d);
            if (rep >= 3) x[rep % d] = 9.5f;   /* grid 2^-11 */
            uint16_t st[3];
            kvq_turbo_tcq_viterbi_scalar(k, c, x, d, st);
            turbo_tcq_layout own;
            const turbo_tcq_layout *lay = turbo_tcq_row_layout(k, c, turbo_tcq_xmax(x, d), &own);
            CHECK(lay->shift == (rep >= 3 ? 11 : 13), "k=%d rep %d: shift %d", k, rep, lay->shift);
            int16_t X[3];
            for (int i = 0; i < d; i++) X[i] = turbo_tcq_fixed(x[i], lay->scale);
            const row_grid g = { lay, X };
            const long found = grid_metric(lay, X, st, d);
            const double best = least_path_cost(k, d, grid_cost, &g);
            CHECK((double)found == best, "k=%d rep %d: path's grid metric %ld, least %.0f", k, rep, found, best);
            for (int i = 1; i < d; i++)
                CHECK((st[i] & 63) == st[i - 1] >> k, "k=%d illegal transition %d -> %d", k, st[i - 1], st[i]);
        }
    }
}

/* The grid: 2^13 while every value is below 4 in magnitude, one step
 * coarser per doubling; non-finite values do not count; values round to
 * nearest (even) and clamp at +-32767, NaN to 0. */
TEST(turbo_tcq_grid) {
    float x[4] = { 0.5f, -3.99f, 1.0f, 2.0f };
    CHECK(turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)) == 13, "shift %d for values below 4", turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)));
    x[2] = -4.01f;
    CHECK(turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)) == 12, "shift %d for 4.01", turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)));
    x[2] = 40.0f;
    CHECK(turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)) == 9, "shift %d for 40", turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)));
    CHECK(turbo_tcq_shift(40.0f, turbo_tcq_xmax(x, 1)) == 9, "shift %d for a codebook value of 40", turbo_tcq_shift(40.0f, turbo_tcq_xmax(x, 1)));
    x[2] = INFINITY;
    x[3] = NAN;
    CHECK(turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)) == 13, "shift %d with inf and NaN", turbo_tcq_shift(3.7f, turbo_tcq_xmax(x, 4)));
    CHECK(turbo_tcq_fixed(1.0f, 8192.0f) == 8192 && turbo_tcq_fixed(-0.5f / 8192.0f, 8192.0f) == 0 &&
              turbo_tcq_fixed(1.5f / 8192.0f, 8192.0f) == 2 && turbo_tcq_fixed(-2.5f / 8192.0f, 8192.0f) == -2,
          "rounding to nearest even");
    CHECK(turbo_tcq_fixed(5.0f, 8192.0f) == 32767 && turbo_tcq_fixed(-INFINITY, 8192.0f) == -32767 &&
              turbo_tcq_fixed(NAN, 8192.0f) == 0,
          "clamping and NaN");
    /* sq at the extremes: -32768 after saturation squares to 32768, and
     * a cost saturates at 65535 */
    CHECK(turbo_tcq_cost16(0, -32767, 32767) == 32768 && turbo_tcq_cost16(0, 100, 100) == 0 &&
              turbo_tcq_cost16(0, 181, 0) == 1 && turbo_tcq_cost16(40000, 32767, -32767) == 65535,
          "sq / saturation: %u %u %u %u", turbo_tcq_cost16(0, -32767, 32767), turbo_tcq_cost16(0, 100, 100),
          turbo_tcq_cost16(0, 181, 0), turbo_tcq_cost16(40000, 32767, -32767));
}

/* The 16-bit search against the float one (the least error), row by
 * row: on the grid of step q = 2^-a and e^2 unit u = 2^(15-2a), a path's
 * grid metric times u is within B = sum_t (u/2 + 2 |e_t| q + q^2) of its
 * true error, so the integer search's error is at most the least plus
 * B(its path) + B(the best path) (no clamping: |x| < 3.9 here); and on
 * average, Gaussian and heavy-tailed rows (x scaled by e^(g/2), the
 * grid then coarser), within 0.1 % of the least. */
static double grid_bound(const float *c, const float *x, const uint16_t *st, int d, int a) {
    const double q = ldexp(1.0, -a), u = ldexp(1.0, 15 - 2 * a);
    double b = 0.0;
    for (int t = 0; t < d; t++) b += u / 2 + 2 * fabs((double)x[t] - c[st[t]]) * q + q * q;
    return b;
}

TEST(turbo_viterbi16_near_exact) {
    test_rng r = { 7, 0, 0 };
    const int n = n_vectors(150);
    for (int k = 2; k <= 4; k++) {
        const float *c = kvq_turbo_tcq_codebook(k);
        for (int tail = 0; tail < 2; tail++) {
            double sum16 = 0.0, sum_exact = 0.0;
            for (int v = 0; v < n; v++) {
                float x[128];
                for (int i = 0; i < 128; i++) {
                    double g = test_rng_gauss(&r);
                    if (tail) g *= exp(0.5 * test_rng_gauss(&r));
                    else g = fmax(-3.9, fmin(3.9, g));
                    x[i] = (float)g;
                }
                uint16_t s16[128], se[128];
                const double e16 = kvq_turbo_tcq_viterbi(k, c, x, 128, s16);
                const double ee = kvq_turbo_tcq_viterbi_exact(k, c, x, 128, se);
                CHECK(e16 == turbo_tcq_path_error(c, x, s16, 128), "k=%d: returned error is not the path's", k);
                if (!tail) {
                    const double b = grid_bound(c, x, s16, 128, 13) + grid_bound(c, x, se, 128, 13);
                    CHECK(e16 <= ee * (1 + 1e-6) + b, "k=%d row %d: %.6f > least %.6f + bound %.6f", k, v, e16, ee, b);
                }
                sum16 += e16, sum_exact += ee;
            }
            CHECK(sum16 <= sum_exact * 1.001, "k=%d %s rows: mean error %.6f, the least %.6f (%+.3f %%)", k,
                  tail ? "heavy-tailed" : "Gaussian", sum16 / n / 128, sum_exact / n / 128,
                  100 * (sum16 / sum_exact - 1));
        }
        /* rows the trellis cannot follow (+-3.9 alternating, or two of
         * three): errors of 370-790 units, past the 32 that 16 bits hold
         * above the best path, which the subtracted floors keep near 0 */
        for (int pat = 0; pat < 2; pat++) {
            float x[128];
            for (int i = 0; i < 128; i++) x[i] = (pat ? i % 3 : i & 1) ? 3.9f : -3.9f;
            uint16_t s16[128], se[128];
            const double e16 = kvq_turbo_tcq_viterbi(k, c, x, 128, s16);
            const double ee = kvq_turbo_tcq_viterbi_exact(k, c, x, 128, se);
            CHECK(ee > 100.0 && e16 <= ee * 1.0001, "k=%d pattern %d: %.4f against the least %.4f", k, pat, e16, ee);
        }
    }
}

/* The tagged costs the Viterbi's minima are taken over (turbo_internal.h):
 * the tag is the predecessor's index in the low k bits; a cost smaller
 * above those bits wins whatever the tags; costs equal above them (equal,
 * or within 2^k ulp) go to the smaller index; a NaN never beats a number,
 * and infinity loses to every finite cost.  And the Viterbi's path keeps
 * to it: with a constant codebook every predecessor ties, and the first
 * must win every time. */
TEST(turbo_tcq_tagged_costs_order) {
    test_rng r = { 91, 0, 0 };
    for (int k = 2; k <= 4; k++) {
        const uint32_t mask = (1u << k) - 1;
        for (int rep = 0; rep < 2000; rep++) {
            const float a = fabsf((float)test_rng_gauss(&r)) * (rep % 3 ? 1.0f : 1e-30f);
            const float b = nextafterf(a, INFINITY) * (1.0f + (float)(rep % 7) * 1e-3f);   /* b > a */
            const int ja = (int)(test_rng_u64(&r) & mask), jb = (int)(test_rng_u64(&r) & mask);
            const uint32_t ta = turbo_tcq_tag(a, ja, mask), tb = turbo_tcq_tag(b, jb, mask);
            CHECK((ta & mask) == (uint32_t)ja && (tb & mask) == (uint32_t)jb, "k=%d: tags not in the low bits", k);
            const bool apart = (kvq_f32_bits(a) & ~mask) != (kvq_f32_bits(b) & ~mask);
            CHECK(apart ? ta < tb : (ta < tb) == (ja < jb), "k=%d %a (j %d) vs %a (j %d): wrong winner", k,
                  (double)a, ja, (double)b, jb);
            CHECK(turbo_tcq_tag(a, 1, mask) > turbo_tcq_tag(a, 0, mask), "k=%d: a tie went to the later index", k);
            CHECK(turbo_tcq_tag(NAN, 0, mask) > turbo_tcq_tag(b, (int)mask, mask), "k=%d: NaN beat %g", k, (double)b);
            CHECK(turbo_tcq_tag(INFINITY, 0, mask) > turbo_tcq_tag(b, (int)mask, mask), "k=%d: inf beat %g", k,
                  (double)b);
        }
    }
    /* a constant codebook: every path costs the same (the same float
     * operations), so every predecessor ties at every step and the first
     * (j = 0) must win each time, and state 0 at the end: all states 0 */
    float flat[1024];
    for (int s = 0; s < 1024; s++) flat[s] = 0.5f;
    for (int k = 2; k <= 4; k++) {
        float x[37];
        gauss_vec(&r, x, 37);
        uint16_t st[37], st16[37];
        kvq_turbo_tcq_viterbi_exact(k, flat, x, 37, st);
        kvq_turbo_tcq_viterbi_scalar(k, flat, x, 37, st16);
        int nonzero = 0, nonzero16 = 0;
        for (int t = 0; t < 37; t++) nonzero += st[t] != 0, nonzero16 += st16[t] != 0;
        CHECK(nonzero == 0, "k=%d: %d states not the first of their ties", k, nonzero);
        CHECK(nonzero16 == 0, "k=%d: %d states of the 16-bit search not the first of their ties", k, nonzero16);
    }
}

/* Mean Viterbi / greedy error over random Gaussian sequences. */
static void trellis_vs_greedy(int k, const float *c, int n, double *viterbi, double *greedy, int *worse) {
    test_rng r = { 77, 0, 0 };
    float x[128];
    uint16_t st[128];
    *viterbi = *greedy = 0.0;
    *worse = 0;
    for (int v = 0; v < n; v++) {
        gauss_vec(&r, x, 128);
        double ev = kvq_turbo_tcq_viterbi(k, c, x, 128, st), eg = kvq_turbo_tcq_greedy(k, c, x, 128, st);
        *worse += ev > eg * (1 + 1e-6);
        *viterbi += ev, *greedy += eg;
    }
}

TEST(turbo_trellis_not_scalar_in_disguise) {
    int n = n_vectors(200);
    for (int k = 2; k <= 4; k++) {
        double ev, eg;
        int worse;
        trellis_vs_greedy(k, kvq_turbo_tcq_codebook(k), n, &ev, &eg, &worse);
        CHECK(worse == 0, "k=%d: Viterbi worse than greedy on %d vectors", k, worse);
        CHECK(10 * log10(ev / eg) < -1.0, "k=%d: Viterbi %.4f vs greedy %.4f: trellis barely helps", k, ev / n, eg / n);
    }
    /* negative control: a codebook that ignores the context bits is a
     * scalar quantiser, and the check above must see that */
    float flat[1 << 8];
    const float *c2 = kvq_turbo_lloyd_centroids(2);
    for (int s = 0; s < 256; s++) flat[s] = c2[s >> 6];
    double ev, eg;
    int worse;
    trellis_vs_greedy(2, flat, 20, &ev, &eg, &worse);
    CHECK(fabs(ev - eg) < 1e-6 * eg, "degenerate codebook: Viterbi %.5f != greedy %.5f", ev, eg);
}

TEST(turbo_tcq_training_monotone_and_deterministic) {
    float c1[256], c2[256];
    double mse1[4], mse2[4];
    int n = test_sanitized() ? 16 : 48;
    CHECK(kvq_turbo_tcq_train(2, n, 3, 9, c1, mse1, NULL) == KVQ_OK, "training failed");
    CHECK(kvq_turbo_tcq_train(2, n, 3, 9, c2, mse2, NULL) == KVQ_OK, "training failed");
    CHECK(!memcmp(c1, c2, sizeof c1), "training not deterministic");
    for (int i = 0; i < 3; i++)
        CHECK(mse1[i + 1] <= mse1[i] * (1 + 1e-9), "Lloyd round %d raised the error %.6f -> %.6f", i, mse1[i], mse1[i + 1]);
    CHECK(mse1[3] < mse1[0] * 0.95, "training did not improve: %.5f -> %.5f", mse1[0], mse1[3]);
    kvq_error err = { 0 };
    CHECK(kvq_turbo_tcq_train(5, n, 3, 9, c1, NULL, &err) == KVQ_ERR_ARG && err.msg[0], "k=5 accepted");
}

/* -------------------------------------------------------- inner products */

/* Pairs with q.k well away from zero (k = q/2 + noise); regress q.k_hat on
 * q.k.  Expected slope: the format's gain (turbo.h).  Returns slope and
 * its standard error. */
static void ip_slope(kvq_turbo_type ty, int n, double *slope, double *se) {
    test_rng r = { 99 + ty, 0, 0 };
    float q[128], k[128], q_rot[128];
    uint8_t row[128];
    double sxy = 0, sxx = 0;
    double *xs = malloc(sizeof(double) * n), *ys = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) {
        gauss_vec(&r, q, 128);
        gauss_vec(&r, k, 128);
        for (int j = 0; j < 128; j++) k[j] += 0.5f * q[j];
        kvq_turbo_quantize(ty, k, row, 128, NULL);
        kvq_turbo_rotate_query(q, q_rot, 128);
        xs[i] = dot_d(q, k, 128);
        ys[i] = kvq_turbo_dot_rot(ty, row, q_rot, 128);
        sxy += xs[i] * ys[i], sxx += xs[i] * xs[i];
    }
    *slope = sxy / sxx;
    double rss = 0;
    for (int i = 0; i < n; i++) rss += (ys[i] - *slope * xs[i]) * (ys[i] - *slope * xs[i]);
    *se = sqrt(rss / (n - 1) / sxx);
    free(xs), free(ys);
}

TEST(turbo_inner_product_bias_is_the_documented_gain) {
    int n = n_vectors(1500);
    ALL_TYPES(ty) {
        double slope, se, gain = kvq_turbo_ip_gain(ty);
        ip_slope(ty, n, &slope, &se);
        /* q.k_hat / gain is unbiased: the slope is the gain within noise */
        CHECK(fabs(slope - gain) < 4 * se + 2e-3, "%s: slope %.4f +- %.4f, gain %.4f", kvq_turbo_name(ty), slope, se, gain);
        if (ty == KVQ_TURBO2)   /* and the shrinkage is real, not a rounding effect */
            CHECK(slope < 1 - 10 * se, "turbo2 slope %.4f +- %.4f: no visible shrinkage", slope, se);
    }
}

/* ---------------------------------------------- rotated-domain kernels */

static const int g_dims[] = { 64, 128, 256, 96, 200, 1 };

TEST(turbo_rotated_dot_equals_decode_then_dot) {
    test_rng r = { 3, 0, 0 };
    float x[MAX_DIM], q[MAX_DIM], q_rot[MAX_DIM], y[MAX_DIM];
    uint8_t row[512];
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(g_dims); di++) {
        int d = g_dims[di];
        gauss_vec(&r, x, d);
        gauss_vec(&r, q, d);
        CHECK(kvq_turbo_quantize(ty, x, row, d, NULL) == KVQ_OK, "quantize");
        CHECK(kvq_turbo_dequantize(ty, row, y, d, NULL) == KVQ_OK, "dequantize");
        kvq_turbo_rotate_query(q, q_rot, d);
        double ref = dot_d(q, y, d), tol = 1e-5 * sqrt(dot_d(q, q, d) * dot_d(x, x, d));
        double got = kvq_turbo_dot_rot(ty, row, q_rot, d), got_s = kvq_turbo_dot_rot_scalar(ty, row, q_rot, d);
        CHECK(fabs(got - ref) < tol, "%s d=%d: dot_rot %.6f, decode-dot %.6f", kvq_turbo_name(ty), d, got, ref);
        CHECK(fabs(got_s - ref) < tol, "%s d=%d: scalar dot_rot %.6f, decode-dot %.6f", kvq_turbo_name(ty), d, got_s, ref);
    }
}

TEST(turbo_rotated_axpy_equals_decode_then_axpy) {
    test_rng r = { 4, 0, 0 };
    float x1[MAX_DIM], x2[MAX_DIM], y1[MAX_DIM], y2[MAX_DIM], acc[MAX_DIM], out[MAX_DIM];
    uint8_t row1[512], row2[512];
    const float w1 = 0.7f, w2 = -1.3f;
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(g_dims); di++) {
        int d = g_dims[di], dr = kvq_turbo_rot_dim(d);
        gauss_vec(&r, x1, d);
        gauss_vec(&r, x2, d);
        kvq_turbo_quantize(ty, x1, row1, d, NULL);
        kvq_turbo_quantize(ty, x2, row2, d, NULL);
        kvq_turbo_dequantize(ty, row1, y1, d, NULL);
        kvq_turbo_dequantize(ty, row2, y2, d, NULL);
        for (int i = 0; i < dr; i++) acc[i] = 0.0f;
        kvq_turbo_axpy_rot(ty, w1, row1, acc, d);
        kvq_turbo_axpy_rot(ty, w2, row2, acc, d);
        kvq_turbo_unrotate(acc, out, d);
        for (int i = 0; i < d; i++) {
            double ref = w1 * y1[i] + w2 * y2[i];
            CHECK(fabs(out[i] - ref) < 1e-4, "%s d=%d [%d]: %.6f vs %.6f", kvq_turbo_name(ty), d, i, out[i], ref);
        }
    }
}

TEST(turbo_rotation_round_trip) {
    test_rng r = { 6, 0, 0 };
    float q[MAX_DIM], q_rot[MAX_DIM], back[MAX_DIM];
    for (size_t di = 0; di < KVQ_ARRAY_LEN(g_dims); di++) {
        int d = g_dims[di];
        gauss_vec(&r, q, d);
        kvq_turbo_rotate_query(q, q_rot, d);
        double n0 = dot_d(q, q, d), n1 = dot_d(q_rot, q_rot, kvq_turbo_rot_dim(d));
        CHECK(fabs(n0 - n1) < 1e-4 * n0, "d=%d rotation changes the norm %.5f -> %.5f", d, n0, n1);
        kvq_turbo_unrotate(q_rot, back, d);
        for (int i = 0; i < d; i++) CHECK(fabs(back[i] - q[i]) < 1e-5, "d=%d unrotate [%d]", d, i);
        int moved = 0;
        for (int i = 0; i < d; i++) moved += fabsf(q_rot[i] - q[i]) > 1e-3f;
        CHECK(d < 8 || moved > d / 2, "d=%d: rotation left the vector in place", d);
    }
}

/* ------------------------------------------------------- SIMD vs scalar */

TEST(turbo_simd_matches_scalar) {
    if (!kvq_cpu_features()->avx2) SKIP("no AVX2 on this CPU (or KVQ_FORCE_SCALAR)");
    test_rng r = { 8, 0, 0 };
    float x[MAX_DIM], q_rot[MAX_DIM], a1[MAX_DIM], a2[MAX_DIM];
    uint8_t b1[512], b2[512];
    int reps = test_sanitized() ? 2 : 8;
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(g_dims); di++) for (int rep = 0; rep < reps; rep++) {
        int d = g_dims[di], dr = kvq_turbo_rot_dim(d);
        size_t bytes = kvq_turbo_row_bytes(ty, d);
        gauss_vec(&r, x, d);
        gauss_vec(&r, q_rot, dr);
        kvq_turbo_quantize(ty, x, b1, d, NULL);
        kvq_turbo_quantize_scalar(ty, x, b2, d, NULL);
        CHECK(!memcmp(b1, b2, bytes), "%s d=%d: SIMD and scalar encoders differ", kvq_turbo_name(ty), d);
        float ds = kvq_turbo_dot_rot_scalar(ty, b1, q_rot, d), dv = kvq_turbo_dot_rot(ty, b1, q_rot, d);
        CHECK(fabsf(ds - dv) < 1e-5f * (1 + fabsf(ds)) + 1e-4f, "%s d=%d: dot %.7f vs %.7f", kvq_turbo_name(ty), d, dv, ds);
        for (int i = 0; i < dr; i++) a1[i] = a2[i] = (float)i * 0.01f;
        kvq_turbo_axpy_rot(ty, 0.37f, b1, a1, d);
        kvq_turbo_axpy_rot_scalar(ty, 0.37f, b1, a2, d);
        for (int i = 0; i < dr; i++)
            CHECK(fabsf(a1[i] - a2[i]) < 1e-5f * (1 + fabsf(a2[i])), "%s d=%d axpy [%d]", kvq_turbo_name(ty), d, i);
    }
    /* the Viterbi kernels pick the same path */
    static const int lens[] = { 1, 2, 37, 64, 128 };
    for (int k = 2; k <= 4; k++) for (size_t li = 0; li < KVQ_ARRAY_LEN(lens); li++) {
        int n = lens[li];
        uint16_t s1[128], s2[128];
        gauss_vec(&r, x, n);
        double e1 = kvq_turbo_tcq_viterbi(k, kvq_turbo_tcq_codebook(k), x, n, s1);
        double e2 = kvq_turbo_tcq_viterbi_scalar(k, kvq_turbo_tcq_codebook(k), x, n, s2);
        CHECK(e1 == e2 && !memcmp(s1, s2, sizeof(uint16_t) * n), "k=%d d=%d Viterbi SIMD %.6f vs scalar %.6f",
              k, n, e1, e2);
    }
}

/* Each Viterbi level this CPU runs (AVX2, AVX-512) takes the scalar
 * path, state for state: Gaussian targets, all zeros (ties everywhere),
 * codebook values themselves, large values, a codebook of small
 * integers with integer targets (exact cost ties, the tie rules),
 * Gaussian targets with a NaN in the middle (0 on the grid), with an
 * infinity (left out of the grid's choice, clamped on it), and a
 * constant codebook (every state ties: the first wins everywhere). */
TEST(turbo_viterbi_each_level_matches_scalar) {
    const kvq_cpu *cpu = kvq_cpu_features();
    const struct { const char *name; turbo_viterbi_fn fn; bool ok; } lv[] = {
        { "avx2", turbo_viterbi_avx2, cpu->avx2 }, { "avx512", turbo_viterbi_avx512, cpu->avx512 },
    };
    test_rng r = { 77, 0, 0 };
    float x[128], ties[1024], flat[1024];   /* a codebook of small integers: exact ties at every step;
                                                  a constant one: every state ties */
    for (int s = 0; s < 1024; s++) ties[s] = (float)((s * 7 + s / 64) % 5) - 2.0f, flat[s] = 0.5f;
    static const int lens[] = { 1, 2, 37, 128 };
    for (size_t l = 0; l < KVQ_ARRAY_LEN(lv); l++) {
        if (!lv[l].ok) continue;
        for (int k = 2; k <= 4; k++)
            for (int kind = 0; kind < 8; kind++)
                for (size_t li = 0; li < KVQ_ARRAY_LEN(lens); li++) {
                    const int n = lens[li];
                    const float *c = kind == 4 ? ties : kind == 7 ? flat : kvq_turbo_tcq_codebook(k);
                    for (int i = 0; i < n; i++)
                        x[i] = kind == 0 || kind >= 5 ? (float)test_rng_gauss(&r) : kind == 1 ? 0.0f
                             : kind == 2 ? c[(i * 37) % (64 << k)] : kind == 3 ? 40.0f * (float)test_rng_gauss(&r)
                             : (float)(i % 3) - 1.0f;
                    if (kind == 5) x[n / 2] = NAN;
                    if (kind == 6) x[n / 3] = -INFINITY;
                    uint16_t s1[128], s2[128];
                    lv[l].fn(k, c, x, n, s1);
                    const double e1 = turbo_tcq_path_error(c, x, s1, n), e2 = kvq_turbo_tcq_viterbi_scalar(k, c, x, n, s2);
                    CHECK((e1 == e2 || (isnan(e1) && isnan(e2))) && !memcmp(s1, s2, sizeof(uint16_t) * n),
                          "%s k=%d kind %d d=%d: cost %.9g vs scalar %.9g", lv[l].name, k, kind, n, e1, e2);
                }
    }
}

/* Each pairs search this CPU runs finds, for each row, the one-row path
 * of its level (itself the scalar path, above): rows of different kinds
 * side by side (Gaussian, all zeros, codebook values, large values), in
 * runs of one to three pairs (each pair's walk back beside the next
 * pair's search, the last alone), every k and length. */
TEST(turbo_viterbi_pairs_each_level_matches_one_row) {
    const kvq_cpu *cpu = kvq_cpu_features();
    const struct { const char *name; turbo_viterbi_fn one; turbo_viterbi_pairs_fn pairs; bool ok; } lv[] = {
        { "avx2", turbo_viterbi_avx2, turbo_viterbi_pairs_avx2, cpu->avx2 },
        { "avx512", turbo_viterbi_avx512, turbo_viterbi_pairs_avx512, cpu->avx512 },
    };
    test_rng r = { 78, 0, 0 };
    static const int lens[] = { 1, 2, 37, 128 };
    enum { ROWS = 6 };
    int runs = 0;
    for (size_t l = 0; l < KVQ_ARRAY_LEN(lv); l++) {
        if (!lv[l].ok) continue;
        for (int k = 2; k <= 4; k++)
            for (size_t li = 0; li < KVQ_ARRAY_LEN(lens); li++)
                for (int n_pairs = 1; n_pairs <= ROWS / 2; n_pairs++) {
                    const int n = lens[li];
                    const float *c = kvq_turbo_tcq_codebook(k);
                    float x[ROWS][128];
                    for (int row = 0; row < 2 * n_pairs; row++) {
                        const int kind = (row + n_pairs + (int)li) % 4;
                        for (int i = 0; i < n; i++)
                            x[row][i] = kind == 0 ? (float)test_rng_gauss(&r) : kind == 1 ? 0.0f
                                      : kind == 2 ? c[(i * 37 + row) % (64 << k)] : 40.0f * (float)test_rng_gauss(&r);
                    }
                    uint16_t one[ROWS][128], many[ROWS][128];
                    const float *xs[ROWS];
                    uint16_t *ss[ROWS];
                    memset(many, 0xEE, sizeof many);
                    for (int row = 0; row < 2 * n_pairs; row++) {
                        lv[l].one(k, c, x[row], n, one[row]);
                        xs[row] = x[row];
                        ss[row] = many[row];
                    }
                    lv[l].pairs(k, c, n_pairs, xs, n, ss);
                    for (int row = 0; row < 2 * n_pairs; row++)
                        CHECK(!memcmp(many[row], one[row], sizeof(uint16_t) * n),
                              "%s k=%d d=%d %d pairs, row %d: another path than one row's (cost %.9g vs %.9g)",
                              lv[l].name, k, n, n_pairs, row, turbo_tcq_path_error(c, x[row], many[row], n),
                              turbo_tcq_path_error(c, x[row], one[row], n));
                    runs++;
                }
    }
    if (!runs) printf("  no AVX2 on this CPU: the pairs search is not installed here\n");
}

/* Encoding from rotated rows (kvq_turbo_quantize_rot, what the cache
 * writes) against encoding the rows themselves: the same R x is coded, so
 * the reconstructions agree to float rounding of the norm (and the odd
 * near tie); rows together give the one-row bytes; a zero row keeps
 * its zero norm. */
TEST(turbo_quantize_from_rotated_rows) {
    test_rng r = { 83, 0, 0 };
    static const int dims[] = { 64, 128, 192 };
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
        const int d = dims[di];
        float x[2][192], xr[2][256], a[192], b[192];
        uint8_t plain[256], rot[2][256], two[2][256];
        for (int row = 0; row < 2; row++) {
            gauss_vec(&r, x[row], d);
            kvq_turbo_rotate_query(x[row], xr[row], d);
        }
        CHECK(kvq_turbo_quantize(ty, x[0], plain, d, NULL) == KVQ_OK &&
                  kvq_turbo_quantize_rot(ty, xr[0], rot[0], d, NULL) == KVQ_OK &&
                  kvq_turbo_quantize_rot_scalar(ty, xr[1], rot[1], d, NULL) == KVQ_OK,
              "%s d=%d: refused", kvq_turbo_name(ty), d);
        kvq_turbo_dequantize(ty, plain, a, d, NULL);
        kvq_turbo_dequantize(ty, rot[0], b, d, NULL);
        double diff = 0, mag = 0;
        for (int i = 0; i < d; i++) { diff += (a[i] - b[i]) * (double)(a[i] - b[i]); mag += (double)x[0][i] * x[0][i]; }
        CHECK(diff <= 1e-3 * mag, "%s d=%d: rotated-row codes reconstruct %.3g (of %.3g) away", kvq_turbo_name(ty),
              d, diff, mag);
        kvq_turbo_quantize_rot(ty, xr[1], two[0], d, NULL);
        CHECK(!memcmp(two[0], rot[1], kvq_turbo_row_bytes(ty, d)), "%s d=%d: scalar and SIMD rotated rows differ",
              kvq_turbo_name(ty), d);
        const float *const xrs[2] = { xr[0], xr[1] };
        void *const twos[2] = { two[0], two[1] };
        if (kvq_turbo_quantize_rows_rot(ty, 2, xrs, twos, d))
            for (int row = 0; row < 2; row++)
                CHECK(!memcmp(two[row], rot[row], kvq_turbo_row_bytes(ty, d)), "%s d=%d row %d: pair differs",
                      kvq_turbo_name(ty), d, row);
        float zero[256] = { 0 };
        kvq_turbo_quantize_rot(ty, zero, rot[0], d, NULL);
        kvq_turbo_dequantize(ty, rot[0], b, d, NULL);
        for (int i = 0; i < d; i++) CHECK(b[i] == 0.0f, "%s d=%d: a zero row gave %g", kvq_turbo_name(ty), d, b[i]);
    }
}

/* Rows quantised together store the bytes of one-row calls: every
 * trellis type, one and two blocks (192 = 128 + 64), runs of 1 to 37
 * rows (odd ones out, more than one batch), zero and non-finite rows
 * among normal ones (no direction: written apart); the other types and
 * bad arguments are declined and nothing is written. */
TEST(turbo_quantize_rows_equals_one_row_each) {
    test_rng r = { 79, 0, 0 };
    static const kvq_turbo_type types[] = { KVQ_TURBO2_TCQ, KVQ_TURBO3_TCQ, KVQ_TURBO4_TCQ };
    static const int dims[] = { 64, 128, 192 }, counts[] = { 1, 2, 3, 5, 17, 37 };
    enum { MAX_ROWS = 37 };
    const bool has_pairs = turbo_active_kernels()->viterbi_pairs != NULL;
    static float x[MAX_ROWS][192];
    static uint8_t one[MAX_ROWS][256], many[MAX_ROWS][256];
    for (size_t ti = 0; ti < KVQ_ARRAY_LEN(types); ti++)
        for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++)
            for (size_t ci = 0; ci < KVQ_ARRAY_LEN(counts); ci++) {
                const kvq_turbo_type ty = types[ti];
                const int d = dims[di], n = counts[ci];
                const float *xs[MAX_ROWS];
                void *dst[MAX_ROWS];
                for (int row = 0; row < n; row++) {
                    gauss_vec(&r, x[row], d);
                    if (row % 7 == 3) memset(x[row], 0, sizeof x[row]);
                    if (row % 11 == 5) x[row][d - 1] = INFINITY;
                    xs[row] = x[row];
                    dst[row] = many[row];
                }
                const size_t bytes = kvq_turbo_row_bytes(ty, d);
                memset(many, 0xAB, sizeof many);
                for (int row = 0; row < n; row++) kvq_turbo_quantize(ty, x[row], one[row], d, NULL);
                const bool took = kvq_turbo_quantize_rows(ty, n, xs, dst, d);
                CHECK(took == has_pairs, "%s d=%d: rows %s", kvq_turbo_name(ty), d, took ? "taken" : "declined");
                if (!took) continue;
                for (int row = 0; row < n; row++)
                    CHECK(!memcmp(one[row], many[row], bytes), "%s d=%d %d rows, row %d: bytes differ",
                          kvq_turbo_name(ty), d, n, row);
            }
    float y[128] = { 1.0f };
    const float *ys[2] = { y, y };
    uint8_t out[2][128];
    void *dst[2] = { out[0], out[1] };
    memset(out, 0x5A, sizeof out);
    CHECK(!kvq_turbo_quantize_rows(KVQ_TURBO3, 2, ys, dst, 128), "turbo3 (scalar codes) declined");
    CHECK(!kvq_turbo_quantize_rows(KVQ_TURBO3_TCQ, 2, ys, dst, 0), "a head of 0 declined");
    CHECK(!kvq_turbo_quantize_rows(KVQ_TURBO3_TCQ, 0, ys, dst, 128), "no rows declined");
    CHECK(out[0][0] == 0x5A && out[1][127] == 0x5A, "nothing written when declined");
}

/* Attention's chunk kernels (kvq_turbo_chunk_scores / _values) at every
 * level this CPU runs: every type, heads of 64, 128 and 256 (two blocks),
 * G 1..8 (passes of 2 and 4 heads and their rests), key counts that fill
 * groups of 4 and chunks of 32 or leave a rest (1, 3, 7, 37), a zero row
 * (zero norm), keys of weight 0, a NULL row and a row whose norm is
 * infinite (its scores and values non-finite where weighted, as per key):
 * each level gives bit for bit what the row kernels of that level give
 * (dot_rot per key and head; axpy_rot per key and head, zero weights
 * skipped), and every SIMD level matches the scalar one to float
 * rounding. */
enum { CK_NK = 37, CK_MAXG = 8 };

/* Row key of the chunk: Gaussian, key 3 zero, key 9 with an infinite norm. */
static void chunk_rows(kvq_turbo_type ty, int d, test_rng *r, uint8_t rows[][256]) {
    float x[MAX_DIM];
    for (int key = 0; key < CK_NK; key++) {
        gauss_vec(r, x, d);
        if (key == 3) memset(x, 0, sizeof x);
        kvq_turbo_quantize(ty, x, rows[key], d, NULL);
        if (key == 9) kvq_wr16(rows[key], 0x7c00);     /* +inf norm in the first block */
    }
}

/* How far a trellis V's chunk sums may be from the per-key loop
 * (kvq_turbo_chunk_values): per head g and output i of block b, each
 * key's coefficient c = w * bs is rounded on a scale S <= max_t |c_t| /
 * 32767 (the max over all nk keys bounds each 32 keys' own), so the sums
 * are off by at most (S / 2) sum_t |value_t,i|, value = the key's decoded
 * row over its block scale bs; plus the float sums' rounding (2^-20 of
 * the sum of the terms' sizes).  Keys whose coefficient is 0 or not
 * finite round to nothing or are not rounded. */
/* A trellis row of d (64, 128 or 256) values decoded in the rotated
 * domain (dec, bs times the codebook's values; zeros for a NULL row) and
 * its blocks' scales bs[b] = norm' / sqrt(block size), as the chunk
 * kernels apply them. */
static void row_values_and_scales(kvq_isa isa, kvq_turbo_type ty, const uint8_t *row, int d, float *dec, float bs[2]) {
    const int bd = d > 128 ? 128 : d;                 /* blocks of 64, 128, or two of 128 */
    memset(dec, 0, (size_t)d * sizeof *dec);
    if (!row) return;
    kvq_turbo_axpy_rot_at(isa, ty, 1.0f, row, dec, d);
    for (int b = 0; b < d / bd; b++)
        bs[b] = kvq_half_to_float(kvq_rd16(row + b * kvq_turbo_block_bytes(ty, bd))) / sqrtf((float)bd);
}

static void values_rounding_bound(kvq_isa isa, kvq_turbo_type ty, int d, int G, int nk, const uint8_t *const *vp,
                                  const float *w, float *tol) {
    static float dec[CK_NK][MAX_DIM];
    const int bd = d > 128 ? 128 : d;
    float bs[CK_NK][2];
    for (int key = 0; key < nk; key++) row_values_and_scales(isa, ty, vp[key], d, dec[key], bs[key]);
    for (int g = 0; g < G; g++)
        for (int b = 0; b < d / bd; b++) {
            double cmax = 0.0;
            for (int key = 0; key < nk; key++) {
                const double c = vp[key] ? (double)w[g * CK_NK + key] * bs[key][b] : 0.0;
                if (isfinite(c)) cmax = fmax(cmax, fabs(c));
            }
            for (int i = b * bd; i < (b + 1) * bd; i++) {
                double vals = 0.0, terms = 0.01 * (double)((g * d + i) % 13);
                for (int key = 0; key < nk; key++) {
                    const double c = vp[key] ? (double)w[g * CK_NK + key] * bs[key][b] : 0.0;
                    if (c == 0.0 || !isfinite(c)) continue;
                    vals += fabs(dec[key][i]) / bs[key][b];
                    terms += fabs(c * dec[key][i] / bs[key][b]);
                }
                tol[g * d + i] = (float)(cmax / 32767.0 / 2.0 * vals + 0x1p-20 * terms);
            }
        }
}

/* One configuration at one level against the row kernels of that level;
 * the scores and values go to res (scores, then values) for the
 * comparison with the scalar level; a failure is left in t. */
static void chunk_check(test_ctx *t, kvq_isa isa, kvq_turbo_type ty, int d, int G, int nk, uint8_t rows[][256], const float *q,
                        const float *w, float *res) {
    static float got[CK_MAXG * MAX_DIM], want[CK_MAXG * MAX_DIM];
    const uint8_t *rp[CK_NK], *vp[CK_NK];
    for (int key = 0; key < nk; key++) rp[key] = vp[key] = rows[key];
    if (nk > 5) vp[5] = NULL;
    kvq_turbo_chunk_scores(isa, ty, rp, nk, q, G, d, d, 0.125f, got, CK_NK);
    for (int g = 0; g < G; g++)
        for (int key = 0; key < nk; key++) {
            const float ref = kvq_turbo_dot_rot_at(isa, ty, rows[key], q + g * d, d) * 0.125f;
            const float s = got[g * CK_NK + key];
            CHECK(s == ref || (isnan(s) && isnan(ref)), "%s %s d=%d G=%d nk=%d score %d/%d: %.9g vs per key %.9g",
                  kvq_isa_name(isa), kvq_turbo_name(ty), d, G, nk, g, key, s, ref);
            res[g * CK_NK + key] = s;
        }
    for (int i = 0; i < G * d; i++) got[i] = want[i] = 0.01f * (float)(i % 13);
    kvq_turbo_chunk_values(isa, ty, vp, nk, w, CK_NK, G, got, d, d);
    for (int key = 0; key < nk; key++)
        for (int g = 0; g < G; g++)
            if (vp[key] && w[g * CK_NK + key] != 0.0f)
                kvq_turbo_axpy_rot_at(isa, ty, w[g * CK_NK + key], vp[key], want + g * d, d);
    static float tol[CK_MAXG * MAX_DIM];
    const bool rounded = kvq_turbo_is_tcq(ty);   /* the trellis V's weights rounded to int16 */
    if (rounded) values_rounding_bound(isa, ty, d, G, nk, vp, w, tol);
    for (int i = 0; i < G * d; i++) {
        if (rounded && isfinite(want[i]))
            CHECK(fabsf(got[i] - want[i]) <= tol[i], "%s %s d=%d G=%d nk=%d value %d: %.9g vs per key %.9g (bound %.3g)",
                  kvq_isa_name(isa), kvq_turbo_name(ty), d, G, nk, i, got[i], want[i], tol[i]);
        else
            CHECK(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])),
                  "%s %s d=%d G=%d nk=%d value %d: %.9g vs per key %.9g", kvq_isa_name(isa), kvq_turbo_name(ty), d, G, nk,
                  i, got[i], want[i]);
        res[CK_MAXG * CK_NK + i] = got[i];
    }
}

TEST(turbo_chunk_kernels_match_per_key) {
    static uint8_t rows[CK_NK][256];
    static float q[CK_MAXG * MAX_DIM], w[CK_MAXG * CK_NK], ref[CK_MAXG * (CK_NK + MAX_DIM)],
        res[CK_MAXG * (CK_NK + MAX_DIM)];
    static const int dims[] = { 64, 128, 256 }, gs[] = { 1, 2, 3, 4, 5, 8 }, nks[] = { CK_NK, 32, 7, 3, 1 };
    test_rng r = { 4242, 0, 0 };
    int checked = 0;
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
        const int d = dims[di];
        chunk_rows(ty, d, &r, rows);
        for (size_t gi = 0; gi < KVQ_ARRAY_LEN(gs); gi++) for (size_t ni = 0; ni < KVQ_ARRAY_LEN(nks); ni++) {
            const int G = gs[gi], nk = nks[ni];
            gauss_vec(&r, q, G * d);
            for (int i = 0; i < G * CK_NK; i++) w[i] = i % 4 == 1 ? 0.0f : (float)test_rng_uniform(&r);
            /* the infinite row weighted 0 by head 0: nothing of it added there */
            if (nk > 9) w[9] = 0.0f;
            chunk_check(t, KVQ_ISA_SCALAR, ty, d, G, nk, rows, q, w, ref);
            if (t->result == TEST_FAIL) return;
            for (int isa = KVQ_ISA_AVX2; isa <= (int)kvq_isa_best(); isa++) {
                chunk_check(t, (kvq_isa)isa, ty, d, G, nk, rows, q, w, res);
                if (t->result == TEST_FAIL) return;
                double worst = 0.0;
                for (int g = 0; g < G; g++)
                    for (int key = 0; key < nk; key++) {
                        const float a = res[g * CK_NK + key], b = ref[g * CK_NK + key];
                        if (isfinite(b)) worst = fmax(worst, fabs(a - b) / (fabs(b) + 1.0));
                        else CHECK(!isfinite(a), "%s %s: score %d/%d finite (%g), scalar %g", kvq_isa_name((kvq_isa)isa),
                                   kvq_turbo_name(ty), g, key, a, b);
                    }
                for (int i = 0; i < G * d; i++) {
                    const float a = res[CK_MAXG * CK_NK + i], b = ref[CK_MAXG * CK_NK + i];
                    if (isfinite(b)) worst = fmax(worst, fabs(a - b) / (fabs(b) + 1.0));
                    else CHECK(!isfinite(a), "%s %s: value %d finite", kvq_isa_name((kvq_isa)isa), kvq_turbo_name(ty), i);
                }
                CHECK(worst < 1e-5, "%s %s d=%d G=%d nk=%d: vs scalar rel err %.3g", kvq_isa_name((kvq_isa)isa),
                      kvq_turbo_name(ty), d, G, nk, worst);
            }
            checked++;
        }
    }
    CHECK(checked == KVQ_TURBO_COUNT * 3 * 6 * 5, "%d configurations", checked);
}

/* A trellis V's chunk sums round each head's coefficients c = w * bs to
 * int16 per 32 keys and block, W = rint(c * 32767 / max|c|) (ties to
 * even), and add S * W with S = max|c| / 32767 (turbo.h): at every level
 * (AVX-512 VBMI + VNNI in integers, the others by their float kernels on
 * S * W) the sums are those of the rule, worked here in double, to the
 * float sums' rounding; they differ from the exact weights' sums (the
 * rounding is there); coefficients below ~1e-34, whose 32767 / max|c|
 * overflows, are summed as floats, not scaled to inf or NaN. */
TEST(turbo_trellis_values_round_weights_alike) {
    enum { NK = 32, G = 2, D = 256 };
    static uint8_t rows[NK][256];
    static float dec[NK][D];
    test_rng r = { 9090, 0, 0 };
    int levels = 0;
    for (kvq_turbo_type ty = KVQ_TURBO2_TCQ; ty <= KVQ_TURBO4_TCQ; ty++) {
        float x[D], w[G * NK], bs[NK][2];
        const uint8_t *vp[NK];
        for (int key = 0; key < NK; key++) {
            gauss_vec(&r, x, D);
            kvq_turbo_quantize(ty, x, rows[key], D, NULL);
            vp[key] = rows[key];
            row_values_and_scales(KVQ_ISA_SCALAR, ty, rows[key], D, dec[key], bs[key]);
        }
        for (int i = 0; i < G * NK; i++) w[i] = (float)test_rng_uniform(&r);
        w[3] = 0.0f;                                   /* a zero weight: adds nothing */
        /* the rule in double: per head and block, W and S, then sum S W v */
        double want[G * D], exact[G * D], size[G * D];
        for (int g = 0; g < G; g++)
            for (int b = 0; b < 2; b++) {
                float c[NK], cmax = 0.0f;
                for (int key = 0; key < NK; key++) {
                    c[key] = w[g * NK + key] * bs[key][b];
                    cmax = fmaxf(cmax, fabsf(c[key]));
                }
                const float f = 32767.0f / cmax;
                for (int i = 128 * b; i < 128 * (b + 1); i++) {
                    double sw = 0.0, se = 0.0, sz = 0.0;
                    for (int key = 0; key < NK; key++) {
                        const double v = (double)dec[key][i] / bs[key][b];
                        sw += (double)(cmax / 32767.0f) * nearbyint((double)(c[key] * f)) * v;
                        se += (double)c[key] * v;
                        sz += fabs((double)c[key] * v);
                    }
                    want[g * D + i] = sw;
                    exact[g * D + i] = se;
                    size[g * D + i] = sz;
                }
            }
        for (int isa = KVQ_ISA_SCALAR; isa <= (int)kvq_isa_best(); isa++) {
            float got[G * D] = { 0 };
            kvq_turbo_chunk_values((kvq_isa)isa, ty, vp, NK, w, NK, G, got, D, D);
            double worst = 0.0, moved = 0.0;
            for (int i = 0; i < G * D; i++) {
                worst = fmax(worst, fabs(got[i] - want[i]) / size[i]);
                moved = fmax(moved, fabs(want[i] - exact[i]) / size[i]);
            }
            CHECK(worst < 2e-6, "%s %s: sums off the rounded weights' by %.3g of their terms", kvq_isa_name((kvq_isa)isa),
                  kvq_turbo_name(ty), worst);
            CHECK(moved > 2e-6, "%s: the rounding moved no sum (%.3g)", kvq_turbo_name(ty), moved);
            /* weights so small that 32767 / max|c| overflows (2^-120): summed as floats,
             * not scaled to inf or NaN (the sums' floats lose bits down there) */
            float tiny[G * NK], got_t[G * D] = { 0 };
            for (int i = 0; i < G * NK; i++) tiny[i] = w[i] * 0x1p-120f;
            kvq_turbo_chunk_values((kvq_isa)isa, ty, vp, NK, tiny, NK, G, got_t, D, D);
            double worst_t = 0.0;
            for (int i = 0; i < G * D; i++)
                worst_t = fmax(worst_t, fabs(got_t[i] * 0x1p120 - exact[i]) / size[i]);
            CHECK(worst_t < 1e-4, "%s %s: tiny weights' sums off by %.3g", kvq_isa_name((kvq_isa)isa), kvq_turbo_name(ty),
                  worst_t);
            levels++;
        }
    }
    CHECK(levels == 3 * ((int)kvq_isa_best() + 1), "%d levels", levels);
}

/* --------------------------------------------------- determinism, edges */

/* The trellis look-up kernels (src/format/turbo_tcq64.inc): their scalar
 * instance, which runs on every machine, against the scalar level's
 * reference kernels to float rounding (it reads the codes by byte
 * tables, its own order of sums); the AVX-512 VBMI instance, where the
 * CPU has it, against the scalar instance bit for bit.  Rows as in
 * turbo_chunk_kernels_match_per_key: a zero key, an infinite norm, a
 * NULL value row, zero weights. */
static double tcq64_worst(const float *got, const float *want, int n, int *mismatch) {
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        if (isfinite(want[i])) worst = fmax(worst, fabs(got[i] - want[i]) / (fabs(want[i]) + 1.0));
        else *mismatch += isfinite(got[i]) != 0;
    }
    return worst;
}

static int tcq64_bits_differ(const float *a, const float *b, int n) {
    int differ = 0;
    for (int i = 0; i < n; i++) differ += !(a[i] == b[i] || (isnan(a[i]) && isnan(b[i])));
    return differ;
}

TEST(turbo_tcq64_lookup_kernels_match) {
    static uint8_t rows[CK_NK][256];
    static float q[CK_MAXG * MAX_DIM], w[CK_MAXG * CK_NK], ref[CK_MAXG * MAX_DIM], emu[CK_MAXG * MAX_DIM],
        simd[CK_MAXG * MAX_DIM];
    static const int dims[] = { 64, 128, 256 }, gs[] = { 1, 2, 3, 5 }, nks[] = { CK_NK, 32, 7, 1 };
    test_rng r = { 777, 0, 0 };
    int checked = 0, vbmi_checked = 0;
    for (kvq_turbo_type ty = KVQ_TURBO2_TCQ; ty <= KVQ_TURBO4_TCQ; ty++)
        for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
            const int d = dims[di];
            chunk_rows(ty, d, &r, rows);
            for (size_t gi = 0; gi < KVQ_ARRAY_LEN(gs); gi++) for (size_t ni = 0; ni < KVQ_ARRAY_LEN(nks); ni++) {
                const int G = gs[gi], nk = nks[ni];
                const uint8_t *rp[CK_NK], *vp[CK_NK];
                for (int key = 0; key < nk; key++) rp[key] = vp[key] = rows[key];
                if (nk > 5) vp[5] = NULL;
                gauss_vec(&r, q, G * d);
                for (int i = 0; i < G * CK_NK; i++) w[i] = i % 4 == 1 ? 0.0f : (float)test_rng_uniform(&r);
                int mismatch = 0;
                kvq_turbo_chunk_scores(KVQ_ISA_SCALAR, ty, rp, nk, q, G, d, d, 0.125f, ref, CK_NK);
                CHECK(kvq_turbo_tcq64_scores(false, ty, rp, nk, q, G, d, d, 0.125f, emu, CK_NK), "scalar instance refused");
                for (int g = 0; g < G; g++) {
                    const double e = tcq64_worst(emu + g * CK_NK, ref + g * CK_NK, nk, &mismatch);
                    CHECK(e < 1e-5 && !mismatch, "%s d=%d G=%d nk=%d head %d: scores vs reference rel err %.3g, %d not finite",
                          kvq_turbo_name(ty), d, G, nk, g, e, mismatch);
                }
                if (kvq_turbo_tcq64_scores(true, ty, rp, nk, q, G, d, d, 0.125f, simd, CK_NK)) {
                    for (int g = 0; g < G; g++)
                        CHECK(!tcq64_bits_differ(simd + g * CK_NK, emu + g * CK_NK, nk),
                              "%s d=%d G=%d nk=%d head %d: VBMI scores differ from the scalar instance", kvq_turbo_name(ty),
                              d, G, nk, g);
                    vbmi_checked++;
                }
                for (int i = 0; i < G * d; i++) ref[i] = emu[i] = simd[i] = 0.01f * (float)(i % 13);
                kvq_turbo_chunk_values(KVQ_ISA_SCALAR, ty, vp, nk, w, CK_NK, G, ref, d, d);
                kvq_turbo_tcq64_values(false, ty, vp, nk, w, CK_NK, G, emu, d, d);
                const double e = tcq64_worst(emu, ref, G * d, &mismatch);
                CHECK(e < 1e-5 && !mismatch, "%s d=%d G=%d nk=%d: values vs reference rel err %.3g, %d not finite",
                      kvq_turbo_name(ty), d, G, nk, e, mismatch);
                if (kvq_turbo_tcq64_values(true, ty, vp, nk, w, CK_NK, G, simd, d, d))
                    CHECK(!tcq64_bits_differ(simd, emu, G * d), "%s d=%d G=%d nk=%d: VBMI values differ from the scalar instance",
                          kvq_turbo_name(ty), d, G, nk);
                if (t->result == TEST_FAIL) return;
                checked++;
            }
        }
    CHECK(checked == 3 * 3 * 4 * 4, "%d configurations", checked);
    /* the VBMI instance reads k = 2..4 (turbo_tcq64.h), where the CPU has VNNI too */
    CHECK(vbmi_checked == (kvq_cpu_features()->avx512vbmi && kvq_cpu_features()->avx512vnni ? checked : 0),
          "VBMI ran %d of %d", vbmi_checked, checked);
    CHECK(!kvq_turbo_tcq64_scores(false, KVQ_TURBO3, NULL, 0, q, 1, 128, 128, 1.0f, ref, 1), "scalar codes accepted");
}

/* A trellis K's rounded query, int8 levels (kvq_turbo_round_query8,
 * chunk_scores8, the option) or int16 ones of KVQ_TURBO_QUERY16_TOP
 * (round_query16, chunk_scores16, the default in decode), through one
 * interface: the levels in int16 either way. */
typedef struct query_rounding { int top; bool wide; } query_rounding;

static void round_query_as(query_rounding qr, const float *q, int d, int16_t *m, float *s) {
    if (qr.wide) { kvq_turbo_round_query16(q, d, m, s); return; }
    int8_t m8[MAX_DIM];
    kvq_turbo_round_query8(q, d, m8, s);
    for (int i = 0; i < d; i++) m[i] = m8[i];
}

static void scores_as(query_rounding qr, kvq_isa isa, kvq_turbo_type ty, const uint8_t *const *rp, int nk,
                      const int16_t *m, const float *mf, const float *s, int G, int d, float *w) {
    if (qr.wide) { kvq_turbo_chunk_scores16(isa, ty, rp, nk, m, mf, s, G, d, d, 0.125f, w, CK_NK); return; }
    static int8_t m8[CK_MAXG * MAX_DIM];
    for (int i = 0; i < G * d; i++) m8[i] = (int8_t)m[i];
    kvq_turbo_chunk_scores8(isa, ty, rp, nk, m8, mf, s, G, d, d, 0.125f, w, CK_NK);
}

/* The look-up instances (scalar, VBMI); false where it refuses. */
static bool tcq64_scores_as(query_rounding qr, bool vbmi, kvq_turbo_type ty, const uint8_t *const *rp, int nk,
                            const int16_t *m, const float *s, int G, int d, float *w) {
    if (qr.wide) return kvq_turbo_tcq64_scores16(vbmi, ty, rp, nk, m, NULL, s, G, d, d, 0.125f, w, CK_NK);
    static int8_t m8[CK_MAXG * MAX_DIM];
    for (int i = 0; i < G * d; i++) m8[i] = (int8_t)m[i];
    return kvq_turbo_tcq64_scores8(vbmi, ty, rp, nk, m8, NULL, s, G, d, d, 0.125f, w, CK_NK);
}

/* The rounding: levels within top, the block's largest value at +-top,
 * every value within half a step of s m, NaN for a block holding inf, 0
 * for a zero block.  The scores: the same bits at every level, from the
 * scalar look-up instance and the VBMI one (byte look-ups and vpdpbusd /
 * vpdpwssd, where the CPU has it): the dots are exact, so they also
 * equal the float dot of the rounded values up to the final products'
 * rounding; and within the rounding's error bound of the float query's
 * scores, which they differ from. */
static void check_query_rounding(test_ctx *t, query_rounding qr) {
    static uint8_t rows[CK_NK][256];
    static float q[CK_MAXG * MAX_DIM], qhat[MAX_DIM], x[MAX_DIM], s[CK_MAXG * 4], got[CK_MAXG * CK_NK],
        lvl[CK_MAXG * CK_NK], fl[CK_MAXG * CK_NK];
    static int16_t m[CK_MAXG * MAX_DIM];
    static float mf[CK_MAXG * MAX_DIM];
    static const int dims[] = { 64, 128, 192, 256 }, gs[] = { 1, 2, 5 }, nks[] = { CK_NK, 7, 1 };
    static const kvq_isa levels[] = { KVQ_ISA_AVX2, KVQ_ISA_AVX512 };
    test_rng r = { 4242, 0, 0 };
    /* the rounding */
    gauss_vec(&r, x, 192);
    x[5] = -9.0f;                              /* block 0's largest */
    for (int i = 128; i < 192; i++) x[i] = 0.0f;
    round_query_as(qr, x, 192, m, s);
    CHECK(m[5] == -qr.top && s[0] == 9.0f / (float)qr.top && s[1] == 0.0f, "top %d: levels %d, scales %g %g", qr.top,
          m[5], s[0], s[1]);
    int top_seen = 0;
    for (int i = 0; i < 128; i++) {
        CHECK(fabsf(x[i] - s[0] * (float)m[i]) <= 0.5001f * s[0], "value %d: %g vs %g", i, x[i], s[0] * (float)m[i]);
        top_seen = abs(m[i]) > top_seen ? abs(m[i]) : top_seen;
    }
    CHECK(top_seen == qr.top, "largest level %d, top %d", top_seen, qr.top);
    for (int i = 128; i < 192; i++) CHECK(m[i] == 0, "zero block level %d = %d", i, m[i]);
    x[130] = INFINITY;
    round_query_as(qr, x, 192, m, s);
    CHECK(isnan(s[1]) && !isnan(s[0]), "inf in block 1: scales %g %g", s[0], s[1]);
    x[130] = 0.0f;

    int checked = 0, vbmi_checked = 0, moved = 0;
    for (kvq_turbo_type ty = KVQ_TURBO2_TCQ; ty <= KVQ_TURBO4_TCQ; ty++)
        for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
            const int d = dims[di], nb = kvq_turbo_blocks(d);
            chunk_rows(ty, d, &r, rows);
            for (size_t gi = 0; gi < KVQ_ARRAY_LEN(gs); gi++) for (size_t ni = 0; ni < KVQ_ARRAY_LEN(nks); ni++) {
                const int G = gs[gi], nk = nks[ni];
                const uint8_t *rp[CK_NK];
                for (int key = 0; key < nk; key++) rp[key] = rows[key];
                if (nk > 5) rp[5] = NULL;
                gauss_vec(&r, q, G * d);
                for (int g = 0; g < G; g++) round_query_as(qr, q + g * d, d, m + g * d, s + g * nb);
                for (int i = 0; i < G * d; i++) mf[i] = (float)m[i];
                scores_as(qr, KVQ_ISA_SCALAR, ty, rp, nk, m, NULL, s, G, d, got);
                kvq_turbo_chunk_scores(KVQ_ISA_SCALAR, ty, rp, nk, q, G, d, d, 0.125f, fl, CK_NK);
                for (int g = 0; g < G; g++) {
                    for (int b = 0, off = 0; b < nb; b++, off += 128)
                        for (int i = off; i < d && i < off + 128; i++) qhat[i] = s[g * nb + b] * (float)m[g * d + i];
                    for (int key = 0; key < nk; key++) {
                        const float v = got[g * CK_NK + key];
                        if (!rp[key]) continue;
                        /* the float dot of the rounded values (its own rounding) */
                        const double want = 0.125 * kvq_turbo_dot_rot(ty, rows[key], qhat, d);
                        /* the bound: per block bs (s/2) sum |values|, by the row's values */
                        float vals[MAX_DIM] = { 0 };
                        kvq_turbo_axpy_rot(ty, 1.0f, rows[key], vals, d);
                        double bound = 0.0;
                        for (int i = 0; i < d; i++) bound += 0.5 * s[g * nb + (i / 128)] * fabs(vals[i]);
                        bound *= 0.125;
                        if (!isfinite(want)) {
                            CHECK(!isfinite(v), "%s d=%d key %d: %g where the float dot is %g", kvq_turbo_name(ty), d,
                                  key, v, want);
                            continue;
                        }
                        CHECK(fabs(v - want) <= 1e-5 * (fabs(want) + 1.0), "%s d=%d G=%d key %d head %d: %.9g vs %.9g",
                              kvq_turbo_name(ty), d, G, key, g, v, want);
                        CHECK(fabs(v - fl[g * CK_NK + key]) <= bound * 1.0001 + 1e-6,
                              "%s d=%d key %d head %d: top %d %.6g vs float %.6g, bound %.3g", kvq_turbo_name(ty), d,
                              key, g, qr.top, v, fl[g * CK_NK + key], bound);
                        moved += v != fl[g * CK_NK + key];
                    }
                }
                /* every level, given the levels as floats or not */
                for (size_t li = 0; li < 2 * KVQ_ARRAY_LEN(levels); li++) {
                    scores_as(qr, levels[li / 2], ty, rp, nk, m, li % 2 ? mf : NULL, s, G, d, lvl);
                    for (int g = 0; g < G; g++)
                        CHECK(!tcq64_bits_differ(lvl + g * CK_NK, got + g * CK_NK, nk),
                              "%s d=%d G=%d nk=%d head %d: level %s (%s floats) differs from scalar", kvq_turbo_name(ty),
                              d, G, nk, g, kvq_isa_name(levels[li / 2]), li % 2 ? "with" : "without");
                }
                scores_as(qr, KVQ_ISA_SCALAR, ty, rp, nk, m, mf, s, G, d, lvl);
                for (int g = 0; g < G; g++)
                    CHECK(!tcq64_bits_differ(lvl + g * CK_NK, got + g * CK_NK, nk),
                          "%s d=%d G=%d nk=%d head %d: the scalar level with the floats differs", kvq_turbo_name(ty), d,
                          G, nk, g);
                CHECK(tcq64_scores_as(qr, false, ty, rp, nk, m, s, G, d, lvl), "scalar instance refused");
                for (int g = 0; g < G; g++)
                    CHECK(!tcq64_bits_differ(lvl + g * CK_NK, got + g * CK_NK, nk),
                          "%s d=%d G=%d nk=%d head %d: scalar look-up instance differs", kvq_turbo_name(ty), d, G, nk, g);
                if (tcq64_scores_as(qr, true, ty, rp, nk, m, s, G, d, lvl)) {
                    for (int g = 0; g < G; g++)
                        CHECK(!tcq64_bits_differ(lvl + g * CK_NK, got + g * CK_NK, nk),
                              "%s d=%d G=%d nk=%d head %d: VBMI top %d kernel differs", kvq_turbo_name(ty), d, G, nk, g,
                              qr.top);
                    vbmi_checked++;
                }
                if (t->result == TEST_FAIL) return;
                checked++;
            }
        }
    CHECK(checked == 3 * 4 * 3 * 3, "%d configurations", checked);
    CHECK(vbmi_checked == (kvq_cpu_features()->avx512vbmi && kvq_cpu_features()->avx512vnni ? checked : 0),
          "VBMI ran %d of %d", vbmi_checked, checked);
    CHECK(moved > 100, "top %d: only %d scores differ from the float query's", qr.top, moved);
}

TEST(turbo_int8_query_scores) {
    CHECK(kvq_turbo_blocks(192) == 2 && kvq_turbo_blocks(128) == 1 && kvq_turbo_blocks(256) == 2, "block counts");
    CHECK(!kvq_turbo_is_tcq(KVQ_TURBO3) && kvq_turbo_is_tcq(KVQ_TURBO3_TCQ), "int8 types");
    check_query_rounding(t, (query_rounding){ 127, false });
}

/* The same for the int16 levels, and their top is the largest that keeps
 * every dot exact: 128 values of |n| <= 128 times 1024 reach 2^24. */
TEST(turbo_int16_query_scores) {
    CHECK(128.0 * 128.0 * (KVQ_TURBO_QUERY16_TOP + 1) <= 16777216.0, "top %d too large for exact dots",
          KVQ_TURBO_QUERY16_TOP);
    check_query_rounding(t, (query_rounding){ KVQ_TURBO_QUERY16_TOP, true });
}

TEST(turbo_deterministic_bytes) {
    test_rng r = { 10, 0, 0 };
    float x[MAX_DIM];
    uint8_t a[512], b[512];
    ALL_TYPES(ty) for (size_t di = 0; di < KVQ_ARRAY_LEN(g_dims); di++) {
        int d = g_dims[di];
        size_t bytes = kvq_turbo_row_bytes(ty, d);
        gauss_vec(&r, x, d);
        memset(a, 0xAA, sizeof a);
        memset(b, 0x55, sizeof b);
        kvq_turbo_quantize(ty, x, a, d, NULL);
        kvq_turbo_quantize(ty, x, b, d, NULL);
        CHECK(!memcmp(a, b, bytes), "%s d=%d: bytes depend on the buffer's old content", kvq_turbo_name(ty), d);
        CHECK(a[bytes] == 0xAA, "%s d=%d: wrote past the row", kvq_turbo_name(ty), d);
    }
}

TEST(turbo_norm_is_preserved) {
    test_rng r = { 12, 0, 0 };
    float x[128], y[128];
    uint8_t row[128];
    ALL_TYPES(ty) {
        gauss_vec(&r, x, 128);
        for (int i = 0; i < 128; i++) x[i] *= 3.0f;
        kvq_turbo_quantize(ty, x, row, 128, NULL);
        kvq_turbo_dequantize(ty, row, y, 128, NULL);
        double nx = sqrt(dot_d(x, x, 128)), ny = sqrt(dot_d(y, y, 128));
        CHECK(fabs(ny / nx - 1) < 1e-3, "%s: ||x|| %.4f, ||x_hat|| %.4f", kvq_turbo_name(ty), nx, ny);
    }
}

TEST(turbo_zero_nan_and_bad_input) {
    float x[128] = { 0 }, y[128], q_rot[128];
    uint8_t row[128];
    kvq_error err = { 0 };
    ALL_TYPES(ty) {
        for (int i = 0; i < 128; i++) q_rot[i] = 1.0f;
        CHECK(kvq_turbo_quantize(ty, x, row, 128, NULL) == KVQ_OK, "zero vector");
        kvq_turbo_dequantize(ty, row, y, 128, NULL);
        for (int i = 0; i < 128; i++) CHECK(y[i] == 0.0f, "%s: zero vector decodes to %g", kvq_turbo_name(ty), y[i]);
        CHECK(kvq_turbo_dot_rot(ty, row, q_rot, 128) == 0.0f, "%s: zero row dot", kvq_turbo_name(ty));
        x[5] = NAN;
        kvq_turbo_quantize(ty, x, row, 128, NULL);
        kvq_turbo_dequantize(ty, row, y, 128, NULL);
        CHECK(isnan(y[5]) && isnan(kvq_turbo_dot_rot(ty, row, q_rot, 128)), "%s: NaN input lost", kvq_turbo_name(ty));
        x[5] = 0.0f;
    }
    CHECK(kvq_turbo_quantize(KVQ_TURBO3, x, row, 0, &err) == KVQ_ERR_ARG && err.msg[0], "head size 0 accepted");
    CHECK(kvq_turbo_quantize(KVQ_TURBO_COUNT, x, row, 128, &err) == KVQ_ERR_ARG, "bad type accepted");
    CHECK(kvq_turbo_dequantize(KVQ_TURBO3, row, y, 70000, &err) == KVQ_ERR_ARG, "huge head accepted");
    CHECK(isnan(kvq_turbo_dot_rot(KVQ_TURBO_COUNT, row, q_rot, 128)), "dot with a bad type");
    CHECK(isnan(kvq_turbo_tcq_viterbi(7, kvq_turbo_tcq_codebook(2), x, 128, NULL)), "k=7 Viterbi ran");
}

/* ------------------------------------------------------------------ CLI */

TEST(turbo_cli_bench_and_bad_flags) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "%s turbo-bench -n 10 -d 64", bin);
    CHECK(test_run(cmd, out, sizeof out) == 0, "turbo-bench failed: %s", out);
    CHECK(strstr(out, "turbo3_tcq") && strstr(out, "NMSE"), "turbo-bench output: %s", out);
    snprintf(cmd, sizeof cmd, "%s turbo-bench --dim 0", bin);
    CHECK(test_run(cmd, out, sizeof out) != 0 && strstr(out, "error"), "--dim 0 accepted: %s", out);
    snprintf(cmd, sizeof cmd, "%s turbo-train --iters", bin);
    CHECK(test_run(cmd, out, sizeof out) != 0 && strstr(out, "error"), "missing value accepted: %s", out);
    snprintf(cmd, sizeof cmd, "%s turbo-train --bogus", bin);
    CHECK(test_run(cmd, out, sizeof out) != 0 && strstr(out, "unknown option"), "unknown flag accepted: %s", out);
}
