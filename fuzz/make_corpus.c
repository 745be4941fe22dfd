/*
 * make_corpus.c - writes the fuzzer's seed files (small valid GGUF files
 * covering both versions, every value type, several tensor types and
 * alignments) with the test suite's writer.
 *
 *   cc -std=c11 -Itests -o build-fuzz/make_corpus fuzz/make_corpus.c
 *   build-fuzz/make_corpus fuzz/corpus
 */
#include "gguf_writer.h"

#include <stdio.h>

static int write_seed(const char *dir, const char *name, const gw_model *m) {
    gw w = { 0 };
    gw_write_model(&w, m);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = !w.oom && f && fwrite(w.p, 1, w.n, f) == w.n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "make_corpus: cannot write %s\n", path);
    else printf("%s: %zu bytes\n", path, w.n);
    gw_free(&w);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int fails = 0;

    gw_model m = gw_model_default();
    fails += write_seed(dir, "baseline_v3.gguf", &m);
    m.version = 2;
    fails += write_seed(dir, "baseline_v2.gguf", &m);

    static const gw_tensor aligned64[3] = {
        { "tok", 2, { 4, 3, 0, 0 }, GW_T_F32, 0 },
        { "norm", 1, { 8, 0, 0, 0 }, GW_T_F16, 64 },
        { "q8", 2, { 32, 2, 0, 0 }, GW_T_Q8_0, 128 },
    };
    m = gw_model_default();
    m.alignment = 64;
    m.tensors = aligned64;
    fails += write_seed(dir, "align64.gguf", &m);

    static const gw_tensor kquant[2] = {
        { "blk.0.ffn_down.weight", 4, { 256, 1, 1, 1 }, GW_T_Q4_K, 0 },
        { "output_norm.weight", 1, { 8, 0, 0, 0 }, GW_T_F32, 160 },
    };
    m = gw_model_default();
    m.all_types = false;
    m.tensors = kquant;
    m.n_tensors = 2;
    fails += write_seed(dir, "kquant_4d.gguf", &m);

    m = gw_model_default();
    m.n_tensors = 0;
    fails += write_seed(dir, "metadata_only.gguf", &m);
    m.all_types = false;
    fails += write_seed(dir, "tiny.gguf", &m);
    return fails ? 1 : 0;
}
