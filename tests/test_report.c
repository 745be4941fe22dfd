/* test_report.c - the sweep's result files (src/eval/report.c) on hand-made
 * rows: the CSV reads back field for field, the JSON passes a strict
 * validator written here, the markdown table has BeeLlama's 12 columns,
 * precision follows exp(-(KLD - KLD_ref)), and the progress line. */
#include "test.h"
#include "report.h"

#include <ctype.h>
#include <string.h>

static kvq_eval_row full_row(const char *label, const char *k, const char *v, double scale, bool ref) {
    kvq_eval_row r;
    kvq_eval_row_init(&r);
    kvq_eval_copy_str(r.label, sizeof r.label, label);
    kvq_eval_copy_str(r.cache_k, sizeof r.cache_k, k);
    kvq_eval_copy_str(r.cache_v, sizeof r.cache_v, v);
    r.rot_k = ref ? 0 : 64;
    r.rot_v = scale > 1 ? 128 : 0;
    r.tail_tokens = ref ? 0 : 1024;
    r.sink_tokens = 4;
    r.is_reference = ref;
    r.n_tokens = 16320;
    r.kv_bytes = 1234567.0 * scale;
    r.kv_bytes_bf16 = 4194304;
    r.size_pct = 100.0 * r.kv_bytes / r.kv_bytes_bf16;
    r.mib = 12.345678901234567 * scale;
    r.mean_kld = ref ? 0.0 : 0.00387512345 * scale;
    r.mean_kld_se = 0.00009 * scale;
    r.median_kld = ref ? 0.0 : 0.0011 * scale;
    r.p90_kld = 0.01 * scale;
    r.p99_kld = 0.05 * scale;
    r.p99_9_kld = ref ? 0.0 : 0.2 * scale;
    r.max_kld = 1.5 * scale;
    r.same_top_p = 98.7654321;
    r.same_top_se = 0.087;
    r.rms_dp = 0.0123;
    r.ppl_q = 7.123456789;
    r.ppl_q_se = 0.0456;
    r.ppl_base = 7.1;
    r.pp_tps = 1523.25;
    r.tg_tps = NAN;                        /* not measured: empty / null */
    return r;
}

static size_t sample_rows(kvq_eval_row *rows) {
    size_t n = 0;
    rows[n++] = full_row("f32/f32", "f32", "f32", 2.0, true);
    rows[n++] = full_row("q8_0/q4_0 tail1024", "q8_0", "q4_0", 0.5, false);
    rows[n++] = full_row("weird, \"quoted\" label", "q4_0", "q4_0", 1.5, false);
    rows[n++] = full_row(" lead|pipe ", "kvarn4", "kvarn3", 3.0, false);
    kvq_eval_rows_precision(rows, n);
    return n;
}

static char *to_string(kvq_status (*fn)(FILE *, const kvq_eval_row *, size_t, const kvq_report_meta *, kvq_error *),
                       const kvq_eval_row *rows, size_t n, const kvq_report_meta *meta, kvq_status *st, kvq_error *err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    *st = fn(f, rows, n, meta, err);
    fclose(f);
    return buf;
}

static kvq_status csv_adapter(FILE *f, const kvq_eval_row *rows, size_t n, const kvq_report_meta *m, kvq_error *e) {
    (void)m;
    return kvq_report_write_csv(f, rows, n, e);
}

static bool same_num(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

static bool rows_equal(const kvq_eval_row *a, const kvq_eval_row *b, char *why, size_t cap) {
#define SAME_NUM(f) if (!same_num(a->f, b->f)) { snprintf(why, cap, #f " %.17g vs %.17g", a->f, b->f); return false; }
#define SAME(f) if (a->f != b->f) { snprintf(why, cap, #f " differs"); return false; }
#define SAME_STR(f) if (strcmp(a->f, b->f)) { snprintf(why, cap, #f " '%.40s' vs '%.40s'", a->f, b->f); return false; }
    SAME_STR(label) SAME_STR(cache_k) SAME_STR(cache_v)
    SAME(rot_k) SAME(rot_v) SAME(tail_tokens) SAME(sink_tokens) SAME(is_reference)
    SAME_NUM(n_tokens) SAME_NUM(kv_bytes) SAME_NUM(kv_bytes_bf16) SAME_NUM(size_pct) SAME_NUM(mib)
    SAME_NUM(mean_kld) SAME_NUM(mean_kld_se) SAME_NUM(median_kld) SAME_NUM(p90_kld) SAME_NUM(p99_kld)
    SAME_NUM(p99_9_kld) SAME_NUM(max_kld) SAME_NUM(same_top_p) SAME_NUM(same_top_se) SAME_NUM(rms_dp)
    SAME_NUM(ppl_q) SAME_NUM(ppl_q_se) SAME_NUM(ppl_base) SAME_NUM(pp_tps) SAME_NUM(tg_tps)
    SAME_NUM(mean_precision) SAME_NUM(p99_9_precision)
#undef SAME_NUM
#undef SAME
#undef SAME_STR
    return true;
}

static kvq_status read_csv_string(const char *text, kvq_eval_row **rows, size_t *n, kvq_error *err) {
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) return KVQ_ERR_IO;
    kvq_status st = kvq_report_read_csv(f, rows, n, err);
    fclose(f);
    return st;
}

TEST(report_csv_round_trip) {
    kvq_eval_row rows[8];
    size_t n = sample_rows(rows);
    kvq_error err = { 0 };
    kvq_status st;
    char *csv = to_string(csv_adapter, rows, n, NULL, &st, &err);
    CHECK(csv && st == KVQ_OK, "write failed: %s", err.msg);
    kvq_eval_row *back = NULL;
    size_t nb = 0;
    st = read_csv_string(csv, &back, &nb, &err);
    free(csv);
    CHECK(st == KVQ_OK, "read failed: %s", err.msg);
    char why[160] = "";
    bool ok = nb == n;
    size_t bad = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (!rows_equal(&rows[i], &back[i], why, sizeof why)) { ok = false; bad = i; }
    free(back);
    CHECK(nb == n, "%zu rows read back, %zu written", nb, n);
    CHECK(ok, "row %zu differs: %s", bad, why);
}

/* Columns in another order, an unknown column and a blank line load; each
 * kind of damage is a format error naming its line. */
TEST(report_csv_reader_strict) {
    kvq_eval_row *rows = NULL;
    size_t n = 0;
    kvq_error err = { 0 };
    const char *other_order = "median_kld,future_column,label,size_pct\n0.5,x,\"a,b\",25\n\n1e-3,y,c,12.5\n";
    kvq_status st = read_csv_string(other_order, &rows, &n, &err);
    CHECK(st == KVQ_OK, "reordered CSV rejected: %s", err.msg);
    bool ok = n == 2 && !strcmp(rows[0].label, "a,b") && rows[0].size_pct == 25 && rows[1].median_kld == 1e-3 &&
              isnan(rows[1].mean_kld);
    free(rows);
    CHECK(ok, "reordered CSV read wrongly");

    static const struct { const char *text, *want; } bad[] = {
        { "label,size_pct\na,1\nb\n", "line 3" },
        { "label,size_pct\na,1x\n", "bad size_pct" },
        { "label,size_pct\n\"a,1\n", "unterminated" },
        { "label,size_pct\na\"b,1\n", "quote inside" },
        { "label,rot_k\na,maybe\n", "bad rot_k" }, { "label,is_reference\na,2\n", "bad is_reference" },
        { "size_pct\n1\n", "no 'label'" },
        { "", "empty" },
        { "label\n0123456789012345678901234567890123456789012345678901234567890123456789\n", "bad label" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        rows = NULL;
        err.msg[0] = 0;
        st = read_csv_string(bad[k].text, &rows, &n, &err);
        free(rows);
        CHECK(st == KVQ_ERR_FORMAT && strstr(err.msg, bad[k].want), "case %zu: status %d, message '%s' (want '%s')",
              k, (int)st, err.msg, bad[k].want);
    }
}

/* ---------------------------------------------- strict JSON validator */

typedef struct json_p {
    const char *p, *begin;
    size_t stop_at;            /* offset where parsing stopped */
    int objects_in_rows, keys_in_first_row, depth;
    bool in_rows;
} json_p;

static void jws(json_p *j) { while (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r') j->p++; }
static bool json_value(json_p *j);

static bool json_string(json_p *j, char *out, size_t cap) {
    if (*j->p != '"') return false;
    j->p++;
    size_t k = 0;
    while (*j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (!c || c < 0x20) return false;
        if (c == '\\') {
            j->p++;
            if (*j->p == 'u') {
                for (int d = 1; d <= 4; d++) if (!isxdigit((unsigned char)j->p[d])) return false;
                j->p += 5;
                continue;
            }
            if (!strchr("\"\\/bfnrt", *j->p) || !*j->p) return false;
        }
        if (out && k + 1 < cap) out[k++] = *j->p;
        j->p++;
    }
    if (out) out[k] = 0;
    j->p++;
    return true;
}

static bool json_number(json_p *j) {
    const char *s = j->p;
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (isdigit((unsigned char)*s)) while (isdigit((unsigned char)*s)) s++;
    else return false;
    if (*s == '.') { s++; if (!isdigit((unsigned char)*s)) return false; while (isdigit((unsigned char)*s)) s++; }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!isdigit((unsigned char)*s)) return false;
        while (isdigit((unsigned char)*s)) s++;
    }
    j->p = s;
    return true;
}

static bool json_object(json_p *j) {
    j->p++;
    jws(j);
    bool counting = j->in_rows && j->objects_in_rows++ == 0;
    if (*j->p == '}') { j->p++; return true; }
    for (;;) {
        char key[64];
        jws(j);
        if (!json_string(j, key, sizeof key)) return false;
        if (counting) j->keys_in_first_row++;
        jws(j);
        if (*j->p++ != ':') return false;
        bool was = j->in_rows;
        if (j->depth == 1 && !strcmp(key, "rows")) j->in_rows = true;
        j->depth++;
        if (!json_value(j)) return false;
        j->depth--;
        j->in_rows = was;
        jws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == '}') { j->p++; return true; }
        return false;
    }
}

static bool json_array(json_p *j) {
    j->p++;
    jws(j);
    if (*j->p == ']') { j->p++; return true; }
    for (;;) {
        if (!json_value(j)) return false;
        jws(j);
        if (*j->p == ',') { j->p++; continue; }
        if (*j->p == ']') { j->p++; return true; }
        return false;
    }
}

static bool json_value(json_p *j) {
    jws(j);
    switch (*j->p) {
    case '{': return json_object(j);
    case '[': return json_array(j);
    case '"': return json_string(j, NULL, 0);
    case 't': if (!strncmp(j->p, "true", 4)) { j->p += 4; return true; } return false;
    case 'f': if (!strncmp(j->p, "false", 5)) { j->p += 5; return true; } return false;
    case 'n': if (!strncmp(j->p, "null", 4)) { j->p += 4; return true; } return false;
    default: return json_number(j);
    }
}

static bool json_document_at(json_p *j) {
    j->depth = 0;
    jws(j);
    if (*j->p != '{') return false;
    j->depth = 1;
    if (!json_object(j)) return false;
    jws(j);
    return *j->p == 0;
}

static bool json_document(json_p *j) {
    j->begin = j->p;
    bool ok = json_document_at(j);
    j->stop_at = (size_t)(j->p - j->begin);
    return ok;
}

TEST(report_json_validator_rejects_malformed) {
    static const char *const bad[] = {
        "{\"a\": nan}", "{\"a\": 1,}", "{\"a\" 1}", "{'a': 1}", "{\"a\": 01}", "{\"a\": \"x\ny\"}", "{} {}",
        "{\"a\": [1 2]}", "{\"a\": 1.}", "{\"a\": \"\\q\"}",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        json_p j = { .p = bad[k] };
        CHECK(!json_document(&j), "accepted malformed %s", bad[k]);
    }
    json_p j = { .p = "{\"a\": [1, -2.5e-3, true, null, {\"b\": \"\\\"\\u0001\"}]}" };
    CHECK(json_document(&j), "rejected a valid document");
}

TEST(report_json_well_formed) {
    kvq_eval_row rows[8];
    size_t n = sample_rows(rows);
    rows[1].label[0] = '\x01';                       /* control character must be escaped */
    kvq_report_meta meta = { "models/x \"q\".gguf", "text\\gpl3.txt", 512, 8, NULL };
    kvq_error err = { 0 };
    kvq_status st;
    char *json = to_string(kvq_report_write_json, rows, n, &meta, &st, &err);
    CHECK(json && st == KVQ_OK, "write failed: %s", err.msg);
    json_p j = { .p = json };
    bool ok = json_document(&j);
    size_t at = j.stop_at;
    bool has_null = strstr(json, "\"tg_tps\": null") != NULL;
    bool has_keys = strstr(json, "\"median_kld\": ") && strstr(json, "\"p99_9_kld\": ") &&
                    strstr(json, "\"cache_k\": \"q8_0\"") && strstr(json, "\"rot_k\": 64") && strstr(json, "\"is_reference\": true") &&
                    strstr(json, "\"n_ctx\": 512");
    free(json);
    CHECK(ok, "JSON not well-formed near offset %zu", at);
    CHECK(j.objects_in_rows == (int)n, "%d row objects, want %zu", j.objects_in_rows, n);
    CHECK(j.keys_in_first_row == 34, "%d keys in a row, want every field (34: 31 + the three drift fields)", j.keys_in_first_row);
    CHECK(has_null, "unknown number not written as null");
    CHECK(has_keys, "expected keys missing");
}

/* Cells between unescaped pipes. */
static int md_cells(const char *line, size_t len) {
    int pipes = 0;
    for (size_t i = 0; i < len; i++)
        if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) pipes++;
    return pipes - 1;
}

TEST(report_markdown_columns) {
    kvq_eval_row rows[8];
    size_t n = sample_rows(rows);
    kvq_error err = { 0 };
    kvq_status st;
    char *md = to_string(kvq_report_write_md, rows, n, NULL, &st, &err);
    CHECK(md && st == KVQ_OK, "write failed: %s", err.msg);
    int table_lines = 0, bad_line = -1, cells = 0;
    for (const char *line = md; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (len && line[0] == '|') {
            cells = md_cells(line, len);
            if (cells != 12 && bad_line < 0) bad_line = table_lines;
            table_lines++;
        }
        line += len + (nl != NULL);
    }
    bool header = strstr(md, "| cache | size % | MiB | mean KLD | mean precision | median KLD | 99.9% KLD | "
                             "99.9% precision | same-top | PPL | pp t/s | tg t/s |") != NULL;
    bool escaped = strstr(md, "|  lead\\|pipe  |") != NULL;
    free(md);
    CHECK(table_lines == (int)n + 2, "%d table lines for %zu rows", table_lines, n);
    CHECK(bad_line < 0, "table line %d has %d cells, want 12", bad_line, cells);
    CHECK(header, "header differs from BeeLlama's columns");
    CHECK(escaped, "pipe in a label not escaped");
}

/* precision = 100 exp(-(KLD - KLD_ref)), against the reference row. */
TEST(report_precision_against_reference) {
    kvq_eval_row rows[3];
    for (int i = 0; i < 3; i++) kvq_eval_row_init(&rows[i]);
    rows[0].mean_kld = 0.01;
    rows[0].p99_9_kld = 0.3;
    rows[1].is_reference = true;
    rows[1].mean_kld = 0.0002;
    rows[1].p99_9_kld = 0.1;
    rows[2].mean_kld = NAN;
    kvq_eval_rows_precision(rows, 3);
    double want_mean = 100.0 * exp(-(0.01 - 0.0002)), want_p = 100.0 * exp(-(0.3 - 0.1));
    CHECK(fabs(rows[0].mean_precision - want_mean) < 1e-9, "mean precision %.9f, want %.9f", rows[0].mean_precision, want_mean);
    CHECK(fabs(rows[0].p99_9_precision - want_p) < 1e-9, "99.9%% precision %.9f, want %.9f", rows[0].p99_9_precision, want_p);
    CHECK(fabs(rows[1].mean_precision - 100.0) < 1e-12, "reference precision %.9f, want 100", rows[1].mean_precision);
    CHECK(isnan(rows[2].mean_precision), "unknown KLD gave a precision");
}

TEST(report_progress_line) {
    char buf[128];
    kvq_progress_format(buf, sizeof buf, 3, 12, "q4_0/q4_0", 20.0, 2);   /* 10 s per run, 10 left */
    CHECK(!strcmp(buf, "[3/12] q4_0/q4_0 ... eta 1m40s"), "got '%s'", buf);
    kvq_progress_format(buf, sizeof buf, 1, 5, "f16/f16", 0.0, 0);
    CHECK(!strcmp(buf, "[1/5] f16/f16 ... eta ?"), "got '%s'", buf);
    kvq_format_duration(buf, sizeof buf, 42.4);
    CHECK(!strcmp(buf, "42s"), "got '%s'", buf);
    kvq_format_duration(buf, sizeof buf, 3725);
    CHECK(!strcmp(buf, "1h02m"), "got '%s'", buf);
    kvq_format_duration(buf, sizeof buf, NAN);
    CHECK(!strcmp(buf, "?"), "got '%s'", buf);
}

TEST(report_number_format) {
    char b[32];
    CHECK(!strcmp(kvq_eval_fmt(b, sizeof b, "%.6f", -1e-9), "0.000000"), "negative zero printed as '%s'", b);
    CHECK(!strcmp(kvq_eval_fmt(b, sizeof b, "%.2f%%", -1e-9), "0.00%"), "negative zero printed as '%s'", b);
    CHECK(!strcmp(kvq_eval_fmt(b, sizeof b, "%.6f", -0.25), "-0.250000"), "a real negative lost its sign: '%s'", b);
    CHECK(!strcmp(kvq_eval_fmt(b, sizeof b, "%.6f", NAN), "-"), "NAN printed as '%s'", b);
}
