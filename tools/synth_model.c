/* synth_model.c - random-weight GGUF models of real shapes (synth_model.h).
 *
 * The file is written in one pass: header, metadata, tensor infos (their
 * offsets computed from the sizes up front), then each tensor's data row
 * by row, generated from a stream seeded per tensor (so a tensor's bytes
 * do not depend on the others'). */
#include "synth_model.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Little-endian fp16 (kvq's own rounding, kvq_fp32_to_fp16). */
static void put_half(uint8_t *p, float f) {
    const uint16_t h = kvq_fp32_to_fp16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Published configurations (the models' config.json); the parameter counts
 * follow from them and are the published ones: Qwen3-0.6B "0.6B, 0.44B
 * non-embedding" (596,049,920; model pages that list 752M count the tied
 * output matrix a second time), Qwen3-1.7B "1.7B, 1.4B non-embedding",
 * Llama-3.2-1B 1.23B, Llama-3.2-3B 3.21B.  (Llama 3.2's "llama3" RoPE
 * frequency scaling is left out: it changes values, not work.) */
const synth_shape synth_shapes[] = {
    /* name           arch     L   embd  head kv  hd   ff     vocab   ctx     rope     eps   params */
    { "qwen3-0.6B",   "qwen3", 28, 1024, 16,  8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, 596049920 },
    { "qwen3-1.7B",   "qwen3", 28, 2048, 16,  8, 128, 6144, 151936, 40960, 1000000.0f, 1e-6f, 1720574976 },
    { "llama-3.2-1B", "llama", 16, 2048, 32,  8,  64, 8192, 128256, 131072, 500000.0f, 1e-5f, 1235814400 },
    { "llama-3.2-3B", "llama", 28, 3072, 24,  8, 128, 8192, 128256, 131072, 500000.0f, 1e-5f, 3212749824 },
    /* small shapes for tests: every matrix width a multiple of 256 (K-quants) */
    { "tiny-qwen3",   "qwen3",  2,  256,  4,  2,  64,  512,    512,  4096, 1000000.0f, 1e-6f, 0 },
    { "tiny-llama",   "llama",  2,  256,  4,  2,  64,  512,    300,  4096,   10000.0f, 1e-5f, 0 },
    { NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0 },
};

const synth_shape *synth_find_shape(const char *name) {
    for (const synth_shape *s = synth_shapes; name && s->name; s++)
        if (!strcmp(s->name, name)) return s;
    return NULL;
}

static const char *const g_wtype_names[SYNTH_W_COUNT] = { "f32", "f16", "q8_0", "q4_0", "q4_K", "q6_K", "q4_K_M" };

synth_wtype synth_wtype_from_name(const char *name) {
    for (int w = 0; name && w < SYNTH_W_COUNT; w++)
        if (!strcmp(name, g_wtype_names[w])) return (synth_wtype)w;
    return SYNTH_W_COUNT;
}

const char *synth_wtype_name(synth_wtype w) { return (unsigned)w < SYNTH_W_COUNT ? g_wtype_names[w] : "?"; }

/* ------------------------------------------------------------ tensors */

/* The roles of a matrix, for the q4_K_M mix. */
typedef enum role { ROLE_EMBD, ROLE_ATTN_V, ROLE_FFN_DOWN, ROLE_OTHER } role;

/* The q4_K_M rule (llama.cpp's published mix): layers in the first and
 * last eighth, and every third one between, get more bits in attn_v and
 * ffn_down. */
static bool more_bits_layer(int il, int n_layer) {
    return il < n_layer / 8 || il >= 7 * n_layer / 8 || (il - n_layer / 8) % 3 == 2;
}

static kvq_type matrix_type(synth_wtype w, role r, int il, int n_layer) {
    static const kvq_type plain[SYNTH_W_COUNT] = { KVQ_TYPE_F32, KVQ_TYPE_F16, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0,
                                                   KVQ_TYPE_Q4_K, KVQ_TYPE_Q6_K, KVQ_TYPE_Q4_K };
    if (w != SYNTH_W_Q4_K_M) return plain[w];
    if (r == ROLE_EMBD) return KVQ_TYPE_Q6_K;   /* the (tied) output matrix */
    if ((r == ROLE_ATTN_V || r == ROLE_FFN_DOWN) && more_bits_layer(il, n_layer)) return KVQ_TYPE_Q6_K;
    return KVQ_TYPE_Q4_K;
}

typedef struct tensor_list {
    synth_tensor *out;
    int cap, n;
} tensor_list;

static void add(tensor_list *l, const char *name, int64_t ne0, int64_t ne1, kvq_type type, bool is_norm) {
    if (l->n < l->cap) {
        synth_tensor *t = &l->out[l->n];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->ne0 = ne0;
        t->ne1 = ne1;
        t->type = type;
        t->is_norm = is_norm;
    }
    l->n++;
}

int synth_tensors(const synth_shape *s, synth_wtype w, synth_tensor *out, int cap) {
    tensor_list l = { out, cap, 0 };
    const int64_t E = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_head_kv * s->head_dim;
    const bool qk_norm = !strcmp(s->arch, "qwen3");
    add(&l, "token_embd.weight", E, s->n_vocab, matrix_type(w, ROLE_EMBD, 0, s->n_layer), false);
    add(&l, "output_norm.weight", E, 1, KVQ_TYPE_F32, true);
    for (int il = 0; il < s->n_layer; il++) {
        char n[64];
#define T(suffix, ne0, ne1, r) (snprintf(n, sizeof n, "blk.%d." suffix, il), \
                                add(&l, n, ne0, ne1, matrix_type(w, r, il, s->n_layer), false))
#define NORM(suffix, ne0) (snprintf(n, sizeof n, "blk.%d." suffix, il), add(&l, n, ne0, 1, KVQ_TYPE_F32, true))
        NORM("attn_norm.weight", E);
        T("attn_q.weight", E, q, ROLE_OTHER);
        T("attn_k.weight", E, kv, ROLE_OTHER);
        T("attn_v.weight", E, kv, ROLE_ATTN_V);
        T("attn_output.weight", q, E, ROLE_OTHER);
        if (qk_norm) {
            NORM("attn_q_norm.weight", s->head_dim);
            NORM("attn_k_norm.weight", s->head_dim);
        }
        NORM("ffn_norm.weight", E);
        T("ffn_gate.weight", E, s->n_ff, ROLE_OTHER);
        T("ffn_up.weight", E, s->n_ff, ROLE_OTHER);
        T("ffn_down.weight", s->n_ff, E, ROLE_FFN_DOWN);
#undef T
#undef NORM
    }
    return l.n;
}

/* The tensor list of a shape, allocated; NULL when out of memory. */
static synth_tensor *list_tensors(const synth_shape *s, synth_wtype w, int *n) {
    *n = synth_tensors(s, w, NULL, 0);
    synth_tensor *t = malloc((size_t)*n * sizeof *t);
    if (t) synth_tensors(s, w, t, *n);
    return t;
}

int64_t synth_params(const synth_shape *s, bool non_embedding) {
    int n;
    synth_tensor *t = list_tensors(s, SYNTH_W_F32, &n);
    int64_t sum = t ? 0 : -1;
    for (int i = 0; t && i < n; i++)
        if (!non_embedding || strcmp(t[i].name, "token_embd.weight")) sum += t[i].ne0 * t[i].ne1;
    free(t);
    return sum;
}

static int64_t tensor_bytes(const synth_tensor *t) { return (int64_t)kvq_row_bytes(t->type, t->ne0) * t->ne1; }

int64_t synth_weight_bytes(const synth_shape *s, synth_wtype w) {
    int n;
    synth_tensor *t = list_tensors(s, w, &n);
    int64_t sum = t ? 0 : -1;
    for (int i = 0; t && i < n; i++) sum += tensor_bytes(&t[i]);
    free(t);
    return sum;
}

/* -------------------------------------------------------- random data */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* About N(0, 1): the sum of four 16-bit uniforms of one draw, centred and
 * scaled (Irwin-Hall; tails end at +-3.46, which weights do not miss). */
static float gauss(uint64_t *s) {
    const uint64_t r = splitmix(s);
    const float sum = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) +
                      (float)(r >> 48);
    return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

enum { WEIGHT_STD_MILLI = 20 };   /* weights ~ N(0, 0.02^2), GPT-2's initialisation */

/* A q4_K block: value = d*sc*q - dmin*m with dmin = 7.5 d and m = sc, so
 * values are d*sc*(q - 7.5): centred, spread ~ 0.02 for sc around 40. */
static void random_q4_K(uint64_t *s, uint8_t *b) {
    const float d = 0.02f / 184.0f;
    put_half(b, d);
    put_half(b + 2, 7.5f * d);
    uint8_t sc[8];
    for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(16 + splitmix(s) % 48);   /* 6-bit scales 16..63 */
    uint8_t *p = b + 4;                                                       /* pack as the q4_K reader unpacks */
    for (int j = 0; j < 4; j++) {
        p[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        p[j + 4] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        p[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((sc[j + 4] & 15) << 4));
    }
    for (int i = 0; i < 128; i += 8) {
        const uint64_t r = splitmix(s);
        memcpy(b + 16 + i, &r, 8);
    }
}

/* A q6_K block: value = d*sc*(q - 32), sc in 8..63, q uniform in 0..63. */
static void random_q6_K(uint64_t *s, uint8_t *b) {
    for (int i = 0; i < 192; i += 8) {
        const uint64_t r = splitmix(s);
        memcpy(b + i, &r, 8);
    }
    for (int g = 0; g < 16; g++) b[192 + g] = (uint8_t)(8 + splitmix(s) % 56);
    put_half(b + 208, 0.02f / (36.0f * 18.5f));
}

/* One row of tensor t into dst (kvq_row_bytes(t->type, t->ne0) bytes);
 * x is scratch for ne0 floats. */
static void make_row(const synth_tensor *t, uint64_t *s, float *x, uint8_t *dst) {
    if (t->is_norm) {
        for (int64_t i = 0; i < t->ne0; i++) x[i] = 1.0f;
        memcpy(dst, x, (size_t)t->ne0 * sizeof(float));
        return;
    }
    if (t->type == KVQ_TYPE_Q4_K || t->type == KVQ_TYPE_Q6_K) {
        const kvq_type_traits *tr = kvq_type_get(t->type);   /* 256-value super-blocks */
        for (int64_t i = 0; i < t->ne0 / tr->block_size; i++)
            if (t->type == KVQ_TYPE_Q4_K) random_q4_K(s, dst + i * tr->block_bytes);
            else random_q6_K(s, dst + i * tr->block_bytes);
        return;
    }
    const float std = WEIGHT_STD_MILLI / 1000.0f;
    for (int64_t i = 0; i < t->ne0; i++) x[i] = std * gauss(s);
    kvq_quantize_row(t->type, x, dst, t->ne0);
}

/* ------------------------------------------------------------- writing */

/* GGUF value types and layout (format facts). */
enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9 };
enum { ALIGN = 32, N_TOKENS = 3 + 256 };

typedef struct writer {
    FILE *f;
    uint64_t pos;
    bool failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->failed || !n) return;
    if (fwrite(p, 1, n, w->f) != n) w->failed = true;
    w->pos += n;
}
static void put_le(writer *w, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)bytes);
}
static void put_u32(writer *w, uint32_t v) { put_le(w, v, 4); }
static void put_u64(writer *w, uint64_t v) { put_le(w, v, 8); }
static void put_f32(writer *w, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u32(w, u);
}
static void put_str(writer *w, const char *s) { put_u64(w, strlen(s)); put(w, s, strlen(s)); }
static void put_pad(writer *w) {
    static const uint8_t zero[ALIGN];
    put(w, zero, (size_t)((ALIGN - w->pos % ALIGN) % ALIGN));
}

/* Metadata: the key, its type, its value. */
static void kv_key(writer *w, const char *arch, const char *key, uint32_t type) {
    char full[128];
    snprintf(full, sizeof full, arch ? "%s.%s" : "%s%s", arch ? arch : "", key);
    put_str(w, full);
    put_u32(w, type);
}
static void kv_u32(writer *w, const char *arch, const char *key, uint32_t v) { kv_key(w, arch, key, GGUF_U32); put_u32(w, v); }
static void kv_f32(writer *w, const char *arch, const char *key, float v) { kv_key(w, arch, key, GGUF_F32); put_f32(w, v); }
static void kv_str(writer *w, const char *arch, const char *key, const char *v) { kv_key(w, arch, key, GGUF_STR); put_str(w, v); }

/* The synthetic SentencePiece vocabulary (synth_model.h): 4 arrays. */
static void put_tokenizer(writer *w) {
    kv_str(w, NULL, "tokenizer.ggml.model", "llama");
    kv_key(w, NULL, "tokenizer.ggml.tokens", GGUF_ARR);
    put_u32(w, GGUF_STR);
    put_u64(w, N_TOKENS);
    put_str(w, "<unk>");
    put_str(w, "<s>");
    put_str(w, "</s>");
    for (int b = 0; b < 256; b++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", b);
        put_str(w, tok);
    }
    kv_key(w, NULL, "tokenizer.ggml.scores", GGUF_ARR);
    put_u32(w, GGUF_F32);
    put_u64(w, N_TOKENS);
    for (int i = 0; i < N_TOKENS; i++) put_f32(w, 0.0f);
    kv_key(w, NULL, "tokenizer.ggml.token_type", GGUF_ARR);
    put_u32(w, GGUF_I32);
    put_u64(w, N_TOKENS);
    put_u32(w, 2);                                  /* unknown */
    put_u32(w, 3);                                  /* control */
    put_u32(w, 3);
    for (int b = 0; b < 256; b++) put_u32(w, 6);    /* byte */
    kv_u32(w, NULL, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(w, NULL, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(w, NULL, "tokenizer.ggml.unknown_token_id", 0);
    kv_key(w, NULL, "tokenizer.ggml.add_bos_token", GGUF_BOOL);
    put_le(w, 1, 1);
}

enum { N_KV = 22 };   /* the entries put_metadata writes */

static void put_metadata(writer *w, const synth_shape *s, synth_wtype wt, uint64_t seed) {
    const char *a = s->arch;
    char name[96];
    snprintf(name, sizeof name, "synth %s %s seed %llu", s->name, synth_wtype_name(wt), (unsigned long long)seed);
    kv_str(w, NULL, "general.architecture", a);
    kv_str(w, NULL, "general.name", name);
    kv_u32(w, NULL, "general.alignment", ALIGN);
    kv_u32(w, a, "block_count", (uint32_t)s->n_layer);
    kv_u32(w, a, "context_length", (uint32_t)s->n_ctx_train);
    kv_u32(w, a, "embedding_length", (uint32_t)s->n_embd);
    kv_u32(w, a, "feed_forward_length", (uint32_t)s->n_ff);
    kv_u32(w, a, "attention.head_count", (uint32_t)s->n_head);
    kv_u32(w, a, "attention.head_count_kv", (uint32_t)s->n_head_kv);
    kv_u32(w, a, "attention.key_length", (uint32_t)s->head_dim);
    kv_u32(w, a, "attention.value_length", (uint32_t)s->head_dim);
    kv_u32(w, a, "rope.dimension_count", (uint32_t)s->head_dim);
    kv_f32(w, a, "rope.freq_base", s->rope_base);
    kv_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps);
    put_tokenizer(w);   /* 8 entries */
}

static void put_tensor_infos(writer *w, const synth_tensor *t, int n) {
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        put_str(w, t[i].name);
        const bool vec = t[i].ne1 == 1;
        put_u32(w, vec ? 1 : 2);
        put_u64(w, (uint64_t)t[i].ne0);
        if (!vec) put_u64(w, (uint64_t)t[i].ne1);
        put_u32(w, (uint32_t)kvq_type_get(t[i].type)->ggml_id);
        put_u64(w, off);
        off += ((uint64_t)tensor_bytes(&t[i]) + ALIGN - 1) / ALIGN * ALIGN;
    }
}

/* Tensor i's rows from its own stream: seed and index mixed. */
static void put_tensor_data(writer *w, const synth_tensor *t, int index, uint64_t seed, float *x, uint8_t *row) {
    uint64_t s = seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(index + 1));
    splitmix(&s);
    const size_t rb = kvq_row_bytes(t->type, t->ne0);
    for (int64_t r = 0; r < t->ne1 && !w->failed; r++) {
        make_row(t, &s, x, row);
        put(w, row, rb);
    }
    put_pad(w);
}

kvq_status synth_write(const synth_shape *s, synth_wtype wt, uint64_t seed, const char *path, kvq_error *err) {
    if (!s || !path || (unsigned)wt >= SYNTH_W_COUNT) return kvq_fail(err, KVQ_ERR_ARG, "synth: bad arguments");
    int n;
    synth_tensor *t = list_tensors(s, wt, &n);
    int64_t widest = 0;
    for (int i = 0; t && i < n; i++) {
        if (t[i].ne0 % kvq_type_get(t[i].type)->block_size) {
            const kvq_status st = kvq_fail(err, KVQ_ERR_ARG, "synth: %s rows of %lld are not whole %s blocks",
                                           t[i].name, (long long)t[i].ne0, kvq_type_name(t[i].type));
            free(t);
            return st;
        }
        widest = CLI_MAX(widest, t[i].ne0);
    }
    float *x = t ? malloc((size_t)widest * sizeof(float)) : NULL;
    uint8_t *row = x ? malloc((size_t)widest * sizeof(float)) : NULL;
    FILE *f = row ? fopen(path, "wb") : NULL;
    if (!f) {
        free(t); free(x); free(row);
        return row ? kvq_fail(err, KVQ_ERR_IO, "synth: cannot create '%s'", path)
                   : kvq_fail(err, KVQ_ERR_NOMEM, "synth: out of memory");
    }
    writer w = { f, 0, false };
    put(&w, "GGUF", 4);
    put_u32(&w, 3);
    put_u64(&w, (uint64_t)n);
    put_u64(&w, N_KV);
    put_metadata(&w, s, wt, seed);
    put_tensor_infos(&w, t, n);
    put_pad(&w);
    for (int i = 0; i < n && !w.failed; i++) put_tensor_data(&w, &t[i], i, seed, x, row);
    const bool closed = fclose(f) == 0, ok = !w.failed && closed;
    free(t); free(x); free(row);
    if (!ok) {
        remove(path);
        return kvq_fail(err, KVQ_ERR_IO, "synth: writing '%s' failed (disk full?)", path);
    }
    return KVQ_OK;
}
