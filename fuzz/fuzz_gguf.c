/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader and the tokenizer
 * loader on its metadata (make fuzz).
 *
 * Any input must either open (then every getter and tensor must be safe
 * to use, and every tensor must lie inside the input) or fail with
 * KVQ_ERR_FORMAT and a message; ASan/UBSan catch the rest.  An input that
 * opens is also given to kvq_tokenizer_load (tokenizer.ggml.*, special
 * token ids included), which must succeed, then tokenize a fixed text
 * into ids of its vocabulary, or fail with a message.
 */
#include "gguf.h"
#include "tokenizer.h"

#include <stdlib.h>

/* Reads land here so the compiler keeps them (ASan checks each). */
static volatile uint8_t g_sink;
static void touch_bytes(const void *p, uint64_t n) {
    if (n) g_sink ^= ((const uint8_t *)p)[0] ^ ((const uint8_t *)p)[n - 1];
}

static void touch_keys(const gguf_file *f) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        char key[128];
        const gguf_kv *kv = &f->kvs[i];
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = 0;
        uint32_t u; int64_t s; float x; bool b; gguf_str str;
        (void)gguf_get_u32(f, key, &u);
        (void)gguf_get_i64(f, key, &s);
        (void)gguf_get_f32(f, key, &x);
        (void)gguf_get_bool(f, key, &b);
        if (gguf_get_str(f, key, &str)) touch_bytes(str.ptr, str.len);
        kvq_error err;
        gguf_str *sa; float *fa; int32_t *ia; uint64_t n;
        if (gguf_get_str_array(f, key, &sa, &n, &err) == KVQ_OK) {
            for (uint64_t k = 0; k < n; k++) touch_bytes(sa[k].ptr, sa[k].len);
            free(sa);
        }
        if (gguf_get_f32_array(f, key, &fa, &n, &err) == KVQ_OK) free(fa);
        if (gguf_get_i32_array(f, key, &ia, &n, &err) == KVQ_OK) free(ia);
    }
}

static void touch_tensors(const gguf_file *f, const uint8_t *data, size_t size) {
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        if (d < data || t->nbytes > size || d - data > (ptrdiff_t)(size - t->nbytes)) abort();
        touch_bytes(d, t->nbytes);
        char name[80];
        if (t->name.len < sizeof name) {
            memcpy(name, t->name.ptr, (size_t)t->name.len);
            name[t->name.len] = 0;
            if (gguf_find_tensor(f, name) != t) abort();   /* names are unique */
        }
    }
}

static void touch_tokenizer(const gguf_file *f) {
    kvq_tokenizer *t = NULL;
    kvq_error err = { 0 };
    if (kvq_tokenizer_load(f, &t, &err) != KVQ_OK) {
        if (t || !err.msg[0]) abort();
        return;
    }
    static const char text[] = "Hello <s> world, 123 \xC3\xA9t\xC3\xA9 \xFF";
    int32_t ids[64];
    const int n = kvq_tokenizer_encode(t, text, sizeof text - 1, true, true, ids, 64);
    for (int i = 0; i < n && i < 64; i++)
        if (ids[i] < 0 || ids[i] >= kvq_tokenizer_n_vocab(t)) abort();
    const int32_t specials[2] = { kvq_tokenizer_bos(t), kvq_tokenizer_eos(t) };
    for (int i = 0; i < 2; i++)
        if (specials[i] < -1 || specials[i] >= kvq_tokenizer_n_vocab(t)) abort();
    kvq_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    kvq_error err = { 0 };
    kvq_status s = gguf_open_memory(data, size, &f, &err);
    if (s != KVQ_OK) {
        if (s != KVQ_ERR_FORMAT || f || strncmp(err.msg, "gguf: ", 6) != 0) abort();
        return 0;
    }
    touch_keys(f);
    touch_tensors(f, data, size);
    touch_tokenizer(f);
    gguf_close(f);
    return 0;
}
