/* test_cache_calib.c - calibrated cache types (src/cache_calib.c): the
 * transforms keep attention exact in real arithmetic, per-layer types mix
 * with tail and sink, prefill reads what decode reads, each missing piece
 * of a calibration is one clear error, and end to end (through the kvq
 * binary, on a shared model) a calibration from another text beats
 * TurboQuant's trellis at the same bits. */
#include "attn_ref.h"
#include "calib.h"

#include <unistd.h>

static kvq_status make_cache(kvq_cache_params *p, kvq_cache **c, char *msg, size_t cap) {
    kvq_error err = { 0, "" };
    kvq_status st = kvq_cache_create(p, c, &err);
    if (st) snprintf(msg, cap, "%s", err.msg);
    return st;
}

/* out = attention of queries pos..n_tok-1 of d over c (written in batches). */
static bool attend_all(kvq_cache *c, const attn_data *d, int batch, int pos, float *out) {
    kvq_error err;
    if (!attn_fill_upto(c, d, batch, pos)) return false;
    return kvq_cache_attend(c, 0, pos, d->n_tok - pos, d->n_head, d->q + (size_t)pos * d->n_head * d->hd_k,
                            1.0f / sqrtf((float)d->hd_k), out, NULL, &err) == KVQ_OK;
}

/* With an f32 tail covering the context every key is read from the exact
 * copy, which holds T (x - mean): the output must be the plain formula's,
 * so T^-T on the queries, the mean dropping out of the softmax and T^-1
 * plus the mean on the outputs are all right. */
TEST(cache_calib_exact_tail_is_the_plain_formula) {
    const int dims[2] = { 64, 80 };
    for (int k = 0; k < 2; k++) {
        const int hd = dims[k];
        attn_data d;
        CHECK(attn_data_make(&d, 60, 4, 2, hd, hd, 91 + (uint64_t)k), "alloc");
        kvq_cache_params p;
        attn_params(&p, 2, hd, hd, 60, KVQ_TYPE_CAL325, KVQ_TYPE_CAL250, KVQ_ROT_AUTO);
        p.tail_tokens = 60;
        p.tail_type = KVQ_TYPE_F32;
        kvq_cache *c = NULL;
        char msg[300] = "";
        const size_t len = (size_t)(60 - 20) * 4 * hd;
        float *out = malloc(len * sizeof *out), *ref = malloc(len * sizeof *ref);
        const bool ok = out && ref && make_cache(&p, &c, msg, sizeof msg) == KVQ_OK && attend_all(c, &d, 7, 20, out);
        if (ok) attn_ref_plain(&d, 20, 40, 1.0f / sqrtf((float)hd), ref);
        const double e = ok ? attn_rel_err(out, ref, len) : INFINITY;
        kvq_cache_free(c);
        free(out);
        free(ref);
        attn_data_free(&d);
        CHECK(e < 2e-5, "head_dim %d: rel err %.3g vs the plain formula %s", hd, e, msg);
    }
}

/* Layer 0 calibrated, layer 1 a block type, with tail and sink; both
 * against the reference over the cached values, and the calibrated layer
 * really quantised (not exact). */
TEST(cache_calib_per_layer_with_tail_and_sink) {
    attn_data d;
    CHECK(attn_data_make(&d, 80, 4, 2, 64, 64, 17), "alloc");
    kvq_cache_params p;
    attn_params(&p, 2, 64, 64, 80, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, KVQ_ROT_AUTO);
    const kvq_type lk[2] = { KVQ_TYPE_CAL300, KVQ_TYPE_Q4_0 }, lv[2] = { KVQ_TYPE_CAL425, KVQ_TYPE_Q8_0 };
    p.n_layer = 2;
    p.layer_type_k = lk;
    p.layer_type_v = lv;
    p.calib = attn_test_calib(2, 2, 64, 64);
    p.tail_tokens = 9;
    p.sink_tokens = 4;
    kvq_cache *c = NULL;
    char msg[300] = "";
    CHECK(make_cache(&p, &c, msg, sizeof msg) == KVQ_OK, "create: %s", msg);
    kvq_error err;
    const int pos = 50, n = 30;
    float *out = malloc(sizeof(float) * n * 4 * 64), *ref = malloc(sizeof(float) * n * 4 * 64);
    double worst = 0, quant = 0;
    bool ok = out && ref;
    for (int l = 0; ok && l < 2; l++) {
        for (int p0 = 0; ok && p0 < 80; p0 += p0 < pos ? 10 : 80) {
            const int m = p0 < pos ? 10 : 80 - pos;
            ok = kvq_cache_write(c, l, p0, m, d.k + (size_t)p0 * 2 * 64, d.v + (size_t)p0 * 2 * 64, &err) == KVQ_OK;
        }
        ok = ok && kvq_cache_attend(c, l, pos, n, 4, d.q + (size_t)pos * 4 * 64, 0.125f, out, NULL, &err) == KVQ_OK;
        /* the reference reads layer 0's copies; for layer 1 compare the
         * calibrated layer's outputs against the plain formula instead */
        if (ok && l == 0 && attn_ref_cache(c, &d, pos, n, 0.125f, ref)) worst = attn_rel_err(out, ref, (size_t)n * 4 * 64);
        if (ok && l == 0) {
            attn_ref_plain(&d, pos, n, 0.125f, ref);
            quant = attn_rel_err(out, ref, (size_t)n * 4 * 64);
        }
    }
    kvq_cache_free(c);
    free(out);
    free(ref);
    attn_data_free(&d);
    CHECK(ok, "write/attend failed: %s", err.msg);
    CHECK(worst < 1e-5, "calibrated layer vs the reference on cached values: %.3g", worst);
    CHECK(quant > 1e-3, "calibrated layer vs exact: %.3g (it must be quantised)", quant);
}

/* Prefill in one batch reads exactly what token-by-token decoding reads. */
TEST(cache_calib_prefill_equals_decode) {
    attn_data d;
    CHECK(attn_data_make(&d, 40, 2, 1, 64, 64, 23), "alloc");
    kvq_cache_params p;
    attn_params(&p, 1, 64, 64, 40, KVQ_TYPE_CAL225, KVQ_TYPE_CAL350, KVQ_ROT_AUTO);
    p.tail_tokens = 5;
    kvq_cache *a = NULL, *b = NULL;
    char msg[300] = "";
    CHECK(make_cache(&p, &a, msg, sizeof msg) == KVQ_OK && make_cache(&p, &b, msg, sizeof msg) == KVQ_OK, "%s", msg);
    float pre[40 * 2 * 64], dec[2 * 64];
    kvq_error err;
    bool ok = attend_all(a, &d, 40, 0, pre);
    double worst = 0;
    for (int t = 0; ok && t < 40; t++) {
        ok = kvq_cache_write(b, 0, t, 1, d.k + (size_t)t * 64, d.v + (size_t)t * 64, &err) == KVQ_OK &&
             kvq_cache_attend(b, 0, t, 1, 2, d.q + (size_t)t * 2 * 64, 0.125f, dec, NULL, &err) == KVQ_OK;
        for (int i = 0; ok && i < 2 * 64; i++) worst = fmax(worst, fabs(dec[i] - pre[t * 2 * 64 + i]));
    }
    kvq_cache_free(a);
    kvq_cache_free(b);
    attn_data_free(&d);
    CHECK(ok, "%s", err.msg);
    CHECK(worst < 1e-5, "prefill and decode differ by %.3g", worst);
}

TEST(cache_calib_refuses_what_is_missing) {
    kvq_cache_params p;
    attn_params(&p, 2, 64, 64, 32, KVQ_TYPE_CAL325, KVQ_TYPE_F16, KVQ_ROT_AUTO);
    kvq_cache *c = NULL;
    char msg[300] = "";
    p.calib = NULL;
    CHECK(make_cache(&p, &c, msg, sizeof msg) == KVQ_ERR_ARG && !c && strstr(msg, "needs a calibration"),
          "no calibration: %s", msg);
    p.calib = attn_test_calib(1, 2, 64, 32);               /* V heads of another size */
    CHECK(make_cache(&p, &c, msg, sizeof msg) == KVQ_ERR_ARG && !c && strstr(msg, "the calibration is for"),
          "wrong shape: %s", msg);
    /* a calibration that lacks the rate */
    const int rates[2] = { 225, 425 };
    kvq_calib *two;
    kvq_error err;
    CHECK(kvq_calib_alloc(&two, 1, 2, 64, 64, 2, rates, &err) == KVQ_OK, "%s", err.msg);
    p.calib = two;
    const kvq_status st = make_cache(&p, &c, msg, sizeof msg);
    kvq_calib_free(two);
    CHECK(st == KVQ_ERR_ARG && !c && strstr(msg, "3.25 bits per value") && strstr(msg, "2.25, 4.25"),
          "missing rate: %s", msg);
    /* sizes need no calibration */
    kvq_cache_bytes b;
    p.calib = NULL;
    CHECK(kvq_cache_plan_bytes(&p, &b, &err) == KVQ_OK && b.k == 32 * 2 * (size_t)kvq_calib_row_bytes(325, 64),
          "plan bytes without a calibration: %s", err.msg);
}

/* ------------------------------------------------------- end to end */

static double kld_of(const char *bin, const char *model, const char *base, const char *types, const char *cal) {
    char cmd[4096];
    static char out[16384];
    snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s %s %s%s -t 2 2>&1", bin, model, base, types, cal ? "--calib " : "",
             cal ? cal : "");
    if (test_run(cmd, out, sizeof out) != 0) return INFINITY;
    const char *m = strstr(out, "Mean    KLD:");
    return m ? atof(m + 12) : INFINITY;
}

TEST(cache_calib_end_to_end_beats_turbo) {
    const char *bin = test_kvq_bin();
    char model[1024], base[1024], text[1024], other[1024];
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(base, sizeof base, "golden/toy-h64.gpl3.c128.kld") ||
        !test_shared_path(text, sizeof text, "text/austen-northanger-40k.txt") ||
        !test_shared_path(other, sizeof other, "models/stories260K.gguf"))
        SKIP("../shared models/toy-h64.gguf, golden/toy-h64.gpl3.c128.kld or text/austen-northanger-40k.txt not found");
    char cal[64], cmd[4096];
    static char out[8192];
    snprintf(cal, sizeof cal, "/tmp/kvq_cache_calib_%d.cal", (int)getpid());
    /* calibrated on Austen, evaluated on the GPL golden base: disjoint texts */
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -f %s -o %s -c 128 --chunks %d -t 2 2>&1", bin, model, text, cal,
             test_sanitized() ? 4 : 16);
    int rc = test_run(cmd, out, sizeof out);
    const double turbo = rc ? 0 : kld_of(bin, model, base, "-ctk turbo3_tcq -ctv turbo3_tcq", NULL);
    const double mine = rc ? 0 : kld_of(bin, model, base, "-ctk cal325 -ctv cal325", cal);
    /* errors: no --calib, and a calibration of another model */
    snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s -ctk cal325 2>&1", bin, model, base);
    const int rc_none = test_run(cmd, out, sizeof out);
    const bool said_none = strstr(out, "needs a calibration") != NULL;
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 -ctk cal325 --calib %s 2>&1", bin, other, cal);
    const int rc_other = test_run(cmd, out, sizeof out);
    const bool said_other = strstr(out, "another model") != NULL;
    unlink(cal);
    CHECK(rc == 0, "calibrate exited %d: %s", rc, out);
    CHECK(mine < 0.5 * turbo, "cal325/cal325 mean KLD %.5f, turbo3_tcq/turbo3_tcq %.5f", mine, turbo);
    CHECK(rc_none == 1 && said_none, "cal325 without --calib: exit %d", rc_none);
    CHECK(rc_other == 1 && said_other, "another model's calibration: exit %d", rc_other);
}

/* A state saved from a calibrated cache loads back into a cache with the
 * same calibration, bit for bit, and is refused by one made with another
 * calibration of the same shape (its rows would decode wrong). */
TEST(cache_calib_state_needs_its_calibration) {
    attn_data d;
    CHECK(attn_data_make(&d, 40, 2, 1, 64, 64, 5), "alloc");
    kvq_cache_params p;
    attn_params(&p, 1, 64, 64, 40, KVQ_TYPE_CAL300, KVQ_TYPE_CAL300, KVQ_ROT_AUTO);
    const kvq_calib *same = p.calib;
    kvq_calib *other;
    kvq_error err = { 0, "" };
    CHECK(kvq_calib_alloc(&other, 1, 1, 64, 64, same->n_rates, same->rates, &err) == KVQ_OK, "%s", err.msg);
    for (int s = 0; s < 2; s++) {                 /* the same calibration with one mean changed */
        const kvq_calib_side *a = kvq_calib_side_at(same, 0, 0, s == 1);
        kvq_calib_side *b = kvq_calib_side_at(other, 0, 0, s == 1);
        memcpy(b->mean, a->mean, 64 * sizeof(float));
        memcpy(b->fwd, a->fwd, 64 * 64 * sizeof(float));
        memcpy(b->inv, a->inv, 64 * 64 * sizeof(float));
        memcpy(b->weight, a->weight, 64 * sizeof(float));
        memcpy(b->bits, a->bits, (size_t)same->n_rates * 64);
        b->mean[0] += 0.5f;
        kvq_calib_side_finish(b, s == 1);
    }
    char path[64], msg[300] = "";
    snprintf(path, sizeof path, "/tmp/kvq_calib_state_%d.kvqs", (int)getpid());
    kvq_cache *c = NULL, *back = NULL, *wrong = NULL;
    int32_t tokens[40];
    for (int i = 0; i < 40; i++) tokens[i] = i;
    const kvq_state_tag tag = { 0, tokens, 40 };
    bool ok = make_cache(&p, &c, msg, sizeof msg) == KVQ_OK && attn_fill(c, &d, 8) &&
              kvq_cache_save(c, path, &tag, &err) == KVQ_OK && make_cache(&p, &back, msg, sizeof msg) == KVQ_OK;
    int32_t *toks = NULL;
    int n = 0;
    const kvq_status st_back = ok ? kvq_cache_load(back, path, 0, &toks, &n, &err) : KVQ_ERR_ARG;
    free(toks);
    toks = NULL;
    float a_row[64], b_row[64];
    bool same_rows = st_back == KVQ_OK;
    for (int t = 0; same_rows && t < 40; t++)
        same_rows = kvq_cache_read_row(c, 0, false, KVQ_PART_BODY, 0, t, a_row, &err) == KVQ_OK &&
                    kvq_cache_read_row(back, 0, false, KVQ_PART_BODY, 0, t, b_row, &err) == KVQ_OK &&
                    !memcmp(a_row, b_row, sizeof a_row);
    p.calib = other;
    kvq_error err2 = { 0, "" };
    const kvq_status st_wrong = ok && make_cache(&p, &wrong, msg, sizeof msg) == KVQ_OK
                                    ? kvq_cache_load(wrong, path, 0, &toks, &n, &err2) : KVQ_OK;
    free(toks);
    kvq_cache_free(c);
    kvq_cache_free(back);
    kvq_cache_free(wrong);
    kvq_calib_free(other);
    attn_data_free(&d);
    unlink(path);
    CHECK(ok, "setup: %s %s", msg, err.msg);
    CHECK(st_back == KVQ_OK && same_rows, "round trip: %s", err.msg);
    CHECK(st_wrong != KVQ_OK && strstr(err2.msg, "calibration"), "another calibration accepted: %s", err2.msg);
}

/* The CLI tests' assets in ../shared: toy-h64, the evaluation text and
 * the calibration text (each buffer 1024 bytes); false if any is absent. */
static bool cli_assets(char *model, char *text, char *gpl) {
    return test_shared_path(model, 1024, "models/toy-h64.gguf") &&
           test_shared_path(text, 1024, "text/austen-northanger-40k.txt") && test_shared_path(gpl, 1024, "text/gpl3.txt");
}

/* kvq sweep --calib: the calibrated types join the table; their stored
 * runs carry the calibration's checksum, so another calibration runs
 * them again instead of reusing a result it did not produce. */
TEST(cache_calib_sweep_takes_the_calibration) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024], gpl[1024];
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    if (!cli_assets(model, text, gpl)) SKIP("../shared models/toy-h64.gguf or the texts not found");
    char dir[64], cal_a[96], cal_b[96], cmd[8192];
    static char out[16384];
    snprintf(dir, sizeof dir, "/tmp/kvq_calib_sweep_%d", (int)getpid());
    snprintf(cal_a, sizeof cal_a, "%s.a.cal", dir);
    snprintf(cal_b, sizeof cal_b, "%s.b.cal", dir);
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -f %s -c 64 --chunks 4 -o %s 2>&1 && %s calibrate -m %s -f %s -c 64 "
             "--chunks 4 --skip-chunks 4 -o %s 2>&1", bin, model, gpl, cal_a, bin, model, gpl, cal_b);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "calibrate: %s", out);
    const char *sweep = "%s sweep -m %s -f %s -c 64 --chunks 2 --types q4_0,cal325 --pairs none --tails 0 --rot on "
                        "--calib %s -o %s 2>&1";
    snprintf(cmd, sizeof cmd, sweep, bin, model, text, cal_a, dir);
    const int rc1 = test_run(cmd, out, sizeof out);
    char table[256];
    snprintf(table, sizeof table, "%s/table.md", dir);
    FILE *f = fopen(table, "r");
    static char md[16384];
    const size_t n_md = f ? fread(md, 1, sizeof md - 1, f) : 0;
    if (f) fclose(f);
    md[n_md] = 0;
    const bool listed = strstr(md, "| cal325/cal325 |") != NULL;
    snprintf(cmd, sizeof cmd, sweep, bin, model, text, cal_a, dir);
    const int rc2 = test_run(cmd, out, sizeof out);
    const bool reused = strstr(out, "(2 already done)") != NULL || strstr(out, "(3 already done)") != NULL;
    snprintf(cmd, sizeof cmd, sweep, bin, model, text, cal_b, dir);
    const int rc3 = test_run(cmd, out, sizeof out);
    const bool rerun = strstr(out, "(2 already done)") != NULL && !strstr(out, "(3 already done)");
    snprintf(cmd, sizeof cmd, "rm -rf %s %s %s", dir, cal_a, cal_b);
    test_run(cmd, out, sizeof out);
    CHECK(rc1 == 0 && listed, "first sweep: exit %d, cal325 in the table: %d", rc1, listed);
    CHECK(rc2 == 0 && reused, "second sweep with the same calibration reran everything");
    CHECK(rc3 == 0 && rerun, "a sweep with another calibration reused the calibrated run");
}

/* kvq plan --calib mixes calibrated types per layer within the budget
 * and prints flags that name the calibration. */
TEST(cache_calib_plan_mixes_calibrated_types) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024], gpl[1024];
    if (!bin) SKIP("KVQ_BIN not set (run through make test)");
    if (!cli_assets(model, text, gpl)) SKIP("../shared models/toy-h64.gguf or the texts not found");
    char cal[64], cmd[8192];
    static char out[16384];
    snprintf(cal, sizeof cal, "/tmp/kvq_calib_plan_%d.cal", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s calibrate -m %s -f %s -c 64 --chunks 4 -o %s 2>&1 && %s plan -m %s -f %s -c 64 "
             "--chunks 2 --budget 18%% --types cal425,cal325,cal250 --calib %s 2>&1", bin, model, gpl, cal, bin, model,
             text, cal);
    const int rc = test_run(cmd, out, sizeof out);
    unlink(cal);
    const char *flags = strstr(out, "flags: ");
    CHECK(rc == 0 && flags && strstr(flags, "--calib") && strstr(flags, "cal"), "exit %d: %s", rc, out);
}

/* The fused AVX2 reads against the scalar ones on the same cache: every
 * rate (runs of every kind, rows whose last coefficients fall in the
 * byte-wise tail), GQA 1..5 (more heads than one register pass), head
 * sizes 64 and 80. */
TEST(cache_calib_avx2_reads_equal_scalar) {
    if (!kvq_cpu_features()->avx2) SKIP("this CPU has no AVX2 (or KVQ_FORCE_SCALAR=1)");
    const kvq_type types[] = { KVQ_TYPE_CAL225, KVQ_TYPE_CAL250, KVQ_TYPE_CAL300, KVQ_TYPE_CAL325, KVQ_TYPE_CAL350,
                               KVQ_TYPE_CAL425 };
    const int dims[2] = { 64, 80 };
    double worst_s = 0, worst_a = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
        for (int di = 0; di < 2; di++) {
            const int hd = dims[di], n_tok = 37, G = 1 + (int)(ti % 5);
            attn_data d;
            CHECK(attn_data_make(&d, n_tok, 2 * G, 2, hd, hd, 300 + ti * 2 + (uint64_t)di), "alloc");
            kvq_cache_params p;
            attn_params(&p, 2, hd, hd, n_tok, types[ti], types[ti], KVQ_ROT_AUTO);
            kvq_cache *c = NULL;
            char msg[300] = "";
            CHECK(make_cache(&p, &c, msg, sizeof msg) == KVQ_OK && attn_fill(c, &d, 16), "%s", msg);
            enum { NK = 32 };
            float q[5 * 80], ws[5 * NK], as[5 * 80], aa[5 * 80];
            for (int i = 0; i < G * hd; i++) q[i] = d.q[i];
            for (int i = 0; i < G * NK; i++) ws[i] = (float)(0.5 + 0.5 * sin(0.7 * i)) * (i % 7 == 3 ? 0.0f : 1.0f);
            for (int h = 0; h < 2; h++)
                for (int k0 = 0; k0 < n_tok; k0 += NK) {
                    const int nk = KVQ_MIN(NK, n_tok - k0);
                    float sa[5 * NK], ss[5 * NK];
                    kvq_calib_score_scalar(&c->k[0], h, k0, nk, q, G, hd, 0.3f, ss, NK);
                    kvq_calib_score_avx2(&c->k[0], h, k0, nk, q, G, hd, 0.3f, sa, NK);
                    double mag = 0, e = 0;
                    for (int j = 0; j < G; j++)
                        for (int t = 0; t < nk; t++) {
                            mag = fmax(mag, fabs(ss[j * NK + t]));
                            e = fmax(e, fabs(sa[j * NK + t] - ss[j * NK + t]));
                        }
                    worst_s = fmax(worst_s, e / (mag + 1e-30));
                    for (int i = 0; i < G * hd; i++) as[i] = aa[i] = 0.25f;
                    kvq_calib_accumulate_scalar(&c->v[0], h, k0, nk, ws, G, NK, as, hd);
                    kvq_calib_accumulate_avx2(&c->v[0], h, k0, nk, ws, G, NK, aa, hd);
                    mag = 0, e = 0;
                    for (int i = 0; i < G * hd; i++) {
                        mag = fmax(mag, fabs(as[i]));
                        e = fmax(e, fabs(aa[i] - as[i]));
                    }
                    worst_a = fmax(worst_a, e / (mag + 1e-30));
                }
            kvq_cache_free(c);
            attn_data_free(&d);
        }
    CHECK(worst_s < 1e-5 && worst_a < 1e-5, "AVX2 vs scalar: scores %.3g, sums %.3g", worst_s, worst_a);
}
