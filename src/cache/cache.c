/*
 * cache.c - the quantised KV cache: creation (all memory from n_ctx, once),
 * writing (rotate, quantise once into the body, exact copies into the tail
 * ring and the sink; tile sides quantise a tile once, when it completes)
 * and the memory figures.  Attention over it lives in attention.c, tile
 * records through the hooks of their row (row_hooks.h); the layout is described
 * in cache.h.
 */
#include "cache.h"
#include "cache_lanes.h"
#include "cache_tiles_layout.h"
#include "hadamard.h"
#include "calib.h"
#include "turbo_traits.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>

void kvq_cache_params_default(kvq_cache_params *p) {
    memset(p, 0, sizeof *p);
    p->n_layer = 1;
    p->n_head_kv = 1;
    p->head_dim_k = p->head_dim_v = 128;
    p->n_ctx = 4096;
    p->max_batch = 512;
    p->type_k = p->type_v = KVQ_TYPE_F16;
    p->tail_tokens = 0;
    p->tail_type = KVQ_TYPE_BF16;   /* docs/spec/attention.md §3: default for block types */
    p->sink_tokens = 0;
    p->rot.mode = p->rot.mode_k = p->rot.mode_v = KVQ_ROT_AUTO;
    kvq_rot_request_from_env(&p->rot);
    p->rot_random_signs = false;
}

size_t kvq_cache_row_bytes(kvq_type t, int n_head_kv, int head_dim) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    if (n_head_kv <= 0 || !tr || head_dim <= 0) return 0;
    if (tr->layout == KVQ_LAYOUT_ROWS) return (size_t)n_head_kv * kvq_row_bytes(t, head_dim);
    kvq_cache_side sd = { .type = t, .head_dim = head_dim };
    kvq_row_hooks_of(t)->shape(&sd, true);      /* records divide into whole bytes per token */
    return (size_t)n_head_kv * (size_t)sd.n_slices * sd.record_bytes / KVQ_KVARN_TILE;
}

const kvq_rot_plan *kvq_cache_rotation(const kvq_cache *c) { return c ? &c->plan : NULL; }

void kvq_cache_memory(const kvq_cache *c, kvq_cache_bytes *b) {
    if (!b) return;
    if (!c) { memset(b, 0, sizeof *b); return; }
    *b = c->bytes;
}

void kvq_cache_clear(kvq_cache *c) {
    if (!c) return;
    memset(c->n_stored, 0, (size_t)c->p.n_layer * sizeof *c->n_stored);
    for (int l = 0; l < c->p.n_layer; l++) c->k[l].ring_lo = c->v[l].ring_lo = 0;
    c->stage.layer = -1;
}

void kvq_cache_free(kvq_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(c->mem); i++) free(c->mem_block[i]);
    free(c->types_k);
    free(c->types_v);
    free(c->signs_k);
    free(c->signs_v);
    free(c->k);
    free(c->v);
    free(c->n_stored);
    free(c->tile_scratch);
    free(c->attend_scratch);
    free(c->calib_heads);
    free(c->calib_mem);
    free(c);
}

/* ------------------------------------------------------------ validation */

static bool is_cache_type(kvq_type t) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    const kvq_row_hooks *h = kvq_row_hooks_of(t);     /* records: stored and read through their row's hooks */
    return tr && tr->is_cache_type && h && (h->read_row ? h->score != NULL : tr->quantize != NULL);
}

static bool is_exact_type(kvq_type t) {
    return t == KVQ_TYPE_F32 || t == KVQ_TYPE_F16 || t == KVQ_TYPE_BF16;
}

static kvq_status check_type(kvq_type t, const char *what, int layer, kvq_error *err) {
    if (is_cache_type(t)) return KVQ_OK;
    if (layer < 0)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: %s type %d is not a cache type", what, (int)t);
    return kvq_fail(err, KVQ_ERR_ARG, "cache: %s type %d of layer %d is not a cache type", what,
                    (int)t, layer);
}

static kvq_status check_params(const kvq_cache_params *p, kvq_error *err) {
    if (p->n_layer <= 0) return kvq_fail(err, KVQ_ERR_ARG, "cache: n_layer %d must be >= 1", p->n_layer);
    if (p->n_head_kv <= 0)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: n_head_kv %d must be >= 1", p->n_head_kv);
    if (p->head_dim_k < 1 || p->head_dim_k > KVQ_MAX_HEAD_DIM)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: head_dim_k %d outside 1..%d", p->head_dim_k, KVQ_MAX_HEAD_DIM);
    if (p->head_dim_v < 1 || p->head_dim_v > KVQ_MAX_HEAD_DIM)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: head_dim_v %d outside 1..%d", p->head_dim_v, KVQ_MAX_HEAD_DIM);
    if (p->n_ctx <= 0) return kvq_fail(err, KVQ_ERR_ARG, "cache: n_ctx %d must be >= 1", p->n_ctx);
    if (p->max_batch <= 0)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: max_batch %d must be >= 1", p->max_batch);
    if (p->kvarn_iters < 0 || p->kvarn_iters > KVQ_KVARN_MAX_ITERS)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: kvarn_iters %d outside 0..%d", p->kvarn_iters, KVQ_KVARN_MAX_ITERS);
    if (p->tail_tokens < 0 || p->tail_tokens > p->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: tail of %d tokens outside 0..n_ctx %d", p->tail_tokens, p->n_ctx);
    if (p->rollback_tokens < 0 || p->rollback_tokens > p->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: rollback of %d tokens outside 0..n_ctx %d", p->rollback_tokens, p->n_ctx);
    if (p->sink_tokens < 0 || p->sink_tokens > p->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "cache: sink of %d tokens outside 0..n_ctx %d", p->sink_tokens, p->n_ctx);
    if (!is_exact_type(p->tail_type))
        return kvq_fail(err, KVQ_ERR_ARG, "cache: tail type %s must be f32, f16 or bf16",
                        kvq_type_name(p->tail_type));
    kvq_status st;
    if ((st = check_type(p->type_k, "K", -1, err)) != KVQ_OK) return st;
    if ((st = check_type(p->type_v, "V", -1, err)) != KVQ_OK) return st;
    for (int l = 0; l < p->n_layer; l++) {
        if (p->layer_type_k && (st = check_type(p->layer_type_k[l], "K", l, err)) != KVQ_OK) return st;
        if (p->layer_type_v && (st = check_type(p->layer_type_v[l], "V", l, err)) != KVQ_OK) return st;
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------- rotation */

/* The plan is one per cache; a layer override may differ from -ctk/-ctv,
 * so the rule sees a block-quantised type when any layer uses one (AUTO
 * then rotates; rotating a plain-type layer too costs only rounding). */
static kvq_type representative_type(kvq_type global, const kvq_type *layers, int n_layer) {
    if (kvq_type_get_scalar(global)->is_block_quant || !layers) return global;
    for (int l = 0; l < n_layer; l++)
        if (kvq_type_get_scalar(layers[l])->is_block_quant) return layers[l];
    return global;
}

static bool valid_block(int block, int head_dim) {
    return block == 0 || (block > 0 && (block & (block - 1)) == 0 && head_dim % block == 0);
}

static kvq_status choose_rotation(kvq_cache *c, kvq_error *err) {
    const kvq_cache_params *p = &c->p;
    kvq_rot_request req = p->rot;
    req.head_dim_k = p->head_dim_k;
    req.head_dim_v = p->head_dim_v;
    req.type_k = representative_type(p->type_k, c->types_k, p->n_layer);
    req.type_v = representative_type(p->type_v, c->types_v, p->n_layer);
    c->plan = kvq_rot_choose(&req);
    kvq_random_signs(c->mix_signs, KVQ_MAX_HEAD_DIM, KVQ_ROT_SEED_MIX);
    if (!valid_block(c->plan.block_k, p->head_dim_k) || !valid_block(c->plan.block_v, p->head_dim_v))
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "cache: rotation blocks %d/%d do not fit head dims %d/%d",
                        c->plan.block_k, c->plan.block_v, p->head_dim_k, p->head_dim_v);
    if (!p->rot_random_signs) return KVQ_OK;
    if (c->plan.block_k) {
        if (!(c->signs_k = kvq_malloc((size_t)c->plan.block_k))) goto nomem;
        kvq_random_signs(c->signs_k, c->plan.block_k, KVQ_ROT_SEED_QK);
    }
    if (c->plan.block_v) {
        if (!(c->signs_v = kvq_malloc((size_t)c->plan.block_v))) goto nomem;
        kvq_random_signs(c->signs_v, c->plan.block_v, KVQ_ROT_SEED_V);
    }
    return KVQ_OK;
nomem:
    return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory for rotation signs");
}

/* --------------------------------------------------------------- layout */

/* a * b, or false on size_t overflow. */
static bool mul_size(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

/* Bytes of one [n_head_kv][rows][row_bytes] array, with overflow check. */
static bool array_bytes(int n_head_kv, int rows, size_t row_bytes, size_t *out) {
    size_t per_head;
    return mul_size((size_t)rows, row_bytes, &per_head) && mul_size((size_t)n_head_kv, per_head, out);
}

static int round_up_int(int x, int m) { return (int)(((int64_t)x + m - 1) / m * m); }

static atomic_bool g_lanes = true, g_pairs = true;
void kvq_cache_set_lanes(bool on) { atomic_store(&g_lanes, on); }
void kvq_cache_set_pairs(bool on) { atomic_store(&g_pairs, on); }

bool kvq_cache_type_has_layout(kvq_type t, int head_dim) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    if (!tr) return false;
    if (tr->layout == KVQ_LAYOUT_TILES)
        return kvq_tiles_layout_applies((kvq_kvarn_shape){ head_dim <= 64 ? 64 : 128, tr->bits, true });
    return kvq_lanes_type(t, head_dim) || kvq_vpairs_type(t, head_dim);
}

/* Rows: the plan's rotation, tail and sink as given; the ring is the tail,
 * exactly (a batch's own rows wait in the stage). */
static void shape_row_side(const kvq_cache *c, kvq_cache_side *sd, bool is_v) {
    const kvq_cache_params *p = &c->p;
    sd->rot_kind = kvq_type_get_scalar(sd->type)->format_rot;
    if (sd->rot_kind == KVQ_FMT_ROT_TURBO) {      /* the format's rotation, its padded blocks */
        sd->store_dim = kvq_turbo_store_dim(sd->head_dim);
        sd->rot_block = 0;
        sd->rot_signs = NULL;
    } else if (sd->rot_kind == KVQ_FMT_ROT_CALIB) {   /* each KV head's own transform (cache_calib.c) */
        sd->store_dim = sd->head_dim;
        sd->rot_block = 0;
        sd->rot_signs = NULL;
        sd->mix_signs = NULL;
    } else {
        sd->store_dim = sd->head_dim;
        sd->rot_block = is_v ? c->plan.block_v : c->plan.block_k;
        sd->rot_signs = is_v ? c->signs_v : c->signs_k;
        sd->mix_signs = NULL;
        /* A head shorter than the type's block (8 values in a 32-block)
         * leaves most of the stored block padding.  Rotating the padded
         * row puts those bytes to work: H.D.H over the padded width spreads
         * the head over every stored value (H alone would write 4 equal
         * copies of H8 x / 2), so the block's independent rounding errors
         * average out when rotated back.  Same bytes, exact in real
         * arithmetic, since H.D.H is orthogonal and its own inverse. */
        const int bs = kvq_type_get_scalar(sd->type)->block_size;
        if (sd->rot_block && !sd->rot_signs && bs > 1 && sd->head_dim % bs) {
            sd->store_dim = round_up_int(sd->head_dim, bs);
            sd->rot_block = kvq_rot_block_for(sd->store_dim, 8);
            sd->mix_signs = c->mix_signs;
        }
    }
    sd->row_bytes = kvq_row_bytes(sd->type, sd->store_dim);
    sd->lanes = sd->rot_kind != KVQ_FMT_ROT_CALIB &&
                (is_v ? atomic_load(&g_pairs) && kvq_vpairs_type(sd->type, sd->store_dim)
                      : atomic_load(&g_lanes) && kvq_lanes_type(sd->type, sd->store_dim));
    sd->tail_tokens = p->tail_tokens;
    sd->ring_rows = p->tail_tokens + p->rollback_tokens;
    sd->sink_rows = p->sink_tokens;
}

/* Tiles (docs/kvarn.md): the format's rotation per slice; the sink is in
 * whole tiles and holds the first tile unless it is quantised too; the
 * tail is counted in whole tiles; the ring always exists (it keeps the
 * incomplete tile, whose rows quantise the tile when it completes) and
 * holds the whole tail tiles before it: a decoding query at qp reads
 * tail + (qp + 1) % 128 exact rows, at most tail + 127. */
static void shape_tile_side(const kvq_cache *c, kvq_cache_side *sd, bool is_v) {
    const kvq_cache_params *p = &c->p;
    const int T = KVQ_KVARN_TILE;
    sd->records = kvq_row_hooks_of(sd->type);
    sd->records->shape(sd, is_v);
    sd->tile_layout = kvq_tiles_layout_applies(sd->tile) && atomic_load(is_v ? &g_pairs : &g_lanes);
    sd->rot_kind = KVQ_FMT_ROT_SLICE;
    sd->rot_block = sd->tile.width;
    sd->rot_signs = NULL;
    sd->row_bytes = 0;
    sd->tail_tokens = round_up_int(p->tail_tokens, T);
    const int first_exact = p->kvarn_quantize_first_tile ? 0 : T;
    const int sink_whole = round_up_int(KVQ_MAX(p->sink_tokens, first_exact), T);
    sd->first_tile = sink_whole / T;
    sd->sink_rows = KVQ_MIN(sink_whole, p->n_ctx);
    sd->n_tiles = KVQ_MAX(0, p->n_ctx / T - sd->first_tile);
    sd->ring_rows = (int)KVQ_MIN((int64_t)sd->tail_tokens + T - 1 + p->rollback_tokens, (int64_t)p->n_ctx);
}

/* Say once per side in the plan's reason line that padded rows are mixed
 * over their padded width (the start-up log prints that line). */
static void note_padded_mixing(kvq_rot_plan *plan, bool is_v, int store_dim, int block) {
    char note[80];
    snprintf(note, sizeof note, "; %c rows padded to %d, mixed by H.D.H (block %d)", is_v ? 'V' : 'K', store_dim, block);
    if (strstr(plan->reason, note)) return;
    size_t len = strlen(plan->reason);
    if (len + strlen(note) < sizeof plan->reason) memcpy(plan->reason + len, note, strlen(note) + 1);
}

/* Ring rows a side keeps when the cache holds n_ctx positions (the kv_bytes
 * definition, kvq.h): rows, the tail (and rollback rows); tiles, the whole
 * tail tiles, the rollback rows and the incomplete tile at that length,
 * which never reach into the sink. */
static int ring_rows_kept(const kvq_cache_side *sd, const kvq_cache_params *p) {
    if (sd->layout != KVQ_LAYOUT_TILES) return sd->ring_rows;
    const int64_t kept = (int64_t)sd->tail_tokens + p->rollback_tokens + p->n_ctx % KVQ_KVARN_TILE;
    return (int)KVQ_MIN(kept, (int64_t)KVQ_MAX(0, p->n_ctx - sd->sink_rows));
}

/* The stage: per side, the widest exact row of the layers whose side has a
 * ring, for max_batch rows of every KV head (none without a ring). */
static kvq_status plan_stage(kvq_cache *c, size_t *bytes, kvq_error *err) {
    kvq_cache_stage *sg = &c->stage;
    sg->layer = -1;
    sg->cap = KVQ_MIN(c->p.max_batch, c->p.n_ctx);
    *bytes = 0;
    for (int s = 0; s < 2; s++) {
        kvq_cache_side *sides = s ? c->v : c->k;
        sg->row_bytes[s] = 0;
        for (int l = 0; l < c->p.n_layer; l++)
            if (sides[l].ring_rows) sg->row_bytes[s] = KVQ_MAX(sg->row_bytes[s], sides[l].exact_row_bytes);
        size_t side;
        if (!array_bytes(c->p.n_head_kv, sg->cap, sg->row_bytes[s], &side) || side > SIZE_MAX / 4 - *bytes)
            return kvq_fail(err, KVQ_ERR_ARG, "cache: stage size overflow (max_batch %d too large)", c->p.max_batch);
        *bytes += side;
    }
    return KVQ_OK;
}

/* Compute every side's shape and sizes, the regions to allocate and the
 * reported figures; no allocation yet.  Each total stays below SIZE_MAX / 4,
 * so their sums cannot overflow. */
static kvq_status plan_layout(kvq_cache *c, kvq_error *err) {
    const kvq_cache_params *p = &c->p;
    kvq_cache_bytes *b = &c->bytes;
    memset(b, 0, sizeof *b);
    size_t scratch = 0, ring_alloc = 0, body_alloc_total[2] = { 0, 0 };
    for (int l = 0; l < p->n_layer; l++) {
        kvq_cache_side *sides[2] = { &c->k[l], &c->v[l] };
        const kvq_type types[2] = { c->types_k[l], c->types_v[l] };
        const int dims[2] = { p->head_dim_k, p->head_dim_v };
        size_t *body_total[2] = { &b->k, &b->v };
        for (int s = 0; s < 2; s++) {
            kvq_cache_side *sd = sides[s];
            sd->type = types[s];
            sd->body_tr = kvq_type_get(types[s]);
            sd->tail_tr = kvq_type_get(p->tail_type);
            sd->layout = kvq_type_get_scalar(types[s])->layout;
            sd->head_dim = dims[s];
            if (sd->layout == KVQ_LAYOUT_TILES) shape_tile_side(c, sd, s == 1);
            else shape_row_side(c, sd, s == 1);
            if (sd->mix_signs) note_padded_mixing(&c->plan, s == 1, sd->store_dim, sd->rot_block);
            sd->exact_row_bytes = kvq_row_bytes(p->tail_type, sd->store_dim);
            sd->side_index = s;
            size_t body, body_alloc, ring, kept, sink, per_head_tiles = 0;
            /* lanes: whole groups of 16 rows allocated, the rows counted */
            const int alloc_rows = sd->lanes ? round_up_int(p->n_ctx, KVQ_LANES) : p->n_ctx;
            const bool ok_body =
                sd->layout == KVQ_LAYOUT_TILES
                    ? mul_size((size_t)sd->n_tiles * (size_t)sd->n_slices, sd->record_bytes, &per_head_tiles) &&
                          mul_size((size_t)p->n_head_kv, per_head_tiles, &body)
                    : array_bytes(p->n_head_kv, p->n_ctx, sd->row_bytes, &body) &&
                          array_bytes(p->n_head_kv, alloc_rows, sd->row_bytes, &body_alloc);
            if (sd->layout == KVQ_LAYOUT_TILES) body_alloc = body;
            sd->body_head_bytes = sd->layout == KVQ_LAYOUT_TILES ? per_head_tiles : (size_t)alloc_rows * sd->row_bytes;
            if (!ok_body || !array_bytes(p->n_head_kv, sd->ring_rows, sd->exact_row_bytes, &ring) ||
                !array_bytes(p->n_head_kv, ring_rows_kept(sd, p), sd->exact_row_bytes, &kept) ||
                !array_bytes(p->n_head_kv, sd->sink_rows, sd->exact_row_bytes, &sink) ||
                body > SIZE_MAX / 4 - *body_total[s] || ring > SIZE_MAX / 4 - ring_alloc ||
                sink > SIZE_MAX / 4 - b->sink)
                return kvq_fail(err, KVQ_ERR_ARG, "cache: size overflow (n_ctx %d too large)", p->n_ctx);
            *body_total[s] += body;
            body_alloc_total[s] += body_alloc;
            ring_alloc += ring;
            b->tail += kept;
            b->sink += sink;
            if (sd->layout == KVQ_LAYOUT_TILES) scratch = KVQ_MAX(scratch, sd->records->scratch_floats(sd));
        }
    }
    size_t stage;
    kvq_status st = plan_stage(c, &stage, err);
    if (st != KVQ_OK) return st;
    b->total = b->k + b->v + b->tail + b->sink;
    b->work = stage + scratch * sizeof(float);
    b->allocated = body_alloc_total[0] + body_alloc_total[1] + ring_alloc + b->sink + b->work +
                   kvq_cache_calib_bytes(c);   /* + calibrated heads' transforms */
    const size_t regions[KVQ_ARRAY_LEN(c->mem_bytes)] = { body_alloc_total[0], body_alloc_total[1], ring_alloc,
                                                           b->sink, stage };
    memcpy(c->mem_bytes, regions, sizeof regions);
    c->tile_scratch_floats = scratch;
    return KVQ_OK;
}

/* Allocate the regions and point every side (and the stage) into them. */
static kvq_status allocate_layout(kvq_cache *c, kvq_error *err) {
    for (size_t i = 0; i < KVQ_ARRAY_LEN(c->mem); i++) {
        if (!c->mem_bytes[i]) continue;
        if (!(c->mem[i] = kvq_calloc_paged(c->mem_bytes[i], &c->mem_block[i])))
            return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory (%zu bytes)", c->mem_bytes[i]);
    }
    if (c->tile_scratch_floats && !(c->tile_scratch = kvq_malloc_n(c->tile_scratch_floats, sizeof(float))))
        return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory for tile quantisation");
    c->tile_scratch_threads = 1;
    c->stage.rows[0] = c->mem[4];
    c->stage.rows[1] = c->mem[4] ? c->mem[4] + (size_t)c->p.n_head_kv * c->stage.cap * c->stage.row_bytes[0] : NULL;
    uint8_t *body_k = c->mem[0], *body_v = c->mem[1], *ring = c->mem[2], *sink = c->mem[3];
    const size_t nh = (size_t)c->p.n_head_kv;
    for (int l = 0; l < c->p.n_layer; l++) {
        kvq_cache_side *sides[2] = { &c->k[l], &c->v[l] };
        uint8_t **bodies[2] = { &body_k, &body_v };
        for (int s = 0; s < 2; s++) {
            kvq_cache_side *sd = sides[s];
            /* a region nobody uses is NULL: no offset may be added to it */
            sd->body = *bodies[s];
            if (*bodies[s]) *bodies[s] += nh * sd->body_head_bytes;
            sd->ring = sd->ring_rows ? ring : NULL;
            if (sd->ring_rows) ring += nh * (size_t)sd->ring_rows * sd->exact_row_bytes;
            sd->sink = sd->sink_rows ? sink : NULL;
            if (sd->sink_rows) sink += nh * (size_t)sd->sink_rows * sd->exact_row_bytes;
        }
    }
    return KVQ_OK;
}

static kvq_status copy_layer_types(kvq_cache *c, kvq_error *err) {
    const int n = c->p.n_layer;
    c->types_k = kvq_malloc_n((size_t)n, sizeof *c->types_k);
    c->types_v = kvq_malloc_n((size_t)n, sizeof *c->types_v);
    c->k = kvq_calloc((size_t)n, sizeof *c->k);
    c->v = kvq_calloc((size_t)n, sizeof *c->v);
    c->n_stored = kvq_calloc((size_t)n, sizeof *c->n_stored);
    if (!c->types_k || !c->types_v || !c->k || !c->v || !c->n_stored)
        return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory for %d layers", n);
    for (int l = 0; l < n; l++) {
        c->types_k[l] = c->p.layer_type_k ? c->p.layer_type_k[l] : c->p.type_k;
        c->types_v[l] = c->p.layer_type_v ? c->p.layer_type_v[l] : c->p.type_v;
    }
    c->p.layer_type_k = c->types_k;
    c->p.layer_type_v = c->types_v;
    return KVQ_OK;
}

/* Everything but the big allocations: parameters checked and copied, layer
 * types, rotation plan, layout and byte figures.  Shared by creation and by
 * kvq_cache_plan_bytes, so the figures a tool reports are the cache's. */
static kvq_status plan_cache(const kvq_cache_params *p, kvq_cache **out, kvq_error *err) {
    *out = NULL;
    if (!p) return kvq_fail(err, KVQ_ERR_ARG, "cache: NULL parameters");
    kvq_status st = check_params(p, err);
    if (st != KVQ_OK) return st;
    kvq_cache *c = kvq_calloc(1, sizeof *c);
    if (!c) return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory");
    c->p = *p;
    /* Tail or sink longer than the context would only waste memory. */
    c->p.tail_tokens = KVQ_MIN(p->tail_tokens, p->n_ctx);
    c->p.sink_tokens = KVQ_MIN(p->sink_tokens, p->n_ctx);
    if ((st = copy_layer_types(c, err)) != KVQ_OK || (st = choose_rotation(c, err)) != KVQ_OK ||
        (st = plan_layout(c, err)) != KVQ_OK) {
        kvq_cache_free(c);
        return st;
    }
    *out = c;
    return KVQ_OK;
}

kvq_status kvq_cache_create(const kvq_cache_params *p, kvq_cache **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "cache: NULL output pointer");
    kvq_cache *c;
    kvq_status st = plan_cache(p, &c, err);
    if (st == KVQ_OK && ((st = allocate_layout(c, err)) != KVQ_OK || (st = kvq_cache_calib_bind(c, err)) != KVQ_OK))
        kvq_cache_free(c);
    *out = st == KVQ_OK ? c : NULL;
    return st;
}

kvq_status kvq_cache_plan_bytes(const kvq_cache_params *p, kvq_cache_bytes *out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "cache: NULL argument");
    memset(out, 0, sizeof *out);
    kvq_cache *c;
    kvq_status st = plan_cache(p, &c, err);
    if (st != KVQ_OK) return st;
    *out = c->bytes;
    kvq_cache_free(c);
    return KVQ_OK;
}

/* ------------------------------------------------------------- regions */

kvq_key_split kvq_cache_side_split(const kvq_cache_side *sd, int qp, int stage_pos) {
    kvq_key_split s;
    s.sink_end = KVQ_MIN(sd->sink_rows, qp + 1);
    if (sd->layout == KVQ_LAYOUT_TILES) {
        const int complete = (qp + 1) / KVQ_KVARN_TILE;            /* tiles 0..complete-1 */
        const int body_end = (complete - sd->tail_tokens / KVQ_KVARN_TILE) * KVQ_KVARN_TILE;
        s.ring_start = KVQ_MAX(s.sink_end, body_end);
    } else {
        s.ring_start = KVQ_MAX(s.sink_end, qp + 1 - (sd->ring_rows ? sd->tail_tokens : 0));
    }
    s.stage_start = sd->ring_rows ? KVQ_MAX(s.ring_start, KVQ_MIN(stage_pos, qp + 1)) : qp + 1;
    return s;
}

int kvq_cache_stage_pos(const kvq_cache *c, int layer) {
    return c->stage.layer == layer ? c->stage.pos : INT_MAX;
}

kvq_cache_part kvq_cache_key_part(const kvq_cache *c, int layer, bool is_v, int qp, int key) {
    const kvq_key_split s = kvq_cache_side_split(is_v ? &c->v[layer] : &c->k[layer], qp, kvq_cache_stage_pos(c, layer));
    return key < s.sink_end      ? KVQ_PART_SINK
           : key < s.ring_start  ? KVQ_PART_BODY
           : key < s.stage_start ? KVQ_PART_RING
                                 : KVQ_PART_STAGE;
}

/* Does the stage hold this side's rows (its layer's batch is pending)? */
static bool stage_holds(const kvq_cache *c, const kvq_cache_side *sd) {
    const int l = c->stage.layer;
    return l >= 0 && sd == (sd->side_index ? &c->v[l] : &c->k[l]);
}

static uint8_t *stage_row(const kvq_cache *c, const kvq_cache_side *sd, int head, int pos) {
    const kvq_cache_stage *sg = &c->stage;
    const int s = sd->side_index;
    return sg->rows[s] + ((size_t)head * (size_t)sg->cap + (size_t)(pos - sg->pos)) * sg->row_bytes[s];
}

static uint8_t *ring_row(const kvq_cache_side *sd, int head, int pos) {
    return sd->ring + ((size_t)head * (size_t)sd->ring_rows + (size_t)(pos % sd->ring_rows)) * sd->exact_row_bytes;
}

const uint8_t *kvq_cache_exact_row(const kvq_cache *c, const kvq_cache_side *sd, int head, int pos) {
    return stage_holds(c, sd) && pos >= c->stage.pos ? stage_row(c, sd, head, pos) : ring_row(sd, head, pos);
}

int kvq_cache_exact_from(const kvq_cache *c, int layer, const kvq_cache_side *sd) {
    const int committed = stage_holds(c, sd) ? c->stage.pos : c->n_stored[layer];
    return KVQ_MAX(sd->ring_lo, committed - sd->ring_rows);
}

void kvq_cache_side_rotate(const kvq_cache_side *sd, int head, const float *x, float *out) {
    if (sd->calib) { kvq_calib_head_forward(&sd->calib[head], x, out); return; }
    if (sd->rot_kind == KVQ_FMT_ROT_TURBO) { kvq_turbo_rotate_row(x, out, sd->head_dim); return; }
    memcpy(out, x, (size_t)sd->head_dim * sizeof *out);
    memset(out + sd->head_dim, 0, (size_t)(sd->store_dim - sd->head_dim) * sizeof *out);
    if (sd->mix_signs) kvq_rotate_row(out, sd->store_dim, sd->rot_block, NULL);   /* H, then D.H below */
    if (sd->rot_block) kvq_rotate_row(out, sd->store_dim, sd->rot_block, sd->mix_signs ? sd->mix_signs : sd->rot_signs);
}

void kvq_cache_side_rotate_query(const kvq_cache_side *sd, int head, const float *q, float *out) {
    if (sd->calib) kvq_calib_head_query(&sd->calib[head], q, out);   /* T^-T: not T unless T is orthogonal */
    else kvq_cache_side_rotate(sd, head, q, out);
}

void kvq_cache_side_unrotate(const kvq_cache_side *sd, int head, float *acc) {
    if (sd->calib) { kvq_calib_head_output(&sd->calib[head], acc); return; }
    if (sd->rot_kind == KVQ_FMT_ROT_TURBO) {
        float out[KVQ_MAX_HEAD_DIM];
        kvq_turbo_unrotate_row(acc, out, sd->head_dim);
        memcpy(acc, out, (size_t)sd->head_dim * sizeof *out);
        return;
    }
    if (sd->rot_block) kvq_rotate_row_inverse(acc, sd->store_dim, sd->rot_block, sd->mix_signs ? sd->mix_signs : sd->rot_signs);
    if (sd->mix_signs) kvq_rotate_row_inverse(acc, sd->store_dim, sd->rot_block, NULL);
}

/* ---------------------------------------------------------------- write */

/* Row pos of a body kept in rows (calibrated bodies too); row 0: where
 * the head's body starts, in either layout. */
static uint8_t *body_row(const kvq_cache_side *sd, int head, int pos) {
    return sd->body + (size_t)head * sd->body_head_bytes + (size_t)pos * sd->row_bytes;
}

void kvq_cache_body_put(const kvq_cache_side *sd, int head, int pos, const uint8_t *row) {
    if (!sd->lanes) memcpy(body_row(sd, head, pos), row, sd->row_bytes);
    else if (sd->side_index == 1) kvq_vpairs_put_row(sd->type, body_row(sd, head, 0), sd->store_dim, pos, row);
    else kvq_lanes_put_row(sd->type, body_row(sd, head, 0), sd->store_dim, pos, row);
}

void kvq_cache_body_get(const kvq_cache_side *sd, int head, int pos, uint8_t *row) {
    if (!sd->lanes) memcpy(row, body_row(sd, head, pos), sd->row_bytes);
    else if (sd->side_index == 1) kvq_vpairs_get_row(sd->type, body_row(sd, head, 0), sd->store_dim, pos, row);
    else kvq_lanes_get_row(sd->type, body_row(sd, head, 0), sd->store_dim, pos, row);
}

static uint8_t *sink_row(const kvq_cache_side *sd, int head, int pos) {
    return sd->sink + ((size_t)head * (size_t)sd->sink_rows + (size_t)pos) * sd->exact_row_bytes;
}

/* Store one head's rotated row: quantised once into the body (unless
 * `body_done`: two rows quantised together); exact into the stage (on to
 * the ring at the next write) and the sink for the first positions.
 * Tile bodies are filled when a tile completes (write_tiles). */
static void store_row(const kvq_cache *c, const kvq_cache_side *sd, int head, int pos, const float *buf,
                      bool body_done) {
    if (!body_done) {
        if (sd->calib) kvq_calib_encode(&sd->calib[head].prof, buf, body_row(sd, head, pos));
        else if (sd->lanes) {   /* quantised as a row, then spread over its group's lanes */
            uint8_t row[KVQ_LANES_ROW_MAX];
            kvq_quantize_row_tr(sd->body_tr, buf, row, sd->store_dim);
            kvq_cache_body_put(sd, head, pos, row);
        } else if (sd->layout == KVQ_LAYOUT_ROWS) {
            kvq_quantize_row_tr(sd->body_tr, buf, body_row(sd, head, pos), sd->store_dim);
        }
    }
    if (sd->ring_rows) kvq_quantize_row_tr(sd->tail_tr, buf, stage_row(c, sd, head, pos), sd->store_dim);
    if (pos < sd->sink_rows) kvq_quantize_row_tr(sd->tail_tr, buf, sink_row(sd, head, pos), sd->store_dim);
}

static void write_row(const kvq_cache *c, const kvq_cache_side *sd, int head, int pos, const float *x) {
    float buf[KVQ_MAX_HEAD_DIM];
    kvq_cache_side_rotate(sd, head, x, buf);
    store_row(c, sd, head, pos, buf, false);
}

/* Whether a side's body rows go several at a time: the trellis types,
 * whose search runs rows in pairs and walks each pair back beside the
 * next (kvq_turbo_quantize_rows: the same bytes, tested). */
static bool writes_rows_together(const kvq_cache_side *sd) {
    return !sd->calib && !sd->lanes && sd->layout == KVQ_LAYOUT_ROWS && kvq_turbo_is_tcq(kvq_turbo_of(sd->type));
}

/* The most rows write_rows_together takes (their rotated copies stay on
 * the stack: 32 KiB at the largest head). */
enum { WRITE_ROWS_MAX = 16 };

/* n body rows quantised together: row i, (head[i], pos[i]), from x[i],
 * each rotated by its own head's rotation. */
static void write_rows_together(const kvq_cache *c, const kvq_cache_side *sd, int n, const int *head,
                                const int *pos, const float *const *x) {
    float buf[WRITE_ROWS_MAX][KVQ_MAX_HEAD_DIM];
    const float *rot[WRITE_ROWS_MAX];
    void *dst[WRITE_ROWS_MAX];
    for (int i = 0; i < n; i++) {
        kvq_cache_side_rotate(sd, head[i], x[i], buf[i]);
        rot[i] = buf[i];
        dst[i] = body_row(sd, head[i], pos[i]);
    }
    const bool done = kvq_turbo_quantize_rot_rows(sd->type, n, rot, dst, sd->store_dim);
    for (int i = 0; i < n; i++) store_row(c, sd, head[i], pos[i], buf[i], done);
}

/* Copy the pending batch's newest rows into its layer's rings: each ring
 * then holds the last ring_rows positions written. */
void kvq_cache_commit_stage(kvq_cache *c) {
    kvq_cache_stage *sg = &c->stage;
    if (sg->layer < 0) return;
    kvq_cache_side *sides[2] = { &c->k[sg->layer], &c->v[sg->layer] };
    for (int s = 0; s < 2; s++) {
        kvq_cache_side *sd = sides[s];
        if (!sd->ring_rows) continue;
        const int end = sg->pos + sg->n, first = KVQ_MAX(sg->pos, end - sd->ring_rows);
        for (int h = 0; h < c->p.n_head_kv; h++)
            for (int pos = first; pos < end; pos++)
                memcpy(ring_row(sd, h, pos), stage_row(c, sd, h, pos), sd->exact_row_bytes);
        sd->ring_lo = KVQ_MAX(sd->ring_lo, end - sd->ring_rows);
    }
    sg->layer = -1;
}

/* One write call split by (KV head, side): a task stores its head's rows
 * of the batch, then quantises the tiles they complete (each tile once,
 * from that head's exact rows only), so tasks share nothing they write
 * and any thread count stores the same bytes. */
typedef struct write_job {
    const kvq_cache *c;
    int layer, pos, n;
    const float *k, *v;
    _Atomic int fail_pos;     /* first tile end that failed (INT_MAX: none) */
    _Atomic int fail_status;
} write_job;

static void write_task(void *ctx, int task, int thread) {
    write_job *j = ctx;
    const kvq_cache *c = j->c;
    const int h = task / 2, n_kv = c->p.n_head_kv;
    const kvq_cache_side *sd = task % 2 ? &c->v[j->layer] : &c->k[j->layer];
    const float *x = task % 2 ? j->v : j->k;
    const int dim = task % 2 ? c->p.head_dim_v : c->p.head_dim_k;
    const int partner = h ^ 1;   /* heads 2i and 2i + 1 */
    if (j->n == 1 && writes_rows_together(sd) && partner < n_kv) {
        /* one token (a decode step): the side's rows go two heads at a
         * time, in the lower head's task (the other's has nothing to do) */
        if (h < partner) {
            const int heads[2] = { h, partner }, poss[2] = { j->pos, j->pos };
            const float *const xs[2] = { x + (size_t)h * dim, x + (size_t)partner * dim };
            write_rows_together(c, sd, 2, heads, poss, xs);
        }
        return;
    }
    int t = 0;
    if (writes_rows_together(sd))
        for (; t < j->n; t += WRITE_ROWS_MAX) {
            const int n = KVQ_MIN(WRITE_ROWS_MAX, j->n - t);
            int heads[WRITE_ROWS_MAX], poss[WRITE_ROWS_MAX];
            const float *xs[WRITE_ROWS_MAX];
            for (int i = 0; i < n; i++) {
                heads[i] = h;
                poss[i] = j->pos + t + i;
                xs[i] = x + ((size_t)(t + i) * n_kv + h) * (size_t)dim;
            }
            write_rows_together(c, sd, n, heads, poss, xs);
        }
    for (; t < j->n; t++) write_row(c, sd, h, j->pos + t, x + ((size_t)t * n_kv + h) * (size_t)dim);
    if (sd->layout != KVQ_LAYOUT_TILES) return;
    float *scratch = c->tile_scratch + (size_t)thread * c->tile_scratch_floats;
    for (int p = j->pos; p < j->pos + j->n; p++) {      /* p ends a tile: quantise it, once */
        const int tile = p / KVQ_KVARN_TILE;
        if ((p + 1) % KVQ_KVARN_TILE || tile < sd->first_tile) continue;
        const kvq_status st = sd->records->quantize(c, sd, h, tile, scratch, NULL);
        if (st == KVQ_OK) continue;
        int seen = atomic_load(&j->fail_pos);
        while (p < seen && !atomic_compare_exchange_weak(&j->fail_pos, &seen, p)) {}
        atomic_store(&j->fail_status, (int)st);
        return;
    }
}

/* Room for one tile quantisation per thread of the pool. */
static kvq_status reserve_tile_scratch(kvq_cache *c, int threads, kvq_error *err) {
    if (!c->tile_scratch_floats || threads <= c->tile_scratch_threads) return KVQ_OK;
    float *grown = kvq_realloc_n(c->tile_scratch, (size_t)threads * c->tile_scratch_floats, sizeof(float));
    if (!grown) return kvq_fail(err, KVQ_ERR_NOMEM, "cache: out of memory for tile quantisation on %d threads", threads);
    c->tile_scratch = grown;
    c->tile_scratch_threads = threads;
    return KVQ_OK;
}

kvq_status kvq_cache_write(kvq_cache *c, int layer, int pos, int n, const float *k, const float *v,
                           kvq_error *err) {
    return kvq_cache_write_pool(c, layer, pos, n, k, v, NULL, err);
}

kvq_status kvq_cache_write_pool(kvq_cache *c, int layer, int pos, int n, const float *k, const float *v,
                                kvq_pool *pool, kvq_error *err) {
    if (!c || !k || !v) return kvq_fail(err, KVQ_ERR_ARG, "cache write: NULL argument");
    const kvq_cache_params *p = &c->p;
    if (layer < 0 || layer >= p->n_layer)
        return kvq_fail(err, KVQ_ERR_ARG, "cache write: layer %d outside 0..%d", layer, p->n_layer - 1);
    if (n < 1 || n > p->max_batch)
        return kvq_fail(err, KVQ_ERR_ARG, "cache write: %d tokens outside 1..max_batch %d", n, p->max_batch);
    if (pos != c->n_stored[layer])
        return kvq_fail(err, KVQ_ERR_ARG,
                        "cache write: position %d does not follow the %d positions stored in layer %d",
                        pos, c->n_stored[layer], layer);
    if ((int64_t)pos + n > p->n_ctx)
        return kvq_fail(err, KVQ_ERR_ARG, "cache write: positions %d..%d exceed n_ctx %d", pos,
                        pos + n - 1, p->n_ctx);
    kvq_status st = reserve_tile_scratch(c, kvq_pool_threads(pool), err);
    if (st != KVQ_OK) return st;
    kvq_cache_commit_stage(c);
    c->stage = (kvq_cache_stage){ .layer = layer, .pos = pos, .n = n, .cap = c->stage.cap,
                                  .rows = { c->stage.rows[0], c->stage.rows[1] },
                                  .row_bytes = { c->stage.row_bytes[0], c->stage.row_bytes[1] } };
    write_job job = { .c = c, .layer = layer, .pos = pos, .n = n, .k = k, .v = v };
    atomic_init(&job.fail_pos, INT_MAX);
    atomic_init(&job.fail_status, KVQ_OK);
    kvq_pool_run(pool, write_task, &job, 2 * p->n_head_kv);
    const int fail_pos = atomic_load(&job.fail_pos);
    if (fail_pos != INT_MAX) {
        c->n_stored[layer] = fail_pos;     /* what is complete stays usable */
        c->stage.n = fail_pos - pos;
        return kvq_fail(err, (kvq_status)atomic_load(&job.fail_status),
                        "cache write: quantising tile %d of layer %d failed (%s); the layer keeps positions 0..%d",
                        fail_pos / KVQ_KVARN_TILE, layer,
                        atomic_load(&job.fail_status) == KVQ_ERR_NOMEM ? "out of memory" : "internal error",
                        fail_pos - 1);
    }
    c->n_stored[layer] = pos + n;
    return KVQ_OK;
}

/* ---------------------------------------------------------------- read */

kvq_status kvq_cache_read_row(const kvq_cache *c, int layer, bool is_v, kvq_cache_part part, int head,
                              int pos, float *out, kvq_error *err) {
    if (!c || !out) return kvq_fail(err, KVQ_ERR_ARG, "cache read: NULL argument");
    if (layer < 0 || layer >= c->p.n_layer || head < 0 || head >= c->p.n_head_kv)
        return kvq_fail(err, KVQ_ERR_ARG, "cache read: layer %d / head %d out of range", layer, head);
    const int stored = c->n_stored[layer];
    if (pos < 0 || pos >= stored)
        return kvq_fail(err, KVQ_ERR_ARG, "cache read: position %d not stored", pos);
    const kvq_cache_side *sd = is_v ? &c->v[layer] : &c->k[layer];
    const bool exact_recent = part == KVQ_PART_RING || part == KVQ_PART_STAGE;
    if (exact_recent && (!sd->ring_rows || pos < kvq_cache_exact_from(c, layer, sd)))
        return kvq_fail(err, KVQ_ERR_ARG, "cache read: position %d is not in the tail ring", pos);
    if (part == KVQ_PART_SINK && pos >= sd->sink_rows)
        return kvq_fail(err, KVQ_ERR_ARG, "cache read: position %d is not in the sink", pos);
    if (part == KVQ_PART_BODY && sd->records) {   /* tiles, calibrated rows: their row's hook */
        const int tile = pos / KVQ_KVARN_TILE;
        if (sd->layout == KVQ_LAYOUT_TILES && (tile < sd->first_tile || (tile + 1) * KVQ_KVARN_TILE > stored))
            return kvq_fail(err, KVQ_ERR_ARG, "cache read: position %d is not in a quantised tile", pos);
        sd->records->read_row(sd, head, pos, out);
        return KVQ_OK;
    }
    uint8_t body[KVQ_LANES_ROW_MAX];   /* a body row in the row format, whatever its layout */
    if (part == KVQ_PART_BODY) kvq_cache_body_get(sd, head, pos, body);
    const uint8_t *row = part == KVQ_PART_BODY   ? body
                         : part == KVQ_PART_SINK ? sink_row(sd, head, pos)
                                                 : kvq_cache_exact_row(c, sd, head, pos);
    kvq_dequantize_row_tr(part == KVQ_PART_BODY ? sd->body_tr : sd->tail_tr, row, out, sd->store_dim);
    return KVQ_OK;
}

float *kvq_cache_attend_scratch(kvq_cache *c, size_t floats) {
    if (floats <= c->attend_scratch_floats) return c->attend_scratch;
    float *grown = kvq_malloc_n(floats, sizeof(float));   /* old contents are not needed */
    if (!grown) return NULL;
    free(c->attend_scratch);
    c->attend_scratch = grown;
    c->attend_scratch_floats = floats;
    return grown;
}
