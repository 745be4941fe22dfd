/*
 * model_writer.h - a tiny but complete llama GGUF model for tests and fuzz
 * seeds: metadata, a SentencePiece vocabulary with byte fallback, and
 * every tensor the engine needs, filled with seeded Gaussian weights.
 *
 * Tests build one, corrupt one field or one value (tm_spec fields, then
 * tm_poke_* on the written bytes) and check the loader's answer, so no
 * corrupted binary is ever checked in.  Built on gguf_writer.h's
 * primitives and, like it, independent of the reader.
 */
#ifndef KVQ_MODEL_WRITER_H
#define KVQ_MODEL_WRITER_H

#include "gguf_writer.h"

#include <math.h>
#include <stdio.h>

enum { TM_MAX_TENSORS = 64 };
#define TM_NO_KEY INT64_MIN                /* a tm_spec id: key not written */

typedef struct tm_spec {
    int n_embd, n_head, n_head_kv, n_ff, n_ctx_train;
    int block_count;                       /* the llama.block_count value   */
    int n_blocks;                          /* blk.N tensors written (0..n-1) */
    uint64_t seed;                         /* weights; another seed = another model, same vocabulary */
    uint32_t type_embd, type_attn_k;       /* GW_T_F32, GW_T_F16 or GW_T_Q8_0 */
    bool tied;                             /* no output.weight               */
    int64_t bos, eos, pad;                 /* tokenizer.ggml.*_token_id, TM_NO_KEY: absent */
    const char *extra_id_key;              /* one more u32 key (NULL: none)  */
    uint32_t extra_id;
} tm_spec;

static inline tm_spec tm_spec_default(void) {
    tm_spec s = { 0 };
    s.n_embd = 32;
    s.n_head = 4;                          /* head_dim 8 */
    s.n_head_kv = 2;
    s.n_ff = 64;
    s.n_ctx_train = 256;
    s.block_count = s.n_blocks = 2;
    s.seed = 1;
    s.type_embd = GW_T_F32;
    s.type_attn_k = GW_T_Q8_0;
    s.bos = 1;
    s.eos = 2;
    s.pad = TM_NO_KEY;
    return s;
}

/* The vocabulary: <unk> <s> </s>, the 256 byte tokens, the letters,
 * then every prefix of "\u2581word" for the words below (so SentencePiece
 * merging, best score first, reaches whole words: longer scores higher). */
#define TM_SP "\xE2\x96\x81"                  /* U+2581, SentencePiece's space */
static const char *const tm_words[] = { "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "and", "to",
                                        "was", "big", "red", "sun", "hat", "then" };
enum { TM_N_WORDS = sizeof tm_words / sizeof tm_words[0] };
static const char tm_letters[] = "abcdefghijklmnopqrstuvwxyz.,";

typedef struct tm_piece { char s[16]; float score; } tm_piece;

/* The pieces after the byte tokens, without duplicates; their count. */
static inline int tm_pieces(tm_piece *out, int cap) {
    int n = 0;
    for (const char *c = tm_letters; *c && n < cap; c++, n++) {
        snprintf(out[n].s, sizeof out[n].s, "%c", *c);
        out[n].score = -1.0f;
    }
    for (int w = 0; w < TM_N_WORDS; w++)
        for (size_t k = 0; k <= strlen(tm_words[w]) && n < cap; k++) {
            char p[16];
            snprintf(p, sizeof p, TM_SP "%.*s", (int)k, tm_words[w]);
            bool dup = false;
            for (int i = 0; i < n && !dup; i++) dup = !strcmp(out[i].s, p);
            if (dup) continue;
            memcpy(out[n].s, p, sizeof p);
            out[n++].score = (float)k;
        }
    return n;
}
enum { TM_MAX_PIECES = 128 };
static inline int tm_n_vocab(void) {
    tm_piece p[TM_MAX_PIECES];
    return 3 + 256 + tm_pieces(p, TM_MAX_PIECES);
}

/* A written model: the bytes and where each tensor's data lies in them. */
typedef struct tm_file {
    gw w;
    int n_tensors;
    struct { char name[64]; uint32_t type; size_t off, bytes; } t[TM_MAX_TENSORS];
} tm_file;

static inline uint16_t tm_f16(float f) {   /* round to nearest; the values here are normal or zero */
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int e = (int)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    uint32_t m = (u & 0x7fffffu) + 0x1000u;
    uint32_t h = ((uint32_t)e << 10) + (m >> 13);
    return (uint16_t)(sign | (h > 0x7bffu ? 0x7c00u : h));
}
static inline float tm_f16_value(uint16_t h) {     /* normal halves and zero */
    const int e = (h >> 10) & 31;
    const float mag = e ? ldexpf(1.0f + (float)(h & 1023) / 1024.0f, e - 15) : 0.0f;
    return h & 0x8000 ? -mag : mag;
}

static inline double tm_gauss(uint64_t *s) {      /* splitmix64 + Box-Muller */
    double u[2];
    for (int i = 0; i < 2; i++) {
        uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        u[i] = ((double)((z ^ (z >> 31)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

typedef struct tm_tensor_desc { char name[64]; uint64_t ne0, ne1; uint32_t type; float scale; } tm_tensor_desc;

static inline int tm_tensor_list(const tm_spec *s, tm_tensor_desc *d) {
    const uint64_t E = (uint64_t)s->n_embd, hd = (uint64_t)(s->n_embd / s->n_head);
    const uint64_t kv = (uint64_t)s->n_head_kv * hd, V = (uint64_t)tm_n_vocab();
    const float ws = 1.0f / sqrtf((float)s->n_embd);
    int n = 0;
#define TM_T(nm, a, b, ty, sc) (snprintf(d[n].name, sizeof d[n].name, "%s", nm), d[n].ne0 = a, d[n].ne1 = b, \
                                d[n].type = ty, d[n].scale = sc, n++)
    TM_T("token_embd.weight", E, V, s->type_embd, 1.0f);
    TM_T("output_norm.weight", E, 1, GW_T_F32, 0.0f);     /* scale 0: all ones */
    if (!s->tied) TM_T("output.weight", E, V, GW_T_F32, ws);
    for (int b = 0; b < s->n_blocks && n + 9 <= TM_MAX_TENSORS; b++) {
        char nm[64];
#define TM_B(suffix, a, c, ty, sc) (snprintf(nm, sizeof nm, "blk.%d.%s", b, suffix), TM_T(nm, a, c, ty, sc))
        TM_B("attn_norm.weight", E, 1, GW_T_F32, 0.0f);
        TM_B("attn_q.weight", E, E, GW_T_F32, ws);
        TM_B("attn_k.weight", E, kv, s->type_attn_k, ws);
        TM_B("attn_v.weight", E, kv, GW_T_F32, ws);
        TM_B("attn_output.weight", E, E, GW_T_F32, ws);
        TM_B("ffn_norm.weight", E, 1, GW_T_F32, 0.0f);
        TM_B("ffn_gate.weight", E, (uint64_t)s->n_ff, GW_T_F32, ws);
        TM_B("ffn_up.weight", E, (uint64_t)s->n_ff, GW_T_F32, ws);
        TM_B("ffn_down.weight", (uint64_t)s->n_ff, E, GW_T_F32, 1.0f / sqrtf((float)s->n_ff));
#undef TM_B
    }
#undef TM_T
    return n;
}

static inline void tm_kv_int(gw *w, const char *key, uint32_t v) { gw_kv_u32(w, key, v); }
static inline void tm_kv_f32(gw *w, const char *key, float v) { gw_key(w, key, GW_F32); gw_f32(w, v); }

static inline int tm_write_kvs(gw *w, const tm_spec *s) {
    int n = 0;
    gw_kv_str(w, "general.architecture", "llama"); n++;
    tm_kv_int(w, "llama.embedding_length", (uint32_t)s->n_embd); n++;
    tm_kv_int(w, "llama.block_count", (uint32_t)s->block_count); n++;
    tm_kv_int(w, "llama.attention.head_count", (uint32_t)s->n_head); n++;
    tm_kv_int(w, "llama.attention.head_count_kv", (uint32_t)s->n_head_kv); n++;
    tm_kv_int(w, "llama.feed_forward_length", (uint32_t)s->n_ff); n++;
    tm_kv_int(w, "llama.context_length", (uint32_t)s->n_ctx_train); n++;
    tm_kv_f32(w, "llama.rope.freq_base", 10000.0f); n++;
    tm_kv_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f); n++;
    gw_kv_str(w, "tokenizer.ggml.model", "llama"); n++;
    const int V = tm_n_vocab();
    gw_key(w, "tokenizer.ggml.tokens", GW_ARR); gw_u32(w, GW_STR); gw_u64(w, (uint64_t)V); n++;
    gw_str(w, "<unk>"); gw_str(w, "<s>"); gw_str(w, "</s>");
    for (int b = 0; b < 256; b++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", b);
        gw_str(w, tok);
    }
    tm_piece pieces[TM_MAX_PIECES];
    tm_pieces(pieces, TM_MAX_PIECES);
    for (int i = 259; i < V; i++) gw_str(w, pieces[i - 259].s);
    gw_key(w, "tokenizer.ggml.scores", GW_ARR); gw_u32(w, GW_F32); gw_u64(w, (uint64_t)V); n++;
    for (int i = 0; i < V; i++) gw_f32(w, i < 259 ? 0.0f : pieces[i - 259].score);
    gw_key(w, "tokenizer.ggml.token_type", GW_ARR); gw_u32(w, GW_I32); gw_u64(w, (uint64_t)V); n++;
    for (int i = 0; i < V; i++) gw_u32(w, i == 0 ? 2u : i < 3 ? 3u : i < 259 ? 6u : 1u);
    if (s->bos != TM_NO_KEY) { tm_kv_int(w, "tokenizer.ggml.bos_token_id", (uint32_t)s->bos); n++; }
    if (s->eos != TM_NO_KEY) { tm_kv_int(w, "tokenizer.ggml.eos_token_id", (uint32_t)s->eos); n++; }
    if (s->pad != TM_NO_KEY) { tm_kv_int(w, "tokenizer.ggml.padding_token_id", (uint32_t)s->pad); n++; }
    if (s->extra_id_key) { tm_kv_int(w, s->extra_id_key, s->extra_id); n++; }
    return n;
}

static inline uint64_t tm_tensor_bytes(const tm_tensor_desc *d) {
    const uint64_t ne[2] = { d->ne0, d->ne1 };
    return gw_tensor_bytes(d->type, ne, 2);
}

/* One tensor's values (seeded per tensor name, so a spec change elsewhere
 * keeps them), in its type. */
static inline void tm_write_data(gw *w, const tm_tensor_desc *d, uint64_t seed) {
    uint64_t s = seed * 0x100000001b3ULL;
    for (const char *c = d->name; *c; c++) s = (s ^ (uint8_t)*c) * 0x100000001b3ULL;
    const uint64_t n = d->ne0 * d->ne1;
    if (d->type == GW_T_Q8_0) {
        for (uint64_t b = 0; b < n / 32; b++) {
            float x[32], amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                x[i] = d->scale * (float)tm_gauss(&s);
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            }
            const uint16_t dh = tm_f16(amax / 127.0f);
            const float dv = tm_f16_value(dh);
            gw_u16(w, dh);
            for (int i = 0; i < 32; i++) {
                long q = dv > 0 ? lrintf(x[i] / dv) : 0;
                gw_u8(w, (uint8_t)(int8_t)(q > 127 ? 127 : q < -127 ? -127 : q));
            }
        }
        return;
    }
    for (uint64_t i = 0; i < n; i++) {
        const float v = d->scale == 0.0f ? 1.0f : d->scale * (float)tm_gauss(&s);
        if (d->type == GW_T_F16) gw_u16(w, tm_f16(v));
        else gw_f32(w, v);
    }
}

/* Writes the model into f (f->w.oom set when out of memory). */
static inline void tm_write(tm_file *f, const tm_spec *s) {
    memset(f, 0, sizeof *f);
    tm_tensor_desc d[TM_MAX_TENSORS];
    const int nt = tm_tensor_list(s, d);
    gw kvs = { 0 };
    const int n_kv = tm_write_kvs(&kvs, s);
    gw *w = &f->w;
    gw_u32(w, 0x46554747u);
    gw_u32(w, 3);
    gw_u64(w, (uint64_t)nt);
    gw_u64(w, (uint64_t)n_kv);
    gw_bytes(w, kvs.p, kvs.n);
    w->oom |= kvs.oom;
    gw_free(&kvs);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gw_str(w, d[i].name);
        gw_u32(w, 2);
        gw_u64(w, d[i].ne0);
        gw_u64(w, d[i].ne1);
        gw_u32(w, d[i].type);
        gw_u64(w, off);
        off += (tm_tensor_bytes(&d[i]) + 31) / 32 * 32;
    }
    gw_pad(w, 32);
    for (int i = 0; i < nt; i++) {
        memcpy(f->t[i].name, d[i].name, sizeof f->t[i].name);
        f->t[i].type = d[i].type;
        f->t[i].off = w->n;
        f->t[i].bytes = (size_t)tm_tensor_bytes(&d[i]);
        tm_write_data(w, &d[i], s->seed);
        gw_pad(w, 32);
    }
    f->n_tensors = nt;
}

static inline void tm_free(tm_file *f) { gw_free(&f->w); }

/* Byte offset of tensor `name`'s data in f->w, or (size_t)-1. */
static inline size_t tm_data_offset(const tm_file *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->t[i].name, name)) return f->t[i].off;
    return (size_t)-1;
}

/* Overwrite value i of an F32 tensor. */
static inline bool tm_poke_f32(tm_file *f, const char *name, size_t i, float v) {
    const size_t off = tm_data_offset(f, name);
    if (off == (size_t)-1 || off + 4 * i + 4 > f->w.n) return false;
    memcpy(f->w.p + off + 4 * i, &v, 4);   /* little-endian host */
    return true;
}

/* Overwrite 16-bit word `word` of a tensor's data: an F16 value, or with
 * word = block * 17 the fp16 scale of Q8_0 block `block` (34 bytes). */
static inline bool tm_poke_u16(tm_file *f, const char *name, size_t word, uint16_t v) {
    const size_t off = tm_data_offset(f, name);
    if (off == (size_t)-1 || off + 2 * word + 2 > f->w.n) return false;
    f->w.p[off + 2 * word] = (uint8_t)v;
    f->w.p[off + 2 * word + 1] = (uint8_t)(v >> 8);
    return true;
}

static inline bool tm_save(const tm_file *f, const char *path) {
    FILE *o = fopen(path, "wb");
    if (!o) return false;
    bool ok = !f->w.oom && fwrite(f->w.p, 1, f->w.n, o) == f->w.n;
    return fclose(o) == 0 && ok;
}

/* Build spec s and save it: true when written. */
static inline bool tm_save_spec(const tm_spec *s, const char *path) {
    tm_file f;
    tm_write(&f, s);
    bool ok = tm_save(&f, path);
    tm_free(&f);
    return ok;
}

/* A text of n words of the vocabulary's pieces (deterministic). */
static inline bool tm_save_text(const char *path, int n_words, uint64_t seed) {
    FILE *o = fopen(path, "wb");
    if (!o) return false;
    uint64_t s = seed;
    for (int i = 0; i < n_words; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        fprintf(o, "%s%s", i ? " " : "", tm_words[(s >> 33) % TM_N_WORDS]);
        if (i % 11 == 10) fputs(".\n", o);
    }
    return fclose(o) == 0;
}

#endif
