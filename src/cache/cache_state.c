/*
 * cache_state.c - cache state files (docs/state.md): kvq_cache_save writes
 * a cache's settings, stored positions, exact rows and records with the
 * tokens they came from; kvq_cache_load restores them into a cache made
 * with the same settings, bit for bit, or refuses with the difference.
 *
 * Layout (little-endian), all of it covered by the trailing checksum:
 *   header   "KVQSTATE", u32 version, u32 settings words S, u64 model hash,
 *            u32 n_tokens, u32 n_layer (32 bytes)
 *   settings S u32 words (settings_words below: what must match)
 *   tokens   n_tokens x i32
 *   per layer: u32 positions stored, then per side (K, V):
 *            u32 oldest exact row held (ring and stage), and the bytes:
 *            body   rows: per KV head, rows 0..n-1;
 *                   tiles: per KV head, the records of the complete tiles
 *            exact  per KV head, the exact recent rows from that oldest one
 *            sink   per KV head, rows 0..min(n, sink_rows)-1
 *   trailer  u64 hash64 of every byte before it
 */
#include "cache.h"
#include "cache_lanes.h"
#include "hash64.h"
#include "turbo_traits.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

/* Version 2: the trellis codebooks were put on a grid of 2^-5 (docs/turbo.md,
 * "The codebook's grid"), so the codes of a version 1 file read other
 * values wherever trellis codes are stored: a turbo*_tcq side or tail, or a
 * calibrated side (its runs may be trellis-coded).  A version 1 file
 * without them holds the same bytes as version 2 and loads. */
enum { STATE_VERSION = 2, HEADER_BYTES = 32, MAX_SETTINGS = 64 + 2 * 8 * 4096 };
static const char MAGIC[8] = { 'K', 'V', 'Q', 'S', 'T', 'A', 'T', 'E' };

/* Whether a version 1 file restored into c would hold trellis codes
 * (kvq_turbo_is_tcq: the turbo*_tcq rows). */
static bool holds_trellis_codes(const kvq_cache *c) {
    if (c->calib_hash || kvq_turbo_is_tcq(kvq_turbo_of(c->p.tail_type))) return true;
    for (int l = 0; l < c->p.n_layer; l++)
        if (kvq_turbo_is_tcq(kvq_turbo_of(c->k[l].type)) || kvq_turbo_is_tcq(kvq_turbo_of(c->v[l].type))) return true;
    return false;
}

/* ------------------------------------------------------------ settings */

/* What a restored cache must share with the saved one, one named u32 per
 * entry: the parameters, the rotation plan, and every side's layout (as
 * the cache derived it).  Names are for the refusal message. */
typedef struct setting { const char *name; int layer, side; uint32_t value; } setting;

static int side_settings(const kvq_cache_side *sd, int layer, int side, setting *out) {
    const setting s[] = {
        { "type", layer, side, (uint32_t)sd->type },         { "stored width", layer, side, (uint32_t)sd->store_dim },
        { "row bytes", layer, side, (uint32_t)sd->row_bytes }, { "record bytes", layer, side, (uint32_t)sd->record_bytes },
        { "Hadamard block", layer, side, (uint32_t)sd->rot_block }, { "exact ring rows", layer, side, (uint32_t)sd->ring_rows },
        { "sink rows", layer, side, (uint32_t)sd->sink_rows }, { "first quantised tile", layer, side, (uint32_t)sd->first_tile },
    };
    memcpy(out, s, sizeof s);
    return (int)KVQ_ARRAY_LEN(s);
}

static int cache_settings(const kvq_cache *c, setting *out) {
    const kvq_cache_params *p = &c->p;
    const setting g[] = {
        { "n_head_kv", -1, -1, (uint32_t)p->n_head_kv },     { "head_dim_k", -1, -1, (uint32_t)p->head_dim_k },
        { "head_dim_v", -1, -1, (uint32_t)p->head_dim_v },   { "n_ctx", -1, -1, (uint32_t)p->n_ctx },
        { "tail tokens", -1, -1, (uint32_t)p->tail_tokens }, { "sink tokens", -1, -1, (uint32_t)p->sink_tokens },
        { "rollback tokens", -1, -1, (uint32_t)p->rollback_tokens }, { "tail type", -1, -1, (uint32_t)p->tail_type },
        { "KVarN iterations", -1, -1, (uint32_t)p->kvarn_iters },
        { "KVarN first tile quantised", -1, -1, (uint32_t)p->kvarn_quantize_first_tile },
        { "rotation K block", -1, -1, (uint32_t)c->plan.block_k }, { "rotation V block", -1, -1, (uint32_t)c->plan.block_v },
        { "random rotation signs", -1, -1, (uint32_t)p->rot_random_signs },
        { "calibration (hash of its transforms)", -1, -1, c->calib_hash },
    };
    int n = (int)KVQ_ARRAY_LEN(g);
    memcpy(out, g, sizeof g);
    for (int l = 0; l < p->n_layer; l++) {
        n += side_settings(&c->k[l], l, 0, out + n);
        n += side_settings(&c->v[l], l, 1, out + n);
    }
    return n;
}

static int settings_count(int n_layer) { return 14 + 2 * 8 * n_layer; }

/* ------------------------------------------------------------- writing */

typedef struct writer { FILE *f; kvq_hash64 h; bool ok; } writer;

static void put(writer *w, const void *p, size_t n) {
    if (!n || !w->ok) return;
    kvq_hash64_update(&w->h, p, n);
    w->ok = fwrite(p, 1, n, w->f) == n;
}

static void put32(writer *w, uint32_t v) {
    uint8_t b[4];
    kvq_wr32(b, v);
    put(w, b, 4);
}

static int stored_len(const kvq_cache *c) {
    for (int l = 1; l < c->p.n_layer; l++)
        if (c->n_stored[l] != c->n_stored[0]) return -1;
    return c->n_stored[0];
}

/* Rows [0, n) of one head of a row body, or its complete tiles' records. */
static size_t body_bytes(const kvq_cache_side *sd, int n) {
    if (sd->layout != KVQ_LAYOUT_TILES) return (size_t)n * sd->row_bytes;
    const int tiles = KVQ_MAX(0, n / KVQ_KVARN_TILE - sd->first_tile);
    return (size_t)tiles * (size_t)sd->n_slices * sd->record_bytes;
}

static void put_side(writer *w, const kvq_cache *c, int layer, const kvq_cache_side *sd, int n) {
    /* the exact rows the ring holds once the stage is committed */
    const int from = sd->ring_rows ? KVQ_MIN(n, KVQ_MAX(kvq_cache_exact_from(c, layer, sd), n - sd->ring_rows)) : n;
    put32(w, (uint32_t)from);
    const size_t body = body_bytes(sd, n);
    for (int h = 0; body && h < c->p.n_head_kv; h++) {
        if (sd->tile_layout) {   /* records: the codes token-major in the file */
            uint8_t rec[KVQ_TILES_RECORD_MAX];
            for (size_t at = 0; at < body; at += sd->record_bytes) {
                kvq_tiles_record_out(sd, sd->body + (size_t)h * sd->body_head_bytes + at, rec);
                put(w, rec, sd->record_bytes);
            }
            continue;
        }
        if (!sd->lanes) { put(w, sd->body + (size_t)h * sd->body_head_bytes, body); continue; }
        uint8_t row[KVQ_LANES_ROW_MAX];   /* the file holds rows whatever the memory's layout */
        for (int pos = 0; pos < n; pos++) {
            kvq_cache_body_get(sd, h, pos, row);
            put(w, row, sd->row_bytes);
        }
    }
    for (int h = 0; h < c->p.n_head_kv; h++)
        for (int pos = from; pos < n; pos++) put(w, kvq_cache_exact_row(c, sd, h, pos), sd->exact_row_bytes);
    const int sink = KVQ_MIN(n, sd->sink_rows);   /* (no region, no pointer arithmetic, when 0) */
    for (int h = 0; sink && h < c->p.n_head_kv; h++)
        put(w, sd->sink + (size_t)h * sd->sink_rows * sd->exact_row_bytes, (size_t)sink * sd->exact_row_bytes);
}

kvq_status kvq_cache_save(const kvq_cache *c, const char *path, const kvq_state_tag *tag, kvq_error *err) {
    if (!c || !path || !tag || (tag->n_tokens && !tag->tokens)) return kvq_fail(err, KVQ_ERR_ARG, "state save: NULL argument");
    const int n = stored_len(c);
    if (n < 0) return kvq_fail(err, KVQ_ERR_ARG, "state save: the layers hold different lengths (save between tokens)");
    if (tag->n_tokens != n)
        return kvq_fail(err, KVQ_ERR_ARG, "state save: %d tokens given for %d stored positions", tag->n_tokens, n);
    setting *st = kvq_malloc_n((size_t)settings_count(c->p.n_layer), sizeof *st);
    if (!st) return kvq_fail(err, KVQ_ERR_NOMEM, "state save: out of memory");
    const int n_set = cache_settings(c, st);
    writer w;
    memset(&w, 0, sizeof w);
    w.f = fopen(path, "wb");
    w.ok = true;
    if (!w.f) {
        free(st);
        return kvq_fail(err, KVQ_ERR_IO, "state save: cannot create '%s': %s", path, strerror(errno));
    }
    kvq_hash64_init(&w.h);
    uint8_t hdr[HEADER_BYTES];
    memcpy(hdr, MAGIC, 8);
    kvq_wr32(hdr + 8, STATE_VERSION);
    kvq_wr32(hdr + 12, (uint32_t)n_set);
    kvq_wr64(hdr + 16, tag->model_hash);
    kvq_wr32(hdr + 24, (uint32_t)n);
    kvq_wr32(hdr + 28, (uint32_t)c->p.n_layer);
    put(&w, hdr, sizeof hdr);
    for (int i = 0; i < n_set; i++) put32(&w, st[i].value);
    free(st);
    for (int i = 0; i < n; i++) put32(&w, (uint32_t)tag->tokens[i]);
    for (int l = 0; l < c->p.n_layer; l++) {
        put32(&w, (uint32_t)n);
        put_side(&w, c, l, &c->k[l], n);
        put_side(&w, c, l, &c->v[l], n);
    }
    uint8_t sum[8];
    kvq_wr64(sum, kvq_hash64_final(&w.h));
    if (w.ok) w.ok = fwrite(sum, 1, 8, w.f) == 8;
    if (fclose(w.f) != 0) w.ok = false;
    if (!w.ok) {
        remove(path);
        return kvq_fail(err, KVQ_ERR_IO, "state save: cannot write '%s'", path);
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------- reading */

typedef struct reader { const uint8_t *p; size_t left; } reader;

static bool take(reader *r, void *out, size_t n) {
    if (n > r->left) return false;
    if (out) memcpy(out, r->p, n);
    r->p += n;
    r->left -= n;
    return true;
}

static bool take32(reader *r, uint32_t *v) {
    uint8_t b[4];
    if (!take(r, b, 4)) return false;
    *v = kvq_rd32(b);
    return true;
}

static kvq_status refuse_setting(const setting *s, uint32_t file_value, kvq_error *err) {
    char where[48] = "";
    if (s->layer >= 0) snprintf(where, sizeof where, " of layer %d %c", s->layer, s->side ? 'V' : 'K');
    if (!strcmp(s->name, "type"))
        return kvq_fail(err, KVQ_ERR_ARG, "state load: the file's type%s is %s, this cache's %s", where,
                        kvq_type_name((kvq_type)file_value), kvq_type_name((kvq_type)s->value));
    return kvq_fail(err, KVQ_ERR_ARG, "state load: the file's %s%s is %u, this cache's %u (create the cache with the "
                    "settings it was saved with)", s->name, where, file_value, s->value);
}

/* One side's data into c (sizes were checked by the caller's length check
 * being exact: every take succeeds or the file is short). */
static bool load_side(reader *r, kvq_cache *c, kvq_cache_side *sd, int n, kvq_error *err, kvq_status *st) {
    uint32_t from;
    if (!take32(r, &from)) return false;
    if (from > (uint32_t)n || (sd->ring_rows && n - (int)from > sd->ring_rows) || (!sd->ring_rows && (int)from != n)) {
        *st = kvq_fail(err, KVQ_ERR_FORMAT, "state load: exact rows from %u of %d positions do not fit the ring", from, n);
        return false;
    }
    const size_t body = body_bytes(sd, n);
    for (int h = 0; body && h < c->p.n_head_kv; h++) {
        if (sd->tile_layout) {
            uint8_t rec[KVQ_TILES_RECORD_MAX];
            for (size_t at = 0; at < body; at += sd->record_bytes) {
                if (!take(r, rec, sd->record_bytes)) return false;
                kvq_tiles_record_in(sd, rec, sd->body + (size_t)h * sd->body_head_bytes + at);
            }
            continue;
        }
        if (!sd->lanes) {
            if (!take(r, sd->body + (size_t)h * sd->body_head_bytes, body)) return false;
            continue;
        }
        uint8_t row[KVQ_LANES_ROW_MAX];
        for (int pos = 0; pos < n; pos++) {
            if (!take(r, row, sd->row_bytes)) return false;
            kvq_cache_body_put(sd, h, pos, row);
        }
    }
    for (int h = 0; h < c->p.n_head_kv; h++)
        for (int pos = (int)from; pos < n; pos++)
            if (!take(r, sd->ring + ((size_t)h * sd->ring_rows + (size_t)(pos % sd->ring_rows)) * sd->exact_row_bytes,
                      sd->exact_row_bytes))
                return false;
    const int sink = KVQ_MIN(n, sd->sink_rows);
    for (int h = 0; sink && h < c->p.n_head_kv; h++)
        if (!take(r, sd->sink + (size_t)h * sd->sink_rows * sd->exact_row_bytes, (size_t)sink * sd->exact_row_bytes))
            return false;
    sd->ring_lo = (int)from;
    return true;
}

kvq_status kvq_cache_load_memory(kvq_cache *c, const uint8_t *data, size_t size, uint64_t model_hash,
                                 int32_t **tokens, int *n_tokens, kvq_error *err) {
    *tokens = NULL;
    *n_tokens = 0;
    if (size < HEADER_BYTES + 8 || memcmp(data, MAGIC, 8))
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: not a kvq state file (no KVQSTATE header)");
    const uint32_t version = kvq_rd32(data + 8);
    if (version != STATE_VERSION && version != 1)
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: version %u, this kvq reads versions 1 and %d", version,
                        STATE_VERSION);
    if (version == 1 && holds_trellis_codes(c))
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: a version 1 file's trellis codes (turbo*_tcq or calibrated "
                        "sides) were written against the codebook before its 2^-5 grid; re-create the file");
    if (kvq_hash64_of(data, size - 8) != kvq_rd64(data + size - 8))
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: checksum mismatch (the file is truncated or corrupted)");
    if (kvq_rd64(data + 16) != model_hash)
        return kvq_fail(err, KVQ_ERR_ARG, "state load: the state was saved with another model (hash %016llx, this "
                        "model %016llx)", (unsigned long long)kvq_rd64(data + 16), (unsigned long long)model_hash);
    const uint32_t n_set = kvq_rd32(data + 12), n = kvq_rd32(data + 24), n_layer = kvq_rd32(data + 28);
    if ((int)n_layer != c->p.n_layer)
        return kvq_fail(err, KVQ_ERR_ARG, "state load: the file has %u layers, this cache %d", n_layer, c->p.n_layer);
    if (n_set != (uint32_t)settings_count(c->p.n_layer) || n > (uint32_t)c->p.n_ctx)
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: %u settings / %u positions do not fit this cache", n_set, n);
    setting *mine = kvq_malloc_n((size_t)n_set, sizeof *mine);
    int32_t *toks = kvq_malloc_n((size_t)n + 1, sizeof *toks);
    kvq_status st = mine && toks ? KVQ_OK : kvq_fail(err, KVQ_ERR_NOMEM, "state load: out of memory");
    reader r = { data + HEADER_BYTES, size - 8 - HEADER_BYTES };
    if (st == KVQ_OK) cache_settings(c, mine);
    for (uint32_t i = 0; st == KVQ_OK && i < n_set; i++) {
        uint32_t v;
        if (!take32(&r, &v)) st = kvq_fail(err, KVQ_ERR_FORMAT, "state load: the file ends in its settings");
        else if (v != mine[i].value) st = refuse_setting(&mine[i], v, err);
    }
    free(mine);
    for (uint32_t i = 0; st == KVQ_OK && i < n; i++) {
        uint32_t v;
        if (!take32(&r, &v)) st = kvq_fail(err, KVQ_ERR_FORMAT, "state load: the file ends in its tokens");
        toks[i] = (int32_t)v;
    }
    if (st == KVQ_OK) {                        /* from here on the cache is overwritten */
        kvq_cache_clear(c);
        for (int l = 0; st == KVQ_OK && l < c->p.n_layer; l++) {
            uint32_t stored;
            bool ok = take32(&r, &stored) && stored == n && load_side(&r, c, &c->k[l], (int)n, err, &st) &&
                      st == KVQ_OK && load_side(&r, c, &c->v[l], (int)n, err, &st);
            if (st == KVQ_OK && !ok) st = kvq_fail(err, KVQ_ERR_FORMAT, "state load: layer %d's data is short", l);
            c->n_stored[l] = (int)n;
        }
        if (st == KVQ_OK && r.left) st = kvq_fail(err, KVQ_ERR_FORMAT, "state load: %zu bytes after the data", r.left);
        if (st != KVQ_OK) kvq_cache_clear(c);  /* never half a state */
    }
    if (st != KVQ_OK) { free(toks); return st; }
    *tokens = toks;
    *n_tokens = (int)n;
    return KVQ_OK;
}

kvq_status kvq_cache_load(kvq_cache *c, const char *path, uint64_t model_hash, int32_t **tokens, int *n_tokens,
                          kvq_error *err) {
    if (!c || !path || !tokens || !n_tokens) return kvq_fail(err, KVQ_ERR_ARG, "state load: NULL argument");
    *tokens = NULL;
    *n_tokens = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "state load: cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return kvq_fail(err, KVQ_ERR_IO, "state load: '%s' is not a regular file", path);
    }
    /* No state of this cache is larger than its allocation plus headers. */
    const size_t cap = c->bytes.allocated + (size_t)c->p.n_ctx * 4 + (size_t)MAX_SETTINGS * 4 + (size_t)c->p.n_layer * 64 + 64;
    if ((uint64_t)sb.st_size > cap) {
        fclose(f);
        return kvq_fail(err, KVQ_ERR_FORMAT, "state load: '%s' (%lld bytes) is larger than any state of this cache",
                        path, (long long)sb.st_size);
    }
    const size_t size = (size_t)sb.st_size;
    uint8_t *data = kvq_malloc(size ? size : 1);
    const bool read = data && fread(data, 1, size, f) == size;
    fclose(f);
    kvq_status st = read ? kvq_cache_load_memory(c, data, size, model_hash, tokens, n_tokens, err)
                         : kvq_fail(err, data ? KVQ_ERR_IO : KVQ_ERR_NOMEM, "state load: cannot read '%s'", path);
    free(data);
    return st;
}
