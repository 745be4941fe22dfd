/* codec.c - rows coded and decoded the way a cache stores them, for
 * `kvq quant-test` and any caller measuring a format's error on its own
 * data (kvq_eval.h, "codecs").  One path per kind of type: rows of blocks
 * (with an optional generic Hadamard), TurboQuant rows (the format's own
 * rotation R), KVarN tiles, and calibrated rows fitted to training rows. */
#include "calib_build.h"
#include "kvarn.h"
#include "turbo.h"

#include <stdlib.h>

typedef enum codec_kind { CODEC_ROWS = 0, CODEC_TURBO, CODEC_TILES, CODEC_CALIB } codec_kind;

struct kvq_codec {
    kvq_type type;
    codec_kind kind;
    int dim, rot_block;
    float *work;              /* a row padded to TurboQuant's blocks, or one tile slice */
    float *back;              /* tiles: the decoded slice                               */
    float *scratch;           /* tiles: kvq_kvarn_quantize's scratch                    */
    uint8_t *packed;          /* one coded row, or one tile record                      */
    kvq_kvarn_shape shape;    /* tiles                                                  */
    kvq_calib_rows fit;       /* calibrated types                                       */
    bool fitted;
};

void kvq_codec_free(kvq_codec *c) {
    if (!c) return;
    if (c->fitted) kvq_calib_rows_free(&c->fit);
    free(c->work);
    free(c->back);
    free(c->scratch);
    free(c->packed);
    free(c);
}

static kvq_status codec_alloc(kvq_codec *c, size_t work, size_t back, size_t scratch, size_t packed, kvq_error *err) {
    c->work = kvq_malloc_n(work, sizeof(float));
    c->back = back ? kvq_malloc_n(back, sizeof(float)) : NULL;
    c->scratch = scratch ? kvq_malloc_n(scratch, sizeof(float)) : NULL;
    c->packed = kvq_malloc(packed ? packed : 1);
    if (!c->work || (back && !c->back) || (scratch && !c->scratch) || !c->packed)
        return kvq_fail(err, KVQ_ERR_NOMEM, "codec: out of memory for rows of %d", c->dim);
    return KVQ_OK;
}

kvq_status kvq_codec_create(kvq_type t, int dim, const kvq_codec_opts *o, kvq_codec **out, kvq_error *err) {
    *out = NULL;
    const kvq_type_traits *tr = (unsigned)t < KVQ_TYPE_COUNT ? kvq_type_get(t) : NULL;
    if (!tr || !tr->is_cache_type) return kvq_fail(err, KVQ_ERR_ARG, "codec: not a cache type");
    if (dim < 1) return kvq_fail(err, KVQ_ERR_ARG, "codec: rows of %d values", dim);
    kvq_codec *c = kvq_calloc(1, sizeof *c);
    if (!c) return kvq_fail(err, KVQ_ERR_NOMEM, "codec: out of memory");
    c->type = t;
    c->dim = dim;
    c->rot_block = o ? o->rot_block : 0;
    kvq_status st;
    if (tr->calib_rate) {
        c->kind = CODEC_CALIB;
        if (dim > KVQ_MAX_HEAD_DIM || !o || !o->train || o->n_train < 1)
            st = kvq_fail(err, KVQ_ERR_ARG, "codec: %s needs training rows and heads of at most %d values", tr->name,
                          KVQ_MAX_HEAD_DIM);
        else st = codec_alloc(c, 1, 0, 0, (size_t)kvq_calib_row_bytes(tr->calib_rate, dim), err);
        if (!st) st = kvq_calib_fit_rows(o->train, o->n_train, dim, tr->calib_rate, &c->fit, err);
        c->fitted = st == KVQ_OK;
    } else if (tr->layout == KVQ_LAYOUT_TILES) {
        c->kind = CODEC_TILES;
        const int width = dim <= 64 ? 64 : 128;
        c->shape = (kvq_kvarn_shape){ width, tr->bits, true };
        const size_t tile = (size_t)KVQ_KVARN_TILE * width;
        st = codec_alloc(c, tile, tile, kvq_kvarn_scratch_floats(c->shape), kvq_kvarn_record_bytes(c->shape), err);
    } else {
        c->kind = tr->format_rot == KVQ_FMT_ROT_TURBO ? CODEC_TURBO : CODEC_ROWS;
        const int work = dim > kvq_turbo_rot_dim(dim) ? dim : kvq_turbo_rot_dim(dim);
        st = codec_alloc(c, (size_t)work, 0, 0, kvq_row_bytes(t, c->kind == CODEC_TURBO ? work : dim), err);
    }
    if (st) {
        kvq_codec_free(c);
        return st;
    }
    *out = c;
    return KVQ_OK;
}

int kvq_codec_group(const kvq_codec *c) { return c && c->kind == CODEC_TILES ? KVQ_KVARN_TILE : 1; }

static void row_round_trip(kvq_codec *c, const float *x, float *y) {
    const int dim = c->dim;
    switch (c->kind) {
    case CODEC_ROWS:
        memcpy(c->work, x, (size_t)dim * sizeof(float));
        if (c->rot_block) kvq_rotate_row(c->work, dim, c->rot_block, NULL);
        kvq_quantize_row(c->type, c->work, c->packed, dim);
        kvq_dequantize_row(c->type, c->packed, y, dim);
        if (c->rot_block) kvq_rotate_row_inverse(y, dim, c->rot_block, NULL);
        break;
    case CODEC_TURBO: {
        const int d = kvq_turbo_rot_dim(dim);
        kvq_turbo_rotate_query(x, c->work, dim);
        kvq_quantize_row(c->type, c->work, c->packed, d);
        kvq_dequantize_row(c->type, c->packed, c->work, d);
        kvq_turbo_unrotate(c->work, y, dim);
        break;
    }
    case CODEC_CALIB: kvq_calib_rows_round_trip(&c->fit, x, y, c->packed); break;
    case CODEC_TILES: break;
    }
}

/* One group of KVQ_KVARN_TILE rows: a tile per slice, each row zero-padded
 * to whole slices and rotated by the normalised Hadamard over its slice. */
static void tile_round_trip(kvq_codec *c, const float *x, float *y) {
    const int dim = c->dim, width = c->shape.width, n_slices = (dim + width - 1) / width;
    for (int sl = 0; sl < n_slices; sl++) {
        const int c0 = sl * width, nc = KVQ_MIN(width, dim - c0);
        for (int r = 0; r < KVQ_KVARN_TILE; r++) {
            float *dst = c->work + (size_t)r * width;
            memcpy(dst, x + (size_t)r * dim + c0, (size_t)nc * sizeof *dst);
            memset(dst + nc, 0, (size_t)(width - nc) * sizeof *dst);
            kvq_rotate_row(dst, width, width, NULL);
        }
        kvq_kvarn_quantize(c->shape, c->work, KVQ_KVARN_ITERS, c->packed, c->scratch);
        kvq_kvarn_dequantize(c->shape, c->packed, c->back);
        for (int r = 0; r < KVQ_KVARN_TILE; r++) {
            float *b = c->back + (size_t)r * width;
            kvq_rotate_row_inverse(b, width, width, NULL);
            memcpy(y + (size_t)r * dim + c0, b, (size_t)nc * sizeof *b);
        }
    }
}

kvq_status kvq_codec_round_trip(kvq_codec *c, const float *x, int n, float *y, kvq_error *err) {
    if (!c || !x || !y || n < 0) return kvq_fail(err, KVQ_ERR_ARG, "codec: bad arguments");
    const int group = kvq_codec_group(c);
    if (n % group) return kvq_fail(err, KVQ_ERR_ARG, "codec: %d rows are not whole groups of %d", n, group);
    for (int r = 0; r < n; r += group) {
        const float *xr = x + (size_t)r * c->dim;
        float *yr = y + (size_t)r * c->dim;
        if (c->kind == CODEC_TILES) tile_round_trip(c, xr, yr);
        else row_round_trip(c, xr, yr);
    }
    return KVQ_OK;
}
