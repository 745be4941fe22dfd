/* eval_row.c - helpers of the sweep's result row (see eval_row.h). */
#include "eval_row.h"

#include <math.h>
#include <stdio.h>

void kvq_eval_row_init(kvq_eval_row *r) {
    memset(r, 0, sizeof *r);
    double *nums[] = {
        &r->n_tokens, &r->kv_bytes, &r->kv_bytes_bf16, &r->work_bytes, &r->size_pct, &r->mib,
        &r->mean_kld, &r->mean_kld_se, &r->median_kld, &r->p90_kld, &r->p99_kld,
        &r->p99_9_kld, &r->max_kld, &r->same_top_p, &r->same_top_se, &r->rms_dp,
        &r->ppl_q, &r->ppl_q_se, &r->ppl_base, &r->pp_tps, &r->tg_tps,
        &r->mean_precision, &r->p99_9_precision, &r->drift_first_div, &r->drift_kld,
    };
    for (size_t i = 0; i < KVQ_ARRAY_LEN(nums); i++) *nums[i] = NAN;
}

long kvq_eval_rows_reference(const kvq_eval_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].is_reference) return (long)i;
    return -1;
}

/* exp(-(kld - ref)) in percent; NAN propagates (unknown stays unknown). */
static double precision_pct(double kld, double ref) { return 100.0 * exp(-(kld - ref)); }

void kvq_eval_rows_precision(kvq_eval_row *rows, size_t n) {
    long ref = kvq_eval_rows_reference(rows, n);
    double ref_mean = ref >= 0 ? rows[ref].mean_kld : 0.0;
    double ref_p999 = ref >= 0 ? rows[ref].p99_9_kld : 0.0;
    /* A reference row whose KLD is unknown counts as the exact cache. */
    if (isnan(ref_mean)) ref_mean = 0.0;
    if (isnan(ref_p999)) ref_p999 = 0.0;
    for (size_t i = 0; i < n; i++) {
        rows[i].mean_precision = precision_pct(rows[i].mean_kld, ref_mean);
        rows[i].p99_9_precision = precision_pct(rows[i].p99_9_kld, ref_p999);
    }
}

void kvq_eval_copy_str(char *dst, size_t cap, const char *src) {
    if (!cap) return;
    size_t len = src ? strlen(src) : 0;
    if (len >= cap) len = cap - 1;
    if (len) memcpy(dst, src, len);
    dst[len] = 0;
}

const char *kvq_eval_fmt(char *buf, size_t cap, const char *fmt, double v) {
    if (isnan(v)) snprintf(buf, cap, "-");
    else snprintf(buf, cap, fmt, v);
    /* a rounding wobble below zero prints as 0, not "-0.000000" */
    if (buf[0] == '-' && strspn(buf + 1, "0.%") == strlen(buf + 1) && buf[1])
        memmove(buf, buf + 1, strlen(buf));
    return buf;
}

void kvq_eval_write_md_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else if (*s == '\n' || *s == '\r') fputc(' ', f);
        else fputc(*s, f);
    }
}

bool kvq_eval_rows_have_drift(const kvq_eval_row *rows, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (rows[i].drift_n_gen > 0) return true;
    return false;
}

const char *kvq_eval_fmt_first_div(char *buf, size_t cap, const kvq_eval_row *r) {
    if (isnan(r->drift_first_div)) snprintf(buf, cap, "-");
    else if (r->drift_first_div > r->drift_n_gen) snprintf(buf, cap, "never");
    else snprintf(buf, cap, "%g", r->drift_first_div);
    return buf;
}
