/* test_calib_code.c - the row code of the calibrated types
 * (src/calib_code.c): layout, round-trip error against the allocation's
 * predicted distortion, dot/axpy against the decoded row, special rows. */
#include "calib.h"
#include "calib_build.h"
#include "test.h"
#include "turbo.h"

static void gauss_row(test_rng *r, float *y, int d, double scale) {
    for (int i = 0; i < d; i++) y[i] = (float)(scale * test_rng_gauss(r));
}

/* Flat-importance profile of d coefficients at one rate. */
static bool flat_profile(int d, int rate, uint8_t *bits, float *w, kvq_calib_profile *p, char *msg) {
    double imp[KVQ_MAX_HEAD_DIM];
    for (int i = 0; i < d; i++) imp[i] = 1.0, w[i] = 1.0f;
    kvq_error err;
    const int row = kvq_calib_row_bytes(rate, d);
    if (kvq_calib_allocate(imp, d, 8 * (row - 2), bits, &err) || kvq_calib_profile_make(bits, w, d, row, false, p, &err)) {
        snprintf(msg, 300, "%s", err.msg);
        return false;
    }
    return true;
}

/* On unit Gaussian rows the error of each coefficient is close to D(b). */
TEST(calib_code_round_trip_matches_the_allocation) {
    test_rng r = { 21, 0, 0 };
    const int dims[2] = { 64, 128 };
    for (int di = 0; di < 2; di++)
        for (int ri = 0; ri < KVQ_CALIB_N_RATES; ri++) {
            const int d = dims[di], rate = kvq_calib_rates[ri];
            uint8_t bits[KVQ_MAX_HEAD_DIM], row[512];
            float w[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM], yh[KVQ_MAX_HEAD_DIM];
            kvq_calib_profile p;
            char msg[300];
            CHECK(flat_profile(d, rate, bits, w, &p, msg), "%s", msg);
            CHECK(p.row_bytes * 800 == rate * d || (p.row_bytes - 1) * 800 < rate * d, "row bytes %d", p.row_bytes);
            double pred = 0, err2 = 0, sig = 0;
            for (int i = 0; i < d; i++) pred += kvq_calib_distortion(bits[i]) / d;
            for (int n = 0; n < 400; n++) {
                gauss_row(&r, y, d, 3.0);
                kvq_calib_encode(&p, y, row);
                kvq_calib_decode(&p, row, yh);
                for (int i = 0; i < d; i++) {
                    err2 += (double)(y[i] - yh[i]) * (y[i] - yh[i]);
                    sig += (double)y[i] * y[i];
                }
            }
            const double nmse = err2 / sig;
            CHECK(nmse < 1.12 * pred && nmse > 0.75 * pred, "d=%d rate %d: NMSE %.5f, allocation predicts %.5f", d, rate,
                  nmse, pred);
        }
}

/* A spread allocation (8 bits down to 0): each run's error is its D(b). */
TEST(calib_code_runs_of_every_width) {
    enum { D = 96 };
    uint8_t bits[D];
    float w[D], y[D], yh[D];
    for (int i = 0; i < D; i++) {
        bits[i] = (uint8_t)(i < 80 ? 8 - i / 10 : 0);
        w[i] = 1.0f;
    }
    kvq_calib_profile p;
    kvq_error err;
    CHECK(kvq_calib_profile_make(bits, w, D, 2 + (kvq_calib_code_bits(bits, D) + 7) / 8, false, &p, &err) == KVQ_OK, "%s", err.msg);
    CHECK(p.n_coded == 80 && p.n_groups == 8, "coded %d runs %d", p.n_coded, p.n_groups);
    test_rng r = { 4, 0, 0 };
    double e[9] = { 0 }, s[9] = { 0 };
    uint8_t row[256];
    for (int n = 0; n < 2000; n++) {
        gauss_row(&r, y, D, 1.0);
        kvq_calib_encode(&p, y, row);
        kvq_calib_decode(&p, row, yh);
        for (int i = 0; i < D; i++) {
            e[bits[i]] += (double)(y[i] - yh[i]) * (y[i] - yh[i]);
            s[bits[i]] += (double)y[i] * y[i];
        }
    }
    /* The least-squares scale trades the runs' errors against each other
     * (it may cost the 8-bit run a little to save more in the 1-bit one),
     * so the total is what matches the allocation's prediction. */
    double tot_e = 0, tot_s = 0, pred = 0;
    for (int b = 1; b <= 8; b++) {
        tot_e += e[b];
        tot_s += s[b];
        pred += 10 * kvq_calib_distortion(b);
    }
    pred /= 80;
    CHECK(tot_e / tot_s < 1.1 * pred && tot_e / tot_s > 0.8 * pred, "coded error %.4g, predicted %.4g", tot_e / tot_s, pred);
    CHECK(e[0] == s[0], "uncoded coefficients must decode to 0");
}

TEST(calib_code_dot_and_axpy_read_the_decoded_row) {
    enum { D = 128 };
    uint8_t bits[D], row[128];
    float w[D], y[D], yh[D], q[D], acc[D];
    kvq_calib_profile p;
    char msg[300];
    CHECK(flat_profile(D, 325, bits, w, &p, msg), "%s", msg);
    test_rng r = { 8, 0, 0 };
    for (int n = 0; n < 50; n++) {
        gauss_row(&r, y, D, 2.0);
        gauss_row(&r, q, D, 1.0);
        kvq_calib_encode(&p, y, row);
        kvq_calib_decode(&p, row, yh);
        double ref = 0, mag = 0;
        for (int i = 0; i < D; i++) {
            ref += (double)q[i] * yh[i];
            mag += fabs((double)q[i] * yh[i]);
            acc[i] = 0.5f;
        }
        const float dot = kvq_calib_dot(&p, row, q);
        CHECK(fabs(dot - ref) <= 1e-5 * mag, "dot %.7g, decoded %.7g", dot, ref);
        kvq_calib_axpy(&p, -0.75f, row, acc);
        for (int i = 0; i < D; i++) CHECK(fabsf(acc[i] - (0.5f - 0.75f * yh[i])) < 1e-6f, "axpy at %d", i);
    }
}

/* The stored scale is the weighted least-squares fit: 2% either way
 * only adds error. */
TEST(calib_code_scale_is_the_weighted_least_squares_fit) {
    enum { D = 64 };
    uint8_t bits[D], row[64];
    float w[D], y[D], yh[D];
    double imp[D];
    for (int i = 0; i < D; i++) imp[i] = w[i] = (float)exp(-0.05 * i);
    kvq_error err;
    kvq_calib_profile p;
    CHECK(kvq_calib_allocate(imp, D, 8 * (kvq_calib_row_bytes(250, D) - 2), bits, &err) == KVQ_OK, "%s", err.msg);
    CHECK(kvq_calib_profile_make(bits, w, D, kvq_calib_row_bytes(250, D), false, &p, &err) == KVQ_OK, "%s", err.msg);
    test_rng r = { 2, 0, 0 };
    for (int n = 0; n < 20; n++) {
        gauss_row(&r, y, D, 1.0);
        kvq_calib_encode(&p, y, row);
        kvq_calib_decode(&p, row, yh);
        double e0 = 0, e_lo = 0, e_hi = 0;
        for (int i = 0; i < D; i++) {         /* the error at g, 0.98 g and 1.02 g */
            e0 += w[i] * pow(y[i] - yh[i], 2);
            e_lo += w[i] * pow(y[i] - 0.98 * yh[i], 2);
            e_hi += w[i] * pow(y[i] - 1.02 * yh[i], 2);
        }
        CHECK(e0 <= e_lo && e0 <= e_hi, "scale not optimal: %.6g vs %.6g / %.6g", e0, e_lo, e_hi);
    }
}

/* An unbiased profile (K sides) reads the rows times the logit gain, so
 * q.y_hat is unbiased: regressing it on q.y gives slope 1; the plain
 * profile (the MSE-best row) gives about 1 - D.  Same codes for both. */
TEST(calib_code_unbiased_profile_keeps_inner_products) {
    enum { D = 128 };
    uint8_t bits[D], row[128];
    float w[D], y[D], q[D];
    kvq_calib_profile plain, unb;
    double imp[D];
    for (int i = 0; i < D; i++) imp[i] = exp(-0.03 * i), w[i] = (float)imp[i];
    kvq_error err;
    const int rb = kvq_calib_row_bytes(225, D);
    CHECK(kvq_calib_allocate(imp, D, 8 * (rb - 2), bits, &err) == KVQ_OK, "%s", err.msg);
    CHECK(kvq_calib_profile_make(bits, w, D, rb, false, &plain, &err) == KVQ_OK &&
          kvq_calib_profile_make(bits, w, D, rb, true, &unb, &err) == KVQ_OK, "%s", err.msg);
    test_rng r = { 6, 0, 0 };
    double sxx = 0, s_unb = 0, s_plain = 0;
    for (int n = 0; n < 3000; n++) {
        gauss_row(&r, y, D, 1.0);
        for (int i = 0; i < D; i++) q[i] = (float)test_rng_gauss(&r);
        kvq_calib_encode(&unb, y, row);       /* the same bytes as the plain profile's */
        double exact = 0;
        for (int i = 0; i < unb.n_coded; i++) exact += (double)q[i] * y[i];
        sxx += exact * exact;
        s_unb += exact * kvq_calib_dot(&unb, row, q);
        s_plain += exact * kvq_calib_dot(&plain, row, q);
    }
    if (getenv("KVQ_TEST_VERBOSE")) fprintf(stderr, "slopes: unbiased %.4f, plain %.4f\n", s_unb / sxx, s_plain / sxx);
    CHECK(fabs(s_unb / sxx - 1.0) < 0.02, "slope of the unbiased profile %.4f", s_unb / sxx);
    CHECK(s_plain / sxx < 0.97, "slope of the plain one %.4f: the test cannot tell them apart", s_plain / sxx);
}

TEST(calib_code_zero_nan_and_bad_profiles) {
    enum { D = 64 };
    uint8_t bits[D], row[64];
    float w[D], y[D], yh[D];
    kvq_calib_profile p;
    char msg[300];
    CHECK(flat_profile(D, 300, bits, w, &p, msg), "%s", msg);
    memset(y, 0, sizeof y);
    kvq_calib_encode(&p, y, row);
    kvq_calib_decode(&p, row, yh);
    for (int i = 0; i < D; i++) CHECK(yh[i] == 0.0f, "zero row decodes to %g", yh[i]);
    y[5] = NAN;
    kvq_calib_encode(&p, y, row);
    kvq_calib_decode(&p, row, yh);
    CHECK(isnan(yh[0]) && isnan(kvq_calib_dot(&p, row, w)), "a NaN row must decode to NaN");
    kvq_error err;
    bits[3] = (uint8_t)(bits[2] + 1);
    CHECK(kvq_calib_profile_make(bits, w, D, 64, false, &p, &err) == KVQ_ERR_FORMAT && strstr(err.msg, "descending"),
          "rising allocation accepted: %s", err.msg);
    for (int i = 0; i < D; i++) bits[i] = 4;
    CHECK(kvq_calib_profile_make(bits, w, D, 33, false, &p, &err) == KVQ_ERR_FORMAT && strstr(err.msg, "holds"),
          "oversized allocation accepted: %s", err.msg);
    CHECK(kvq_calib_profile_make(bits, w, D, 2 + (4 * D + 6) / 8 + 1, false, &p, &err) == KVQ_OK, "%s", err.msg);
    bits[0] = 9;
    CHECK(kvq_calib_profile_make(bits, w, D, 200, false, &p, &err) == KVQ_ERR_FORMAT, "9 bits accepted");
}

/* The Gaussian sanity check (docs/calibration.md): fitted on isotropic
 * Gaussian rows there is nothing to exploit, and the calibrated code must
 * be no worse than the uncalibrated types of the same bits per value
 * (TurboQuant's trellis at 2.25/3.25/4.25, the block types at 2.5/3.5),
 * on rows it was not fitted to.  And on rows with outlier channels it
 * must gain a lot (the KLT finds them). */
static double nmse_of(kvq_type t, const float *x, int rows, int d, const kvq_calib_rows *fit) {
    double e = 0, s = 0;
    float rot[256], back[256], out[256];
    uint8_t row[1024];
    for (int r = 0; r < rows; r++) {
        const float *v = x + (size_t)r * d;
        if (fit) {
            kvq_calib_rows_round_trip(fit, v, out, row);
        } else if (kvq_type_get(t)->format_rot == KVQ_FMT_ROT_TURBO) {
            kvq_turbo_rotate_query(v, rot, d);
            kvq_quantize_row(t, rot, row, d);
            kvq_dequantize_row(t, row, back, d);
            kvq_turbo_unrotate(back, out, d);
        } else {
            memcpy(rot, v, (size_t)d * sizeof *rot);
            kvq_rotate_row(rot, d, d, NULL);
            kvq_quantize_row(t, rot, row, d);
            kvq_dequantize_row(t, row, out, d);
            kvq_rotate_row_inverse(out, d, d, NULL);
        }
        for (int i = 0; i < d; i++) {
            e += (double)(out[i] - v[i]) * (out[i] - v[i]);
            s += (double)v[i] * v[i];
        }
    }
    return e / s;
}

TEST(calib_gaussian_sanity_no_worse_than_uncalibrated) {
    enum { D = 128, TRAIN = 32 * D, ROWS = 300 };
    float *train = malloc(sizeof(float) * TRAIN * D), *test = malloc(sizeof(float) * ROWS * D);
    CHECK(train && test, "alloc");
    test_rng r = { 31, 0, 0 };
    for (int i = 0; i < TRAIN * D; i++) train[i] = (float)test_rng_gauss(&r);
    for (int i = 0; i < ROWS * D; i++) test[i] = (float)test_rng_gauss(&r);
    const struct { kvq_type cal, ref; } pairs[] = {
        { KVQ_TYPE_CAL225, KVQ_TYPE_TURBO2_TCQ }, { KVQ_TYPE_CAL250, KVQ_TYPE_Q2_0 },
        { KVQ_TYPE_CAL325, KVQ_TYPE_TURBO3_TCQ }, { KVQ_TYPE_CAL350, KVQ_TYPE_Q3_0 },
        { KVQ_TYPE_CAL425, KVQ_TYPE_TURBO4_TCQ },
    };
    char msg[512] = "";
    bool ok = true;
    for (size_t k = 0; k < sizeof pairs / sizeof *pairs; k++) {
        kvq_calib_rows fit;
        kvq_error err;
        if (kvq_calib_fit_rows(train, TRAIN, D, kvq_type_get(pairs[k].cal)->calib_rate, &fit, &err)) {
            snprintf(msg, sizeof msg, "fit: %s", err.msg);
            ok = false;
            break;
        }
        const double cal = nmse_of(pairs[k].cal, test, ROWS, D, &fit), ref = nmse_of(pairs[k].ref, test, ROWS, D, NULL);
        kvq_calib_rows_free(&fit);
        if (getenv("KVQ_TEST_VERBOSE"))
            fprintf(stderr, "%s %.5f vs %s %.5f\n", kvq_type_name(pairs[k].cal), cal, kvq_type_name(pairs[k].ref), ref);
        if (!(cal <= ref)) {
            snprintf(msg, sizeof msg, "%s NMSE %.5f > %s %.5f", kvq_type_name(pairs[k].cal), cal,
                     kvq_type_name(pairs[k].ref), ref);
            ok = false;
        }
    }
    /* outlier channels x10 (every 32nd): the fitted code gains >= 2x */
    for (int i = 0; i < TRAIN * D; i++) train[i] *= (i % D) % 32 == 5 ? 10.0f : 1.0f;
    for (int i = 0; i < ROWS * D; i++) test[i] *= (i % D) % 32 == 5 ? 10.0f : 1.0f;
    kvq_calib_rows fit;
    kvq_error err;
    double cal = INFINITY, ref = 0;
    if (ok && kvq_calib_fit_rows(train, TRAIN, D, 325, &fit, &err) == KVQ_OK) {
        cal = nmse_of(KVQ_TYPE_CAL325, test, ROWS, D, &fit);
        ref = nmse_of(KVQ_TYPE_TURBO3_TCQ, test, ROWS, D, NULL);
        kvq_calib_rows_free(&fit);
    }
    free(train);
    free(test);
    CHECK(ok, "%s", msg);
    CHECK(cal < 0.5 * ref, "outliers: cal325 %.5f, turbo3_tcq %.5f", cal, ref);
}
