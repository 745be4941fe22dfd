/* base_kvq.c - kvq's exact KLD base file and the model-file hash (layout
 * and rules in base_kvq.h). */
#include "base_kvq.h"
#include "model.h"
#include "hash64.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = { 'K', 'V', 'Q', 'B', 'A', 'S', 'E', '1' };
enum { VERSION = 1, HEADER_BYTES = 80, HEADER_HASHED = 64 };
/* Sanity limits on header fields, far above any real model. */
enum { MAX_CTX = 1 << 24, MAX_VOCAB = 1 << 24, MAX_CHUNK = 1 << 24 };

static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void wr64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bool host_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static size_t scored_per_chunk(int n_ctx) { return (size_t)(n_ctx - 1 - n_ctx / 2); }

kvq_base_format kvq_base_sniff(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return KVQ_BASE_UNKNOWN;
    char m[8];
    size_t got = fread(m, 1, 8, f);
    fclose(f);
    if (got != 8) return KVQ_BASE_UNKNOWN;
    if (!memcmp(m, "_logits_", 8)) return KVQ_BASE_LLAMA;
    if (!memcmp(m, MAGIC, 8)) return KVQ_BASE_KVQ;
    return KVQ_BASE_UNKNOWN;
}

/* --------------------------------------------------------- model hash */

enum { PREFIX_BYTES = 16 << 20, N_SAMPLES = 1024, SAMPLE_BYTES = 4096 };

static bool pread_all(int fd, void *buf, size_t len, uint64_t off) {
    uint8_t *p = buf;
    while (len) {
        ssize_t got = pread(fd, p, len, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        off += (uint64_t)got;
        len -= (size_t)got;
    }
    return true;
}

/* The model hash's definition (base_kvq.h) over any byte source: read(ctx,
 * buf, len, off) fills buf with len bytes at off. */
typedef bool (*read_at_fn)(void *ctx, uint8_t *buf, size_t len, uint64_t off);

static bool hash_model_bytes(uint64_t size, read_at_fn read, void *ctx, uint8_t *buf, size_t cap, uint64_t *out) {
    kvq_hash64 h;
    kvq_hash64_init(&h);
    uint8_t size_le[8];
    wr64(size_le, size);
    kvq_hash64_update(&h, size_le, 8);
    bool ok = true;
    const uint64_t prefix = size < PREFIX_BYTES ? size : PREFIX_BYTES;
    for (uint64_t off = 0; ok && off < prefix; off += cap) {
        size_t len = (size_t)KVQ_MIN((uint64_t)cap, prefix - off);
        ok = read(ctx, buf, len, off);
        if (ok) kvq_hash64_update(&h, buf, len);
    }
    if (ok && size > (uint64_t)PREFIX_BYTES + SAMPLE_BYTES) {
        const uint64_t span = size - PREFIX_BYTES - SAMPLE_BYTES;
        for (uint64_t i = 0; ok && i < N_SAMPLES; i++) {
            /* i*span fits in 64 bits for files below 2^54 bytes */
            uint64_t off = PREFIX_BYTES + i * span / (N_SAMPLES - 1);
            ok = read(ctx, buf, SAMPLE_BYTES, off);
            if (ok) kvq_hash64_update(&h, buf, SAMPLE_BYTES);
        }
    }
    *out = kvq_hash64_final(&h);
    return ok;
}

static bool read_fd(void *ctx, uint8_t *buf, size_t len, uint64_t off) { return pread_all(*(int *)ctx, buf, len, off); }

kvq_status kvq_model_file_hash(const char *path, uint64_t *hash, kvq_error *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kvq_fail(err, KVQ_ERR_IO, "cannot open model '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kvq_fail(err, KVQ_ERR_IO, "model '%s' is not a regular file", path);
    }
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = kvq_malloc(CHUNK);
    if (!buf) {
        close(fd);
        return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory hashing '%s'", path);
    }
    const bool ok = hash_model_bytes((uint64_t)st.st_size, read_fd, &fd, buf, CHUNK, hash);
    free(buf);
    close(fd);
    if (!ok) return kvq_fail(err, KVQ_ERR_IO, "cannot read model '%s' while hashing it", path);
    return KVQ_OK;
}

typedef struct mem_src { const uint8_t *base; size_t size; } mem_src;
static bool read_mem(void *ctx, uint8_t *buf, size_t len, uint64_t off) {
    const mem_src *m = ctx;
    if (off > m->size || len > m->size - off) return false;
    memcpy(buf, m->base + off, len);
    return true;
}

uint64_t kvq_model_hash(const kvq_model *m) {
    mem_src src = { m->file->base, m->file->size };
    uint8_t buf[SAMPLE_BYTES];
    uint64_t h = 0;
    hash_model_bytes(src.size, read_mem, &src, buf, sizeof buf, &h);   /* in memory: cannot fail */
    return h;
}

/* ------------------------------------------------------------- writer */

struct kvq_base_kvq_writer {
    FILE *f;
    char path[512];
    uint64_t model_hash, token_hash;
    int n_ctx, n_vocab, n_chunk;
    size_t expected, written;
    kvq_hash64 payload;
    uint8_t *bytes;             /* one record, little-endian */
};

static kvq_status writer_abort(kvq_base_kvq_writer *w, kvq_status st) {
    if (w->f) fclose(w->f);
    free(w->bytes);
    free(w);
    return st;
}

kvq_status kvq_base_kvq_writer_open(const char *path, uint64_t model_hash, int n_ctx, int n_vocab,
                                    int n_chunk, const int32_t *tokens, kvq_base_kvq_writer **out,
                                    kvq_error *err) {
    *out = NULL;
    if (n_ctx < 4 || n_ctx > MAX_CTX || n_vocab < 1 || n_vocab > MAX_VOCAB || n_chunk < 1 || n_chunk > MAX_CHUNK)
        return kvq_fail(err, KVQ_ERR_ARG, "kvq base '%s': bad sizes (n_ctx %d, n_vocab %d, n_chunk %d)", path,
                        n_ctx, n_vocab, n_chunk);
    if (!host_little_endian())
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "kvq base files need a little-endian host");
    kvq_base_kvq_writer *w = kvq_calloc(1, sizeof *w);
    if (!w) return kvq_fail(err, KVQ_ERR_NOMEM, "kvq base: out of memory");
    snprintf(w->path, sizeof w->path, "%s", path);
    w->model_hash = model_hash;
    w->n_ctx = n_ctx;
    w->n_vocab = n_vocab;
    w->n_chunk = n_chunk;
    w->expected = (size_t)n_chunk * scored_per_chunk(n_ctx);
    size_t n_tok = (size_t)n_ctx * (size_t)n_chunk;
    w->bytes = kvq_malloc_n(4, KVQ_MAX((size_t)n_vocab, n_tok));
    if (!w->bytes) return writer_abort(w, kvq_fail(err, KVQ_ERR_NOMEM, "kvq base: out of memory"));
    w->f = fopen(path, "wb");
    if (!w->f)
        return writer_abort(w, kvq_fail(err, KVQ_ERR_IO, "kvq base '%s': cannot create: %s", path, strerror(errno)));

    /* Header placeholder (zero header hash = unreadable until close). */
    uint8_t header[HEADER_BYTES] = { 0 };
    for (size_t i = 0; i < n_tok; i++) wr32(w->bytes + 4 * i, (uint32_t)tokens[i]);
    w->token_hash = kvq_hash64_of(w->bytes, 4 * n_tok);
    kvq_hash64_init(&w->payload);
    kvq_hash64_update(&w->payload, w->bytes, 4 * n_tok);
    if (fwrite(header, 1, HEADER_BYTES, w->f) != HEADER_BYTES || fwrite(w->bytes, 4, n_tok, w->f) != n_tok)
        return writer_abort(w, kvq_fail(err, KVQ_ERR_IO, "kvq base '%s': write error", path));
    *out = w;
    return KVQ_OK;
}

kvq_status kvq_base_kvq_writer_add(kvq_base_kvq_writer *w, const float *logits, kvq_error *err) {
    if (w->written == w->expected)
        return kvq_fail(err, KVQ_ERR_ARG, "kvq base '%s': more than the %zu scored positions", w->path, w->expected);
    const double log_norm = kvq_log_sum_exp(logits, w->n_vocab);
    for (int i = 0; i < w->n_vocab; i++)
        wr32(w->bytes + 4 * (size_t)i, kvq_f32_bits((float)((double)logits[i] - log_norm)));
    size_t len = 4 * (size_t)w->n_vocab;
    kvq_hash64_update(&w->payload, w->bytes, len);
    if (fwrite(w->bytes, 1, len, w->f) != len)
        return kvq_fail(err, KVQ_ERR_IO, "kvq base '%s': write error", w->path);
    w->written++;
    return KVQ_OK;
}

static void encode_header(const kvq_base_kvq_writer *w, uint8_t *h) {
    memset(h, 0, HEADER_BYTES);
    memcpy(h, MAGIC, 8);
    wr32(h + 8, VERSION);
    wr32(h + 12, HEADER_BYTES);
    wr64(h + 16, w->model_hash);
    wr64(h + 24, w->token_hash);
    wr64(h + 32, kvq_hash64_final(&w->payload));
    wr64(h + 40, w->written);
    wr32(h + 48, (uint32_t)w->n_ctx);
    wr32(h + 52, (uint32_t)w->n_vocab);
    wr32(h + 56, (uint32_t)w->n_chunk);
    wr32(h + 60, 0);
    wr64(h + 64, kvq_hash64_of(h, HEADER_HASHED));
}

kvq_status kvq_base_kvq_writer_close(kvq_base_kvq_writer *w, kvq_error *err) {
    if (!w) return KVQ_OK;
    if (w->written != w->expected)
        return writer_abort(w, kvq_fail(err, KVQ_ERR_IO, "kvq base '%s': %zu of %zu positions written; file left "
                                        "incomplete", w->path, w->written, w->expected));
    uint8_t header[HEADER_BYTES];
    encode_header(w, header);
    bool ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(header, 1, HEADER_BYTES, w->f) == HEADER_BYTES;
    ok = fclose(w->f) == 0 && ok;
    w->f = NULL;
    kvq_status st = ok ? KVQ_OK : kvq_fail(err, KVQ_ERR_IO, "kvq base '%s': write error at close", w->path);
    return writer_abort(w, st);
}

/* ------------------------------------------------------------- reader */

/* Header fields against each other and the file size; b's fields set. */
static kvq_status parse_header(const char *path, const uint8_t *p, size_t size, kvq_base_kvq *b, uint64_t *payload_hash,
                               kvq_error *err) {
    if (size < HEADER_BYTES || memcmp(p, MAGIC, 8) != 0)
        return kvq_fail(err, KVQ_ERR_FORMAT, "'%s' is not a kvq base file (no KVQBASE1 magic)", path);
    if (rd32(p + 8) != VERSION || rd32(p + 12) != HEADER_BYTES)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': version %u (header %u bytes) is not supported", path,
                        rd32(p + 8), rd32(p + 12));
    if (rd64(p + 64) != kvq_hash64_of(p, HEADER_HASHED))
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': header checksum mismatch (corrupt, or the run that "
                        "wrote it did not finish)", path);
    b->model_hash = rd64(p + 16);
    b->token_hash = rd64(p + 24);
    *payload_hash = rd64(p + 32);
    uint64_t n_pos = rd64(p + 40);
    uint32_t n_ctx = rd32(p + 48), n_vocab = rd32(p + 52), n_chunk = rd32(p + 56);
    if (n_ctx < 4 || n_ctx > MAX_CTX || n_vocab < 1 || n_vocab > MAX_VOCAB || n_chunk < 1 || n_chunk > MAX_CHUNK)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': implausible header (n_ctx %u, n_vocab %u, n_chunk %u)",
                        path, n_ctx, n_vocab, n_chunk);
    b->n_ctx = (int)n_ctx;
    b->n_vocab = (int)n_vocab;
    b->n_chunk = (int)n_chunk;
    if (n_pos != (uint64_t)n_chunk * scored_per_chunk((int)n_ctx))
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': %llu positions, %u chunks of %u need %llu", path,
                        (unsigned long long)n_pos, n_chunk, n_ctx,
                        (unsigned long long)((uint64_t)n_chunk * scored_per_chunk((int)n_ctx)));
    /* each factor is below 2^24 and n_pos below 2^48: no 64-bit overflow
     * as long as n_pos * n_vocab is checked by division first */
    uint64_t tok_bytes = 4ull * n_ctx * n_chunk;
    uint64_t avail = size - HEADER_BYTES;
    if (tok_bytes > avail || n_pos > (avail - tok_bytes) / (4ull * n_vocab) ||
        tok_bytes + 4ull * n_pos * n_vocab != avail)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': file size %zu bytes does not match its header "
                        "(truncated or padded)", path, size);
    b->n_pos = (size_t)n_pos;
    return KVQ_OK;
}

/* Checks the header, the payload hash and every value of a base in
 * memory, and points b into it. */
static kvq_status validate(const char *name, const uint8_t *p, size_t size, kvq_base_kvq *b, kvq_error *err) {
    uint64_t payload_hash = 0;
    kvq_status s = parse_header(name, p, size, b, &payload_hash, err);
    if (s) return s;
    if (kvq_hash64_of(p + HEADER_BYTES, size - HEADER_BYTES) != payload_hash)
        return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': payload checksum mismatch (the file is corrupt)", name);
    const size_t n_tok = (size_t)b->n_ctx * (size_t)b->n_chunk;
    b->tokens = (const int32_t *)(p + HEADER_BYTES);
    b->logprobs = (const float *)(p + HEADER_BYTES + 4 * n_tok);
    for (size_t i = 0; i < n_tok; i++)
        if (b->tokens[i] < 0 || b->tokens[i] >= b->n_vocab)
            return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': token %d at %zu is outside the vocabulary of %d",
                            name, (int)b->tokens[i], i, b->n_vocab);
    /* A log-prob is finite and at most 0 (float rounding aside): a NaN,
     * inf or positive one would turn into a NaN or negative KLD.  The
     * checksum does not prove this, it only says the writer wrote it. */
    const size_t n_val = b->n_pos * (size_t)b->n_vocab;
    for (size_t i = 0; i < n_val; i++)
        if (!(b->logprobs[i] <= 1e-3f && b->logprobs[i] > -INFINITY))
            return kvq_fail(err, KVQ_ERR_FORMAT, "kvq base '%s': log-prob %g at position %zu, token %zu is not a "
                            "log-probability", name, (double)b->logprobs[i], i / (size_t)b->n_vocab,
                            i % (size_t)b->n_vocab);
    return KVQ_OK;
}

void kvq_base_kvq_reseal(void *data, size_t size) {
    uint8_t *p = data;
    if (size < HEADER_BYTES) return;
    wr64(p + 32, kvq_hash64_of(p + HEADER_BYTES, size - HEADER_BYTES));
    wr64(p + 64, kvq_hash64_of(p, HEADER_HASHED));
}

kvq_status kvq_base_kvq_open_memory(const void *data, size_t size, const char *name, kvq_base_kvq **out,
                                    kvq_error *err) {
    *out = NULL;
    if (!host_little_endian()) return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "kvq base files need a little-endian host");
    if (((uintptr_t)data & 3) != 0) return kvq_fail(err, KVQ_ERR_ARG, "kvq base '%s': buffer not 4-byte aligned", name);
    kvq_base_kvq *b = kvq_calloc(1, sizeof *b);
    if (!b) return kvq_fail(err, KVQ_ERR_NOMEM, "kvq base: out of memory");
    kvq_status s = validate(name, data, size, b, err);
    if (s != KVQ_OK) {
        kvq_base_kvq_close(b);
        return s;
    }
    *out = b;
    return KVQ_OK;
}

kvq_status kvq_base_kvq_open(const char *path, kvq_base_kvq **out, kvq_error *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kvq_fail(err, KVQ_ERR_IO, "cannot open kvq base '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < HEADER_BYTES) {
        close(fd);
        return kvq_fail(err, KVQ_ERR_FORMAT, "'%s' is not a kvq base file (too short or not a file)", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return kvq_fail(err, KVQ_ERR_IO, "cannot map kvq base '%s': %s", path, strerror(errno));
    kvq_status s = kvq_base_kvq_open_memory(map, size, path, out, err);
    if (s != KVQ_OK) {
        munmap(map, size);
        return s;
    }
    (*out)->map = map;          /* owned from here: unmapped by close */
    (*out)->map_len = size;
    return KVQ_OK;
}

void kvq_base_kvq_close(kvq_base_kvq *b) {
    if (!b) return;
    if (b->map) munmap(b->map, b->map_len);
    free(b);
}

const float *kvq_base_kvq_row(const kvq_base_kvq *b, size_t pos) {
    return pos < b->n_pos ? b->logprobs + pos * (size_t)b->n_vocab : NULL;
}

kvq_status kvq_base_kvq_check_model(const kvq_base_kvq *b, uint64_t model_hash, kvq_error *err) {
    if (b->model_hash != model_hash)
        return kvq_fail(err, KVQ_ERR_ARG, "the KLD base was made with a different model (model hash %016llx in "
                        "the base, %016llx for this model): make the base again with this model",
                        (unsigned long long)b->model_hash, (unsigned long long)model_hash);
    return KVQ_OK;
}

kvq_status kvq_base_kvq_check_tokens(const kvq_base_kvq *b, const int32_t *tokens, size_t n_tokens,
                                     int n_ctx, int n_chunk, kvq_error *err) {
    if (n_ctx != b->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "the KLD base was made with context %d, this run uses %d (-c)", b->n_ctx,
                        n_ctx);
    if (n_chunk > b->n_chunk)
        return kvq_fail(err, KVQ_ERR_ARG, "the KLD base holds %d chunks, this run asks for %d (--chunks)",
                        b->n_chunk, n_chunk);
    size_t need = (size_t)n_ctx * (size_t)n_chunk;
    if (n_tokens < need)
        return kvq_fail(err, KVQ_ERR_ARG, "the text has %zu tokens, %d chunks of %d need %zu", n_tokens, n_chunk,
                        n_ctx, need);
    for (size_t i = 0; i < need; i++)
        if (tokens[i] != b->tokens[i])
            return kvq_fail(err, KVQ_ERR_ARG, "the text differs from the KLD base's at token %zu (chunk %zu: "
                            "id %d, base %d): the base was made from another text or tokenizer",
                            i, i / (size_t)n_ctx, (int)tokens[i], (int)b->tokens[i]);
    return KVQ_OK;
}

kvq_kld_token kvq_base_kvq_compare(const float *logits, int n_vocab, const float *base_lp, int next) {
    kvq_kld_token r = { 0 };
    int top_base = 0;
    for (int i = 1; i < n_vocab; i++)
        if (base_lp[i] > base_lp[top_base]) top_base = i;
    const double log_norm = kvq_log_sum_exp(logits, n_vocab);
    double kl = 0.0;
    for (int i = 0; i < n_vocab; i++) {
        const double lb = base_lp[i];
        kl += exp(lb) * (lb - ((double)logits[i] - log_norm));
    }
    r.kld = kl;
    r.nll = log_norm - logits[next];
    r.nll_base = -(double)base_lp[next];
    r.dp = exp(-r.nll) - exp(-r.nll_base);
    r.same_top = kvq_argmax(logits, n_vocab) == top_base;
    return r;
}

void kvq_base_kvq_get_info(const kvq_base_kvq *b, kvq_base_info *out) {
    memset(out, 0, sizeof *out);
    if (!b) return;
    out->model_hash = b->model_hash;
    out->token_hash = b->token_hash;
    out->n_ctx = b->n_ctx;
    out->n_vocab = b->n_vocab;
    out->n_chunk = b->n_chunk;
    out->n_pos = b->n_pos;
}
