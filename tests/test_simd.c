/* test_simd.c - every SIMD level the CPU has against the scalar reference,
 * for every type, on random and adversarial rows.
 *   quantize, dequantize: bitwise identical (same operations);
 *   dot, axpy: equal to float rounding, relative to the magnitudes summed
 *   (FMA and a different summation order; q*_1 blocks sum d*c and m
 *   separately, so the scale is the block's largest |value|, not |value|). */
#include "test.h"
#include "kvq.h"
#include "simd.h"
#include "quant_block.h"

#include <float.h>
#include <string.h>

enum { N = 512, BLOCK = 32 };

typedef enum { ROW_GAUSS, ROW_MIXED_SCALES, ROW_SCALE_EDGES, ROW_ZEROS, ROW_HUGE, ROW_F16_EDGE, ROW_DENORMAL,
               ROW_TINY, ROW_NONFINITE, ROW_TIES, ROW_RANDOM_BITS, ROW_IQ4_MIDPOINTS, ROW_KINDS } row_kind;
static const char *const row_names[ROW_KINDS] = {
    "gauss", "mixed-scales", "fp16-scale edges", "zeros", "one 1e30", "one 6e4", "denormals", "1e-30 scaled", "nan/inf", "q8 ties", "random bit patterns",
    "iq4_nl midpoints",
};

static void make_row(row_kind kind, test_rng *r, float *x) {
    for (int i = 0; i < N; i++) x[i] = (float)test_rng_gauss(r);
    switch (kind) {
    case ROW_GAUSS: break;
    case ROW_MIXED_SCALES:
        for (int i = 0; i < N; i++) x[i] *= (float)pow(10.0, (double)((i / BLOCK) % 9) - 4);
        break;
    case ROW_SCALE_EDGES: /* blocks whose scales round to fp16 subnormals, 0 or past 65504 */
        for (int i = 0; i < N; i++) x[i] *= (float)pow(10.0, (double)((i / BLOCK) % 2 ? 5 + (i / BLOCK) % 4 : -9 + (i / BLOCK) % 5));
        break;
    case ROW_ZEROS: memset(x, 0, sizeof(float) * N); break;
    case ROW_HUGE: x[N / 3] = 1e30f; x[7] = -3e38f; break;
    case ROW_F16_EDGE: x[N / 2] = 6e4f; x[40] = -65519.0f; x[100] = 65520.0f; break;
    case ROW_DENORMAL: for (int i = 0; i < N; i++) x[i] *= 1e-40f; break;
    case ROW_TINY: for (int i = 0; i < N; i++) x[i] *= 1e-30f; break;
    case ROW_NONFINITE: x[3] = NAN; x[70] = INFINITY; x[200] = -INFINITY; break;
    case ROW_TIES: /* q8_0: max 127 gives d = 1, so x/d lands on k + 0.5 exactly */
        for (int i = 0; i < N; i++) x[i] = i % BLOCK == 0 ? 127.0f : (float)(i * 37 % 253 - 126) + 0.5f;
        break;
    case ROW_RANDOM_BITS: /* every float class incl. NaN payloads; sums would overflow */
        for (int i = 0; i < N; i++) {
            const uint32_t u = (uint32_t)test_rng_u64(r);
            memcpy(&x[i], &u, 4);
        }
        break;
    case ROW_IQ4_MIDPOINTS:
        /* iq4_nl's search meets every value exactly on, one ulp above and
         * below a midpoint of its codebook (the compare that decides the
         * index) and near the SIMD levels' bucket edges: the block's
         * largest value -127 s makes s (a power of two) its first scale */
        for (int i = 0; i < N; i++) {
            const int j = i % BLOCK, blk = i / BLOCK;
            const float mid = kvq_iq4nl_mids[(j + blk) % 15];
            float v;
            switch ((blk + j) % 4) {
            case 0: v = mid; break;
            case 1: v = nextafterf(mid, INFINITY); break;
            case 2: v = nextafterf(mid, -INFINITY); break;
            default: v = (float)(8 * ((7 * j + blk) % 32) - 124) + 0.01f * (float)(blk % 3 - 1); break;   /* on, around an edge */
            }
            x[i] = ldexpf(j == 0 ? -127.0f : v, blk % 5 - 2);
        }
        break;
    default: break;
    }
}

static int same_bits_or_nan(float a, float b) {
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0;
}

/* A sum over a block whose scale overflowed (inf) is inf or NaN depending
 * on the order in which +inf and -inf terms meet: only "non-finite" is
 * promised for it, at every level. */
static int close_enough(double got, double want, double tol) {
    if (!isfinite(want) || !isfinite(got)) return !isfinite(want) && !isfinite(got);
    return fabs(got - want) <= tol;
}

/* Largest |value| of the block holding element i (the scale of the
 * rounding in d*c + m). */
static double block_max(const float *y, int i, int bs) {
    double m = 0;
    const int b0 = i / bs * bs;
    for (int j = b0; j < b0 + bs; j++) m = fmax(m, fabs((double)y[j]));
    return m;
}

typedef struct { char msg[400]; } failure;

static int compare_type(const kvq_type_traits *fast, const kvq_type_traits *ref, row_kind kind, failure *f) {
    test_rng rng = { 1234 + (uint64_t)kind, 0, 0 };
    float x[N], q[N], y_ref[N], y_fast[N], acc_ref[N], acc_fast[N];
    uint8_t b_ref[N * 4], b_fast[N * 4];
    const size_t bytes = (size_t)(N / ref->block_size * ref->block_bytes);
    make_row(kind, &rng, x);
    for (int i = 0; i < N; i++) q[i] = (float)test_rng_gauss(&rng);

    ref->quantize(x, b_ref, N);
    fast->quantize(x, b_fast, N);
    if (memcmp(b_ref, b_fast, bytes) != 0) {
        size_t i = 0;
        while (b_ref[i] == b_fast[i]) i++;
        snprintf(f->msg, sizeof f->msg, "quantize byte %zu: 0x%02x vs scalar 0x%02x", i, b_fast[i], b_ref[i]);
        return 0;
    }
    ref->dequantize(b_ref, y_ref, N);
    fast->dequantize(b_ref, y_fast, N);
    for (int i = 0; i < N; i++)
        if (!same_bits_or_nan(y_fast[i], y_ref[i])) {
            snprintf(f->msg, sizeof f->msg, "dequantize [%d]: %a vs scalar %a", i, (double)y_fast[i], (double)y_ref[i]);
            return 0;
        }

    if (kind == ROW_RANDOM_BITS) return 1;   /* encoders and decoders only */

    /* both sides may round each term and each partial sum once or twice */
    const double eps = 4.0 * N * FLT_EPSILON;
    double mag = 0;
    for (int i = 0; i < N; i++) mag += block_max(y_ref, i, ref->block_size) * fabs((double)q[i]);
    const double d_ref = ref->dot(b_ref, q, N), d_fast = fast->dot(b_ref, q, N);
    if (!close_enough(d_fast, d_ref, eps * mag + N * (double)FLT_TRUE_MIN * 4)) {
        snprintf(f->msg, sizeof f->msg, "dot %.9g vs scalar %.9g (magnitude %.3g)", d_fast, d_ref, mag);
        return 0;
    }

    const float w = -0.6180339f;
    for (int i = 0; i < N; i++) acc_ref[i] = acc_fast[i] = (float)test_rng_gauss(&rng);
    ref->axpy(w, b_ref, acc_ref, N);
    fast->axpy(w, b_ref, acc_fast, N);
    for (int i = 0; i < N; i++) {
        const double scale = fabs((double)acc_ref[i]) + fabs((double)w) * 3 * block_max(y_ref, i, ref->block_size);
        if (!close_enough(acc_fast[i], acc_ref[i], 4 * FLT_EPSILON * scale + 4 * (double)FLT_TRUE_MIN)) {
            snprintf(f->msg, sizeof f->msg, "axpy [%d]: %.9g vs scalar %.9g", i, (double)acc_fast[i], (double)acc_ref[i]);
            return 0;
        }
    }
    return 1;
}

static void compare_level(test_ctx *t, const char *level) {
    static kvq_type_traits table[KVQ_TYPE_COUNT];
    if (!kvq_simd_table(level, table)) SKIP("%s not available on this CPU (or KVQ_FORCE_SCALAR)", level);
    int compared = 0;
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *ref = kvq_type_get_scalar((kvq_type)ty);
        if (!ref || !ref->quantize) continue;
        int differs = memcmp(&table[ty], ref, sizeof *ref) != 0;
        compared += differs;
        for (int k = 0; k < ROW_KINDS; k++) {
            failure f;
            CHECK(compare_type(&table[ty], ref, (row_kind)k, &f), "%s %s, %s row: %s", level, ref->name, row_names[k], f.msg);
        }
    }
    CHECK(compared > 0, "%s installed no kernels", level);
}

TEST(simd_avx2_matches_scalar) { compare_level(t, "avx2"); }
TEST(simd_avx512_matches_scalar) { compare_level(t, "avx512"); }

/* A random fp16 scale (subnormal to the largest), negative when `neg`. */
static float random_half(test_rng *r, bool neg) {
    uint16_t h;
    do h = (uint16_t)(test_rng_u64(r) % 0x7c00u); while (h == 0);
    return neg ? -kvq_half_to_float(h) : kvq_half_to_float(h);
}

/* iq4_nl's search steps of one level against the scalar steps, directly
 * (whole rows reach them only through the search's choices): the stored
 * indices for values exactly on and one ulp either side of every midpoint
 * of the codebook at random scales (the compare that decides an index,
 * in every bucket of the SIMD tables), and whole passes over random lanes,
 * every field bit for bit. */
static void compare_iq4nl_steps(test_ctx *t, const char *level) {
    const kvq_iq4nl_ops *fast = kvq_simd_iq4nl_ops(level), *ref = kvq_iq4nl_ops_scalar();
    if (!fast) SKIP("%s not available on this CPU (or KVQ_FORCE_SCALAR)", level);
    test_rng rng = { 4242, 0, 0 };
    for (int trial = 0; trial < 3000; trial++) {
        const float d = random_half(&rng, trial % 2), ad = fabsf(d);
        float x[32];
        for (int j = 0; j < 32; j++) {
            const float on = copysignf(ad * kvq_iq4nl_mids[(j + trial) % 15], d);   /* exact */
            x[j] = j % 4 == 0 ? on : j % 4 == 1 ? nextafterf(on, INFINITY) : j % 4 == 2 ? nextafterf(on, -INFINITY)
                 : d * (float)(test_rng_uniform(&rng) * 300.0 - 150.0);
        }
        uint8_t want[32], got[32];
        ref->indices(x, d, want);
        fast->indices(x, d, got);
        for (int j = 0; j < 32; j++)
            if (want[j] != got[j]) {
                CHECK(0, "%s indices, d %a, x[%d] %a: %d vs scalar %d", level, (double)d, j, (double)x[j], got[j], want[j]);
                return;
            }
    }
    kvq_iq4nl_lanes prev;
    float prev_x[32];
    bool have_prev = false;
    for (int trial = 0; trial < 3000; trial++) {
        kvq_iq4nl_lanes L;
        const float s = trial % 2 ? 1.0f : -1.0f, scale = ldexpf(1.0f, (int)(test_rng_u64(&rng) % 40) - 20);
        /* lanes 0-7 one sign and 8-15 the other (the first pass), or (one
         * trial in 4) the signs mixed and lanes 8-15 set aside, as `keep`
         * leaves them */
        const bool kept = trial % 4 == 3;
        for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {
            L.ad[i] = test_rng_u64(&rng) % 8 == 0 || (kept && i >= KVQ_IQ4NL_KEEP) ? 0.0f : fabsf(random_half(&rng, false));
            L.sg[i] = kept ? (test_rng_u64(&rng) % 2 ? s : -s) : i < KVQ_IQ4NL_LANES / 2 ? s : -s;
            L.best_sse[i] = trial % 3 == 0 ? INFINITY : (float)test_rng_uniform(&rng) * scale * scale * 32;
            L.best_d[i] = 0.0f;
            L.best_pass[i] = 3.0f;
        }
        float x[32];   /* some on a lane's midpoints and bucket edges (-124 + 8b) at its scale, exactly */
        for (int j = 0; j < 32; j++) {
            const float sd = L.sg[j % 16] * L.ad[j % 16];
            x[j] = sd != 0.0f && j % 3 == 0   ? sd * kvq_iq4nl_mids[j % 15]
                   : sd != 0.0f && j % 3 == 1 ? sd * (float)(8 * (5 * j % 32) - 124)
                                              : (float)test_rng_gauss(&rng) * scale;
        }
        kvq_iq4nl_lanes want = L, got = L;
        const int p = trial % 3;
        const bool refine = trial % 5 != 0;
        ref->pass(x, &want, p, refine);
        fast->pass(x, &got, p, refine);
        if (memcmp(&want, &got, sizeof want) != 0) {
            int i = 0;
            while (i < KVQ_IQ4NL_LANES && memcmp(&want.ad[i], &got.ad[i], 4) == 0 &&
                   memcmp(&want.best_sse[i], &got.best_sse[i], 4) == 0 && memcmp(&want.best_d[i], &got.best_d[i], 4) == 0)
                i++;
            CHECK(0, "%s pass %d (refine %d), trial %d, lane %d: ad %a sse %a d %a vs scalar ad %a sse %a d %a", level,
                  p, refine, trial, i, (double)got.ad[i % 16], (double)got.best_sse[i % 16], (double)got.best_d[i % 16],
                  (double)want.ad[i % 16], (double)want.best_sse[i % 16], (double)want.best_d[i % 16]);
            return;
        }
        /* pass_pair: this block and the previous kept trial's, together */
        if (!kept) continue;
        if (fast->pass_pair && have_prev) {
            kvq_iq4nl_lanes want0 = prev, want1 = L, got0 = prev, got1 = L;
            ref->pass(prev_x, &want0, p, refine);
            ref->pass(x, &want1, p, refine);
            fast->pass_pair(prev_x, x, &got0, &got1, p, refine);
            CHECK(!memcmp(&want0, &got0, sizeof want0) && !memcmp(&want1, &got1, sizeof want1),
                  "%s pass_pair %d (refine %d), trial %d: not the scalar passes' lanes", level, p, refine, trial);
            if (t->result == TEST_FAIL) return;
        }
        prev = L;
        memcpy(prev_x, x, sizeof prev_x);
        have_prev = true;
    }
}

/* keep: the same lanes kept, in the same places, bit for bit, on errors
 * drawn from a few values (ties everywhere) or from many, +inf among
 * them. */
static void compare_iq4nl_keep(test_ctx *t, const char *level) {
    const kvq_iq4nl_ops *fast = kvq_simd_iq4nl_ops(level), *ref = kvq_iq4nl_ops_scalar();
    if (!fast) SKIP("%s not available on this CPU (or KVQ_FORCE_SCALAR)", level);
    test_rng rng = { 777, 0, 0 };
    for (int trial = 0; trial < 3000; trial++) {
        kvq_iq4nl_lanes L;
        const int distinct = trial % 3 == 0 ? 3 : 1000;
        for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {
            L.ad[i] = (float)(i + 1);
            L.sg[i] = test_rng_u64(&rng) % 2 ? 1.0f : -1.0f;
            const int v = (int)(test_rng_u64(&rng) % (uint64_t)distinct);
            L.best_sse[i] = trial % 7 == 0 && v == 0 ? INFINITY : (float)v * 0.25f;
            L.best_d[i] = (float)(100 + i);
            L.best_pass[i] = (float)(i % 3);
        }
        kvq_iq4nl_lanes want = L, got = L;
        ref->keep(&want);
        fast->keep(&got);
        if (memcmp(&want, &got, sizeof want) != 0) {
            CHECK(0, "%s keep, trial %d: lane 0 from %g (scalar: %g), lane 7 from %g (scalar: %g)", level, trial,
                  (double)got.best_d[0], (double)want.best_d[0], (double)got.best_d[7], (double)want.best_d[7]);
            return;
        }
    }
}

TEST(simd_iq4nl_keep_scalar_is_the_rule) {
    /* the scalar step against the rule written out: the 8 least errors,
     * ties to the earlier lane, in their order */
    test_rng rng = { 99, 0, 0 };
    for (int trial = 0; trial < 2000; trial++) {
        kvq_iq4nl_lanes L;
        for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {
            L.ad[i] = (float)(i + 1);
            L.sg[i] = 1.0f;
            L.best_sse[i] = (float)(test_rng_u64(&rng) % (trial % 2 ? 4u : 1000u));
            L.best_d[i] = (float)i;
            L.best_pass[i] = 0.0f;
        }
        const kvq_iq4nl_lanes in = L;
        kvq_iq4nl_ops_scalar()->keep(&L);
        int d = 0;
        for (int i = 0; i < KVQ_IQ4NL_LANES; i++) {
            int before = 0;
            for (int j = 0; j < KVQ_IQ4NL_LANES; j++)
                before += in.best_sse[j] < in.best_sse[i] || (in.best_sse[j] == in.best_sse[i] && j < i);
            if (before >= KVQ_IQ4NL_KEEP) continue;
            CHECK(L.best_d[d] == (float)i && L.ad[d] == in.ad[i] && L.best_sse[d] == in.best_sse[i],
                  "trial %d: kept lane %d holds lane %g, want %d", trial, d, (double)L.best_d[d], i);
            d++;
        }
        CHECK(d == KVQ_IQ4NL_KEEP, "trial %d: %d lanes kept", trial, d);
        for (; d < KVQ_IQ4NL_LANES; d++)
            CHECK(L.ad[d] == 0.0f && L.sg[d] == 1.0f && isinf(L.best_sse[d]) && L.best_sse[d] > 0.0f &&
                      L.best_d[d] == 0.0f && L.best_pass[d] == 0.0f,
                  "trial %d: lane %d not set aside (ad 0, sg 1, best_sse +inf, best_d 0, best_pass 0)", trial, d);
        if (t->result == TEST_FAIL) return;
    }
}

TEST(simd_iq4nl_keep_avx2_matches_scalar) { compare_iq4nl_keep(t, "avx2"); }
TEST(simd_iq4nl_keep_avx512_matches_scalar) { compare_iq4nl_keep(t, "avx512"); }

TEST(simd_iq4nl_steps_avx2_match_scalar) { compare_iq4nl_steps(t, "avx2"); }
TEST(simd_iq4nl_steps_avx512_match_scalar) { compare_iq4nl_steps(t, "avx512"); }

/* The active table is one of the levels, and KVQ_FORCE_SCALAR is obeyed
 * (the CLI runs in a child process with the variable set). */
TEST(simd_active_level_is_consistent) {
    const char *level = kvq_simd_level();
    kvq_type_traits table[KVQ_TYPE_COUNT];
    CHECK(kvq_simd_table(level, table), "active level %s cannot be rebuilt", level);
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *a = kvq_type_get((kvq_type)ty);
        if (!a) continue;
        CHECK(a->dot == table[ty].dot && a->quantize == table[ty].quantize, "%s: active kernels are not level %s's",
              a->name, level);
    }
    const char *force = getenv("KVQ_FORCE_SCALAR");
    if (force && *force == '1') CHECK(strcmp(level, "scalar") == 0, "KVQ_FORCE_SCALAR=1 but level %s", level);
}

/* KVQ_FORCE_SCALAR=1 in a fresh process selects the scalar table (the
 * choice is made once per process, so it needs a child: the CLI's
 * quant-test prints the level in its header). */
TEST(simd_force_scalar_env) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    char cmd[1200], out[4096];
    snprintf(cmd, sizeof cmd, "KVQ_FORCE_SCALAR=1 '%s' quant-test --type q8_0 --rows 1 --dim 32", bin);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "quant-test failed (%d): %s", rc, out);
    CHECK(strstr(out, "simd scalar") != NULL, "KVQ_FORCE_SCALAR=1 not obeyed: %s", out);
    /* and without it, the child picks what this process picked (unless this
     * process itself runs forced scalar: then the CPU's level is unknown) */
    if (!strcmp(kvq_simd_level(), "scalar")) return;
    snprintf(cmd, sizeof cmd, "KVQ_FORCE_SCALAR=0 '%s' quant-test --type q8_0 --rows 1 --dim 32", bin);
    rc = test_run(cmd, out, sizeof out);
    char want[64];
    snprintf(want, sizeof want, "simd %s", kvq_simd_level());
    CHECK(rc == 0 && strstr(out, want) != NULL, "without the variable the level should be %s: %s",
          kvq_simd_level(), out);
}
