/* cache_flags.c - parse the cache flags once for every command. */
#include "cache_flags.h"
#include "cli.h"

#include <string.h>

enum { AUTO_TAIL_TOKENS = 1024, MAX_EXACT_TOKENS = 1 << 24 };

void cache_flags_init(cache_flags *cf) {
    memset(cf, 0, sizeof *cf);
    kvq_cache_params_default(&cf->params);
}

static bool parse_rot_mode(const char *cmd, const char *flag, const char *s, kvq_rot_mode *out) {
    if (!strcmp(s, "auto")) *out = KVQ_ROT_AUTO;
    else if (!strcmp(s, "on")) *out = KVQ_ROT_ON;
    else if (!strcmp(s, "off")) *out = KVQ_ROT_OFF;
    else { cli_error(cmd, "%s: '%s' is not one of auto, on, off (see kvq %s --help)", flag, s, cmd); return false; }
    return true;
}

static bool parse_count(const char *cmd, const char *flag, const char *s, int *out) {
    long v;
    if (!cli_parse_long(s, 0, MAX_EXACT_TOKENS, &v)) {
        cli_error(cmd, "%s: '%s' is not a token count in 0..%d (see kvq %s --help)", flag, s, MAX_EXACT_TOKENS, cmd);
        return false;
    }
    *out = (int)v;
    return true;
}

/* ------------------------------------------------- per-layer overrides */

static void cache_type_list(char *buf, size_t cap) {
    buf[0] = 0;
    for (int k = 0; k < KVQ_TYPE_COUNT; k++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)k);
        if (!tr || !tr->is_cache_type) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", tr->name);
    }
}

/* kvq_layer_spec_parse, with the known cache types listed after an
 * unknown one. */
bool layer_spec_parse(const char *spec, layer_spec *out, char *msg, size_t cap) {
    kvq_error err = { 0 };
    const kvq_status st = kvq_layer_spec_parse(spec, out, &err);
    if (st == KVQ_OK) return true;
    if (st == KVQ_ERR_UNSUPPORTED) {
        char known[512];
        cache_type_list(known, sizeof known);
        snprintf(msg, cap, "%s (known: %s)", err.msg, known);
    } else {
        snprintf(msg, cap, "%s", err.msg);
    }
    return false;
}

static const char *const LAYER_FLAG[2] = { "--cache-type-k-layers", "--cache-type-v-layers" };

bool cache_flags_apply_layers(const char *cmd, cache_flags *cf, int n_layer) {
    kvq_cache_params *p = &cf->params;
    const kvq_type global[2] = { p->type_k, p->type_v };
    const kvq_type **dst[2] = { &p->layer_type_k, &p->layer_type_v };
    for (int side = 0; side < 2; side++) {
        const layer_spec *ls = &cf->layers[side];
        *dst[side] = NULL;
        if (!ls->n) continue;
        if (n_layer < 1 || n_layer > CACHE_FLAGS_MAX_LAYERS) {
            cli_error(cmd, "%s: the model has %d layers; per-layer types support 1..%d", LAYER_FLAG[side], n_layer,
                      CACHE_FLAGS_MAX_LAYERS);
            return false;
        }
        kvq_type *types = cf->layer_types[side];
        for (int l = 0; l < n_layer; l++) types[l] = global[side];
        kvq_error err = { 0 };
        if (kvq_layer_spec_apply(ls, n_layer, types, &err) != KVQ_OK) {
            cli_error(cmd, "%s: %s", LAYER_FLAG[side], err.msg);
            return false;
        }
        *dst[side] = types;
    }
    return true;
}

static int parse_layer_flag(const char *cmd, cache_flags *cf, int side, const char *v) {
    char msg[768];
    if (layer_spec_parse(v, &cf->layers[side], msg, sizeof msg)) return 1;
    cli_error(cmd, "%s: %s", LAYER_FLAG[side], msg);
    return -1;
}

/* ------------------------------------------------------------- parser */

static bool is(const char *a, const char *x, const char *y) { return !strcmp(a, x) || (y && !strcmp(a, y)); }

int cache_flags_parse(const char *cmd, cache_flags *cf, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    kvq_cache_params *p = &cf->params;
    static const char *const with_value[] = { "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
        "--kv-tail-tokens", "--kv-tail-type", "--kv-sink-tokens", "--attn-rot", "--attn-rot-k", "--attn-rot-v",
        "--cache-type-k-layers", "--cache-type-v-layers", "--kvarn-iters", "--kvarn-sink-tile", "--kv-rollback-tokens",
        "--calib" };
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
    if (!strcmp(a, "--attn-rot-random")) { p->rot_random_signs = true; return 1; }
    if (!known) return 0;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return -1;
    bool ok = true;
    if (is(a, "-ctk", "--cache-type-k")) ok = cli_parse_type(cmd, v, true, &p->type_k);
    else if (is(a, "-ctv", "--cache-type-v")) ok = cli_parse_type(cmd, v, true, &p->type_v);
    else if (is(a, "--calib", NULL)) cf->calib_path = v;
    else if (is(a, LAYER_FLAG[0], NULL)) return parse_layer_flag(cmd, cf, 0, v);
    else if (is(a, LAYER_FLAG[1], NULL)) return parse_layer_flag(cmd, cf, 1, v);
    else if (is(a, "--kv-tail-tokens", NULL)) {
        cf->tail_auto = !strcmp(v, "auto");
        if (!cf->tail_auto) ok = parse_count(cmd, a, v, &p->tail_tokens);
    } else if (is(a, "--kv-tail-type", NULL)) {
        ok = cli_parse_type(cmd, v, true, &p->tail_type);
        cf->tail_type_given = true;
        if (ok && p->tail_type != KVQ_TYPE_F32 && p->tail_type != KVQ_TYPE_F16 && p->tail_type != KVQ_TYPE_BF16) {
            cli_error(cmd, "--kv-tail-type: '%s' is not an exact type (f32, f16, bf16)", v);
            ok = false;
        }
    } else if (is(a, "--kv-sink-tokens", NULL)) ok = parse_count(cmd, a, v, &p->sink_tokens);
    else if (is(a, "--kv-rollback-tokens", NULL)) ok = parse_count(cmd, a, v, &p->rollback_tokens);
    else if (is(a, "--kvarn-iters", NULL)) {
        long iters;
        ok = cli_flag_long(cmd, a, v, 1, KVQ_KVARN_MAX_ITERS, &iters);
        if (ok) p->kvarn_iters = (int)iters;
    } else if (is(a, "--kvarn-sink-tile", NULL)) {
        ok = !strcmp(v, "on") || !strcmp(v, "off");
        if (ok) p->kvarn_quantize_first_tile = !strcmp(v, "off");
        else cli_error(cmd, "--kvarn-sink-tile: '%s' is not on or off", v);
    } else if (is(a, "--attn-rot", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode);
    else if (is(a, "--attn-rot-k", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode_k);
    else if (is(a, "--attn-rot-v", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode_v);
    return ok ? 1 : -1;
}

static bool is_tiles(kvq_type t) { return kvq_type_get(t)->layout == KVQ_LAYOUT_TILES; }

/* Does -ctk, -ctv or a per-layer override name a KVarN type? */
static bool uses_tiles(const cache_flags *cf) {
    bool tiles = is_tiles(cf->params.type_k) || is_tiles(cf->params.type_v);
    for (int side = 0; side < 2; side++)
        for (int e = 0; e < cf->layers[side].n; e++) tiles |= is_tiles(cf->layers[side].r[e].type);
    return tiles;
}

bool cache_flags_resolve(const char *cmd, cache_flags *cf, int n_ctx) {
    kvq_cache_params *p = &cf->params;
    p->n_ctx = n_ctx;
    if (cf->tail_auto) p->tail_tokens = (n_ctx < AUTO_TAIL_TOKENS ? n_ctx : AUTO_TAIL_TOKENS);
    if (uses_tiles(cf) && !cf->tail_type_given) p->tail_type = KVQ_TYPE_F16;
    return cache_flags_fit(cmd, cf, n_ctx);
}

bool cache_flags_fit(const char *cmd, const cache_flags *cf, int n_ctx) {
    const kvq_cache_params *p = &cf->params;
    /* Exact rows beyond the context would be a silent clamp: say so. */
    if (!cf->tail_auto && p->tail_tokens > n_ctx) {
        cli_error(cmd, "--kv-tail-tokens %d is longer than the context (%d positions): use at most %d, or raise -c",
                  p->tail_tokens, n_ctx, n_ctx);
        return false;
    }
    if (p->rollback_tokens > n_ctx) {
        cli_error(cmd, "--kv-rollback-tokens %d is longer than the context (%d positions)", p->rollback_tokens, n_ctx);
        return false;
    }
    if (p->sink_tokens > n_ctx) {
        cli_error(cmd, "--kv-sink-tokens %d is longer than the context (%d positions): use at most %d, or raise -c",
                  p->sink_tokens, n_ctx, n_ctx);
        return false;
    }
    return true;
}

void cache_flags_usage(FILE *f) {
    fprintf(f,
        "cache options:\n"
        "  -ctk, --cache-type-k TYPE   K cache type (default f16)\n"
        "  -ctv, --cache-type-v TYPE   V cache type (default f16)\n"
        "  --cache-type-k-layers SPEC  per-layer K types, e.g. 0-3:q8_0,4-27:q4_0 (ranges\n"
        "                              inclusive, later entries win, others keep -ctk)\n"
        "  --cache-type-v-layers SPEC  the same for V (others keep -ctv)\n"
        "  --kv-tail-tokens N|auto     recent positions read from an exact copy (auto = 1024;\n"
        "                              KVarN: whole 128-token tiles, rounded up)\n"
        "  --kv-tail-type T            f32, f16 or bf16 for the tail and sink copies\n"
        "                              (default bf16; f16 when a side is KVarN)\n"
        "  --kv-sink-tokens S          first positions read from an exact copy\n"
        "  --kvarn-sink-tile on|off    KVarN: keep the first 128-token tile exact (default on)\n"
        "  --kv-rollback-tokens R      exact rows kept beyond the tail so that up to R positions\n"
        "                              can be taken back exactly (prompt cache reuse; default 0)\n"
        "  --attn-rot auto|on|off      Hadamard rotation of Q/K and V (both sides)\n"
        "  --attn-rot-k MODE, --attn-rot-v MODE   one side only\n"
        "  --attn-rot-random           random +-1 signs before the Hadamard transform\n"
        "  --kvarn-iters T             KVarN normalisation iterations (default 16)\n"
        "  --calib FILE                the model's calibration (kvq calibrate), for the\n"
        "                              calibrated types cal225 ... cal425\n");
}

/* One line listing every layer's type, only when some layer differs. */
static void log_layer_types(const char *cmd, const char *side, kvq_type global, const kvq_type *types, int n_layer) {
    bool mixed = false;
    for (int l = 0; types && l < n_layer; l++) mixed |= types[l] != global;
    if (!mixed) return;
    fprintf(stderr, "kvq %s: %s types by layer:", cmd, side);
    for (int l = 0; l < n_layer; l++) fprintf(stderr, " %s", kvq_type_name(types[l]));
    fputc('\n', stderr);
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void cache_flags_log(const char *cmd, const kvq_cache *c) {
    const kvq_cache_params *p = kvq_cache_get_params(c);
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    fprintf(stderr, "kvq %s: KV cache %.3f MiB at %d positions (K %.3f, V %.3f, exact tail %.3f, sink %.3f); "
            "working memory %.3f MiB\n", cmd, mib(b.total), p->n_ctx, mib(b.k), mib(b.v), mib(b.tail), mib(b.sink),
            mib(b.work));
    const kvq_rot_plan *r = kvq_cache_rotation(c);
    if (r) fprintf(stderr, "kvq %s: rotation: %s\n", cmd, r->reason);
    log_layer_types(cmd, "K", p->type_k, p->layer_type_k, p->n_layer);
    log_layer_types(cmd, "V", p->type_v, p->layer_type_v, p->n_layer);
}

void cache_flags_name(const cache_flags *cf, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s%s", kvq_type_name(cf->params.type_k), kvq_type_name(cf->params.type_v),
             cf->layers[0].n || cf->layers[1].n ? "+layers" : "");
}
