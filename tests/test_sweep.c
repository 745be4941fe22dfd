/* test_sweep.c - the sweep's configuration grid (src/eval/sweep_grid.c), its
 * list parsers, and `kvq sweep` end to end on a small model: files,
 * reference row, sizes, resuming, refusing to mix experiments. */
#include "test.h"
#include "report.h"
#include "sweep_grid.h"

#include <ctype.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static kvq_type T(const char *name) { return kvq_type_from_name(name); }

/* By hand: f32 reference; f16/f16 once (exact pair: no rotation or tail
 * variants, said in the notes); q8_0/q8_0, q4_0/q4_0 and q8_0/q4_0 each at
 * tails 0 and 64 x rot on/off; the repeated q4_0/q4_0 pair and the f32/f32
 * pair (= the reference) add nothing: 1 + 1 + 3*4 = 14.  A tail longer
 * than the context is an error naming it, not a skipped row. */
TEST(sweep_grid_by_hand) {
    const kvq_type types[] = { T("f16"), T("q8_0"), T("q4_0"), T("f32") };
    const kvq_sweep_pair pairs[] = { { T("q8_0"), T("q4_0") }, { T("q4_0"), T("q4_0") } };
    const int tails[] = { 0, 64, 1024 };
    char notes[512] = "";
    kvq_sweep_spec spec = { KVQ_TYPE_F32, types, 4, pairs, 2, tails, 3, KVQ_SWEEP_ROT_BOTH, 128, notes, sizeof notes };
    kvq_sweep_config *c = NULL;
    size_t n = 0;
    kvq_error err = { 0 };
    CHECK(kvq_sweep_grid(&spec, &c, &n, &err) == KVQ_ERR_ARG && strstr(err.msg, "tail 1024") && !c,
          "tail 1024 > n_ctx 128: '%s'", err.msg);
    spec.n_tails = 2;
    CHECK(kvq_sweep_grid(&spec, &c, &n, &err) == KVQ_OK, "grid failed: %s", err.msg);
    CHECK(strstr(notes, "f16/f16: exact on both sides"), "no note for the exact pair: '%s'", notes);
    static const char *const want[] = {
        "f32/f32", "f16/f16",
        "q8_0/q8_0", "q8_0/q8_0 rot-off", "q8_0/q8_0 tail64", "q8_0/q8_0 tail64 rot-off",
        "q4_0/q4_0", "q4_0/q4_0 rot-off", "q4_0/q4_0 tail64", "q4_0/q4_0 tail64 rot-off",
        "q8_0/q4_0", "q8_0/q4_0 rot-off", "q8_0/q4_0 tail64", "q8_0/q4_0 tail64 rot-off",
    };
    size_t nw = sizeof want / sizeof want[0];
    bool ok = n == nw;
    size_t bad = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (strcmp(c[i].label, want[i])) { ok = false; bad = i; }
    bool ref_first = n > 0 && c[0].is_reference;
    int n_ref = 0;
    bool slugs_safe = true, slugs_unique = true;
    for (size_t i = 0; i < n; i++) {
        n_ref += c[i].is_reference;
        for (const char *p = c[i].slug; *p; p++)
            slugs_safe &= isalnum((unsigned char)*p) || *p == '_' || *p == '-' || *p == '.';
        for (size_t j = 0; j < i; j++) slugs_unique &= strcmp(c[i].slug, c[j].slug) != 0;
    }
    bool slug_form = n == nw && !strcmp(c[13].slug, "q8_0-q4_0_tail64_rotoff");
    bool modes = n == nw && c[1].rot == KVQ_ROT_AUTO && c[2].rot == KVQ_ROT_ON && c[3].rot == KVQ_ROT_OFF &&
                 c[4].tail_tokens == 64;
    char got[64];
    snprintf(got, sizeof got, "%s", ok || bad >= n ? "" : c[bad].label);
    free(c);
    CHECK(n == nw, "%zu configurations, want %zu", n, nw);
    CHECK(ok, "configuration %zu is '%s', want '%s'", bad, got, want[bad]);
    CHECK(ref_first && n_ref == 1, "reference not first and unique");
    CHECK(slugs_safe && slugs_unique && slug_form, "slugs not file-name safe, unique and of the documented form");
    CHECK(modes, "rotation modes or tails wrong");
}

TEST(sweep_grid_rotation_choices) {
    const kvq_type types[] = { T("q4_0"), T("bf16") };
    const int tails[] = { 0 };
    size_t counts[3];
    for (int r = 0; r < 3; r++) {
        kvq_sweep_spec spec = { KVQ_TYPE_F32, types, 2, NULL, 0, tails, 1, (kvq_sweep_rot)r, 512, NULL, 0 };
        kvq_sweep_config *c = NULL;
        CHECK(kvq_sweep_grid(&spec, &c, &counts[r], NULL) == KVQ_OK, "grid failed");
        bool off_only = true;
        for (size_t i = 0; i < counts[r]; i++)
            if (c[i].type_k == T("q4_0") && r == KVQ_SWEEP_ROT_OFF) off_only &= c[i].rot == KVQ_ROT_OFF;
        free(c);
        CHECK(off_only, "--rot off ran a rotated configuration");
    }
    /* reference + bf16 + q4_0 on | off | both */
    CHECK(counts[KVQ_SWEEP_ROT_ON] == 3 && counts[KVQ_SWEEP_ROT_OFF] == 3 && counts[KVQ_SWEEP_ROT_BOTH] == 4,
          "counts on/off/both %zu/%zu/%zu, want 3/3/4", counts[0], counts[1], counts[2]);
    kvq_sweep_spec bad = { T("q8_0"), types, 2, NULL, 0, tails, 1, KVQ_SWEEP_ROT_ON, 512, NULL, 0 };
    kvq_sweep_config *c = NULL;
    size_t n;
    kvq_error err = { 0 };
    CHECK(kvq_sweep_grid(&bad, &c, &n, &err) == KVQ_ERR_ARG && strstr(err.msg, "exact"),
          "a quantised reference was accepted: %s", err.msg);
}

/* Every family gets every requested tail: KVarN and TurboQuant pairs are
 * not exact pairs (they once vanished from a sweep); without a block side
 * they run once per tail whatever --rot says, and the notes say so. */
TEST(sweep_grid_every_family_every_tail) {
    const kvq_type types[] = { T("turbo3"), T("kvarn4"), T("q4_0") };
    const kvq_sweep_pair pairs[] = { { T("q8_0"), T("q4_0") }, { T("turbo3_tcq"), T("f16") } };
    const int tails[] = { 0, 64 };
    for (int r = 0; r < 3; r++) {
        char notes[512] = "";
        kvq_sweep_spec spec = { KVQ_TYPE_F32, types, 3, pairs, 2, tails, 2, (kvq_sweep_rot)r, 4096, notes, sizeof notes };
        kvq_sweep_config *c = NULL;
        size_t n = 0;
        CHECK(kvq_sweep_grid(&spec, &c, &n, NULL) == KVQ_OK, "grid failed");
        const int modes = r == KVQ_SWEEP_ROT_BOTH ? 2 : 1;
        /* reference + (turbo3, kvarn4, turbo3_tcq/f16) x 2 tails + (q4_0, q8_0/q4_0) x 2 tails x modes */
        const size_t want = 1 + 3 * 2 + 2 * 2 * (size_t)modes;
        int turbo_tail = 0, kvarn_tail = 0, mixed_tail = 0;
        for (size_t i = 0; i < n; i++) {
            turbo_tail += c[i].type_k == T("turbo3") && c[i].tail_tokens == 64 && c[i].rot == KVQ_ROT_AUTO;
            kvarn_tail += c[i].type_k == T("kvarn4") && c[i].tail_tokens == 64 && !strcmp(c[i].label, "kvarn4/kvarn4 tail64");
            mixed_tail += c[i].type_k == T("turbo3_tcq") && c[i].type_v == T("f16") && c[i].tail_tokens == 64;
        }
        free(c);
        CHECK(n == want, "--rot %d: %zu configurations, want %zu", r, n, want);
        CHECK(turbo_tail == 1 && kvarn_tail == 1 && mixed_tail == 1, "--rot %d: tail rows turbo %d kvarn %d mixed %d",
              r, turbo_tail, kvarn_tail, mixed_tail);
        CHECK((r == KVQ_SWEEP_ROT_ON) == !strstr(notes, "turbo3/turbo3: rotation is part of the format"),
              "--rot %d: notes '%s'", r, notes);
    }
}

TEST(sweep_list_parsers) {
    kvq_error err = { 0 };
    kvq_type *ty = NULL;
    kvq_sweep_pair *p = NULL;
    int *tl = NULL;
    size_t n = 0;
    CHECK(kvq_sweep_parse_types("q8_0,q4_0,f16", &ty, &n, &err) == KVQ_OK && n == 3 && ty[1] == T("q4_0"),
          "types: %s", err.msg);
    free(ty);
    CHECK(kvq_sweep_parse_pairs("q8_0/q4_0,f16/q4_1", &p, &n, &err) == KVQ_OK && n == 2 && p[1].k == T("f16") &&
          p[1].v == T("q4_1"), "pairs: %s", err.msg);
    free(p);
    CHECK(kvq_sweep_parse_tails("0,1024", &tl, &n, &err) == KVQ_OK && n == 2 && tl[1] == 1024, "tails: %s", err.msg);
    free(tl);
    static const struct { int which; const char *list, *want; } bad[] = {
        { 0, "q8_0,,q4_0", "empty item" }, { 0, "q9_9", "'q9_9'" }, { 0, "", "empty list" },
        { 0, "q4_k", "'q4_k'" },                                  /* weight-only type */
        { 1, "q8_0", "not K/V" }, { 1, "q8_0/zz", "'zz'" }, { 2, "-1", "'-1'" }, { 2, "12x", "'12x'" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        err.msg[0] = 0;
        kvq_status st = bad[k].which == 0 ? kvq_sweep_parse_types(bad[k].list, &ty, &n, &err)
                      : bad[k].which == 1 ? kvq_sweep_parse_pairs(bad[k].list, &p, &n, &err)
                                          : kvq_sweep_parse_tails(bad[k].list, &tl, &n, &err);
        CHECK(st == KVQ_ERR_ARG && strstr(err.msg, bad[k].want), "'%s': status %d '%s' (want '%s')", bad[k].list,
              (int)st, err.msg, bad[k].want);
    }
}

/* ------------------------------------------------------------ the CLI */

static bool file_nonempty(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

static void remove_tree(const char *dir) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    test_run(cmd, NULL, 0);
}

static int count_str(const char *s, const char *w) {
    int n = 0;
    for (; (s = strstr(s, w)) != NULL; s++) n++;
    return n;
}

static char *slurp(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

TEST(cli_sweep_end_to_end_and_resume) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    char dir[] = "/tmp/kvq_sweep_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp failed");
    char cmd[4096];
    static char out[1 << 15];
    snprintf(cmd, sizeof cmd, "%s sweep -m %s -f %s -c 64 --chunks 2 --types q8_0,q4_0 --pairs q8_0/q4_0 "
             "--tails 0 --rot on -t 2 --jobs 2 -o %s", bin, model, text, dir);
    int rc = test_run(cmd, out, sizeof out);
    bool files = file_nonempty(dir, "table.md") && file_nonempty(dir, "results.csv") &&
                 file_nonempty(dir, "results.json") && file_nonempty(dir, "ladder.md") &&
                 file_nonempty(dir, "plot.svg") && file_nonempty(dir, "reference.kvqb");
    bool progress = strstr(out, "[1/4] f32/f32 ... eta ?") && strstr(out, "[4/4] q8_0/q4_0 ... eta ");

    char csv_path[1024];
    snprintf(csv_path, sizeof csv_path, "%s/results.csv", dir);
    FILE *f = fopen(csv_path, "r");
    kvq_eval_row *rows = NULL;
    size_t n = 0;
    kvq_error err = { 0 };
    kvq_status st = f ? kvq_report_read_csv(f, &rows, &n, &err) : KVQ_ERR_IO;
    if (f) fclose(f);
    bool shape = st == KVQ_OK && n == 4 && rows[0].is_reference && !strcmp(rows[1].label, "q8_0/q8_0") &&
                 !strcmp(rows[3].label, "q8_0/q4_0");
    /* exact cache: no divergence, 100% precision, twice the bf16 bytes;
     * q8_0: 34 bytes per 32 values vs 64 -> 53.125% */
    /* (the stored log-probs are float: a few 1e-9 nats of rounding) */
    bool ref_ok = shape && fabs(rows[0].median_kld) < 1e-6 && fabs(rows[0].mean_kld) < 1e-6 &&
                  fabs(rows[0].mean_precision - 100.0) < 1e-9 && fabs(rows[0].size_pct - 200.0) < 1e-9;
    bool sizes = shape && fabs(rows[1].size_pct - 53.125) < 1e-9 && fabs(rows[2].size_pct - 28.125) < 1e-9 &&
                 fabs(rows[3].size_pct - (53.125 + 28.125) / 2) < 1e-9;
    bool quality = shape && rows[2].median_kld > rows[1].median_kld && rows[1].median_kld > 0 &&
                   rows[2].mean_precision < 100.0 && rows[1].same_top_p > 50 && rows[1].same_top_p <= 100 &&
                   rows[1].rot_k == 64 && rows[1].rot_v == 64 && rows[0].rot_k == 0 &&
                   rows[1].n_tokens == 2 * (64 - 1 - 32) && rows[1].pp_tps > 0 && rows[1].tg_tps > 0;
    free(rows);
    const char *svg = slurp(dir, "plot.svg");
    int markers = svg ? count_str(svg, "class=\"marker ") : -1;   /* not the "markers" group */
    const char *ladder = slurp(dir, "ladder.md");
    bool ladder_ok = ladder && strstr(ladder, "| reference | f32/f32 |");

    /* again: everything is stored, nothing runs */
    int rc2 = test_run(cmd, out, sizeof out);
    bool resumed = strstr(out, "4 configurations (4 already done)") && !strstr(out, "[1/");
    /* a result stored by another build (its file named for other
     * sources) is not resumed: that configuration runs again */
    char own[1024], other[1024];
    snprintf(own, sizeof own, "%s/runs/q8_0-q4_0.src%s.csv", dir, kvq_source_id());
    snprintf(other, sizeof other, "%s/runs/q8_0-q4_0.src0123456789abcdef.csv", dir);
    const bool renamed = rename(own, other) == 0;
    int rc4 = test_run(cmd, out, sizeof out);
    bool rebuilt = renamed && strstr(out, "4 configurations (3 already done)") && strstr(out, "q8_0/q4_0 ... eta") &&
                   file_nonempty(dir, "runs/q8_0-q4_0.src0123456789abcdef.csv");
    /* int8 activations in the same directory: their own reference and
     * runs, nothing of the f32 sweep reused, and the reports say so */
    char cmd8[4200];
    snprintf(cmd8, sizeof cmd8, "%s --act int8", cmd);
    int rc8 = test_run(cmd8, out, sizeof out);
    char run8[200];
    snprintf(run8, sizeof run8, "runs/q8_0-q4_0.act-int8.src%s.csv", kvq_source_id());
    bool apart = strstr(out, "4 configurations (0 already done)") && file_nonempty(dir, "reference.act-int8.kvqb") &&
                 file_nonempty(dir, run8);
    const char *json8 = slurp(dir, "results.json");
    bool said = json8 && strstr(json8, "\"activations\": \"int8\"");
    const char *md8 = slurp(dir, "table.md");
    said = said && md8 && strstr(md8, "Activations: int8");
    /* another context in the same directory: refused, one error line */
    snprintf(cmd, sizeof cmd, "{ %s sweep -m %s -f %s -c 32 --chunks 2 --types q8_0 --tails 0 -t 2 -o %s 2>&1 >/dev/null; }",
             bin, model, text, dir);
    int rc3 = test_run(cmd, out, sizeof out);
    bool refused = strstr(out, "belongs to another experiment") != NULL;
    remove_tree(dir);

    CHECK(rc == 0, "kvq sweep exited %d", rc);
    CHECK(files, "an output file is missing or empty");
    CHECK(progress, "progress lines missing");
    CHECK(shape, "results.csv: %zu rows (%s)", n, err.msg);
    CHECK(ref_ok, "reference row is not exact");
    CHECK(sizes, "size %% not as the block formats say");
    CHECK(quality, "KLD / precision / speed figures implausible");
    CHECK(markers == 4, "%d plot markers for 4 configurations", markers);
    CHECK(ladder_ok, "ladder.md has no reference row");
    CHECK(rc2 == 0 && resumed, "second run did not resume (rc %d)", rc2);
    CHECK(rc4 == 0 && rebuilt, "another build's stored result was resumed, or not run again (rc %d)", rc4);
    CHECK(rc3 == 1 && refused, "mixing experiments: rc %d, '%s'", rc3, out);
    CHECK(rc8 == 0 && apart, "--act int8 reused or did not write its own files (rc %d)", rc8);
    CHECK(said, "results.json / table.md do not name the int8 activations");
}

TEST(cli_sweep_bad_input) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    static const struct { const char *args, *want; } cases[] = {
        { "sweep -f x -o /tmp/x", "no model" },
        { "sweep -m x -f y", "no output directory" },
        { "sweep -m x -f y -o /tmp/x --rot sideways", "--rot" },
        { "sweep -m x -f y -o /tmp/x --jobs 0", "--jobs" },
        { "sweep -m x -f y -o /tmp/x --bogus", "unknown option" },
        { "sweep -m x -f y -o /tmp/x --ref-type q9", "unknown type" },
        { "sweep -m x -f y -o /tmp/x --act int4", "--act" },
        { "sweep -m x -f y -o /tmp/x --act int8 --drift 4", "--drift" },
    };
    char cmd[1024];
    static char out[4096];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        snprintf(cmd, sizeof cmd, "%s %s", bin, cases[k].args);
        int rc = test_run(cmd, out, sizeof out);
        int lines = 0;
        for (const char *p = out; *p; p++) lines += *p == '\n';
        CHECK(rc == 1 && lines == 1 && strstr(out, cases[k].want), "'%s': rc %d, %d lines: %s", cases[k].args, rc,
              lines, out);
    }
    snprintf(cmd, sizeof cmd, "%s sweep --help", bin);
    CHECK(test_run(cmd, out, sizeof out) == 0 && strstr(out, "--tails"), "--help failed");
}

/* Bad input is refused before OUTDIR exists; a file is not a directory. */
TEST(cli_sweep_refuses_before_creating_outdir) {
    const char *bin = test_kvq_bin();
    char model[1024], text[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/toy-h64.gguf") ||
        !test_shared_path(text, sizeof text, "text/gpl3.txt"))
        SKIP("../shared not found");
    char dir[] = "/tmp/kvq_sweepbad_XXXXXX";
    CHECK(mkdtemp(dir), "mkdtemp failed");
    char cmd[4096], out_dir[1100], file[1100];
    static char out[4096];
    snprintf(out_dir, sizeof out_dir, "%s/out", dir);
    snprintf(cmd, sizeof cmd, "%s sweep -m %s -f %s --types q8_0,zz -o %s", bin, model, text, out_dir);
    int rc1 = test_run(cmd, out, sizeof out);
    bool named = strstr(out, "unknown cache type 'zz'") != NULL;
    struct stat st;
    bool absent = stat(out_dir, &st) != 0;
    snprintf(file, sizeof file, "%s/file", dir);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    snprintf(cmd, sizeof cmd, "%s sweep -m %s -f %s -c 64 --chunks 1 --types f16 --pairs f16/f16 --tails 0 -o %s",
             bin, model, text, file);
    int rc2 = test_run(cmd, out, sizeof out);
    bool not_dir = strstr(out, "exists and is not a directory") != NULL;
    remove_tree(dir);
    CHECK(rc1 == 1 && named, "bad type: rc %d", rc1);
    CHECK(absent, "OUTDIR created although the input was refused");
    CHECK(rc2 == 1 && not_dir, "file as OUTDIR: rc %d: %s", rc2, out);
}
