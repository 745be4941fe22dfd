/* test_synth.c - `kvq synth` models (tools/synth_model.c): the real
 * shapes' parameter counts against the published ones, a tiny shape in
 * every weight type written, read back tensor by tensor, loaded and run
 * one forward step, the q4_K_M mix, determinism, and bad arguments. */
#include "test.h"
#include "gguf.h"
#include "../tools/synth_model.h"

#include <string.h>
#include <unistd.h>

/* The count from the configuration alone (an independent formula, not
 * the writer's tensor list): per layer Q, K, V, O, three FFN matrices
 * and the norms; the tied embedding once; the output norm. */
static int64_t formula_params(const synth_shape *s) {
    const int64_t E = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    const int64_t qk_norm = !strcmp(s->arch, "qwen3") ? 2 * s->head_dim : 0;
    const int64_t layer = 2 * E * q + 2 * E * kv + 3 * E * s->n_ff + 2 * E + qk_norm;
    return s->n_layer * layer + (int64_t)s->n_vocab * E + E;
}

TEST(synth_shapes_have_the_published_parameter_counts) {
    int real = 0;
    for (const synth_shape *s = synth_shapes; s->name; s++) {
        const int64_t n = synth_params(s, false);
        CHECK(n == formula_params(s), "%s: tensor list %lld, formula %lld", s->name, (long long)n,
              (long long)formula_params(s));
        if (!s->published_params) continue;
        real++;
        CHECK(n == s->published_params, "%s: %lld parameters, published %lld", s->name, (long long)n,
              (long long)s->published_params);
    }
    CHECK(real >= 3, "only %d real shapes", real);
    /* the model cards' rounded figures */
    const synth_shape *q = synth_find_shape("qwen3-0.6B"), *l1 = synth_find_shape("llama-3.2-1B");
    const synth_shape *l3 = synth_find_shape("llama-3.2-3B");
    CHECK(q && l1 && l3, "a named shape is missing");
    CHECK(q->n_layer == 28 && q->n_embd == 1024 && q->n_head == 16 && q->n_head_kv == 8 && q->head_dim == 128 &&
          q->n_ff == 3072, "qwen3-0.6B's shape is not the issue's");
    CHECK(llround(synth_params(q, false) / 1e8) == 6, "qwen3-0.6B is not 0.6B");
    CHECK(llround(synth_params(q, true) / 1e7) == 44, "qwen3-0.6B non-embedding %lld is not 0.44B",
          (long long)synth_params(q, true));
    CHECK(synth_params(l1, false) / 10000000 == 123, "llama-3.2-1B is not 1.23B");
    CHECK(llround(synth_params(l3, false) / 1e7) == 321, "llama-3.2-3B is not 3.21B");
}

TEST(synth_q4_K_M_mix) {
    const synth_shape *s = synth_find_shape("qwen3-0.6B");
    int n = synth_tensors(s, SYNTH_W_Q4_K_M, NULL, 0);
    synth_tensor *ts = malloc((size_t)n * sizeof *ts);
    CHECK(ts && synth_tensors(s, SYNTH_W_Q4_K_M, ts, n) == n, "tensor list");
    int q6 = 0, q4 = 0, more_v = 0, more_down = 0, norms_f32 = 0, norms = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].is_norm) { norms++; norms_f32 += ts[i].type == KVQ_TYPE_F32; continue; }
        q6 += ts[i].type == KVQ_TYPE_Q6_K;
        q4 += ts[i].type == KVQ_TYPE_Q4_K;
        more_v += strstr(ts[i].name, "attn_v") && ts[i].type == KVQ_TYPE_Q6_K;
        more_down += strstr(ts[i].name, "ffn_down") && ts[i].type == KVQ_TYPE_Q6_K;
    }
    const bool embd_q6 = !strcmp(ts[0].name, "token_embd.weight") && ts[0].type == KVQ_TYPE_Q6_K;
    free(ts);
    CHECK(norms == norms_f32 && norms == 1 + 28 * 4, "%d norms, %d f32", norms, norms_f32);
    CHECK(embd_q6, "token_embd is not q6_K");
    /* 28 layers: 0-2 and 24-27 (first and last eighth) and every third
     * between (5, 8, ..., 23): 7 + 7 = 14 layers */
    CHECK(more_v == 14 && more_down == 14, "q6_K attn_v in %d layers, ffn_down in %d (want 14)", more_v, more_down);
    CHECK(q6 == 1 + 28 && q4 == 28 * 7 - 28, "q6_K %d, q4_K %d", q6, q4);
}

static bool same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        const int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = false;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* The file's tensors are the list's, with its types and shapes. */
static bool file_matches_list(test_ctx *t, const char *path, const synth_shape *s, synth_wtype w) {
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    if (gguf_open(path, &f, &err)) { test_fail(t, __FILE__, __LINE__, "gguf_open: %s", err.msg); return false; }
    const int n = synth_tensors(s, w, NULL, 0);
    synth_tensor *list = malloc((size_t)n * sizeof *list);
    bool ok = list && (uint64_t)n == f->n_tensors;
    if (ok) synth_tensors(s, w, list, n);
    int64_t values = 0;
    for (int i = 0; ok && i < n; i++) {
        const gguf_tensor *g = gguf_find_tensor(f, list[i].name);
        ok = g && g->type == list[i].type && g->ne[0] == list[i].ne0 && (g->n_dims == 1 ? 1 : g->ne[1]) == list[i].ne1;
        if (ok) values += g->ne[0] * (g->n_dims == 1 ? 1 : g->ne[1]);
    }
    if (!ok) test_fail(t, __FILE__, __LINE__, "%s: tensors differ from the list", path);
    else if (values != synth_params(s, false)) {
        test_fail(t, __FILE__, __LINE__, "%s holds %lld values, want %lld", path, (long long)values,
                  (long long)synth_params(s, false));
        ok = false;
    }
    free(list);
    gguf_close(f);
    return ok;
}

/* Load, prefill "Hi!" (BOS, then the bytes of "\xe2\x96\x81Hi!": the
 * vocabulary has only byte tokens), one decode step: every logit finite,
 * not all equal. */
static bool forward_is_finite(test_ctx *t, const char *path) {
    kvq_model *m = NULL;
    kvq_error err = { 0 };
    if (kvq_model_load(path, &m, &err)) { test_fail(t, __FILE__, __LINE__, "load %s: %s", path, err.msg); return false; }
    const kvq_model_info *in = kvq_model_get_info(m);
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_ctx = 64;
    p.max_batch = 8;
    kvq_ctx *c = NULL;
    float *logits = malloc((size_t)in->n_vocab * sizeof *logits);
    int32_t toks[8];
    const int n = kvq_tokenize(m, "Hi!", 3, true, false, toks, 8);
    bool ok = logits && n == 7 && toks[0] == in->bos_id && toks[1] == 3 + 0xe2 && toks[6] == 3 + '!' && !kvq_ctx_create(m, &p, 2, &c, &err) &&
              !kvq_ctx_eval(c, toks, n, 0, logits, true, &err);
    int32_t next = 0;
    for (int i = 0; ok && i < in->n_vocab; i++) next = logits[i] > logits[next] ? i : next;
    ok = ok && !kvq_ctx_eval(c, &next, 1, n, logits, true, &err);
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; ok && i < in->n_vocab; i++) {
        ok = isfinite(logits[i]);
        lo = fminf(lo, logits[i]);
        hi = fmaxf(hi, logits[i]);
    }
    if (!ok) test_fail(t, __FILE__, __LINE__, "%s: %d prompt tokens, forward failed or non-finite (%s)", path, n, err.msg);
    else if (!(hi > lo)) { test_fail(t, __FILE__, __LINE__, "%s: all logits equal", path); ok = false; }
    free(logits);
    kvq_ctx_free(c);
    kvq_model_free(m);
    return ok;
}

TEST(synth_tiny_every_wtype_loads_and_runs) {
    static const char *shapes[] = { "tiny-qwen3", "tiny-llama" };
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvq_test_synth_%d.gguf", (int)getpid());
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int w = 0; w < SYNTH_W_COUNT; w++) {
            const synth_shape *s = synth_find_shape(shapes[si]);
            kvq_error err = { 0 };
            CHECK(s && !synth_write(s, (synth_wtype)w, 7, path, &err), "%s %s: %s", shapes[si],
                  synth_wtype_name((synth_wtype)w), err.msg);
            const bool ok = file_matches_list(t, path, s, (synth_wtype)w) && forward_is_finite(t, path);
            remove(path);
            if (!ok) return;
        }
}

TEST(synth_is_deterministic_and_seeded) {
    char a[128], b[128];
    snprintf(a, sizeof a, "/tmp/kvq_test_synth_a_%d.gguf", (int)getpid());
    snprintf(b, sizeof b, "/tmp/kvq_test_synth_b_%d.gguf", (int)getpid());
    const synth_shape *s = synth_find_shape("tiny-qwen3");
    static const synth_wtype ws[] = { SYNTH_W_Q8_0, SYNTH_W_Q4_K_M };
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        kvq_error err = { 0 };
        CHECK(!synth_write(s, ws[i], 3, a, &err) && !synth_write(s, ws[i], 3, b, &err), "%s", err.msg);
        const bool same = same_file(a, b);
        CHECK(!synth_write(s, ws[i], 4, b, &err), "%s", err.msg);
        const bool differ = !same_file(a, b);
        remove(a);
        remove(b);
        CHECK(same, "%s: the same seed wrote different bytes", synth_wtype_name(ws[i]));
        CHECK(differ, "%s: seeds 3 and 4 wrote the same bytes", synth_wtype_name(ws[i]));
    }
}

TEST(synth_cli_bad_input) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    static const char *bad[] = {
        "synth --shape nope --wtype q8_0 -o /tmp/x.gguf",
        "synth --shape tiny-qwen3 --wtype q3_K -o /tmp/x.gguf",
        "synth --shape tiny-qwen3 --wtype q8_0",
        "synth --shape tiny-qwen3 --wtype q8_0 -o /nonexistent-dir/x.gguf",
        "synth --shape tiny-qwen3 --wtype q8_0 -o /tmp/x.gguf --seed -3",
        "synth --frobnicate",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], out[1024];
        snprintf(cmd, sizeof cmd, "%s %s", bin, bad[i]);
        const int rc = test_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *c = out; *c; c++) lines += *c == '\n';
        CHECK(rc == 1 && lines == 1 && strstr(out, "error"), "'%s': exit %d, %d lines: %s", bad[i], rc, lines, out);
    }
    char cmd[512], out[4096];
    snprintf(cmd, sizeof cmd, "%s synth --list", bin);
    CHECK(test_run(cmd, out, sizeof out) == 0 && strstr(out, "| qwen3-0.6B | qwen3 | 28 | 1024 | 16 / 8 | 128 | 3072 |"),
          "--list: %s", out);
}
