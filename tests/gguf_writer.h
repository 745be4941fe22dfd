/*
 * gguf_writer.h - a tiny GGUF writer for tests and fuzz seeds.
 *
 * Independent of the reader on purpose: it knows the byte layout of the
 * format and the sizes of the few tensor types it writes, so a reader bug
 * cannot hide behind a shared helper.  gw_model() builds a small valid
 * model whose every field can be overridden to produce one corruption.
 */
#ifndef KVQ_GGUF_WRITER_H
#define KVQ_GGUF_WRITER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* GGUF value type ids and the ggml tensor type ids used here (format facts). */
enum { GW_U8 = 0, GW_I8, GW_U16, GW_I16, GW_U32, GW_I32, GW_F32, GW_BOOL,
       GW_STR, GW_ARR, GW_U64, GW_I64, GW_F64 };
enum { GW_T_F32 = 0, GW_T_F16 = 1, GW_T_Q8_0 = 8, GW_T_Q4_K = 12 };

/* A growable byte buffer; `oom` sticks once an allocation fails. */
typedef struct gw { uint8_t *p; size_t n, cap; bool oom; } gw;

static inline void gw_bytes(gw *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->n + n) cap *= 2;
        uint8_t *p = realloc(w->p, cap);
        if (!p) { w->oom = true; return; }
        w->p = p;
        w->cap = cap;
    }
    if (n) memcpy(w->p + w->n, src, n);
    w->n += n;
}
static inline void gw_le(gw *w, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    gw_bytes(w, b, (size_t)bytes);
}
static inline void gw_u8(gw *w, uint8_t v) { gw_le(w, v, 1); }
static inline void gw_u16(gw *w, uint16_t v) { gw_le(w, v, 2); }
static inline void gw_u32(gw *w, uint32_t v) { gw_le(w, v, 4); }
static inline void gw_u64(gw *w, uint64_t v) { gw_le(w, v, 8); }
static inline void gw_f32(gw *w, float f) { uint32_t u; memcpy(&u, &f, 4); gw_u32(w, u); }
static inline void gw_f64(gw *w, double d) { uint64_t u; memcpy(&u, &d, 8); gw_u64(w, u); }
static inline void gw_str(gw *w, const char *s) { gw_u64(w, strlen(s)); gw_bytes(w, s, strlen(s)); }
static inline void gw_pad(gw *w, size_t align) { while (w->n % align) gw_u8(w, 0); }
static inline void gw_free(gw *w) { free(w->p); memset(w, 0, sizeof *w); }

/* Key + value type; the caller writes the value. */
static inline void gw_key(gw *w, const char *key, uint32_t type) { gw_str(w, key); gw_u32(w, type); }
static inline void gw_kv_u32(gw *w, const char *key, uint32_t v) { gw_key(w, key, GW_U32); gw_u32(w, v); }
static inline void gw_kv_str(gw *w, const char *key, const char *v) { gw_key(w, key, GW_STR); gw_str(w, v); }

/* Bytes of a tensor of one of the types above (0 for others). */
static inline uint64_t gw_tensor_bytes(uint32_t type, const uint64_t *ne, uint32_t n_dims) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= ne[d];
    switch (type) {
    case GW_T_F32: return n * 4;
    case GW_T_F16: return n * 2;
    case GW_T_Q8_0: return n / 32 * 34;
    case GW_T_Q4_K: return n / 256 * 144;
    default: return 0;
    }
}

typedef struct gw_tensor {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;
} gw_tensor;

/* The baseline model: three tensors of different types, aligned to 32. */
static const gw_tensor gw_baseline_tensors[3] = {
    { "tok",  2, { 4, 3, 0, 0 },  GW_T_F32,  0 },    /* 48 bytes          */
    { "norm", 1, { 8, 0, 0, 0 },  GW_T_F16,  64 },   /* 16 bytes          */
    { "q8",   2, { 32, 2, 0, 0 }, GW_T_Q8_0, 96 },   /* 68 bytes, to 164  */
};

typedef struct gw_model {
    uint32_t magic, version;
    bool claim_counts;                 /* write n_kv/n_tensors below instead of the real ones */
    uint64_t n_kv_claim, n_tensors_claim;
    int64_t alignment;                 /* general.alignment value; -1: key absent */
    uint32_t alignment_type;           /* its value type (GW_U32 normally) */
    bool all_types;                    /* one key of every scalar type + arrays */
    const gw_tensor *tensors;
    int n_tensors;
    const uint8_t *extra_kv;           /* raw extra entries appended to the metadata */
    size_t extra_kv_len;
    int n_extra_kv;
} gw_model;

static inline gw_model gw_model_default(void) {
    gw_model m = { 0 };
    m.magic = 0x46554747u;                             /* "GGUF" */
    m.version = 3;
    m.alignment = -1;
    m.alignment_type = GW_U32;
    m.all_types = true;
    m.tensors = gw_baseline_tensors;
    m.n_tensors = 3;
    return m;
}

/* Byte i of the data section: a pattern the tests can recognise. */
static inline uint8_t gw_data_byte(uint64_t i) { return (uint8_t)(i * 7 + 3); }

/* Number of metadata entries gw_write_kvs writes. */
static inline int gw_model_kv_count(const gw_model *m) {
    return 2 + (m->all_types ? 15 : 0) + (m->alignment >= 0) + m->n_extra_kv;
}

static inline void gw_write_kvs(gw *w, const gw_model *m) {
    gw_kv_str(w, "general.architecture", "llama");
    gw_kv_u32(w, "llama.block_count", 2);
    if (m->alignment >= 0) {
        gw_key(w, "general.alignment", m->alignment_type);
        if (m->alignment_type == GW_STR) gw_str(w, "32");
        else gw_le(w, (uint64_t)m->alignment, m->alignment_type == GW_U64 ? 8 : 4);
    }
    if (m->all_types) {
        gw_key(w, "test.u8", GW_U8);   gw_u8(w, 200);
        gw_key(w, "test.i8", GW_I8);   gw_u8(w, (uint8_t)-100);
        gw_key(w, "test.u16", GW_U16); gw_u16(w, 60000);
        gw_key(w, "test.i16", GW_I16); gw_u16(w, (uint16_t)-30000);
        gw_key(w, "test.u32", GW_U32); gw_u32(w, 4000000000u);
        gw_key(w, "test.i32", GW_I32); gw_u32(w, (uint32_t)-2000000000);
        gw_key(w, "test.f32", GW_F32); gw_f32(w, 1.5f);
        gw_key(w, "test.bool", GW_BOOL); gw_u8(w, 1);
        gw_key(w, "test.u64", GW_U64); gw_u64(w, 1ull << 40);
        gw_key(w, "test.i64", GW_I64); gw_u64(w, (uint64_t)-(1ll << 40));
        gw_key(w, "test.f64", GW_F64); gw_f64(w, 0.25);
        gw_key(w, "tokenizer.ggml.tokens", GW_ARR); gw_u32(w, GW_STR); gw_u64(w, 3);
        gw_str(w, "<unk>"); gw_str(w, "a"); gw_str(w, "");
        gw_key(w, "tokenizer.ggml.scores", GW_ARR); gw_u32(w, GW_F32); gw_u64(w, 3);
        gw_f32(w, 0.0f); gw_f32(w, -1.5f); gw_f32(w, 2.0f);
        gw_key(w, "tokenizer.ggml.token_type", GW_ARR); gw_u32(w, GW_I32); gw_u64(w, 3);
        gw_u32(w, 2); gw_u32(w, 1); gw_u32(w, (uint32_t)-1);
        gw_key(w, "test.empty", GW_ARR); gw_u32(w, GW_U8); gw_u64(w, 0);
    }
    gw_bytes(w, m->extra_kv, m->extra_kv_len);
}

/* Header, metadata, tensor infos, padding, then data up to the end of the
 * last tensor (filled with gw_data_byte). */
static inline void gw_write_model(gw *w, const gw_model *m) {
    gw_u32(w, m->magic);
    gw_u32(w, m->version);
    gw_u64(w, m->claim_counts ? m->n_tensors_claim : (uint64_t)m->n_tensors);
    gw_u64(w, m->claim_counts ? m->n_kv_claim : (uint64_t)gw_model_kv_count(m));
    gw_write_kvs(w, m);
    uint64_t end = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gw_tensor *t = &m->tensors[i];
        gw_str(w, t->name);
        gw_u32(w, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 8; d++) gw_u64(w, d < 4 ? t->ne[d] : 1);
        gw_u32(w, t->type);
        gw_u64(w, t->offset);
        uint64_t e = t->offset + gw_tensor_bytes(t->type, t->ne, t->n_dims < 4 ? t->n_dims : 4);
        if (e > end && e < (1u << 20)) end = e;
    }
    gw_pad(w, m->alignment > 0 && m->alignment < 4096 ? (size_t)m->alignment : 32);
    for (uint64_t i = 0; i < end; i++) gw_u8(w, gw_data_byte(i));
}

#endif
