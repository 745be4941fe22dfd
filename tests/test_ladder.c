/* test_ladder.c - the recommendation ladder (src/eval/ladder.c): a hand-made
 * sweep whose frontier was worked out by hand, a brute-force dominance
 * check on random points, input-order independence, and ladder.md. */
#include "test.h"
#include "ladder.h"

#include <string.h>

static kvq_eval_row mk(const char *label, double size, double median, bool ref) {
    kvq_eval_row r;
    kvq_eval_row_init(&r);
    kvq_eval_copy_str(r.label, sizeof r.label, label);
    r.size_pct = size;
    r.median_kld = median;
    r.is_reference = ref;
    return r;
}

/* The hand-made sweep.  By hand: bf16 loses to f16 (same size, farther),
 * q6_0 to q8_0/q4_0 (same size, farther), q4_1 to q4_0 (larger and
 * farther); "q4_0/q4_0 again" ties q4_0/q4_0 exactly and loses on label;
 * "failed" has no KLD; "f32 twice" is larger than the reference.
 * kvarn3 (20%, 0.05) and q2_0 tail (16%, 0.1) sit between q3_0 and q2_0. */
static size_t hand_rows(kvq_eval_row *rows) {
    size_t n = 0;
    rows[n++] = mk("f32/f32", 200.0, 0.0, true);             /* 0  */
    rows[n++] = mk("f16/f16", 100.0, 0.00001, false);        /* 1  */
    rows[n++] = mk("bf16/bf16", 100.0, 0.00005, false);      /* 2  */
    rows[n++] = mk("q8_0/q8_0", 53.1, 0.0003, false);        /* 3  */
    rows[n++] = mk("q8_0/q4_0", 40.6, 0.002, false);         /* 4  */
    rows[n++] = mk("q6_0/q6_0", 40.6, 0.004, false);         /* 5  */
    rows[n++] = mk("q4_0/q4_0", 28.1, 0.008, false);         /* 6  */
    rows[n++] = mk("q4_1/q4_1", 31.2, 0.009, false);         /* 7  */
    rows[n++] = mk("q3_0/q3_0", 21.9, 0.03, false);          /* 8  */
    rows[n++] = mk("q2_0/q2_0", 15.6, 0.2, false);           /* 9  */
    rows[n++] = mk("q4_0/q4_0 again", 28.1, 0.008, false);   /* 10 */
    rows[n++] = mk("failed", 30.0, NAN, false);              /* 11 */
    rows[n++] = mk("f32 twice", 250.0, 0.0, false);          /* 12 */
    rows[n++] = mk("q2_0/q2_0 tail", 16.0, 0.1, false);      /* 13 */
    rows[n++] = mk("kvarn3/kvarn3", 20.0, 0.05, false);      /* 14 */
    return n;
}

TEST(ladder_hand_made_frontier) {
    kvq_eval_row rows[16];
    size_t n = hand_rows(rows), idx[16];
    const size_t want[] = { 0, 1, 3, 4, 6, 8, 14, 13, 9 };
    const kvq_tier want_tier[] = {
        KVQ_TIER_REFERENCE, KVQ_TIER_HIGH_FIDELITY, KVQ_TIER_HIGH_FIDELITY,
        KVQ_TIER_BALANCED, KVQ_TIER_BALANCED, KVQ_TIER_COMPACT, KVQ_TIER_COMPACT,
        KVQ_TIER_EMERGENCY, KVQ_TIER_EMERGENCY,
    };
    size_t m = kvq_ladder_frontier(rows, n, idx);
    CHECK(m == sizeof want / sizeof want[0], "frontier has %zu rows, want %zu", m, sizeof want / sizeof want[0]);
    kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    for (size_t k = 0; k < m; k++) {
        CHECK(idx[k] == want[k], "ladder step %zu is %s, want %s", k, rows[idx[k]].label, rows[want[k]].label);
        kvq_tier tier = kvq_tier_of(&rows[idx[k]], &th);
        CHECK(tier == want_tier[k], "%s labelled %s, want %s", rows[idx[k]].label,
              kvq_tier_name(tier), kvq_tier_name(want_tier[k]));
    }
}

/* A numerically better row cannot push the exact cache off the top, and a
 * row as large as the reference is not listed after it. */
TEST(ladder_reference_always_heads) {
    kvq_eval_row rows[4];
    rows[0] = mk("q8_0/q8_0", 53.0, 0.0004, false);
    rows[1] = mk("f16/f16", 100.0, 0.0, true);
    rows[2] = mk("bf16/bf16", 100.0, -1e-9, false);   /* wobble below the reference */
    rows[3] = mk("q4_0/q4_0", 28.0, 0.01, false);
    size_t idx[4];
    size_t m = kvq_ladder_frontier(rows, 4, idx);
    CHECK(m == 3, "frontier has %zu rows, want 3", m);
    CHECK(idx[0] == 1 && idx[1] == 0 && idx[2] == 3, "order %zu %zu %zu, want 1 0 3", idx[0], idx[1], idx[2]);
    /* without a reference the smallest-KLD largest row starts the ladder */
    rows[1].is_reference = false;
    m = kvq_ladder_frontier(rows, 4, idx);
    CHECK(m == 3 && idx[0] == 2 && idx[1] == 0 && idx[2] == 3,
          "without reference: %zu rows starting %s", m, rows[idx[0]].label);
}

/* Brute force: a row is on the frontier iff nothing dominates it (among
 * distinct points); the fast sweep must agree, on random sets with many
 * ties (coordinates drawn from small grids). */
TEST(ladder_matches_brute_force) {
    test_rng rng = { 7, 0, 0 };
    kvq_eval_row rows[40];
    size_t idx[40];
    for (int trial = 0; trial < 200; trial++) {
        size_t n = 1 + test_rng_u64(&rng) % 40;
        for (size_t i = 0; i < n; i++) {
            char label[16];
            snprintf(label, sizeof label, "c%02zu", i);
            rows[i] = mk(label, 10.0 + (double)(test_rng_u64(&rng) % 12) * 7.5,
                         0.001 * (double)(test_rng_u64(&rng) % 9), false);
        }
        size_t m = kvq_ladder_frontier(rows, n, idx);
        size_t expect = 0;
        for (size_t i = 0; i < n; i++) {
            bool dominated = false, duplicate_first = false;
            for (size_t j = 0; j < n && !dominated; j++) {
                if (j == i) continue;
                bool le = rows[j].size_pct <= rows[i].size_pct && rows[j].median_kld <= rows[i].median_kld;
                bool lt = rows[j].size_pct < rows[i].size_pct || rows[j].median_kld < rows[i].median_kld;
                dominated = le && lt;
                /* equal point: labels are unique and ordered like indices */
                if (!lt && le && j < i) duplicate_first = true;
            }
            bool on = !dominated && !duplicate_first;
            bool listed = false;
            for (size_t k = 0; k < m; k++) listed |= idx[k] == i;
            CHECK(on == listed, "trial %d: row %zu (%.1f, %.3f) %s on the frontier but %s listed",
                  trial, i, rows[i].size_pct, rows[i].median_kld, on ? "is" : "is not", listed ? "is" : "not");
            expect += on;
        }
        CHECK(m == expect, "trial %d: %zu listed, %zu on the frontier", trial, m, expect);
        for (size_t k = 1; k < m; k++)
            CHECK(rows[idx[k]].size_pct < rows[idx[k - 1]].size_pct &&
                  rows[idx[k]].median_kld > rows[idx[k - 1]].median_kld,
                  "trial %d: ladder not strictly decreasing in size / increasing in KLD at %zu", trial, k);
    }
}

/* Reversing the input must give the same ladder (by label). */
TEST(ladder_independent_of_input_order) {
    kvq_eval_row rows[16], rev[16];
    size_t n = hand_rows(rows), a[16], b[16];
    for (size_t i = 0; i < n; i++) rev[i] = rows[n - 1 - i];
    size_t ma = kvq_ladder_frontier(rows, n, a), mb = kvq_ladder_frontier(rev, n, b);
    CHECK(ma == mb, "%zu vs %zu rows", ma, mb);
    for (size_t k = 0; k < ma; k++)
        CHECK(!strcmp(rows[a[k]].label, rev[b[k]].label), "step %zu: %s vs %s", k, rows[a[k]].label, rev[b[k]].label);
}

TEST(ladder_markdown) {
    kvq_eval_row rows[16];
    size_t n = hand_rows(rows);
    kvq_ladder_thresholds th = kvq_ladder_default_thresholds();
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f, "open_memstream failed");
    kvq_error err = { 0 };
    kvq_status st = kvq_ladder_write_md(f, rows, n, &th, &err);
    fclose(f);
    CHECK(st == KVQ_OK, "write failed: %s", err.msg);
    int table_lines = 0;
    for (const char *p = buf; (p = strstr(p, "\n|")) != NULL; p++) table_lines++;
    bool has_th = strstr(buf, "high fidelity <= 0.001") && strstr(buf, "balanced <= 0.01") &&
                  strstr(buf, "compact <= 0.05") && strstr(buf, "emergency > 0.05");
    bool has_rows = strstr(buf, "| reference | f32/f32 |") && strstr(buf, "| emergency | q2_0/q2_0 |") &&
                    !strstr(buf, "q4_1/q4_1");
    free(buf);
    CHECK(table_lines == 2 + 9, "%d table lines, want header + rule + 9 rows", table_lines);
    CHECK(has_th, "thresholds missing from ladder.md");
    CHECK(has_rows, "ladder rows missing or a dominated row listed");
}
