/* report.c - markdown table, CSV and JSON of the sweep's rows, and the
 * progress line (see report.h).  CSV and JSON are driven by one field
 * table, so the two files always carry the same columns. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

/* ------------------------------------------------------- field table */

typedef enum field_kind { F_STR, F_BOOL, F_INT, F_NUM } field_kind;

typedef struct field {
    const char *name;
    field_kind kind;
    size_t offset;
    size_t cap;          /* F_STR: size of the char array */
} field;

#define FS(n) { #n, F_STR, offsetof(kvq_eval_row, n), sizeof(((kvq_eval_row *)0)->n) }
#define FB(n) { #n, F_BOOL, offsetof(kvq_eval_row, n), 0 }
#define FI(n) { #n, F_INT, offsetof(kvq_eval_row, n), 0 }
#define FN(n) { #n, F_NUM, offsetof(kvq_eval_row, n), 0 }

static const field g_fields[] = {
    FS(label), FS(cache_k), FS(cache_v), FI(rot_k), FI(rot_v), FI(tail_tokens), FI(sink_tokens),
    FB(is_reference), FN(n_tokens), FN(kv_bytes), FN(kv_bytes_bf16), FN(work_bytes), FN(size_pct), FN(mib),
    FN(mean_kld), FN(mean_kld_se), FN(median_kld), FN(p90_kld), FN(p99_kld), FN(p99_9_kld),
    FN(max_kld), FN(mean_precision), FN(p99_9_precision), FN(same_top_p), FN(same_top_se),
    FN(rms_dp), FN(ppl_q), FN(ppl_q_se), FN(ppl_base), FN(pp_tps), FN(tg_tps),
    FN(drift_first_div), FN(drift_kld), FI(drift_n_gen),
};
enum { N_FIELDS = sizeof g_fields / sizeof g_fields[0] };

static const void *field_ptr(const kvq_eval_row *r, const field *fd) { return (const char *)r + fd->offset; }
static void *field_mut(kvq_eval_row *r, const field *fd) { return (char *)r + fd->offset; }

/* ---------------------------------------------------------- markdown */

kvq_status kvq_report_write_md(FILE *f, const kvq_eval_row *rows, size_t n,
                               const kvq_report_meta *meta, kvq_error *err) {
    fprintf(f, "# KV-cache sweep\n\n");
    if (meta && meta->model) fprintf(f, "Model: `%s`.  ", meta->model);
    if (meta && meta->text) fprintf(f, "Text: `%s`.  ", meta->text);
    if (meta && meta->n_ctx) fprintf(f, "Context %d, %d chunks.", meta->n_ctx, meta->n_chunks);
    if (meta && meta->activations && strcmp(meta->activations, "f32"))
        fprintf(f, "  Activations: %s (kvq_ctx_set_activations).", meta->activations);
    if (meta) fprintf(f, "\n\n");
    fprintf(f, "KLD is KL(exact || cache) per scored token, in nats; precision = exp(-(KLD - KLD of the "
               "reference row)); size is relative to a bf16 cache at the same context; MiB at the "
               "model's trained context.\n\n");
    const bool drift = kvq_eval_rows_have_drift(rows, n);   /* kvq sweep --drift: two more columns */
    if (drift)
        fprintf(f, "Drift (docs/drift.md): greedy generation of %d tokens per prompt; first divergence = median "
                   "first generated position whose greedy token differs from the exact cache's; drift KLD = mean "
                   "KLD over the generated positions, teacher-forced.\n\n", rows[0].drift_n_gen);
    fprintf(f, "| cache | size %% | MiB | mean KLD | mean precision | median KLD | 99.9%% KLD | "
               "99.9%% precision | same-top | PPL | pp t/s | tg t/s |%s\n", drift ? " first divergence | drift KLD |" : "");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n", drift ? "---:|---:|" : "");
    for (size_t i = 0; i < n; i++) {
        const kvq_eval_row *r = &rows[i];
        char b[11][40];
        fputs("| ", f);
        kvq_eval_write_md_text(f, r->label);
        fprintf(f, " | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
                kvq_eval_fmt(b[0], 40, "%.2f%%", r->size_pct),
                kvq_eval_fmt(b[1], 40, "%.2f", r->mib),
                kvq_eval_fmt(b[2], 40, "%.6f", r->mean_kld),
                kvq_eval_fmt(b[3], 40, "%.2f%%", r->mean_precision),
                kvq_eval_fmt(b[4], 40, "%.6f", r->median_kld),
                kvq_eval_fmt(b[5], 40, "%.6f", r->p99_9_kld),
                kvq_eval_fmt(b[6], 40, "%.2f%%", r->p99_9_precision),
                kvq_eval_fmt(b[7], 40, "%.2f%%", r->same_top_p),
                kvq_eval_fmt(b[8], 40, "%.4f", r->ppl_q),
                kvq_eval_fmt(b[9], 40, "%.1f", r->pp_tps),
                kvq_eval_fmt(b[10], 40, "%.1f", r->tg_tps));
        if (drift) fprintf(f, " %s | %s |", kvq_eval_fmt_first_div(b[0], 40, r), kvq_eval_fmt(b[1], 40, "%.3g", r->drift_kld));
        fputc('\n', f);
    }
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the markdown table");
    return KVQ_OK;
}

/* --------------------------------------------------------------- CSV */

static void csv_write_str(FILE *f, const char *s) {
    bool quote = strpbrk(s, ",\"\r\n") != NULL || (*s && (s[0] == ' ' || s[strlen(s) - 1] == ' '));
    if (!quote) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_write_field(FILE *f, const kvq_eval_row *r, const field *fd) {
    const void *p = field_ptr(r, fd);
    switch (fd->kind) {
    case F_STR: csv_write_str(f, p); break;
    case F_BOOL: fputs(*(const bool *)p ? "1" : "0", f); break;
    case F_INT: fprintf(f, "%d", *(const int *)p); break;
    case F_NUM: {
        double v = *(const double *)p;
        if (!isnan(v)) fprintf(f, "%.17g", v);   /* 17 digits: reads back to the same double */
        break;
    }
    }
}

kvq_status kvq_report_write_csv(FILE *f, const kvq_eval_row *rows, size_t n, kvq_error *err) {
    for (int k = 0; k < N_FIELDS; k++) fprintf(f, "%s%s", k ? "," : "", g_fields[k].name);
    fputs("\r\n", f);
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < N_FIELDS; k++) {
            if (k) fputc(',', f);
            csv_write_field(f, &rows[i], &g_fields[k]);
        }
        fputs("\r\n", f);
    }
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the CSV file");
    return KVQ_OK;
}

/* One CSV record: fields are NUL-terminated inside *buf (grown as
 * needed), their starts in starts[]; returns the field count, 0 at end of
 * file, -1 on a malformed record or out of memory.  *line counts lines. */
typedef struct csv_reader {
    FILE *f;
    char *buf;
    size_t cap;
    size_t starts[64];
    long line;
} csv_reader;

static const char csv_nomem[] = "out of memory";   /* csv_record's why when it is no fault of the file */
static kvq_status csv_status(const char *why) { return why == csv_nomem ? KVQ_ERR_NOMEM : KVQ_ERR_FORMAT; }

static bool csv_put(csv_reader *c, size_t *len, char ch) {
    if (*len + 1 >= c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        char *nb = kvq_realloc(c->buf, cap);
        if (!nb) return false;
        c->buf = nb;
        c->cap = cap;
    }
    c->buf[(*len)++] = ch;
    return true;
}

static int csv_record(csv_reader *c, const char **why) {
    size_t len = 0;
    int nf = 0;
    int ch = fgetc(c->f);
    if (ch == EOF) return 0;
    c->line++;
    c->starts[nf++] = 0;
    bool quoted = false, was_quoted = false;
    for (;; ch = fgetc(c->f)) {
        if (quoted) {
            if (ch == EOF) { *why = "unterminated quoted field"; return -1; }
            if (ch == '"') {
                int next = fgetc(c->f);
                if (next != '"') { quoted = false; ch = next; goto unquoted; }
            }
            if (ch == '\n') c->line++;
            if (!csv_put(c, &len, (char)ch)) { *why = csv_nomem; return -1; }
            continue;
        }
    unquoted:
        if (ch == EOF || ch == '\n') break;
        if (ch == '\r') {
            int next = fgetc(c->f);
            if (next != '\n' && next != EOF) { *why = "stray carriage return"; return -1; }
            break;
        }
        if (ch == ',') {
            if (!csv_put(c, &len, 0)) { *why = csv_nomem; return -1; }
            if (nf == 64) { *why = "more than 64 fields"; return -1; }
            c->starts[nf++] = len;
            was_quoted = false;
            continue;
        }
        if (ch == '"') {
            if (len != c->starts[nf - 1] || was_quoted) { *why = "quote inside an unquoted field"; return -1; }
            quoted = was_quoted = true;
            continue;
        }
        if (was_quoted) { *why = "text after a closing quote"; return -1; }
        if (!csv_put(c, &len, (char)ch)) { *why = csv_nomem; return -1; }
    }
    if (!csv_put(c, &len, 0)) { *why = csv_nomem; return -1; }
    return nf;
}

static bool parse_field(kvq_eval_row *r, const field *fd, const char *s) {
    void *p = field_mut(r, fd);
    char *end;
    switch (fd->kind) {
    case F_STR:
        if (strlen(s) >= fd->cap) return false;
        kvq_eval_copy_str(p, fd->cap, s);
        return true;
    case F_BOOL:
        if (!strcmp(s, "1") || !strcmp(s, "true")) *(bool *)p = true;
        else if (!strcmp(s, "0") || !strcmp(s, "false")) *(bool *)p = false;
        else return false;
        return true;
    case F_INT: {
        errno = 0;
        long v = strtol(s, &end, 10);
        if (!*s || *end || errno || v < 0 || v > (1L << 30)) return false;
        *(int *)p = (int)v;
        return true;
    }
    case F_NUM:
        if (!*s) { *(double *)p = NAN; return true; }
        errno = 0;
        *(double *)p = strtod(s, &end);
        return !*end && errno != ERANGE;
    }
    return false;
}

kvq_status kvq_report_read_csv(FILE *f, kvq_eval_row **rows_out, size_t *n_out, kvq_error *err) {
    csv_reader c = { .f = f };
    kvq_eval_row *rows = NULL;
    size_t n = 0, cap = 0;
    int col_field[64];                 /* field index of each column, -1: ignored */
    const char *why = NULL;
    kvq_status st = KVQ_OK;
    *rows_out = NULL;
    *n_out = 0;

    int n_cols = csv_record(&c, &why);
    if (n_cols <= 0) {
        st = kvq_fail(err, n_cols == 0 ? KVQ_ERR_FORMAT : csv_status(why), "CSV line 1: %s",
                      n_cols == 0 ? "empty file" : why);
        goto done;
    }
    bool has_label = false;
    for (int j = 0; j < n_cols; j++) {
        col_field[j] = -1;
        for (int k = 0; k < N_FIELDS; k++)
            if (!strcmp(c.buf + c.starts[j], g_fields[k].name)) col_field[j] = k;
        has_label |= col_field[j] == 0;
    }
    if (!has_label) { st = kvq_fail(err, KVQ_ERR_FORMAT, "CSV line 1: no 'label' column"); goto done; }

    for (;;) {
        int nf = csv_record(&c, &why);
        if (nf == 0) break;
        if (nf < 0) { st = kvq_fail(err, csv_status(why), "CSV line %ld: %s", c.line, why); goto done; }
        if (nf == 1 && c.buf[0] == 0) continue;            /* blank line */
        if (nf != n_cols) {
            st = kvq_fail(err, KVQ_ERR_FORMAT, "CSV line %ld: %d fields, the header has %d", c.line, nf, n_cols);
            goto done;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            kvq_eval_row *nr = kvq_realloc_n(rows, nc, sizeof *nr);
            if (!nr) { st = kvq_fail(err, KVQ_ERR_NOMEM, "out of memory reading CSV"); goto done; }
            rows = nr;
            cap = nc;
        }
        kvq_eval_row_init(&rows[n]);
        for (int j = 0; j < nf; j++) {
            if (col_field[j] < 0) continue;
            const field *fd = &g_fields[col_field[j]];
            if (!parse_field(&rows[n], fd, c.buf + c.starts[j])) {
                st = kvq_fail(err, KVQ_ERR_FORMAT, "CSV line %ld: bad %s value '%.40s'", c.line, fd->name,
                              c.buf + c.starts[j]);
                goto done;
            }
        }
        n++;
    }
    if (ferror(f)) st = kvq_fail(err, KVQ_ERR_IO, "cannot read the CSV file");
done:
    free(c.buf);
    if (st != KVQ_OK) {
        free(rows);
        return st;
    }
    *rows_out = rows;
    *n_out = n;
    return KVQ_OK;
}

/* -------------------------------------------------------------- JSON */

void kvq_json_write_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_write_field(FILE *f, const kvq_eval_row *r, const field *fd) {
    const void *p = field_ptr(r, fd);
    switch (fd->kind) {
    case F_STR: kvq_json_write_str(f, p); break;
    case F_BOOL: fputs(*(const bool *)p ? "true" : "false", f); break;
    case F_INT: fprintf(f, "%d", *(const int *)p); break;
    case F_NUM: {
        double v = *(const double *)p;
        if (isfinite(v)) fprintf(f, "%.17g", v);
        else fputs("null", f);                 /* JSON has no NaN / Inf */
        break;
    }
    }
}

kvq_status kvq_report_write_json(FILE *f, const kvq_eval_row *rows, size_t n,
                                 const kvq_report_meta *meta, kvq_error *err) {
    fprintf(f, "{\n  \"kvq_version\": \"%s\",\n  \"kvq_source_id\": \"%s\",\n  \"model\": ", KVQ_VERSION,
            kvq_source_id());
    if (meta && meta->model) kvq_json_write_str(f, meta->model);
    else fputs("null", f);
    fputs(",\n  \"text\": ", f);
    if (meta && meta->text) kvq_json_write_str(f, meta->text);
    else fputs("null", f);
    fputs(",\n  \"activations\": ", f);
    kvq_json_write_str(f, meta && meta->activations ? meta->activations : "f32");
    fprintf(f, ",\n  \"n_ctx\": %d,\n  \"n_chunks\": %d,\n  \"rows\": [", meta ? meta->n_ctx : 0,
            meta ? meta->n_chunks : 0);
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ",\n    {" : "\n    {", f);
        for (int k = 0; k < N_FIELDS; k++) {
            fprintf(f, "%s\"%s\": ", k ? ", " : "", g_fields[k].name);
            json_write_field(f, &rows[i], &g_fields[k]);
        }
        fputc('}', f);
    }
    fputs(n ? "\n  ]\n}\n" : "]\n}\n", f);
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the JSON file");
    return KVQ_OK;
}

/* ------------------------------------------------------------- files */

/* Written to PATH.tmp and renamed, so an interrupted sweep never leaves
 * a half-written file under the real name (resuming trusts those). */
kvq_status kvq_report_save(const char *path, kvq_report_kind kind, const kvq_eval_row *rows,
                           size_t n, const kvq_report_meta *meta, kvq_error *err) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return kvq_fail(err, KVQ_ERR_ARG, "path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    kvq_status st;
    switch (kind) {
    case KVQ_REPORT_MD: st = kvq_report_write_md(f, rows, n, meta, err); break;
    case KVQ_REPORT_CSV: st = kvq_report_write_csv(f, rows, n, err); break;
    case KVQ_REPORT_JSON: st = kvq_report_write_json(f, rows, n, meta, err); break;
    default: st = kvq_fail(err, KVQ_ERR_ARG, "unknown report kind %d", (int)kind); break;
    }
    if (fclose(f) != 0 && st == KVQ_OK) st = kvq_fail(err, KVQ_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st == KVQ_OK && rename(tmp, path) != 0)
        st = kvq_fail(err, KVQ_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != KVQ_OK) remove(tmp);
    return st;
}

/* ---------------------------------------------------------- progress */

void kvq_format_duration(char *buf, size_t cap, double seconds) {
    if (!isfinite(seconds) || seconds < 0) { snprintf(buf, cap, "?"); return; }
    long s = lround(seconds);
    if (s < 60) snprintf(buf, cap, "%lds", s);
    else if (s < 3600) snprintf(buf, cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, cap, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
}

void kvq_progress_format(char *buf, size_t cap, int index, int total, const char *label,
                         double elapsed_s, int n_done) {
    char eta[32];
    int left = total - index + 1;          /* this configuration and the rest */
    if (n_done > 0) kvq_format_duration(eta, sizeof eta, elapsed_s / n_done * left);
    else snprintf(eta, sizeof eta, "?");
    snprintf(buf, cap, "[%d/%d] %s ... eta %s", index, total, label, eta);
}
