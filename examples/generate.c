/*
 * generate.c - the smallest program on kvq's public API: load a GGUF
 * model, give it a q4_0 KV cache (rotated, with a 32-token exact tail),
 * and continue a prompt with kvq's sampler (greedy: temperature 0) until
 * N tokens or the end of text.
 *
 *   cc -Iinclude examples/generate.c build/libkvq.a -lm -pthread -o generate
 *   ./generate models/austen-qwen3-h128-4k-q8_0.gguf "It was a truth" 40
 */
#include "kvq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT N\n", argv[0]);
        return 2;
    }
    const int n_gen = atoi(argv[3]), n_ctx = 1024;
    kvq_error err = { 0, "" };
    kvq_model *model = NULL;
    if (kvq_model_load(argv[1], &model, &err) != KVQ_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    const kvq_model_info *info = kvq_model_get_info(model);
    const kvq_tokenizer *vocab = kvq_model_tokenizer(model);

    kvq_cache_params cache;                 /* the cache: q4_0 K and V, 32 exact recent tokens */
    kvq_cache_params_default(&cache);
    cache.type_k = cache.type_v = KVQ_TYPE_Q4_0;
    cache.tail_tokens = 32;
    cache.n_ctx = n_ctx;
    cache.max_batch = 256;
    kvq_ctx *ctx = NULL;
    if (kvq_ctx_create(model, &cache, 2, &ctx, &err) != KVQ_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        kvq_model_free(model);
        return 1;
    }

    kvq_sampler_params sp;                  /* greedy; a temperature > 0 samples */
    kvq_sampler_params_default(&sp);
    sp.temp = 0.0f;
    kvq_sampler *sampler = NULL;
    if (kvq_sampler_create(&sp, &sampler, &err) != KVQ_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        kvq_ctx_free(ctx);
        kvq_model_free(model);
        return 1;
    }

    int32_t tokens[1024];
    const int n_prompt = kvq_tokenize(model, argv[2], strlen(argv[2]), info->add_bos, false, tokens, 256);
    float *logits = malloc((size_t)info->n_vocab * sizeof *logits);
    int rc = 1;
    if (n_prompt < 1 || n_prompt > 256 || !logits) {
        fprintf(stderr, "generate: the prompt must be 1..256 tokens\n");
        goto done;
    }
    if (kvq_ctx_eval(ctx, tokens, n_prompt, 0, logits, true, &err) != KVQ_OK) goto fail;
    printf("%s", argv[2]);
    for (int pos = n_prompt; pos < n_prompt + n_gen && pos < n_ctx; pos++) {
        int32_t next = kvq_sample(sampler, logits, info->n_vocab);
        if (next < 0 || kvq_tokenizer_is_eos(vocab, next)) break;
        char piece[64];
        const int len = kvq_token_to_piece(model, next, piece, sizeof piece);
        fwrite(piece, 1, (size_t)(len > 0 ? len : 0), stdout);
        if (kvq_ctx_eval(ctx, &next, 1, pos, logits, true, &err) != KVQ_OK) goto fail;
    }
    printf("\n");
    kvq_cache_bytes mem;
    kvq_cache_memory(kvq_ctx_cache(ctx), &mem);
    fprintf(stderr, "generate: KV cache %.2f MiB for %d positions\n", (double)mem.total / 1048576.0, n_ctx);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "generate: %s\n", err.msg);
done:
    free(logits);
    kvq_sampler_free(sampler);
    kvq_ctx_free(ctx);
    kvq_model_free(model);
    return rc;
}
