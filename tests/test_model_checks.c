/* test_model_checks.c - a model file that would give a silent wrong number
 * is refused at load with an error naming the tensor or key: non-finite
 * weights and block scales, special-token ids outside the vocabulary,
 * block_count disagreeing with the tensors.  Every fixture is a tiny
 * llama model written by tests/model_writer.h, then corrupted in one
 * place; the uncorrupted one must load and give finite logits, so each
 * refusal is the corruption's doing. */
#include "test.h"
#include "model_writer.h"
#include "model.h"

#include <string.h>
#include <unistd.h>

static void fixture_path(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "/tmp/kvq_test_fixture_%s_%d.gguf", what, (int)getpid());
}

/* Load f from a temporary file; the status, with err filled. */
static kvq_status load_file(const tm_file *f, kvq_model **m, kvq_error *err) {
    char path[128];
    fixture_path(path, sizeof path, "load");
    *m = NULL;
    if (!tm_save(f, path)) return kvq_fail(err, KVQ_ERR_IO, "test: cannot write %s", path);
    kvq_status st = kvq_model_load(path, m, err);
    remove(path);
    return st;
}

static kvq_status load_spec(const tm_spec *s, kvq_model **m, kvq_error *err) {
    tm_file f;
    tm_write(&f, s);
    kvq_status st = load_file(&f, m, err);
    tm_free(&f);
    return st;
}

/* f must be refused (KVQ_ERR_FORMAT) with a message holding each of the
 * non-NULL strings. */
#define CHECK_REFUSED(st_, err_, a_, b_)                                                                  \
    do {                                                                                                  \
        CHECK((st_) == KVQ_ERR_FORMAT, "status %d, message '%s'", (int)(st_), (err_).msg);              \
        CHECK(!(a_) || strstr((err_).msg, (a_) ? (a_) : ""), "'%s' not in '%s'", (a_) ? (a_) : "", (err_).msg); \
        CHECK(!(b_) || strstr((err_).msg, (b_) ? (b_) : ""), "'%s' not in '%s'", (b_) ? (b_) : "", (err_).msg); \
    } while (0)

/* The last-token logits of "the cat sat on the mat" (one batch, a 1-thread
 * context of 32 positions); *n_tok = its token count.  The status, with
 * err filled (a count outside 2..16 is an error of its own). */
static kvq_status prompt_logits(const kvq_model *m, float *logits, int *n_tok, kvq_error *err) {
    int32_t toks[16];
    const int n = *n_tok = kvq_tokenize(m, "the cat sat on the mat", 22, true, false, toks, 16);
    if (n < 2 || n > 16) return kvq_fail(err, KVQ_ERR_ARG, "test: tokenize gave %d tokens", n);
    kvq_cache_params cp;
    kvq_cache_params_default(&cp);
    cp.n_ctx = 32;
    cp.max_batch = 16;
    kvq_ctx *c = NULL;
    kvq_status st = kvq_ctx_create(m, &cp, 1, &c, err);
    if (!st) st = kvq_ctx_eval(c, toks, n, 0, logits, true, err);
    kvq_ctx_free(c);
    return st;
}

TEST(fixture_model_loads_and_gives_finite_logits) {
    tm_spec s = tm_spec_default();
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    CHECK(load_spec(&s, &m, &err) == KVQ_OK, "the fixture does not load: %s", err.msg);
    const kvq_model_info *in = kvq_model_get_info(m);
    bool shape_ok = in->n_layer == 2 && in->n_vocab == tm_n_vocab() && in->bos_id == 1 && in->eos_id == 2 &&
                    in->add_bos && in->head_dim_k == 8;
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    int n = 0;
    kvq_status st = logits ? prompt_logits(m, logits, &n, &err) : KVQ_ERR_NOMEM;
    int finite = 0;
    double spread = 0.0;
    for (int i = 0; !st && logits && i < in->n_vocab; i++) {
        finite += isfinite(logits[i]) != 0;
        spread = fmax(spread, fabs((double)logits[i] - logits[0]));
    }
    free(logits);
    kvq_model_free(m);
    CHECK(shape_ok, "unexpected hyper-parameters");
    CHECK(n > 1 && n <= 16, "tokenize gave %d tokens", n);
    CHECK(st == KVQ_OK, "eval: %s", err.msg);
    CHECK(finite == tm_n_vocab() && spread > 1e-3, "%d finite logits, spread %g", finite, spread);
}

/* ------------------------------------------------- the two load modes */

/* Logits of a prompt with the fixture at path loaded in `mode`; the
 * status, with err filled. */
static kvq_status mode_logits(const char *path, kvq_load_mode mode, float *logits, kvq_error *err) {
    kvq_model *m = NULL;
    int n;
    kvq_status st = kvq_model_load_ex(path, mode, &m, err);
    if (!st) st = prompt_logits(m, logits, &n, err);
    kvq_model_free(m);
    return st;
}

/* KVQ_LOAD_READ (--no-mmap) reads the weights into memory: the same
 * logits, bit for bit, as the mapped file, the same load-time checks
 * (a corrupted file refused with the same message), and a mode that is
 * neither refused. */
TEST(model_load_modes_agree) {
    char path[128];
    fixture_path(path, sizeof path, "modes");
    tm_spec s = tm_spec_default();
    tm_file f;
    tm_write(&f, &s);
    const bool saved = tm_save(&f, path);
    const size_t nv = (size_t)tm_n_vocab();
    float *lm = calloc(nv, sizeof *lm), *lr = calloc(nv, sizeof *lr);
    kvq_error em = { 0 }, er = { 0 };
    const kvq_status sm = saved && lm ? mode_logits(path, KVQ_LOAD_MMAP, lm, &em) : KVQ_ERR_IO;
    const kvq_status sr = saved && lr ? mode_logits(path, KVQ_LOAD_READ, lr, &er) : KVQ_ERR_IO;
    const bool same = lm && lr && memcmp(lm, lr, nv * sizeof *lm) == 0;
    bool differs_from_zero = false;
    for (size_t i = 0; lm && i < nv; i++) differs_from_zero |= lm[i] != 0.0f;
    free(lm);
    free(lr);
    /* the same file with a NaN in a matrix: refused by both */
    const bool poked = tm_poke_f32(&f, "blk.1.ffn_down.weight", 64 * 3 + 7, NAN) && tm_save(&f, path);
    tm_free(&f);
    kvq_model *m = NULL;
    kvq_error cm = { 0 }, cr = { 0 }, bad = { 0 };
    const kvq_status pm = poked ? kvq_model_load_ex(path, KVQ_LOAD_MMAP, &m, &cm) : KVQ_ERR_IO;
    kvq_model_free(m);
    const kvq_status pr = poked ? kvq_model_load_ex(path, KVQ_LOAD_READ, &m, &cr) : KVQ_ERR_IO;
    kvq_model_free(m);
    const kvq_status pb = kvq_model_load_ex(path, (kvq_load_mode)7, &m, &bad);
    remove(path);
    CHECK(saved && poked, "cannot write %s", path);
    CHECK(sm == KVQ_OK && sr == KVQ_OK, "mapped: %s; read: %s", em.msg, er.msg);
    CHECK(same && differs_from_zero, "the two load modes gave different logits");
    CHECK_REFUSED(pm, cm, "blk.1.ffn_down.weight", "row 3, column 7");
    CHECK_REFUSED(pr, cr, "blk.1.ffn_down.weight", "row 3, column 7");
    CHECK(!strcmp(cm.msg, cr.msg), "different refusals: '%s' vs '%s'", cm.msg, cr.msg);
    CHECK(pb == KVQ_ERR_ARG && !m && strstr(bad.msg, "load mode 7"), "mode 7: status %d, '%s'", (int)pb, bad.msg);
}

/* ------------------------------------------------- non-finite values */

/* The default fixture with one 32-bit value of tensor `name` replaced. */
static void refused_f32(test_ctx *t, const char *name, size_t index, float v, const char *want) {
    tm_spec s = tm_spec_default();
    tm_file f;
    tm_write(&f, &s);
    bool poked = tm_poke_f32(&f, name, index, v);
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = poked ? load_file(&f, &m, &err) : KVQ_ERR_ARG;
    tm_free(&f);
    kvq_model_free(m);
    CHECK(poked, "no tensor '%s' in the fixture", name);
    CHECK_REFUSED(st, err, name, want);
}

TEST(model_refuses_nan_in_output_norm) { refused_f32(t, "output_norm.weight", 5, NAN, "nan"); }
TEST(model_refuses_inf_in_a_matrix) { refused_f32(t, "blk.1.ffn_down.weight", 64 * 3 + 7, INFINITY, "row 3, column 7"); }
TEST(model_refuses_nan_in_the_embedding) { refused_f32(t, "token_embd.weight", 32 * 300 + 1, -NAN, "row 300"); }

/* A block type: an inf or NaN fp16 scale d of one Q8_0 block (its 32
 * int8 values stay finite) is named with the row of the block. */
TEST(model_refuses_non_finite_block_scales) {
    const uint16_t bad[2] = { 0x7c00, 0x7e00 };   /* +inf, nan */
    for (int k = 0; k < 2; k++) {
        tm_spec s = tm_spec_default();
        tm_file f;
        tm_write(&f, &s);
        /* attn_k is [32 cols x 16 rows] Q8_0: one block per row; block 5 = row 5 */
        bool poked = tm_poke_u16(&f, "blk.1.attn_k.weight", 5 * 17, bad[k]);
        kvq_model *m = NULL;
        kvq_error err = { 0 };
        kvq_status st = poked ? load_file(&f, &m, &err) : KVQ_ERR_ARG;
        tm_free(&f);
        kvq_model_free(m);
        CHECK(poked, "no attn_k tensor");
        CHECK_REFUSED(st, err, "'blk.1.attn_k.weight'", "row 5");
        CHECK(strstr(err.msg, "block scale"), "the message does not say it is a scale: %s", err.msg);
    }
    /* an F16 embedding with one NaN half */
    tm_spec s = tm_spec_default();
    s.type_embd = GW_T_F16;
    tm_file f;
    tm_write(&f, &s);
    bool poked = tm_poke_u16(&f, "token_embd.weight", 32 * 7 + 31, 0xfe00);
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = poked ? load_file(&f, &m, &err) : KVQ_ERR_ARG;
    tm_free(&f);
    kvq_model_free(m);
    CHECK_REFUSED(st, err, "'token_embd.weight'", "row 7, column 31");
}

/* Finite weights whose activations overflow: the logits are refused at
 * the evaluation that makes them (final norm weights of 3e38 take the
 * normed activations past FLT_MAX). */
TEST(eval_refuses_overflowing_activations) {
    tm_spec s = tm_spec_default();
    tm_file f;
    tm_write(&f, &s);
    bool poked = true;
    for (int i = 0; i < 32; i++) poked &= tm_poke_f32(&f, "output_norm.weight", (size_t)i, 3e38f);
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = load_file(&f, &m, &err);
    tm_free(&f);
    CHECK(poked && st == KVQ_OK, "finite weights must load: %s", err.msg);
    kvq_cache_params cp;
    kvq_cache_params_default(&cp);
    cp.n_ctx = 16;
    cp.max_batch = 4;
    kvq_ctx *c = NULL;
    float *logits = malloc((size_t)tm_n_vocab() * 4 * sizeof *logits);
    const int32_t toks[4] = { 1, 290, 291, 292 };
    st = logits ? kvq_ctx_create(m, &cp, 1, &c, &err) : KVQ_ERR_NOMEM;
    kvq_status st_none = st ? st : kvq_ctx_eval(c, toks, 4, 0, NULL, false, &err);
    kvq_status st_eval = st ? st : kvq_ctx_eval(c, toks, 4, 4, logits, false, &err);
    free(logits);
    kvq_ctx_free(c);
    kvq_model_free(m);
    CHECK(st == KVQ_OK, "ctx: %s", err.msg);
    CHECK(st_none == KVQ_OK, "an evaluation without logits has none to check");
    CHECK(st_eval == KVQ_ERR_FORMAT && strstr(err.msg, "non-finite logit") && strstr(err.msg, "position 4"),
          "status %d: %s", (int)st_eval, err.msg);
}

/* ------------------------------------------------------ special tokens */

static void ids_case(test_ctx *t, int64_t bos, int64_t eos, int64_t pad, const char *extra, uint32_t extra_v,
                     const char *want) {
    tm_spec s = tm_spec_default();
    s.bos = bos;
    s.eos = eos;
    s.pad = pad;
    s.extra_id_key = extra;
    s.extra_id = extra_v;
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = load_spec(&s, &m, &err);
    kvq_model_free(m);
    CHECK_REFUSED(st, err, want, "outside the vocabulary");
}

TEST(model_refuses_special_ids_outside_the_vocabulary) {
    const int V = tm_n_vocab();
    ids_case(t, 99999, 2, TM_NO_KEY, NULL, 0, "'tokenizer.ggml.bos_token_id' = 99999");
    ids_case(t, 1, V, TM_NO_KEY, NULL, 0, "'tokenizer.ggml.eos_token_id'");
    ids_case(t, 1, 2, V + 5, NULL, 0, "'tokenizer.ggml.padding_token_id'");
    ids_case(t, 1, 2, TM_NO_KEY, "tokenizer.ggml.eot_token_id", (uint32_t)V, "'tokenizer.ggml.eot_token_id'");
    ids_case(t, 1, 2, TM_NO_KEY, "tokenizer.ggml.unknown_token_id", 0xFFFFFFFEu, "unknown_token_id");
}

/* What is not an error: the last id, 0xFFFFFFFF ("no token"), absent keys
 * (llama.cpp's SPM defaults 1 and 2). */
TEST(model_special_ids_none_and_defaults) {
    const int V = tm_n_vocab();
    const int64_t cases[3][2] = { { 1, V - 1 }, { 0xFFFFFFFFll, 2 }, { TM_NO_KEY, TM_NO_KEY } };
    const int want[3][3] = { { 1, V - 1, 1 }, { -1, 2, 0 }, { 1, 2, 1 } };   /* bos, eos, add_bos */
    for (int i = 0; i < 3; i++) {
        tm_spec s = tm_spec_default();
        s.bos = cases[i][0];
        s.eos = cases[i][1];
        kvq_model *m = NULL;
        kvq_error err = { 0 };
        kvq_status st = load_spec(&s, &m, &err);
        const kvq_model_info *in = kvq_model_get_info(m);
        int got[3] = { in ? in->bos_id : -9, in ? in->eos_id : -9, in ? (int)in->add_bos : -9 };
        kvq_model_free(m);
        CHECK(st == KVQ_OK, "case %d: %s", i, err.msg);
        CHECK(!memcmp(got, want[i], sizeof got), "case %d: bos %d eos %d add_bos %d", i, got[0], got[1], got[2]);
    }
}

/* --------------------------------------------------------- block_count */

TEST(model_refuses_block_count_disagreeing_with_tensors) {
    struct { int key, blocks; const char *a, *b; } cases[] = {
        { 1, 2, "'llama.block_count' is 1", "block 1 ('blk.1." },        /* a layer would be dropped */
        { 3, 2, "'llama.block_count' is 3", "stop at block 1" },         /* one would be missing     */
        { 1, 0, "'llama.block_count' is 1", "no blk.* tensors" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_spec s = tm_spec_default();
        s.block_count = cases[i].key;
        s.n_blocks = cases[i].blocks;
        kvq_model *m = NULL;
        kvq_error err = { 0 };
        kvq_status st = load_spec(&s, &m, &err);
        kvq_model_free(m);
        CHECK_REFUSED(st, err, cases[i].a, cases[i].b);
    }
    tm_spec s = tm_spec_default();
    s.block_count = s.n_blocks = 3;
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    kvq_status st = load_spec(&s, &m, &err);
    int n_layer = m ? kvq_model_get_info(m)->n_layer : 0;
    kvq_model_free(m);
    CHECK(st == KVQ_OK && n_layer == 3, "3 and 3 must load (%s)", err.msg);
}
