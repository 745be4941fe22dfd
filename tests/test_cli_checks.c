/* test_cli_checks.c - the command line never reports a silent wrong
 * number: a failed write to stdout fails the command, a generation cut
 * short by the context says so, a corrupt model is one error line, and a
 * llama.cpp KLD base is checked against the model (base_check.h) with
 * progress printed per chunk.  Models and texts are the tiny fixtures of
 * tests/model_writer.h, so nothing here needs ../shared. */
#include "test.h"
#include "model_writer.h"

#include <string.h>
#include <unistd.h>

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static int count_of(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* A fixture model and text under /tmp, removed by fixtures_remove. */
typedef struct fixtures { char model[128], other[128], text[128], base[128], exact[128], broken[128]; } fixtures;

static bool fixtures_make(fixtures *f) {
    const int pid = (int)getpid();
    snprintf(f->model, sizeof f->model, "/tmp/kvq_cli_model_%d.gguf", pid);
    snprintf(f->other, sizeof f->other, "/tmp/kvq_cli_other_%d.gguf", pid);
    snprintf(f->text, sizeof f->text, "/tmp/kvq_cli_text_%d.txt", pid);
    snprintf(f->base, sizeof f->base, "/tmp/kvq_cli_base_%d.kld", pid);
    snprintf(f->exact, sizeof f->exact, "/tmp/kvq_cli_exact_%d.kld", pid);
    snprintf(f->broken, sizeof f->broken, "/tmp/kvq_cli_broken_%d.gguf", pid);
    tm_spec s = tm_spec_default();
    s.eos = 0xFFFFFFFFll;                  /* no EOS: generation runs to -n or the context */
    bool ok = tm_save_spec(&s, f->model);
    s.seed = 2;                            /* another model, the same vocabulary */
    ok = ok && tm_save_spec(&s, f->other);
    tm_file b;
    s.seed = 1;
    tm_write(&b, &s);
    ok = ok && tm_poke_f32(&b, "output_norm.weight", 3, NAN) && tm_save(&b, f->broken);
    tm_free(&b);
    return ok && tm_save_text(f->text, 400, 5);
}

static void fixtures_remove(const fixtures *f) {
    remove(f->model);
    remove(f->other);
    remove(f->text);
    remove(f->base);
    remove(f->exact);
    remove(f->broken);
}

/* cmd (printf format) exits with `rc` and its output holds `want`. */
#define RUN_EXPECT(out_, rc_, want_, ...)                                                            \
    do {                                                                                              \
        char cmd_[2048];                                                                              \
        CHECK(snprintf(cmd_, sizeof cmd_, __VA_ARGS__) < (int)sizeof cmd_, "command too long");      \
        int got_ = test_run(cmd_, out_, sizeof out_);                                                 \
        CHECK(got_ == (rc_), "'%s' exited %d (want %d): %s", cmd_, got_, (rc_), out_);                \
        CHECK(!(want_) || strstr(out_, (want_) ? (want_) : ""), "'%s': no '%s' in: %s", cmd_,         \
              (want_) ? (want_) : "", out_);                                                          \
    } while (0)

/* Every command whose results go to stdout fails when they cannot be
 * written (/dev/full), with one error line. */
TEST(cli_stdout_write_error_fails_every_command) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    if (access("/dev/full", W_OK) != 0) SKIP("/dev/full not available");
    fixtures f;
    if (!fixtures_make(&f)) { fixtures_remove(&f); CHECK(0, "cannot write the fixtures"); }
    const char *const args[] = {
        "--version", "--help", "info -m %s", "tokenize -m %s -p 'the cat sat'", "quant-test --type q4_0 --dim 64",
        "run -m %s -p 'the cat' -n 4 --temp 0 -c 32", "perplexity -m %s -f %T -c 32 --chunks 1 --json",
    };
    static char out[8192];
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char a[512] = "";
        /* %s = the model, %T = the text */
        for (const char *p = args[i]; *p && strlen(a) + 200 < sizeof a; p++) {
            if (p[0] == '%' && p[1] == 's') { strcat(a, f.model); p++; }
            else if (p[0] == '%' && p[1] == 'T') { strcat(a, f.text); p++; }
            else strncat(a, p, 1);
        }
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "{ %s %s >/dev/full; }", bin, a);
        int rc = test_run(cmd, out, sizeof out);
        int errors = count_of(out, "error");
        if (rc != 1 || errors != 1 || !strstr(out, "writing standard output")) fixtures_remove(&f);
        CHECK(rc == 1, "'%s' exited %d: %s", cmd, rc, out);
        CHECK(errors == 1 && strstr(out, "writing standard output"), "'%s': %s", cmd, out);
    }
    fixtures_remove(&f);
}

/* `run -n 100000 -c 64` stops at the context and says so (exit 0: the
 * output is good up to there); a run that fills the context exactly, or
 * stops at -n, has nothing to say. */
TEST(cli_run_says_when_the_context_is_full) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    fixtures f;
    if (!fixtures_make(&f)) { fixtures_remove(&f); CHECK(0, "cannot write the fixtures"); }
    static char out[16384];
    int n_prompt = 0;
    {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s -p 'the cat' --ids", bin, f.model);
        test_run(cmd, out, sizeof out);
        for (const char *p = out; *p; p++) n_prompt += *p == ',';
        n_prompt += strchr(out, '[') != NULL;
    }
    RUN_EXPECT(out, 0, "warning: the context is full (-c 64)",
               "{ %s run -m %s -p 'the cat' -n 100000 -c 64 --temp 0 >/dev/null; }", bin, f.model);
    const char *w = strstr(out, "stopped after ");
    int n_gen = 0, asked = 0;
    bool parsed = w && sscanf(w, "stopped after %d of the %d tokens", &n_gen, &asked) == 2;
    int fills = 64 - n_prompt;
    char plain[16384];
    RUN_EXPECT(plain, 0, NULL, "{ %s run -m %s -p 'the cat' -n %d -c 64 --temp 0 >/dev/null; }", bin, f.model, fills);
    bool quiet_full = !strstr(plain, "context is full");
    RUN_EXPECT(plain, 0, NULL, "{ %s run -m %s -p 'the cat' -n 5 -c 64 --temp 0 >/dev/null; }", bin, f.model);
    bool quiet_n = !strstr(plain, "context is full");
    fixtures_remove(&f);
    CHECK(n_prompt >= 2 && n_prompt < 10, "prompt of %d tokens ('%s')", n_prompt, out);
    CHECK(parsed && asked == 100000 && n_gen == fills, "prompt %d + generated %d != 64: %s", n_prompt, n_gen, out);
    CHECK(quiet_full, "-n %d fills the context exactly: nothing was cut short", fills);
    CHECK(quiet_n, "a run that stops at -n says nothing about the context");
}

/* A NaN weight: one error line naming the tensor, for every command that
 * loads the model (it was "PPL = nan +/- nan", exit 0). */
TEST(cli_corrupt_model_is_one_error_line) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    fixtures f;
    if (!fixtures_make(&f)) { fixtures_remove(&f); CHECK(0, "cannot write the fixtures"); }
    static char out[8192];
    char cmds[3][1024];
    snprintf(cmds[0], sizeof cmds[0], "%s perplexity -m %s -f %s -c 32", bin, f.broken, f.text);
    snprintf(cmds[1], sizeof cmds[1], "%s run -m %s -p hi -n 4 --temp 0", bin, f.broken);
    snprintf(cmds[2], sizeof cmds[2], "%s info -m %s", bin, f.broken);
    for (int i = 0; i < 3; i++) {
        int rc = test_run(cmds[i], out, sizeof out);
        bool one = rc == 1 && count_lines(out) == 1 && strstr(out, "'output_norm.weight'") && strstr(out, "nan");
        if (!one) fixtures_remove(&f);
        CHECK(one, "'%s' exited %d: %s", cmds[i], rc, out);
    }
    fixtures_remove(&f);
}

/* llama.cpp bases carry no model hash: this model's own base passes the
 * exact-cache check (and, without -f, a loud warning says the tokens
 * were not checked); another model's base with the same vocabulary is
 * refused unless --no-base-check; kvq's own base needs no such check.
 * kld and --save-base print one progress row per chunk. */
TEST(cli_kld_checks_a_llama_base_against_the_model) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    fixtures f;
    if (!fixtures_make(&f)) { fixtures_remove(&f); CHECK(0, "cannot write the fixtures"); }
    static char save[8192], own[16384], own_f[16384], other[8192], forced[16384], exact[16384];
    RUN_EXPECT(save, 0, "[3]", "%s kld -m %s -f %s -c 32 --chunks 3 --kl-divergence-base %s", bin, f.model, f.text,
               f.base);
    RUN_EXPECT(own, 0, "Mean    KLD:", "%s kld -m %s --base %s -ctk q4_0 -ctv q4_0", bin, f.model, f.base);
    RUN_EXPECT(own_f, 0, "base check:", "%s kld -m %s --base %s -f %s", bin, f.model, f.base, f.text);
    RUN_EXPECT(other, 1, "made with another model", "%s kld -m %s --base %s", bin, f.other, f.base);
    RUN_EXPECT(forced, 0, "compared anyway", "%s kld -m %s --base %s --no-base-check", bin, f.other, f.base);
    RUN_EXPECT(save, 0, NULL, "%s kld -m %s -f %s -c 32 --chunks 3 --save-base %s", bin, f.model, f.text, f.exact);
    RUN_EXPECT(exact, 0, "Mean    KLD:", "%s kld -m %s --base %s -ctk q8_0 -ctv q8_0", bin, f.model, f.exact);
    fixtures_remove(&f);
    CHECK(strstr(own, "WARNING: no -f TEXT") && strstr(own, "base check: vocabulary 326"), "no warning: %s", own);
    double kld_self = -1, kld_other = -1;
    const char *p = strstr(own, "mean KLD ");
    CHECK(p && sscanf(p, "mean KLD %lf", &kld_self) == 1 && fabs(kld_self) < 1e-3,
          "the model's own base is %g from it: %s", kld_self, own);
    CHECK(!strstr(own_f, "WARNING") && !strstr(own_f, "error"), "with -f TEXT the tokens were checked: %s", own_f);
    p = strstr(other, "mean KLD ");
    CHECK(p && sscanf(p, "mean KLD %lf", &kld_other) == 1 && kld_other > 0.05, "another model: %s", other);
    CHECK(count_of(other, "error") == 1, "one error line: %s", other);
    CHECK(!strstr(exact, "base check"), "kvq's own base is checked by its model hash: %s", exact);
    /* progress: a header, then chunks 1..3 */
    CHECK(strstr(own, "chunk  PPL(Q)") && strstr(own, "\n    1 ") && strstr(own, "\n    3 ") &&
          !strstr(own, "\n    4 "), "no progress rows: %s", own);
    CHECK(strstr(save, "[1]") && strstr(save, "[3]"), "no --save-base progress: %s", save);
}
