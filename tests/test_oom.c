/* test_oom.c - every allocation of the library can fail cleanly (the
 * loop: tests/oom.h): model load (a tiny llama written here; a shared
 * model too when present), tokenising (SentencePiece and byte-level BPE),
 * cache creation + write + attention for a block, a KVarN, a TurboQuant
 * and a calibrated type, a decode step (context, prompt, one token; once
 * with a pool of two, whose workers allocate nothing), a sweep cell
 * (reference base written, opened, checked against the model, one
 * configuration's KLD), cache truncate, shift, save and restore; and the
 * hook's own semantics.  tests/test_oom_tools.c: what the other commands
 * run. */
#include "attn_ref.h"
#include "base_kvq.h"
#include "chunks.h"
#include "kld_ref.h"
#include "oom.h"
#include "tok_internal.h"
#include "tokenizer.h"
#include "unicode_class.h"

#include <string.h>

/* ---------------------------------------------------------- model load */

typedef struct load_job { const char *path; int n_vocab; kvq_load_mode mode; } load_job;

static kvq_status job_load(void *ud, kvq_error *err) {
    load_job *j = ud;
    kvq_model *m = NULL;
    kvq_status st = kvq_model_load_ex(j->path, j->mode, &m, err);
    if (st == KVQ_OK) j->n_vocab = kvq_model_get_info(m)->n_vocab;
    kvq_model_free(m);
    return st;
}

TEST(oom_model_load) {
    char path[128];
    oom_tmp_path(path, sizeof path, "model.gguf");
    tm_spec s = oom_spec();
    CHECK(tm_save_spec(&s, path), "cannot write %s", path);
    /* mapped, and read into memory (--no-mmap: one more allocation, the file's bytes) */
    for (int mode = KVQ_LOAD_MMAP; mode <= KVQ_LOAD_READ; mode++) {
        load_job j = { path, 0, (kvq_load_mode)mode };
        oom_count c = { 0 };
        OOM_CHECK(job_load, &j, &c, 20);
        CHECK(j.n_vocab == tm_n_vocab(), "mode %d: n_vocab %d, want %d", mode, j.n_vocab, tm_n_vocab());
    }
    remove(path);
}

/* A shared model with a BPE vocabulary (byte-level merges) when present. */
TEST(oom_model_load_shared) {
    char buf[1024];
    const char *path = test_shared_path(buf, sizeof buf, "models/toy-h64.gguf");
    if (!path) SKIP("../shared/models/toy-h64.gguf not found");
    load_job j = { path, 0, KVQ_LOAD_MMAP };
    oom_count c = { 0 };
    OOM_CHECK(job_load, &j, &c, 20);
    CHECK(j.n_vocab > 256, "n_vocab %d", j.n_vocab);
}

/* ------------------------------------------------------------ tokenise */

typedef struct tok_job { const kvq_model *m; int n; int32_t ids[64]; } tok_job;

/* kvq_tokenize answers -1 on any error (kvq.h has no status for it). */
static kvq_status job_tokenize(void *ud, kvq_error *err) {
    tok_job *j = ud;
    static const char text[] = "the cat sat on the mat, then a big red dog ran to the sun.";
    j->n = kvq_tokenize(j->m, text, sizeof text - 1, true, false, j->ids, 64);
    if (j->n < 0) return kvq_fail(err, KVQ_ERR_NOMEM, "tokenize failed");
    return j->n <= 64 ? KVQ_OK : kvq_fail(err, KVQ_ERR_ARG, "%d tokens", j->n);
}

TEST(oom_tokenize) {
    char path[128];
    kvq_model *m = oom_load_tiny(path, sizeof path, 2, 64);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    static tok_job ref, j;
    ref.m = j.m = m;
    kvq_error err;
    CHECK(job_tokenize(&ref, &err) == KVQ_OK, "tokenize: %d", ref.n);
    oom_count c = { 0 };
    OOM_CHECK(job_tokenize, &j, &c, 2);
    CHECK(j.n == ref.n && !memcmp(j.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids), "tokens differ");
    kvq_model_free(m);
}

/* A byte-level BPE tokenizer (the 256 byte stand-ins and a few merges,
 * qwen2's pre-tokenizer): made from its description and run. */
typedef struct bpe_job { int n; int32_t ids[32]; } bpe_job;

static kvq_status job_bpe(void *ud, kvq_error *err) {
    bpe_job *j = ud;
    static char chars[256][4];
    gguf_str tokens[256 + 4];
    int32_t types[256 + 4];
    for (int b = 0; b < 256; b++) {
        const int n = uc_encode(tok_byte_to_cp((uint8_t)b), chars[b]);
        tokens[b] = (gguf_str){ chars[b], (uint64_t)n };
        types[b] = 1;
    }
    static const char *const extra[] = { "\304\240t", "he", "\304\240the", "<|end|>" };
    static const char *const merge_text[] = { "\304\240 t", "h e", "\304\240t he" };
    gguf_str merges[3];
    for (int i = 0; i < 4; i++) {
        tokens[256 + i] = (gguf_str){ extra[i], strlen(extra[i]) };
        types[256 + i] = i == 3 ? 3 : 1;
    }
    for (int i = 0; i < 3; i++) merges[i] = (gguf_str){ merge_text[i], strlen(merge_text[i]) };
    kvq_tokenizer_desc d;
    kvq_tokenizer_desc_default(&d, KVQ_TOK_BPE, KVQ_PRE_QWEN2);
    d.n_vocab = 260;
    d.tokens = tokens;
    d.token_types = types;
    d.n_merges = 3;
    d.merges = merges;
    d.bos = d.eos = 259;
    kvq_tokenizer *t = NULL;
    kvq_status st = kvq_tokenizer_create(&d, &t, err);
    static const char text[] = "the heather, 12 the<|end|> theme";
    if (st == KVQ_OK) j->n = kvq_tokenizer_encode(t, text, sizeof text - 1, true, true, j->ids, 32);
    if (st == KVQ_OK && j->n < 0) st = kvq_fail(err, KVQ_ERR_NOMEM, "encode: -1");   /* its one error */
    if (st == KVQ_OK && j->n > 32) st = kvq_fail(err, KVQ_ERR_ARG, "%d tokens", j->n);
    kvq_tokenizer_free(t);
    return st;
}

TEST(oom_tokenize_bpe) {
    static bpe_job ref, j;
    kvq_error err = { KVQ_OK, "" };
    CHECK(job_bpe(&ref, &err) == KVQ_OK && ref.n > 8, "bpe: %s (%d tokens)", err.msg, ref.n);
    oom_count c = { 0 };
    OOM_CHECK(job_bpe, &j, &c, 10);
    CHECK(j.n == ref.n && !memcmp(j.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids), "tokens differ");
}

/* The tokenizer of a shared qwen3 model, when present. */
TEST(oom_tokenize_shared) {
    char buf[1024];
    const char *path = test_shared_path(buf, sizeof buf, "models/austen-qwen3-h128-q8_0.gguf");
    if (!path) SKIP("../shared/models/austen-qwen3-h128-q8_0.gguf not found");
    kvq_model *m = NULL;
    kvq_error err = { KVQ_OK, "" };
    CHECK(kvq_model_load(path, &m, &err) == KVQ_OK, "%s", err.msg);
    static tok_job ref, j;
    ref.m = j.m = m;
    CHECK(job_tokenize(&ref, &err) == KVQ_OK, "tokenize: %d", ref.n);
    oom_count c = { 0 };
    OOM_CHECK(job_tokenize, &j, &c, 8);
    CHECK(j.n == ref.n && !memcmp(j.ids, ref.ids, (size_t)ref.n * sizeof *ref.ids), "tokens differ");
    kvq_model_free(m);
}

/* --------------------------------------------------------------- cache */

enum { CACHE_TOK = 136, CACHE_HD = 32 };   /* one whole KVarN tile and 8 positions more */

typedef struct cache_job {
    kvq_type tk, tv;
    const attn_data *d;
    float out[CACHE_TOK * 2 * CACHE_HD];
} cache_job;

static kvq_status job_cache(void *ud, kvq_error *err) {
    cache_job *j = ud;
    kvq_cache_params p;
    attn_params(&p, j->d->n_head_kv, CACHE_HD, CACHE_HD, CACHE_TOK, j->tk, j->tv, KVQ_ROT_AUTO);
    p.kvarn_quantize_first_tile = true;
    p.tail_tokens = 8;
    p.rot_random_signs = true;   /* the randomised Hadamard's sign vectors are allocated too */
    kvq_cache *c = NULL;
    kvq_status st = kvq_cache_create(&p, &c, err);
    if (st == KVQ_OK) st = kvq_cache_write(c, 0, 0, CACHE_TOK, j->d->k, j->d->v, err);
    if (st == KVQ_OK)
        st = kvq_cache_attend(c, 0, 0, CACHE_TOK, j->d->n_head, j->d->q, 1.0f / sqrtf((float)CACHE_HD), j->out, NULL,
                              err);
    kvq_cache_free(c);
    return st;
}

TEST(oom_cache_families) {
    const kvq_type types[][2] = { { KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0 },
                                  { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN3 },
                                  { KVQ_TYPE_TURBO4_TCQ, KVQ_TYPE_TURBO3_TCQ },
                                  { KVQ_TYPE_CAL300, KVQ_TYPE_CAL250 } };
    static attn_data d;
    CHECK(attn_data_make(&d, CACHE_TOK, 2, 1, CACHE_HD, CACHE_HD, 7), "no test data");
    CHECK(attn_test_calib(1, 1, CACHE_HD, CACHE_HD), "no test calibration");   /* made once, before the loops */
    static cache_job ref, j;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        const char *tk = kvq_type_name(types[i][0]), *tv = kvq_type_name(types[i][1]);
        ref.tk = j.tk = types[i][0];
        ref.tv = j.tv = types[i][1];
        ref.d = j.d = &d;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_cache(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_cache, &j, &c, 8);
        CHECK(!memcmp(ref.out, j.out, sizeof ref.out), "%s/%s: attention differs after the loop", tk, tv);
    }
    attn_data_free(&d);
}

/* -------------------------------------------------------- decode step */

enum { DEC_CTX = 32, DEC_PROMPT = 5 };

typedef struct decode_job {
    const kvq_model *m;
    kvq_type tk, tv;
    int n_threads, n_vocab;
    float *logits;
    kvq_act act;          /* KVQ_ACT_INT8: kvq_ctx_set_activations allocates */
} decode_job;

static const int32_t dec_tokens[DEC_PROMPT + 1] = { 1, 300, 301, 302, 303, 304 };

static kvq_status job_decode(void *ud, kvq_error *err) {
    decode_job *j = ud;
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    memset(&p.rot, 0, sizeof p.rot);
    p.n_ctx = DEC_CTX;
    p.max_batch = 8;
    p.type_k = j->tk;
    p.type_v = j->tv;
    kvq_ctx *ctx = NULL;
    kvq_status st = kvq_ctx_create(j->m, &p, j->n_threads, &ctx, err);
    if (st == KVQ_OK && j->act != KVQ_ACT_F32) st = kvq_ctx_set_activations(ctx, j->act, err);
    if (st == KVQ_OK) st = kvq_ctx_eval(ctx, dec_tokens, DEC_PROMPT, 0, NULL, false, err);
    if (st == KVQ_OK) st = kvq_ctx_eval(ctx, dec_tokens + DEC_PROMPT, 1, DEC_PROMPT, j->logits, true, err);
    kvq_ctx_free(ctx);
    return st;
}

TEST(oom_decode_step) {
    char path[128];
    static kvq_model *m;
    m = oom_load_tiny(path, sizeof path, 2, 64);
    remove(path);
    CHECK(m, "cannot load the tiny model");
    const int nv = kvq_model_get_info(m)->n_vocab;
    static float a[1024], b[1024];
    CHECK(nv <= 1024, "n_vocab %d", nv);
    /* and once with a pool of two: its workers allocate nothing, so the
     * order of allocations stays the calling thread's */
    const struct { kvq_type k, v; int threads; kvq_act act; } cfg[] = {
        { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, 1, KVQ_ACT_F32 }, { KVQ_TYPE_KVARN4, KVQ_TYPE_TURBO3_TCQ, 1, KVQ_ACT_F32 },
        { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, 2, KVQ_ACT_F32 }, { KVQ_TYPE_F16, KVQ_TYPE_F16, 1, KVQ_ACT_INT8 } };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(cfg); i++) {
        const char *tk = kvq_type_name(cfg[i].k), *tv = kvq_type_name(cfg[i].v);
        decode_job ref = { m, cfg[i].k, cfg[i].v, cfg[i].threads, nv, a, cfg[i].act }, j = ref;
        j.logits = b;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_decode(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_decode, &j, &c, 20);
        CHECK(!memcmp(a, b, (size_t)nv * sizeof *a), "%s/%s: logits differ after the loop", tk, tv);
    }
    kvq_model_free(m);
}

/* ---------------------------------------------------------- sweep cell */

enum { CELL_CHUNKS = 2 };

typedef struct cell_job {
    const kvq_model *m;
    const char *model_path, *base_path;
    int32_t tokens[OOM_CTX * CELL_CHUNKS];
    double mean_kld, ppl;
} cell_job;

static kvq_status save_row(void *ud, size_t index, const float *logits, int32_t next, kvq_error *err) {
    (void)index;
    (void)next;
    return kvq_base_kvq_writer_add(ud, logits, err);
}

/* The reference: the exact cache's logits written as a kvq base file. */
static kvq_status job_reference(void *ud, kvq_error *err) {
    cell_job *j = ud;
    kvq_ctx *ctx = NULL;
    kvq_base_kvq_writer *w = NULL;
    kvq_chunk_run run = { j->tokens, OOM_CTX, CELL_CHUNKS, 16, 1 };
    kvq_status st = oom_ctx(j->m, KVQ_TYPE_F32, &ctx, err);
    if (st == KVQ_OK)
        st = kvq_base_kvq_writer_open(j->base_path, kvq_model_hash(j->m), OOM_CTX,
                                      kvq_model_get_info(j->m)->n_vocab, CELL_CHUNKS, j->tokens, &w, err);
    if (st == KVQ_OK) st = kvq_eval_chunks(ctx, &run, save_row, w, NULL, err);
    kvq_error cerr = { KVQ_OK, "" };
    kvq_status cst = w ? kvq_base_kvq_writer_close(w, &cerr) : KVQ_OK;
    if (st == KVQ_OK && cst != KVQ_OK) {
        st = cst;
        *err = cerr;
    }
    kvq_ctx_free(ctx);
    return st;
}

/* One configuration of a sweep: the reference opened, q4_0 evaluated
 * against it, the statistics summarised. */
static kvq_status job_cell(void *ud, kvq_error *err) {
    cell_job *j = ud;
    kvq_kld_ref ref;
    kvq_status st = kvq_kld_ref_open(j->base_path, &ref, err);
    if (st != KVQ_OK) return st;
    st = kvq_kld_ref_check_model(&ref, j->model_path, kvq_model_get_info(j->m), err);   /* as kvq sweep does */
    kvq_ctx *ctx = NULL;
    kvq_kld_acc acc;
    kvq_kld_acc_init(&acc, &ref);
    kvq_chunk_run run = { j->tokens, OOM_CTX, CELL_CHUNKS, 16, 1 };
    kvq_kld_summary sum;
    if (st == KVQ_OK) st = oom_ctx(j->m, KVQ_TYPE_Q4_0, &ctx, err);
    if (st == KVQ_OK) st = kvq_eval_chunks(ctx, &run, kvq_kld_acc_token, &acc, NULL, err);
    if (st == KVQ_OK) st = kvq_kld_summarize(&acc.stats, &sum, err);
    if (st == KVQ_OK) {
        j->mean_kld = sum.mean_kld;
        j->ppl = sum.ppl_q;
    }
    kvq_kld_acc_free(&acc);
    kvq_ctx_free(ctx);
    kvq_kld_ref_close(&ref);
    return st;
}

TEST(oom_sweep_cell) {
    char path[128], base[128];
    kvq_model *m = oom_load_tiny(path, sizeof path, 2, 64);
    CHECK(m, "cannot load the tiny model");
    oom_tmp_path(base, sizeof base, "base.kvqb");
    static cell_job ref, j;
    ref.m = m;
    ref.model_path = path;
    ref.base_path = base;
    test_rng r = { 5, 0, 0 };
    for (int i = 0; i < OOM_CTX * CELL_CHUNKS; i++) ref.tokens[i] = 259 + (int32_t)(test_rng_u64(&r) % 40);
    kvq_error err = { KVQ_OK, "" };
    kvq_status st = job_reference(&ref, &err);
    if (st == KVQ_OK) st = job_cell(&ref, &err);
    j = ref;
    j.mean_kld = j.ppl = -1.0;
    oom_count c = { 0 };
    char msg[512] = "";
    bool ok = st == KVQ_OK && oom_check(job_cell, &j, &c, msg, sizeof msg);
    oom_count cw = { 0 };
    ok = ok && oom_check(job_reference, &j, &cw, msg, sizeof msg);   /* and written again, failing */
    bool same = j.mean_kld == ref.mean_kld && j.ppl == ref.ppl;
    kvq_model_free(m);
    remove(path);
    remove(base);
    CHECK(st == KVQ_OK, "reference/cell: %s", err.msg);
    CHECK(ok, "%s", msg);
    CHECK(ref.mean_kld > 0 && isfinite(ref.ppl), "mean KLD %g, PPL %g", ref.mean_kld, ref.ppl);
    CHECK(same, "the cell after the loop: KLD %g PPL %g, want %g %g", j.mean_kld, j.ppl, ref.mean_kld, ref.ppl);
    CHECK(c.points >= 20 && cw.points >= 20, "only %ld / %ld failure points", c.points, cw.points);
}

/* --------------------------------------------------- cache edit + state */

typedef struct state_job {
    kvq_type tk, tv;
    const attn_data *d;
    const char *path;
    float out[8 * 2 * CACHE_HD];
} state_job;

static kvq_status make_state_cache(const state_job *j, kvq_cache **c, kvq_error *err) {
    kvq_cache_params p;
    attn_params(&p, j->d->n_head_kv, CACHE_HD, CACHE_HD, CACHE_TOK, j->tk, j->tv, KVQ_ROT_AUTO);
    p.tail_tokens = 8;
    p.rollback_tokens = 8;
    p.kvarn_quantize_first_tile = true;   /* else its first tile is a 128-row sink a shift must keep */
    return kvq_cache_create(&p, c, err);
}

/* Write, truncate, shift, save; restore into a second cache and attend. */
static kvq_status job_state(void *ud, kvq_error *err) {
    state_job *j = ud;
    const kvq_cache_rope rope = { 10000.0f, 1.0f, false };
    int32_t toks[CACHE_TOK], *back = NULL;
    for (int i = 0; i < CACHE_TOK; i++) toks[i] = i;
    kvq_cache *a = NULL, *b = NULL;
    int n_back = 0;
    kvq_status st = make_state_cache(j, &a, err);
    if (st == KVQ_OK) st = kvq_cache_write(a, 0, 0, CACHE_TOK - 8, j->d->k, j->d->v, err);
    if (st == KVQ_OK) st = kvq_cache_truncate(a, CACHE_TOK - 12, err);
    if (st == KVQ_OK) st = kvq_cache_shift(a, 4, 2, &rope, err);
    const kvq_state_tag tag = { 42, toks, CACHE_TOK - 16 };
    if (st == KVQ_OK) st = kvq_cache_save(a, j->path, &tag, err);
    if (st == KVQ_OK) st = make_state_cache(j, &b, err);
    if (st == KVQ_OK) st = kvq_cache_load(b, j->path, 42, &back, &n_back, err);
    if (st == KVQ_OK && (n_back != tag.n_tokens || memcmp(back, toks, (size_t)n_back * sizeof *back)))
        st = kvq_fail(err, KVQ_ERR_ARG, "tokens differ after the round trip");
    const int pos = CACHE_TOK - 16, hd = CACHE_HD;
    if (st == KVQ_OK) st = kvq_cache_write(b, 0, pos, 8, j->d->k + (size_t)pos * hd, j->d->v + (size_t)pos * hd, err);
    if (st == KVQ_OK)
        st = kvq_cache_attend(b, 0, pos, 8, j->d->n_head, j->d->q + (size_t)pos * j->d->n_head * hd,
                              1.0f / sqrtf((float)hd), j->out, NULL, err);
    free(back);
    kvq_cache_free(a);
    kvq_cache_free(b);
    return st;
}

TEST(oom_cache_edit_and_state) {
    const kvq_type types[][2] = { { KVQ_TYPE_Q4_0, KVQ_TYPE_TURBO3_TCQ },
                                  { KVQ_TYPE_KVARN4, KVQ_TYPE_CAL300 } };
    static attn_data d;
    CHECK(attn_data_make(&d, CACHE_TOK, 2, 1, CACHE_HD, CACHE_HD, 9), "no test data");
    CHECK(attn_test_calib(1, 1, CACHE_HD, CACHE_HD), "no test calibration");
    char path[128];
    oom_tmp_path(path, sizeof path, "state.kvqs");
    static state_job ref, j;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(types); i++) {
        const char *tk = kvq_type_name(types[i][0]), *tv = kvq_type_name(types[i][1]);
        ref.tk = j.tk = types[i][0];
        ref.tv = j.tv = types[i][1];
        ref.d = j.d = &d;
        ref.path = j.path = path;
        kvq_error err = { KVQ_OK, "" };
        CHECK(job_state(&ref, &err) == KVQ_OK, "%s/%s: %s", tk, tv, err.msg);
        oom_count c = { 0 };
        OOM_CHECK(job_state, &j, &c, 20);
        CHECK(!memcmp(ref.out, j.out, sizeof ref.out), "%s/%s: attention differs after the loop", tk, tv);
    }
    remove(path);
    attn_data_free(&d);
}

/* ------------------------------------------------------ the hook itself */

TEST(oom_hook_and_size_checks) {
    CHECK(kvq_mul_size(SIZE_MAX / 2 + 1, 2) == SIZE_MAX && kvq_mul_size(SIZE_MAX, 0) == 0 &&
          kvq_mul_size(1u << 20, 1u << 20) == (size_t)1 << 40, "kvq_mul_size");
    CHECK(kvq_mul_size(kvq_mul_size(SIZE_MAX / 3, 4), 1) == SIZE_MAX, "saturation does not stay saturated");
    void *p = kvq_malloc_n(SIZE_MAX / 4 + 1, 8);
    CHECK(!p, "an overflowing count * size was allocated");
    kvq_alloc_fail_at(2, 0);                       /* the second call fails, the third succeeds */
    void *a = kvq_malloc(8), *b = kvq_calloc(1, 8), *c = kvq_realloc(NULL, 8);
    const long calls = kvq_alloc_calls(), failed = kvq_alloc_failed();
    kvq_alloc_fail_at(1, 1);                       /* every call fails */
    void *d = kvq_malloc(1), *e = kvq_calloc(1, 1);
    const long failed_all = kvq_alloc_failed();
    kvq_alloc_fail_at(0, 0);
    void *f = kvq_malloc(1);
    const long after = kvq_alloc_calls();
    const int got[6] = { a != NULL, b != NULL, c != NULL, d != NULL, e != NULL, f != NULL };
    free(a), free(b), free(c), free(d), free(e), free(f);
    CHECK(got[0] && !got[1] && got[2] && !got[3] && !got[4] && got[5],
          "allocated: fail_at(2) %d %d %d, persist %d %d, disarmed %d", got[0], got[1], got[2], got[3], got[4],
          got[5]);
    CHECK(calls == 3 && failed == 1 && failed_all == 2 && after == 0, "counts %ld %ld %ld %ld", calls, failed,
          failed_all, after);
}

/* Page-aligned zeroed memory: on a page, zeroed, its block freed; a
 * failure (injected, or a size with no room for the page) is NULL with
 * no block. */
TEST(alloc_paged_on_a_page) {
    const size_t sizes[4] = { 0, 1, 5000, (size_t)3 << 20 };
    for (int i = 0; i < 4; i++) {
        void *block = NULL;
        const uint8_t *p = kvq_calloc_paged(sizes[i], &block);
        CHECK(p && block && (uintptr_t)p % KVQ_PAGE_BYTES == 0 && (const uint8_t *)block <= p &&
                  p < (const uint8_t *)block + KVQ_PAGE_BYTES,
              "size %zu: %p in block %p", sizes[i], (const void *)p, block);
        size_t nonzero = 0;
        for (size_t k = 0; p && k < sizes[i]; k++) nonzero += p[k] != 0;
        CHECK(nonzero == 0, "size %zu: %zu bytes not zero", sizes[i], nonzero);
        free(block);
    }
    void *block = &block;
    CHECK(!kvq_calloc_paged(SIZE_MAX - 100, &block) && !block, "no room for the page: allocated");
    kvq_alloc_fail_at(1, 0);
    block = &block;
    CHECK(!kvq_calloc_paged(64, &block) && !block, "an injected failure allocated");
    kvq_alloc_fail_at(0, 0);
}
