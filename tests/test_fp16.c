/* test_fp16.c - IEEE half and bfloat16 conversions against a plain
 * double-precision reference: round to nearest, ties to even, overflow to
 * inf, NaN stays NaN, on every half value, every midpoint between
 * neighbouring halves (and the floats next to it), and random floats. */
#include "test.h"
#include "kvq.h"

#include <float.h>
#include <string.h>

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Round |f| to a binary format with `mant` stored mantissa bits, minimum
 * normal exponent emin, largest finite value maxv (overflow -> inf), in
 * double (exact: every float and every such value fits). */
static double round_reference(float f, int mant, int emin, double maxv) {
    if (isnan(f)) return NAN;
    const double a = fabs((double)f);
    if (isinf(f)) return (double)f;
    int e = a > 0 ? (int)floor(log2(a)) : emin;
    if (a > 0 && ldexp(1.0, e) > a) e--;                /* log2 rounding */
    if (a > 0 && ldexp(1.0, e + 1) <= a) e++;
    if (e < emin) e = emin;                             /* subnormal: fixed step */
    const double ulp = ldexp(1.0, e - mant);
    double r = nearbyint(a / ulp) * ulp;                /* default mode: ties to even */
    /* overflow: anything that rounds beyond the largest finite value */
    if (r > maxv) r = INFINITY;
    return f < 0 || (f == 0 && signbit(f)) ? -r : r;
}

static int same_value(float got, double want) {
    if (isnan(want)) return isnan(got);
    return (double)got == want && !signbit(got) == !signbit(want);
}

/* half: 10 mantissa bits, emin -14, max 65504 */
static int check_half(float f, char *msg, size_t cap) {
    const uint16_t h = kvq_fp32_to_fp16(f);
    const float got = kvq_fp16_to_fp32(h);
    const double want = round_reference(f, 10, -14, 65504.0);
    if (same_value(got, want)) return 1;
    snprintf(msg, cap, "fp16(%a = 0x%08x) -> 0x%04x = %a, want %a", (double)f, bits_of(f), h, (double)got, want);
    return 0;
}

/* bfloat16: 7 mantissa bits, emin -126, max = FLT_MAX rounded = 0x7f7f0000 */
static int check_bf16(float f, char *msg, size_t cap) {
    const uint16_t h = kvq_fp32_to_bf16(f);
    const float got = kvq_bf16_to_fp32(h);
    const double want = round_reference(f, 7, -126, (double)float_of(0x7f7f0000u));
    if (same_value(got, want)) return 1;
    snprintf(msg, cap, "bf16(%a = 0x%08x) -> 0x%04x = %a, want %a", (double)f, bits_of(f), h, (double)got, want);
    return 0;
}

TEST(fp16_decode_every_half) {
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const int e = (h >> 10) & 31, m = h & 1023;
        double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        if (h & 0x8000) want = -want;
        const float got = kvq_fp16_to_fp32((uint16_t)h);
        CHECK(isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want),
              "half 0x%04x -> %a, want %a", h, (double)got, want);
    }
}

/* Every half, the midpoints to its neighbours (the ties), and the floats
 * one ulp either side of each midpoint, both signs. */
TEST(fp16_encode_ties_and_edges) {
    char msg[256];
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double v = kvq_fp16_to_fp32((uint16_t)h);
        const double next = h + 1 < 0x7c00u ? kvq_fp16_to_fp32((uint16_t)(h + 1)) : 65536.0;
        const float mid = (float)((v + next) / 2);      /* exact: 12 bits */
        const float probes[] = { (float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY) };
        for (int p = 0; p < 4; p++) {
            CHECK(check_half(probes[p], msg, sizeof msg), "%s", msg);
            CHECK(check_half(-probes[p], msg, sizeof msg), "%s", msg);
        }
    }
    const float edges[] = { 65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, FLT_MAX, INFINITY, NAN,
                            0x1p-24f, 0x1p-25f, 0x3p-25f, 0x1.8p-24f, 0x1p-26f, 0x1p-14f, 0x1.ffcp-15f,
                            FLT_TRUE_MIN, FLT_MIN, 0.0f, 1.0f / 3.0f };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        CHECK(check_half(edges[i], msg, sizeof msg), "%s", msg);
        CHECK(check_half(-edges[i], msg, sizeof msg), "%s", msg);
    }
}

TEST(fp16_bf16_encode_random_floats) {
    const int n = test_sanitized() ? 200000 : 2000000;
    test_rng rng = { 2024, 0, 0 };
    char msg[256];
    for (int i = 0; i < n; i++) {
        const uint64_t r = test_rng_u64(&rng);
        float f = float_of((uint32_t)r);                          /* any bit pattern */
        CHECK(check_bf16(f, msg, sizeof msg), "%s", msg);
        /* for fp16, bias towards its range: exponent in [2^-30, 2^17) */
        const uint32_t e = (uint32_t)(97 + (r >> 32) % 48);
        f = float_of(((uint32_t)r & 0x807fffffu) | (e << 23));
        CHECK(check_half(f, msg, sizeof msg), "%s", msg);
    }
}

TEST(bf16_encode_ties_and_edges) {
    char msg[256];
    /* every bf16 value of exponents around 1 and in the subnormal range,
     * its midpoints and their neighbours */
    for (uint32_t h = 0; h < 0x7f80u; h += (h < 0x0200u || (h >= 0x3f00u && h < 0x4100u)) ? 1 : 97) {
        const float v = float_of(h << 16), mid = float_of((h << 16) | 0x8000u);
        const float probes[] = { v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY) };
        for (int p = 0; p < 4; p++) {
            CHECK(check_bf16(probes[p], msg, sizeof msg), "%s", msg);
            CHECK(check_bf16(-probes[p], msg, sizeof msg), "%s", msg);
        }
    }
    const float edges[] = { FLT_MAX, float_of(0x7f7f7fffu), float_of(0x7f7f8000u), INFINITY, NAN,
                            FLT_TRUE_MIN, FLT_MIN, 0.0f };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        CHECK(check_bf16(edges[i], msg, sizeof msg), "%s", msg);
        CHECK(check_bf16(-edges[i], msg, sizeof msg), "%s", msg);
    }
    /* NaN stays NaN even when the payload lives only in the low 16 bits */
    CHECK(isnan(kvq_bf16_to_fp32(kvq_fp32_to_bf16(float_of(0x7f800001u)))), "signalling NaN became inf");
}
