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
    else { cli_error(cmd, "%s: '%s' is not one of auto, on, off", flag, s); return false; }
    return true;
}

static bool parse_count(const char *cmd, const char *flag, const char *s, int *out) {
    long v;
    if (!cli_parse_long(s, 0, MAX_EXACT_TOKENS, &v)) {
        cli_error(cmd, "%s: '%s' is not a token count in 0..%d", flag, s, MAX_EXACT_TOKENS);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool is(const char *a, const char *x, const char *y) { return !strcmp(a, x) || (y && !strcmp(a, y)); }

int cache_flags_parse(const char *cmd, cache_flags *cf, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    kvq_cache_params *p = &cf->params;
    static const char *const with_value[] = { "-ctk", "--cache-type-k", "-ctv", "--cache-type-v",
        "--kv-tail-tokens", "--kv-tail-type", "--kv-sink-tokens", "--attn-rot", "--attn-rot-k", "--attn-rot-v" };
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
    if (!strcmp(a, "--attn-rot-random")) { p->rot_random_signs = true; return 1; }
    if (!known) return 0;
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v) return -1;
    bool ok = true;
    if (is(a, "-ctk", "--cache-type-k")) ok = cli_parse_type(cmd, v, true, &p->type_k);
    else if (is(a, "-ctv", "--cache-type-v")) ok = cli_parse_type(cmd, v, true, &p->type_v);
    else if (is(a, "--kv-tail-tokens", NULL)) {
        cf->tail_auto = !strcmp(v, "auto");
        if (!cf->tail_auto) ok = parse_count(cmd, a, v, &p->tail_tokens);
    } else if (is(a, "--kv-tail-type", NULL)) {
        ok = cli_parse_type(cmd, v, true, &p->tail_type);
        if (ok && p->tail_type != KVQ_TYPE_F32 && p->tail_type != KVQ_TYPE_F16 && p->tail_type != KVQ_TYPE_BF16) {
            cli_error(cmd, "--kv-tail-type: '%s' is not an exact type (f32, f16, bf16)", v);
            ok = false;
        }
    } else if (is(a, "--kv-sink-tokens", NULL)) ok = parse_count(cmd, a, v, &p->sink_tokens);
    else if (is(a, "--attn-rot", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode);
    else if (is(a, "--attn-rot-k", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode_k);
    else if (is(a, "--attn-rot-v", NULL)) ok = parse_rot_mode(cmd, a, v, &p->rot.mode_v);
    return ok ? 1 : -1;
}

void cache_flags_resolve(cache_flags *cf, int n_ctx) {
    cf->params.n_ctx = n_ctx;
    if (cf->tail_auto) cf->params.tail_tokens = (n_ctx < AUTO_TAIL_TOKENS ? n_ctx : AUTO_TAIL_TOKENS);
}

void cache_flags_usage(FILE *f) {
    fprintf(f,
        "cache options:\n"
        "  -ctk, --cache-type-k TYPE   K cache type (default f16)\n"
        "  -ctv, --cache-type-v TYPE   V cache type (default f16)\n"
        "  --kv-tail-tokens N|auto     recent positions read from an exact copy (auto = 1024)\n"
        "  --kv-tail-type T            f32, f16 or bf16 for the tail and sink copies\n"
        "  --kv-sink-tokens S          first positions read from an exact copy\n"
        "  --attn-rot auto|on|off      Hadamard rotation of Q/K and V (both sides)\n"
        "  --attn-rot-k MODE, --attn-rot-v MODE   one side only\n"
        "  --attn-rot-random           random +-1 signs before the Hadamard transform\n");
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

void cache_flags_log(const char *cmd, const kvq_cache *c) {
    kvq_cache_bytes b;
    kvq_cache_memory(c, &b);
    fprintf(stderr, "kvq %s: KV cache %.2f MiB (K %.2f, V %.2f, tail %.2f, sink %.2f)\n", cmd, mib(b.total),
            mib(b.k), mib(b.v), mib(b.tail), mib(b.sink));
    const kvq_rot_plan *r = kvq_cache_rotation(c);
    if (r) fprintf(stderr, "kvq %s: rotation: %s\n", cmd, r->reason);
}

void cache_flags_name(const cache_flags *cf, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", kvq_type_name(cf->params.type_k), kvq_type_name(cf->params.type_v));
}
