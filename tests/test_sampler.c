/* Tests of the sampler: greedy, top-k, top-p, determinism, and that the
 * draws follow softmax(logits / temp). */
#include "test.h"
#include "sampler.h"

static kvq_sampler *make(float temp, int top_k, float top_p, uint64_t seed) {
    kvq_sampler_params p = {temp, top_k, top_p, seed};
    kvq_sampler *s = NULL;
    kvq_error err;
    return kvq_sampler_create(&p, &s, &err) == KVQ_OK ? s : NULL;
}

static void random_logits(test_rng *r, float *l, int n) {
    for (int i = 0; i < n; i++) l[i] = (float)(3.0 * test_rng_gauss(r));
}

static int argmax_ref(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

TEST(sampler_greedy_is_argmax) {
    kvq_sampler *s = make(0.0f, 40, 0.9f, 1);
    CHECK(s, "create failed");
    test_rng r = {7, 0, 0};
    float l[100];
    for (int it = 0; it < 200; it++) {
        random_logits(&r, l, 100);
        int want = argmax_ref(l, 100), got = kvq_sample(s, l, 100);
        if (got != want) { kvq_sampler_free(s); CHECK(0, "iteration %d: %d, want %d", it, got, want); }
    }
    float ties[5] = {1, 3, 2, 3, -1};                  /* ties: the lowest id */
    int tie = kvq_sample(s, ties, 5);
    float nan_first[3] = {NAN, 0.5f, 0.25f};           /* NaN is never chosen */
    int nn = kvq_sample(s, nan_first, 3);
    int bad = kvq_sample(s, l, 0), null = kvq_sample(s, NULL, 3);
    kvq_sampler_free(s);
    CHECK(tie == 1, "tie chose %d", tie);
    CHECK(nn == 1, "NaN logits: chose %d", nn);
    CHECK(bad == -1 && null == -1, "bad input gave %d, %d", bad, null);
}

TEST(sampler_top_k_1_is_greedy) {
    kvq_sampler *s = make(1.5f, 1, 1.0f, 3);
    CHECK(s, "create failed");
    test_rng r = {11, 0, 0};
    float l[50];
    int mismatches = 0;
    for (int it = 0; it < 200; it++) {
        random_logits(&r, l, 50);
        mismatches += kvq_sample(s, l, 50) != argmax_ref(l, 50);
    }
    kvq_sampler_free(s);
    CHECK(mismatches == 0, "%d draws differ from the argmax", mismatches);
}

TEST(sampler_seed_is_deterministic) {
    kvq_sampler *a = make(1.0f, 0, 1.0f, 1234), *b = make(1.0f, 0, 1.0f, 1234), *c = make(1.0f, 0, 1.0f, 1235);
    CHECK(a && b && c, "create failed");
    float l[64];
    for (int i = 0; i < 64; i++) l[i] = 0.0f;          /* uniform: 64 equally likely */
    int same_ab = 1, same_ac = 1, first[100];
    for (int i = 0; i < 100; i++) {
        int x = kvq_sample(a, l, 64), y = kvq_sample(b, l, 64), z = kvq_sample(c, l, 64);
        first[i] = x;
        same_ab &= x == y;
        same_ac &= x == z;
    }
    kvq_sampler_reseed(a, 1234);                       /* reseeding replays the sequence */
    int replay = 1;
    for (int i = 0; i < 100; i++) replay &= kvq_sample(a, l, 64) == first[i];
    kvq_sampler_free(a);
    kvq_sampler_free(b);
    kvq_sampler_free(c);
    CHECK(same_ab, "equal seeds gave different sequences");
    CHECK(!same_ac, "different seeds gave the same 100 draws");
    CHECK(replay, "reseeding did not replay the sequence");
}

/* Pearson's chi-square of observed counts against probabilities. */
static double chi_square(const int *count, const double *p, int n, int draws) {
    double x2 = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * draws;
        x2 += (count[i] - e) * (count[i] - e) / e;
    }
    return x2;
}

static void softmax_ref(const float *l, int n, double temp, double *p) {
    double max = l[0], sum = 0;
    for (int i = 1; i < n; i++) max = l[i] > max ? l[i] : max;
    for (int i = 0; i < n; i++) sum += p[i] = exp((l[i] - max) / temp);
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* 8 categories (7 degrees of freedom): chi-square above 35 has
 * probability < 1e-5 for a correct sampler, and a wrong temperature or an
 * off-by-one in the cumulative walk gives values in the hundreds. */
TEST(sampler_frequencies_follow_softmax) {
    const float l[8] = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, -1.0f, 0.25f, 1.5f};
    const double temps[2] = {1.0, 0.7};
    int draws = test_sanitized() ? 40000 : 200000;
    for (int k = 0; k < 2; k++) {
        kvq_sampler *s = make((float)temps[k], 0, 1.0f, 99 + (uint64_t)k);
        CHECK(s, "create failed");
        int count[8] = {0};
        for (int i = 0; i < draws; i++) {
            int id = kvq_sample(s, l, 8);
            if (id >= 0 && id < 8) count[id]++;
        }
        kvq_sampler_free(s);
        double p[8];
        softmax_ref(l, 8, temps[k], p);
        double x2 = chi_square(count, p, 8, draws);
        CHECK(x2 < 35.0, "temp %.1f: chi-square %.1f over 8 categories (7 dof)", temps[k], x2);
    }
}

TEST(sampler_top_p_keeps_the_nucleus) {
    /* probabilities 0.5 0.3 0.15 0.05 (as log-probabilities), shuffled ids */
    const float l[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    kvq_sampler *s = make(1.0f, 0, 0.7f, 5);
    CHECK(s, "create failed");
    int count[4] = {0}, draws = 20000;
    for (int i = 0; i < draws; i++) {
        int id = kvq_sample(s, l, 4);
        if (id >= 0 && id < 4) count[id]++;
    }
    kvq_sampler_free(s);
    /* 0.5 < 0.7 <= 0.8: the nucleus is {1, 3}, renormalised to 0.625 / 0.375 */
    CHECK(count[0] == 0 && count[2] == 0, "tokens outside the nucleus drawn: %d, %d", count[0], count[2]);
    const double p[2] = {0.625, 0.375};
    const int c[2] = {count[1], count[3]};
    double x2 = chi_square(c, p, 2, draws);
    CHECK(x2 < 20.0, "nucleus frequencies %d / %d: chi-square %.1f (1 dof)", count[1], count[3], x2);
}

TEST(sampler_top_k_keeps_the_best_k) {
    test_rng r = {21, 0, 0};
    float l[300];
    random_logits(&r, l, 300);
    /* the 3 best ids, found by brute force */
    int best[3] = {-1, -1, -1};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 300; i++) {
            bool taken = i == best[0] || i == best[1];
            if (!taken && (best[k] < 0 || l[i] > l[best[k]])) best[k] = i;
        }
    kvq_sampler *s = make(5.0f, 3, 1.0f, 8);            /* hot: the rest would often win */
    CHECK(s, "create failed");
    int count[3] = {0}, outside = 0;
    for (int i = 0; i < 3000; i++) {
        int id = kvq_sample(s, l, 300);
        if (id == best[0]) count[0]++;
        else if (id == best[1]) count[1]++;
        else if (id == best[2]) count[2]++;
        else outside++;
    }
    kvq_sampler_free(s);
    CHECK(outside == 0, "%d draws outside the top 3", outside);
    CHECK(count[0] > 0 && count[1] > 0 && count[2] > 0, "top-3 counts %d %d %d", count[0], count[1], count[2]);
}

TEST(sampler_rejects_nan_params) {
    kvq_sampler_params p;
    kvq_sampler_params_default(&p);
    CHECK(p.temp > 0 && p.top_k == 40 && p.top_p < 1, "defaults %g %d %g", p.temp, p.top_k, p.top_p);
    p.temp = NAN;
    kvq_sampler *s = (kvq_sampler *)&p;
    kvq_error err;
    CHECK(kvq_sampler_create(&p, &s, &err) == KVQ_ERR_ARG && s == NULL, "NaN temperature accepted");
}
