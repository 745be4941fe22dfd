/* attn_turbo.c - the row hooks of the TurboQuant types: scores and V sums
 * straight from the codes (kvq_turbo_chunk_scores / _values: codebook
 * values in the rotated domain, where the cache keeps the query and the
 * accumulators, each block's norm applied once per key and each group of
 * codes decoded once for every head of the GQA group), no f32 row per key.
 *
 * Where more than FUSED_MAX_HEADS query vectors share a chunk (prefill:
 * a group of query rows times the GQA heads) the rows are unpacked once
 * into an f32 tile instead (the decode hooks): the tile kernels then
 * reuse each unpacked row for every vector, which beats decoding the
 * codes again per pass of 4 heads (measured: pp64 at 0.6x of the tile's
 * speed when fused).  The "-tile" levels (no fused kernels) always
 * unpack, what ran before (for measurements). */
#include "row_hooks.h"
#include "format_row.h"
#include "turbo.h"
#include "turbo_traits.h"

enum { FUSED_MAX_HEADS = 4 };   /* query vectors of one pass of the block kernels */

/* A trellis K's scores with its rotated query rounded per TurboQuant
 * block (kvq_turbo_chunk_scores8 / 16, exact integer dots: the same
 * bits at every level): int8 levels with kvq_attend_opts.int8_query, at
 * every level and group size (a prefill group too, in passes of 4
 * vectors, so that prefill and decode score alike); by default int16
 * levels of KVQ_TURBO_QUERY16_TOP steps where the chunk is scored fused
 * (a decode's G <= FUSED_MAX_HEADS vectors; a prefill group's tile keeps
 * the float query).  The G vectors are rounded once per run of keys into
 * the memo (attend_keys empties it where the vectors change).  False
 * where there is no memo or it cannot hold the G rows (over
 * ATTN_MEMO_TURBO_VALUES values for int8, ATTN_MEMO_TURBO_FLOATS for
 * int16: no model's decode; 64 vectors of 128 fit int8): the caller then
 * scores with the float query, which is never less accurate. */
static bool turbo_scores_rounded(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows,
                                 int nk, const attn_query *q, int G, float scale, float *w, int ldw, bool int8) {
    attn_run_memo *memo = k->memo;
    const int len = (int)k->len, nb = kvq_turbo_blocks(len);
    const size_t n = (size_t)G * (size_t)len;
    if (!memo || n > (int8 ? KVQ_ARRAY_LEN(memo->t_m) : KVQ_ARRAY_LEN(memo->t_m16))) return false;
    const bool floats = n <= KVQ_ARRAY_LEN(memo->t_f);
    if (memo->k_rec != q->q || memo->k_heads != G) {   /* (q8 is the job's: one rounding per memo) */
        for (int g = 0; g < G; g++) {
            const float *qg = q->q + (size_t)g * q->stride;
            if (int8) kvq_turbo_round_query8(qg, len, memo->t_m + (size_t)g * len, memo->t_s + g * nb);
            else kvq_turbo_round_query16(qg, len, memo->t_m16 + (size_t)g * len, memo->t_s + g * nb);
        }
        if (floats)
            for (size_t i = 0; i < n; i++) memo->t_f[i] = int8 ? (float)memo->t_m[i] : (float)memo->t_m16[i];
        memo->k_rec = q->q;
        memo->k_heads = G;
    }
    const kvq_turbo_type t = kvq_turbo_of(k->type);
    const float *mf = floats ? memo->t_f : NULL;
    if (int8) kvq_turbo_chunk_scores8(kr->isa, t, rows, nk, memo->t_m, mf, memo->t_s, G, len, len, scale, w, ldw);
    else kvq_turbo_chunk_scores16(kr->isa, t, rows, nk, memo->t_m16, mf, memo->t_s, G, len, len, scale, w, ldw);
    return true;
}

static void turbo_scores(const attn_block_kernels *kr, const attn_block_rows *k, const uint8_t *const *rows, int nk,
                         const attn_query *q, int G, float scale, float *w, int ldw) {
    const bool trellis = kvq_turbo_is_tcq(kvq_turbo_of(k->type));
    if (trellis && q->q8 && turbo_scores_rounded(kr, k, rows, nk, q, G, scale, w, ldw, true)) return;
    if (!kr->fused || G > FUSED_MAX_HEADS) { attn_hooks_decode.score(kr, k, rows, nk, q, G, scale, w, ldw); return; }
    if (trellis && turbo_scores_rounded(kr, k, rows, nk, q, G, scale, w, ldw, false)) return;
    kvq_turbo_chunk_scores(kr->isa, kvq_turbo_of(k->type), rows, nk, q->q, G, q->stride, (int)k->len, scale, w, ldw);
}

static void turbo_values(const attn_block_kernels *kr, const attn_block_rows *v, const uint8_t *const *rows, int nk,
                         const float *w, int ldw, int G, float *acc, int acc_stride) {
    if (!kr->fused || G > FUSED_MAX_HEADS) { attn_hooks_decode.accumulate(kr, v, rows, nk, w, ldw, G, acc, acc_stride); return; }
    kvq_turbo_chunk_values(kr->isa, kvq_turbo_of(v->type), rows, nk, w, ldw, G, acc, acc_stride, (int)v->len);
}

/* A prefill group of 64 query vectors (32 rows at GQA 2) unpacks each
 * chunk once for 8x the rows of the default group.  pp256 at depth 8192
 * (qwen3-0.6B shape, 2 threads, AVX-512): turbo3_tcq, whose look-up
 * decode is the costliest, 16-18 t/s with 8 vectors, 36 with 32, 42
 * with 64; turbo4 27 -> 50 -> 50-53.  pp128 at depth 0, where the batch
 * reads little but itself, 0.94-1.0x. */
enum { TURBO_GROUP_VECTORS = 64 };

static const kvq_row_hooks g_turbo_hooks = { .name = "turbo codes", .score = turbo_scores,
                                             .accumulate = turbo_values, .group_vectors = TURBO_GROUP_VECTORS };

void kvq_turbo_register(void) {
    static const kvq_type types[] = { KVQ_TYPE_TURBO2,     KVQ_TYPE_TURBO3,     KVQ_TYPE_TURBO4,
                                      KVQ_TYPE_TURBO2_TCQ, KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4_TCQ };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) kvq_format_set_hooks(types[i], &g_turbo_hooks);
}
