/*
 * model_check.c - the checks of a model file that catch what would
 * otherwise be a silent wrong number (model.h):
 *
 *  - every value of every tensor the engine reads is finite: F32/F16/BF16
 *    values and, for block types, the values the blocks decode to, which
 *    are non-finite exactly when a block scale (d, dmin, super-block
 *    scales) is.  One pass over the weights at load, instead of a NaN
 *    perplexity or a "▅▅▅▅" generation later (cost: docs/engine.md);
 *  - the blk.N tensors and ARCH.block_count agree.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>

/* Index of the first non-finite value of x[0..n), or -1.  The OR of
 * "exponent all ones" over the row is computed first (a loop the compiler
 * vectorises); the index is only searched for when there is one. */
static int64_t first_non_finite(const float *x, int64_t n) {
    uint32_t any = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    if (!any) return -1;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

static kvq_status refuse(const char *name, const kvq_type_traits *tr, int64_t row, int64_t col, float v,
                         kvq_error *err) {
    const bool blocks = tr->block_size > 1;
    return kvq_fail(err, KVQ_ERR_FORMAT,
                    "model: tensor '%s' holds a non-finite value (%s) at row %lld, column %lld%s: the file is "
                    "corrupt", name, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)row, (long long)col,
                    blocks ? " (a block scale of that row)" : "");
}

kvq_status kvq_check_finite(const char *name, kvq_type type, const void *data, int64_t cols, int64_t rows,
                            kvq_error *err) {
    const kvq_type_traits *tr = kvq_type_get(type);
    if (!tr || !tr->dequantize)
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "model: tensor '%s' has type %s, which kvq cannot read", name,
                        kvq_type_name(type));
    const size_t row_bytes = kvq_row_bytes(type, cols);
    float *row = type == KVQ_TYPE_F32 ? NULL : kvq_malloc_n((size_t)cols, sizeof *row);
    if (type != KVQ_TYPE_F32 && !row) return kvq_fail(err, KVQ_ERR_NOMEM, "model: out of memory checking '%s'", name);
    kvq_status st = KVQ_OK;
    for (int64_t r = 0; r < rows && !st; r++) {
        const uint8_t *src = (const uint8_t *)data + (size_t)r * row_bytes;
        const float *x = (const float *)src;
        if (row) {
            kvq_dequantize_row_tr(tr, src, row, cols);
            x = row;
        }
        const int64_t bad = first_non_finite(x, cols);
        if (bad >= 0) st = refuse(name, tr, r, bad, x[bad], err);
    }
    free(row);
    return st;
}

/* Block number of a "blk.N.*" tensor name, or -1 for other names. */
static long block_of(gguf_str name) {
    if (name.len < 6 || memcmp(name.ptr, "blk.", 4) != 0) return -1;
    long n = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && n < (1L << 30); i++)
        n = n * 10 + (name.ptr[i] - '0');
    return i > 4 && i < name.len && name.ptr[i] == '.' ? n : -1;
}

kvq_status kvq_check_block_count(const gguf_file *f, const char *arch, int n_layer, kvq_error *err) {
    long top = -1;
    const gguf_tensor *top_t = NULL;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const long b = block_of(f->tensors[i].name);
        if (b > top) { top = b; top_t = &f->tensors[i]; }
    }
    if (top + 1 > n_layer)
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s.block_count' is %d but the file has tensors of block %ld "
                        "('%.*s'): the metadata and the tensors disagree", arch, n_layer, top,
                        (int)KVQ_MIN(top_t->name.len, 64), top_t->name.ptr);
    if (top + 1 < n_layer) {
        if (top < 0)
            return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s.block_count' is %d but the file has no blk.* tensors",
                            arch, n_layer);
        return kvq_fail(err, KVQ_ERR_FORMAT, "model: '%s.block_count' is %d but the file's tensors stop at block "
                        "%ld (blk.0 .. blk.%ld): the metadata and the tensors disagree", arch, n_layer, top, top);
    }
    return KVQ_OK;
}
