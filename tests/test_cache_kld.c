/* test_cache_kld.c - end-to-end quality of the format cache types: mean KL
 * divergence of the next-token distribution against a reference, on
 * ../shared/models/toy-h64.gguf (head 64) and synth/qwen3-h128.gguf
 * (head 128), through the engine's chunked evaluation and KLD functions.
 *
 * KVarN is compared at contexts of 512/1024, not at the golden files' 128:
 * KVarN keeps the first 128-token tile and the incomplete last tile exact
 * (docs/spec/formats.md §3), so in a 128-token chunk every key is exact and a KLD
 * comparison with q8_0/q4_0 would say nothing.  At 1024 (one chunk,
 * scored positions 512..1022) a query reads 3 to 6 of its tiles from
 * records (384 to 767 quantised keys, 50-75% of its keys); at 512
 * (positions 256..510) 1 or 2 tiles (128-256 keys, 33-67%), while
 * q8_0/q4_0 read all keys quantised: the comparison still favours
 * KVarN by its exact regions, which are part of the format (and counted in
 * its memory).  The tokens are the golden base file's (gpl3.txt), the
 * reference is kvq's own f32 cache on the same 1024-token chunk (the golden
 * files are c=128; test_engine.c checks kvq's f32 cache against them).
 * Every configuration runs in batches of 256 with a fresh cache.
 */
#include "test.h"
#include "chunks.h"
#include "kld.h"
#include "model.h"
#include "stats.h"

#include <string.h>

typedef struct kld_run {
    const kvq_model *m;
    const int32_t *tokens;
    int n_ctx, n_chunk;
    uint16_t *ref;           /* encoded reference records, one per scored position */
    const kvq_kld_base *golden; /* non-NULL: compare against its records instead */
    size_t rec_len;
    kvq_tokstats st;
    bool record;             /* true: fill ref; false: compare against it */
    kvq_rot_mode rot;        /* --attn-rot (AUTO unless a test sets it)  */
    int tail;                /* --kv-tail-tokens                          */
    int sink;                /* --kv-sink-tokens                          */
    int batch;               /* -b (0: 256, at most n_ctx)                */
} kld_run;

static kvq_status on_scored(void *ud, size_t i, const float *logits, int32_t next, kvq_error *err) {
    kld_run *r = ud;
    const int n_vocab = r->m->info.n_vocab;
    const uint16_t *rec = r->golden ? kvq_kld_base_record(r->golden, i) : r->ref + i * r->rec_len;
    if (r->record) { kvq_kld_encode(logits, n_vocab, r->ref + i * r->rec_len); return KVQ_OK; }
    kvq_kld_token t = kvq_kld_compare(logits, n_vocab, rec, next);
    return kvq_tokstats_add(&r->st, &t, err);
}

/* One evaluation with cache types tk/tv (rotation AUTO, tail type as the
 * CLI chooses it); mean KLD against the reference, or -1 on failure. */
static double eval_cache(kld_run *r, kvq_type tk, kvq_type tv, char *msg, size_t cap) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);             /* environment ignored */
    p.rot.mode = r->rot;
    p.tail_tokens = r->tail;
    p.sink_tokens = r->sink;
    p.type_k = tk;
    p.type_v = tv;
    p.n_ctx = r->n_ctx;
    p.max_batch = KVQ_MIN(r->batch ? r->batch : 256, r->n_ctx);
    const bool tiles = kvq_type_get(tk)->layout == KVQ_LAYOUT_TILES || kvq_type_get(tv)->layout == KVQ_LAYOUT_TILES;
    p.tail_type = tiles ? KVQ_TYPE_F16 : KVQ_TYPE_BF16;
    kvq_ctx *ctx = NULL;
    kvq_error err = { 0, "" };
    double mean = -1.0;
    kvq_tokstats_init(&r->st);
    kvq_chunk_run run = { r->tokens, r->n_ctx, r->n_chunk, p.max_batch, r->m->info.bos_id };
    kvq_kld_summary s;
    if (kvq_ctx_create(r->m, &p, 2, &ctx, &err) == KVQ_OK && kvq_eval_chunks(ctx, &run, on_scored, r, NULL, &err) == KVQ_OK) {
        if (r->record) mean = 0.0;
        else if (kvq_kld_summarize(&r->st, &s, &err) == KVQ_OK) mean = s.mean_kld;
    }
    if (mean < 0) snprintf(msg, cap, "%s/%s: %s", kvq_type_name(tk), kvq_type_name(tv), err.msg);
    kvq_tokstats_free(&r->st);
    kvq_ctx_free(ctx);
    return mean;
}

typedef struct kld_setup { kvq_model *m; kvq_kld_base *b; kld_run run; } kld_setup;

/* Model and golden tokens, and the f32-cache reference at n_ctx. */
static bool setup(test_ctx *t, kld_setup *s, const char *model_rel, const char *base_rel, int n_ctx, int n_chunk,
                  char *msg, size_t cap) {
    (void)t;
    char mpath[1024], bpath[1024];
    memset(s, 0, sizeof *s);
    if (!test_shared_path(mpath, sizeof mpath, model_rel) || !test_shared_path(bpath, sizeof bpath, base_rel)) {
        snprintf(msg, cap, "skip");
        return false;
    }
    kvq_error err = { 0, "" };
    if (kvq_model_load(mpath, &s->m, &err) || kvq_kld_base_read(bpath, &s->b, &err)) {
        snprintf(msg, cap, "load: %s", err.msg);
        return false;
    }
    if ((size_t)s->b->n_ctx * (size_t)s->b->n_chunk < (size_t)n_ctx * n_chunk) {
        snprintf(msg, cap, "%s holds too few tokens", base_rel);
        return false;
    }
    kld_run *r = &s->run;
    r->m = s->m;
    r->tokens = s->b->tokens;
    r->n_ctx = n_ctx;
    r->n_chunk = n_chunk;
    r->rec_len = kvq_kld_record_len(s->m->info.n_vocab);
    r->ref = malloc((size_t)kvq_kld_scored_per_chunk(n_ctx) * n_chunk * r->rec_len * sizeof *r->ref);
    if (!r->ref) { snprintf(msg, cap, "out of memory"); return false; }
    r->record = true;
    if (eval_cache(r, KVQ_TYPE_F32, KVQ_TYPE_F32, msg, cap) < 0) return false;
    r->record = false;
    return true;
}

static void teardown(kld_setup *s) {
    free(s->run.ref);
    kvq_kld_base_free(s->b);
    kvq_model_free(s->m);
}

/* KVarN vs block types at equal bits (see the file comment). */
static void kvarn_kld(test_ctx *t, const char *model_rel, const char *base_rel, int n_ctx, int n_chunk) {
    char msg[400] = "";
    kld_setup s;
    if (test_sanitized()) { n_ctx = 512; n_chunk = 1; }
    if (!setup(t, &s, model_rel, base_rel, n_ctx, n_chunk, msg, sizeof msg)) {
        teardown(&s);
        if (!strcmp(msg, "skip")) SKIP("../shared/%s or %s not found", model_rel, base_rel);
        CHECK(0, "%s", msg);
    }
    static const kvq_type pairs[][2] = {
        { KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0 }, { KVQ_TYPE_KVARN8, KVQ_TYPE_KVARN8 }, { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0 },
        { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN4 }, { KVQ_TYPE_KVARN3, KVQ_TYPE_KVARN3 },
    };
    /* under sanitizers (5-10x slower) only q4_0 against kvarn4 */
    const bool all = !test_sanitized();
    double kld[5] = { 0 };
    for (int i = 0; i < 5; i++) {
        if (!all && i != 2 && i != 3) continue;
        kld[i] = eval_cache(&s.run, pairs[i][0], pairs[i][1], msg, sizeof msg);
        if (kld[i] < 0) { teardown(&s); CHECK(0, "%s", msg); }
    }
    teardown(&s);
    const double q8 = kld[0], kv8 = kld[1], q4 = kld[2], kv4 = kld[3], kv3 = kld[4];
    fprintf(stderr, "  %s c=%d mean KLD: q8_0 %.3g kvarn8 %.3g q4_0(rot) %.3g kvarn4 %.3g kvarn3 %.3g\n", model_rel,
            n_ctx, q8, kv8, q4, kv4, kv3);
    CHECK(kv4 > 0, "kvarn4 KLD %.3g: records unread?", kv4);
    CHECK(kv4 < q4, "kvarn4 %.3g >= q4_0 (rotated) %.3g", kv4, q4);
    if (!all) return;
    CHECK(kv8 > 0 && kv4 > kv8 && kv3 > kv4, "KVarN KLD not ordered by bits (records unread?): %.3g %.3g %.3g", kv8,
          kv4, kv3);
    CHECK(kv8 < 1.5 * q8, "kvarn8 %.3g >= 1.5 x q8_0 %.3g", kv8, q8);
    CHECK(kv3 < 1.5 * q4, "kvarn3 %.3g >= 1.5 x q4_0 (rotated) %.3g", kv3, q4);
}

TEST(cache_kld_kvarn_toy_h64) { kvarn_kld(t, "models/toy-h64.gguf", "golden/toy-h64.gpl3.c128.kld", 512, 2); }
TEST(cache_kld_kvarn_qwen3_h128) {
    kvarn_kld(t, "models/synth/qwen3-h128.gguf", "golden/qwen3-h128.gpl3.c128.kld", 1024, 1);
}

/* At the context the cache is for (issue 10): the 4k model at c=4096 on
 * the held-out novel, against llama.cpp's f32-cache base.  KVarN keeps
 * only its first tile and the incomplete tile exact, so kvarn4's size is
 * <= 32% of bf16 and its records are what most keys are read from; the
 * run shows q4_0 with the same exact rows (sink 128 + tail 128) below
 * kvarn4 and kvarn4 far below plain q4_0 (this small model attends mostly
 * locally, docs/long-context.md).  The tail's rows are the same whatever
 * the batch: -b 256 and -b 100 give the same KLD. */
TEST(cache_kld_long_context_kvarn4_vs_q4_0) {
    /* four 4096-token passes take minutes under ASan; the code they run is
     * covered there by the shorter cache and KLD tests */
    if (test_sanitized()) SKIP("4096-token passes: run by make test, not under sanitizers");
    const char *model_rel = "models/austen-qwen3-h128-4k.gguf";
    const char *base_rel = "golden/austen-qwen3-h128-4k.northanger120k.c4096.kld";
    char mpath[1024], bpath[1024];
    if (!test_shared_path(mpath, sizeof mpath, model_rel) || !test_shared_path(bpath, sizeof bpath, base_rel))
        SKIP("../shared/%s or %s not found", model_rel, base_rel);
    kvq_error err = { 0, "" };
    kvq_model *m = NULL;
    kvq_kld_base *b = NULL;
    if (kvq_model_load(mpath, &m, &err) || kvq_kld_base_read(bpath, &b, &err)) {
        kvq_kld_base_free(b);
        kvq_model_free(m);
        CHECK(0, "load: %s", err.msg);
    }
    kld_run r = { m, b->tokens, (int)b->n_ctx, 1, NULL, b, 0, { 0 }, false, KVQ_ROT_AUTO, 0, 0, 0 };
    char msg[400] = "";
    const double kv4 = eval_cache(&r, KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN4, msg, sizeof msg);
    const double q4 = kv4 < 0 ? -1 : eval_cache(&r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg);
    r.sink = r.tail = 128;
    const double q4_exact = q4 < 0 ? -1 : eval_cache(&r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg);
    r.batch = 100;
    const double q4_exact_b100 = q4_exact < 0 ? -1 : eval_cache(&r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg);
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = m->info.n_layer;
    p.n_head_kv = m->info.n_head_kv;
    p.head_dim_k = m->info.head_dim_k;
    p.head_dim_v = m->info.head_dim_v;
    p.n_ctx = (int)b->n_ctx;
    kvq_cache_bytes bf16, kvarn;
    p.type_k = p.type_v = KVQ_TYPE_BF16;
    const bool sized = kvq_cache_plan_bytes(&p, &bf16, &err) == KVQ_OK;
    p.type_k = p.type_v = KVQ_TYPE_KVARN4;
    p.tail_type = KVQ_TYPE_F16;
    const bool sized2 = sized && kvq_cache_plan_bytes(&p, &kvarn, &err) == KVQ_OK;
    kvq_kld_base_free(b);
    kvq_model_free(m);
    CHECK(q4_exact_b100 >= 0, "%s", msg);
    CHECK(sized2, "plan: %s", err.msg);
    const double pct = 100.0 * (double)kvarn.total / (double)bf16.total;
    fprintf(stderr, "  c=4096 mean KLD: kvarn4 %.3g (%.1f%% of bf16), q4_0 %.3g, q4_0 sink128+tail128 %.3g (-b 100: %.3g)\n",
            kv4, pct, q4, q4_exact, q4_exact_b100);
    CHECK(pct <= 32.0, "kvarn4 at 4096 positions is %.2f%% of bf16", pct);
    CHECK(kv4 > 0 && q4_exact < kv4 && kv4 < q4, "order: q4_0 s128+t128 %.3g < kvarn4 %.3g < q4_0 %.3g", q4_exact, kv4, q4);
    CHECK(fabs(q4_exact_b100 / q4_exact - 1.0) < 0.02, "tail 128: -b 100 gives %.4g, -b 256 %.4g", q4_exact_b100,
          q4_exact);
}

/* ------------------------------------------------------------ TurboQuant */

/* TurboQuant has no exact regions of its own, so the golden base files
 * (llama.cpp, f32 cache, c=128) are the reference directly; all their
 * chunks (2 under sanitizers). */
static void turbo_kld(test_ctx *t, const char *model_rel, const char *base_rel) {
    char mpath[1024], bpath[1024];
    if (!test_shared_path(mpath, sizeof mpath, model_rel) || !test_shared_path(bpath, sizeof bpath, base_rel))
        SKIP("../shared/%s or %s not found", model_rel, base_rel);
    kvq_error err = { 0, "" };
    kvq_model *m = NULL;
    kvq_kld_base *b = NULL;
    if (kvq_model_load(mpath, &m, &err) || kvq_kld_base_read(bpath, &b, &err)) {
        kvq_kld_base_free(b);
        kvq_model_free(m);
        CHECK(0, "load: %s", err.msg);
    }
    kld_run r = { m, b->tokens, (int)b->n_ctx, test_sanitized() ? 2 : b->n_chunk, NULL, b, 0, { 0 }, false, KVQ_ROT_AUTO, 0, 0, 0 };
    static const kvq_type pairs[][2] = {
        { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0 }, { KVQ_TYPE_TURBO4, KVQ_TYPE_TURBO4 },
        { KVQ_TYPE_TURBO3, KVQ_TYPE_TURBO3 }, { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO3_TCQ },
        { KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_TURBO4_TCQ },
    };
    double kld[5];
    char msg[400] = "";
    bool ok = true;
    for (int i = 0; i < 5 && ok; i++) ok = (kld[i] = eval_cache(&r, pairs[i][0], pairs[i][1], msg, sizeof msg)) >= 0;
    kvq_kld_base_free(b);
    kvq_model_free(m);
    CHECK(ok, "%s", msg);
    fprintf(stderr, "  %s c=128 mean KLD vs golden: q4_0(rot) %.3g turbo4 %.3g turbo3 %.3g turbo3_tcq %.3g turbo4_tcq %.3g\n",
            model_rel, kld[0], kld[1], kld[2], kld[3], kld[4]);
    /* turbo4 (4.125 bpv) does NOT beat q4_0 (4.5 bpv, rotated) here: its
     * Gaussian NMSE is 0.0092 against q4_0's 0.0074 (test_formats), and
     * the KLD follows (1.10x on toy-h64, 1.27x on qwen3-h128, both sides
     * alike).  Checked instead: turbo4 within the 1.26x NMSE ratio plus
     * 10% noise, the trellis at 4.25 bpv below q4_0, and the orderings. */
    /* (2 chunks under sanitizers: too few positions for the ratio) */
    CHECK(test_sanitized() || kld[1] < 1.4 * kld[0], "turbo4 %.3g >= 1.4 x q4_0 (rotated) %.3g", kld[1], kld[0]);
    CHECK(kld[4] < kld[0], "turbo4_tcq %.3g >= q4_0 (rotated) %.3g", kld[4], kld[0]);
    CHECK(kld[3] < kld[2], "turbo3_tcq %.3g >= turbo3 %.3g", kld[3], kld[2]);
    CHECK(kld[1] < kld[2] && kld[4] < kld[3], "4 bits not below 3 bits: %.3g %.3g, %.3g %.3g", kld[1], kld[2], kld[4],
          kld[3]);
}

TEST(cache_kld_turbo_toy_h64) { turbo_kld(t, "models/toy-h64.gguf", "golden/toy-h64.gpl3.c128.kld"); }
TEST(cache_kld_turbo_qwen3_h128) { turbo_kld(t, "models/synth/qwen3-h128.gguf", "golden/qwen3-h128.gpl3.c128.kld"); }

/* ------------------------------------------------- block types, engine level */

/* A model and its golden base (llama.cpp, f32 cache, c=128): the reference
 * for the block types, which have no exact regions of their own.  All 16
 * chunks normally, 3 under sanitizers. */
typedef struct golden_setup { kvq_model *m; kvq_kld_base *b; kld_run r; } golden_setup;

static int golden_open(golden_setup *g, const char *model_rel, const char *base_rel, char *msg, size_t cap) {
    char mpath[1024], bpath[1024];
    memset(g, 0, sizeof *g);
    if (!test_shared_path(mpath, sizeof mpath, model_rel) || !test_shared_path(bpath, sizeof bpath, base_rel)) return 0;
    kvq_error err = { 0, "" };
    if (kvq_model_load(mpath, &g->m, &err) || kvq_kld_base_read(bpath, &g->b, &err)) {
        snprintf(msg, cap, "load: %s", err.msg);
        return -1;
    }
    kld_run r = { g->m, g->b->tokens, (int)g->b->n_ctx, test_sanitized() ? 3 : g->b->n_chunk, NULL, g->b, 0, { 0 },
                  false, KVQ_ROT_AUTO, 0, 0, 0 };
    g->r = r;
    return 1;
}

static void golden_close(golden_setup *g) {
    kvq_kld_base_free(g->b);
    kvq_model_free(g->m);
}

#define GOLDEN_OPEN(g, model_rel, base_rel)                                              \
    char msg[400] = "";                                                                  \
    golden_setup g;                                                                      \
    {                                                                                    \
        int rc_ = golden_open(&g, model_rel, base_rel, msg, sizeof msg);                 \
        if (rc_ == 0) { golden_close(&g); SKIP("../shared/%s or %s not found", model_rel, base_rel); } \
        if (rc_ < 0) { golden_close(&g); CHECK(0, "%s", msg); }                          \
    }

/* ATTENTION issue proof: q8_0 below 1e-4, the block types ordered by their
 * precision (q8_0 < q5_1 < q5_0 < q4_0, q4_1 < q4_0), and rotation lowering
 * q4_0's KLD on models with outlier channels. */
static void block_order(test_ctx *t, const char *model_rel, const char *base_rel) {
    GOLDEN_OPEN(g, model_rel, base_rel);
    enum { Q8, Q51, Q50, Q40, Q41, Q40_OFF, N };
    static const kvq_type types[N] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q5_1, KVQ_TYPE_Q5_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_1,
                                       KVQ_TYPE_Q4_0 };
    double kld[N];
    bool ok = true;
    for (int i = 0; i < N && ok; i++) {
        g.r.rot = i == Q40_OFF ? KVQ_ROT_OFF : KVQ_ROT_AUTO;
        ok = (kld[i] = eval_cache(&g.r, types[i], types[i], msg, sizeof msg)) >= 0;
    }
    golden_close(&g);
    CHECK(ok, "%s", msg);
    fprintf(stderr, "  %s mean KLD: q8_0 %.3g q5_1 %.3g q5_0 %.3g q4_0 %.3g q4_1 %.3g q4_0 rot-off %.3g\n", model_rel,
            kld[Q8], kld[Q51], kld[Q50], kld[Q40], kld[Q41], kld[Q40_OFF]);
    CHECK(kld[Q8] < 1e-4, "q8_0 mean KLD %.3g >= 1e-4", kld[Q8]);
    CHECK(kld[Q8] < kld[Q50] && kld[Q50] < kld[Q40], "not ordered q8_0 < q5_0 < q4_0: %.3g %.3g %.3g", kld[Q8],
          kld[Q50], kld[Q40]);
    CHECK(kld[Q40] < kld[Q40_OFF], "q4_0 rotated %.3g >= unrotated %.3g", kld[Q40], kld[Q40_OFF]);
    /* q5_1 vs q5_0 and q4_1 vs q4_0 differ by 10-25%: that needs all 16
     * chunks; the 3 chunks of a sanitizer run can order them either way */
    if (test_sanitized()) return;
    CHECK(kld[Q8] < kld[Q51] && kld[Q51] < kld[Q50] && kld[Q50] < kld[Q40],
          "not ordered q8_0 < q5_1 < q5_0 < q4_0: %.3g %.3g %.3g %.3g", kld[Q8], kld[Q51], kld[Q50], kld[Q40]);
    CHECK(kld[Q41] < kld[Q40], "q4_1 %.3g >= q4_0 %.3g", kld[Q41], kld[Q40]);
}

TEST(cache_kld_blocks_toy_h64) { block_order(t, "models/toy-h64.gguf", "golden/toy-h64.gpl3.c128.kld"); }
TEST(cache_kld_blocks_llama_h64) { block_order(t, "models/synth/llama-h64.gguf", "golden/llama-h64.gpl3.c128.kld"); }
TEST(cache_kld_blocks_qwen3_h128) {
    block_order(t, "models/synth/qwen3-h128.gguf", "golden/qwen3-h128.gpl3.c128.kld");
}

/* An exact tail of 64 recent positions lowers q4_0's KLD (toy-h64, gpl3);
 * and rotation forced on an f32 cache changes the KLD only by rounding. */
TEST(cache_kld_tail_and_f32_rotation) {
    GOLDEN_OPEN(g, "models/toy-h64.gguf", "golden/toy-h64.gpl3.c128.kld");
    double q4 = eval_cache(&g.r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg);
    g.r.tail = 64;
    double q4_tail = q4 >= 0 ? eval_cache(&g.r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg) : -1;
    g.r.tail = 0;
    double f32 = q4_tail >= 0 ? eval_cache(&g.r, KVQ_TYPE_F32, KVQ_TYPE_F32, msg, sizeof msg) : -1;
    g.r.rot = KVQ_ROT_ON;
    double f32_rot = f32 >= 0 ? eval_cache(&g.r, KVQ_TYPE_F32, KVQ_TYPE_F32, msg, sizeof msg) : -1;
    golden_close(&g);
    CHECK(f32_rot >= 0, "%s", msg);
    fprintf(stderr, "  toy-h64 mean KLD: q4_0 %.4g, tail 64 %.4g; f32 %.3g, f32 rotated %.3g\n", q4, q4_tail, f32,
            f32_rot);
    CHECK(q4_tail < q4, "tail 64 %.4g not below tail 0 %.4g", q4_tail, q4);
    CHECK(fabs(f32_rot - f32) < 1e-6, "rotation on an f32 cache moved the KLD by %.3g", fabs(f32_rot - f32));
}

/* stories260K has head_dim 8 (llama.cpp refuses or corrupts block types
 * there): kvq pads to one block and rotates with an 8-wide Hadamard. */
TEST(cache_kld_head_dim_8) {
    GOLDEN_OPEN(g, "models/stories260K.gguf", "golden/stories260K.gpl3.c128.kld");
    double q8 = eval_cache(&g.r, KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, msg, sizeof msg);
    double q4 = q8 >= 0 ? eval_cache(&g.r, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, msg, sizeof msg) : -1;
    golden_close(&g);
    CHECK(q4 >= 0, "%s", msg);
    fprintf(stderr, "  stories260K mean KLD: q8_0 %.4g q4_0 %.4g\n", q8, q4);
    CHECK(q8 < 0.05, "q8_0 mean KLD %.4g >= 0.05", q8);
    CHECK(q4 < 0.5, "q4_0 mean KLD %.4g >= 0.5", q4);
    CHECK(q8 < q4, "q8_0 %.4g not below q4_0 %.4g", q8, q4);
}

/* Mixed K/V types: q8_0/q4_0 and q4_0/q8_0 each lie strictly between the
 * uniform q8_0 and q4_0 caches, and differ from each other - a kernel that
 * read one side with the other side's type would break this. */
TEST(cache_kld_swapped_kv_types) {
    GOLDEN_OPEN(g, "models/synth/qwen3-h128.gguf", "golden/qwen3-h128.gpl3.c128.kld");
    const kvq_type Q8 = KVQ_TYPE_Q8_0, Q4 = KVQ_TYPE_Q4_0;
    double k8v8 = eval_cache(&g.r, Q8, Q8, msg, sizeof msg);
    double k8v4 = k8v8 >= 0 ? eval_cache(&g.r, Q8, Q4, msg, sizeof msg) : -1;
    double k4v8 = k8v4 >= 0 ? eval_cache(&g.r, Q4, Q8, msg, sizeof msg) : -1;
    double k4v4 = k4v8 >= 0 ? eval_cache(&g.r, Q4, Q4, msg, sizeof msg) : -1;
    golden_close(&g);
    CHECK(k4v4 >= 0, "%s", msg);
    fprintf(stderr, "  qwen3-h128 mean KLD: q8/q8 %.3g q8/q4 %.3g q4/q8 %.3g q4/q4 %.3g\n", k8v8, k8v4, k4v8, k4v4);
    CHECK(k8v8 < k8v4 && k8v4 < k4v4, "q8_0/q4_0 %.3g not between %.3g and %.3g", k8v4, k8v8, k4v4);
    CHECK(k8v8 < k4v8 && k4v8 < k4v4, "q4_0/q8_0 %.3g not between %.3g and %.3g", k4v8, k8v8, k4v4);
    CHECK(k8v4 != k4v8, "swapping the K and V types changed nothing (%.6g)", k8v4);
}
