/*
 * gguf.c - GGUF v2/v3 reader: map, parse, validate (see gguf.h).
 *
 * Layout (all little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *   n_kv     x { string key, u32 value type, value }
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset }
 *   padding to `general.alignment` (default 32), then the tensor data;
 *   a tensor's offset is relative to the start of the data section.
 * A string is u64 length + bytes (no NUL); an array is u32 element type,
 * u64 count, then the elements.
 *
 * Nothing is trusted: every read goes through the cursor, which checks the
 * bytes are there; counts are checked against the bytes left before any
 * allocation, so allocations are bounded by a small multiple of the file
 * size.  Messages name the entry being parsed ("metadata entry 3 ('key')",
 * "tensor 5 ('blk.0.attn_q.weight')").
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum {
    GGUF_MAGIC = 0x46554747u,          /* "GGUF" read as a little-endian u32 */
    GGUF_DEFAULT_ALIGNMENT = 32,
    GGUF_MAX_DIMS = 4,
    /* Smallest possible encodings, used to reject counts that cannot fit:
     * a metadata entry is key length (8) + type (4) + a 1-byte value,
     * a tensor info is name length (8) + n_dims (4) + one dim (8) + type (4)
     * + offset (8); an array element of strings is at least its length. */
    MIN_KV_BYTES = 8 + 4 + 1,
    MIN_TENSOR_INFO_BYTES = 8 + 4 + 8 + 4 + 8,
    MIN_STRING_BYTES = 8,
    NAME_SHOWN = 64,                   /* longest name quoted in a message */
};

/* ------------------------------------------------------------ value types */

/* Bytes of one scalar value; 0 for STRING/ARRAY (variable) and bad types. */
static size_t scalar_size(uint32_t type) {
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *vtype_name(uint32_t type) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64" };
    return type < GGUF_TYPE_COUNT ? names[type] : "invalid";
}

/* ---------------------------------------------------------- tensor types */

/* Block layout of a ggml tensor type: the trait table (src/format/types.c) is
 * the only source, so a type kvq can read is a type the reader accepts. */
bool gguf_ggml_type_layout(int ggml_id, kvq_type *type, int *block_size, int *block_bytes) {
    kvq_type t = kvq_type_from_ggml_id(ggml_id);
    const kvq_type_traits *tr = t != KVQ_TYPE_COUNT ? kvq_type_get_scalar(t) : NULL;
    if (!tr) return false;
    *type = t;
    *block_size = tr->block_size;
    *block_bytes = tr->block_bytes;
    return true;
}

/* ------------------------------------------------------------ the cursor */

typedef struct parser {
    const uint8_t *base;
    size_t size, pos;
    kvq_error *err;
    char where[160];   /* what is being parsed, for messages */
} parser;

static size_t left(const parser *p) { return p->size - p->pos; }

/* Copy an untrusted name into buf for a message: printable ASCII only,
 * at most NAME_SHOWN characters, "..." when cut. */
static const char *shown(gguf_str s, char *buf, size_t cap) {
    size_t n = s.len < NAME_SHOWN ? (size_t)s.len : NAME_SHOWN;
    if (n + 4 > cap) n = cap - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[i] = c >= 0x20 && c < 0x7f && c != '\'' ? (char)c : '?';
    }
    size_t k = n;
    if (n < s.len) { memcpy(buf + k, "...", 3); k += 3; }
    buf[k] = 0;
    return buf;
}

static kvq_status truncated(parser *p, size_t need, const char *what) {
    return kvq_fail(p->err, KVQ_ERR_FORMAT,
                    "gguf: file truncated in %s: %s at offset %zu needs %zu bytes, %zu left (file size %zu)",
                    p->where, what, p->pos, need, left(p), p->size);
}

/* The next n bytes, or NULL (error recorded) when the file ends first. */
static const uint8_t *take(parser *p, size_t n, const char *what) {
    if (n > left(p)) { truncated(p, n, what); return NULL; }
    const uint8_t *b = p->base + p->pos;
    p->pos += n;
    return b;
}

static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t le64(const uint8_t *b) { return (uint64_t)le32(b) | (uint64_t)le32(b + 4) << 32; }

static kvq_status read_u32(parser *p, const char *what, uint32_t *v) {
    const uint8_t *b = take(p, 4, what);
    if (!b) return KVQ_ERR_FORMAT;
    *v = le32(b);
    return KVQ_OK;
}

static kvq_status read_u64(parser *p, const char *what, uint64_t *v) {
    const uint8_t *b = take(p, 8, what);
    if (!b) return KVQ_ERR_FORMAT;
    *v = le64(b);
    return KVQ_OK;
}

static kvq_status read_str(parser *p, const char *what, gguf_str *out) {
    uint64_t len;
    kvq_status s = read_u64(p, what, &len);
    if (s) return s;
    if (len > left(p))
        return kvq_fail(p->err, KVQ_ERR_FORMAT,
                        "gguf: %s: %s length %llu at offset %zu runs past the end of the file (%zu bytes left, file size %zu)",
                        p->where, what, (unsigned long long)len, p->pos - 8, left(p), p->size);
    out->ptr = (const char *)p->base + p->pos;
    out->len = len;
    p->pos += (size_t)len;
    return KVQ_OK;
}

/* ---------------------------------------------------------------- header */

static kvq_status parse_header(parser *p, gguf_file *f) {
    snprintf(p->where, sizeof p->where, "header");
    uint32_t magic;
    kvq_status s = read_u32(p, "magic", &magic);
    if (s) return s;
    if (magic != GGUF_MAGIC)
        return kvq_fail(p->err, KVQ_ERR_FORMAT,
                        "gguf: bad magic %02x %02x %02x %02x (expected \"GGUF\"): not a GGUF file",
                        p->base[0], p->base[1], p->base[2], p->base[3]);
    if ((s = read_u32(p, "version", &f->version))) return s;
    if (f->version == 1)
        return kvq_fail(p->err, KVQ_ERR_FORMAT,
                        "gguf: version 1 is not supported (only 2 and 3): re-convert the model with a current converter");
    if (f->version != 2 && f->version != 3) {
        /* A byte-swapped 2 or 3 is a big-endian file. */
        uint32_t sw = __builtin_bswap32(f->version);
        if (sw == 2 || sw == 3)
            return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: big-endian GGUF (version %u) is not supported", sw);
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: unsupported version %u (only 2 and 3)", f->version);
    }
    if ((s = read_u64(p, "tensor count", &f->n_tensors))) return s;
    if ((s = read_u64(p, "metadata count", &f->n_kv))) return s;
    /* Each entry needs a minimum number of bytes: reject counts the file
     * cannot hold before allocating anything for them. */
    size_t room = left(p);
    if (f->n_kv > room / MIN_KV_BYTES || f->n_tensors > room / MIN_TENSOR_INFO_BYTES ||
        f->n_kv * MIN_KV_BYTES + f->n_tensors * MIN_TENSOR_INFO_BYTES > room)
        return kvq_fail(p->err, KVQ_ERR_FORMAT,
                        "gguf: header claims %llu metadata entries and %llu tensors, "
                        "which cannot fit in the %zu bytes after the header (file size %zu)",
                        (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors, room, p->size);
    return KVQ_OK;
}

/* -------------------------------------------------------------- metadata */

/* Skip over `n` values of a non-array type, checking they are there. */
static kvq_status skip_values(parser *p, uint32_t type, uint64_t n, const char *what) {
    if (type == GGUF_TYPE_STRING) {
        if (n > left(p) / MIN_STRING_BYTES)
            return kvq_fail(p->err, KVQ_ERR_FORMAT,
                            "gguf: %s: array of %llu strings cannot fit in the %zu bytes left (file size %zu)",
                            p->where, (unsigned long long)n, left(p), p->size);
        for (uint64_t i = 0; i < n; i++) {
            gguf_str str;
            kvq_status s = read_str(p, what, &str);
            if (s) return s;
        }
        return KVQ_OK;
    }
    size_t el = scalar_size(type);
    if (n > left(p) / el)
        return kvq_fail(p->err, KVQ_ERR_FORMAT,
                        "gguf: %s: %llu values of %zu bytes at offset %zu extend past the end of the file (size %zu)",
                        p->where, (unsigned long long)n, el, p->pos, p->size);
    p->pos += (size_t)(n * el);
    return KVQ_OK;
}

static kvq_status check_vtype(parser *p, uint32_t type, const char *what) {
    if (type >= GGUF_TYPE_COUNT)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: invalid %s %u (valid: 0..%d)",
                        p->where, what, type, GGUF_TYPE_COUNT - 1);
    return KVQ_OK;
}

static kvq_status parse_kv(parser *p, uint64_t i, gguf_kv *kv) {
    char nb[NAME_SHOWN + 4];
    snprintf(p->where, sizeof p->where, "metadata entry %llu", (unsigned long long)i);
    kvq_status s = read_str(p, "key", &kv->key);
    if (s) return s;
    if (kv->key.len == 0) return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s has an empty key", p->where);
    if (memchr(kv->key.ptr, 0, (size_t)kv->key.len))   /* lookups take C strings */
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: key '%s' contains a NUL byte", p->where,
                        shown(kv->key, nb, sizeof nb));
    snprintf(p->where, sizeof p->where, "metadata entry %llu ('%s')", (unsigned long long)i,
             shown(kv->key, nb, sizeof nb));
    uint32_t type;
    if ((s = read_u32(p, "value type", &type)) || (s = check_vtype(p, type, "value type"))) return s;
    kv->type = (gguf_vtype)type;
    if (type != GGUF_TYPE_ARRAY) {
        kv->data = p->base + p->pos;
        return skip_values(p, type, 1, "string value");
    }
    uint32_t arr_type;
    if ((s = read_u32(p, "array element type", &arr_type)) ||
        (s = check_vtype(p, arr_type, "array element type")))
        return s;
    if (arr_type == GGUF_TYPE_ARRAY)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: nested arrays are not supported", p->where);
    kv->arr_type = (gguf_vtype)arr_type;
    if ((s = read_u64(p, "array length", &kv->arr_n))) return s;
    kv->data = p->base + p->pos;
    return skip_values(p, arr_type, kv->arr_n, "array string element");
}

/* ------------------------------------------------------------ duplicates */

static int cmp_str(gguf_str a, gguf_str b) {
    if (a.len != b.len) return a.len < b.len ? -1 : 1;
    return a.len ? memcmp(a.ptr, b.ptr, (size_t)a.len) : 0;
}
static int cmp_kv_key(const void *a, const void *b) {
    return cmp_str((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}
static int cmp_tensor_name(const void *a, const void *b) {
    return cmp_str((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}
static int cmp_tensor_offset(const void *a, const void *b) {
    uint64_t x = (*(const gguf_tensor *const *)a)->offset, y = (*(const gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

/* Sort pointers to the n items with cmp; returns the array (caller frees)
 * or NULL when out of memory. */
static const void **sorted_ptrs(const void *items, size_t n, size_t item_size,
                                int (*cmp)(const void *, const void *)) {
    const void **v = kvq_malloc_n(n ? n : 1, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < n; i++) v[i] = (const uint8_t *)items + i * item_size;
    qsort(v, n, sizeof *v, cmp);
    return v;
}

static kvq_status check_duplicate_keys(const gguf_file *f, kvq_error *err) {
    const gguf_kv **v = (const gguf_kv **)sorted_ptrs(f->kvs, f->n_kv, sizeof *f->kvs, cmp_kv_key);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory checking metadata keys");
    kvq_status s = KVQ_OK;
    for (size_t i = 1; i < f->n_kv && !s; i++)
        if (cmp_str(v[i - 1]->key, v[i]->key) == 0) {
            char nb[NAME_SHOWN + 4];
            s = kvq_fail(err, KVQ_ERR_FORMAT, "gguf: duplicate metadata key '%s'", shown(v[i]->key, nb, sizeof nb));
        }
    free(v);
    return s;
}

/* ------------------------------------------------------------ alignment */

/* general.alignment: any integer type whose value fits u32, a power of two. */
static kvq_status read_alignment(gguf_file *f, kvq_error *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return KVQ_OK;
    uint32_t a;
    if (!gguf_get_u32(f, "general.alignment", &a))
        return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: general.alignment must be an unsigned 32-bit integer (is %s)",
                        vtype_name(kv->type));
    if (a == 0 || (a & (a - 1)) != 0)
        return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: general.alignment %u is not a power of two", a);
    f->alignment = a;
    return KVQ_OK;
}

/* --------------------------------------------------------------- tensors */

/* Elements of the tensor (dims already checked > 0), or an error when the
 * product overflows int64. */
static kvq_status tensor_elements(parser *p, const gguf_tensor *t, uint64_t *n_out) {
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne = (uint64_t)t->ne[d];
        if (n > (uint64_t)INT64_MAX / ne)
            return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: element count overflows (shape too large)", p->where);
        n *= ne;
    }
    *n_out = n;
    return KVQ_OK;
}

/* Type and byte size: the row (ne[0]) must be whole blocks. */
static kvq_status tensor_layout(parser *p, gguf_tensor *t, uint64_t n_elements) {
    int bs, bb;
    if (!gguf_ggml_type_layout(t->ggml_type, &t->type, &bs, &bb))
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: unknown or unsupported ggml tensor type %d",
                        p->where, t->ggml_type);
    if (t->ne[0] % bs != 0)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: row length %lld is not a multiple of the %s block size %d",
                        p->where, (long long)t->ne[0], kvq_type_name(t->type), bs);
    uint64_t blocks = n_elements / (uint64_t)bs;
    if (blocks > SIZE_MAX / (uint64_t)bb)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: byte size overflows", p->where);
    t->nbytes = (size_t)(blocks * (uint64_t)bb);
    return KVQ_OK;
}

static kvq_status parse_tensor_info(parser *p, uint64_t i, gguf_tensor *t) {
    char nb[NAME_SHOWN + 4];
    snprintf(p->where, sizeof p->where, "tensor %llu", (unsigned long long)i);
    kvq_status s = read_str(p, "name", &t->name);
    if (s) return s;
    if (t->name.len == 0) return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s has an empty name", p->where);
    if (memchr(t->name.ptr, 0, (size_t)t->name.len))   /* lookups take C strings */
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: name '%s' contains a NUL byte", p->where,
                        shown(t->name, nb, sizeof nb));
    snprintf(p->where, sizeof p->where, "tensor %llu ('%s')", (unsigned long long)i, shown(t->name, nb, sizeof nb));
    if ((s = read_u32(p, "dimension count", &t->n_dims))) return s;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: %u dimensions (must be 1..%d)",
                        p->where, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if ((s = read_u64(p, "dimension", &ne))) return s;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: dimension %u is %llu (must be 1..2^63-1)",
                            p->where, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type;
    if ((s = read_u32(p, "tensor type", &type))) return s;
    if (type > INT32_MAX)
        return kvq_fail(p->err, KVQ_ERR_FORMAT, "gguf: %s: unknown or unsupported ggml tensor type %u", p->where, type);
    t->ggml_type = (int)type;
    if ((s = read_u64(p, "data offset", &t->offset))) return s;
    uint64_t n_elements = 0;
    if ((s = tensor_elements(p, t, &n_elements))) return s;
    return tensor_layout(p, t, n_elements);
}

/* Offsets aligned, data inside the file, no two tensors sharing bytes. */
static kvq_status place_tensors(gguf_file *f, kvq_error *err) {
    char nb[NAME_SHOWN + 4], nb2[NAME_SHOWN + 4];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: tensor '%s' offset %llu is not a multiple of the alignment %u",
                            shown(t->name, nb, sizeof nb), (unsigned long long)t->offset, f->alignment);
        uint64_t room = f->data_offset <= f->size ? f->size - f->data_offset : 0;
        if (t->offset > room || t->nbytes > room - t->offset)
            /* offset and size as stored: their sum may not fit 64 bits */
            return kvq_fail(err, KVQ_ERR_FORMAT,
                            "gguf: tensor '%s' (%llu bytes at offset %llu of the data section, which starts at "
                            "%llu) extends past the end of the file (size %zu)",
                            shown(t->name, nb, sizeof nb), (unsigned long long)t->nbytes,
                            (unsigned long long)t->offset, (unsigned long long)f->data_offset, f->size);
        t->data = f->base + f->data_offset + t->offset;
    }
    const gguf_tensor **v = (const gguf_tensor **)sorted_ptrs(f->tensors, f->n_tensors, sizeof *f->tensors,
                                                              cmp_tensor_offset);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory checking tensor offsets");
    kvq_status s = KVQ_OK;
    for (size_t i = 1; i < f->n_tensors && !s; i++)
        if (v[i - 1]->offset + v[i - 1]->nbytes > v[i]->offset)
            s = kvq_fail(err, KVQ_ERR_FORMAT, "gguf: tensors '%s' and '%s' overlap (offsets %llu+%zu and %llu)",
                         shown(v[i - 1]->name, nb, sizeof nb), shown(v[i]->name, nb2, sizeof nb2),
                         (unsigned long long)v[i - 1]->offset, v[i - 1]->nbytes, (unsigned long long)v[i]->offset);
    free(v);
    return s;
}

static kvq_status check_duplicate_names(const gguf_file *f, kvq_error *err) {
    const gguf_tensor **v = (const gguf_tensor **)sorted_ptrs(f->tensors, f->n_tensors, sizeof *f->tensors,
                                                              cmp_tensor_name);
    if (!v) return kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory checking tensor names");
    kvq_status s = KVQ_OK;
    for (size_t i = 1; i < f->n_tensors && !s; i++)
        if (cmp_str(v[i - 1]->name, v[i]->name) == 0) {
            char nb[NAME_SHOWN + 4];
            s = kvq_fail(err, KVQ_ERR_FORMAT, "gguf: duplicate tensor name '%s'", shown(v[i]->name, nb, sizeof nb));
        }
    free(v);
    return s;
}

/* ----------------------------------------------------------------- parse */

static kvq_status parse(gguf_file *f, kvq_error *err) {
    parser p = { .base = f->base, .size = f->size, .pos = 0, .err = err };
    kvq_status s = parse_header(&p, f);
    if (s) return s;
    /* Counts are bounded by the file size here, so these are small. */
    f->kvs = kvq_calloc(f->n_kv ? (size_t)f->n_kv : 1, sizeof *f->kvs);
    f->tensors = kvq_calloc(f->n_tensors ? (size_t)f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kvs || !f->tensors) return kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory for the metadata index");
    for (uint64_t i = 0; i < f->n_kv; i++)
        if ((s = parse_kv(&p, i, &f->kvs[i]))) return s;
    if ((s = check_duplicate_keys(f, err)) || (s = read_alignment(f, err))) return s;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((s = parse_tensor_info(&p, i, &f->tensors[i]))) return s;
    if ((s = check_duplicate_names(f, err))) return s;
    /* The data section starts at the next multiple of the alignment. */
    f->data_offset = ((uint64_t)p.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors > 0 && f->data_offset > f->size)
        return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: data section starts at %llu, past the end of the file (size %zu)",
                        (unsigned long long)f->data_offset, f->size);
    return place_tensors(f, err);
}

static kvq_status open_buffer(const void *data, size_t size, gguf_storage storage, gguf_file **out,
                              kvq_error *err) {
    gguf_file *f = kvq_calloc(1, sizeof *f);
    if (!f) return kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory");
    f->base = data;
    f->size = size;
    f->storage = storage;
    kvq_status s = parse(f, err);
    if (s) {
        f->storage = GGUF_CALLER_BUFFER;   /* the caller of open_buffer releases the bytes on failure */
        gguf_close(f);
        return s;
    }
    *out = f;
    return KVQ_OK;
}

kvq_status gguf_open_memory(const void *data, size_t size, gguf_file **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "gguf: no output pointer");
    *out = NULL;
    if (!data && size) return kvq_fail(err, KVQ_ERR_ARG, "gguf: NULL buffer");
    return open_buffer(size ? data : "", size, GGUF_CALLER_BUFFER, out, err);
}

/* The one refusal of an empty file, mapped or read. */
static kvq_status empty_file(const char *path, kvq_error *err) {
    return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: '%s' is empty (0 bytes): not a GGUF file", path);
}

kvq_status gguf_open(const char *path, gguf_file **out, kvq_error *err) {
    if (!out || !path) return kvq_fail(err, KVQ_ERR_ARG, "gguf: no path or output pointer");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kvq_fail(err, KVQ_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return kvq_fail(err, KVQ_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kvq_fail(err, KVQ_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return empty_file(path, err);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return kvq_fail(err, KVQ_ERR_IO, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);                       /* the mapping keeps the file open */
    if (map == MAP_FAILED) return kvq_fail(err, KVQ_ERR_IO, "gguf: cannot map '%s': %s", path, strerror(e));
    kvq_status s = open_buffer(map, size, GGUF_MAPPED, out, err);
    if (s) munmap(map, size);
    return s;
}

kvq_status gguf_open_read(const char *path, gguf_file **out, kvq_error *err) {
    if (!out || !path) return kvq_fail(err, KVQ_ERR_ARG, "gguf: no path or output pointer");
    *out = NULL;
    char *buf;
    size_t size;
    /* no cap but the address space: a model is as large as it is */
    kvq_status s = kvq_read_file(path, "gguf", SIZE_MAX / 2, &buf, &size, err);
    if (s) return s;
    if (size == 0) {
        free(buf);
        return empty_file(path, err);
    }
    s = open_buffer(buf, size, GGUF_READ, out, err);
    if (s) free(buf);
    return s;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free(f->kvs);
    free(f->tensors);
    if (f->storage == GGUF_MAPPED) munmap((void *)f->base, f->size);
    if (f->storage == GGUF_READ) free((void *)f->base);
    free(f);
}

/* --------------------------------------------------------------- lookups */

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kvs[i].key, key)) return &f->kvs[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/* ---------------------------------------------------------------- values */

/* An integer value as sign + magnitude-free pair: *neg tells whether it is
 * below zero, *u holds it when not negative, *i when negative. */
typedef struct int_value { bool neg; uint64_t u; int64_t i; } int_value;

static bool read_int(gguf_vtype type, const uint8_t *b, int_value *v) {
    int64_t s;
    switch (type) {
    case GGUF_TYPE_UINT8:  v->neg = false; v->u = b[0]; return true;
    case GGUF_TYPE_UINT16: v->neg = false; v->u = kvq_rd16(b); return true;
    case GGUF_TYPE_UINT32: v->neg = false; v->u = le32(b); return true;
    case GGUF_TYPE_UINT64: v->neg = false; v->u = le64(b); return true;
    case GGUF_TYPE_INT8:   s = (int8_t)b[0]; break;
    case GGUF_TYPE_INT16:  s = (int16_t)kvq_rd16(b); break;
    case GGUF_TYPE_INT32:  s = (int32_t)le32(b); break;
    case GGUF_TYPE_INT64:  { uint64_t u = le64(b); memcpy(&s, &u, 8); break; }
    default: return false;
    }
    v->neg = s < 0;
    v->i = s;
    v->u = s < 0 ? 0 : (uint64_t)s;
    return true;
}

static bool int_fits_i64(const int_value *v, int64_t lo, int64_t hi, int64_t *out) {
    if (v->neg) {
        if (v->i < lo) return false;
        *out = v->i;
        return true;
    }
    if (v->u > (uint64_t)hi) return false;
    *out = (int64_t)v->u;
    return true;
}

static const gguf_kv *find_scalar(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_find(f, key);
    return kv && kv->type != GGUF_TYPE_ARRAY ? kv : NULL;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = find_scalar(f, key);
    int_value v;
    if (!kv || !read_int(kv->type, kv->data, &v) || v.neg || v.u > UINT32_MAX) return false;
    *out = (uint32_t)v.u;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = find_scalar(f, key);
    int_value v;
    return kv && read_int(kv->type, kv->data, &v) && int_fits_i64(&v, INT64_MIN, INT64_MAX, out);
}

static float read_f32(const uint8_t *b) { return kvq_bits_f32(le32(b)); }
static double read_f64(const uint8_t *b) { uint64_t u = le64(b); double d; memcpy(&d, &u, 8); return d; }

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = find_scalar(f, key);
    if (!kv) return false;
    if (kv->type == GGUF_TYPE_FLOAT32) { *out = read_f32(kv->data); return true; }
    if (kv->type == GGUF_TYPE_FLOAT64) { *out = (float)read_f64(kv->data); return true; }
    return false;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = find_scalar(f, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL) return false;
    *out = kv->data[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = find_scalar(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return false;
    out->len = le64(kv->data);
    out->ptr = (const char *)kv->data + 8;
    return true;
}

/* ---------------------------------------------------------------- arrays */

/* The array under key with one of the accepted element types; the error
 * says whether it is absent (ARG) or of another type (FORMAT). */
static kvq_status find_array(const gguf_file *f, const char *key, bool (*accept)(gguf_vtype),
                             const char *wanted, const gguf_kv **out, kvq_error *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return kvq_fail(err, KVQ_ERR_ARG, "gguf: key '%s' not found", key);
    if (kv->type != GGUF_TYPE_ARRAY || !accept(kv->arr_type))
        return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: key '%s' is %s%s%s, expected an array of %s", key,
                        vtype_name(kv->type), kv->type == GGUF_TYPE_ARRAY ? " of " : "",
                        kv->type == GGUF_TYPE_ARRAY ? vtype_name(kv->arr_type) : "", wanted);
    *out = kv;
    return KVQ_OK;
}

static void *alloc_array(uint64_t n, size_t el, const char *key, kvq_error *err) {
    /* n was checked against the file size at open, so this cannot overflow
     * on a 64-bit host; check anyway for 32-bit ones. */
    if (n > SIZE_MAX / el) { kvq_fail(err, KVQ_ERR_NOMEM, "gguf: array '%s' too large", key); return NULL; }
    void *p = kvq_malloc(n ? (size_t)n * el : 1);
    if (!p) kvq_fail(err, KVQ_ERR_NOMEM, "gguf: out of memory for array '%s' (%llu values)", key, (unsigned long long)n);
    return p;
}

static bool is_string(gguf_vtype t) { return t == GGUF_TYPE_STRING; }
static bool is_float(gguf_vtype t) { return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64; }
static bool is_integer(gguf_vtype t) { int_value v; static const uint8_t z[8]; return read_int(t, z, &v); }

kvq_status gguf_get_str_array(const gguf_file *f, const char *key, gguf_str **out, uint64_t *n, kvq_error *err) {
    const gguf_kv *kv;
    kvq_status s = find_array(f, key, is_string, "strings", &kv, err);
    if (s) return s;
    gguf_str *v = alloc_array(kv->arr_n, sizeof *v, key, err);
    if (!v) return KVQ_ERR_NOMEM;
    const uint8_t *b = kv->data;     /* every length was checked at open */
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        v[i].len = le64(b);
        v[i].ptr = (const char *)b + 8;
        b += 8 + v[i].len;
    }
    *out = v;
    *n = kv->arr_n;
    return KVQ_OK;
}

kvq_status gguf_get_f32_array(const gguf_file *f, const char *key, float **out, uint64_t *n, kvq_error *err) {
    const gguf_kv *kv;
    kvq_status s = find_array(f, key, is_float, "float32", &kv, err);
    if (s) return s;
    float *v = alloc_array(kv->arr_n, sizeof *v, key, err);
    if (!v) return KVQ_ERR_NOMEM;
    size_t el = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++)
        v[i] = el == 4 ? read_f32(kv->data + i * 4) : (float)read_f64(kv->data + i * 8);
    *out = v;
    *n = kv->arr_n;
    return KVQ_OK;
}

kvq_status gguf_get_i32_array(const gguf_file *f, const char *key, int32_t **out, uint64_t *n, kvq_error *err) {
    const gguf_kv *kv;
    kvq_status s = find_array(f, key, is_integer, "int32", &kv, err);
    if (s) return s;
    int32_t *v = alloc_array(kv->arr_n, sizeof *v, key, err);
    if (!v) return KVQ_ERR_NOMEM;
    size_t el = scalar_size(kv->arr_type);
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int_value iv;
        int64_t x;
        read_int(kv->arr_type, kv->data + i * el, &iv);
        if (!int_fits_i64(&iv, INT32_MIN, INT32_MAX, &x)) {
            free(v);
            return kvq_fail(err, KVQ_ERR_FORMAT, "gguf: array '%s' element %llu does not fit in int32",
                            key, (unsigned long long)i);
        }
        v[i] = (int32_t)x;
    }
    *out = v;
    *n = kv->arr_n;
    return KVQ_OK;
}
