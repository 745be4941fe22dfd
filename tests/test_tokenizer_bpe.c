/* Tests of byte-level BPE: GPT-2's byte table, the three pre-tokenisers on
 * hand-made strings, merges by rank on a small vocabulary with hand-checked
 * ids, loading from an in-memory GGUF, and round trips of arbitrary bytes. */
#include "test.h"
#include "gguf_writer.h"
#include "tok_internal.h"
#include "unicode_class.h"

/* ---- pre-tokeniser splits, joined with '|' */

typedef struct join_ctx { char out[512]; size_t n; } join_ctx;

static bool join_word(const char *w, size_t len, void *ctx) {
    join_ctx *j = ctx;
    if (j->n && j->n < sizeof j->out - 1) j->out[j->n++] = '|';
    for (size_t i = 0; i < len && j->n < sizeof j->out - 1; i++) j->out[j->n++] = w[i];
    j->out[j->n] = 0;
    return true;
}

static const char *split(kvq_tok_pre pre, const char *text, join_ctx *j) {
    j->n = 0;
    j->out[0] = 0;
    tok_pretokenize(pre, text, strlen(text), join_word, j);
    return j->out;
}

typedef struct split_case { const char *in, *want; } split_case;

static void check_splits(test_ctx *t, kvq_tok_pre pre, const split_case *c, int n) {
    join_ctx j;
    for (int i = 0; i < n; i++) {
        const char *got = split(pre, c[i].in, &j);
        CHECK(strcmp(got, c[i].want) == 0, "pre %d: \"%s\" split as \"%s\", want \"%s\"", pre, c[i].in, got, c[i].want);
    }
}

TEST(tok_pretok_gpt2) {
    static const split_case c[] = {
        {"Hello world", "Hello| world"},
        {"I'm here, they'll go; we've", "I|'m| here|,| they|'ll| go|;| we|'ve"},
        {"it'd we're 'tis", "it|'d| we|'re| '|tis"},      /* a space before ' makes it punctuation */
        {"I'M", "I|'|M"},                              /* gpt2 contractions are lower-case only */
        {"abc   def", "abc|  | def"},                  /* last space joins the word */
        {"a\n\nb", "a|\n|\n|b"},
        {"x  ", "x|  "},                               /* trailing run kept whole */
        {"12345 abc 6", "12345| abc| 6"},
        {"hello!!! world?!", "hello|!!!| world|?!"},
        {"\tword", "\t|word"},
        {"na\xC3\xAFve caf\xC3\xA9", "na\xC3\xAFve| caf\xC3\xA9"},
        {"\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80", /* Привет, мир */
         "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82|,| \xD0\xBC\xD0\xB8\xD1\x80"},
        {"ab\xFF\xFE" "cd", "ab|\xFF\xFE|cd"},         /* invalid UTF-8: "other" bytes */
    };
    check_splits(t, KVQ_PRE_GPT2, c, (int)(sizeof c / sizeof c[0]));
}

TEST(tok_pretok_llama3) {
    static const split_case c[] = {
        {"I'M here", "I|'M| here"},                     /* case-insensitive contractions */
        {"We'LL they'Re i'vE 'x", "We|'LL| they|'Re| i|'vE| '|x"},
        {"12345", "123|45"},                            /* digits in groups of up to 3 */
        {"1234567 x", "123|456|7| x"},
        {"abc\n\n  def", "abc|\n\n| | def"},
        {"hello!!!\n\nworld", "hello|!!!\n\n|world"},   /* punctuation takes the newlines */
        {"\tword", "\tword"},                           /* any non-letter prefix joins */
        {",word", ",word"},
        {"a 1", "a| |1"},
        {"x  \n y", "x|  \n| y"},
        {"end.  ", "end|.|  "},
        {"\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x82\xBF\xE3\x83\xAF\xE3\x83\xBC 42", /* 東京タワー 42 */
         "\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x82\xBF\xE3\x83\xAF\xE3\x83\xBC| |42"},
    };
    check_splits(t, KVQ_PRE_LLAMA3, c, (int)(sizeof c / sizeof c[0]));
}

TEST(tok_pretok_qwen2) {
    static const split_case c[] = {
        {"12345", "1|2|3|4|5"},                         /* digits one at a time */
        {"year 2026.", "year| |2|0|2|6|."},
        {"I'D say", "I|'D| say"},
        {"a\r\n\r\nb", "a|\r\n\r\n|b"},
        {" (x)", " (|x|)"},
        {"\xEF\xBC\x91\xEF\xBC\x92", "\xEF\xBC\x91|\xEF\xBC\x92"},  /* fullwidth digits are numbers */
    };
    check_splits(t, KVQ_PRE_QWEN2, c, (int)(sizeof c / sizeof c[0]));
}

TEST(tok_unicode_classes) {
    CHECK(uc_table_is_sorted(), "class table not sorted");
    static const struct { uint32_t cp; uc_class cls; } c[] = {
        {'a', UC_LETTER}, {'Z', UC_LETTER}, {'5', UC_NUMBER}, {' ', UC_SPACE}, {'\n', UC_SPACE},
        {'!', UC_OTHER}, {'_', UC_OTHER}, {0xE9, UC_LETTER} /* é */, {0xD7, UC_OTHER} /* × */,
        {0xB2, UC_NUMBER} /* ² */, {0xA0, UC_SPACE}, {0x3B1, UC_LETTER} /* α */, {0x3A9, UC_LETTER},
        {0x416, UC_LETTER} /* Ж */, {0x483, UC_OTHER} /* combining */, {0x4E00, UC_LETTER},
        {0x6771, UC_LETTER} /* 東 */, {0x3042, UC_LETTER} /* あ */, {0x30FC, UC_LETTER} /* ー */,
        {0xAC00, UC_LETTER} /* 가 */, {0xFF11, UC_NUMBER}, {0x3000, UC_SPACE}, {0x2013, UC_OTHER} /* – */,
        {0x1F642, UC_OTHER} /* 🙂 */, {0x0663, UC_NUMBER}, {0x05D0, UC_LETTER}, {0x20000, UC_LETTER},
        {0x301, UC_OTHER} /* combining acute */, {0xFFFD, UC_OTHER}, {0x1200, UC_LETTER} /* Ethiopic */,
        {0x0915, UC_LETTER} /* क */, {0x093E, UC_OTHER} /* Devanagari vowel sign */, {0x0E01, UC_LETTER} /* Thai */,
        {0x0E31, UC_OTHER} /* Thai vowel mark */, {0x16EE, UC_NUMBER} /* runic numeral */, {0x2028, UC_SPACE},
        {0x200B, UC_OTHER} /* zero-width space is not \s */, {0x10FFFF, UC_OTHER},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        CHECK(uc_classify(c[i].cp) == c[i].cls, "U+%04X classified %d, want %d", c[i].cp, uc_classify(c[i].cp), c[i].cls);
    int len;
    CHECK(uc_decode((const unsigned char *)"\xC3\xA9", 2, &len) == 0xE9 && len == 2, "é");
    CHECK(uc_decode((const unsigned char *)"\xC3", 1, &len) == 0xFFFD && len == 1, "truncated");
    CHECK(uc_decode((const unsigned char *)"\xC0\x80", 2, &len) == 0xFFFD && len == 1, "overlong");
    CHECK(uc_decode((const unsigned char *)"\xED\xA0\x80", 3, &len) == 0xFFFD && len == 1, "surrogate");
    CHECK(uc_decode((const unsigned char *)"\xF0\x9F\x99\x82", 4, &len) == 0x1F642 && len == 4, "emoji");
}

/* GPT-2's table, written out independently: printable bytes map to
 * themselves, the rest to 256.. in byte order. */
TEST(tok_bpe_byte_table) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t want = printable ? (uint32_t)b : next++;
        CHECK(tok_byte_to_cp((uint8_t)b) == want, "byte %d -> U+%04X, want U+%04X", b, tok_byte_to_cp((uint8_t)b), want);
        CHECK(tok_cp_to_byte(want) == b, "U+%04X -> %d, want %d", want, tok_cp_to_byte(want), b);
    }
    CHECK(next == 256 + 68, "%u stand-ins", next - 256);
    CHECK(tok_cp_to_byte(0x20) == -1 && tok_cp_to_byte(324) == -1 && tok_cp_to_byte(0xAD) == -1,
          "non-stand-in code points must map to no byte");
}

/* ---- a small byte-level vocabulary: ids 0..255 are the bytes' stand-ins
 * (so id == byte), then the merged tokens below, then <|end|> (control). */
enum { B_GT = 256, B_HE, B_GTHE, B_AT, B_CAT, B_GC, B_GCAT, B_TH, B_THE, B_END, B_N };
static const char *const bpe_merges[] = {
    "\304\240 t",        /* 0: Ġ t   -> Ġt  */
    "h e",               /* 1: h e   -> he  */
    "\304\240t he",      /* 2: Ġt he -> Ġthe */
    "a t",               /* 3: a t   -> at  */
    "c at",              /* 4: c at  -> cat */
    "\304\240 c",        /* 5: Ġ c   -> Ġc  */
    "\304\240c at",   /* 6: Ġc at -> Ġcat */
    "t h",               /* 7: t h   -> th  */
    "t he",              /* 8: t he  -> the */
};

static kvq_tokenizer *tiny_bpe(kvq_tok_pre pre) {
    static char chars[256][4];
    gguf_str tokens[B_N], merges[9];
    int32_t types[B_N];
    for (int b = 0; b < 256; b++) {
        int n = uc_encode(tok_byte_to_cp((uint8_t)b), chars[b]);
        tokens[b] = (gguf_str){chars[b], (uint64_t)n};
        types[b] = 1;
    }
    const char *extra[] = {"\304\240t", "he", "\304\240the", "at", "cat", "\304\240c", "\304\240cat",
                           "th", "the", "<|end|>"};
    for (int i = 0; i < B_N - 256; i++) {
        tokens[256 + i] = (gguf_str){extra[i], strlen(extra[i])};
        types[256 + i] = 1;
    }
    types[B_END] = 3;
    for (int i = 0; i < 9; i++) merges[i] = (gguf_str){bpe_merges[i], strlen(bpe_merges[i])};
    kvq_tokenizer_desc d;
    kvq_tokenizer_desc_default(&d, KVQ_TOK_BPE, pre);
    d.n_vocab = B_N; d.tokens = tokens; d.token_types = types;
    d.n_merges = 9; d.merges = merges;
    d.bos = d.eos = B_END;
    kvq_tokenizer *t = NULL;
    kvq_error err;
    return kvq_tokenizer_create(&d, &t, &err) == KVQ_OK ? t : NULL;
}

static int encode_str(const kvq_tokenizer *tok, const char *s, bool special, int32_t *ids, int cap) {
    for (int i = 0; i < cap; i++) ids[i] = -99;
    return kvq_tokenizer_encode(tok, s, strlen(s), special, true, ids, cap);
}

static void ids_str(const int32_t *ids, int n, char *out, size_t cap) {
    size_t pos = 0;
    out[0] = 0;
    for (int i = 0; i < n && pos + 12 < cap; i++) pos += (size_t)snprintf(out + pos, cap - pos, "%d ", ids[i]);
}

#define EXPECT(tok, text, special, ...) do {                                            \
        const int32_t w_[] = {__VA_ARGS__};                                             \
        int nw_ = (int)(sizeof w_ / sizeof w_[0]);                                      \
        int32_t g_[32];                                                                 \
        char gs_[256], ws_[256];                                                        \
        int ng_ = encode_str(tok, text, special, g_, 32), same_ = ng_ == nw_;           \
        for (int k_ = 0; same_ && k_ < nw_; k_++) same_ = g_[k_] == w_[k_];             \
        ids_str(g_, ng_ < 32 ? ng_ : 32, gs_, sizeof gs_);                              \
        ids_str(w_, nw_, ws_, sizeof ws_);                                              \
        CHECK(same_, "\"%s\": ids %s, want %s", text, gs_, ws_);                         \
    } while (0)

TEST(tok_bpe_merges_by_rank) {
    kvq_tokenizer *tok = tiny_bpe(KVQ_PRE_GPT2);
    CHECK(tok, "create failed");
    /* "the": h e (rank 1) before t h (rank 7), then t he (8) -> the */
    EXPECT(tok, "the", false, B_THE);
    /* " cat": a t (3), c at (4); Ġ c (5) is then stale: Ġ + cat */
    EXPECT(tok, " cat", false, ' ', B_CAT);
    /* " the": Ġ t (0), h e (1), Ġt he (2) */
    EXPECT(tok, " the cat", false, B_GTHE, ' ', B_CAT);
    /* no merges apply: one byte token each; é = C3 A9 */
    EXPECT(tok, "x\xC3\xA9\n", false, 'x', 0xC3, 0xA9, '\n');
    /* control token cut out; BOS not added for a gpt2 vocabulary */
    EXPECT(tok, "the<|end|>cat", true, B_THE, B_END, B_CAT);
    int32_t none[2];
    int n_empty = encode_str(tok, "", true, none, 2);     /* nothing at all */
    kvq_tokenizer_free(tok);
    CHECK(n_empty == 0 && none[0] == -99, "empty text gave %d ids", n_empty);
}

TEST(tok_bpe_llama3_keeps_whole_tokens) {
    kvq_tokenizer *l3 = tiny_bpe(KVQ_PRE_LLAMA3), *q2 = tiny_bpe(KVQ_PRE_QWEN2);
    CHECK(l3 && q2, "create failed");
    int32_t a[8], b[8];
    /* " cat" is a token: llama3 ignores merges for it, qwen2 merges */
    int na = encode_str(l3, " cat", false, a, 8), nb = encode_str(q2, " cat", false, b, 8);
    /* llama3 adds BOS by default */
    int32_t c[8];
    int nc = encode_str(l3, "the", true, c, 8);
    kvq_tokenizer_free(l3);
    kvq_tokenizer_free(q2);
    CHECK(na == 1 && a[0] == B_GCAT, "llama3 \" cat\": %d ids (%d)", na, a[0]);
    CHECK(nb == 2 && b[0] == ' ' && b[1] == B_CAT, "qwen2 \" cat\": %d ids (%d %d)", nb, b[0], b[1]);
    CHECK(nc == 2 && c[0] == B_END && c[1] == B_THE, "llama3 with BOS: %d ids (%d %d)", nc, c[0], c[1]);
}

/* Any bytes (including invalid UTF-8 and NUL) encode and decode back. */
TEST(tok_bpe_roundtrip_random_bytes) {
    kvq_tokenizer *toks[3] = {tiny_bpe(KVQ_PRE_GPT2), tiny_bpe(KVQ_PRE_LLAMA3), tiny_bpe(KVQ_PRE_QWEN2)};
    CHECK(toks[0] && toks[1] && toks[2], "create failed");
    test_rng rng = {42, 0, 0};
    static const char alphabet[] = "the cat 12 \n\t'sS!\xC3\xA9\xE6\x9D\xB1\xFF\x80";
    char text[200], back[800];
    int32_t ids[400];
    int bad = -1;
    for (int iter = 0; iter < 300 && bad < 0; iter++) {
        kvq_tokenizer *tok = toks[iter % 3];
        size_t len = (size_t)(test_rng_u64(&rng) % sizeof text);
        for (size_t i = 0; i < len; i++)
            text[i] = iter % 2 ? (char)(test_rng_u64(&rng) & 0xFF)
                               : alphabet[test_rng_u64(&rng) % (sizeof alphabet - 1)];
        int n = kvq_tokenizer_encode(tok, text, len, false, false, ids, 400);
        size_t pos = 0;
        for (int k = 0; k < n && k < 400; k++) {
            int l = kvq_tokenizer_piece(tok, ids[k], back + pos, (int)(sizeof back - pos));
            pos += l > 0 ? (size_t)l : 0;
        }
        if (n < 0 || n > 400 || pos != len || memcmp(back, text, len) != 0) bad = iter;
    }
    for (int i = 0; i < 3; i++) kvq_tokenizer_free(toks[i]);
    CHECK(bad < 0, "iteration %d does not round-trip", bad);
}

/* ---- loading from GGUF metadata */

static void kv_str_array(gw *w, const char *key, const char *const *s, int n) {
    gw_key(w, key, GW_ARR); gw_u32(w, GW_STR); gw_u64(w, (uint64_t)n);
    for (int i = 0; i < n; i++) gw_str(w, s[i]);
}

/* A GGUF (no tensors) holding a byte-level vocabulary like tiny_bpe's. */
static void write_bpe_gguf(gw *w, const char *pre, bool with_merges, int n_kv_extra_bad) {
    static char chars[256][4];
    const char *tokens[B_N];
    for (int b = 0; b < 256; b++) {
        int n = uc_encode(tok_byte_to_cp((uint8_t)b), chars[b]);
        chars[b][n] = 0;
        tokens[b] = chars[b];
    }
    const char *extra[] = {"\304\240t", "he", "\304\240the", "at", "cat", "\304\240c", "\304\240cat",
                           "th", "the", "<|end|>"};
    for (int i = 0; i < B_N - 256; i++) tokens[256 + i] = extra[i];
    gw kv = {0};
    int n_kv = 0;
    gw_kv_str(&kv, "tokenizer.ggml.model", "gpt2"); n_kv++;
    if (pre) { gw_kv_str(&kv, "tokenizer.ggml.pre", pre); n_kv++; }
    kv_str_array(&kv, "tokenizer.ggml.tokens", tokens, B_N); n_kv++;
    if (with_merges) { kv_str_array(&kv, "tokenizer.ggml.merges", bpe_merges, 9); n_kv++; }
    gw_key(&kv, "tokenizer.ggml.token_type", GW_ARR); gw_u32(&kv, GW_I32);
    gw_u64(&kv, (uint64_t)(B_N - n_kv_extra_bad)); n_kv++;       /* bad: wrong count */
    for (int i = 0; i < B_N - n_kv_extra_bad; i++) gw_u32(&kv, i == B_END ? 3 : 1);
    gw_kv_u32(&kv, "tokenizer.ggml.bos_token_id", B_END); n_kv++;
    gw_kv_u32(&kv, "tokenizer.ggml.eos_token_id", B_END); n_kv++;
    gw_kv_u32(&kv, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu); n_kv++;
    gw_key(&kv, "tokenizer.ggml.add_bos_token", GW_BOOL); gw_u8(&kv, 1); n_kv++;
    gw_model m = gw_model_default();
    m.all_types = false;
    m.n_tensors = 0;
    m.extra_kv = kv.p;
    m.extra_kv_len = kv.n;
    m.n_extra_kv = n_kv;
    gw_write_model(w, &m);
    gw_free(&kv);
}

static kvq_status load_bpe(const char *pre, bool merges, int bad, kvq_tokenizer **tok, kvq_error *err) {
    gw w = {0};
    write_bpe_gguf(&w, pre, merges, bad);
    gguf_file *f = NULL;
    kvq_status st = w.oom ? KVQ_ERR_NOMEM : gguf_open_memory(w.p, w.n, &f, err);
    if (st == KVQ_OK) st = kvq_tokenizer_load(f, tok, err);
    gguf_close(f);
    gw_free(&w);
    return st;
}

TEST(tok_bpe_load_from_gguf) {
    kvq_tokenizer *tok = NULL;
    kvq_error err = {0};
    kvq_status st = load_bpe("qwen2", true, 0, &tok, &err);
    CHECK(st == KVQ_OK, "load failed: %s", err.msg);
    int32_t ids[8];
    /* add_bos_token true in the file: BOS first; qwen2 does not keep " cat" whole */
    int n = encode_str(tok, " cat12", true, ids, 8);
    int bos = kvq_tokenizer_bos(tok), nv = kvq_tokenizer_n_vocab(tok);
    kvq_tok_kind kind = kvq_tokenizer_kind(tok);
    kvq_tokenizer_free(tok);
    CHECK(kind == KVQ_TOK_BPE && bos == B_END && nv == B_N, "kind %d bos %d n_vocab %d", kind, bos, nv);
    CHECK(n == 5 && ids[0] == B_END && ids[1] == ' ' && ids[2] == B_CAT && ids[3] == '1' && ids[4] == '2',
          "\" cat12\" -> %d ids (%d %d %d %d %d)", n, ids[0], ids[1], ids[2], ids[3], ids[4]);
}

TEST(tok_bpe_load_rejects_bad_metadata) {
    kvq_tokenizer *tok = NULL;
    kvq_error err = {0};
    kvq_status st = load_bpe("klingon", true, 0, &tok, &err);
    CHECK(st == KVQ_ERR_UNSUPPORTED && !tok && strstr(err.msg, "klingon"), "unknown pre: %d (%s)", st, err.msg);
    st = load_bpe("gpt2", false, 0, &tok, &err);
    CHECK(st != KVQ_OK && !tok && strstr(err.msg, "merges"), "no merges: %d (%s)", st, err.msg);
    st = load_bpe(NULL, true, 3, &tok, &err);
    CHECK(st == KVQ_ERR_FORMAT && !tok && strstr(err.msg, "token_type"), "short token_type: %d (%s)", st, err.msg);
    st = load_bpe(NULL, true, 0, &tok, &err);                  /* no pre: gpt2 rules */
    CHECK(st == KVQ_OK && tok, "no pre: %d (%s)", st, err.msg);
    kvq_tokenizer_free(tok);
}
