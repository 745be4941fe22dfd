/* test_kld_stats.c - the KLD base format and the statistics on synthetic
 * logits (no ../shared needed): encode/compare against exact formulas,
 * a write/read round trip, percentiles and standard errors. */
#include "test.h"
#include "kld.h"
#include "stats.h"

#include <string.h>
#include <unistd.h>

enum { NV = 37 };   /* odd: exercises the record's padding value */

static void random_logits(test_rng *r, float *l, double spread) {
    for (int i = 0; i < NV; i++) l[i] = (float)(spread * test_rng_gauss(r));
}

/* KL(base||test) directly in double: base log-probs decoded from the
 * record (log p = min + scale * q; values at the -16 floor left out, as
 * llama.cpp does), test log-probs from its logits. */
static double exact_kl(const uint16_t *rec, const float *lq) {
    float scale, min_lp;
    uint32_t u0 = (uint32_t)rec[0] | (uint32_t)rec[1] << 16, u1 = (uint32_t)rec[2] | (uint32_t)rec[3] << 16;
    memcpy(&scale, &u0, 4);
    memcpy(&min_lp, &u1, 4);
    double mq = -INFINITY, sq = 0;
    for (int i = 0; i < NV; i++) mq = fmax(mq, lq[i]);
    for (int i = 0; i < NV; i++) sq += exp(lq[i] - mq);
    double kl = 0;
    for (int i = 0; i < NV; i++) {
        double a = (double)min_lp + (double)scale * rec[4 + i], b = lq[i] - mq - log(sq);
        if (a > -16) kl += exp(a) * (a - b);
    }
    return kl;
}

/* 16-bit log-probs over a 16-nat range: one step is 16/65535. */
#define LOGPROB_STEP (16.0 / 65535.0)

TEST(kld_compare_matches_exact_formula) {
    test_rng r = { 42, 0, 0 };
    uint16_t rec[4 + 2 * ((NV + 1) / 2)];
    CHECK(kvq_kld_record_len(NV) == sizeof rec / sizeof rec[0], "record length %zu", kvq_kld_record_len(NV));
    for (int trial = 0; trial < 50; trial++) {
        float base[NV], test[NV];
        random_logits(&r, base, 2.0);
        for (int i = 0; i < NV; i++) test[i] = base[i] + (float)(0.1 * test_rng_gauss(&r));
        kvq_kld_encode(base, NV, rec);
        const int next = trial % NV;
        kvq_kld_token same = kvq_kld_compare(base, NV, rec, next);
        kvq_kld_token diff = kvq_kld_compare(test, NV, rec, next);
        /* each stored log-prob is off by at most half a step */
        CHECK(fabs(same.kld) < LOGPROB_STEP, "KL(p||p) = %g", same.kld);
        CHECK(same.same_top, "argmax changed by encoding");
        CHECK(fabs(same.nll - same.nll_base) < 2e-4, "nll %g vs base %g", same.nll, same.nll_base);
        CHECK(fabs(same.nll - kvq_nll(base, NV, next)) < 1e-9, "nll differs from kvq_nll");
        const double want = exact_kl(rec, test);
        CHECK(fabs(diff.kld - want) < 1e-5 * want + 1e-8, "KL %.9g, exact %.9g", diff.kld, want);
        CHECK(diff.kld > 0, "KL of different distributions must be positive");
    }
}

TEST(kld_base_file_round_trip) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvq_test_base_%d.kld", (int)getpid());
    enum { NCTX = 8, NCHUNK = 3 };
    int32_t toks[NCTX * NCHUNK];
    for (int i = 0; i < NCTX * NCHUNK; i++) toks[i] = i % NV;
    const int n_pos = NCHUNK * kvq_kld_scored_per_chunk(NCTX);
    CHECK(n_pos == NCHUNK * 3, "scored positions per chunk of 8 must be 3 (4..6), got %d", n_pos);
    float logits[NCHUNK * 3][NV];
    test_rng r = { 7, 0, 0 };
    kvq_error err = { 0 };
    kvq_kld_writer *w = NULL;
    CHECK(kvq_kld_writer_open(path, NCTX, NV, NCHUNK, toks, &w, &err) == KVQ_OK, "%s", err.msg);
    for (int p = 0; p < n_pos; p++) {
        random_logits(&r, logits[p], 3.0);
        CHECK(kvq_kld_writer_add(w, logits[p], &err) == KVQ_OK, "%s", err.msg);
    }
    CHECK(kvq_kld_writer_close(w, &err) == KVQ_OK, "%s", err.msg);
    kvq_kld_base *b = NULL;
    kvq_status st = kvq_kld_base_read(path, &b, &err);
    CHECK(st == KVQ_OK, "%s", err.msg);
    bool ok = b->n_ctx == NCTX && b->n_vocab == NV && b->n_chunk == NCHUNK && b->n_pos == (size_t)n_pos &&
              !memcmp(b->tokens, toks, sizeof toks);
    double worst = 0;
    for (int p = 0; ok && p < n_pos; p++) {
        kvq_kld_token tk = kvq_kld_compare(logits[p], NV, kvq_kld_base_record(b, (size_t)p), p % NV);
        worst = fmax(worst, fabs(tk.kld));
    }
    kvq_kld_base_free(b);
    /* a short file must be rejected */
    FILE *f = fopen(path, "r+b");
    bool truncated = f && ftruncate(fileno(f), 100) == 0;
    if (f) fclose(f);
    kvq_kld_base *b2 = NULL;
    kvq_status st2 = kvq_kld_base_read(path, &b2, &err);
    remove(path);
    CHECK(ok, "header or tokens differ after the round trip");
    CHECK(worst < LOGPROB_STEP, "KL against its own stored row %g", worst);
    CHECK(truncated, "could not truncate the test file");
    CHECK(st2 == KVQ_ERR_FORMAT && !b2, "truncated base accepted");
}

/* A llama.cpp base in memory: header, tokens, then records encoded from
 * random logits; its byte length. */
enum { MEM_CTX = 8, MEM_CHUNK = 2, MEM_POS = MEM_CHUNK * 3 };
static size_t llama_base_bytes(uint8_t *buf, size_t cap, uint64_t seed) {
    const size_t rec_len = kvq_kld_record_len(NV), need = 20 + 4 * MEM_CTX * MEM_CHUNK + 2 * rec_len * MEM_POS;
    if (need > cap) return 0;
    memcpy(buf, "_logits_", 8);
    const uint32_t hdr[3] = { MEM_CTX, NV, MEM_CHUNK };
    uint8_t *p = buf + 8;
    for (int i = 0; i < 3; i++, p += 4)
        for (int b = 0; b < 4; b++) p[b] = (uint8_t)(hdr[i] >> 8 * b);
    for (int i = 0; i < MEM_CTX * MEM_CHUNK; i++, p += 4)
        for (int b = 0; b < 4; b++) p[b] = (uint8_t)((uint32_t)(i % NV) >> 8 * b);
    test_rng r = { seed, 0, 0 };
    uint16_t rec[4 + NV + 1];
    for (int pos = 0; pos < MEM_POS; pos++) {
        float l[NV];
        random_logits(&r, l, 3.0);
        kvq_kld_encode(l, NV, rec);
        for (size_t i = 0; i < rec_len; i++, p += 2) { p[0] = (uint8_t)rec[i]; p[1] = (uint8_t)(rec[i] >> 8); }
    }
    return need;
}

/* A record's scale and minimum log-prob are floats an encoder wrote: NaN,
 * inf, a negative or oversized scale, or a top log-prob above 0 is a
 * corrupt file (it was a NaN or negative KLD), named by record. */
TEST(kld_base_refuses_impossible_records) {
    static uint8_t buf[4096];
    const size_t len = llama_base_bytes(buf, sizeof buf, 3);
    CHECK(len > 0, "buffer too small");
    kvq_kld_base *b = NULL;
    kvq_error err = { 0 };
    CHECK(kvq_kld_base_parse(buf, len, "mem", &b, &err) == KVQ_OK, "the valid base: %s", err.msg);
    kvq_kld_base_free(b);
    const size_t rec4 = 20 + 4 * MEM_CTX * MEM_CHUNK + 2 * kvq_kld_record_len(NV) * 4;   /* record 4 = chunk 1 */
    const struct { size_t at; float v; } cases[] = {
        { 0, NAN }, { 0, INFINITY }, { 0, -1e-4f }, { 0, 1.0f },   /* scale */
        { 4, NAN }, { 4, -INFINITY }, { 4, 0.5f },                 /* min log-prob */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        static uint8_t bad[4096];
        memcpy(bad, buf, len);
        memcpy(bad + rec4 + cases[k].at, &cases[k].v, 4);   /* little-endian host, as the file */
        b = NULL;
        kvq_status st = kvq_kld_base_parse(bad, len, "mem", &b, &err);
        kvq_kld_base_free(b);
        CHECK(st == KVQ_ERR_FORMAT && !b && strstr(err.msg, "record 4 (chunk 1)"), "case %zu: status %d '%s'", k,
              (int)st, err.msg);
    }
}

TEST(stats_percentiles_and_errors) {
    const double v[5] = { 1, 2, 3, 4, 10 };
    CHECK(kvq_percentile_sorted(v, 5, 0.5) == 3, "median");
    CHECK(fabs(kvq_percentile_sorted(v, 5, 0.9) - 7.6) < 1e-12, "90%% = 4 + 0.6*6, got %g", kvq_percentile_sorted(v, 5, 0.9));
    CHECK(kvq_percentile_sorted(v, 5, 1.0) == 10 && kvq_percentile_sorted(v, 5, 0.0) == 1, "ends");
    double m, se;
    kvq_mean_se(v, 5, &m, &se);
    /* population variance 10, se = sqrt(10 / 4) */
    CHECK(fabs(m - 4) < 1e-12 && fabs(se - sqrt(2.5)) < 1e-12, "mean %g se %g", m, se);
    double nll[4] = { 1, 1, 1, 1 }, ppl, pse;
    kvq_ppl_from_nll(nll, 4, &ppl, &pse);
    CHECK(fabs(ppl - exp(1.0)) < 1e-12 && pse == 0, "PPL of constant NLL 1 is e, got %g ± %g", ppl, pse);

    kvq_tokstats s;
    kvq_tokstats_init(&s);
    kvq_error err = { 0 };
    for (int i = 0; i < 2000; i++) {
        kvq_kld_token tk = { .kld = i * 1e-3, .nll = 2.0 + (i % 3), .nll_base = 2.0 + (i % 3), .dp = 0, .same_top = i % 4 != 0 };
        CHECK(kvq_tokstats_add(&s, &tk, &err) == KVQ_OK, "%s", err.msg);
    }
    kvq_kld_summary sum;
    kvq_status st = kvq_kld_summarize(&s, &sum, &err);
    kvq_tokstats_free(&s);
    CHECK(st == KVQ_OK, "%s", err.msg);
    CHECK(fabs(sum.mean_kld - 0.9995) < 1e-9 && fabs(sum.median_kld - 0.9995) < 1e-9, "mean %g median %g", sum.mean_kld, sum.median_kld);
    CHECK(fabs(sum.max_kld - 1.999) < 1e-12 && fabs(sum.p_kld[7] - 0.999 * 1999e-3) < 1e-9, "max %g p99.9 %g", sum.max_kld, sum.p_kld[7]);
    CHECK(fabs(sum.same_top - 0.75) < 1e-12, "same top %g", sum.same_top);
    CHECK(fabs(sum.ppl_q / sum.ppl_base - 1) < 1e-12 && fabs(sum.ln_ratio) < 1e-12, "identical NLLs must give ratio 1");
    kvq_tokstats_init(&s);
    CHECK(kvq_kld_summarize(&s, &sum, &err) == KVQ_ERR_ARG, "an empty run must be an error");
}
