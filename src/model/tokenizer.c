/* tokenizer.c - building a tokenizer from its description, and turning ids
 * back into bytes.  Encoding is in tok_encode.c, GGUF loading in
 * tok_load.c. */
#include "tok_internal.h"
#include "unicode_class.h"

void kvq_tokenizer_desc_default(kvq_tokenizer_desc *d, kvq_tok_kind kind, kvq_tok_pre pre) {
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->pre = pre;
    d->bos = d->eos = d->unk = d->pad = -1;
    if (kind == KVQ_TOK_SPM) {
        d->add_bos = true;
        d->add_space_prefix = true;
    } else if (pre == KVQ_PRE_LLAMA3) {
        d->add_bos = true;
        d->ignore_merges = true;
    }
}

void kvq_tokenizer_free(kvq_tokenizer *t) {
    if (!t) return;
    tok_strmap_free(&t->vocab);
    tok_strmap_free(&t->merges);
    free(t->text);
    free(t->tok_off);
    free(t->tok_len);
    free(t->score);
    free(t->type);
    free(t->special);
    free(t);
}

/* Copy every token's and merge's bytes into one block (offsets < 4 GiB). */
static kvq_status tok_copy_strings(kvq_tokenizer *t, const kvq_tokenizer_desc *d,
                                   uint32_t *merge_off, kvq_error *err) {
    uint64_t total = 1;
    for (int32_t i = 0; i < d->n_vocab; i++) total += d->tokens[i].len;
    for (int32_t i = 0; i < d->n_merges; i++) total += d->merges[i].len;
    if (total > UINT32_MAX) return kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer: vocabulary text too large");
    t->text = kvq_malloc((size_t)total);
    if (!t->text) return kvq_fail(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t pos = 0;
    for (int32_t i = 0; i < d->n_vocab; i++) {
        if (d->tokens[i].len && !d->tokens[i].ptr) return kvq_fail(err, KVQ_ERR_ARG, "tokenizer: token %d has no text", i);
        if (d->tokens[i].len) memcpy(t->text + pos, d->tokens[i].ptr, d->tokens[i].len);
        t->tok_off[i] = pos;
        t->tok_len[i] = (uint32_t)d->tokens[i].len;
        pos += (uint32_t)d->tokens[i].len;
    }
    for (int32_t i = 0; i < d->n_merges; i++) {
        if (d->merges[i].len && !d->merges[i].ptr) return kvq_fail(err, KVQ_ERR_ARG, "tokenizer: merge %d has no text", i);
        if (d->merges[i].len) memcpy(t->text + pos, d->merges[i].ptr, d->merges[i].len);
        merge_off[i] = pos;
        pos += (uint32_t)d->merges[i].len;
    }
    return KVQ_OK;
}

/* The id that stands for byte b: SPM's <0xNN> token (else the byte itself
 * as a token), BPE's printable stand-in character. */
static int32_t tok_find_byte_token(const kvq_tokenizer *t, uint8_t b) {
    char buf[8];
    if (t->kind == KVQ_TOK_BPE) return tok_strmap_get(&t->vocab, buf, (size_t)uc_encode(tok_byte_to_cp(b), buf));
    snprintf(buf, sizeof buf, "<0x%02X>", b);
    int32_t id = tok_strmap_get(&t->vocab, buf, 6);
    if (id < 0) id = tok_strmap_get(&t->vocab, (const char *)&b, 1);
    return id;
}

typedef struct tok_len_id { uint32_t len; int32_t id; } tok_len_id;
static int tok_special_cmp(const void *a, const void *b) {
    const tok_len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;   /* longest text first */
    return (x->id > y->id) - (x->id < y->id);
}

/* Special tokens (control, user-defined, unknown) that can be matched in
 * raw text, longest first as llama.cpp tries them (lowest id first among
 * equal lengths). */
static kvq_status tok_collect_special(kvq_tokenizer *t, kvq_error *err) {
    tok_len_id *order = kvq_malloc_n((size_t)t->n_vocab, sizeof *order);
    t->special = kvq_malloc_n((size_t)t->n_vocab, sizeof *t->special);
    if (!order || !t->special) {
        free(order);
        return kvq_fail(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    }
    int32_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        bool special = ty == KVQ_TOKTYPE_CONTROL || ty == KVQ_TOKTYPE_USER_DEFINED || ty == KVQ_TOKTYPE_UNKNOWN;
        if (special && t->tok_len[i] > 0) order[n++] = (tok_len_id){t->tok_len[i], i};
    }
    qsort(order, (size_t)n, sizeof *order, tok_special_cmp);
    for (int32_t i = 0; i < n; i++) t->special[i] = order[i].id;
    t->n_special = n;
    free(order);
    return KVQ_OK;
}

static kvq_status tok_check_desc(const kvq_tokenizer_desc *d, kvq_error *err) {
    if (d->n_vocab <= 0 || !d->tokens) return kvq_fail(err, KVQ_ERR_ARG, "tokenizer: empty vocabulary");
    if (d->n_merges < 0 || (d->n_merges > 0 && !d->merges)) return kvq_fail(err, KVQ_ERR_ARG, "tokenizer: bad merges");
    if (d->n_merges > (1 << 24))                      /* ranks are merge priorities as floats */
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "tokenizer: too many merges (%d)", d->n_merges);
    if (d->kind != KVQ_TOK_SPM && d->kind != KVQ_TOK_BPE) return kvq_fail(err, KVQ_ERR_ARG, "tokenizer: unknown kind");
    const int32_t ids[4] = {d->bos, d->eos, d->unk, d->pad};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= d->n_vocab)
            return kvq_fail(err, KVQ_ERR_FORMAT, "tokenizer: special token id %d outside the vocabulary (%d)", ids[i], d->n_vocab);
    return KVQ_OK;
}

static kvq_status tok_build(kvq_tokenizer *t, const kvq_tokenizer_desc *d, kvq_error *err) {
    size_t nv = (size_t)d->n_vocab;
    t->tok_off = kvq_malloc_n(nv, sizeof *t->tok_off);
    t->tok_len = kvq_malloc_n(nv, sizeof *t->tok_len);
    t->score = kvq_malloc_n(nv, sizeof *t->score);
    t->type = kvq_malloc(nv);
    uint32_t *merge_off = kvq_malloc_n((size_t)d->n_merges + 1, sizeof *merge_off);
    kvq_status st = KVQ_OK;
    if (!t->tok_off || !t->tok_len || !t->score || !t->type || !merge_off ||
        !tok_strmap_init(&t->vocab, nv) || !tok_strmap_init(&t->merges, (size_t)d->n_merges)) {
        st = kvq_fail(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    if ((st = tok_copy_strings(t, d, merge_off, err)) != KVQ_OK) goto done;
    for (int32_t i = 0; i < d->n_vocab; i++) {
        t->score[i] = d->scores ? d->scores[i] : 0.0f;
        int32_t ty = d->token_types ? d->token_types[i] : KVQ_TOKTYPE_NORMAL;
        t->type[i] = (uint8_t)(ty >= 0 && ty <= KVQ_TOKTYPE_BYTE ? ty : KVQ_TOKTYPE_UNDEFINED);
        tok_strmap_put(&t->vocab, tok_text(t, i), t->tok_len[i], i);
    }
    for (int32_t i = 0; i < d->n_merges; i++)
        tok_strmap_put(&t->merges, t->text + merge_off[i], d->merges[i].len, i);
    for (int b = 0; b < 256; b++) t->byte_token[b] = tok_find_byte_token(t, (uint8_t)b);
    st = tok_collect_special(t, err);
done:
    free(merge_off);
    return st;
}

kvq_status kvq_tokenizer_create(const kvq_tokenizer_desc *d, kvq_tokenizer **out, kvq_error *err) {
    *out = NULL;
    kvq_status st = tok_check_desc(d, err);
    if (st != KVQ_OK) return st;
    kvq_tokenizer *t = kvq_calloc(1, sizeof *t);
    if (!t) return kvq_fail(err, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = d->kind;
    t->pre = d->pre;
    t->n_vocab = d->n_vocab;
    t->bos = d->bos; t->eos = d->eos; t->unk = d->unk; t->pad = d->pad;
    t->add_bos = d->add_bos; t->add_eos = d->add_eos;
    t->add_space_prefix = d->add_space_prefix;
    t->ignore_merges = d->ignore_merges;
    if ((st = tok_build(t, d, err)) != KVQ_OK) {
        kvq_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
}

/* ---- ids -> bytes */

typedef struct tok_out { char *buf; int cap, n; } tok_out;   /* n counts past cap */
static void tok_put(tok_out *o, const char *p, size_t len) {
    for (size_t i = 0; i < len; i++, o->n++)
        if (o->n < o->cap) o->buf[o->n] = p[i];
}

static int tok_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xNN>" -> NN, or -1 when the text is not of that form. */
static int tok_parse_byte_token(const char *s, uint32_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = tok_hex(s[3]), lo = tok_hex(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* SPM: "▁" (E2 96 81) stands for a space. */
static void tok_piece_spm(const char *s, uint32_t len, tok_out *o) {
    for (uint32_t i = 0; i < len;) {
        if (i + 3 <= len && memcmp(s + i, "\xE2\x96\x81", 3) == 0) { tok_put(o, " ", 1); i += 3; }
        else { tok_put(o, s + i, 1); i++; }
    }
}

/* BPE: each character is the stand-in of one byte (other characters,
 * which a byte-level vocabulary should not hold, are copied as they are). */
static void tok_piece_bpe(const char *s, uint32_t len, tok_out *o) {
    for (uint32_t i = 0; i < len;) {
        int n;
        uint32_t cp = uc_decode((const unsigned char *)s + i, len - i, &n);
        int b = tok_cp_to_byte(cp);
        if (b >= 0) { char c = (char)b; tok_put(o, &c, 1); }
        else tok_put(o, s + i, (size_t)n);
        i += (uint32_t)n;
    }
}

int kvq_tokenizer_piece(const kvq_tokenizer *t, int32_t id, char *buf, int cap) {
    if (!t || id < 0 || id >= t->n_vocab) return -1;
    tok_out o = {buf, cap < 0 ? 0 : cap, 0};
    const char *s = tok_text(t, id);
    uint32_t len = t->tok_len[id];
    int ty = t->type[id];
    int byte = ty == KVQ_TOKTYPE_BYTE ? tok_parse_byte_token(s, len) : -1;
    if (ty == KVQ_TOKTYPE_CONTROL) {
        /* nothing: control tokens stand for no text */
    } else if (t->kind == KVQ_TOK_SPM && ty == KVQ_TOKTYPE_UNKNOWN) {
        tok_put(&o, "\xE2\x96\x85", 3);            /* U+2585 "▅", as llama.cpp prints <unk> */
    } else if (t->kind == KVQ_TOK_BPE && (ty == KVQ_TOKTYPE_USER_DEFINED || ty == KVQ_TOKTYPE_UNKNOWN)) {
        tok_put(&o, s, len);                          /* added tokens are stored as plain text */
    } else if (byte >= 0) {
        char c = (char)byte;
        tok_put(&o, &c, 1);
    } else if (t->kind == KVQ_TOK_SPM) {
        tok_piece_spm(s, len, &o);
    } else {
        tok_piece_bpe(s, len, &o);
    }
    return KVQ_MIN(o.n, o.cap);
}

/* ---- accessors */
int32_t kvq_tokenizer_n_vocab(const kvq_tokenizer *t) { return t->n_vocab; }
int32_t kvq_tokenizer_bos(const kvq_tokenizer *t) { return t->bos; }
int32_t kvq_tokenizer_eos(const kvq_tokenizer *t) { return t->eos; }
bool kvq_tokenizer_add_bos(const kvq_tokenizer *t) { return t->add_bos; }
kvq_tok_kind kvq_tokenizer_kind(const kvq_tokenizer *t) { return t->kind; }
