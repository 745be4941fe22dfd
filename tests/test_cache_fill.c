/* test_cache_fill.c - the benchmarks' synthetic cache fill
 * (tools/cache_fill.c): the noise it writes and the order and extent of
 * its writes, against the same writes made by hand. */
#include "attn_ref.h"
#include "kvq.h"
#include "../tools/cache_fill.h"

#include <string.h>

enum { LAYERS = 3, HEADS_KV = 2, DIM = 64, CTX = 80, BATCH = 32, GQA = 2 };

static kvq_cache *make_cache(kvq_type t, int n_ctx) {
    kvq_cache_params p;
    attn_params(&p, HEADS_KV, DIM, DIM, n_ctx, t, t, KVQ_ROT_AUTO);
    p.n_layer = LAYERS;
    p.max_batch = BATCH;
    kvq_cache *c = NULL;
    kvq_error err = { 0 };
    if (kvq_cache_create(&p, &c, &err)) fprintf(stderr, "cache: %s\n", err.msg);
    return c;
}

/* Every layer's attention output at position pos for one query: equal
 * bits mean equal stored rows (for the positions the query reads). */
static bool outputs(kvq_cache *c, int pos, const float *q, float *out) {
    kvq_error err = { 0 };
    for (int l = 0; l < LAYERS; l++)
        if (kvq_cache_attend(c, l, pos, 1, HEADS_KV * GQA, q, 0.125f, out + (size_t)l * HEADS_KV * GQA * DIM, NULL,
                             &err) != KVQ_OK) {
            fprintf(stderr, "attend: %s\n", err.msg);
            return false;
        }
    return true;
}

TEST(cache_fill_noise_is_seeded_and_unit_gaussian) {
    enum { N = 100000 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    CHECK(a && b, "out of memory");
    cli_fill_noise(a, N, 7);
    cli_fill_noise(b, N, 7);
    const bool same = !memcmp(a, b, N * sizeof *a);
    cli_fill_noise(b, N, 8);
    const bool other = memcmp(a, b, N * sizeof *a) != 0;
    double s = 0, s2 = 0;
    float top = 0;
    for (int i = 0; i < N; i++) {
        s += a[i];
        s2 += (double)a[i] * a[i];
        top = fabsf(a[i]) > top ? fabsf(a[i]) : top;
    }
    free(a);
    free(b);
    const double mean = s / N, var = s2 / N - mean * mean;
    CHECK(same && other, "seed 7 twice: %s, seeds 7 and 8: %s", same ? "same" : "differ", other ? "differ" : "same");
    CHECK(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.02, "mean %g, variance %g", mean, var);
    CHECK(top <= 2.0f * 1.7320508f + 1e-5f && top > 3.0f, "largest |x| %g (sum of 4 uniforms: below 2 sqrt 3)", top);
}

/* 70 positions in batches of 32, the last alone, into every layer: the
 * same rows as the calls made by hand, and every layer holds 70. */
TEST(cache_fill_writes_every_layer_as_by_hand) {
    const kvq_type types[] = { KVQ_TYPE_F16, KVQ_TYPE_Q4_0, KVQ_TYPE_KVARN4 };
    const size_t row = (size_t)HEADS_KV * DIM, nq = (size_t)HEADS_KV * GQA * DIM, nout = LAYERS * nq;
    float k[BATCH * HEADS_KV * DIM], v[BATCH * HEADS_KV * DIM], q[HEADS_KV * GQA * DIM];
    cli_fill_noise(k, BATCH * row, 1);
    cli_fill_noise(v, BATCH * row, 2);
    cli_fill_noise(q, nq, 3);
    float *o1 = malloc(3 * nout * sizeof *o1), *o2 = o1 + nout, *o3 = o2 + nout;
    CHECK(o1, "out of memory");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        kvq_cache *a = make_cache(types[ti], CTX), *b = make_cache(types[ti], CTX), *d = make_cache(types[ti], CTX);
        kvq_error err = { 0 };
        bool ok = a && b && d && cli_fill_cache(a, LAYERS, 70, BATCH, k, v, true, NULL, &err) == KVQ_OK;
        /* by hand: 0-31, 32-63, 64-68, then 69 alone, each into every layer */
        const int starts[] = { 0, 32, 64, 69 }, counts[] = { 32, 32, 5, 1 };
        for (int s = 0; ok && s < 4; s++)
            for (int l = 0; ok && l < LAYERS; l++) {
                ok = kvq_cache_write(b, l, starts[s], counts[s], k, v, &err) == KVQ_OK;
                /* d: the same positions from other rows (v and k swapped) */
                ok = ok && kvq_cache_write(d, l, starts[s], counts[s], v, k, &err) == KVQ_OK;
            }
        bool stored = ok;
        for (int l = 0; ok && l < LAYERS; l++) stored &= kvq_cache_n_stored(a, l) == 70;
        ok = ok && outputs(a, 69, q, o1) && outputs(b, 69, q, o2) && outputs(d, 69, q, o3);
        const bool same = ok && !memcmp(o1, o2, nout * sizeof *o1), differs = ok && memcmp(o1, o3, nout * sizeof *o1);
        kvq_cache_free(a);
        kvq_cache_free(b);
        kvq_cache_free(d);
        if (!ok || !stored || !same || !differs) free(o1);
        CHECK(ok, "%s: %s", kvq_type_name(types[ti]), err.msg);
        CHECK(stored, "%s: a layer does not hold 70 positions", kvq_type_name(types[ti]));
        CHECK(same, "%s: the fill's outputs differ from the writes by hand", kvq_type_name(types[ti]));
        CHECK(differs, "%s: other rows give the same outputs: the comparison sees nothing", kvq_type_name(types[ti]));
    }
    free(o1);
}

TEST(cache_fill_stops_at_the_failing_write_and_refuses_batch_0) {
    float k[BATCH * HEADS_KV * DIM], v[BATCH * HEADS_KV * DIM];
    cli_fill_noise(k, sizeof k / sizeof k[0], 1);
    cli_fill_noise(v, sizeof v / sizeof v[0], 2);
    kvq_cache *c = make_cache(KVQ_TYPE_Q8_0, 40);
    CHECK(c, "cache");
    kvq_error err = { 0 };
    const kvq_status st = cli_fill_cache(c, LAYERS, 50, BATCH, k, v, false, NULL, &err);
    /* 0-31 fit every layer, 32-49 does not fit a 40-position cache */
    const int held = kvq_cache_n_stored(c, 0), last = kvq_cache_n_stored(c, LAYERS - 1);
    kvq_cache_free(c);
    kvq_cache *e = make_cache(KVQ_TYPE_Q8_0, 40);
    kvq_error err0 = { 0 };
    const kvq_status st0 = e ? cli_fill_cache(e, LAYERS, 10, 0, k, v, false, NULL, &err0) : KVQ_OK;
    const int held0 = e ? kvq_cache_n_stored(e, 0) : -1;
    kvq_cache_free(e);
    CHECK(st != KVQ_OK && err.msg[0], "50 positions into 40 accepted (status %d)", (int)st);
    CHECK(st0 == KVQ_ERR_ARG && err0.msg[0] && held0 == 0, "batch 0: status %d, %d positions written", (int)st0, held0);
    CHECK(held == 32 && last == 32, "after the failure layer 0 holds %d, the last %d (want 32)", held, last);
}
