/* drift_report.c - the tables, JSON and CSV of kvq drift (drift_report.h). */
#include "drift_report.h"
#include "report.h"

#include <math.h>

/* A KLD for a table: 3 significant digits, "0" for an exact zero, "-"
 * when unknown. */
static const char *fmt_kld(char *buf, size_t cap, double v) {
    if (isnan(v)) snprintf(buf, cap, "-");
    else if (v == 0.0) snprintf(buf, cap, "0");
    else snprintf(buf, cap, "%.3g", v);
    return buf;
}

/* The first divergence of a summary: "never" when no prompt diverges. */
static const char *fmt_div(char *buf, size_t cap, double d, int n_gen) {
    if (d > n_gen) snprintf(buf, cap, "never");
    else snprintf(buf, cap, "%g", d);
    return buf;
}

static void write_label(FILE *f, const kvq_drift_row *r) {
    fputs("| ", f);
    kvq_eval_write_md_text(f, r->label);
}

static void summary_table(FILE *f, const kvq_drift_row *rows, size_t n) {
    fprintf(f, "| cache | size %% | first divergence: median | quartiles | identical after N | same top-1 %% | "
               "mean KLD | KLD at divergence |\n");
    fprintf(f, "|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < n; i++) {
        const kvq_drift_row *r = &rows[i];
        write_label(f, r);
        if (!r->done) { fprintf(f, " | - | - | - | - | - | - | - |\n"); continue; }
        const kvq_drift_summary *s = &r->sum;
        char b[6][48];
        fprintf(f, " | %s | %s | %s - %s | %.1f%% | %.2f | %s | %s |\n", kvq_eval_fmt(b[0], 48, "%.2f", r->size_pct),
                fmt_div(b[1], 48, s->median_first_div, s->n_gen), fmt_div(b[4], 48, s->q1_first_div, s->n_gen),
                fmt_div(b[5], 48, s->q3_first_div, s->n_gen),
                100.0 * s->frac_identical, s->same_top_p, fmt_kld(b[2], 48, s->mean_kld),
                fmt_kld(b[3], 48, s->mean_kld_at_div));
    }
}

typedef enum bucket_stat { B_MEAN, B_MEDIAN, B_P99 } bucket_stat;

/* One table of a bucket statistic: a column per position bucket. */
static void bucket_table(FILE *f, const kvq_drift_row *rows, size_t n, bucket_stat what) {
    static const char *const title[] = { "Mean", "Median", "99th-percentile" };
    const kvq_drift_row *any = NULL;
    for (size_t i = 0; i < n && !any; i++)
        if (rows[i].done) any = &rows[i];
    if (!any) return;
    fprintf(f, "\n%s KLD by generated position:\n\n| cache |", title[what]);
    for (int b = 0; b < any->sum.n_buckets; b++) fprintf(f, " %d-%d |", any->sum.bucket[b].first, any->sum.bucket[b].last);
    fprintf(f, "\n|---|");
    for (int b = 0; b < any->sum.n_buckets; b++) fprintf(f, "---:|");
    fputc('\n', f);
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].done) continue;
        write_label(f, &rows[i]);
        fputs(" |", f);
        for (int b = 0; b < rows[i].sum.n_buckets; b++) {
            const kvq_drift_bucket *bk = &rows[i].sum.bucket[b];
            char buf[48];
            fprintf(f, " %s |", fmt_kld(buf, sizeof buf, what == B_MEAN ? bk->mean : what == B_MEDIAN ? bk->median
                                                                                                  : bk->p99));
        }
        fputc('\n', f);
    }
}

static void prompt_table(FILE *f, const kvq_drift_row *r) {
    fprintf(f, "\nPer prompt, ");
    kvq_eval_write_md_text(f, r->label);
    fprintf(f, ":\n\n| prompt | first divergence | KLD there | mean KLD | max KLD | same top-1 %% |\n"
               "|---:|---:|---:|---:|---:|---:|\n");
    for (size_t p = 0; p < r->run.n_prompts; p++) {
        kvq_drift_prompt_stats ps;
        kvq_drift_prompt_summary(&r->run, p, &ps);
        char b[4][48];
        fprintf(f, "| %zu | %s | %s | %s | %s | %.2f |\n", p + 1, fmt_div(b[0], 48, ps.first_div, r->run.n_gen),
                fmt_kld(b[1], 48, ps.kld_at_div), fmt_kld(b[2], 48, ps.mean_kld), fmt_kld(b[3], 48, ps.max_kld),
                ps.same_top_p);
    }
}

kvq_status kvq_drift_write_md(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                              bool per_prompt, kvq_error *err) {
    const kvq_drift_row *any = NULL;
    for (size_t i = 0; i < n && !any; i++)
        if (rows[i].done) any = &rows[i];
    if (meta) {
        fprintf(f, "Model `%s`, ", meta->model ? meta->model : "?");
        if (meta->prompts) fprintf(f, "prompts `%s`", meta->prompts);
        else fprintf(f, "one prompt (-p)");
        if (any && meta->prompts) fprintf(f, " (%zu)", any->sum.n_prompts);
        if (any) fprintf(f, ", %d generated tokens each", any->sum.n_gen);
        fprintf(f, "; contexts of %d positions, %d thread(s).\n\n", meta->n_ctx, meta->threads);
    }
    fprintf(f, "KLD is KL(exact || cache) in nats at each generated position, teacher-forced on the exact "
               "(f32) cache's greedy tokens; the first divergence is the first generated position whose greedy "
               "token differs (free-running).\n\n");
    summary_table(f, rows, n);
    for (int w = B_MEAN; w <= B_P99; w++) bucket_table(f, rows, n, (bucket_stat)w);
    for (size_t i = 0; per_prompt && i < n; i++)
        if (rows[i].done) prompt_table(f, &rows[i]);
    fputc('\n', f);
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the drift tables");
    return KVQ_OK;
}

/* ---------------------------------------------------------------- JSON */

static void json_num(FILE *f, const char *key, double v) {
    fprintf(f, ", \"%s\": ", key);
    if (isfinite(v)) fprintf(f, "%.10g", v);
    else fputs("null", f);
}

static void json_object(FILE *f, const kvq_drift_row *r, const kvq_drift_meta *meta) {
    const kvq_drift_summary *s = &r->sum;
    fputs("{\"label\": ", f);
    kvq_json_write_str(f, r->label);
    fputs(", \"cache_k\": ", f);
    kvq_json_write_str(f, r->cache_k);
    fputs(", \"cache_v\": ", f);
    kvq_json_write_str(f, r->cache_v);
    fprintf(f, ", \"rot_k\": %d, \"rot_v\": %d, \"tail_tokens\": %d, \"sink_tokens\": %d, \"n_ctx\": %d", r->rot_k,
            r->rot_v, r->tail_tokens, r->sink_tokens, meta ? meta->n_ctx : 0);
    json_num(f, "kv_bytes", r->kv_bytes);
    json_num(f, "size_pct", r->size_pct);
    fprintf(f, ", \"n_prompts\": %zu, \"n_gen\": %d", s->n_prompts, s->n_gen);
    json_num(f, "median_first_divergence", s->median_first_div);
    json_num(f, "q1_first_divergence", s->q1_first_div);
    json_num(f, "q3_first_divergence", s->q3_first_div);
    fprintf(f, ", \"min_first_divergence\": %d", s->min_first_div);
    json_num(f, "frac_identical", s->frac_identical);
    json_num(f, "mean_kld_generated", s->mean_kld);
    json_num(f, "median_kld_generated", s->median_kld);
    json_num(f, "p99_kld_generated", s->p99_kld);
    json_num(f, "max_kld_generated", s->max_kld);
    json_num(f, "mean_kld_at_divergence", s->mean_kld_at_div);
    json_num(f, "same_top_p", s->same_top_p);
    json_num(f, "seconds", r->seconds);
    fputs(", \"buckets\": [", f);
    for (int b = 0; b < s->n_buckets; b++) {
        const kvq_drift_bucket *bk = &s->bucket[b];
        fprintf(f, "%s{\"first\": %d, \"last\": %d, \"n\": %zu", b ? ", " : "", bk->first, bk->last, bk->n);
        json_num(f, "mean_kld", bk->mean);
        json_num(f, "median_kld", bk->median);
        json_num(f, "p99_kld", bk->p99);
        fputc('}', f);
    }
    fputs("], \"prompts\": [", f);
    for (size_t p = 0; p < r->run.n_prompts; p++) {
        kvq_drift_prompt_stats ps;
        kvq_drift_prompt_summary(&r->run, p, &ps);
        fprintf(f, "%s{\"first_divergence\": %d", p ? ", " : "", ps.first_div);
        json_num(f, "kld_at_divergence", ps.kld_at_div);
        json_num(f, "mean_kld", ps.mean_kld);
        json_num(f, "max_kld", ps.max_kld);
        json_num(f, "same_top_p", ps.same_top_p);
        fputc('}', f);
    }
    fputs("]}", f);
}

kvq_status kvq_drift_write_json_row(FILE *f, const kvq_drift_row *r, const kvq_drift_meta *meta, kvq_error *err) {
    if (!r->done) return kvq_fail(err, KVQ_ERR_ARG, "drift: %s was not measured", r->label);
    json_object(f, r, meta);
    fputc('\n', f);
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the drift JSON");
    return KVQ_OK;
}

kvq_status kvq_drift_write_json(FILE *f, const kvq_drift_row *rows, size_t n, const kvq_drift_meta *meta,
                                kvq_error *err) {
    fprintf(f, "{\"kvq_version\": \"%s\", \"model\": ", KVQ_VERSION);
    if (meta && meta->model) kvq_json_write_str(f, meta->model);
    else fputs("null", f);
    fputs(", \"prompts\": ", f);
    if (meta && meta->prompts) kvq_json_write_str(f, meta->prompts);
    else fputs("null", f);
    fprintf(f, ", \"n_ctx\": %d, \"configs\": [", meta ? meta->n_ctx : 0);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].done) continue;
        fputs(first ? "\n  " : ",\n  ", f);
        json_object(f, &rows[i], meta);
        first = false;
    }
    fputs("\n]}\n", f);
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the drift JSON");
    return KVQ_OK;
}

/* ----------------------------------------------------------------- CSV */

static void csv_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, ",%.10g", v);
    else fputc(',', f);
}

kvq_status kvq_drift_write_prompts_csv(FILE *f, const kvq_drift_row *rows, size_t n, kvq_error *err) {
    fputs("label,cache_k,cache_v,tail_tokens,prompt,n_gen,first_divergence,kld_at_divergence,mean_kld,max_kld,"
          "same_top_p\n", f);
    for (size_t i = 0; i < n; i++) {
        const kvq_drift_row *r = &rows[i];
        for (size_t p = 0; r->done && p < r->run.n_prompts; p++) {
            kvq_drift_prompt_stats ps;
            kvq_drift_prompt_summary(&r->run, p, &ps);
            /* labels hold no comma or quote (type names, "tail", "rot-off") */
            fprintf(f, "%s,%s,%s,%d,%zu,%d,%d", r->label, r->cache_k, r->cache_v, r->tail_tokens, p + 1,
                    r->run.n_gen, ps.first_div);
            csv_num(f, ps.kld_at_div);
            csv_num(f, ps.mean_kld);
            csv_num(f, ps.max_kld);
            csv_num(f, ps.same_top_p);
            fputc('\n', f);
        }
    }
    if (ferror(f)) return kvq_fail(err, KVQ_ERR_IO, "cannot write the drift CSV");
    return KVQ_OK;
}
