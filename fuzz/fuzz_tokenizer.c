/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizer (src/tok_*.c) on
 * arbitrary vocabularies and texts.
 *
 * Input layout (so that mutations change the vocabulary and the text, not
 * only a byte stream the vocabulary parser rejects):
 *   byte 0   flags: bit 0 kind (0 SentencePiece, 1 byte-level BPE),
 *            bits 1-2 BPE pre-tokeniser (0 gpt2, 1 llama3, 2 qwen2),
 *            bit 3 add_space_prefix, bit 4 parse_special, bit 5 add_bos,
 *            bit 6 byte tokens (SPM <0xNN>, BPE the 256 byte characters),
 *            bit 7 lines starting with '!' are user-defined tokens
 *   byte 1   number of vocabulary lines V, byte 2 number of merge lines M
 *   then '\n'-separated lines: V tokens (at most 64 bytes each; a line
 *   "<...>" is a control token), M merges "left right" (BPE), and the
 *   rest of the input is the text.
 * The vocabulary always starts with <s> (BOS), </s> and <unk>.
 *
 * Checked: create succeeds or fails with a message; encode is
 * deterministic, every id is in the vocabulary, the count does not depend
 * on the room given; every id has a piece; and where the tokenizer is
 * lossless by construction (byte tokens present, no special parsing, no
 * user-defined tokens; for SPM: well-formed UTF-8 without a literal
 * U+2581, and a U+2581 token when there are spaces) the pieces spell the
 * text back exactly.
 */
#include "tokenizer.h"

#include <stdlib.h>

enum { MAX_LINE = 64, MAX_IDS = 1 << 16 };

typedef struct vocab {
    gguf_str tok[3 + 256 + 255], merge[255];
    float score[3 + 256 + 255];
    int32_t type[3 + 256 + 255];
    char bytes[256][8];                 /* storage of the byte tokens */
    int n, n_merges;
    bool user_defined;                  /* some line is a user-defined token */
} vocab;

/* GPT-2's printable stand-in of byte b, as UTF-8 (written here from the
 * published rule, independently of src/model/tok_bpe.c). */
static int gpt2_byte_char(int b, char *out) {
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int k = 0;
        for (int c = 0; c < b; c++) k += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
        cp = 256 + k;
    }
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 63));
    return 2;
}

static void add(vocab *v, const char *s, size_t len, float score, int32_t type) {
    v->tok[v->n] = (gguf_str){ s, len };
    v->score[v->n] = score;
    v->type[v->n] = type;
    v->n++;
}

/* Next '\n'-terminated line of [*p, end); false at the end. */
static bool next_line(const uint8_t **p, const uint8_t *end, gguf_str *line) {
    if (*p >= end) return false;
    const uint8_t *nl = memchr(*p, '\n', (size_t)(end - *p));
    const uint8_t *stop = nl ? nl : end;
    *line = (gguf_str){ (const char *)*p, (uint64_t)(stop - *p) };
    *p = nl ? nl + 1 : end;
    return true;
}

static const uint8_t *build(vocab *v, uint8_t flags, int n_lines, int n_merges, const uint8_t *p, const uint8_t *end) {
    const bool bpe = flags & 1;
    add(v, "<s>", 3, 0.0f, KVQ_TOKTYPE_CONTROL);
    add(v, "</s>", 4, 0.0f, KVQ_TOKTYPE_CONTROL);
    add(v, "<unk>", 5, 0.0f, KVQ_TOKTYPE_UNKNOWN);
    if (flags & 64)
        for (int b = 0; b < 256; b++) {
            int len = bpe ? gpt2_byte_char(b, v->bytes[b]) : snprintf(v->bytes[b], sizeof v->bytes[b], "<0x%02X>", b);
            add(v, v->bytes[b], (size_t)len, 0.0f, bpe ? KVQ_TOKTYPE_NORMAL : KVQ_TOKTYPE_BYTE);
        }
    gguf_str line;
    for (int i = 0; i < n_lines && next_line(&p, end, &line); i++) {
        if (line.len > MAX_LINE) line.len = MAX_LINE;
        int32_t type = KVQ_TOKTYPE_NORMAL;
        if (line.len >= 2 && line.ptr[0] == '<' && line.ptr[line.len - 1] == '>') type = KVQ_TOKTYPE_CONTROL;
        else if ((flags & 128) && line.len >= 2 && line.ptr[0] == '!') {
            type = KVQ_TOKTYPE_USER_DEFINED;
            v->user_defined = true;
        }
        add(v, line.ptr, line.len, -(float)(i + 1), type);
    }
    for (int i = 0; bpe && i < n_merges && next_line(&p, end, &line); i++) {
        if (line.len > 2 * MAX_LINE + 1) line.len = 2 * MAX_LINE + 1;
        v->merge[v->n_merges++] = line;
    }
    return p;
}

static bool has_token(const vocab *v, const char *s) {
    for (int i = 3; i < v->n; i++)
        if (v->type[i] == KVQ_TOKTYPE_NORMAL && v->tok[i].len == strlen(s) && !memcmp(v->tok[i].ptr, s, v->tok[i].len))
            return true;
    return false;
}

/* Well-formed UTF-8 (shortest forms and surrogates not checked: only the
 * lengths matter here). */
static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const int len = s[i] < 0x80 ? 1 : (s[i] >> 5) == 6 ? 2 : (s[i] >> 4) == 14 ? 3 : (s[i] >> 3) == 30 ? 4 : 0;
        if (!len || i + (size_t)len > n) return false;
        for (int k = 1; k < len; k++)
            if ((s[i + (size_t)k] & 0xC0) != 0x80) return false;
        i += (size_t)len;
    }
    return true;
}

static bool lossless(const vocab *v, uint8_t flags, const uint8_t *text, size_t len) {
    if (!(flags & 64) || (flags & 16) || v->user_defined) return false;
    if (!(flags & 1) && memmem(text, len, "\xE2\x96\x81", 3)) return false;
    /* SPM: a space becomes U+2581, which without a token of its own falls
     * back to its three byte tokens and so reads back as U+2581 (as in
     * llama.cpp): lossless only with a "\u2581" token, or no space at all */
    if (!(flags & 1) && !has_token(v, "\xE2\x96\x81") && ((flags & 8) || memchr(text, ' ', len))) return false;
    /* SPM: a malformed UTF-8 lead byte swallows the bytes after it into one
     * "character" (llama.cpp's rule too), a U+2581 among them included,
     * which then reads back as U+2581 rather than a space */
    if (!(flags & 1) && !valid_utf8(text, len)) return false;
    /* a line that duplicates a byte token's text (or, in SPM, takes the
     * "<0xNN>" form) can stand in for it: no longer lossless by construction */
    for (int i = 3 + 256; i < v->n; i++) {
        if (!(flags & 1) && v->tok[i].len == 6 && !memcmp(v->tok[i].ptr, "<0x", 3)) return false;
        for (int b = 0; (flags & 1) && b < 256; b++)
            if (v->tok[i].len == v->tok[3 + b].len && !memcmp(v->tok[i].ptr, v->tok[3 + b].ptr, v->tok[i].len))
                return false;
    }
    return true;
}

static void check_encoding(const kvq_tokenizer *t, const vocab *v, uint8_t flags, const uint8_t *text, size_t len) {
    const bool add_bos = flags & 32, special = flags & 16;
    const int n = kvq_tokenizer_encode(t, (const char *)text, len, add_bos, special, NULL, 0);
    if (n < 0 || n > MAX_IDS) return;                  /* out of memory, or too long to check here */
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids), *again = malloc(((size_t)n + 1) * sizeof *again);
    if (!ids || !again) abort();
    if (kvq_tokenizer_encode(t, (const char *)text, len, add_bos, special, ids, n) != n) abort();
    if (n > 0 && kvq_tokenizer_encode(t, (const char *)text, len, add_bos, special, again, n - 1) != n) abort();
    if (kvq_tokenizer_encode(t, (const char *)text, len, add_bos, special, again, n + 1) != n) abort();
    if (n > 0 && memcmp(ids, again, (size_t)n * sizeof *ids) != 0) abort();
    size_t cap = (size_t)n * 8 + 64, got = 0;
    char *out = malloc(cap), piece[256];
    if (!out) abort();
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->n) abort();
        const int k = kvq_tokenizer_piece(t, ids[i], piece, (int)sizeof piece);
        if (k < 0 || k > (int)sizeof piece) abort();
        if (got + (size_t)k > cap) {
            cap = 2 * (got + (size_t)k);
            char *o = realloc(out, cap);
            if (!o) abort();
            out = o;
        }
        memcpy(out + got, piece, (size_t)k);
        got += (size_t)k;
    }
    if (lossless(v, flags, text, len)) {
        /* SPM with add_space_prefix spells " " + text (kvq keeps the
         * prefix in its pieces) */
        const size_t pre = !(flags & 1) && (flags & 8) && len > 0;
        if (got != len + pre || (pre && out[0] != ' ') || memcmp(out + pre, text, len) != 0) abort();
    }
    free(out);
    free(ids);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    static vocab v;
    memset(&v, 0, sizeof v);
    const uint8_t flags = data[0];
    const uint8_t *text = build(&v, flags, data[1], data[2], data + 3, data + size);
    kvq_tokenizer_desc d;
    kvq_tokenizer_desc_default(&d, flags & 1 ? KVQ_TOK_BPE : KVQ_TOK_SPM, (kvq_tok_pre)(((flags >> 1) & 3) % 3));
    d.n_vocab = v.n;
    d.tokens = v.tok;
    d.scores = v.score;
    d.token_types = v.type;
    d.n_merges = v.n_merges;
    d.merges = v.n_merges ? v.merge : NULL;
    d.bos = 0;
    d.eos = 1;
    d.unk = 2;
    d.add_bos = flags & 32;
    d.add_space_prefix = flags & 8;
    d.ignore_merges = ((flags >> 1) & 3) == 1;   /* llama3 */
    kvq_tokenizer *t = NULL;
    kvq_error err = { 0 };
    kvq_status s = kvq_tokenizer_create(&d, &t, &err);
    if (s != KVQ_OK) {
        if (t || !err.msg[0]) abort();
        return 0;
    }
    for (int32_t id = -1; id <= v.n; id++) {
        char piece[256];
        const int k = kvq_tokenizer_piece(t, id, piece, (int)sizeof piece);
        if ((id < 0 || id >= v.n) != (k < 0)) abort();
    }
    check_encoding(t, &v, flags, text, (size_t)(data + size - text));
    kvq_tokenizer_free(t);
    return 0;
}
