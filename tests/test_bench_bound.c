/* test_bench_bound.c - the arithmetic of `kvq bench`'s bandwidth bound
 * (tools/bench_bound.c, src/cache/cache_reads.c): cache bytes per query by hand
 * and key by key, weight bytes per decode step against the synth model's
 * tensor sizes, and the shape of `kvq bench --json` (no timings are
 * checked: only fields, counts and the bytes arithmetic). */
#include "test.h"
#include "cache_reads.h"
#include "model.h"
#include "../tools/bench_bound.h"
#include "../tools/synth_model.h"

#include <string.h>
#include <unistd.h>

static kvq_cache *make_cache(kvq_type tk, kvq_type tv, int n_ctx, int tail, int sink) {
    kvq_cache_params p;
    kvq_cache_params_default(&p);
    p.n_layer = 2;
    p.n_head_kv = 2;
    p.head_dim_k = p.head_dim_v = 128;
    p.n_ctx = n_ctx;
    p.max_batch = 32;
    p.type_k = tk;
    p.type_v = tv;
    p.tail_tokens = tail;
    p.sink_tokens = sink;
    p.tail_type = KVQ_TYPE_F16;
    kvq_cache *c = NULL;
    kvq_error err = { 0 };
    if (kvq_cache_create(&p, &c, &err)) fprintf(stderr, "cache: %s\n", err.msg);
    return c;
}

TEST(bench_bound_cache_bytes_by_hand) {
    /* q4_0 K (72 B per 128-value row), q8_0 V (136 B), f16 exact rows
     * (256 B); query at 100: sink 0..3, body 4..84, tail 85..100 */
    kvq_cache *c = make_cache(KVQ_TYPE_Q4_0, KVQ_TYPE_Q8_0, 256, 16, 4);
    CHECK(c, "cache");
    const double want = 2.0 * ((4 + 16) * 256.0 + 81 * 72.0) + 2.0 * ((4 + 16) * 256.0 + 81 * 136.0);
    const double got = kvq_cache_query_bytes(c, 0, 100);
    const double all = kvq_cache_query_bytes_all(c, 100);
    /* a query inside the sink + tail reads exact rows only */
    const double early = kvq_cache_query_bytes(c, 1, 10);
    kvq_cache_free(c);
    CHECK(got == want, "query at 100: %.0f bytes, want %.0f", got, want);
    CHECK(all == 2 * want, "two layers: %.0f, want %.0f", all, 2 * want);
    CHECK(early == 2 * 2 * 11 * 256.0, "query at 10: %.0f, want %.0f", early, 2 * 2 * 11 * 256.0);

    kvq_cache *f = make_cache(KVQ_TYPE_F16, KVQ_TYPE_F16, 256, 0, 0);
    CHECK(f, "cache");
    const double f16 = bench_decode_cache_bytes(f, 10, 4);   /* queries at 10..13: 11..14 keys */
    kvq_cache_free(f);
    CHECK(f16 == 2 * 2 * 2 * 256.0 * 12.5, "f16 mean over 4 steps: %.0f", f16);
}

/* Every key's row from the copy kvq_cache_key_part names, summed. */
static double bytes_key_by_key(const kvq_cache *c, int layer, int qp) {
    double sum = 0.0;
    for (int s = 0; s < 2; s++) {
        const kvq_cache_side *sd = s ? &c->v[layer] : &c->k[layer];
        const double body = sd->layout == KVQ_LAYOUT_TILES ? (double)sd->n_slices * sd->record_bytes / 128.0
                                                           : (double)sd->row_bytes;
        for (int key = 0; key <= qp; key++)
            sum += kvq_cache_key_part(c, layer, s == 1, qp, key) == KVQ_PART_BODY ? body : (double)sd->exact_row_bytes;
    }
    return sum * c->p.n_head_kv;
}

TEST(bench_bound_cache_bytes_key_by_key) {
    static const struct { kvq_type k, v; int tail, sink; } cases[] = {
        { KVQ_TYPE_F16, KVQ_TYPE_F16, 0, 0 },       { KVQ_TYPE_Q4_0, KVQ_TYPE_Q4_0, 64, 0 },
        { KVQ_TYPE_Q8_0, KVQ_TYPE_Q2_1, 7, 3 },     { KVQ_TYPE_KVARN4, KVQ_TYPE_KVARN4, 0, 0 },
        { KVQ_TYPE_KVARN3, KVQ_TYPE_Q4_0, 128, 0 }, { KVQ_TYPE_TURBO3_TCQ, KVQ_TYPE_TURBO4, 16, 4 },
    };
    static const int qps[] = { 0, 5, 127, 128, 300, 700, 1023 };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvq_cache *c = make_cache(cases[i].k, cases[i].v, 1024, cases[i].tail, cases[i].sink);
        CHECK(c, "cache %zu", i);
        for (size_t q = 0; q < sizeof qps / sizeof qps[0]; q++) {
            const double got = kvq_cache_query_bytes(c, 1, qps[q]), want = bytes_key_by_key(c, 1, qps[q]);
            if (got != want) kvq_cache_free(c);
            CHECK(got == want, "%s/%s tail %d sink %d, query at %d: %.1f bytes, key by key %.1f",
                  kvq_type_name(cases[i].k), kvq_type_name(cases[i].v), cases[i].tail, cases[i].sink, qps[q], got,
                  want);
        }
        kvq_cache_free(c);
    }
}

TEST(bench_bound_weight_bytes_and_bound) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvq_test_bound_%d.gguf", (int)getpid());
    const synth_shape *s = synth_find_shape("tiny-qwen3");
    static const synth_wtype ws[] = { SYNTH_W_Q8_0, SYNTH_W_Q4_K_M };
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
        kvq_error err = { 0 };
        kvq_model *m = NULL;
        CHECK(!synth_write(s, ws[i], 1, path, &err) && !kvq_model_load(path, &m, &err), "%s", err.msg);
        remove(path);
        /* tied embeddings: the output projection reads the whole matrix,
         * the lookup one more row; every other tensor (norms included) once */
        const double want = (double)synth_weight_bytes(s, ws[i]) + (double)m->tok_embd.row_bytes;
        const double got = bench_decode_weight_bytes(m);
        kvq_model_free(m);
        CHECK(got == want, "%s: %.0f bytes per step, want %.0f", synth_wtype_name(ws[i]), got, want);
    }
    CHECK(bench_bound_tps(36.0, 1e9) == 36.0 && bench_bound_tps(0.0, 1e9) == 0.0 && bench_bound_tps(10.0, 0.0) == 0.0,
          "bound t/s");
}

/* The number after "key": in one JSON line; false when absent. */
static bool json_number(const char *line, const char *key, double *v) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(line, pat);
    if (!p) return false;
    char *end;
    *v = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat);
}

TEST(bench_json_rows_and_bytes) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    char path[128], cmd[512];
    snprintf(path, sizeof path, "/tmp/kvq_test_bench_json_%d.gguf", (int)getpid());
    const synth_shape *s = synth_find_shape("tiny-qwen3");
    kvq_error err = { 0 };
    CHECK(!synth_write(s, SYNTH_W_Q8_0, 1, path, &err), "%s", err.msg);
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -t 1 -p 8 -n 3 -r 1 -d 0,40 --types f16,q4_0 --rot off --no-mmap --json 2>/dev/null", bin,
             path);
    static char out[16384];
    const int rc = test_run(cmd, out, sizeof out);
    remove(path);
    CHECK(rc == 0, "kvq bench --json exited %d: %s", rc, out);
    static const char *keys[] = { "depth", "pp_tps", "tg_tps", "tg_bound_tps", "bandwidth_gbs", "tg_bytes_per_token",
                                  "tg_weight_bytes", "tg_cache_bytes", "bandwidth_before_gbs", "bandwidth_after_gbs" };
    int rows = 0;
    double cache_bytes[2][2] = { { 0 } };   /* [depth index][f16, q4_0] */
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), rows++) {
        const size_t len = strlen(line);
        CHECK(line[0] == '{' && line[len - 1] == '}', "not one JSON object per line: %s", line);
        double v[10];
        for (int k = 0; k < 10; k++) CHECK(json_number(line, keys[k], &v[k]), "no \"%s\" in %s", keys[k], line);
        const bool f16 = strstr(line, "\"cache_k\": \"f16\", \"cache_v\": \"f16\"") != NULL;
        const bool q4 = strstr(line, "\"cache_k\": \"q4_0\", \"cache_v\": \"q4_0\"") != NULL;
        CHECK(f16 != q4, "cache_k/cache_v missing: %s", line);
        CHECK(strstr(line, "\"use_mmap\": false"), "--no-mmap not reported: %s", line);
        CHECK(v[0] == 0 || v[0] == 40, "depth %g", v[0]);
        CHECK(v[5] == v[6] + v[7], "bytes per token %.0f != weights %.0f + cache %.0f", v[5], v[6], v[7]);
        CHECK(v[4] > 0 && fabs(v[3] - v[4] * 1e9 / v[5]) <= 1e-3 * v[3], "bound %.4f != %.3f GB/s / %.0f B", v[3],
              v[4], v[5]);
        CHECK(v[4] == fmax(v[8], v[9]), "bound's bandwidth %.3f, readings before %.3f and after %.3f", v[4], v[8], v[9]);
        cache_bytes[v[0] > 0][q4] = v[7];
    }
    CHECK(rows == 4, "%d rows, want 2 types x 2 depths", rows);
    /* steps at 8..10 after the prompt (depth 0) and 48..50 (depth 40):
     * 2 layers x 2 sides x 2 KV heads x mean keys x row bytes (64 values:
     * f16 128 B, q4_0 two blocks 36 B) */
    const double keys0 = 10.0, keys40 = 50.0;
    CHECK(cache_bytes[0][0] == 8 * keys0 * 128 && cache_bytes[1][0] == 8 * keys40 * 128, "f16 cache bytes %.0f %.0f",
          cache_bytes[0][0], cache_bytes[1][0]);
    CHECK(cache_bytes[0][1] == 8 * keys0 * 36 && cache_bytes[1][1] == 8 * keys40 * 36, "q4_0 cache bytes %.0f %.0f",
          cache_bytes[0][1], cache_bytes[1][1]);
}

/* -n 0 times no generation: the tg fields are null in --json and '-' in
 * the table, never a bound made of the weights alone. */
TEST(bench_without_generation_prints_no_tg_figures) {
    const char *bin = test_kvq_bin();
    if (!bin) SKIP("KVQ_BIN not set");
    char path[128], cmd[512];
    snprintf(path, sizeof path, "/tmp/kvq_test_bench_n0_%d.gguf", (int)getpid());
    const synth_shape *s = synth_find_shape("tiny-qwen3");
    kvq_error err = { 0 };
    CHECK(!synth_write(s, SYNTH_W_Q8_0, 1, path, &err), "%s", err.msg);
    static char out[16384];
    snprintf(cmd, sizeof cmd, "%s bench -m %s -t 1 -p 8 -n 0 -r 1 -d 0 --types f16 --json 2>/dev/null", bin, path);
    int rc = test_run(cmd, out, sizeof out);
    CHECK(rc == 0, "kvq bench -n 0 --json exited %d: %s", rc, out);
    double v;
    CHECK(json_number(out, "pp_tps", &v) && v > 0, "no pp_tps in %s", out);
    static const char *nulls[] = { "\"tg_tps\": null", "\"tg_bound_tps\": null", "\"tg_bound_fraction\": null",
                                   "\"tg_bytes_per_token\": null" };
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++) CHECK(strstr(out, nulls[i]), "no %s in %s", nulls[i], out);
    for (const char *line = out; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line))
        CHECK(*line == '{', "--json prints JSON lines alone: %s", out);
    snprintf(cmd, sizeof cmd, "%s bench -m %s -t 1 -p 8 -n 0 -r 1 -d 0 --types f16 2>/dev/null", bin, path);
    rc = test_run(cmd, out, sizeof out);
    remove(path);
    CHECK(rc == 0, "kvq bench -n 0 exited %d: %s", rc, out);
    CHECK(strstr(out, "| - | - | - | - | - | - |"), "tg columns not '-': %s", out);
    CHECK(strstr(out, "Read bandwidth before / after the runs at depth 0: "), "no readings around the runs: %s", out);
}

/* The bandwidth buffer: 4x every level-3 cache, at least 256 MiB, at
 * most 4 GiB, whole lines per task (a 384 MiB L3 of a many-CCD part must
 * not let the best pass read from it); and this machine's L3, where
 * sysfs has one, is counted. */
TEST(bench_bound_buffer_outgrows_the_caches) {
    const size_t mib = (size_t)1 << 20;
    CHECK(bench_bandwidth_bytes(0) == 256 * mib, "no cache known: %zu", bench_bandwidth_bytes(0));
    CHECK(bench_bandwidth_bytes(32 * mib) == 256 * mib, "32 MiB L3: %zu", bench_bandwidth_bytes(32 * mib));
    CHECK(bench_bandwidth_bytes(384 * mib) == 1536 * mib, "384 MiB L3: %zu", bench_bandwidth_bytes(384 * mib));
    CHECK(bench_bandwidth_bytes((size_t)8 << 30) == (size_t)4 << 30, "capped: %zu",
          bench_bandwidth_bytes((size_t)8 << 30));
    CHECK(bench_bandwidth_bytes(100 * mib + 7) % (64 * 64) == 0, "not whole lines per task");
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/level", "r");
    int level = 0;
    const bool l3 = f && fscanf(f, "%d", &level) == 1 && level == 3;
    if (f) fclose(f);
    if (!l3) SKIP("no level-3 cache at /sys/devices/system/cpu/cpu0/cache/index3 here");
    f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long kib = 0;
    const int got = f ? fscanf(f, "%luK", &kib) : 0;
    if (f) fclose(f);
    CHECK(got == 1 && kib > 0, "cpu0's L3 size unreadable");
    CHECK(bench_llc_bytes() >= (size_t)kib << 10, "L3 total %zu below cpu0's own %lu KiB", bench_llc_bytes(), kib);
}

/* A bound is made of the higher reading around its runs: a low one
 * (the bus shared at that moment) would raise every % of it. */
TEST(bench_bound_takes_the_higher_reading) {
    CHECK(bench_bound_bandwidth(34.1, 57.3) == 57.3 && bench_bound_bandwidth(57.3, 34.1) == 57.3, "the higher");
    CHECK(bench_bound_bandwidth(0.0, 41.0) == 41.0 && bench_bound_bandwidth(41.0, 0.0) == 41.0, "the one measured");
    CHECK(bench_bound_bandwidth(0.0, 0.0) == 0.0 && bench_bound_bandwidth(-1.0, NAN) == 0.0, "none measured");
}

/* The warning that the bus was shared during a run: a move of more than a
 * quarter of the larger reading either way, never when a reading is
 * missing (0: not measured) or the two agree. */
TEST(bench_bandwidth_moved_by_a_quarter) {
    CHECK(!bench_bandwidth_moved(60.0, 60.0) && !bench_bandwidth_moved(60.0, 46.0) && !bench_bandwidth_moved(46.0, 60.0),
          "within a quarter of the larger reading");
    CHECK(bench_bandwidth_moved(60.0, 44.0) && bench_bandwidth_moved(34.0, 70.0), "a move beyond a quarter");
    CHECK(!bench_bandwidth_moved(0.0, 60.0) && !bench_bandwidth_moved(60.0, 0.0) && !bench_bandwidth_moved(0.0, 0.0),
          "a missing reading is no move");
}
