/*
 * gguf.h - reader of GGUF model files (versions 2 and 3, little-endian).
 *
 * The file is memory-mapped (or read into memory) and parsed once at
 * open; every offset, count, string length, tensor shape and type is
 * checked against the file size before use, so a truncated or hostile
 * file gives one clear error and never a crash, hang or huge allocation.
 * Strings and tensor data point into the file's bytes (strings are NOT
 * NUL-terminated: use gguf_str).
 */
#ifndef KVQ_GGUF_H
#define KVQ_GGUF_H

#include "kvq_internal.h"

typedef enum gguf_vtype {
    GGUF_TYPE_UINT8 = 0, GGUF_TYPE_INT8 = 1, GGUF_TYPE_UINT16 = 2, GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4, GGUF_TYPE_INT32 = 5, GGUF_TYPE_FLOAT32 = 6, GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8, GGUF_TYPE_ARRAY = 9, GGUF_TYPE_UINT64 = 10, GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12, GGUF_TYPE_COUNT
} gguf_vtype;

typedef struct gguf_str { const char *ptr; uint64_t len; } gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;         /* value type; ARRAY for arrays           */
    gguf_vtype arr_type;     /* element type when type == ARRAY        */
    uint64_t arr_n;          /* element count when type == ARRAY       */
    const uint8_t *data;     /* first byte of the value in the mapping */
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[4];           /* ne[0] = row length (contiguous)         */
    int ggml_type;           /* as stored                               */
    kvq_type type;           /* kvq's type (always a known one)         */
    uint64_t offset;         /* relative to the data section            */
    const void *data;        /* in the mapping, bounds-checked          */
    size_t nbytes;
} gguf_tensor;

/* Where a gguf_file's bytes live: the caller's buffer (kept), a
 * read-only mapping (unmapped at close) or a buffer read from the file
 * (freed at close). */
typedef enum gguf_storage { GGUF_CALLER_BUFFER, GGUF_MAPPED, GGUF_READ } gguf_storage;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kvs;
    gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset;
    const uint8_t *base;     /* mapping, read buffer or caller's buffer */
    size_t size;
    gguf_storage storage;    /* who releases base, and how              */
} gguf_file;

/* Open and validate a file; on error *out is NULL and err says why.
 * gguf_open maps it; gguf_open_read reads it whole into private memory
 * (kvq_model_load_ex's KVQ_LOAD_READ: no page-cache pages under the
 * weights, see there). */
kvq_status gguf_open(const char *path, gguf_file **out, kvq_error *err);
kvq_status gguf_open_read(const char *path, gguf_file **out, kvq_error *err);
/* Same over a caller-owned buffer (fuzzing, tests); the buffer must
 * outlive the gguf_file. */
kvq_status gguf_open_memory(const void *data, size_t size, gguf_file **out, kvq_error *err);
void gguf_close(gguf_file *f);

/* Block layout of a ggml tensor type id: kvq's type, values per block and
 * bytes per block; false when kvq cannot read that type. */
bool gguf_ggml_type_layout(int ggml_id, kvq_type *type, int *block_size, int *block_bytes);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
bool gguf_str_eq(gguf_str s, const char *c);

/* Scalar getters: false when the key is absent or of an incompatible type
 * (integers convert between widths when the value fits). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Array getters: allocate *out (caller frees) with the array's n values;
 * KVQ_ERR_FORMAT if the key exists with another type, KVQ_ERR_ARG if absent. */
kvq_status gguf_get_str_array(const gguf_file *f, const char *key, gguf_str **out, uint64_t *n, kvq_error *err);
kvq_status gguf_get_f32_array(const gguf_file *f, const char *key, float **out, uint64_t *n, kvq_error *err);
kvq_status gguf_get_i32_array(const gguf_file *f, const char *key, int32_t **out, uint64_t *n, kvq_error *err);

#endif
