/* test_cache_edit.c - truncating and shifting a filled cache
 * (src/cache/cache_edit.c): after kvq_cache_truncate(n) and new writes, attention
 * equals a cache written with the edited sequence, bit for bit, for row,
 * tile and TurboQuant sides with tail, sink and rollback rows; truncating
 * deeper than the rollback horizon is refused; after kvq_cache_shift the
 * attention matches a cache written with the shifted, re-RoPEd keys:
 * to float rounding for exact rows, and for quantised types within a
 * bound of the fresh cache's own quantisation error. */
#include "attn_ref.h"

#include <string.h>

enum { HEADS_KV = 2, GQA = 2, HD = 128 };

static const kvq_cache_rope k_rope = { 10000.0f, 1.0f, true };

/* RoPE of one head's row at position pos, in double (NEOX pairs). */
static void rope_row(float *x, int d, int pos) {
    for (int i = 0; i < d / 2; i++) {
        const double th = pos * pow(10000.0, -2.0 * i / d), c = cos(th), s = sin(th);
        const double a = x[i], b = x[i + d / 2];
        x[i] = (float)(a * c - b * s);
        x[i + d / 2] = (float)(a * s + b * c);
    }
}

/* d's K rows with RoPE applied at position pos_of(t) for token t. */
static float *roped_keys(const attn_data *d, const int *pos_of) {
    float *k = malloc((size_t)d->n_tok * d->n_head_kv * d->hd_k * sizeof *k);
    if (!k) return NULL;
    memcpy(k, d->k, (size_t)d->n_tok * d->n_head_kv * d->hd_k * sizeof *k);
    for (int t = 0; t < d->n_tok; t++)
        for (int h = 0; h < d->n_head_kv; h++) rope_row(k + ((size_t)t * d->n_head_kv + h) * d->hd_k, d->hd_k, pos_of[t]);
    return k;
}

static kvq_cache *make(kvq_type tk, kvq_type tv, int n_ctx, int tail, int sink, int rollback) {
    kvq_cache_params p;
    attn_params(&p, HEADS_KV, HD, HD, n_ctx, tk, tv, KVQ_ROT_AUTO);
    p.max_batch = 128;
    p.tail_tokens = tail;
    p.sink_tokens = sink;
    p.rollback_tokens = rollback;
    p.tail_type = KVQ_TYPE_F16;
    kvq_cache *c = NULL;
    kvq_error err = { 0, "" };
    if (kvq_cache_create(&p, &c, &err) != KVQ_OK) fprintf(stderr, "create: %s\n", err.msg);
    return c;
}

/* Write rows [p0, p1) of (k, v) in batches of 64. */
static bool write_rows(kvq_cache *c, const float *k, const float *v, int p0, int p1) {
    for (int p = p0; p < p1; p += 64) {
        const int n = KVQ_MIN(64, p1 - p);
        const size_t off = (size_t)p * HEADS_KV * HD;
        if (kvq_cache_write(c, 0, p, n, k + off, v + off, NULL) != KVQ_OK) return false;
    }
    return true;
}

/* Attention of queries q0..q0+n-1 (the last write must hold them). */
static bool attend(kvq_cache *c, const float *q, int q0, int n, float *out) {
    kvq_error err = { 0, "" };
    if (kvq_cache_attend(c, 0, q0, n, HEADS_KV * GQA, q + (size_t)q0 * HEADS_KV * GQA * HD, 1.0f / sqrtf((float)HD),
                         out, NULL, &err) == KVQ_OK)
        return true;
    fprintf(stderr, "attend: %s\n", err.msg);
    return false;
}

static const struct { kvq_type k, v; int tail, sink, rollback; } k_families[] = {
    { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, 16, 4, 80 },            /* rows: tail, sink, rollback */
    { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3, 0, 0, 128 },        /* tiles: reopening a tile */
    { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_Q4_0, 8, 0, 80 },       /* the format's own rotation */
    { KVQ_TYPE_CAL325, KVQ_TYPE_CAL250, 8, 2, 80 },         /* a calibration's transforms per head */
    { KVQ_TYPE_F32, KVQ_TYPE_F16, 0, 0, 0 },                /* exact: nothing to keep */
};

/* Write 300 tokens of a, truncate to 230 (inside tile 1, completed at
 * 255), write 70 tokens of b: the same bytes of attention as a cache
 * written with a[0..230) + b[230..300). */
TEST(cache_truncate_equals_fresh_cache) {
    const int n = 300, cut = 230;
    attn_data a, b;
    CHECK(attn_data_make(&a, n, HEADS_KV * GQA, HEADS_KV, HD, HD, 5) &&
          attn_data_make(&b, n, HEADS_KV * GQA, HEADS_KV, HD, HD, 6), "alloc");
    const size_t row = (size_t)HEADS_KV * HD;
    for (size_t i = 0; i < (size_t)cut * row; i++) { b.k[i] = a.k[i]; b.v[i] = a.v[i]; }   /* b = a[0..cut) + new */
    const size_t out_len = (size_t)(n - cut) * HEADS_KV * GQA * HD;
    float *o1 = malloc(out_len * sizeof *o1), *o2 = malloc(out_len * sizeof *o2);
    CHECK(o1 && o2, "alloc");
    for (size_t f = 0; f < KVQ_ARRAY_LEN(k_families); f++) {
        kvq_cache *edited = make(k_families[f].k, k_families[f].v, 512, k_families[f].tail, k_families[f].sink,
                                 k_families[f].rollback);
        kvq_cache *fresh = make(k_families[f].k, k_families[f].v, 512, k_families[f].tail, k_families[f].sink,
                                k_families[f].rollback);
        CHECK(edited && fresh, "family %zu: create", f);
        kvq_error err = { 0, "" };
        bool ok = write_rows(edited, a.k, a.v, 0, n) && kvq_cache_truncate(edited, cut, &err) == KVQ_OK;
        CHECK(ok, "family %zu: write/truncate: %s", f, err.msg);
        ok = kvq_cache_write(edited, 0, cut, n - cut, b.k + cut * row, b.v + cut * row, &err) == KVQ_OK &&
             attend(edited, b.q, cut, n - cut, o1);
        ok = ok && write_rows(fresh, b.k, b.v, 0, cut) &&
             kvq_cache_write(fresh, 0, cut, n - cut, b.k + cut * row, b.v + cut * row, &err) == KVQ_OK &&
             attend(fresh, b.q, cut, n - cut, o2);
        CHECK(ok, "family %zu: rewrite/attend: %s", f, err.msg);
        CHECK(!memcmp(o1, o2, out_len * sizeof *o1), "family %zu (%s/%s): truncated cache differs from a fresh one",
              f, kvq_type_name(k_families[f].k), kvq_type_name(k_families[f].v));
        kvq_cache_free(edited);
        kvq_cache_free(fresh);
    }
    free(o1);
    free(o2);
    attn_data_free(&a);
    attn_data_free(&b);
}

/* The ring holds the tail plus rollback_tokens rows: truncating further
 * back than that would read the new tail from the body, so it is refused
 * (and changes nothing); truncating past what is stored is refused too. */
TEST(cache_truncate_beyond_rollback_refused) {
    attn_data a;
    CHECK(attn_data_make(&a, 200, HEADS_KV * GQA, HEADS_KV, HD, HD, 9), "alloc");
    kvq_cache *c = make(KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, 256, 16, 0, 20);
    CHECK(c && write_rows(c, a.k, a.v, 0, 200), "create/fill");
    kvq_error err = { 0, "" };
    const kvq_status deep = kvq_cache_truncate(c, 150, &err);       /* needs exact rows from 134; ring from 164 */
    const bool named = strstr(err.msg, "rollback") != NULL;
    const kvq_status past = kvq_cache_truncate(c, 201, NULL);
    const kvq_status ok = kvq_cache_truncate(c, 180, &err);         /* needs from 164: held */
    const kvq_status zero = kvq_cache_truncate(c, 0, &err);
    kvq_cache_free(c);
    kvq_cache *plain = make(KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, 256, 0, 0, 0);   /* nothing exact: any depth */
    const bool plain_ok = plain && write_rows(plain, a.k, a.v, 0, 200) && kvq_cache_truncate(plain, 3, NULL) == KVQ_OK;
    kvq_cache_free(plain);
    attn_data_free(&a);
    CHECK(deep == KVQ_ERR_ARG && named, "deep truncation: status %d '%s'", deep, err.msg);
    CHECK(past == KVQ_ERR_ARG, "truncating past the stored positions accepted");
    CHECK(ok == KVQ_OK && zero == KVQ_OK, "truncation within the horizon refused: %s", err.msg);
    CHECK(plain_ok, "a cache without exact rows refused a truncation");
}

/* Shift: 600 tokens with RoPE at their positions, drop 60 after the first
 * 130 (inside KVarN's tile 1, past its exact first tile), against a cache written directly with the kept tokens RoPEd at
 * their new positions.  Both are attended with the same queries (RoPEd at
 * the new positions too).  f32: equal to float rounding; quantised
 * families: the shifted cache's squared error against the plain formula
 * is below 3x the fresh cache's (a moved key is rounded twice: about 2x;
 * the last query reads most keys quantised in both, KVarN's tiles 1-3). */
TEST(cache_shift_equals_rewritten_cache) {
    const int n = 600, keep = 130, drop = 60, m = n - drop;
    attn_data d, s;
    CHECK(attn_data_make(&d, n, HEADS_KV * GQA, HEADS_KV, HD, HD, 12), "alloc");
    CHECK(attn_data_make(&s, m, HEADS_KV * GQA, HEADS_KV, HD, HD, 13), "alloc");
    int pos_d[600], pos_s[600];
    for (int t = 0; t < n; t++) pos_d[t] = t;
    for (int t = 0; t < m; t++) pos_s[t] = t;
    const size_t row = (size_t)HEADS_KV * HD;
    for (int t = 0; t < m; t++) {            /* s: the kept tokens' raw rows */
        const int src = t < keep ? t : t + drop;
        memcpy(s.k + t * row, d.k + src * row, row * sizeof(float));
        memcpy(s.v + t * row, d.v + src * row, row * sizeof(float));
    }
    float *kd = roped_keys(&d, pos_d), *ks = roped_keys(&s, pos_s);
    attn_data qs = s;                        /* queries: s's, RoPEd at the new positions */
    float *q = malloc((size_t)m * HEADS_KV * GQA * HD * sizeof *q);
    CHECK(kd && ks && q, "alloc");
    memcpy(q, s.q, (size_t)m * HEADS_KV * GQA * HD * sizeof *q);
    for (int t = 0; t < m; t++)
        for (int h = 0; h < HEADS_KV * GQA; h++) rope_row(q + ((size_t)t * HEADS_KV * GQA + h) * HD, HD, t);
    qs.k = ks;
    qs.q = q;
    const int q0 = m - 40;                   /* the last 40 positions, written again as one batch below */
    const size_t out_len = (size_t)(m - q0) * HEADS_KV * GQA * HD;
    float *o_shift = malloc(out_len * sizeof(float)), *o_fresh = malloc(out_len * sizeof(float));
    float *o_plain = malloc(out_len * sizeof(float));
    CHECK(o_shift && o_fresh && o_plain, "alloc");
    attn_ref_plain(&qs, q0, m - q0, 1.0f / sqrtf((float)HD), o_plain);
    for (size_t f = 0; f < KVQ_ARRAY_LEN(k_families); f++) {
        const int sink = KVQ_MIN(k_families[f].sink, keep);
        kvq_cache *a = make(k_families[f].k, k_families[f].v, 640, k_families[f].tail, sink, 0);
        kvq_cache *b = make(k_families[f].k, k_families[f].v, 640, k_families[f].tail, sink, 0);
        CHECK(a && b, "family %zu: create", f);
        kvq_error err = { 0, "" };
        /* a: the original sequence, shifted, then its last 40 rows truncated and
         * written again so the queries can be attended as one batch */
        bool ok = write_rows(a, kd, d.v, 0, n) && kvq_cache_shift(a, drop, keep, &k_rope, &err) == KVQ_OK;
        CHECK(ok, "family %zu (%s/%s): shift: %s", f, kvq_type_name(k_families[f].k), kvq_type_name(k_families[f].v),
              err.msg);
        CHECK(a->n_stored[0] == m, "family %zu: %d positions after the shift, want %d", f, a->n_stored[0], m);
        /* attention of the last shifted position alone, and of a fresh cache */
        ok = write_rows(b, ks, s.v, 0, m);
        CHECK(ok, "family %zu: fresh fill", f);
        float *one_a = o_shift, *one_b = o_fresh;
        kvq_error e1 = { 0, "" }, e2 = { 0, "" };
        const kvq_status sa = kvq_cache_attend(a, 0, m - 1, 1, HEADS_KV * GQA, q + (size_t)(m - 1) * HEADS_KV * GQA * HD,
                                               1.0f / sqrtf((float)HD), one_a, NULL, &e1);
        const kvq_status sb = kvq_cache_attend(b, 0, m - 1, 1, HEADS_KV * GQA, q + (size_t)(m - 1) * HEADS_KV * GQA * HD,
                                               1.0f / sqrtf((float)HD), one_b, NULL, &e2);
        CHECK(sa == KVQ_OK && sb == KVQ_OK, "family %zu: attend after shift: %s / %s", f, e1.msg, e2.msg);
        const size_t one = (size_t)HEADS_KV * GQA * HD;
        const float *plain = o_plain + (size_t)(m - 1 - q0) * one;
        const double e_shift = attn_sq_err(one_a, plain, one), e_fresh = attn_sq_err(one_b, plain, one);
        const double e_pair = attn_rel_err(one_a, one_b, one);
        fprintf(stderr, "  shift %s/%s: squared error vs the formula %.3g, fresh cache %.3g (ratio %.2f)\n",
                kvq_type_name(k_families[f].k), kvq_type_name(k_families[f].v), e_shift, e_fresh,
                e_fresh > 0 ? e_shift / e_fresh : 0.0);
        if (k_families[f].k == KVQ_TYPE_F32)
            CHECK(e_pair < 1e-4, "f32 shift differs from the rewritten cache: rel err %.3g", e_pair);
        else   /* a moved key is rounded twice: about twice the squared error */
            CHECK(e_shift < 3.0 * e_fresh, "family %zu (%s/%s): shifted squared error %.3g vs fresh %.3g", f,
                  kvq_type_name(k_families[f].k), kvq_type_name(k_families[f].v), e_shift, e_fresh);
        kvq_cache_free(a);
        kvq_cache_free(b);
    }
    free(o_shift);
    free(o_fresh);
    free(o_plain);
    free(kd);
    free(ks);
    free(q);
    attn_data_free(&d);
    attn_data_free(&s);
}

/* Bad shifts: nothing to drop, past the end, cutting into the sink. */
TEST(cache_shift_rejects_bad_calls) {
    attn_data a;
    CHECK(attn_data_make(&a, 100, HEADS_KV * GQA, HEADS_KV, HD, HD, 3), "alloc");
    kvq_cache *c = make(KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, 128, 8, 4, 0);
    CHECK(c && write_rows(c, a.k, a.v, 0, 100), "create/fill");
    kvq_error err = { 0, "" };
    const kvq_status none = kvq_cache_shift(c, 0, 10, &k_rope, NULL);
    const kvq_status past = kvq_cache_shift(c, 95, 10, &k_rope, NULL);
    const kvq_status sink = kvq_cache_shift(c, 10, 2, &k_rope, &err);
    const bool named = strstr(err.msg, "sink") != NULL;
    const kvq_status null_rope = kvq_cache_shift(c, 10, 10, NULL, NULL);
    const int still = c->n_stored[0];
    kvq_cache_free(c);
    attn_data_free(&a);
    CHECK(none == KVQ_ERR_ARG && past == KVQ_ERR_ARG && sink == KVQ_ERR_ARG && named && null_rope == KVQ_ERR_ARG,
          "bad shifts accepted: %d %d %d %d '%s'", none, past, sink, null_rope, err.msg);
    CHECK(still == 100, "a refused shift changed the cache (%d positions)", still);
}

/* ------------------------------------------------------ engine level */

#include "kld.h"
#include "model.h"

/* KL(p || q) of two logit rows, in double. */
static double kl_logits(const float *p, const float *q, int n) {
    double mp = -INFINITY, mq = -INFINITY, zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < n; i++) { mp = fmax(mp, p[i]); mq = fmax(mq, q[i]); }
    for (int i = 0; i < n; i++) { zp += exp(p[i] - mp); zq += exp(q[i] - mq); }
    for (int i = 0; i < n; i++) {
        const double lp = p[i] - mp - log(zp), lq = q[i] - mq - log(zq);
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

typedef struct engine { kvq_model *m; kvq_kld_base *b; } engine;

static bool engine_open(engine *e, char *msg, size_t cap) {
    char mpath[1024], bpath[1024];
    memset(e, 0, sizeof *e);
    if (!test_shared_path(mpath, sizeof mpath, "models/toy-h64.gguf") ||
        !test_shared_path(bpath, sizeof bpath, "golden/toy-h64.gpl3.c128.kld")) {
        snprintf(msg, cap, "skip");
        return false;
    }
    kvq_error err = { 0, "" };
    if (kvq_model_load(mpath, &e->m, &err) || kvq_kld_base_read(bpath, &e->b, &err)) {
        snprintf(msg, cap, "load: %s", err.msg);
        return false;
    }
    return true;
}

static void engine_close(engine *e) {
    kvq_kld_base_free(e->b);
    kvq_model_free(e->m);
}

static kvq_ctx *engine_ctx(const engine *e, kvq_type t, int tail, int sink, int rollback) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.type_k = p.type_v = t;
    p.n_ctx = 256;
    p.max_batch = 64;
    p.tail_tokens = tail;
    p.sink_tokens = sink;
    p.rollback_tokens = rollback;
    p.tail_type = KVQ_TYPE_F16;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0, "" };
    if (kvq_ctx_create(e->m, &p, 2, &ctx, &err) != KVQ_OK) fprintf(stderr, "ctx: %s\n", err.msg);
    return ctx;
}

/* Evaluate toks at positions pos.. in batches of 64; logits of every row
 * into out (n rows) when out is not NULL. */
static bool eval_all(kvq_ctx *ctx, const int32_t *toks, int n, int pos, float *out, int n_vocab) {
    for (int t = 0; t < n; t += 64) {
        const int len = KVQ_MIN(64, n - t);
        if (kvq_ctx_eval(ctx, toks + t, len, pos + t, out ? out + (size_t)t * n_vocab : NULL, false, NULL) != KVQ_OK)
            return false;
    }
    return true;
}

/* Truncate in the engine: 80 tokens, 20 wrong ones, back to 80, the right
 * 20: the logits are those of a run that never saw the wrong ones. */
TEST(engine_truncate_then_continue_equals_fresh_run) {
    char msg[300] = "";
    engine e;
    if (!engine_open(&e, msg, sizeof msg)) { engine_close(&e); if (!strcmp(msg, "skip")) SKIP("../shared not found"); CHECK(0, "%s", msg); }
    const int n_vocab = e.m->info.n_vocab;
    const int32_t *toks = e.b->tokens;
    int32_t wrong[20];
    for (int i = 0; i < 20; i++) wrong[i] = toks[200 + i];
    float *la = malloc((size_t)20 * n_vocab * sizeof *la), *lb = malloc((size_t)20 * n_vocab * sizeof *lb);
    CHECK(la && lb, "alloc");
    static const kvq_type types[] = { KVQ_TYPE_Q4_0, KVQ_TYPE_KVARN4, KVQ_TYPE_TURBO3_TCQ };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        kvq_ctx *a = engine_ctx(&e, types[i], 16, 4, 64), *b = engine_ctx(&e, types[i], 16, 4, 64);
        CHECK(a && b, "%s: contexts", kvq_type_name(types[i]));
        kvq_error err = { 0, "" };
        bool ok = eval_all(a, toks, 64, 0, NULL, n_vocab) && eval_all(a, toks + 64, 16, 64, NULL, n_vocab) &&
                  eval_all(a, wrong, 20, 80, NULL, n_vocab) && kvq_cache_truncate(kvq_ctx_cache(a), 80, &err) == KVQ_OK &&
                  eval_all(a, toks + 80, 20, 80, la, n_vocab);
        ok = ok && eval_all(b, toks, 64, 0, NULL, n_vocab) && eval_all(b, toks + 64, 16, 64, NULL, n_vocab) &&
             eval_all(b, toks + 80, 20, 80, lb, n_vocab);
        CHECK(ok, "%s: evaluation: %s", kvq_type_name(types[i]), err.msg);
        CHECK(!memcmp(la, lb, (size_t)20 * n_vocab * sizeof *la), "%s: logits after truncation differ from a fresh run",
              kvq_type_name(types[i]));
        kvq_ctx_free(a);
        kvq_ctx_free(b);
    }
    free(la);
    free(lb);
    engine_close(&e);
}

/* Context shift in the engine: 230 tokens, drop 60 after the first 128
 * (KVarN's exact first tile), then 20 more; against a fresh run of the shifted sequence.  Even the
 * exact cache differs (the kept keys were computed with the dropped ones
 * in view): that mean KLD is the floor; each quantised family stays within
 * 3x of it plus its own KLD without a shift (docs/cache.md "Editing"). */
TEST(engine_context_shift_kld_per_family) {
    char msg[300] = "";
    engine e;
    if (!engine_open(&e, msg, sizeof msg)) { engine_close(&e); if (!strcmp(msg, "skip")) SKIP("../shared not found"); CHECK(0, "%s", msg); }
    const int n_vocab = e.m->info.n_vocab, n = 230, keep = 128, drop = 60, more = 20;
    const int32_t *toks = e.b->tokens;
    int32_t shifted[256];
    int m = 0;
    for (int t = 0; t < n + more; t++)
        if (t < keep || t >= keep + drop) shifted[m++] = toks[t];
    float *ls = malloc((size_t)more * n_vocab * sizeof *ls), *lf = malloc((size_t)more * n_vocab * sizeof *lf);
    float *lx = malloc((size_t)more * n_vocab * sizeof *lx);
    CHECK(ls && lf && lx, "alloc");
    kvq_ctx *exact = engine_ctx(&e, KVQ_TYPE_F32, 0, 0, 0);
    CHECK(exact && eval_all(exact, shifted, m - more, 0, NULL, n_vocab) &&
          eval_all(exact, shifted + m - more, more, m - more, lx, n_vocab), "exact fresh run");
    kvq_ctx_free(exact);
    static const kvq_type types[] = { KVQ_TYPE_F32, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_KVARN4, KVQ_TYPE_TURBO3_TCQ };
    double floor_kld = 0;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        kvq_ctx *a = engine_ctx(&e, types[i], 16, 4, 0), *b = engine_ctx(&e, types[i], 16, 4, 0);
        CHECK(a && b, "%s: contexts", kvq_type_name(types[i]));
        kvq_error err = { 0, "" };
        bool ok = eval_all(a, toks, n, 0, NULL, n_vocab) && kvq_ctx_shift(a, drop, keep, &err) == KVQ_OK &&
                  eval_all(a, toks + n, more, n - drop, ls, n_vocab);
        ok = ok && eval_all(b, shifted, m - more, 0, NULL, n_vocab) && eval_all(b, shifted + m - more, more, m - more, lf, n_vocab);
        CHECK(ok, "%s: evaluation: %s", kvq_type_name(types[i]), err.msg);
        double kld_shift = 0, kld_fresh = 0;
        for (int r = 0; r < more; r++) {
            kld_shift += kl_logits(lx + (size_t)r * n_vocab, ls + (size_t)r * n_vocab, n_vocab) / more;
            kld_fresh += kl_logits(lx + (size_t)r * n_vocab, lf + (size_t)r * n_vocab, n_vocab) / more;
        }
        if (i == 0) floor_kld = kld_shift;
        fprintf(stderr, "  context shift %s: mean KLD vs the exact fresh run %.3g (the same cache, no shift: %.3g)\n",
                kvq_type_name(types[i]), kld_shift, kld_fresh);
        CHECK(isfinite(kld_shift) && kld_shift < 3.0 * floor_kld + 3.0 * kld_fresh + 1e-6,
              "%s: KLD after the shift %.3g, floor %.3g, without shift %.3g", kvq_type_name(types[i]), kld_shift,
              floor_kld, kld_fresh);
        kvq_ctx_free(a);
        kvq_ctx_free(b);
    }
    free(ls);
    free(lf);
    free(lx);
    engine_close(&e);
}

/* ------------------------------------------------------- state files */

#include <unistd.h>

/* Save after 300 tokens (the last batch still staged), load into a fresh
 * cache made with the same parameters: the tokens come back, and writing
 * and attending the next 20 tokens gives the same bytes in both, for
 * every family (rows with tail, sink and rollback; tiles; TurboQuant;
 * exact). */
TEST(cache_state_round_trip_bit_exact) {
    const int n = 300, more = 20;
    attn_data a;
    CHECK(attn_data_make(&a, n + more, HEADS_KV * GQA, HEADS_KV, HD, HD, 31), "alloc");
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvq_state_%d.kvqs", (int)getpid());
    int32_t toks[300];
    for (int i = 0; i < n; i++) toks[i] = (i * 7919) % 512;
    const size_t out_len = (size_t)more * HEADS_KV * GQA * HD, row = (size_t)HEADS_KV * HD;
    float *o1 = malloc(out_len * sizeof *o1), *o2 = malloc(out_len * sizeof *o2);
    CHECK(o1 && o2, "alloc");
    for (size_t f = 0; f < KVQ_ARRAY_LEN(k_families); f++) {
        kvq_cache *src = make(k_families[f].k, k_families[f].v, 512, k_families[f].tail, k_families[f].sink,
                              k_families[f].rollback);
        kvq_cache *dst = make(k_families[f].k, k_families[f].v, 512, k_families[f].tail, k_families[f].sink,
                              k_families[f].rollback);
        CHECK(src && dst && write_rows(src, a.k, a.v, 0, n), "family %zu: create/fill", f);
        kvq_error err = { 0, "" };
        const kvq_state_tag tag = { 0x1234abcdULL, toks, n };
        int32_t *back = NULL;
        int n_back = 0;
        CHECK(kvq_cache_save(src, path, &tag, &err) == KVQ_OK, "family %zu: save: %s", f, err.msg);
        CHECK(kvq_cache_load(dst, path, 0x1234abcdULL, &back, &n_back, &err) == KVQ_OK, "family %zu: load: %s", f, err.msg);
        const bool same_tokens = n_back == n && !memcmp(back, toks, sizeof toks);
        free(back);
        CHECK(same_tokens, "family %zu: %d tokens back", f, n_back);
        bool ok = kvq_cache_write(src, 0, n, more, a.k + n * row, a.v + n * row, &err) == KVQ_OK &&
                  kvq_cache_write(dst, 0, n, more, a.k + n * row, a.v + n * row, &err) == KVQ_OK &&
                  attend(src, a.q, n, more, o1) && attend(dst, a.q, n, more, o2);
        CHECK(ok, "family %zu: continue: %s", f, err.msg);
        CHECK(!memcmp(o1, o2, out_len * sizeof *o1), "family %zu (%s/%s): restored cache attends differently", f,
              kvq_type_name(k_families[f].k), kvq_type_name(k_families[f].v));
        CHECK(!memcmp(src->mem[0], dst->mem[0], src->mem_bytes[0]) && !memcmp(src->mem[1], dst->mem[1], src->mem_bytes[1]),
              "family %zu: bodies differ after the round trip", f);
        kvq_cache_free(src);
        kvq_cache_free(dst);
    }
    remove(path);
    free(o1);
    free(o2);
    attn_data_free(&a);
}

/* Refused, each with one message naming the difference: another model,
 * another type, another tail, rotation off where it was on, a truncated
 * file, one flipped byte; a refused load leaves the cache empty. */
TEST(cache_state_refusals) {
    attn_data a;
    CHECK(attn_data_make(&a, 100, HEADS_KV * GQA, HEADS_KV, HD, HD, 41), "alloc");
    char path[64], bad[72];
    snprintf(path, sizeof path, "/tmp/kvq_state_r_%d.kvqs", (int)getpid());
    snprintf(bad, sizeof bad, "%s.bad", path);
    int32_t toks[100] = { 0 };
    kvq_cache *src = make(KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, 256, 16, 0, 0);
    CHECK(src && write_rows(src, a.k, a.v, 0, 100), "create/fill");
    const kvq_state_tag tag = { 77, toks, 100 };
    CHECK(kvq_cache_save(src, path, &tag, NULL) == KVQ_OK, "save");
    kvq_cache_free(src);
    FILE *f = fopen(path, "rb");
    CHECK(f, "reopen");
    static uint8_t buf[1 << 20];
    const size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct { const char *why, *want; kvq_type k; int tail; kvq_rot_mode rot; uint64_t hash; size_t cut, flip; } cases[] = {
        { "other model", "another model", KVQ_TYPE_Q4_0, 16, KVQ_ROT_AUTO, 78, 0, 0 },
        { "other type", "type of layer 0 K is q4_0, this cache's q5_0", KVQ_TYPE_Q5_0, 16, KVQ_ROT_AUTO, 77, 0, 0 },
        { "other tail", "tail tokens is 16, this cache's 32", KVQ_TYPE_Q4_0, 32, KVQ_ROT_AUTO, 77, 0, 0 },
        { "rotation off", "rotation K block is 128, this cache's 0", KVQ_TYPE_Q4_0, 16, KVQ_ROT_OFF, 77, 0, 0 },
        { "truncated", "checksum", KVQ_TYPE_Q4_0, 16, KVQ_ROT_AUTO, 77, 1000, 0 },
        { "flipped byte", "checksum", KVQ_TYPE_Q4_0, 16, KVQ_ROT_AUTO, 77, 0, 5000 },
    };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(cases); i++) {
        kvq_cache_params p;
        attn_params(&p, HEADS_KV, HD, HD, 256, cases[i].k, KVQ_TYPE_Q8_0, cases[i].rot);
        p.max_batch = 128;
        p.tail_tokens = cases[i].tail;
        p.tail_type = KVQ_TYPE_F16;
        kvq_cache *c = NULL;
        CHECK(kvq_cache_create(&p, &c, NULL) == KVQ_OK, "%s: create", cases[i].why);
        const char *file = path;
        if (cases[i].cut || cases[i].flip) {
            FILE *g = fopen(bad, "wb");
            CHECK(g, "write bad copy");
            if (cases[i].flip) buf[cases[i].flip] ^= 0x10;
            fwrite(buf, 1, len - cases[i].cut, g);
            if (cases[i].flip) buf[cases[i].flip] ^= 0x10;
            fclose(g);
            file = bad;
        }
        kvq_error err = { 0, "" };
        int32_t *back = NULL;
        int n_back = -1;
        const kvq_status st = kvq_cache_load(c, file, cases[i].hash, &back, &n_back, &err);
        const int stored = c->n_stored[0];
        kvq_cache_free(c);
        CHECK(st != KVQ_OK && !back && n_back == 0 && stored == 0 && strstr(err.msg, cases[i].want),
              "%s: status %d, %d positions, '%s'", cases[i].why, st, stored, err.msg);
    }
    remove(path);
    remove(bad);
    attn_data_free(&a);
}

/* A fuzzer finding (fuzz/corpus/state/regress-negative-exact-from.kvqs):
 * a resealed state whose exact rows start at 0xffffffff once wrapped the
 * ring slot below the ring; it is refused now and leaves nothing behind. */
#include "../fuzz/state_caches.h"
#include "hash64.h"

TEST(cache_state_regress_negative_exact_start) {
    const char *path = "fuzz/corpus/state/regress-negative-exact-from.kvqs";
    FILE *f = fopen(path, "rb");
    if (!f) SKIP("%s not found (run from the repository)", path);
    static uint8_t buf[4096];
    const size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    CHECK(len > 40, "short seed");
    kvq_wr64(buf + len - 8, kvq_hash64_of(buf, len - 8));   /* resealed, as the fuzz target does */
    kvq_cache *c = state_cache_make(0);
    CHECK(c, "create");
    int32_t *toks = NULL;
    int n = -1;
    kvq_error err = { 0, "" };
    const kvq_status st = kvq_cache_load_memory(c, buf, len, 0, &toks, &n, &err);
    const int stored = c->n_stored[0];
    kvq_cache_free(c);
    free(toks);
    CHECK(st == KVQ_ERR_FORMAT && stored == 0 && strstr(err.msg, "exact rows"), "status %d, %d stored, '%s'", st, stored,
          err.msg);
}

/* Version 2 put the trellis codebooks on their 2^-5 grid (docs/state.md):
 * a version 1 file still loads where it holds no trellis codes (the same
 * bytes), and is refused with the reason where it does; a later version is
 * refused.  Each file is a saved state of 37 positions with its version
 * word rewritten and its checksum resealed. */
static kvq_status load_as_version(int which, uint32_t version, int *stored, char *msg, size_t msg_len) {
    static float k[64 * 64], v[64 * 64];
    for (int i = 0; i < 64 * 64; i++) { k[i] = sinf(0.37f * (float)i); v[i] = cosf(0.11f * (float)i); }
    int32_t toks[37] = { 0 };
    char path[64];
    snprintf(path, sizeof path, "/tmp/kvq_state_v_%d.kvqs", (int)getpid());
    kvq_cache *src = state_cache_make(which), *dst = state_cache_make(which);
    const kvq_state_tag tag = { 5, toks, 37 };
    kvq_status st = src && dst && kvq_cache_write(src, 0, 0, 37, k, v, NULL) == KVQ_OK &&
                            kvq_cache_save(src, path, &tag, NULL) == KVQ_OK
                        ? KVQ_OK
                        : KVQ_ERR_IO;
    static uint8_t buf[1 << 18];
    size_t len = 0;
    FILE *f = st == KVQ_OK ? fopen(path, "rb") : NULL;
    if (f) {
        len = fread(buf, 1, sizeof buf, f);
        fclose(f);
    }
    remove(path);
    *stored = -1;
    if (len < 40 || kvq_rd32(buf + 8) != 2) st = KVQ_ERR_IO;   /* this build writes version 2 */
    if (st == KVQ_OK) {
        kvq_wr32(buf + 8, version);
        kvq_wr64(buf + len - 8, kvq_hash64_of(buf, len - 8));
        int32_t *back = NULL;
        int n = 0;
        kvq_error err = { 0, "" };
        st = kvq_cache_load_memory(dst, buf, len, 5, &back, &n, &err);
        free(back);
        *stored = dst->n_stored[0];
        snprintf(msg, msg_len, "%s", err.msg);
    }
    kvq_cache_free(src);
    kvq_cache_free(dst);
    return st;
}

TEST(cache_state_version_1_without_trellis_codes) {
    char msg[256] = "";
    int stored;
    /* state_caches.h: 0 is q4_0 / q8_0 rows, 1 KVarN tiles, 2 turbo3_tcq K */
    for (int which = 0; which < 2; which++) {
        CHECK(load_as_version(which, 2, &stored, msg, sizeof msg) == KVQ_OK && stored == 37, "cache %d v2: '%s'", which, msg);
        CHECK(load_as_version(which, 1, &stored, msg, sizeof msg) == KVQ_OK && stored == 37, "cache %d v1: '%s'", which, msg);
    }
    CHECK(load_as_version(2, 2, &stored, msg, sizeof msg) == KVQ_OK && stored == 37, "turbo3_tcq v2: '%s'", msg);
    CHECK(load_as_version(2, 1, &stored, msg, sizeof msg) == KVQ_ERR_FORMAT && stored == 0 && strstr(msg, "version 1") &&
              strstr(msg, "trellis"),
          "turbo3_tcq v1: %d stored, '%s'", stored, msg);
    CHECK(load_as_version(0, 3, &stored, msg, sizeof msg) == KVQ_ERR_FORMAT && stored == 0 && strstr(msg, "version 3"),
          "v3: %d stored, '%s'", stored, msg);
}
