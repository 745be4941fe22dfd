/* sweep_grid.c - the sweep's list of configurations and its list parsers
 * (rules in sweep_grid.h). */
#include "sweep_grid.h"

#include <errno.h>
#include <stdlib.h>

static bool is_block(kvq_type t) { return kvq_type_get(t)->is_block_quant; }

/* f32, f16, bf16: stored as given, nothing to rotate or to keep exact. */
static bool is_exact(kvq_type t) { return t == KVQ_TYPE_F32 || t == KVQ_TYPE_F16 || t == KVQ_TYPE_BF16; }

/* Add one line to the caller's notes (if any), once. */
static void note(const kvq_sweep_spec *s, const char *fmt, const char *a, const char *b) {
    if (!s->notes || !s->notes_cap) return;
    char line[160];
    snprintf(line, sizeof line, fmt, a, b);
    if (strstr(s->notes, line)) return;
    const size_t len = strlen(s->notes);
    snprintf(s->notes + len, s->notes_cap - len, "%s\n", line);
}

static void name_config(kvq_sweep_config *c) {
    char tail[24] = "", tail_slug[24] = "";
    if (c->tail_tokens) {
        snprintf(tail, sizeof tail, " tail%d", c->tail_tokens);
        snprintf(tail_slug, sizeof tail_slug, "_tail%d", c->tail_tokens);
    }
    const bool off = c->rot == KVQ_ROT_OFF;
    snprintf(c->label, sizeof c->label, "%s/%s%s%s", kvq_type_name(c->type_k), kvq_type_name(c->type_v), tail,
             off ? " rot-off" : "");
    snprintf(c->slug, sizeof c->slug, "%s-%s%s%s", kvq_type_name(c->type_k), kvq_type_name(c->type_v), tail_slug,
             off ? "_rotoff" : "");
}

static bool same_config(const kvq_sweep_config *a, const kvq_sweep_config *b) {
    return a->type_k == b->type_k && a->type_v == b->type_v && a->tail_tokens == b->tail_tokens && a->rot == b->rot;
}

/* Appends c unless an equal configuration is listed already. */
static void add_unique(kvq_sweep_config *list, size_t *n, const kvq_sweep_config *c) {
    for (size_t i = 0; i < *n; i++)
        if (same_config(&list[i], c)) return;
    list[(*n)++] = *c;
    name_config(&list[*n - 1]);
}

/* Every tail x rotation of one pair.  Rotation modes apply to a pair with a
 * block-quantised side; KVarN and TurboQuant rotate inside their format
 * and plain types have nothing to rotate, so such pairs run once per tail
 * (AUTO).  Tails apply to every pair with a quantised side; an exact pair
 * runs once.  What does not apply is said in the notes. */
static void add_pair(kvq_sweep_config *list, size_t *n, const kvq_sweep_spec *s, kvq_type k, kvq_type v) {
    const bool exact_pair = is_exact(k) && is_exact(v), rotatable = is_block(k) || is_block(v);
    const char *nk = kvq_type_name(k), *nv = kvq_type_name(v);
    kvq_rot_mode modes[2];
    int n_modes = 0;
    if (!rotatable) {
        modes[n_modes++] = KVQ_ROT_AUTO;
        if (!exact_pair && s->rot != KVQ_SWEEP_ROT_ON)
            note(s, "%s/%s: rotation is part of the format (--rot does not apply): one row per tail", nk, nv);
    } else {
        if (s->rot != KVQ_SWEEP_ROT_OFF) modes[n_modes++] = KVQ_ROT_ON;
        if (s->rot != KVQ_SWEEP_ROT_ON) modes[n_modes++] = KVQ_ROT_OFF;
    }
    bool tail_asked = false;
    for (size_t t = 0; t < s->n_tails; t++) tail_asked |= s->tails[t] != 0;
    if (exact_pair && tail_asked)
        note(s, "%s/%s: exact on both sides (a tail copies exact rows): one row, tail 0", nk, nv);
    for (size_t t = 0; t < s->n_tails; t++) {
        if (s->tails[t] != 0 && exact_pair) continue;
        for (int m = 0; m < n_modes; m++) {
            kvq_sweep_config c = { .type_k = k, .type_v = v, .tail_tokens = s->tails[t], .rot = modes[m] };
            add_unique(list, n, &c);
        }
    }
}

kvq_status kvq_sweep_grid(const kvq_sweep_spec *s, kvq_sweep_config **out, size_t *n_out, kvq_error *err) {
    *out = NULL;
    *n_out = 0;
    if (s->reference >= KVQ_TYPE_COUNT || is_block(s->reference) || !kvq_type_get(s->reference)->is_cache_type)
        return kvq_fail(err, KVQ_ERR_ARG, "the reference cache must be an exact cache type (f32, f16, bf16)");
    for (size_t t = 0; t < s->n_tails; t++) {
        if (s->tails[t] < 0) return kvq_fail(err, KVQ_ERR_ARG, "tail %d is negative", s->tails[t]);
        if (s->tails[t] > s->n_ctx)
            return kvq_fail(err, KVQ_ERR_ARG, "tail %d is longer than the context (%d positions): lower it or raise -c",
                            s->tails[t], s->n_ctx);
    }
    if (s->notes && s->notes_cap) s->notes[0] = 0;
    /* at most 2 rotation modes x tails per pair, plus the reference; a
     * zero tail is always considered */
    size_t cap = 1 + (s->n_types + s->n_pairs) * 2 * (s->n_tails + 1);
    kvq_sweep_config *list = kvq_calloc(cap, sizeof *list);
    if (!list) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory for %zu configurations", cap);
    size_t n = 0;
    kvq_sweep_config ref = { .type_k = s->reference, .type_v = s->reference, .rot = KVQ_ROT_AUTO, .is_reference = true };
    add_unique(list, &n, &ref);
    for (size_t i = 0; i < s->n_types; i++) add_pair(list, &n, s, s->types[i], s->types[i]);
    for (size_t i = 0; i < s->n_pairs; i++) add_pair(list, &n, s, s->pairs[i].k, s->pairs[i].v);
    *out = list;
    *n_out = n;
    return KVQ_OK;
}

/* ------------------------------------------------------------- parsing */

/* Calls item(ctx, text, len) for each comma-separated item; empty items
 * are an error. */
typedef kvq_status (*item_fn)(void *ctx, const char *s, size_t len, kvq_error *err);

static kvq_status for_each_item(const char *list, item_fn fn, void *ctx, kvq_error *err) {
    if (!list || !*list) return kvq_fail(err, KVQ_ERR_ARG, "empty list");
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0) return kvq_fail(err, KVQ_ERR_ARG, "empty item in list '%s'", list);
        kvq_status st = fn(ctx, p, len, err);
        if (st != KVQ_OK) return st;
        if (!comma) return KVQ_OK;
        p = comma + 1;
    }
}

static size_t count_items(const char *list) {
    size_t n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

static kvq_status parse_cache_type(const char *s, size_t len, kvq_type *out, kvq_error *err) {
    char name[32];
    if (len >= sizeof name) return kvq_fail(err, KVQ_ERR_ARG, "unknown cache type '%.*s'", (int)len, s);
    memcpy(name, s, len);
    name[len] = 0;
    kvq_type t = kvq_type_from_name(name);
    if (t == KVQ_TYPE_COUNT || !kvq_type_get(t)->is_cache_type)
        return kvq_fail(err, KVQ_ERR_ARG, "unknown cache type '%s'", name);
    *out = t;
    return KVQ_OK;
}

typedef struct type_acc { kvq_type *v; size_t n; } type_acc;
static kvq_status type_item(void *ctx, const char *s, size_t len, kvq_error *err) {
    type_acc *a = ctx;
    return parse_cache_type(s, len, &a->v[a->n++], err);
}

kvq_status kvq_sweep_parse_types(const char *list, kvq_type **out, size_t *n, kvq_error *err) {
    *out = NULL;
    *n = 0;
    type_acc a = { kvq_malloc_n(count_items(list ? list : ""), sizeof(kvq_type)), 0 };
    if (!a.v) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_status st = for_each_item(list, type_item, &a, err);
    if (st != KVQ_OK) { free(a.v); return st; }
    *out = a.v;
    *n = a.n;
    return KVQ_OK;
}

typedef struct pair_acc { kvq_sweep_pair *v; size_t n; } pair_acc;
static kvq_status pair_item(void *ctx, const char *s, size_t len, kvq_error *err) {
    pair_acc *a = ctx;
    const char *slash = memchr(s, '/', len);
    if (!slash) return kvq_fail(err, KVQ_ERR_ARG, "pair '%.*s' is not K/V (e.g. q8_0/q4_0)", (int)len, s);
    kvq_status st = parse_cache_type(s, (size_t)(slash - s), &a->v[a->n].k, err);
    if (st == KVQ_OK) st = parse_cache_type(slash + 1, len - (size_t)(slash - s) - 1, &a->v[a->n].v, err);
    if (st == KVQ_OK) a->n++;
    return st;
}

kvq_status kvq_sweep_parse_pairs(const char *list, kvq_sweep_pair **out, size_t *n, kvq_error *err) {
    *out = NULL;
    *n = 0;
    pair_acc a = { kvq_malloc_n(count_items(list ? list : ""), sizeof(kvq_sweep_pair)), 0 };
    if (!a.v) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_status st = for_each_item(list, pair_item, &a, err);
    if (st != KVQ_OK) { free(a.v); return st; }
    *out = a.v;
    *n = a.n;
    return KVQ_OK;
}

typedef struct tail_acc { int *v; size_t n; } tail_acc;
static kvq_status tail_item(void *ctx, const char *s, size_t len, kvq_error *err) {
    tail_acc *a = ctx;
    char num[16];
    if (len >= sizeof num) return kvq_fail(err, KVQ_ERR_ARG, "tail '%.*s' is not a token count", (int)len, s);
    memcpy(num, s, len);
    num[len] = 0;
    char *end;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (*end || errno || v < 0 || v > (1L << 24))
        return kvq_fail(err, KVQ_ERR_ARG, "tail '%s' is not a token count in 0..%ld", num, 1L << 24);
    a->v[a->n++] = (int)v;
    return KVQ_OK;
}

kvq_status kvq_sweep_parse_tails(const char *list, int **out, size_t *n, kvq_error *err) {
    *out = NULL;
    *n = 0;
    tail_acc a = { kvq_malloc_n(count_items(list ? list : ""), sizeof(int)), 0 };
    if (!a.v) return kvq_fail(err, KVQ_ERR_NOMEM, "out of memory");
    kvq_status st = for_each_item(list, tail_item, &a, err);
    if (st != KVQ_OK) { free(a.v); return st; }
    *out = a.v;
    *n = a.n;
    return KVQ_OK;
}
