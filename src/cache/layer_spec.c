/* layer_spec.c - per-layer cache types from text (kvq.h, "per-layer
 * types"): "0-3:q8_0,4-27:q4_0", the syntax of kvq's
 * --cache-type-k-layers / --cache-type-v-layers. */
#include "kvq_internal.h"

enum { MAX_LAYER_NUMBER = 1000000 };   /* syntax bound; n_layer is checked by kvq_layer_spec_apply */

/* A layer number: decimal digits only, no sign, no spaces. */
static bool parse_layer_number(const char *s, size_t len, int *out) {
    if (len == 0 || len > 7) return false;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > MAX_LAYER_NUMBER) return false;
    *out = (int)v;
    return true;
}

/* "N" or "N-M" with N <= M. */
static bool parse_layer_range(const char *s, size_t len, kvq_layer_range *r) {
    const char *dash = memchr(s, '-', len);
    if (!dash) {
        if (!parse_layer_number(s, len, &r->first)) return false;
        r->last = r->first;
        return true;
    }
    const size_t left = (size_t)(dash - s);
    return parse_layer_number(s, left, &r->first) && parse_layer_number(dash + 1, len - left - 1, &r->last) &&
           r->first <= r->last;
}

/* One "RANGE:TYPE" entry of len bytes. */
static kvq_status parse_layer_entry(const char *s, size_t len, kvq_layer_range *r, kvq_error *err) {
    const char *colon = memchr(s, ':', len);
    if (len == 0) return kvq_fail(err, KVQ_ERR_ARG, "empty entry (entries are RANGE:TYPE separated by single commas)");
    if (!colon) return kvq_fail(err, KVQ_ERR_ARG, "'%.*s' is not RANGE:TYPE (e.g. 0-3:q8_0)", (int)len, s);
    const size_t range_len = (size_t)(colon - s), type_len = len - range_len - 1;
    if (!parse_layer_range(s, range_len, r))
        return kvq_fail(err, KVQ_ERR_ARG, "bad layer range '%.*s' in '%.*s' (want N or N-M with N <= M)",
                        (int)range_len, s, (int)len, s);
    char name[32];
    r->type = KVQ_TYPE_COUNT;
    if (type_len < sizeof name) {
        memcpy(name, colon + 1, type_len);
        name[type_len] = 0;
        r->type = kvq_type_from_name(name);
    }
    if (r->type == KVQ_TYPE_COUNT || !kvq_type_get(r->type)->is_cache_type)
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "unknown cache type '%.*s' in '%.*s'", (int)type_len, colon + 1,
                        (int)len, s);
    return KVQ_OK;
}

kvq_status kvq_layer_spec_parse(const char *spec, kvq_layer_spec *out, kvq_error *err) {
    out->n = 0;
    if (!spec || !*spec) return kvq_fail(err, KVQ_ERR_ARG, "empty layer list (want e.g. 0-3:q8_0,4-27:q4_0)");
    for (const char *s = spec;;) {
        const char *comma = strchr(s, ',');
        const size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (out->n == KVQ_LAYER_SPEC_MAX)
            return kvq_fail(err, KVQ_ERR_ARG, "more than %d entries", KVQ_LAYER_SPEC_MAX);
        const kvq_status st = parse_layer_entry(s, len, &out->r[out->n], err);
        if (st) return st;
        out->n++;
        if (!comma) return KVQ_OK;
        s = comma + 1;
    }
}

kvq_status kvq_layer_spec_apply(const kvq_layer_spec *s, int n_layer, kvq_type *types, kvq_error *err) {
    for (int e = 0; e < s->n; e++) {   /* checked first: types is left as it was on error */
        const kvq_layer_range *r = &s->r[e];
        if (r->last >= n_layer) {
            char range[32] = "";
            if (r->first != r->last) snprintf(range, sizeof range, " (in range %d-%d)", r->first, r->last);
            return kvq_fail(err, KVQ_ERR_ARG, "layer %d%s does not exist: the model has %d layers (0-%d)", r->last,
                            range, n_layer, n_layer - 1);
        }
    }
    for (int e = 0; e < s->n; e++)     /* in order: later entries win */
        for (int l = s->r[e].first; l <= s->r[e].last; l++) types[l] = s->r[e].type;
    return KVQ_OK;
}
