/* test_rotation.c - the Walsh-Hadamard rotation (src/format/hadamard.c), the
 * rule that picks its block sizes (src/format/rotation_rule.c) and the
 * quant-test command that shows what rotation buys. */
#include "test.h"
#include "kvq.h"
#include "hadamard.h"

#include <string.h>

static void fill_gauss(float *x, int n, test_rng *r) {
    for (int i = 0; i < n; i++) x[i] = (float)test_rng_gauss(r);
}

static double dot(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static double norm(const float *a, int n) { return sqrt(dot(a, a, n)); }

/* ||a - b|| / ||b||. */
static double rel_diff(const float *a, const float *b, int n) {
    double e = 0;
    for (int i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(e) / norm(b, n);
}

/* ------------------------------------------------------------ transform */

/* Column j of the normalised Sylvester Hadamard matrix is the transform of
 * the unit vector e_j: H[i][j] = (-1)^popcount(i & j) / sqrt(n). */
TEST(fwht_is_sylvester_hadamard) {
    for (int n = 1; n <= 512; n *= 2) {
        float *x = malloc((size_t)n * sizeof(float));
        CHECK(x, "out of memory");
        const int step = n <= 64 ? 1 : n / 16 + 1;   /* every column of small H, some of large */
        int bad_i = -1, bad_j = -1;
        for (int j = 0; j < n && bad_i < 0; j += step) {
            memset(x, 0, (size_t)n * sizeof(float));
            x[j] = 1.0f;
            kvq_fwht(x, n);
            for (int i = 0; i < n; i++) {
                const double want = (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) / sqrt((double)n);
                if (fabs(x[i] - want) > 1e-6) { bad_i = i; bad_j = j; break; }
            }
        }
        free(x);
        CHECK(bad_i < 0, "n=%d: H[%d][%d] wrong", n, bad_i, bad_j);
    }
}

/* H = H^-1: applying it twice gives the input back, for every size. */
TEST(fwht_twice_is_identity) {
    test_rng r = { 11, 0, 0 };
    float x[KVQ_FWHT_MAX], y[KVQ_FWHT_MAX];
    for (int n = 8; n <= KVQ_FWHT_MAX; n *= 2) {
        fill_gauss(x, n, &r);
        memcpy(y, x, sizeof(float) * (size_t)n);
        kvq_fwht(y, n);
        CHECK(rel_diff(y, x, n) > 0.1, "n=%d: the transform left the vector (nearly) unchanged", n);
        kvq_fwht(y, n);
        const double e = rel_diff(y, x, n);
        CHECK(e < 1e-6, "n=%d: H(H x) differs from x by %.3g (relative)", n, e);
    }
}

/* Orthogonal: norms are preserved. */
TEST(fwht_preserves_norm) {
    test_rng r = { 12, 0, 0 };
    float x[512];
    for (int n = 8; n <= 512; n *= 2)
        for (int rep = 0; rep < 8; rep++) {
            fill_gauss(x, n, &r);
            const double before = norm(x, n);
            kvq_fwht(x, n);
            const double after = norm(x, n);
            CHECK(fabs(after - before) <= 1e-6 * before, "n=%d: norm %.9g -> %.9g", n, before, after);
        }
}

/* q.k = (Rq).(Rk) for R = H, H D (signs) and block-diagonal versions of
 * both, relative to |q||k| (a dot product near zero has no meaningful
 * relative error of its own); the inverse gives the row back. */
TEST(rotation_preserves_dot_products) {
    static const struct { int n, block; } shapes[] = {
        { 8, 8 }, { 64, 64 }, { 128, 128 }, { 128, 32 }, { 80, 16 }, { 96, 32 }, { 512, 512 }, { 576, 64 },
    };
    test_rng r = { 13, 0, 0 };
    int8_t signs[512];
    float q[576], k[576], q0[576], k0[576];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int n = shapes[s].n, block = shapes[s].block;
        kvq_random_signs(signs, block, KVQ_ROT_SEED_QK);
        for (int with_signs = 0; with_signs < 2; with_signs++)
            for (int rep = 0; rep < 16; rep++) {
                const int8_t *d = with_signs ? signs : NULL;
                fill_gauss(q0, n, &r);
                fill_gauss(k0, n, &r);
                q0[rep % n] *= 10.0f;   /* an outlier channel, as in real K */
                k0[rep % n] *= 10.0f;
                memcpy(q, q0, sizeof(float) * (size_t)n);
                memcpy(k, k0, sizeof(float) * (size_t)n);
                kvq_rotate_row(q, n, block, d);
                kvq_rotate_row(k, n, block, d);
                const double scale = norm(q0, n) * norm(k0, n);
                const double e = fabs(dot(q, k, n) - dot(q0, k0, n)) / scale;
                CHECK(e < 1e-6, "n=%d block=%d signs=%d: dot changed by %.3g relative", n, block, with_signs, e);
                CHECK(rel_diff(q, q0, n) > 0.1, "n=%d block=%d: rotation did nothing", n, block);
                kvq_rotate_row_inverse(q, n, block, d);
                const double back = rel_diff(q, q0, n);
                CHECK(back < 1e-6, "n=%d block=%d signs=%d: inverse off by %.3g", n, block, with_signs, back);
            }
    }
}

/* With signs the rotation is a different one (H D != H), and the forward
 * transform is not its own inverse any more: the inverse must undo D too. */
TEST(rotation_signs_change_the_rotation) {
    test_rng r = { 14, 0, 0 };
    int8_t signs[128];
    float a[128], b[128], x[128];
    kvq_random_signs(signs, 128, KVQ_ROT_SEED_QK);
    fill_gauss(x, 128, &r);
    memcpy(a, x, sizeof a);
    memcpy(b, x, sizeof b);
    kvq_rotate_row(a, 128, 128, signs);
    kvq_rotate_row(b, 128, 128, NULL);
    CHECK(rel_diff(a, b, 128) > 0.1, "signs made no difference");
    kvq_rotate_row(a, 128, 128, signs);   /* H D H D x is not x */
    CHECK(rel_diff(a, x, 128) > 0.1, "signed rotation applied twice gave x back");
}

/* The block-diagonal rotation is the full transform of each block alone. */
TEST(rotation_is_block_diagonal) {
    test_rng r = { 15, 0, 0 };
    float x[96], y[96];
    fill_gauss(x, 96, &r);
    memcpy(y, x, sizeof y);
    kvq_rotate_row(x, 96, 32, NULL);
    for (int b = 0; b < 96; b += 32) kvq_fwht_scalar(y + b, 32);
    CHECK(memcmp(x, y, sizeof x) == 0, "block-diagonal rotation differs from per-block transforms");
}

/* Sizes outside the contract leave the data untouched. */
TEST(rotation_rejects_bad_sizes) {
    float x[24], y[24];
    for (int i = 0; i < 24; i++) x[i] = y[i] = (float)i;
    kvq_fwht(x, 12);                        /* not a power of two */
    kvq_fwht(x, 0);
    kvq_rotate_row(x, 24, 16, NULL);        /* block does not divide n */
    kvq_rotate_row(x, 24, 12, NULL);        /* block not a power of two */
    kvq_rotate_row_inverse(x, 24, 0, NULL);
    kvq_rotate_row(NULL, 24, 8, NULL);
    CHECK(memcmp(x, y, sizeof x) == 0, "an invalid size modified the row");
    kvq_rotate_row(x, 24, 8, NULL);         /* valid: must change it */
    CHECK(memcmp(x, y, sizeof x) != 0, "a valid rotation did nothing");
}

/* The CPU itself, not kvq's choice: the comparison runs even when
 * KVQ_FORCE_SCALAR=1 keeps the library on the scalar path. */
static int cpu_has_avx2(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

/* The AVX2 transform performs the scalar one's additions in the same
 * order, so the two must agree bit for bit. */
TEST(fwht_simd_equals_scalar) {
    if (!cpu_has_avx2()) SKIP("no AVX2 on this CPU");
    test_rng r = { 16, 0, 0 };
    float a[KVQ_FWHT_MAX], b[KVQ_FWHT_MAX];
    for (int n = 8; n <= KVQ_FWHT_MAX; n *= 2)
        for (int rep = 0; rep < 4; rep++) {
            fill_gauss(a, n, &r);
            memcpy(b, a, sizeof(float) * (size_t)n);
            kvq_fwht_scalar(a, n);
            kvq_fwht_avx2(b, n);
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (memcmp(&a[i], &b[i], sizeof(float)) != 0) bad = i;
            CHECK(bad < 0, "n=%d: value %d: scalar %.9g, avx2 %.9g", n, bad, bad >= 0 ? a[bad] : 0.0f,
                  bad >= 0 ? b[bad] : 0.0f);
        }
}

/* x <- post H pre x with the diagonals as sign-bit masks: the scalar
 * form against negating, transforming and negating by hand, and the AVX2
 * one (registers at n = 64 and 128) against the scalar bit for bit, with
 * either diagonal absent. */
TEST(fwht_signed_equals_flip_transform_flip) {
    test_rng r = { 17, 0, 0 };
    static float a[KVQ_FWHT_MAX], b[KVQ_FWHT_MAX], c[KVQ_FWHT_MAX];
    static uint32_t pre[KVQ_FWHT_MAX], post[KVQ_FWHT_MAX];
    int8_t s1[KVQ_FWHT_MAX], s2[KVQ_FWHT_MAX];
    kvq_random_signs(s1, KVQ_FWHT_MAX, 5);
    kvq_random_signs(s2, KVQ_FWHT_MAX, 6);
    for (int i = 0; i < KVQ_FWHT_MAX; i++) {
        pre[i] = s1[i] < 0 ? 0x80000000u : 0u;
        post[i] = s2[i] < 0 ? 0x80000000u : 0u;
    }
    for (int n = 8; n <= KVQ_FWHT_MAX; n *= 2)
        for (int form = 0; form < 4; form++) {
            const uint32_t *p = form & 1 ? pre : NULL, *q = form & 2 ? post : NULL;
            fill_gauss(a, n, &r);
            a[n / 3] = -0.0f;
            memcpy(b, a, sizeof(float) * (size_t)n);
            memcpy(c, a, sizeof(float) * (size_t)n);
            for (int i = 0; i < n; i++) a[i] = p && s1[i] < 0 ? -a[i] : a[i];
            kvq_fwht_scalar(a, n);
            for (int i = 0; i < n; i++) a[i] = q && s2[i] < 0 ? -a[i] : a[i];
            kvq_fwht_signed_scalar(b, b, n, p, q);
            CHECK(!memcmp(a, b, sizeof(float) * (size_t)n), "n=%d form %d: scalar signed transform differs", n, form);
            if (!cpu_has_avx2()) continue;
            memcpy(b, c, sizeof(float) * (size_t)n);   /* the input again: out of place, then in place */
            static float d[KVQ_FWHT_MAX];
            kvq_fwht_signed_avx2(b, d, n, p, q);
            kvq_fwht_signed_avx2(c, c, n, p, q);
            CHECK(!memcmp(a, c, sizeof(float) * (size_t)n) && !memcmp(a, d, sizeof(float) * (size_t)n),
                  "n=%d form %d: AVX2 signed transform differs", n, form);
        }
}

/* ---------------------------------------------------------------- signs */

TEST(random_signs_are_deterministic_and_balanced) {
    int8_t a[4096], b[4096], c[4096];
    kvq_random_signs(a, 4096, 42);
    kvq_random_signs(b, 4096, 42);
    kvq_random_signs(c, 4096, 43);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, different signs");
    CHECK(memcmp(a, c, sizeof a) != 0, "different seeds, same signs");
    int plus = 0;
    for (int i = 0; i < 4096; i++) {
        CHECK(a[i] == 1 || a[i] == -1, "sign %d is %d", i, a[i]);
        plus += a[i] == 1;
    }
    CHECK(plus > 1900 && plus < 2196, "%d of 4096 signs are +1 (not balanced)", plus);
    kvq_random_signs(b, 64, 42);
    CHECK(memcmp(a, b, 64) == 0, "a shorter diagonal is not a prefix of a longer one");
    kvq_random_signs(b, 1, 0);
    /* the first output of splitmix64 from state 0 is 0xe220a8397b1dcdaf: top bit set */
    CHECK(b[0] == -1, "seed convention changed: first sign of seed 0 is %d", b[0]);
}

/* ----------------------------------------------------------------- rule */

TEST(rot_block_for) {
    static const int cases[][3] = { /* n, min_block, want */
        { 128, 8, 128 }, { 128, 64, 128 }, { 80, 64, 0 }, { 80, 8, 16 }, { 96, 8, 32 },
        { 1024, 8, 512 }, { 576, 64, 64 }, { 12, 8, 0 }, { 12, 1, 4 }, { 0, 8, 0 }, { -64, 8, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int got = kvq_rot_block_for(cases[i][0], cases[i][1]);
        CHECK(got == cases[i][2], "block_for(%d, %d) = %d, want %d", cases[i][0], cases[i][1], got, cases[i][2]);
    }
}

enum { A = KVQ_ROT_AUTO, ON = KVQ_ROT_ON, OFF = KVQ_ROT_OFF };
enum { F16 = KVQ_TYPE_F16, Q8 = KVQ_TYPE_Q8_0, Q4 = KVQ_TYPE_Q4_0 };

typedef struct rule_case {
    int dk, dv, tk, tv;
    int mode, mode_k, mode_v;        /* command line */
    int env, env_k, env_v, mla;      /* environment, MLA */
    int want_k, want_v;
    const char *in_reason;           /* substring the reason must hold, or NULL */
} rule_case;

static const rule_case g_rule_cases[] = {
    /* AUTO, block types: K = largest power of two dividing head_dim, V = 64 or smaller */
    {   8,   8, Q4, Q4, A, A, A, 0, 0, 0, 0,   8,  8, "K: hadamard 8 (auto" },
    {  16,  16, Q4, Q4, A, A, A, 0, 0, 0, 0,  16, 16, NULL },
    {  64,  64, Q4, Q4, A, A, A, 0, 0, 0, 0,  64, 64, NULL },
    {  80,  80, Q4, Q4, A, A, A, 0, 0, 0, 0,  16, 16, "head_dim 80, small-head rule" },
    {  96,  96, Q8, Q8, A, A, A, 0, 0, 0, 0,  32, 32, NULL },
    { 128, 128, Q4, Q4, A, A, A, 0, 0, 0, 0, 128, 64, "K: hadamard 128 (auto: q4_0 is block-quantised, head_dim 128)" },
    { 128, 128, Q8, Q8, A, A, A, 0, 0, 0, 0, 128, 64, NULL },
    { 256, 256, Q8, Q8, A, A, A, 0, 0, 0, 0, 256, 64, NULL },
    { 512, 512, Q4, Q4, A, A, A, 0, 0, 0, 0, 512, 64, NULL },
    { 1024, 1024, Q4, Q4, A, A, A, 0, 0, 0, 0, 512, 64, NULL },     /* capped at 512 */
    { 192, 128, Q4, Q4, A, A, A, 0, 0, 0, 0,  64, 64, NULL },      /* K and V heads differ */
    {  12,  12, Q4, Q4, A, A, A, 0, 0, 0, 0,   0,  0, "no power-of-two block >= 8 divides head_dim 12" },
    /* AUTO, plain types: not rotated; mixed pairs decide per side */
    {   8,   8, F16, F16, A, A, A, 0, 0, 0, 0, 0, 0, "f16 is not block-quantised" },
    { 128, 128, F16, F16, A, A, A, 0, 0, 0, 0, 0, 0, NULL },
    { 128, 128, F16, Q4, A, A, A, 0, 0, 0, 0, 0, 64, NULL },
    { 128, 128, Q8, F16, A, A, A, 0, 0, 0, 0, 128, 0, NULL },
    /* ON forces any type, OFF disables any type */
    { 128, 128, F16, F16, ON, A, A, 0, 0, 0, 0, 128, 64, "--attn-rot on" },
    {  80,  80, F16, F16, ON, A, A, 0, 0, 0, 0,  16, 16, NULL },
    {  12,  12, F16, F16, ON, A, A, 0, 0, 0, 0,   0,  0, NULL },        /* no block exists */
    { 128, 128, Q4, Q4, OFF, A, A, 0, 0, 0, 0, 0, 0, "K: off (--attn-rot off); V: off (--attn-rot off)" },
    /* per-side flag beats the flag for both */
    { 128, 128, F16, F16, OFF, ON, A, 0, 0, 0, 0, 128, 0, "--attn-rot-k on" },
    { 128, 128, Q4, Q4, ON, A, OFF, 0, 0, 0, 0, 128, 0, "V: off (--attn-rot-v off)" },
    { 128, 128, Q4, Q4, A, OFF, A, 0, 0, 0, 0, 0, 64, NULL },
    /* environment: off per side or for both */
    { 128, 128, Q4, Q4, A, A, A, 1, 0, 0, 0, 0, 0, "LLAMA_ATTN_ROT_DISABLE=1" },
    { 128, 128, Q4, Q4, A, A, A, 0, 1, 0, 0, 0, 64, "K: off (LLAMA_ATTN_ROT_K_DISABLE=1)" },
    { 128, 128, Q4, Q4, A, A, A, 0, 0, 1, 0, 128, 0, "V: off (LLAMA_ATTN_ROT_V_DISABLE=1)" },
    /* command line beats environment */
    { 128, 128, Q4, Q4, ON, A, A, 1, 0, 0, 0, 128, 64, NULL },
    { 128, 128, Q4, Q4, ON, A, A, 0, 1, 1, 0, 128, 64, NULL },
    { 128, 128, F16, F16, A, ON, A, 0, 1, 0, 0, 128, 0, NULL },
    { 128, 128, Q4, Q4, A, A, ON, 1, 0, 1, 0, 0, 64, NULL },
    /* MLA: never, whatever the switches say */
    { 576, 512, Q4, Q4, A, A, A, 0, 0, 0, 1, 0, 0, "MLA" },
    { 576, 512, Q4, Q4, ON, ON, ON, 0, 0, 0, 1, 0, 0, NULL },
};

TEST(rot_rule_table) {
    for (size_t i = 0; i < sizeof g_rule_cases / sizeof g_rule_cases[0]; i++) {
        const rule_case *c = &g_rule_cases[i];
        const kvq_rot_request req = {
            .head_dim_k = c->dk, .head_dim_v = c->dv, .type_k = (kvq_type)c->tk, .type_v = (kvq_type)c->tv,
            .mode = (kvq_rot_mode)c->mode, .mode_k = (kvq_rot_mode)c->mode_k, .mode_v = (kvq_rot_mode)c->mode_v,
            .env_disable = c->env, .env_disable_k = c->env_k, .env_disable_v = c->env_v, .is_mla = c->mla,
        };
        const kvq_rot_plan p = kvq_rot_choose(&req);
        CHECK(p.block_k == c->want_k && p.block_v == c->want_v,
              "case %zu (dk %d dv %d %s/%s): blocks K %d V %d, want K %d V %d (%s)", i, c->dk, c->dv,
              kvq_type_name(req.type_k), kvq_type_name(req.type_v), p.block_k, p.block_v, c->want_k,
              c->want_v, p.reason);
        CHECK(strncmp(p.reason, "K: ", 3) == 0 && strstr(p.reason, "; V: "), "case %zu: reason '%s'", i, p.reason);
        CHECK(!c->in_reason || strstr(p.reason, c->in_reason), "case %zu: reason '%s' lacks '%s'", i, p.reason,
              c->in_reason);
    }
}

TEST(rot_choose_null_request) {
    const kvq_rot_plan p = kvq_rot_choose(NULL);
    CHECK(p.block_k == 0 && p.block_v == 0 && p.reason[0], "NULL request must mean no rotation, with a reason");
}

/* Restores one environment variable when the test is done with it. */
typedef struct saved_env { const char *name; char value[64]; bool was_set; } saved_env;
static void env_save(saved_env *s, const char *name) {
    const char *v = getenv(name);
    s->name = name;
    s->was_set = v != NULL;
    snprintf(s->value, sizeof s->value, "%s", v ? v : "");
}
static void env_restore(const saved_env *s) {
    if (s->was_set) setenv(s->name, s->value, 1);
    else unsetenv(s->name);
}

TEST(rot_request_from_env) {
    static const char *names[3] = { "LLAMA_ATTN_ROT_DISABLE", "LLAMA_ATTN_ROT_K_DISABLE", "LLAMA_ATTN_ROT_V_DISABLE" };
    static const struct { const char *v[3]; bool want[3]; } cases[] = {
        { { NULL, NULL, NULL }, { 0, 0, 0 } },
        { { "1", NULL, NULL }, { 1, 0, 0 } },
        { { NULL, "true", NULL }, { 0, 1, 0 } },
        { { NULL, NULL, "TRUE" }, { 0, 0, 1 } },
        { { "0", "false", "" }, { 0, 0, 0 } },
        { { "1", "1", "1" }, { 1, 1, 1 } },
    };
    saved_env saved[3];
    for (int k = 0; k < 3; k++) env_save(&saved[k], names[k]);
    int bad = -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0] && bad < 0; i++) {
        for (int k = 0; k < 3; k++) {
            if (cases[i].v[k]) setenv(names[k], cases[i].v[k], 1);
            else unsetenv(names[k]);
        }
        kvq_rot_request req = { .env_disable = !cases[i].want[0], .env_disable_k = !cases[i].want[1],
                                .env_disable_v = !cases[i].want[2] };  /* the opposite: must be overwritten */
        kvq_rot_request_from_env(&req);
        if (req.env_disable != cases[i].want[0] || req.env_disable_k != cases[i].want[1] ||
            req.env_disable_v != cases[i].want[2])
            bad = (int)i;
    }
    for (int k = 0; k < 3; k++) env_restore(&saved[k]);
    CHECK(bad < 0, "environment case %d read wrongly", bad);
}

/* --------------------------------------------- what rotation is good for */

/* NMSE of rows round-tripped through type t, optionally rotated first. */
static double round_trip_nmse(kvq_type t, const float *x, int rows, int dim, int block) {
    float work[128], back[128];
    uint8_t packed[4 * 128 + 64];
    double err = 0, ref = 0;
    for (int r = 0; r < rows; r++) {
        const float *row = x + r * dim;
        memcpy(work, row, sizeof(float) * (size_t)dim);
        if (block) kvq_rotate_row(work, dim, block, NULL);
        kvq_quantize_row(t, work, packed, dim);
        kvq_dequantize_row(t, packed, back, dim);
        if (block) kvq_rotate_row_inverse(back, dim, block, NULL);
        for (int i = 0; i < dim; i++) {
            err += ((double)back[i] - row[i]) * ((double)back[i] - row[i]);
            ref += (double)row[i] * row[i];
        }
    }
    return err / ref;
}

/* Rows with a few fixed outlier channels (x10): rotating before the
 * quantiser spreads them over the block and lowers the error, for every
 * block type, for a head of 128 (block 128) and of 80 (block 16). */
TEST(rotation_lowers_error_on_outlier_rows) {
    enum { ROWS = 64, MAXD = 128 };
    static const int dims[] = { 128, 80 };
    test_rng r = { 17, 0, 0 };
    float *x = malloc(sizeof(float) * ROWS * MAXD);
    CHECK(x, "out of memory");
    int tested = 0, bad_dim = 0;
    const char *bad_type = NULL;
    double bad_plain = 0, bad_rotated = 0;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0] && !bad_type; d++) {
        const int dim = dims[d], block = kvq_rot_block_for(dim, 8);
        fill_gauss(x, ROWS * dim, &r);
        for (int row = 0; row < ROWS; row++)
            for (int c = 3; c < dim; c += 37) x[row * dim + c] *= 10.0f;
        for (int ty = 0; ty < KVQ_TYPE_COUNT && !bad_type; ty++) {
            const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
            if (!tr || !tr->is_block_quant || !tr->quantize) continue;
            const double plain = round_trip_nmse((kvq_type)ty, x, ROWS, dim, 0);
            const double rotated = round_trip_nmse((kvq_type)ty, x, ROWS, dim, block);
            if (!(rotated < plain)) { bad_type = tr->name; bad_dim = dim; bad_plain = plain; bad_rotated = rotated; }
            tested++;
        }
    }
    free(x);
    CHECK(!bad_type, "%s, dim %d: NMSE %.4g with rotation, %.4g without", bad_type, bad_dim, bad_rotated, bad_plain);
    CHECK(tested >= 2 * 12, "only %d (type, dim) pairs tested", tested);
}

/* ------------------------------------------------------------------ CLI */

static int count_table_rows(const char *out, const char *type_name) {
    char needle[32];
    snprintf(needle, sizeof needle, "\n| %-6s |", type_name);
    int n = 0;
    for (const char *p = out; (p = strstr(p, needle)); p++) n++;
    return n;
}

TEST(cli_quant_test) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    static char out[1 << 16];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s quant-test --dim 128 --rows 16", bin);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "'%s' exited %d: %s", cmd, rc, out);
    for (int ty = 0; ty < KVQ_TYPE_COUNT; ty++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)ty);
        if (!tr || !tr->is_cache_type || tr->layout != KVQ_LAYOUT_ROWS) continue;
        CHECK(count_table_rows(out, tr->name) == 1, "no single table row for %s in:\n%s", tr->name, out);
    }
    CHECK(count_table_rows(out, "q4_k") == 0, "a weight-only type appears in the table");

    snprintf(cmd, sizeof cmd, "%s quant-test --type q4_0 --dim 80 --rows 8 --outliers --json", bin);
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "\"type\": \"q4_0\"") && strstr(out, "\"rot_block\": 16") &&
          !strstr(out, "\"type\": \"q8_0\""), "'%s' exited %d: %s", cmd, rc, out);

    /* rows shorter than a block, or not a multiple of one, are padded */
    static const char *odd[] = { "--dim 1", "--dim 33 --seed 7", "--dim 12 --json" };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s quant-test --rows 2 %s", bin, odd[i]);
        rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 0 && strstr(out, "q4_0"), "'%s' exited %d: %s", cmd, rc, out);
    }

    static const char *bad[] = { "--bogus", "--dim 0", "--dim abc", "--rows", "--type q4_k", "--seed -1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s quant-test %s", bin, bad[i]);
        rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 1, "'%s' exited %d, want 1: %s", cmd, rc, out);
        CHECK(strstr(out, "error:") && !strchr(strchr(out, '\n') + 1, '\n'),
              "'%s' must print one error line, got: %s", cmd, out);
    }
}
