/* cmd_calibrate.c - `kvq calibrate`: run the model over a calibration
 * text with an exact cache, measure its keys, values and queries
 * (src/calib_stats.h), fit the transforms and bit allocations of the
 * calibrated cache types and write them to a calibration file
 * (docs/calibration.md). */
#include "cli.h"
#include "engine_cli.h"
#include "kvq_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *CMD = "calibrate";

typedef struct calib_opts {
    const char *model, *text, *out;
    int n_ctx, n_batch, n_chunks, n_threads, skip_chunks;
    double query_mix;
    bool no_mmap;
} calib_opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: kvq calibrate -m MODEL -f TEXT -o FILE [options]\n"
        "  -m, --model FILE       GGUF model\n"
        "  -f, --file FILE        calibration text (keep it apart from any text you evaluate on)\n"
        "  -o, --output FILE      calibration file to write\n"
        "  -c, --ctx-size N       chunk length in tokens (default: the trained context, at most 4096)\n"
        "  -b, --batch-size N     tokens per evaluation batch (default 512)\n"
        "  --chunks N             use at most N chunks (default: all)\n"
        "  --skip-chunks N        start after the first N chunks (calibrate on a part of a text\n"
        "                         whose first N chunks an evaluation scores, never on those)\n"
        "  -t, --threads N        threads (default: online cores)\n"
        CLI_NO_MMAP_USAGE
        "  --query-mix B          share of the queries in K's error metric, 0..1 (default 0.2;\n"
        "                         0: the keys' plain KLT)\n"
        "The file holds every calibrated rate (cal225 ... cal425, docs/calibration.md).\n");
}

static int parse_args(calib_opts *o, int argc, char **argv) {
    const cli_model_flags common = { &o->model, &o->text, &o->n_ctx, &o->n_batch, &o->n_chunks, &o->n_threads, NULL, &o->no_mmap };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 1;
            o->out = v;
        } else if (!strcmp(a, "--skip-chunks")) {
            long n;
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_flag_long(CMD, a, v, 0, 1 << 20, &n)) return 1;
            o->skip_chunks = (int)n;
        } else if (!strcmp(a, "--query-mix")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_flag_double(CMD, a, v, 0.0, 1.0, &o->query_mix)) return 1;
        } else {
            const int r = cli_model_flag(CMD, &common, argc, argv, &i);
            if (r < 0) return 1;
            if (r == 0) return cli_error(CMD, "unknown option '%s' (see kvq calibrate --help)", a);
        }
    }
    if (!o->model) return cli_error(CMD, "no model given (use -m MODEL.gguf)");
    if (!o->text) return cli_error(CMD, "no calibration text given (use -f TEXT)");
    if (!o->out) return cli_error(CMD, "no output file given (use -o FILE)");
    return -1;   /* go on */
}

/* "[=====>     ] chunk 2/5 ..." on one stderr line. */
typedef struct progress_clock { int n_ctx; double t0; } progress_clock;

static void progress(void *ud, int done, int total) {
    enum { WIDTH = 30 };
    progress_clock *pc = ud;
    if (done == 0) pc->t0 = kvq_now_seconds();
    const int fill = total ? done * WIDTH / total : WIDTH;
    char bar[WIDTH + 1];
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[WIDTH] = 0;
    fprintf(stderr, "\rkvq calibrate: [%s] chunk %d/%d, %d tokens, %.0f s", bar, done, total, done * pc->n_ctx,
            kvq_now_seconds() - pc->t0);
    if (done == total) fputc('\n', stderr);
}

static void print_summary(const kvq_calib *cal, const double *pred_db) {
    kvq_calib_info c;
    kvq_calib_get_info(cal, &c);
    printf("predicted gain over an isotropic code of the same bits (dB, own metric), mean over KV heads:\n");
    printf("  layer side  ");
    for (int r = 0; r < c.n_rates; r++) printf("  %d.%02d", c.rates[r] / 100, c.rates[r] % 100);
    printf("\n");
    for (int l = 0; l < c.n_layer; l++)
        for (int s = 0; s < 2; s++) {
            printf("  %5d %-5s", l, s ? "V" : "K");
            for (int r = 0; r < c.n_rates; r++) {
                double sum = 0.0;
                for (int g = 0; g < c.n_head_kv; g++) sum += pred_db[(((size_t)l * c.n_head_kv + g) * 2 + s) * c.n_rates + r];
                printf(" %5.1f", sum / c.n_head_kv);
            }
            printf("\n");
        }
}

/* Measure, fit (kvq_calibrate), write and summarise. */
static int calibrate_and_write(const calib_opts *o, kvq_ctx *ctx, const int32_t *toks, int n_chunk, int bos) {
    progress_clock pc = { o->n_ctx, 0.0 };
    const kvq_calib_run run = { toks, o->n_ctx, n_chunk, o->n_batch, bos, o->query_mix, progress, &pc };
    kvq_error err = { 0 };
    kvq_calib *c = NULL;
    double *pred = NULL;
    long long n_pos = 0;
    int rc = 0;
    if (kvq_calibrate(ctx, &run, &c, &pred, &n_pos, &err) || kvq_calib_write(c, o->out, &err)) {
        rc = cli_error(CMD, "%s", err.msg);
    } else {
        print_summary(c, pred);
        fprintf(stderr, "kvq calibrate: wrote '%s' (%lld positions per layer; query mix %.2f)\n", o->out, n_pos,
                o->query_mix);
    }
    kvq_calib_free(c);
    free(pred);
    return rc;
}

int cmd_calibrate(int argc, char **argv) {
    calib_opts o = { .query_mix = 0.2 };
    const int pr = parse_args(&o, argc, argv);
    if (pr >= 0) return pr;
    if (cli_check_writable(CMD, o.out)) return 1;
    kvq_model *m = cli_load_model(CMD, o.model, o.no_mmap);
    if (!m) return 1;
    const kvq_model_info *in = kvq_model_get_info(m);
    if (!o.n_ctx) o.n_ctx = CLI_MAX(4, CLI_MIN(in->n_ctx_train > 0 ? in->n_ctx_train : 512, 4096));
    o.n_batch = kvq_eval_batch(o.n_batch, o.n_ctx);
    int n_tok = 0, rc = 1;
    int32_t *toks = cli_text_tokens(CMD, m, o.text, &n_tok);
    kvq_ctx *ctx = NULL;
    if (!toks) goto done;
    int n_chunk = n_tok / o.n_ctx - o.skip_chunks;
    if (o.n_chunks && o.n_chunks < n_chunk) n_chunk = o.n_chunks;
    if (n_chunk < 1) {
        cli_error(CMD, "the text has %d tokens: no chunk of %d (-c) after skipping %d", n_tok, o.n_ctx, o.skip_chunks);
        goto done;
    }
    /* The statistics are the model's own: an exact, unrotated cache. */
    cache_flags cf;
    cache_flags_init(&cf);
    cf.params.type_k = cf.params.type_v = KVQ_TYPE_F32;
    cf.params.rot.mode = KVQ_ROT_OFF;
    fprintf(stderr, "kvq calibrate: %d tokens, %d chunks of %d after skipping %d, batch %d\n", n_tok, n_chunk, o.n_ctx,
            o.skip_chunks, o.n_batch);
    ctx = cli_create_ctx(CMD, m, &cf, o.n_ctx, o.n_batch, o.n_threads);
    if (!ctx) goto done;
    rc = calibrate_and_write(&o, ctx, toks + (size_t)o.skip_chunks * o.n_ctx, n_chunk, in->add_bos ? in->bos_id : -1);
done:
    kvq_ctx_free(ctx);
    free(toks);
    kvq_model_free(m);
    return rc;
}
