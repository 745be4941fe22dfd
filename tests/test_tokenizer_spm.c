/* Tests of the SentencePiece-style tokenizer: the llama.cpp golden on
 * stories260K (all ten entries id for id), decoding back to the input,
 * and the merge rules on a hand-made vocabulary. */
#include "test.h"
#include "gguf.h"
#include "tokenizer.h"

#include <string.h>
#include <unistd.h>

/* ---- the golden file: "# comments", then per entry a JSON string line
 * and an ids line. */

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static size_t put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static int read_u4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit(p[i]);
        if (d < 0) return 0;
        *v = *v * 16 + (uint32_t)d;
    }
    return 1;
}

/* Decode the JSON string literal starting at p (at its quote) into out;
 * returns its byte length, or -1 when malformed. */
static long json_string(const char *p, char *out, size_t cap) {
    size_t n = 0;
    if (*p++ != '"') return -1;
    while (*p && *p != '"') {
        if (n + 4 >= cap) return -1;
        if (*p != '\\') { out[n++] = *p++; continue; }
        p++;
        uint32_t cp, lo;
        switch (*p) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u':
            if (!read_u4(p + 1, &cp)) return -1;
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[1] == '\\' && p[2] == 'u' && read_u4(p + 3, &lo)) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);   /* surrogate pair */
                p += 6;
            }
            n += put_utf8(cp, out + n);
            break;
        default: out[n++] = *p; break;                /* \" \\ \/ */
        }
        p++;
    }
    return *p == '"' ? (long)n : -1;
}

typedef struct golden_entry { char *text; size_t len; int32_t *ids; int n_ids; } golden_entry;

/* Reads up to max entries; returns the count, -1 when malformed. */
static int read_golden(const char *path, golden_entry *e, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t cap = 1 << 20;
    char *line = malloc(cap);
    int n = 0;
    while (line && n < max && fgets(line, (int)cap, f)) {
        if (line[0] != '"') continue;                 /* comments, blank lines */
        e[n].text = malloc(cap);
        long len = e[n].text ? json_string(line, e[n].text, cap) : -1;
        if (len < 0 || !fgets(line, (int)cap, f)) { free(e[n].text); n = -1; break; }
        e[n].len = (size_t)len;
        e[n].ids = malloc(cap / 2 * sizeof(int32_t));
        e[n].n_ids = 0;
        for (char *p = line, *q; e[n].ids; p = q) {
            long v = strtol(p, &q, 10);
            if (q == p) break;
            e[n].ids[e[n].n_ids++] = (int32_t)v;
        }
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static void free_golden(golden_entry *e, int n) {
    for (int i = 0; i < n; i++) { free(e[i].text); free(e[i].ids); }
}

static kvq_tokenizer *load_stories(gguf_file **gf) {
    char path[1024];
    kvq_error err;
    kvq_tokenizer *tok = NULL;
    if (!test_shared_path(path, sizeof path, "models/stories260K.gguf")) return NULL;
    if (gguf_open(path, gf, &err) != KVQ_OK) return NULL;
    if (kvq_tokenizer_load(*gf, &tok, &err) != KVQ_OK) { gguf_close(*gf); *gf = NULL; return NULL; }
    return tok;
}

TEST(tok_spm_golden_tok512) {
    char gpath[1024];
    if (!test_shared_path(gpath, sizeof gpath, "golden/tok512.tokens.txt") ||
        !test_shared_path(gpath + 512, 512, "models/stories260K.gguf"))
        SKIP("../shared (golden/tok512.tokens.txt, models/stories260K.gguf) absent");
    test_shared_path(gpath, sizeof gpath, "golden/tok512.tokens.txt");
    gguf_file *gf = NULL;
    kvq_tokenizer *tok = load_stories(&gf);
    CHECK(tok, "cannot load the stories260K tokenizer");
    golden_entry e[16];
    int n = read_golden(gpath, e, 16);
    int32_t *got = n > 0 ? malloc(1 << 20) : NULL;
    int matched = 0, first_bad = -1, bad_at = -1;
    for (int i = 0; got && i < n; i++) {
        int ng = kvq_tokenizer_encode(tok, e[i].text, e[i].len, true, true, got, (1 << 20) / 4);
        int same = ng == e[i].n_ids;
        for (int k = 0; same && k < ng; k++)
            if (got[k] != e[i].ids[k]) { same = 0; bad_at = k; }
        if (same) matched++;
        else if (first_bad < 0) first_bad = i;
    }
    free(got);
    free_golden(e, n > 0 ? n : 0);
    kvq_tokenizer_free(tok);
    gguf_close(gf);
    CHECK(n == 10, "golden has %d entries, expected 10", n);
    CHECK(matched == 10, "%d/10 entries match; first mismatch: entry %d at id index %d", matched, first_bad, bad_at);
}

/* Decoding the golden ids gives the input back (with the space SPM
 * prepends), for the entries without special tokens in their text. */
TEST(tok_spm_golden_decodes_to_input) {
    char gpath[1024];
    if (!test_shared_path(gpath, sizeof gpath, "golden/tok512.tokens.txt")) SKIP("../shared absent");
    gguf_file *gf = NULL;
    kvq_tokenizer *tok = load_stories(&gf);
    CHECK(tok, "cannot load the stories260K tokenizer");
    golden_entry e[16];
    int n = read_golden(gpath, e, 16), checked = 0, bad = -1;
    char *buf = malloc(1 << 16);
    for (int i = 0; buf && i < n; i++) {
        if (memchr(e[i].text, '<', e[i].len)) continue;   /* specials decode to nothing */
        size_t pos = 0;
        for (int k = 1; k < e[i].n_ids; k++) {            /* skip BOS */
            int l = kvq_tokenizer_piece(tok, e[i].ids[k], buf + pos, (1 << 16) - (int)pos);
            if (l < 0) { pos = (size_t)-1; break; }
            pos += (size_t)l;
        }
        bool same = e[i].len == 0 ? pos == 0 : (pos == e[i].len + 1 && buf[0] == ' ' && memcmp(buf + 1, e[i].text, e[i].len) == 0);
        if (!same && bad < 0) bad = i;
        checked++;
    }
    free(buf);
    free_golden(e, n > 0 ? n : 0);
    kvq_tokenizer_free(tok);
    gguf_close(gf);
    CHECK(checked >= 8, "only %d entries checked", checked);
    CHECK(bad < 0, "entry %d does not decode back to its input", bad);
}

TEST(tok_spm_stories_accessors_and_bad_ids) {
    gguf_file *gf = NULL;
    if (!test_shared_dir()) SKIP("../shared absent");
    kvq_tokenizer *tok = load_stories(&gf);
    CHECK(tok, "cannot load the stories260K tokenizer");
    int nv = kvq_tokenizer_n_vocab(tok), bos = kvq_tokenizer_bos(tok), eos = kvq_tokenizer_eos(tok);
    bool add_bos = kvq_tokenizer_add_bos(tok);
    char b[8];
    int neg = kvq_tokenizer_piece(tok, -1, b, 8), past = kvq_tokenizer_piece(tok, nv, b, 8);
    int ctl = kvq_tokenizer_piece(tok, 1, b, 8);
    /* invalid UTF-8 and a NUL byte: byte tokens, no crash */
    int32_t ids[64];
    int n = kvq_tokenizer_encode(tok, "a\xff\xc3(\0z", 6, false, true, ids, 64);
    kvq_tokenizer_free(tok);
    gguf_close(gf);
    CHECK(nv == 512 && bos == 1 && eos == 2 && add_bos, "n_vocab %d bos %d eos %d add_bos %d", nv, bos, eos, add_bos);
    CHECK(neg == -1 && past == -1, "out-of-range ids give %d, %d", neg, past);
    CHECK(ctl == 0, "<s> decodes to %d bytes", ctl);
    CHECK(n >= 6 && ids[n - 1] != 0, "invalid UTF-8 gave %d ids", n);
}

/* ---- a hand-made SPM vocabulary: <unk> <s> </s>, 256 byte tokens, then
 * the pieces below. */
enum { V_SPACE = 259, V_A, V_B, V_AB, V_SPACE_A, V_AA, V_N };

static kvq_tokenizer *tiny_spm(bool add_space_prefix) {
    static char bytes[256][8];
    gguf_str tokens[V_N];
    float scores[V_N];
    int32_t types[V_N];
    const char *names[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        tokens[i] = (gguf_str){names[i], strlen(names[i])};
        types[i] = i == 0 ? 2 : 3;
        scores[i] = 0;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[3 + b] = (gguf_str){bytes[b], 6};
        types[3 + b] = 6;
        scores[3 + b] = 0;
    }
    struct { const char *s; float score; } pieces[] = {
        {"\xE2\x96\x81", -1}, {"a", -1}, {"b", -1}, {"ab", -5}, {"\xE2\x96\x81" "a", -2}, {"aa", -1},
    };
    for (int i = 0; i < V_N - V_SPACE; i++) {
        tokens[V_SPACE + i] = (gguf_str){pieces[i].s, strlen(pieces[i].s)};
        scores[V_SPACE + i] = pieces[i].score;
        types[V_SPACE + i] = 1;
    }
    kvq_tokenizer_desc d;
    kvq_tokenizer_desc_default(&d, KVQ_TOK_SPM, KVQ_PRE_GPT2);
    d.n_vocab = V_N; d.tokens = tokens; d.scores = scores; d.token_types = types;
    d.unk = 0; d.bos = 1; d.eos = 2;
    d.add_space_prefix = add_space_prefix;
    kvq_tokenizer *tok = NULL;
    kvq_error err;
    return kvq_tokenizer_create(&d, &tok, &err) == KVQ_OK ? tok : NULL;
}

static int ids_equal(const int32_t *got, int n, const int32_t *want, int n_want) {
    if (n != n_want) return 0;
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) return 0;
    return 1;
}

static void ids_str(const int32_t *ids, int n, char *out, size_t cap) {
    size_t pos = 0;
    out[0] = 0;
    for (int i = 0; i < n && pos + 12 < cap; i++) pos += (size_t)snprintf(out + pos, cap - pos, "%d ", ids[i]);
}

#define EXPECT_IDS(tok, text, len, special, parse, ...) do {                                  \
        const int32_t want_[] = {__VA_ARGS__};                                               \
        int32_t got_[64]; char s_[512];                                                      \
        int n_ = kvq_tokenizer_encode(tok, text, len, special, parse, got_, 64);            \
        ids_str(got_, n_ > 64 ? 64 : n_, s_, sizeof s_);                                     \
        CHECK(ids_equal(got_, n_, want_, (int)(sizeof want_ / sizeof want_[0])),            \
              "encode(\"%s\") gave %d ids: %s", text, n_, s_);                               \
    } while (0)

TEST(tok_spm_best_score_merges_first) {
    kvq_tokenizer *tok = tiny_spm(true);
    CHECK(tok, "create failed");
    /* "▁ab": ▁a (-2) beats ab (-5); lowest-score-first would give ▁ ab */
    int32_t ids[8] = {0};
    int n = kvq_tokenizer_encode(tok, "ab", 2, false, true, ids, 8);
    /* "▁aaa": aa (-1) beats ▁a (-2); equal-score aa pairs: leftmost first */
    int32_t ids2[8] = {0};
    int n2 = kvq_tokenizer_encode(tok, "aaa", 3, false, true, ids2, 8);
    kvq_tokenizer_free(tok);
    CHECK(n == 2 && ids[0] == V_SPACE_A && ids[1] == V_B, "\"ab\" -> %d ids (%d %d)", n, ids[0], ids[1]);
    CHECK(n2 == 3 && ids2[0] == V_SPACE && ids2[1] == V_AA && ids2[2] == V_A,
          "\"aaa\" -> %d ids (%d %d %d)", n2, ids2[0], ids2[1], ids2[2]);
}

TEST(tok_spm_byte_fallback_and_specials) {
    kvq_tokenizer *tok = tiny_spm(true);
    CHECK(tok, "create failed");
    /* é = C3 A9 is no token: its bytes <0xC3> <0xA9> (ids 3 + byte) */
    EXPECT_IDS(tok, "\xC3\xA9", 2, false, true, V_SPACE, 3 + 0xC3, 3 + 0xA9);
    /* <s> cut out; the segment after it gets its own "▁" prefix */
    EXPECT_IDS(tok, "a<s>b", 5, true, true, 1, V_SPACE_A, 1, V_SPACE, V_B);
    /* parse_special off: "<s>" is text, spelled in bytes */
    EXPECT_IDS(tok, "a<s>b", 5, true, false, 1, V_SPACE_A, 3 + '<', 3 + 's', 3 + '>', V_B);
    /* a special token at the very start: no empty segment before it */
    EXPECT_IDS(tok, "</s>a", 5, false, true, 2, V_SPACE_A);
    /* empty text: BOS only, or nothing */
    EXPECT_IDS(tok, "", 0, true, true, 1);
    int32_t none[1] = {-7};
    int n0 = kvq_tokenizer_encode(tok, "", 0, false, true, none, 1);
    /* a short buffer: the full count comes back, only cap ids are written */
    int32_t few[3] = {-7, -7, -7};
    int nf = kvq_tokenizer_encode(tok, "a<s>b", 5, true, true, few, 2);
    kvq_tokenizer_free(tok);
    CHECK(n0 == 0 && none[0] == -7, "empty text without BOS gave %d ids", n0);
    CHECK(nf == 5 && few[0] == 1 && few[1] == V_SPACE_A && few[2] == -7, "cap 2: n %d, wrote %d %d %d", nf, few[0], few[1], few[2]);
}

TEST(tok_spm_no_space_prefix_and_pieces) {
    kvq_tokenizer *tok = tiny_spm(false);
    CHECK(tok, "create failed");
    EXPECT_IDS(tok, "a b", 3, false, true, V_A, V_SPACE, V_B);
    char buf[16];
    int l1 = kvq_tokenizer_piece(tok, V_SPACE_A, buf, sizeof buf);
    bool space_a = l1 == 2 && memcmp(buf, " a", 2) == 0;
    int l2 = kvq_tokenizer_piece(tok, 3 + 0xC3, buf, sizeof buf);
    bool byte = l2 == 1 && (uint8_t)buf[0] == 0xC3;
    int l4 = kvq_tokenizer_piece(tok, 0, buf, sizeof buf);        /* <unk> prints as llama.cpp's ▅ */
    bool unk = l4 == 3 && memcmp(buf, "\xE2\x96\x85", 3) == 0;
    buf[1] = 'x';
    int l3 = kvq_tokenizer_piece(tok, V_SPACE_A, buf, 1);         /* short buffer: cut, never overrun */
    kvq_tokenizer_free(tok);
    CHECK(unk, "<unk> decodes to %d bytes", l4);
    CHECK(space_a, "▁a decodes to %d bytes", l1);
    CHECK(byte, "<0xC3> decodes to %d bytes (%02x)", l2, (uint8_t)buf[0]);
    CHECK(l3 == 1 && buf[0] == ' ' && buf[1] == 'x', "cap 1 gave %d", l3);
}

TEST(tok_create_rejects_bad_descriptions) {
    gguf_str one = {"a", 1};
    kvq_tokenizer_desc d;
    kvq_tokenizer *tok = (kvq_tokenizer *)&d;
    kvq_error err;
    kvq_tokenizer_desc_default(&d, KVQ_TOK_SPM, KVQ_PRE_GPT2);
    kvq_status empty = kvq_tokenizer_create(&d, &tok, &err);
    CHECK(empty != KVQ_OK && tok == NULL, "an empty vocabulary was accepted");
    d.n_vocab = 1; d.tokens = &one; d.bos = 1;
    kvq_status bad_bos = kvq_tokenizer_create(&d, &tok, &err);
    CHECK(bad_bos != KVQ_OK && tok == NULL && strstr(err.msg, "outside"), "bos 1 of 1 token: %d (%s)", bad_bos, err.msg);
}

/* ---- the `kvq tokenize` command against the golden (its last, longest
 * entry, written to a file as raw bytes) */
TEST(tok_cli_tokenize_matches_golden) {
    char gpath[512], mpath[512];
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(gpath, sizeof gpath, "golden/tok512.tokens.txt") ||
        !test_shared_path(mpath, sizeof mpath, "models/stories260K.gguf"))
        SKIP("../shared absent");
    golden_entry e[16];
    int n = read_golden(gpath, e, 16);
    CHECK(n == 10, "golden has %d entries", n);
    char tmp[] = "/tmp/kvq_tok_XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    bool written = f && fwrite(e[9].text, 1, e[9].len, f) == e[9].len;
    if (f) fclose(f);
    char cmd[2048], *out = malloc(1 << 16);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s -f %s --ids", bin, mpath, tmp);
    int rc = written && out ? test_run(cmd, out, 1 << 16) : -1;
    remove(tmp);
    int same = rc == 0 && out[0] == '[', k = 0;
    for (char *p = out + 1; same && k < e[9].n_ids; k++) {
        char *q;
        long v = strtol(p, &q, 10);
        same = q != p && v == e[9].ids[k];
        p = q + (*q == ',' ? 1 : 0);
    }
    free_golden(e, n);
    free(out);
    CHECK(same, "kvq tokenize rc %d: ids differ from the golden at index %d", rc, k - 1);
    snprintf(cmd, sizeof cmd, "%s tokenize -p hello --ids", bin);
    char msg[512];
    rc = test_run(cmd, msg, sizeof msg);
    CHECK(rc != 0 && strstr(msg, "no model"), "missing -m: rc %d, \"%s\"", rc, msg);
}
