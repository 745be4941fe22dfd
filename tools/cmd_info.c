/* cmd_info.c - `kvq info`: what a model file is and what its KV cache
 * costs in every cache type, with the rotation each type would get. */
#include "cli.h"
#include "engine_cli.h"

#include <stdio.h>
#include <string.h>

static const char *CMD = "info";

static void print_tensor_types(const kvq_model *m) {
    size_t count[KVQ_TYPE_COUNT] = { 0 }, bytes[KVQ_TYPE_COUNT] = { 0 };
    const int64_t n = kvq_model_n_tensors(m);
    for (int64_t i = 0; i < n; i++) {
        kvq_tensor_info t;
        if (kvq_model_tensor(m, i, &t, NULL) != KVQ_OK) continue;
        count[t.type]++;
        bytes[t.type] += t.nbytes;
    }
    printf("tensors:      %llu (", (unsigned long long)n);
    const char *sep = "";
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        if (!count[t]) continue;
        printf("%s%zu %s, %.2f MiB", sep, count[t], kvq_type_name((kvq_type)t), bytes[t] / 1048576.0);
        sep = "; ";
    }
    printf(")\n");
    kvq_model_weights w;
    kvq_model_get_weights(m, &w);
    printf("weights:      token_embd %s, output %s%s\n", kvq_type_name(w.embd_type), kvq_type_name(w.output_type),
           w.output_tied ? " (tied to token_embd)" : "");
}

/* One row per cache type: bytes per token (all layers, K + V), the cache
 * at the trained context as every command reports it (kv_bytes: exact rows
 * such as KVarN's first tile included, no tail or sink; work_bytes at the
 * default batch of 512) and the Hadamard blocks the default rotation rule
 * picks for this head shape. */
static void print_cache_table(const kvq_model_info *in) {
    const int n_ctx = in->n_ctx_train > 0 ? in->n_ctx_train : 4096;
    printf("\nKV cache per token (all %d layers, K + V), at the trained context (%d positions, no tail or sink)\n"
           "and the rotation rule's choice:\n", in->n_layer, n_ctx);
    printf("  %-10s %6s %12s %10s %10s %10s  %s\n", "type", "bits", "bytes/token", "kv MiB", "% of bf16", "work MiB",
           "rotation (Hadamard block K / V)");
    kvq_cache_params bf16;
    kvq_cache_params_default(&bf16);
    bf16.type_k = bf16.type_v = KVQ_TYPE_BF16;
    const double ref = cli_kv_bytes(in, &bf16, n_ctx);
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get((kvq_type)t);
        if (!tr || !tr->is_cache_type) continue;
        const size_t per_tok = (size_t)in->n_layer * (kvq_cache_row_bytes((kvq_type)t, in->n_head_kv, in->head_dim_k) +
                                                      kvq_cache_row_bytes((kvq_type)t, in->n_head_kv, in->head_dim_v));
        kvq_rot_request req = { .head_dim_k = in->head_dim_k, .head_dim_v = in->head_dim_v,
                                .type_k = (kvq_type)t, .type_v = (kvq_type)t };
        kvq_rot_request_from_env(&req);
        kvq_rot_plan plan = kvq_rot_choose(&req);
        kvq_cache_params p;
        kvq_cache_params_default(&p);
        p.type_k = p.type_v = (kvq_type)t;
        if (tr->layout == KVQ_LAYOUT_TILES) p.tail_type = KVQ_TYPE_F16;   /* as the cache flags choose it */
        kvq_cache_bytes b;
        if (!cli_cache_plan(in, &p, n_ctx, &b)) { b.total = (size_t)cli_kv_bytes(in, &p, n_ctx); b.work = 0; }
        printf("  %-10s %6.2f %12zu %10.2f %10.2f %10.2f  %d / %d\n", tr->name, kvq_type_bpv((kvq_type)t), per_tok,
               (double)b.total / 1048576.0, 100.0 * (double)b.total / ref, (double)b.work / 1048576.0, plan.block_k,
               plan.block_v);
    }
    kvq_rot_request req = { .head_dim_k = in->head_dim_k, .head_dim_v = in->head_dim_v,
                            .type_k = KVQ_TYPE_Q4_0, .type_v = KVQ_TYPE_Q4_0 };
    kvq_rot_request_from_env(&req);
    printf("rotation rule (q4_0): %s\n", kvq_rot_choose(&req).reason);
}

int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: kvq info -m MODEL\n  print architecture, shapes, tensor types, vocabulary,\n"
                   "  context length, KV bytes per token of every cache type, and the rotation rule\n");
            return 0;
        }
        if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = cli_value(CMD, argc, argv, &i))) return 1;
        } else {
            return cli_error(CMD, "unknown option '%s' (see kvq info --help)", argv[i]);
        }
    }
    kvq_model *m = cli_load_model(CMD, path, false);
    if (!m) return 1;
    const kvq_model_info *in = kvq_model_get_info(m);
    printf("model:        %s\n", path);
    printf("architecture: %s (RoPE %s, base %g, scale %g)\n", in->arch_name, in->rope_neox ? "NEOX" : "NORM",
           (double)in->rope_base, (double)kvq_model_rope_freq_scale(m));
    printf("shape:        n_embd %d, layers %d, heads %d, kv heads %d, head_dim k %d / v %d, ffn %d\n", in->n_embd,
           in->n_layer, in->n_head, in->n_head_kv, in->head_dim_k, in->head_dim_v, in->n_ff);
    printf("rms eps:      %g\n", (double)in->rms_eps);
    printf("vocabulary:   %d tokens (BOS %d, EOS %d, add BOS %s)\n", in->n_vocab, in->bos_id, in->eos_id,
           in->add_bos ? "yes" : "no");
    printf("context:      %d (trained)\n", in->n_ctx_train);
    print_tensor_types(m);
    print_cache_table(in);
    kvq_model_free(m);
    return 0;
}
