/* test_cache_layers.c - per-layer cache types on the command line
 * (--cache-type-k-layers / --cache-type-v-layers, docs/spec/attention.md §2): the
 * SPEC parser, its expansion against a model's layer count, and that the
 * cache built from the flags stores each layer in its own type. */
#include "test.h"
#include "cache.h"
#include "../tools/cache_flags.h"

#include <string.h>

/* Parse argv through the shared parser, as every command does; returns
 * the last parser result (1 ok, -1 error). */
static int parse_args(cache_flags *cf, int argc, char **argv) {
    int r = 1;
    for (int i = 0; i < argc && r == 1; i++) r = cache_flags_parse("test", cf, argc, argv, &i);
    return r;
}

TEST(layer_spec_parses_ranges_and_single_layers) {
    layer_spec ls;
    char msg[512] = "";
    CHECK(layer_spec_parse("0-3:q8_0,4-27:q4_0", &ls, msg, sizeof msg), "%s", msg);
    CHECK(ls.n == 2, "%d entries", ls.n);
    CHECK(ls.r[0].first == 0 && ls.r[0].last == 3 && ls.r[0].type == KVQ_TYPE_Q8_0, "entry 0");
    CHECK(ls.r[1].first == 4 && ls.r[1].last == 27 && ls.r[1].type == KVQ_TYPE_Q4_0, "entry 1");
    CHECK(layer_spec_parse("5:f16", &ls, msg, sizeof msg), "%s", msg);
    CHECK(ls.n == 1 && ls.r[0].first == 5 && ls.r[0].last == 5 && ls.r[0].type == KVQ_TYPE_F16, "single layer");
    CHECK(layer_spec_parse("2-2:iq4_nl,0:q3_1", &ls, msg, sizeof msg), "%s", msg);
    CHECK(ls.n == 2 && ls.r[0].type == KVQ_TYPE_IQ4_NL && ls.r[1].type == KVQ_TYPE_Q3_1, "types");
}

TEST(layer_spec_rejects_bad_specs_with_one_line) {
    static const struct { const char *spec, *says; } bad[] = {
        { "", "empty" },
        { "3-1:q4_0", "bad layer range" },     /* reversed */
        { "-1:q4_0", "bad layer range" },      /* negative */
        { "0-:q4_0", "bad layer range" },
        { "a-b:q4_0", "bad layer range" },
        { " 1:q4_0", "bad layer range" },       /* no spaces */
        { "0-3", "RANGE:TYPE" },               /* no type */
        { "0-3:", "unknown cache type" },
        { "0-3:q9_0", "unknown cache type" },
        { "0-3:q4_k", "unknown cache type" },  /* weight-only type */
        { "0:q4_0,,1:q8_0", "empty entry" },
        { "0:q4_0,", "empty entry" },
        { "99999999:q4_0", "bad layer range" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        layer_spec ls;
        char msg[512] = "";
        CHECK(!layer_spec_parse(bad[i].spec, &ls, msg, sizeof msg), "'%s' accepted", bad[i].spec);
        CHECK(strstr(msg, bad[i].says) && !strchr(msg, '\n'), "'%s': message '%s' lacks '%s'", bad[i].spec, msg,
              bad[i].says);
    }
}

/* Later entries win; unlisted layers keep -ctk/-ctv whatever the order of
 * the flags on the command line. */
TEST(layer_flags_expand_in_order_over_the_global_type) {
    static cache_flags cf;
    cache_flags_init(&cf);
    char *argv[] = { "--cache-type-k-layers", "0-7:q8_0,2-3:q5_0", "-ctk", "q4_0", "-ctv", "q4_1",
                     "--cache-type-v-layers", "6:f16" };
    CHECK(parse_args(&cf, 8, argv) == 1, "parse failed");
    CHECK(cache_flags_apply_layers("test", &cf, 10), "apply failed");
    const kvq_type want_k[10] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q5_0, KVQ_TYPE_Q8_0,
                                  KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0 };
    CHECK(cf.params.layer_type_k && cf.params.layer_type_v, "no override arrays");
    for (int l = 0; l < 10; l++) {
        CHECK(cf.params.layer_type_k[l] == want_k[l], "K layer %d: %s", l, kvq_type_name(cf.params.layer_type_k[l]));
        const kvq_type want_v = l == 6 ? KVQ_TYPE_F16 : KVQ_TYPE_Q4_1;
        CHECK(cf.params.layer_type_v[l] == want_v, "V layer %d: %s", l, kvq_type_name(cf.params.layer_type_v[l]));
    }
}

TEST(layer_flags_check_layers_against_the_model) {
    static cache_flags cf;
    cache_flags_init(&cf);
    char *argv[] = { "--cache-type-v-layers", "0-1:q8_0,4:q4_0" };
    CHECK(parse_args(&cf, 2, argv) == 1, "parse failed");
    CHECK(!cache_flags_apply_layers("test", &cf, 4), "layer 4 of a 4-layer model accepted");
    CHECK(cache_flags_apply_layers("test", &cf, 5), "layer 4 of a 5-layer model rejected");
    CHECK(!cf.params.layer_type_k && cf.params.layer_type_v, "only V has overrides");
    char *bad[] = { "--cache-type-k-layers", "1-0:q8_0" };
    CHECK(parse_args(&cf, 2, bad) == -1, "reversed range accepted by the flag parser");
}

/* Hand-computed memory of a cache built from the flags: 3 layers, 2 KV
 * heads, K 64 wide, V 32 wide, n_ctx 100, no tail or sink.
 *   -ctk q4_0 with layer 0 = q8_0, layer 2 = f16:
 *     K rows per head: q8_0 2x34 = 68 B, q4_0 2x18 = 36 B, f16 128 B
 *     K = 2 heads x 100 x (68 + 36 + 128) = 46400
 *   -ctv q5_0 with layer 1 = bf16:
 *     V rows per head: q5_0 1x22 = 22 B, bf16 64 B
 *     V = 2 x 100 x (22 + 64 + 22) = 21600 */
TEST(cache_built_from_layer_flags_has_hand_computed_size) {
    static cache_flags cf;
    cache_flags_init(&cf);
    char *argv[] = { "-ctk", "q4_0", "-ctv", "q5_0", "--cache-type-k-layers", "0:q8_0,2:f16",
                     "--cache-type-v-layers", "1:bf16" };
    CHECK(parse_args(&cf, 8, argv) == 1, "parse failed");
    CHECK(cache_flags_apply_layers("test", &cf, 3), "apply failed");
    kvq_cache_params p = cf.params;
    p.n_layer = 3;
    p.n_head_kv = 2;
    p.head_dim_k = 64;
    p.head_dim_v = 32;
    p.n_ctx = 100;
    p.max_batch = 4;
    kvq_cache *c = NULL;
    kvq_error err;
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    const kvq_type types_k[3] = { c->k[0].type, c->k[1].type, c->k[2].type };
    const kvq_type types_v[3] = { c->v[0].type, c->v[1].type, c->v[2].type };
    kvq_cache_free(c);
    CHECK(b.k == 46400, "K body %zu, want 46400", b.k);
    CHECK(b.v == 21600, "V body %zu, want 21600", b.v);
    CHECK(b.total == 68000 && b.tail == 0 && b.sink == 0, "total %zu", b.total);
    CHECK(types_k[0] == KVQ_TYPE_Q8_0 && types_k[1] == KVQ_TYPE_Q4_0 && types_k[2] == KVQ_TYPE_F16, "K layer types");
    CHECK(types_v[0] == KVQ_TYPE_Q5_0 && types_v[1] == KVQ_TYPE_BF16 && types_v[2] == KVQ_TYPE_Q5_0, "V layer types");
}

/* The stored rows follow the layer's type: with the same input written to
 * every layer, a q8_0 layer reads back closer than a q3_0 layer, and an
 * f32 layer exactly (the rotation is off here). */
TEST(cache_layers_quantise_with_their_own_type) {
    static cache_flags cf;
    cache_flags_init(&cf);
    char *argv[] = { "-ctk", "q3_0", "--cache-type-k-layers", "1:q8_0,2:f32", "--attn-rot", "off" };
    CHECK(parse_args(&cf, 6, argv) == 1, "parse failed");
    CHECK(cache_flags_apply_layers("test", &cf, 3), "apply failed");
    kvq_cache_params p = cf.params;
    p.n_layer = 3;
    p.n_head_kv = 1;
    p.head_dim_k = p.head_dim_v = 64;
    p.n_ctx = 8;
    p.max_batch = 1;
    kvq_cache *c = NULL;
    kvq_error err;
    CHECK(kvq_cache_create(&p, &c, &err) == KVQ_OK, "%s", err.msg);
    float x[64], y[64];
    test_rng rng = { 7, 0, 0 };
    for (int i = 0; i < 64; i++) x[i] = (float)test_rng_gauss(&rng);
    double sq_err[3] = { 0 };
    kvq_status st = KVQ_OK;
    for (int l = 0; l < 3 && !st; l++) {
        st = kvq_cache_write(c, l, 0, 1, x, x, &err);
        if (!st) st = kvq_cache_read_row(c, l, false, KVQ_PART_BODY, 0, 0, y, &err);
        for (int i = 0; i < 64; i++) sq_err[l] += (double)(y[i] - x[i]) * (y[i] - x[i]);
    }
    kvq_cache_free(c);
    CHECK(!st, "%s", err.msg);
    CHECK(sq_err[2] == 0.0, "f32 layer not exact: %g", sq_err[2]);
    CHECK(sq_err[1] > 0.0 && sq_err[1] * 20 < sq_err[0], "q8_0 error %g not far below q3_0's %g", sq_err[1], sq_err[0]);
}

/* ------------------------------------------------ through the kvq binary */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* toy-h64: 4 layers, 2 KV heads, head_dim 64, chunks of 128 tokens.
 *   K: -ctk q4_0, layers 0-3 q8_0 then layer 1 q5_0 (later entry wins):
 *      per token 2 heads x (68 + 44 + 68 + 68) = 496 B
 *   V: -ctv q4_0, layer 3 f16: 2 x (36 + 36 + 36 + 128) = 472 B
 *   kv_bytes = 128 x (496 + 472) = 123904 */
TEST(cli_kld_honours_layer_types) {
    const char *bin = test_kvq_bin();
    char model[1024], base[1024], cmd[4096];
    static char out[8192];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(base, sizeof base, "golden/toy-h64.gpl3.c128.kld"))
        SKIP("../shared not found");
    snprintf(cmd, sizeof cmd,
             "{ %s kld -m %s --base %s --chunks 1 -t 1 -ctk q4_0 -ctv q4_0 --cache-type-k-layers 0-3:q8_0,1:q5_0 "
             "--cache-type-v-layers 3:f16 --json 2>/dev/null; }", bin, model, base);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq kld exited %d: %s", rc, out);
    const char *kv = strstr(out, "\"kv_bytes\": ");
    CHECK(kv && atol(kv + 12) == 123904, "kv_bytes wrong: %s", out);

    snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s --chunks 1 --cache-type-v-layers 2-4:q8_0 2>&1", bin, model, base);
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc != 0 && count_lines(out) == 1 && strstr(out, "layer 4"), "layer 4 of 4: rc %d, '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s --cache-type-k-layers 0-1:q7_0 2>&1", bin, model, base);
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc != 0 && count_lines(out) == 1 && strstr(out, "q7_0"), "unknown type: rc %d, '%s'", rc, out);
}

/* run and perplexity take the same flags (one parser): a bad spec is an
 * error in both, a good one runs. */
TEST(cli_run_and_perplexity_take_layer_types) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024], cmd[4096];
    static char out[8192];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'The licence' -n 4 --temp 0 -t 1 --cache-type-k-layers 0:q8_0,1-3:q4_0 2>&1",
             bin, model);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "K types by layer: q8_0 q4_0 q4_0 q4_0"), "run: rc %d, '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 128 --chunks 1 -t 1 --cache-type-v-layers 1:q4_0 2>&1", bin,
             model, text);
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "V types by layer: f16 q4_0 f16 f16") && strstr(out, "Final estimate"),
          "perplexity: rc %d, '%s'", rc, out);
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s --cache-type-v-layers 2-1:q4_0 2>&1", bin, model, text);
    rc = test_run(cmd, out, sizeof out);
    CHECK(rc != 0 && count_lines(out) == 1 && strstr(out, "bad layer range"), "bad range: rc %d, '%s'", rc, out);
}
