/*
 * rotation_rule.c - which Hadamard block Q/K and V are rotated with
 * (docs/spec/attention.md §1), and the switches that change it.
 */
#include "kvq_internal.h"

#include <stdlib.h>
#include <strings.h>

enum { ROT_MAX_BLOCK = 512 };

int kvq_rot_block_for(int n, int min_block) {
    if (n <= 0) return 0;
    int best = 0;
    for (int b = 1; b <= ROT_MAX_BLOCK; b *= 2)
        if (b >= min_block && n % b == 0) best = b;
    return best;
}

/* "1" or "true" (any case) switch a variable on; unset, empty, "0",
 * "false" or anything else leave it off. */
static bool env_flag(const char *name) {
    const char *v = getenv(name);
    return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0);
}

void kvq_rot_request_from_env(kvq_rot_request *req) {
    if (!req) return;
    req->env_disable = env_flag("LLAMA_ATTN_ROT_DISABLE");
    req->env_disable_k = env_flag("LLAMA_ATTN_ROT_K_DISABLE");
    req->env_disable_v = env_flag("LLAMA_ATTN_ROT_V_DISABLE");
}

/* The switch that decides one side and where it came from (for `reason`). */
typedef struct rot_switch {
    kvq_rot_mode mode;   /* AUTO when no switch was given */
    char source[32];     /* "--attn-rot-k on", "LLAMA_ATTN_ROT_DISABLE=1", "auto" */
} rot_switch;

static bool given(kvq_rot_mode m) { return m == KVQ_ROT_ON || m == KVQ_ROT_OFF; }
static const char *on_off(kvq_rot_mode m) { return m == KVQ_ROT_ON ? "on" : "off"; }

/* Precedence: per-side flag > flag for both sides > environment (per-side
 * or both-sides variable; they can only switch off) > automatic. */
static rot_switch switch_for(char side, kvq_rot_mode mode_side, kvq_rot_mode mode_both,
                             bool env_side, bool env_both) {
    rot_switch sw = { KVQ_ROT_AUTO, "auto" };
    const char lower = side == 'K' ? 'k' : 'v';
    if (given(mode_side)) {
        sw.mode = mode_side;
        snprintf(sw.source, sizeof sw.source, "--attn-rot-%c %s", lower, on_off(mode_side));
    } else if (given(mode_both)) {
        sw.mode = mode_both;
        snprintf(sw.source, sizeof sw.source, "--attn-rot %s", on_off(mode_both));
    } else if (env_side) {
        sw.mode = KVQ_ROT_OFF;
        snprintf(sw.source, sizeof sw.source, "LLAMA_ATTN_ROT_%c_DISABLE=1", side);
    } else if (env_both) {
        sw.mode = KVQ_ROT_OFF;
        snprintf(sw.source, sizeof sw.source, "LLAMA_ATTN_ROT_DISABLE=1");
    }
    return sw;
}

/* Types that rotate inside their own format (KVarN: a normalised Hadamard
 * per slice, docs/spec/formats.md §3) are rotated by the cache whatever the switches
 * say, so the generic rotation stays off for them: a second H of the same
 * size on top of the format's own would cancel it (H H = I).  A column of
 * the trait table (format_rot). */
static bool format_rotates_itself(kvq_type t) {
    const kvq_type_traits *tr = kvq_type_get_scalar(t);
    return tr && tr->format_rot != KVQ_FMT_ROT_NONE;
}

static bool is_block_quant(kvq_type t) {
    const kvq_type_traits *tr = kvq_type_get(t);
    return tr && tr->is_block_quant;
}

/* Decide one side; writes "K: hadamard 128 (...)" or "K: off (...)". */
static int choose_side(char side, int head_dim, int block, kvq_type type, rot_switch sw,
                       bool is_mla, char *why, size_t cap) {
    const char *tname = kvq_type_name(type);
    if (is_mla) { snprintf(why, cap, "%c: off (MLA cache: never rotated)", side); return 0; }
    if (format_rotates_itself(type)) {
        if (kvq_type_get_scalar(type)->format_rot == KVQ_FMT_ROT_CALIB)
            snprintf(why, cap, "%c: calibrated (%s: the calibration's transform per layer and KV head)", side, tname);
        else if (kvq_type_get_scalar(type)->format_rot == KVQ_FMT_ROT_TURBO)
            snprintf(why, cap, "%c: format (%s rotates inside its format: S2 H S1 per %d-block)", side, tname,
                     head_dim <= 64 ? 64 : 128);
        else
            snprintf(why, cap, "%c: format (%s rotates inside its format: hadamard per %d-wide slice)", side, tname,
                     head_dim <= 64 ? 64 : 128);
        return 0;
    }
    if (sw.mode == KVQ_ROT_OFF) { snprintf(why, cap, "%c: off (%s)", side, sw.source); return 0; }
    if (sw.mode == KVQ_ROT_AUTO && !is_block_quant(type)) {
        snprintf(why, cap, "%c: off (auto: %s is not block-quantised)", side, tname);
        return 0;
    }
    if (block == 0) {
        snprintf(why, cap, "%c: off (%s, but no power-of-two block >= 8 divides head_dim %d)",
                 side, sw.source, head_dim);
        return 0;
    }
    if (sw.mode == KVQ_ROT_ON)
        snprintf(why, cap, "%c: hadamard %d (%s, %s, head_dim %d)", side, block, sw.source, tname, head_dim);
    else /* say so where kvq goes beyond llama.cpp, which stops at 64 */
        snprintf(why, cap, "%c: hadamard %d (auto: %s is block-quantised, head_dim %d%s)", side, block,
                 tname, head_dim, block < 64 ? ", small-head rule" : "");
    return block;
}

/*
 * The rule, in words:
 *   - Block sizes.  Q and K use the largest power of two dividing
 *     head_dim_k, at most 512; whenever head_dim_k is a multiple of 64 that
 *     is "the largest power of two >= 64 dividing head_dim" of llama.cpp.
 *     V uses 64 when head_dim_v is a multiple of 64, otherwise the largest
 *     power of two dividing it.  Either side needs a block of at least 8;
 *     without one (head_dim 12, 20, ...) it is not rotated.
 *   - AUTO rotates a side iff its type is block-quantised (q8_0 ... q2_1,
 *     iq4_nl) and a block >= 8 exists.  This extends llama.cpp's rule,
 *     which needs a block >= 64: heads of 8, 16, 80 or 96 values are
 *     rotated too (block-diagonally), because small heads are exactly
 *     where a single outlier channel owns a large share of every 32-value
 *     block and quantisation hurts most.  f32/f16/bf16 are not rotated.
 *   - ON rotates a side whatever its type (f32/f16/bf16 too); OFF never.
 *   - Precedence per side: --attn-rot-k / --attn-rot-v, then --attn-rot,
 *     then LLAMA_ATTN_ROT_K_DISABLE / LLAMA_ATTN_ROT_V_DISABLE and
 *     LLAMA_ATTN_ROT_DISABLE (which can only switch off), then AUTO.
 *   - MLA caches are never rotated, whatever the switches say; types that
 *     rotate inside their format (KVarN, TurboQuant) are not rotated again.
 */
kvq_rot_plan kvq_rot_choose(const kvq_rot_request *req) {
    kvq_rot_plan plan = { 0, 0, "" };
    if (!req) { snprintf(plan.reason, sizeof plan.reason, "K: off; V: off (no request)"); return plan; }
    const int block_k = kvq_rot_block_for(req->head_dim_k, 8);
    const int block_v = KVQ_MIN(64, kvq_rot_block_for(req->head_dim_v, 8));
    char why_k[(sizeof plan.reason - 2) / 2], why_v[(sizeof plan.reason - 2) / 2]; /* both fit */
    plan.block_k = choose_side('K', req->head_dim_k, block_k, req->type_k,
                               switch_for('K', req->mode_k, req->mode, req->env_disable_k, req->env_disable),
                               req->is_mla, why_k, sizeof why_k);
    plan.block_v = choose_side('V', req->head_dim_v, block_v, req->type_v,
                               switch_for('V', req->mode_v, req->mode, req->env_disable_v, req->env_disable),
                               req->is_mla, why_v, sizeof why_v);
    snprintf(plan.reason, sizeof plan.reason, "%s; %s", why_k, why_v);
    return plan;
}
