/* kld.c - read and write llama.cpp's KL-divergence base files and compare
 * one position's logits against a stored row (formulas in kld.h). */
#include "kld.h"
#include "file_read.h"

#include <math.h>
#include <stdlib.h>

static const char MAGIC[8] = { '_', 'l', 'o', 'g', 'i', 't', 's', '_' };
enum { HEADER_BYTES = 8 + 4 + 4 + 4 };
/* Log-probs more than this many nats below the maximum are floored. */
#define LOGPROB_RANGE 16.0f

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float get_f32(const uint16_t *rec) { return kvq_bits_f32((uint32_t)rec[0] | (uint32_t)rec[1] << 16); }

/* A record as the encoder writes it: scale = (max - min)/65535 with min at
 * most LOGPROB_RANGE below max, min_log_prob finite, and its largest
 * log-prob (min_log_prob + 65535 * scale = -log sum exp(l - max)) at most
 * 0 but for float rounding.  Anything else gives NaN or a log-prob above
 * 0 in the comparison: a wrong number, so a format error. */
static bool record_is_valid(const uint16_t *rec) {
    const float scale = get_f32(rec), min_lp = get_f32(rec + 2);
    if (!isfinite(scale) || !isfinite(min_lp)) return false;
    if (scale < 0.0f || scale > (LOGPROB_RANGE + 0.01f) / 65535.0f) return false;
    return (double)min_lp + 65535.0 * (double)scale <= 1e-3;
}

/* Check the header against the file size: every count must fit exactly. */
static kvq_status parse(const char *path, const uint8_t *p, size_t len, kvq_kld_base *b, kvq_error *err) {
    if (len < HEADER_BYTES || memcmp(p, MAGIC, 8) != 0)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kld base '%s': not a llama.cpp logits file (no '_logits_' magic)", path);
    b->n_ctx = rd32(p + 8);
    b->n_vocab = (int32_t)rd32(p + 12);
    b->n_chunk = (int32_t)rd32(p + 16);
    if (b->n_ctx < 2 || b->n_ctx > (1u << 24) || b->n_vocab < 1 || b->n_vocab > (1 << 24) ||
        b->n_chunk < 1 || b->n_chunk > (1 << 24))
        return kvq_fail(err, KVQ_ERR_FORMAT, "kld base '%s': implausible header (n_ctx %u, n_vocab %d, n_chunk %d)",
                        path, b->n_ctx, b->n_vocab, b->n_chunk);
    const uint64_t n_tok = (uint64_t)b->n_ctx * (uint64_t)b->n_chunk;
    b->record_len = kvq_kld_record_len(b->n_vocab);
    b->n_pos = (size_t)b->n_chunk * (size_t)kvq_kld_scored_per_chunk((int)b->n_ctx);
    const uint64_t want = HEADER_BYTES + 4 * n_tok + 2ull * b->record_len * b->n_pos;
    if (want != len)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kld base '%s': size %zu bytes, header implies %llu", path, len,
                        (unsigned long long)want);
    b->tokens = kvq_malloc_n((size_t)n_tok, sizeof(int32_t));
    b->records = kvq_malloc_n(b->record_len * b->n_pos, sizeof(uint16_t));
    if (!b->tokens || !b->records) return kvq_fail(err, KVQ_ERR_NOMEM, "kld base '%s': out of memory", path);
    const uint8_t *q = p + HEADER_BYTES;
    for (uint64_t i = 0; i < n_tok; i++) b->tokens[i] = (int32_t)rd32(q + 4 * i);
    q += 4 * n_tok;
    for (size_t i = 0; i < b->record_len * b->n_pos; i++) b->records[i] = kvq_rd16(q + 2 * i);
    for (uint64_t i = 0; i < n_tok; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= b->n_vocab)
            return kvq_fail(err, KVQ_ERR_FORMAT, "kld base '%s': token %d at %llu is outside the vocabulary", path,
                            (int)b->tokens[i], (unsigned long long)i);
    for (size_t pos = 0; pos < b->n_pos; pos++)
        if (!record_is_valid(b->records + pos * b->record_len))
            return kvq_fail(err, KVQ_ERR_FORMAT, "kld base '%s': record %zu (chunk %zu) has an impossible scale %g "
                            "or minimum log-prob %g: the file is corrupt", path, pos,
                            pos / (size_t)kvq_kld_scored_per_chunk((int)b->n_ctx), (double)get_f32(b->records +
                            pos * b->record_len), (double)get_f32(b->records + pos * b->record_len + 2));
    return KVQ_OK;
}

kvq_status kvq_kld_base_parse(const void *data, size_t len, const char *name, kvq_kld_base **out, kvq_error *err) {
    if (!out || !name || (!data && len)) return kvq_fail(err, KVQ_ERR_ARG, "kvq_kld_base_parse: NULL argument");
    *out = NULL;
    kvq_kld_base *b = kvq_calloc(1, sizeof *b);
    kvq_status st = b ? parse(name, data, len, b, err) : kvq_fail(err, KVQ_ERR_NOMEM, "kld base: out of memory");
    if (st) { kvq_kld_base_free(b); return st; }
    *out = b;
    return KVQ_OK;
}

kvq_status kvq_kld_base_read(const char *path, kvq_kld_base **out, kvq_error *err) {
    if (!out || !path) return kvq_fail(err, KVQ_ERR_ARG, "kvq_kld_base_read: NULL argument");
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    kvq_status st = kvq_read_file(path, "kld base", KVQ_BASE_FILE_CAP, &text, &len, err);
    uint8_t *buf = (uint8_t *)text;
    if (st) return st;
    st = kvq_kld_base_parse(buf, len, path, out, err);
    free(buf);
    return st;
}

void kvq_kld_base_free(kvq_kld_base *b) {
    if (!b) return;
    free(b->tokens);
    free(b->records);
    free(b);
}

const uint16_t *kvq_kld_base_record(const kvq_kld_base *b, size_t pos) {
    return pos < b->n_pos ? b->records + pos * b->record_len : NULL;
}

/* ------------------------------------------------------------ encoding */

static void put_f32(uint16_t *rec, float v) {
    uint32_t u = kvq_f32_bits(v);
    rec[0] = (uint16_t)(u & 0xffff);
    rec[1] = (uint16_t)(u >> 16);
}


void kvq_kld_encode(const float *logits, int n_vocab, uint16_t *rec) {
    float max_l = logits[0], min_l = logits[0];
    for (int i = 1; i < n_vocab; i++) {
        max_l = fmaxf(max_l, logits[i]);
        min_l = fminf(min_l, logits[i]);
    }
    min_l = fmaxf(min_l, max_l - LOGPROB_RANGE);
    const double log_norm = kvq_log_sum_exp(logits, n_vocab);
    const float scale = (max_l - min_l) / 65535.0f;
    put_f32(rec, scale);
    put_f32(rec + 2, (float)((double)min_l - log_norm));   /* the log-prob of min_l */
    uint16_t *q = rec + 4;
    memset(q, 0, 2 * (((size_t)n_vocab + 1) / 2) * sizeof(uint16_t));
    if (scale > 0.0f) {
        const float inv = 1.0f / scale;
        for (int i = 0; i < n_vocab; i++)
            if (logits[i] > min_l) q[i] = (uint16_t)fminf(65535.0f, nearbyintf(inv * (logits[i] - min_l)));
    }
}

/* ------------------------------------------------------------ comparing */

double kvq_log_sum_exp(const float *x, int n) {
    float max_x = x[0];
    for (int i = 1; i < n; i++) max_x = fmaxf(max_x, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - max_x);
    return (double)max_x + log(sum);
}

double kvq_nll(const float *logits, int n_vocab, int tok) {
    return kvq_log_sum_exp(logits, n_vocab) - logits[tok];
}

int kvq_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

kvq_kld_token kvq_kld_compare(const float *logits, int n_vocab, const uint16_t *rec, int next) {
    kvq_kld_token r = { 0 };
    const float scale = get_f32(rec), min_lp = get_f32(rec + 2);
    const uint16_t *q = rec + 4;
    const double log_norm = kvq_log_sum_exp(logits, n_vocab);

    r.nll = log_norm - logits[next];
    r.nll_base = -((double)scale * q[next] + min_lp);
    /* KL(base||test) = Σ p_base (log p_base - log p_test); base values at
     * the floor (-16 nats below the top or less) are left out, as llama.cpp. */
    double kl = 0.0;
    int top_base = 0;
    double top_lp = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {   /* in double: KLDs of 1e-7 must not drown in rounding */
        const double lp_base = (double)scale * q[i] + min_lp;
        if (lp_base > top_lp) { top_lp = lp_base; top_base = i; }
        if (lp_base > -LOGPROB_RANGE) kl += exp(lp_base) * (lp_base - ((double)logits[i] - log_norm));
    }
    r.kld = kl;
    r.same_top = kvq_argmax(logits, n_vocab) == top_base;
    r.dp = exp(-r.nll) - exp(-r.nll_base);
    return r;
}

/* -------------------------------------------------------------- writer */

struct kvq_kld_writer {
    FILE *f;
    char path[512];
    int n_vocab;
    size_t expected, written;
    uint16_t *rec;
    uint8_t *bytes;
};

static bool write_u32(FILE *f, uint32_t v) {
    uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    return fwrite(b, 1, 4, f) == 4;
}

kvq_status kvq_kld_writer_open(const char *path, int n_ctx, int n_vocab, int n_chunk, const int32_t *tokens,
                               kvq_kld_writer **out, kvq_error *err) {
    *out = NULL;
    if (n_ctx < 2 || n_vocab < 1 || n_chunk < 1) return kvq_fail(err, KVQ_ERR_ARG, "kld writer: bad sizes");
    kvq_kld_writer *w = kvq_calloc(1, sizeof *w);
    if (!w) return kvq_fail(err, KVQ_ERR_NOMEM, "kld writer: out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    w->n_vocab = n_vocab;
    w->expected = (size_t)n_chunk * (size_t)kvq_kld_scored_per_chunk(n_ctx);
    w->rec = kvq_malloc_n(kvq_kld_record_len(n_vocab), sizeof(uint16_t));
    w->bytes = kvq_malloc_n(kvq_kld_record_len(n_vocab), 2);
    w->f = fopen(path, "wb");
    if (!w->rec || !w->bytes || !w->f) {
        kvq_status st = w->f ? kvq_fail(err, KVQ_ERR_NOMEM, "kld writer: out of memory")
                             : kvq_fail(err, KVQ_ERR_IO, "kld base '%s': cannot create", path);
        if (w->f) fclose(w->f);
        free(w->rec); free(w->bytes); free(w);
        return st;
    }
    bool ok = fwrite(MAGIC, 1, 8, w->f) == 8 && write_u32(w->f, (uint32_t)n_ctx) &&
              write_u32(w->f, (uint32_t)n_vocab) && write_u32(w->f, (uint32_t)n_chunk);
    for (size_t i = 0; ok && i < (size_t)n_ctx * (size_t)n_chunk; i++) ok = write_u32(w->f, (uint32_t)tokens[i]);
    *out = w;
    if (!ok) return kvq_fail(err, KVQ_ERR_IO, "kld base '%s': write error", path);
    return KVQ_OK;
}

kvq_status kvq_kld_writer_add(kvq_kld_writer *w, const float *logits, kvq_error *err) {
    const size_t len = kvq_kld_record_len(w->n_vocab);
    kvq_kld_encode(logits, w->n_vocab, w->rec);
    for (size_t i = 0; i < len; i++) kvq_wr16(w->bytes + 2 * i, w->rec[i]);
    if (fwrite(w->bytes, 2, len, w->f) != len) return kvq_fail(err, KVQ_ERR_IO, "kld base '%s': write error", w->path);
    w->written++;
    return KVQ_OK;
}

kvq_status kvq_kld_writer_close(kvq_kld_writer *w, kvq_error *err) {
    if (!w) return KVQ_OK;
    kvq_status st = KVQ_OK;
    if (fclose(w->f) != 0) st = kvq_fail(err, KVQ_ERR_IO, "kld base '%s': write error at close", w->path);
    else if (w->written != w->expected)
        st = kvq_fail(err, KVQ_ERR_IO, "kld base '%s': %zu of %zu positions written", w->path, w->written, w->expected);
    free(w->rec);
    free(w->bytes);
    free(w);
    return st;
}
