/* calib_file.c - the calibration file (docs/calibration.md, "File
 * format") and the in-memory calibration it holds.
 *
 *   offset size
 *    0  8  magic "KVQCALIB"
 *    8  4  u32 version (1)
 *   12  4  u32 n_layer        16  4  u32 n_head_kv
 *   20  4  u32 head_dim_k     24  4  u32 head_dim_v
 *   28  4  u32 n_rates        32  4  u32 method K     36  4  u32 method V
 *   40  4  u32 calibration positions per layer
 *   44  4  f32 query mix of K's metric (informative)
 *   48  8  u64 model hash (kvq_model_hash: of the GGUF file)
 *   56  8  u64 checksum: hash64 of bytes 0..55 followed by the payload
 *   64     payload: n_rates u32 rates (hundredths of a bit per value), then
 *          per layer, KV head, side (K, then V), d = that side's head dim:
 *            mean[d], T[d*d], T^-1[d*d], importance[d]  (f32)
 *            bits[n_rates][d]                            (u8)
 * Little-endian throughout; the size is exactly what the header implies. */
#include "calib.h"
#include "base_kvq.h"
#include "file_read.h"
#include "hash64.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

static const char MAGIC[8] = { 'K', 'V', 'Q', 'C', 'A', 'L', 'I', 'B' };
enum { VERSION = 1, HEADER_BYTES = 64, CHECKSUM_AT = 56 };
#define FILE_CAP ((size_t)1 << 34)

/* --------------------------------------------------------- byte layout */

static void wr32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void wr64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static size_t side_bytes(int d, int n_rates) {
    return 4 * (2 * (size_t)d + 2 * (size_t)d * (size_t)d) + (size_t)n_rates * (size_t)d;
}

static size_t file_bytes(int n_layer, int n_head_kv, int dk, int dv, int n_rates) {
    return HEADER_BYTES + 4 * (size_t)n_rates +
           (size_t)n_layer * (size_t)n_head_kv * (side_bytes(dk, n_rates) + side_bytes(dv, n_rates));
}

/* Walk every side's arrays in file order: write (to != NULL) or read. */
static uint8_t *floats_io(float *x, size_t n, uint8_t *p, bool write) {
    for (size_t i = 0; i < n; i++, p += 4) {
        if (write) wr32(p, kvq_f32_bits(x[i]));
        else x[i] = kvq_bits_f32(rd32(p));
    }
    return p;
}

static uint8_t *side_io(kvq_calib_side *s, int n_rates, uint8_t *p, bool write) {
    const size_t d = (size_t)s->d;
    p = floats_io(s->mean, d, p, write);
    p = floats_io(s->fwd, d * d, p, write);
    p = floats_io(s->inv, d * d, p, write);
    p = floats_io(s->weight, d, p, write);
    if (write) memcpy(p, s->bits, (size_t)n_rates * d);
    else memcpy(s->bits, p, (size_t)n_rates * d);
    return p + (size_t)n_rates * d;
}

static uint64_t checksum(const uint8_t *buf, size_t size) {
    kvq_hash64 h;
    kvq_hash64_init(&h);
    kvq_hash64_update(&h, buf, CHECKSUM_AT);
    kvq_hash64_update(&h, buf + HEADER_BYTES, size - HEADER_BYTES);
    return kvq_hash64_final(&h);
}

kvq_status kvq_calib_write(const kvq_calib *c, const char *path, kvq_error *err) {
    const size_t size = file_bytes(c->n_layer, c->n_head_kv, c->head_dim_k, c->head_dim_v, c->n_rates);
    uint8_t *buf = kvq_calloc(1, size);
    if (!buf) return kvq_fail(err, KVQ_ERR_NOMEM, "calibration: out of memory for %zu bytes", size);
    memcpy(buf, MAGIC, 8);
    const uint32_t fields[10] = { VERSION, (uint32_t)c->n_layer, (uint32_t)c->n_head_kv, (uint32_t)c->head_dim_k,
                                  (uint32_t)c->head_dim_v, (uint32_t)c->n_rates, (uint32_t)c->method_k,
                                  (uint32_t)c->method_v, c->n_tokens, kvq_f32_bits((float)c->query_mix) };
    for (int i = 0; i < 10; i++) wr32(buf + 8 + 4 * i, fields[i]);
    wr64(buf + 48, c->model_hash);
    uint8_t *p = buf + HEADER_BYTES;
    for (int i = 0; i < c->n_rates; i++, p += 4) wr32(p, (uint32_t)c->rates[i]);
    const size_t n = (size_t)c->n_layer * (size_t)c->n_head_kv;
    for (size_t i = 0; i < n; i++) {
        p = side_io(&c->k[i], c->n_rates, p, true);
        p = side_io(&c->v[i], c->n_rates, p, true);
    }
    wr64(buf + CHECKSUM_AT, checksum(buf, size));
    FILE *f = fopen(path, "wb");
    kvq_status st = KVQ_OK;
    if (!f) st = kvq_fail(err, KVQ_ERR_IO, "cannot create calibration file '%s': %s", path, strerror(errno));
    else if (fwrite(buf, 1, size, f) != size || fclose(f) != 0)
        st = kvq_fail(err, KVQ_ERR_IO, "cannot write calibration file '%s'", path);
    free(buf);
    return st;
}

/* --------------------------------------------------------------- read */

/* Every value finite, every allocation a valid descending code that fits
 * its row at its rate. */
static kvq_status check_side(const kvq_calib *c, const kvq_calib_side *s, int layer, int head, bool is_v,
                             const char *path, kvq_error *err) {
    const size_t d = (size_t)s->d;
    const float *arrays[4] = { s->mean, s->fwd, s->inv, s->weight };
    const size_t lens[4] = { d, d * d, d * d, d };
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < lens[a]; i++)
            if (!isfinite(arrays[a][i]))
                return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s': non-finite value in layer %d head %d %c",
                                path, layer, head, is_v ? 'V' : 'K');
    for (int r = 0; r < c->n_rates; r++) {
        kvq_calib_profile prof;
        kvq_error e2;
        if (kvq_calib_profile_make(s->bits + (size_t)r * d, s->weight, (int)d, kvq_calib_row_bytes(c->rates[r], (int)d),
                                   !is_v, &prof, &e2))
            return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s': layer %d head %d %c at %d.%02d bpv: %s", path,
                            layer, head, is_v ? 'V' : 'K', c->rates[r] / 100, c->rates[r] % 100, e2.msg);
    }
    return KVQ_OK;
}

static kvq_status parse(const uint8_t *buf, size_t size, const char *path, uint64_t model_hash, kvq_calib **out,
                        kvq_error *err) {
    if (size < HEADER_BYTES || memcmp(buf, MAGIC, 8))
        return kvq_fail(err, KVQ_ERR_FORMAT, "'%s' is not a kvq calibration file (no KVQCALIB header)", path);
    if (rd32(buf + 8) != VERSION)
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s' has version %u; this kvq reads version %d", path,
                        rd32(buf + 8), VERSION);
    uint32_t f[8];
    for (int i = 0; i < 8; i++) f[i] = rd32(buf + 12 + 4 * i);
    if (f[0] < 1 || f[0] > KVQ_CALIB_MAX_LAYERS || f[1] < 1 || f[1] > KVQ_CALIB_MAX_HEADS || f[2] < 1 || f[2] > KVQ_MAX_HEAD_DIM ||
        f[3] < 1 || f[3] > KVQ_MAX_HEAD_DIM || f[4] < 1 || f[4] > KVQ_CALIB_N_RATES)
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s' is corrupt: impossible shape in its header", path);
    const size_t want = file_bytes((int)f[0], (int)f[1], (int)f[2], (int)f[3], (int)f[4]);
    if (size != want)
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s' is %s: %zu bytes, its header needs %zu", path,
                        size < want ? "truncated" : "too long", size, want);
    if (rd64(buf + CHECKSUM_AT) != checksum(buf, size))
        return kvq_fail(err, KVQ_ERR_FORMAT, "calibration file '%s' is corrupt: checksum mismatch", path);
    if (rd64(buf + 48) != model_hash)
        return kvq_fail(err, KVQ_ERR_ARG, "calibration file '%s' was made for another model (model hash %016llx, "
                        "this model's is %016llx): run kvq calibrate on this model", path,
                        (unsigned long long)rd64(buf + 48), (unsigned long long)model_hash);
    int rates[KVQ_CALIB_N_RATES];
    const uint8_t *p = buf + HEADER_BYTES;
    for (uint32_t i = 0; i < f[4]; i++, p += 4) rates[i] = (int)rd32(p);
    kvq_calib *c;
    kvq_status st = kvq_calib_alloc(&c, (int)f[0], (int)f[1], (int)f[2], (int)f[3], (int)f[4], rates, err);
    if (st) return st;
    c->model_hash = model_hash;
    c->checksum = rd64(buf + CHECKSUM_AT);
    c->method_k = (kvq_calib_method)f[5];
    c->method_v = (kvq_calib_method)f[6];
    c->n_tokens = f[7];
    c->query_mix = kvq_bits_f32(rd32(buf + 44));
    for (int l = 0; st == KVQ_OK && l < c->n_layer; l++)
        for (int h = 0; st == KVQ_OK && h < c->n_head_kv; h++)
            for (int s = 0; st == KVQ_OK && s < 2; s++) {
                kvq_calib_side *sd = kvq_calib_side_at(c, l, h, s == 1);
                p = side_io(sd, c->n_rates, (uint8_t *)p, false);
                st = check_side(c, sd, l, h, s == 1, path, err);
                kvq_calib_side_finish(sd, s == 1);
            }
    if (st) { kvq_calib_free(c); return st; }
    *out = c;
    return KVQ_OK;
}

kvq_status kvq_calib_load_for(const char *path, uint64_t model_hash, kvq_calib **out, kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "calibration: NULL output");
    *out = NULL;
    if (!path) return kvq_fail(err, KVQ_ERR_ARG, "calibration: NULL path");
    char *buf;
    size_t size;
    kvq_status st = kvq_read_file(path, "calibration file", FILE_CAP, &buf, &size, err);
    if (st) return st;
    st = parse((const uint8_t *)buf, size, path, model_hash, out, err);
    free(buf);
    return st;
}

kvq_status kvq_calib_load_memory(const void *data, size_t size, const char *name, uint64_t model_hash, kvq_calib **out,
                                 kvq_error *err) {
    if (!out) return kvq_fail(err, KVQ_ERR_ARG, "calibration: NULL output");
    *out = NULL;
    if (!data && size) return kvq_fail(err, KVQ_ERR_ARG, "calibration: NULL buffer");
    return parse(size ? data : (const void *)"", size, name ? name : "(memory)", model_hash, out, err);
}

void kvq_calib_reseal(void *data, size_t size) {
    if (size >= HEADER_BYTES) wr64((uint8_t *)data + CHECKSUM_AT, checksum(data, size));
}

kvq_status kvq_calib_load(const char *path, const kvq_model *m, kvq_calib **out, kvq_error *err) {
    if (out) *out = NULL;
    if (!m) return kvq_fail(err, KVQ_ERR_ARG, "calibration: NULL model");
    return kvq_calib_load_for(path, kvq_model_hash(m), out, err);
}
