/* test_public_api.c - the public calls tools/ are built on (include/kvq.h,
 * include/kvq_eval.h), checked through the public headers alone: each
 * against an independent way of getting the same answer. */
#include "kvq_eval.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const MODEL = "models/austen-qwen3-h128-4k-q8_0.gguf";

/* kvq_fail fills the error and returns the code; NULL err is allowed. */
TEST(public_fail_fills_the_error) {
    kvq_error err = { 0 };
    CHECK(kvq_fail(&err, KVQ_ERR_FORMAT, "bad %d", 7) == KVQ_ERR_FORMAT, "code not returned");
    CHECK(err.code == KVQ_ERR_FORMAT && !strcmp(err.msg, "bad 7"), "err: %d '%s'", err.code, err.msg);
    CHECK(kvq_fail(NULL, KVQ_ERR_IO, "x") == KVQ_ERR_IO, "NULL err");
}

/* The vocabulary read without weights tokenizes as the model's own; decoding
 * gives the text back, truncation keeps snprintf's contract, and the EOS and
 * special-token queries agree with the model's info. */
/* The build's source hash: 16 lowercase hex digits (what the Makefile
 * writes; `kvq sweep` names its stored results by it). */
TEST(public_source_id_is_a_hash) {
    const char *id = kvq_source_id();
    CHECK(id && strlen(id) == 16, "source id '%s'", id ? id : "(null)");
    for (size_t i = 0; id && i < strlen(id); i++)
        CHECK(strchr("0123456789abcdef", id[i]) != NULL, "source id '%s': character %zu", id, i);
    CHECK(strcmp(id, "e3b0c44298fc1c14") != 0, "source id is the hash of no input");
}

TEST(public_tokenizer_open_decode_and_queries) {
    if (access(MODEL, R_OK) != 0) SKIP("%s not found (run from the repository)", MODEL);
    kvq_error err = { 0 };
    kvq_model *m = NULL;
    kvq_tokenizer *tok = NULL;
    CHECK(kvq_model_load(MODEL, &m, &err) == KVQ_OK, "%s", err.msg);
    if (kvq_tokenizer_open(MODEL, &tok, &err) != KVQ_OK) {
        kvq_model_free(m);
        CHECK(0, "%s", err.msg);
    }
    const kvq_model_info *in = kvq_model_get_info(m);
    const char *text = "It was a truth universally acknowledged, that a single man";
    int32_t a[64], b[64];
    const int na = kvq_tokenizer_encode(tok, text, strlen(text), false, true, a, 64);
    const int nb = kvq_tokenize(m, text, strlen(text), false, true, b, 64);
    bool same = na == nb && na > 3 && na <= 64;
    for (int i = 0; same && i < na; i++) same = a[i] == b[i];
    char buf[256], small[8];
    const long len = same ? kvq_tokenizer_decode(tok, a, na, buf, sizeof buf) : -1;
    const long len_small = same ? kvq_tokenizer_decode(tok, a, na, small, sizeof small) : -1;
    char pieces[256];
    int np = 0;
    for (int i = 0; same && i < na; i++) np += kvq_token_to_piece(m, a[i], pieces + np, (int)sizeof pieces - 1 - np);
    pieces[np] = 0;
    const int eos = kvq_tokenizer_eos(tok);
    const bool eos_ok = eos == in->eos_id && kvq_tokenizer_n_vocab(tok) == in->n_vocab &&
                        (eos < 0 || (kvq_tokenizer_is_eos(tok, eos) && kvq_tokenizer_is_special(tok, eos)));
    const bool normal_ok = !kvq_tokenizer_is_eos(tok, a[0]) && !kvq_tokenizer_is_special(tok, a[0]) &&
                           kvq_tokenizer_token_type(tok, a[0]) == KVQ_TOKEN_NORMAL;
    const bool range_ok = kvq_tokenizer_token_type(tok, -1) == KVQ_TOKEN_UNDEFINED &&
                          kvq_tokenizer_token_type(tok, in->n_vocab) == KVQ_TOKEN_UNDEFINED &&
                          kvq_tokenizer_decode(tok, (int32_t[]){ in->n_vocab }, 1, buf + 200, 8) == -1;
    const bool own = kvq_model_tokenizer(m) != NULL && kvq_tokenizer_n_vocab(kvq_model_tokenizer(m)) == in->n_vocab;
    kvq_tokenizer_free(tok);
    kvq_model_free(m);
    CHECK(same, "the vocabulary alone tokenizes differently (%d vs %d tokens)", na, nb);
    /* the pieces one after another: the text, after the space a
     * SentencePiece vocabulary puts in front of it */
    const size_t lt = strlen(text);
    CHECK(len == (long)np && !strcmp(buf, pieces), "decoded %ld bytes: '%s', pieces '%s'", len, buf, pieces);
    CHECK((len == (long)lt || (len == (long)lt + 1 && buf[0] == ' ')) && !strcmp(buf + len - lt, text),
          "decoded '%s'", buf);
    CHECK(len_small == len && strlen(small) == sizeof small - 1 && !strncmp(small, buf, sizeof small - 1),
          "truncated decode: %ld '%s'", len_small, small);
    CHECK(eos_ok, "EOS %d (model %d) not reported as EOS and special", eos, in->eos_id);
    CHECK(normal_ok, "token %d of plain text reported special, EOS or not normal", a[0]);
    CHECK(range_ok, "ids outside the vocabulary not refused");
    CHECK(own, "the model's own tokenizer");
}

/* Metadata by key (with truncation), integers against the model's info,
 * tensors against the weights' summary. */
TEST(public_model_metadata_and_tensors) {
    if (access(MODEL, R_OK) != 0) SKIP("%s not found (run from the repository)", MODEL);
    kvq_error err = { 0 };
    kvq_model *m = NULL;
    CHECK(kvq_model_load(MODEL, &m, &err) == KVQ_OK, "%s", err.msg);
    const kvq_model_info *in = kvq_model_get_info(m);
    char arch[32], cut[3];
    const long n_arch = kvq_model_meta_str(m, "general.architecture", arch, sizeof arch);
    const long n_cut = kvq_model_meta_str(m, "general.architecture", cut, sizeof cut);
    char key[64];
    snprintf(key, sizeof key, "%s.block_count", in->arch_name);
    int64_t blocks = -1;
    const bool have_blocks = kvq_model_meta_int(m, key, &blocks);
    const long absent = kvq_model_meta_str(m, "no.such.key", arch + 16, 8);
    const long not_str = kvq_model_meta_str(m, key, NULL, 0);
    const long tmpl = kvq_model_chat_template(m, NULL, 0);
    const long tmpl_meta = kvq_model_meta_str(m, "tokenizer.chat_template", NULL, 0);
    /* tensors: every block's seven matrices, and the output one unless tied */
    kvq_model_weights w;
    kvq_model_get_weights(m, &w);
    const int64_t n = kvq_model_n_tensors(m);
    double bytes = 0;
    bool have_output = false, embd_type_ok = false;
    for (int64_t i = 0; i < n; i++) {
        kvq_tensor_info t;
        if (kvq_model_tensor(m, i, &t, &err) != KVQ_OK) break;
        bytes += (double)t.nbytes;
        if (t.name_len == 13 && !memcmp(t.name, "output.weight", 13)) have_output = true;
        if (t.name_len == 17 && !memcmp(t.name, "token_embd.weight", 17)) embd_type_ok = t.type == w.embd_type;
    }
    kvq_tensor_info past;
    const kvq_status st_past = kvq_model_tensor(m, n, &past, &err);
    const float scale = kvq_model_rope_freq_scale(m);
    char arch_name[32];
    snprintf(arch_name, sizeof arch_name, "%s", in->arch_name);
    const int n_layer = in->n_layer;
    kvq_model_free(m);
    CHECK(n_arch == (long)strlen(arch_name) && !strcmp(arch, arch_name), "architecture %ld '%s'", n_arch, arch);
    CHECK(n_cut == n_arch && strlen(cut) == 2 && !strncmp(cut, arch_name, 2), "truncated: %ld '%s'", n_cut, cut);
    CHECK(have_blocks && blocks == n_layer, "%s: %lld, layers %d", key, (long long)blocks, n_layer);
    CHECK(absent == -1 && not_str == -1, "absent key %ld, integer as string %ld", absent, not_str);
    CHECK(tmpl == tmpl_meta, "chat template %ld vs metadata %ld", tmpl, tmpl_meta);
    CHECK(n > 7 * n_layer && st_past == KVQ_ERR_ARG, "%lld tensors; past the end: %d", (long long)n, st_past);
    CHECK(embd_type_ok && w.output_tied == !have_output, "token_embd type / tied %d, output.weight %d", w.output_tied,
          have_output);
    /* one decode step reads every matrix but only one embedding row: less
     * than the file's tensors (the embedding matrix), more than half */
    CHECK(w.decode_bytes > 0.5 * bytes && w.decode_bytes <= bytes + 1e6, "decode bytes %.0f of %.0f", w.decode_bytes,
          bytes);
    CHECK(scale > 0 && isfinite(scale), "rope scale %g", (double)scale);
}

/* The cache's parameters, per-layer types and sink rows as created. */
TEST(public_cache_queries) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = 3;
    p.n_ctx = 256;
    p.max_batch = 16;
    p.type_k = KVQ_TYPE_Q4_0;
    p.type_v = KVQ_TYPE_Q8_0;
    const kvq_type lk[3] = { KVQ_TYPE_Q4_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q4_0 };
    p.layer_type_k = lk;
    p.sink_tokens = 5;
    kvq_error err = { 0 };
    kvq_cache *c = NULL;
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    const kvq_cache_params *got = kvq_cache_get_params(c);
    const bool params_ok = got && got->n_layer == 3 && got->n_ctx == 256 && got->type_v == KVQ_TYPE_Q8_0;
    const bool types_ok = kvq_cache_layer_type(c, 1, false) == KVQ_TYPE_Q5_0 &&
                          kvq_cache_layer_type(c, 2, true) == KVQ_TYPE_Q8_0 &&
                          kvq_cache_layer_type(c, 3, false) == KVQ_TYPE_COUNT;
    const int sink = kvq_cache_sink_rows(c);
    kvq_cache_free(c);
    /* KVarN keeps its first 128-token tile exact: a shift must keep it */
    p.layer_type_k = NULL;
    p.sink_tokens = 0;
    p.type_k = KVQ_TYPE_KVARN4;
    p.tail_type = KVQ_TYPE_F16;
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    const int sink_tile = kvq_cache_sink_rows(c);
    kvq_cache_free(c);
    CHECK(params_ok, "parameters as created");
    CHECK(types_ok, "per-layer types");
    CHECK(sink == 5, "sink rows %d, want 5", sink);
    CHECK(sink_tile == 128, "KVarN sink rows %d, want its first tile (128)", sink_tile);
}

/* A row codec is the type's own quantise and dequantise; tile codecs take
 * whole 128-row groups; calibrated ones need training rows. */
TEST(public_codec_round_trips) {
    enum { DIM = 96, ROWS = 128 };
    test_rng r = { 11, 0, 0 };
    float *x = malloc(sizeof(float) * DIM * ROWS), *y = malloc(sizeof(float) * DIM * ROWS);
    CHECK(x && y, "out of memory");
    for (int i = 0; i < DIM * ROWS; i++) x[i] = (float)test_rng_gauss(&r);
    kvq_error err = { 0 };
    kvq_codec *c = NULL;
    const kvq_codec_opts plain = { 0, NULL, 0 };
    bool row_ok = kvq_codec_create(KVQ_TYPE_Q4_0, DIM, &plain, &c, &err) == KVQ_OK && kvq_codec_group(c) == 1 &&
                  kvq_codec_round_trip(c, x, 2, y, &err) == KVQ_OK;
    kvq_codec_free(c);
    uint8_t packed[256];
    float back[DIM];
    kvq_quantize_row(KVQ_TYPE_Q4_0, x + DIM, packed, DIM);
    kvq_dequantize_row(KVQ_TYPE_Q4_0, packed, back, DIM);
    row_ok = row_ok && !memcmp(back, y + DIM, sizeof back);
    c = NULL;
    bool tile_ok = kvq_codec_create(KVQ_TYPE_KVARN4, DIM, &plain, &c, &err) == KVQ_OK && kvq_codec_group(c) == 128 &&
                   kvq_codec_round_trip(c, x, 64, y, &err) == KVQ_ERR_ARG &&
                   kvq_codec_round_trip(c, x, ROWS, y, &err) == KVQ_OK;
    double e2 = 0, x2 = 0;
    for (int i = 0; i < DIM * ROWS; i++) e2 += (double)(y[i] - x[i]) * (y[i] - x[i]), x2 += (double)x[i] * x[i];
    kvq_codec_free(c);
    c = NULL;
    const kvq_status st_cal = kvq_codec_create(KVQ_TYPE_CAL325, DIM, &plain, &c, &err);
    const kvq_status st_weight = kvq_codec_create(KVQ_TYPE_Q4_K, DIM, &plain, &c, &err);
    free(x);
    free(y);
    CHECK(row_ok, "q4_0 codec differs from kvq_quantize_row + kvq_dequantize_row");
    /* 4-bit KVarN on Gaussian rows: an NMSE far below 1, far above 0 */
    CHECK(tile_ok && e2 / x2 > 1e-4 && e2 / x2 < 0.05, "kvarn4 tile codec: nmse %g", e2 / x2);
    CHECK(st_cal == KVQ_ERR_ARG && st_weight == KVQ_ERR_ARG, "calibrated without rows %d, weight type %d", st_cal,
          st_weight);
}

/* make check-layers refuses a tools/ file that includes a src/ header (or
 * one by a path), and accepts public headers and the tools' own. */
TEST(check_layers_refuses_internal_headers_in_tools) {
    if (access("tools/check_layers.sh", R_OK) != 0) SKIP("tools/check_layers.sh not found (run from the repository)");
    char dir[64], cmd[1024];
    static char out[4096];
    snprintf(dir, sizeof dir, "/tmp/kvq_layers_%d", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s/src/base %s/src/model %s/include %s/tools && cd %s && "
             "echo '#include \"kvq.h\"' > src/base/low.h && echo '#include \"low.h\"' > src/model/high.h && "
             "touch include/kvq.h include/kvq_eval.h && echo '#include \"kvq_eval.h\"' > tools/own.h && "
             "printf '#include \"own.h\"\\n#include \"kvq.h\"\\n' > tools/good.c",
             dir, dir, dir, dir, dir, dir);
    CHECK(test_run(cmd, out, sizeof out) == 0, "setup: %s", out);
    char abs[512];
    CHECK(getcwd(abs, sizeof abs) != NULL, "getcwd");
    snprintf(cmd, sizeof cmd, "cd %s && sh %s/tools/check_layers.sh base model", dir, abs);
    const int rc_good = test_run(cmd, out, sizeof out);
    const bool good_said = strstr(out, "includes in tools/") != NULL;
    snprintf(cmd, sizeof cmd, "cd %s && echo '#include \"high.h\"' > tools/bad.c && sh %s/tools/check_layers.sh base model",
             dir, abs);
    const int rc_bad = test_run(cmd, out, sizeof out);
    const bool bad_said = strstr(out, "tools/bad.c includes high.h from src/model") != NULL;
    snprintf(cmd, sizeof cmd,
             "cd %s && echo '#include \"../src/base/low.h\"' > tools/bad.c && sh %s/tools/check_layers.sh base model",
             dir, abs);
    static char out_path[4096];
    const int rc_path = test_run(cmd, out_path, sizeof out_path);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run(cmd, NULL, 0);
    CHECK(rc_good == 0 && good_said, "a clean tree refused (rc %d)", rc_good);
    CHECK(rc_bad != 0 && bad_said, "a tools/ file including src/model/high.h passed (rc %d): %s", rc_bad, out);
    CHECK(rc_path != 0 && strstr(out_path, "by a path"), "an include by path passed (rc %d): %s", rc_path, out_path);
}

/* Per-layer types: later entries win, unlisted layers keep the caller's
 * type; an unknown name and bad syntax are told apart by their status; a
 * layer past the model leaves the types as they were. */
TEST(public_layer_spec_parse_and_apply) {
    static kvq_layer_spec s;
    kvq_error err = { 0 };
    CHECK(kvq_layer_spec_parse("0-3:q8_0,2:q5_0,5:kvarn4", &s, &err) == KVQ_OK && s.n == 3, "%s", err.msg);
    kvq_type types[6];
    for (int l = 0; l < 6; l++) types[l] = KVQ_TYPE_Q4_0;
    CHECK(kvq_layer_spec_apply(&s, 6, types, &err) == KVQ_OK, "%s", err.msg);
    const kvq_type want[6] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0,
                               KVQ_TYPE_KVARN4 };
    CHECK(!memcmp(types, want, sizeof want), "types %s %s %s %s %s %s", kvq_type_name(types[0]),
          kvq_type_name(types[1]), kvq_type_name(types[2]), kvq_type_name(types[3]), kvq_type_name(types[4]),
          kvq_type_name(types[5]));
    kvq_type before[5];
    for (int l = 0; l < 5; l++) before[l] = types[l] = KVQ_TYPE_F16;
    CHECK(kvq_layer_spec_apply(&s, 5, types, &err) == KVQ_ERR_ARG && strstr(err.msg, "layer 5 does not exist") &&
              !memcmp(types, before, sizeof before), "layer 5 of 5: '%s'", err.msg);
    CHECK(kvq_layer_spec_parse("0:q4_K", &s, &err) == KVQ_ERR_UNSUPPORTED && strstr(err.msg, "'q4_K'"),
          "weight type: '%s'", err.msg);
    CHECK(kvq_layer_spec_parse("3-1:q4_0", &s, &err) == KVQ_ERR_ARG && strstr(err.msg, "bad layer range"),
          "reversed range: '%s'", err.msg);
    CHECK(kvq_layer_spec_parse("0:q4_0,", &s, &err) == KVQ_ERR_ARG && strstr(err.msg, "empty entry"), "'%s'",
          err.msg);
}
