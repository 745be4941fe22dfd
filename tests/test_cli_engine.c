/* test_cli_engine.c - the model commands end to end through the kvq
 * binary ($KVQ_BIN): run's stdout against greedy.txt, perplexity against
 * README's printed PPL, kld's output layout and JSON, info, and every
 * bad-input case giving exit status 1 with exactly one line. */
#include "test.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

static const char *need_bin(void) { return test_kvq_bin(); }

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Run a command whose stderr is dropped (stdout only). */
static int run_stdout(const char *cmd, char *out, size_t cap) {
    char full[4096];
    if (snprintf(full, sizeof full, "{ %s 2>/dev/null; }", cmd) >= (int)sizeof full) return -1;
    return test_run(full, out, cap);
}

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

TEST(cli_run_matches_llama_completion_stdout) {
    const char *bin = need_bin();
    char model[1024], greedy[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(greedy, sizeof greedy, "golden/greedy.txt"))
        SKIP("../shared not found");
    FILE *f = fopen(greedy, "r");
    CHECK(f, "cannot open %s", greedy);
    static char line[8192];
    bool in_section = false, found = false;
    static uint8_t want[2048];
    size_t want_len = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "== ", 3)) in_section = !strncmp(line, "== stories260K", 14);
        else if (in_section && !strncmp(line, "stdout_hex: ", 12)) {
            for (const char *h = line + 12; hexval(h[0]) >= 0 && hexval(h[1]) >= 0 && want_len < sizeof want; h += 2)
                want[want_len++] = (uint8_t)(hexval(h[0]) * 16 + hexval(h[1]));
            found = true;
        }
    }
    fclose(f);
    CHECK(found && want_len > 20, "no stories260K stdout_hex in greedy.txt");
    char cmd[2048];
    static char out[4096];
    CHECK(snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 64 --temp 0 -c 512 -t 2", bin, model) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq run exited %d", rc);
    size_t len = strlen(out), same = 0;
    while (same < len && same < want_len && (uint8_t)out[same] == want[same]) same++;
    CHECK(len == want_len && same == len, "stdout differs from llama-completion's at byte %zu (got %zu, want %zu bytes)",
          same, len, want_len);
}

/* README §2: "| `stories260K.gpl3.c128.kld` | stories260K.gguf | 70.2651 ± ..." */
static bool readme_ppl(const char *kld_name, double *ppl) {
    char p[1024];
    if (!test_shared_path(p, sizeof p, "golden/README.md")) return false;
    FILE *f = fopen(p, "r");
    if (!f) return false;
    char line[1024], key[256];
    snprintf(key, sizeof key, "| `%s` |", kld_name);
    bool ok = false;
    while (!ok && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, strlen(key))) continue;
        const char *bar = strchr(line + strlen(key), '|');
        ok = bar && sscanf(bar + 1, "%lf", ppl) == 1;
    }
    fclose(f);
    return ok;
}

TEST(cli_perplexity_matches_llama) {
    const char *bin = need_bin();
    char model[1024], text[1024];
    double want;
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    CHECK(readme_ppl("stories260K.gpl3.c128.kld", &want), "no stories260K row in golden/README.md");
    char cmd[4096];
    static char out[8192];
    /* all 16 chunks to compare with llama.cpp; a sanitizer run checks the format on 2 */
    const int chunks = test_sanitized() ? 2 : 16;
    CHECK(snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 128 -b 128 --chunks %d -t 2 -ctk f16 -ctv f16", bin,
                   model, text, chunks) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq perplexity exited %d: %s", rc, out);
    const char *fe = strstr(out, "Final estimate: PPL = ");
    double got = 0, se = 0;
    CHECK(fe && sscanf(fe, "Final estimate: PPL = %lf +/- %lf", &got, &se) == 2, "no Final estimate line in: %s", out);
    CHECK(se > 0, "no error estimate");
    if (chunks == 16) CHECK(fabs(got / want - 1.0) < 0.001, "PPL %.4f, llama.cpp %.4f", got, want);
    /* smaller batches than the chunk: same positions, same result */
    CHECK(snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s -c 128 -b 48 --chunks %d -t 2 -ctk f16 -ctv f16", bin,
                   model, text, chunks) < (int)sizeof cmd, "command too long");
    rc = run_stdout(cmd, out, sizeof out);
    double got_b = 0;
    fe = strstr(out, "Final estimate: PPL = ");
    CHECK(rc == 0 && fe && sscanf(fe, "Final estimate: PPL = %lf", &got_b) == 1, "-b 48 run failed: %s", out);
    CHECK(fabs(got_b / got - 1.0) < 1e-4, "PPL with -b 48 %.4f differs from -b 128 %.4f", got_b, got);
}

TEST(cli_kld_layout_and_json) {
    const char *bin = need_bin();
    char model[1024], base[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128.gguf") ||
        !test_shared_path(base, sizeof base, "golden/qwen3-h128.gpl3.c128.kld"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[16384];
    CHECK(snprintf(cmd, sizeof cmd, "%s kld -m %s --kl-divergence-base %s --kl-divergence --chunks 2 -t 2 -ctk q4_0 -ctv q4_0",
             bin, model, base) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq kld exited %d: %s", rc, out);
    const char *labels[] = { "Mean PPL(Q)", "Mean PPL(base)", "Mean    KLD:", "Median  KLD:", "99.9%   KLD:",
                             "Maximum KLD:", "Same top p:" };
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++)
        CHECK(strstr(out, labels[i]), "no '%s' in kld output", labels[i]);
    double kld = -1;
    const char *mk = strstr(out, "Mean    KLD:");
    CHECK(sscanf(mk, "Mean    KLD: %lf", &kld) == 1 && kld > 0, "a q4_0 cache must give a positive KLD (got %g)", kld);

    CHECK(snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s --chunks 2 -t 2 --json", bin, model, base) < (int)sizeof cmd, "command too long");
    rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0 && count_lines(out) == 1, "kld --json: exit %d, %d lines", rc, count_lines(out));
    const char *keys[] = { "n_tokens", "ppl_q", "ppl_base", "mean_kld", "mean_kld_se", "median_kld", "p90_kld",
                           "p99_kld", "p99_9_kld", "max_kld", "same_top_p", "rms_dp", "kv_bytes", "kv_bytes_bf16",
                           "size_pct", "cache_k", "cache_v", "rot_k", "rot_v", "tail_tokens", "sink_tokens",
                           "pp_tps", "tg_tps" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char k[64];
        snprintf(k, sizeof k, "\"%s\":", keys[i]);
        CHECK(strstr(out, k), "no key %s in: %s", k, out);
    }
    long n_tokens = 0;
    CHECK(sscanf(strstr(out, "\"n_tokens\":"), "\"n_tokens\": %ld", &n_tokens) == 1 && n_tokens == 2 * 63,
          "n_tokens %ld, expected 2 chunks x 63", n_tokens);
}

TEST(cli_info_prints_model) {
    const char *bin = need_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen2-h64.gguf")) SKIP("../shared not found");
    char cmd[2048];
    static char out[16384];
    CHECK(snprintf(cmd, sizeof cmd, "%s info -m %s", bin, model) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq info exited %d", rc);
    CHECK(strstr(out, "qwen2") && strstr(out, "NEOX"), "architecture/RoPE missing: %s", out);
    CHECK(strstr(out, "q4_0") && strstr(out, "rotation"), "cache table or rotation rule missing: %s", out);
}

/* Each case must exit 1 and print exactly one line (stderr included). */
TEST(cli_engine_bad_input_one_line) {
    const char *bin = need_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    char model[1024], text[1024], base[1024], corrupt[256];
    bool shared = test_shared_path(model, sizeof model, "models/stories260K.gguf") &&
                  test_shared_path(text, sizeof text, "golden/README.md") &&
                  test_shared_path(base, sizeof base, "golden/stories260K.gpl3.c128.kld");
    snprintf(corrupt, sizeof corrupt, "/tmp/kvq_test_corrupt_%d.gguf", (int)getpid());
    FILE *f = fopen(corrupt, "wb");
    CHECK(f, "cannot write %s", corrupt);
    fputs("GGUF\x03\0\0\0 this is not a model", f);
    fclose(f);
    const char *m = shared ? model : "/nonexistent.gguf";
    char cases[][1200] = { "", "", "", "", "", "", "", "", "", "", "", "" };
    int n = 0;
    CHECK(snprintf(cases[n++], 1200, "%s run -p hello", bin) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s run -m /nonexistent/model.gguf -p hello", bin) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s run -m %s -p hello", bin, corrupt) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s run -m %s -p hello -c 0", bin, m) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s run -m %s -p hello -c 999999999", bin, m) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s run -m %s -p hello -ctk q9_9", bin, m) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s perplexity -m %s -f %s --bogus", bin, m, m) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s kld -m %s", bin, m) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s info", bin) < 1200, "command too long");
    CHECK(snprintf(cases[n++], 1200, "%s bench -m %s -t 0", bin, m) < 1200, "command too long");
    if (shared) {
        CHECK(snprintf(cases[n++], 1200, "%s kld -m %s --base %s -f %s", bin, model, base, text) < 1200, "command too long");  /* other text */
        CHECK(snprintf(cases[n++], 1200, "%s kld -m %s --base %s", bin, model, text) < 1200, "command too long");              /* not a base */
    }
    static char out[8192];
    for (int i = 0; i < n; i++) {
        int rc = test_run(cases[i], out, sizeof out);
        if (rc != 1 || count_lines(out) != 1) { remove(corrupt); }
        CHECK(rc == 1, "'%s' exited %d: %s", cases[i], rc, out);
        CHECK(count_lines(out) == 1 && strstr(out, "error"), "'%s' printed %d lines: %s", cases[i], count_lines(out), out);
    }
    remove(corrupt);
}

/* --kl-divergence-base FILE (without --kl-divergence) writes llama.cpp's
 * format: same header fields and tokens as llama.cpp's own file for the
 * same text, and kvq reads it back. */
TEST(cli_kld_save_base_matches_llama_layout) {
    const char *bin = need_bin();
    char model[1024], text[1024], base[1024], out_path[128];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt") ||
        !test_shared_path(base, sizeof base, "golden/stories260K.gpl3.c128.kld"))
        SKIP("../shared not found");
    snprintf(out_path, sizeof out_path, "/tmp/kvq_test_save_%d.kld", (int)getpid());
    char cmd[4096];
    static char out[8192];
    CHECK(snprintf(cmd, sizeof cmd, "%s kld -m %s -f %s -c 128 --chunks 2 -t 2 -ctk f32 -ctv f32 --kl-divergence-base %s",
                   bin, model, text, out_path) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "save-base exited %d: %s", rc, out);
    FILE *a = fopen(out_path, "rb"), *b = fopen(base, "rb");
    static uint8_t ha[20 + 4 * 256], hb[20 + 4 * 256];
    bool read_ok = a && b && fread(ha, 1, sizeof ha, a) == sizeof ha && fread(hb, 1, sizeof hb, b) == sizeof hb;
    if (a) fclose(a);
    if (b) fclose(b);
    CHECK(read_ok, "cannot read the two base files");
    CHECK(!memcmp(ha, hb, 16), "magic, n_ctx or n_vocab differ from llama.cpp's file");
    CHECK(ha[16] == 2 && ha[17] == 0, "n_chunk must be 2");
    CHECK(!memcmp(ha + 20, hb + 20, 4 * 256), "the first 256 tokens differ from llama.cpp's file");
    CHECK(snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s -f %s -t 2 -ctk f32 -ctv f32 --json", bin, model, out_path,
                   text) < (int)sizeof cmd, "command too long");
    rc = run_stdout(cmd, out, sizeof out);
    remove(out_path);
    double kld = 1;
    const char *k = strstr(out, "\"mean_kld\":");
    CHECK(rc == 0 && k && sscanf(k, "\"mean_kld\": %lf", &kld) == 1, "reading back failed (%d): %s", rc, out);
    CHECK(fabs(kld) < 1e-5, "the same run against its own base: mean KLD %g", kld);
}

/* bench prints a table per depth with one row per configuration (timings
 * are not checked). */
TEST(cli_bench_rows_per_depth) {
    const char *bin = need_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128-q4_k.gguf")) SKIP("../shared not found");
    char cmd[2048];
    static char out[8192];
    CHECK(snprintf(cmd, sizeof cmd, "%s bench -m %s -p 16 -n 4 -r 1 -d 0,24 -t 2 -ctk q8_0 -ctv q4_0", bin, model) <
              (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq bench exited %d: %s", rc, out);
    CHECK(strstr(out, "2 threads") && strstr(out, "context 44 (trained 4096)"), "header lacks threads/context: %s", out);
    const char *d0 = strstr(out, "### depth 0\n"), *d24 = strstr(out, "### depth 24\n");
    CHECK(d0 && d24 && d0 < d24, "tables for depths 0 and 24 missing: %s", out);
    CHECK(strstr(d0, "| q8_0/q4_0 | K 128 / V 64 |") && strstr(d24, "| q8_0/q4_0 | K 128 / V 64 |"),
          "a row per depth expected: %s", out);
    CHECK(!strstr(out, "| f16/f16 |"), "only the -ctk/-ctv cache expected: %s", out);
}

/* --types with --rot both: f16 once, each block type rotated and not,
 * ratios to f16, and the rotation cost line; past the trained context the
 * run still works (with a warning on stderr). */
TEST(cli_bench_types_and_rotation_cost) {
    const char *bin = need_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128-q8_0.gguf")) SKIP("../shared not found");
    char cmd[2048];
    static char out[16384];
    CHECK(snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8 -n 2 -r 2 -d 4090 -t 1 --types f16,q4_0,q8_0 --rot both",
                   bin, model) < (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq bench exited %d: %s", rc, out);
    CHECK(strstr(out, "context 4100 (trained 4096)"), "context line missing: %s", out);
    CHECK(strstr(out, "| f16/f16 | off |") && strstr(out, "| q4_0/q4_0 | K 128 / V 64 |") &&
          strstr(out, "| q4_0/q4_0 | off |") && strstr(out, "| q8_0/q8_0 | off |"), "rows missing: %s", out);
    const char *f16_row = strstr(out, "| f16/f16 | off |");
    CHECK(f16_row && strstr(f16_row, "| 1.00 | 1.00 | 1.00 |"), "f16 row is not its own reference: %s", out);
    CHECK(strstr(out, "Rotation cost at depth 4090") && strstr(out, " q4_0 ") && strstr(out, " q8_0 "),
          "rotation cost line missing: %s", out);
}

/* A bare run measures the default type set; --fill model fills the depth
 * with the model's own prefill in -b batches. */
TEST(cli_bench_default_types_and_model_fill) {
    const char *bin = need_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128-q8_0.gguf")) SKIP("../shared not found");
    char cmd[2048];
    static char out[16384];
    CHECK(snprintf(cmd, sizeof cmd, "%s bench -m %s -p 4 -n 1 -r 1 -t 1", bin, model) < (int)sizeof cmd,
          "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq bench exited %d: %s", rc, out);
    const char *expected[] = { "| f16/f16 |", "| q8_0/q8_0 |", "| q5_0/q5_0 |", "| q4_0/q4_0 |", "| iq4_nl/iq4_nl |",
                               "| q3_0/q3_0 |", "| q2_0/q2_0 |" };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        CHECK(strstr(out, expected[i]), "default set lacks %s: %s", expected[i], out);
    CHECK(!strstr(out, "| f32/f32 |") && !strstr(out, "| q4_1/q4_1 |"), "f32/q4_1 are not in the default set: %s", out);
    CHECK(snprintf(cmd, sizeof cmd, "%s bench -m %s -p 4 -n 2 -r 1 -t 1 -d 40 -b 16 --fill model -ctk q4_0 -ctv q4_0",
                   bin, model) < (int)sizeof cmd, "command too long");
    rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq bench --fill model exited %d: %s", rc, out);
    CHECK(strstr(out, "the model's prefill") && strstr(out, "### depth 40") &&
          strstr(out, "| q4_0/q4_0 |"), "model-filled run missing: %s", out);
}

/* Bad bench flags: one error line each. */
TEST(cli_bench_rejects_bad_types_and_rot) {
    const char *bin = need_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/qwen3-h128-q8_0.gguf")) SKIP("../shared not found");
    const char *flags[] = { "--types q4_0,nope", "--types q4_k", "--rot sideways", "--fill magic",
                            "--types q4_0 -ctk q8_0", "--types ,", "-b 0" };
    static char out[8192];
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char cmd[2048];
        CHECK(snprintf(cmd, sizeof cmd, "%s bench -m %s -p 4 -n 1 -r 1 %s", bin, model, flags[i]) < (int)sizeof cmd,
              "command too long");
        int rc = test_run(cmd, out, sizeof out);
        CHECK(rc == 1, "'%s' exited %d: %s", flags[i], rc, out);
        CHECK(count_lines(out) == 1 && strstr(out, "error"), "'%s' printed %d lines: %s", flags[i], count_lines(out), out);
    }
}

/* EVAL issue proof: a llama.cpp base file is read and gives the PPL(base)
 * documented in ../shared/golden/README.md (caveat 3: llama-h64 907.4893,
 * from the stored 16-bit log-probs, not llama.cpp's "Final estimate"). */
TEST(cli_kld_golden_base_ppl) {
    const char *bin = need_bin();
    char model[1024], base[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/synth/llama-h64.gguf") ||
        !test_shared_path(base, sizeof base, "golden/llama-h64.gpl3.c128.kld"))
        SKIP("../shared not found");
    char cmd[4096];
    static char out[16384];
    CHECK(snprintf(cmd, sizeof cmd, "%s kld -m %s --base %s -t 2 -ctk f32 -ctv f32", bin, model, base) <
              (int)sizeof cmd, "command too long");
    int rc = run_stdout(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq kld exited %d: %s", rc, out);
    const char *line = strstr(out, "Mean PPL(base)");
    double ppl_base = 0;
    CHECK(line && sscanf(line, "Mean PPL(base) : %lf", &ppl_base) == 1, "no PPL(base) in: %.300s", out);
    CHECK(fabs(ppl_base - 907.4893) < 0.0005, "PPL(base) %.4f, the golden README says 907.4893", ppl_base);
}
