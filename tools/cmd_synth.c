/* cmd_synth.c - `kvq synth`: write a random-weight GGUF of a named real
 * shape (tools/synth_model.h), for benchmarks on any machine. */
#include "cli.h"
#include "synth_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "synth";

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq synth --shape NAME --wtype TYPE -o FILE [--seed N]\n"
        "       kvq synth --list\n"
        "A GGUF model of a real shape with random weights (seeded: the same arguments give the\n"
        "same bytes), for speed measurements; never for quality claims.\n"
        "  --shape NAME   one of --list's shapes\n"
        "  --wtype TYPE   f32, f16, q8_0, q4_0, q4_K, q6_K (every matrix that type) or q4_K_M\n"
        "                 (q4_K; q6_K for token_embd and for attn_v/ffn_down of a third of the layers)\n"
        "  -o FILE        output path\n"
        "  --seed N       random seed (default 1)\n"
        "  --list         the shapes, their parameter counts and file sizes\n"
        "The vocabulary is synthetic: the shape's number of embedding rows, a tokenizer of\n"
        "<unk> <s> </s> and the 256 byte tokens.\n");
}

static void list_shapes(void) {
    printf("| shape | arch | layers | n_embd | heads / kv | head_dim | ffn | vocab rows | parameters | q8_0 MiB | q4_K_M MiB |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const synth_shape *s = synth_shapes; s->name; s++)
        printf("| %s | %s | %d | %d | %d / %d | %d | %d | %d | %lld | %.1f | %.1f |\n", s->name, s->arch, s->n_layer,
               s->n_embd, s->n_head, s->n_head_kv, s->head_dim, s->n_ff, s->n_vocab, (long long)synth_params(s, false),
               (double)synth_weight_bytes(s, SYNTH_W_Q8_0) / (1 << 20),
               (double)synth_weight_bytes(s, SYNTH_W_Q4_K_M) / (1 << 20));
}

int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *wtype = NULL, *out = NULL;
    long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--list")) { list_shapes(); return 0; }
        const char **dst = !strcmp(a, "--shape") ? &shape : !strcmp(a, "--wtype") ? &wtype
                         : !strcmp(a, "-o") || !strcmp(a, "--output") ? &out : NULL;
        if (dst) {
            if (!(*dst = cli_value(CMD, argc, argv, &i))) return 1;
        } else if (!strcmp(a, "--seed")) {
            const char *v = cli_value(CMD, argc, argv, &i);
            if (!v || !cli_flag_long(CMD, a, v, 0, 0x7fffffffL, &seed)) return 1;
        } else {
            return cli_error(CMD, "unknown option '%s' (see kvq synth --help)", a);
        }
    }
    if (!shape || !wtype || !out) return cli_error(CMD, "--shape, --wtype and -o are required (see kvq synth --help)");
    const synth_shape *s = synth_find_shape(shape);
    if (!s) return cli_error(CMD, "--shape: unknown shape '%s' (kvq synth --list shows them)", shape);
    const synth_wtype w = synth_wtype_from_name(wtype);
    if (w == SYNTH_W_COUNT)
        return cli_error(CMD, "--wtype: '%s' is not one of f32, f16, q8_0, q4_0, q4_K, q6_K, q4_K_M", wtype);
    kvq_error err = { 0 };
    if (synth_write(s, w, (uint64_t)seed, out, &err)) return cli_error(CMD, "%s", err.msg);
    fprintf(stderr, "kvq synth: wrote %s: %s, %s weights, %lld parameters, %.1f MiB of tensors, seed %ld\n", out,
            s->name, synth_wtype_name(w), (long long)synth_params(s, false),
            (double)synth_weight_bytes(s, w) / (1 << 20), seed);
    return 0;
}
