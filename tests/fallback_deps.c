/*
 * fallback_deps.c - TEMPORARY stand-ins, for the test binary only, of two
 * APIs other branches implement: the thread pool (branch `matmul`,
 * src/threads.c) and the rotation functions (branch `rotation`,
 * src/hadamard.c, src/rotation_rule.c).  They are weak, so the real ones
 * win whenever their object is linked; DELETE THIS FILE when merging those
 * branches.  The pool runs every task inline but reports the requested
 * thread count and hands out thread ids task % n, so the callers' work
 * splitting and per-thread scratch are exercised.
 */
#include "kvq.h"

#include <math.h>
#include <stdlib.h>

#define WEAK __attribute__((weak))

struct kvq_pool { int n; };

WEAK kvq_pool *kvq_pool_create(int n_threads) {
    if (n_threads < 1) return NULL;
    kvq_pool *p = malloc(sizeof *p);
    if (p) p->n = n_threads;
    return p;
}
WEAK void kvq_pool_free(kvq_pool *pool) { free(pool); }
WEAK int kvq_pool_threads(const kvq_pool *pool) { return pool ? pool->n : 1; }
WEAK void kvq_pool_run(kvq_pool *pool, kvq_task_fn fn, void *ctx, int n_tasks) {
    const int n = kvq_pool_threads(pool);
    for (int t = 0; t < n_tasks; t++) fn(ctx, t, t % n);
}

WEAK void kvq_fwht(float *x, int n) {
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    const float s = 1.0f / sqrtf((float)n);
    for (int i = 0; i < n; i++) x[i] *= s;
}

WEAK void kvq_rotate_row(float *x, int n, int block, const int8_t *signs) {
    for (int b = 0; b < n; b += block) {
        if (signs)
            for (int i = 0; i < block; i++) x[b + i] *= (float)signs[i];
        kvq_fwht(x + b, block);
    }
}

WEAK void kvq_rotate_row_inverse(float *x, int n, int block, const int8_t *signs) {
    for (int b = 0; b < n; b += block) {
        kvq_fwht(x + b, block);
        if (signs)
            for (int i = 0; i < block; i++) x[b + i] *= (float)signs[i];
    }
}

WEAK void kvq_random_signs(int8_t *signs, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        signs[i] = ((z ^ (z >> 31)) & 1) ? 1 : -1;
    }
}

WEAK int kvq_rot_block_for(int n, int min_block) {
    for (int b = 512; b >= min_block && b >= 1; b >>= 1)
        if (n % b == 0) return b;
    return 0;
}

WEAK void kvq_rot_request_from_env(kvq_rot_request *req) {
    const char *a = getenv("LLAMA_ATTN_ROT_DISABLE"), *k = getenv("LLAMA_ATTN_ROT_K_DISABLE"),
               *v = getenv("LLAMA_ATTN_ROT_V_DISABLE");
    req->env_disable = a && *a == '1';
    req->env_disable_k = k && *k == '1';
    req->env_disable_v = v && *v == '1';
}

static int side_block(int head_dim, kvq_type t, kvq_rot_mode mode, kvq_rot_mode side_mode,
                      bool env_off, bool v_side) {
    kvq_rot_mode m = side_mode != KVQ_ROT_AUTO ? side_mode : mode;
    const int block = v_side ? (head_dim % 64 == 0 ? 64 : kvq_rot_block_for(head_dim, 8))
                             : kvq_rot_block_for(head_dim, 8);
    if (m == KVQ_ROT_OFF) return 0;
    if (m == KVQ_ROT_ON) return block;
    if (env_off || !kvq_type_get_scalar(t)->is_block_quant) return 0;
    return block >= 64 ? block : 0;
}

WEAK kvq_rot_plan kvq_rot_choose(const kvq_rot_request *req) {
    kvq_rot_plan p = { 0, 0, "fallback rule (tests only)" };
    if (req->is_mla) return p;
    p.block_k = side_block(req->head_dim_k, req->type_k, req->mode, req->mode_k,
                           req->env_disable || req->env_disable_k, false);
    p.block_v = side_block(req->head_dim_v, req->type_v, req->mode, req->mode_v,
                           req->env_disable || req->env_disable_v, true);
    return p;
}
