/* tok_pretok.c - the BPE pre-tokenisers, written as hand scanners that
 * give the same split as these regexes (\p{L}, \p{N}, \s per
 * unicode_class.h):
 *
 *  GPT2 ("default", "gpt2"):
 *    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *  LLAMA3 ("llama3", "llama-v3", "llama-bpe"); QWEN2 ("qwen2") is the same
 *  with \p{N} instead of \p{N}{1,3} (digits one at a time):
 *    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Each scanner returns where the match starting at character i ends (the
 * alternatives are tried in the regex's order; one always matches). */
#include "tok_internal.h"
#include "unicode_class.h"

typedef struct pt_text {
    const uint32_t *cp;     /* code points (malformed bytes: U+FFFD, one byte each) */
    const uint8_t *cls;     /* their uc_class                                        */
    size_t n;
} pt_text;

static bool pt_is(const pt_text *p, size_t i, uc_class c) { return i < p->n && p->cls[i] == c; }
static bool pt_is_newline(const pt_text *p, size_t i) { return i < p->n && (p->cp[i] == '\r' || p->cp[i] == '\n'); }

static size_t pt_run(const pt_text *p, size_t i, uc_class c) {
    while (pt_is(p, i, c)) i++;
    return i;
}

static uint32_t pt_lower(uint32_t c, bool any_case) {
    return any_case && c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* 's 't 'm 'd 're 've 'll: the match length, 0 if none. */
static size_t pt_contraction(const pt_text *p, size_t i, bool any_case) {
    if (p->cp[i] != '\'' || i + 1 >= p->n) return 0;
    uint32_t a = pt_lower(p->cp[i + 1], any_case);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= p->n) return 0;
    uint32_t b = pt_lower(p->cp[i + 2], any_case);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ at whitespace: the run, less its last character when a
 * non-space follows and the run is longer than one (that last space then
 * prefixes the next word). */
static size_t pt_space_run(const pt_text *p, size_t i) {
    size_t e = pt_run(p, i, UC_SPACE);
    return (e < p->n && e - i > 1) ? e - 1 : e;
}

static size_t pt_scan_gpt2(const pt_text *p, size_t i) {
    size_t k = pt_contraction(p, i, false);
    if (k) return i + k;
    size_t j = (p->cp[i] == ' ' && i + 1 < p->n) ? i + 1 : i;   /* optional ' ' */
    if (pt_is(p, j, UC_LETTER)) return pt_run(p, j, UC_LETTER);
    if (pt_is(p, j, UC_NUMBER)) return pt_run(p, j, UC_NUMBER);
    if (pt_is(p, j, UC_OTHER)) return pt_run(p, j, UC_OTHER);
    return pt_space_run(p, i);
}

static size_t pt_scan_llama3(const pt_text *p, size_t i, size_t max_digits) {
    size_t k = pt_contraction(p, i, true);
    if (k) return i + k;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (pt_is(p, i, UC_LETTER)) return pt_run(p, i, UC_LETTER);
    if (!pt_is_newline(p, i) && !pt_is(p, i, UC_NUMBER) && pt_is(p, i + 1, UC_LETTER))
        return pt_run(p, i + 1, UC_LETTER);
    /* \p{N}{1,max_digits} */
    if (pt_is(p, i, UC_NUMBER)) {
        size_t e = i;
        while (e - i < max_digits && pt_is(p, e, UC_NUMBER)) e++;
        return e;
    }
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    size_t j = p->cp[i] == ' ' ? i + 1 : i;
    if (pt_is(p, j, UC_OTHER)) {
        size_t e = pt_run(p, j, UC_OTHER);
        while (pt_is_newline(p, e)) e++;
        return e;
    }
    /* \s*[\r\n]+ : the whitespace run up to its last newline */
    size_t e = pt_run(p, i, UC_SPACE), end_nl = 0;
    for (size_t q = i; q < e; q++)
        if (pt_is_newline(p, q)) end_nl = q + 1;
    if (end_nl) return end_nl;
    return pt_space_run(p, i);
}

static size_t pt_scan(kvq_tok_pre pre, const pt_text *p, size_t i) {
    switch (pre) {
    case KVQ_PRE_LLAMA3: return pt_scan_llama3(p, i, 3);
    case KVQ_PRE_QWEN2: return pt_scan_llama3(p, i, 1);
    default: return pt_scan_gpt2(p, i);
    }
}

bool tok_pretokenize(kvq_tok_pre pre, const char *text, size_t len, tok_word_fn fn, void *ctx) {
    uint32_t *cp = kvq_malloc_n(len + 1, sizeof *cp);
    uint8_t *cls = kvq_malloc(len + 1);
    size_t *off = kvq_malloc_n(len + 1, sizeof *off);
    bool ok = cp && cls && off;
    size_t n = 0;
    for (size_t b = 0; ok && b < len; n++) {
        int l;
        off[n] = b;
        cp[n] = uc_decode((const unsigned char *)text + b, len - b, &l);
        cls[n] = (uint8_t)uc_classify(cp[n]);
        b += (size_t)l;
    }
    if (ok) off[n] = len;
    pt_text p = {cp, cls, n};
    for (size_t i = 0; ok && i < n;) {
        size_t e = pt_scan(pre, &p, i);
        ok = fn(text + off[i], off[e] - off[i], ctx);
        i = e;
    }
    free(cp);
    free(cls);
    free(off);
    return ok;
}
