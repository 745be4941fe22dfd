/* test_matmul.c - kvq_matmul against a double-precision reference built
 * from the scalar dequantiser, for every weight type, odd sizes, 1..3
 * threads; and bitwise equality across thread counts. */
#include "test.h"
#include "kvq.h"
#include "matmul.h"
#include "kquants_xperm.h"
#include "alloc.h"

#include <string.h>

/* A row of random weights stored as type ty.  Types with a quantiser get
 * quantised Gaussians; weight-only types (K-quants) get random bytes with
 * their fp16 scales replaced by small finite values. */
static void random_weights(kvq_type ty, test_rng *rng, int64_t cols, uint8_t *dst) {
    const kvq_type_traits *tr = kvq_type_get_scalar(ty);
    size_t nb = kvq_row_bytes(ty, cols);
    if (tr->quantize) {
        float *x = malloc((size_t)cols * sizeof *x);
        if (!x) return;
        for (int64_t i = 0; i < cols; i++) x[i] = (float)test_rng_gauss(rng);
        kvq_quantize_row(ty, x, dst, cols);
        free(x);
        return;
    }
    for (size_t i = 0; i < nb; i++) dst[i] = (uint8_t)test_rng_u64(rng);
    for (size_t b = 0; b < nb; b += (size_t)tr->block_bytes) {
        uint16_t d = kvq_fp32_to_fp16((float)(0.01 + 0.02 * test_rng_uniform(rng)));
        uint16_t m = kvq_fp32_to_fp16((float)(0.01 * test_rng_uniform(rng)));
        uint8_t *blk = dst + b;
        if (ty == KVQ_TYPE_Q6_K) {
            memcpy(blk + 208, &d, 2);
        } else {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
        }
    }
}

typedef struct case_data {
    int64_t rows, cols, n_tok;
    uint8_t *W;
    float *X, *Wf, *ref;   /* Wf: scalar-dequantised weights; ref: double dots */
    double *mag;           /* sum |w||x| per output, for the tolerance */
} case_data;

static void case_free(case_data *c) {
    free(c->W); free(c->X); free(c->Wf); free(c->ref); free(c->mag);
}

static int case_make(case_data *c, kvq_type ty, int64_t rows, int64_t cols, int64_t n_tok, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->rows = rows; c->cols = cols; c->n_tok = n_tok;
    size_t rb = kvq_row_bytes(ty, cols);
    c->W = malloc(rb * (size_t)rows);
    c->X = malloc(sizeof(float) * (size_t)(cols * n_tok));
    c->Wf = malloc(sizeof(float) * (size_t)(cols * rows));
    c->ref = malloc(sizeof(float) * (size_t)(rows * n_tok));
    c->mag = malloc(sizeof(double) * (size_t)(rows * n_tok));
    if (!c->W || !c->X || !c->Wf || !c->ref || !c->mag) return 0;
    test_rng rng = { seed, 0, 0 };
    for (int64_t r = 0; r < rows; r++) random_weights(ty, &rng, cols, c->W + rb * (size_t)r);
    for (int64_t i = 0; i < cols * n_tok; i++) c->X[i] = (float)test_rng_gauss(&rng);
    const kvq_type_traits *sc = kvq_type_get_scalar(ty);
    for (int64_t r = 0; r < rows; r++) sc->dequantize(c->W + rb * (size_t)r, c->Wf + r * cols, cols);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, m = 0;
            for (int64_t k = 0; k < cols; k++) {
                double p = (double)c->Wf[r * cols + k] * c->X[t * cols + k];
                s += p;
                m += fabs(p);
            }
            c->ref[t * rows + r] = (float)s;
            c->mag[t * rows + r] = m;
        }
    return 1;
}

/* Index of the first output farther from the reference than float
 * reassociation explains (a few ulps of sum |w x| per term), or -1. */
static int64_t first_bad(const case_data *c, const float *Y) {
    for (int64_t i = 0; i < c->rows * c->n_tok; i++) {
        double tol = 1e-6 * (double)c->cols * c->mag[i] / 64.0 + 1e-5 * c->mag[i] + 1e-30;
        if (!(fabs((double)Y[i] - c->ref[i]) <= tol)) return i;
    }
    return -1;
}

static int64_t cols_for(kvq_type ty) {
    int bs = kvq_type_get_scalar(ty)->block_size;
    return bs == 1 ? 37 : bs == 32 ? 96 : 512;   /* f32/f16 cols need no block */
}

TEST(matmul_matches_reference_all_types) {
    const int64_t rows_list[] = { 1, 7, 67 }, tok_list[] = { 1, 3, 17 };
    kvq_pool *pools[3] = { NULL, kvq_pool_create(2), kvq_pool_create(3) };
    CHECK(pools[1] && pools[2], "pool creation failed");
    char fail[256] = "";
    for (int ty = 0; ty < KVQ_TYPE_COUNT && !fail[0]; ty++) {
        if (!kvq_type_get_scalar((kvq_type)ty)->dequantize) continue;   /* no row kernels: tiles, calibrated rows */
        for (size_t ri = 0; ri < 3 && !fail[0]; ri++)
            for (size_t ti = 0; ti < 3 && !fail[0]; ti++) {
                case_data c;
                if (!case_make(&c, (kvq_type)ty, rows_list[ri], cols_for((kvq_type)ty), tok_list[ti],
                               1000 + (uint64_t)(ty * 9 + ri * 3 + ti))) {
                    case_free(&c);
                    snprintf(fail, sizeof fail, "out of memory");
                    break;
                }
                float *Y = malloc(sizeof(float) * (size_t)(c.rows * c.n_tok));
                for (int p = 0; p < 3 && Y && !fail[0]; p++) {
                    kvq_matmul(pools[p], (kvq_type)ty, c.W, c.rows, c.cols, c.X, c.n_tok, Y);
                    int64_t bad = first_bad(&c, Y);
                    if (bad >= 0)
                        snprintf(fail, sizeof fail, "%s rows %lld tok %lld threads %d: out %lld = %g, ref %g",
                                 kvq_type_name((kvq_type)ty), (long long)c.rows, (long long)c.n_tok, p + 1,
                                 (long long)bad, Y[bad], c.ref[bad]);
                }
                free(Y);
                case_free(&c);
            }
    }
    kvq_pool_free(pools[1]);
    kvq_pool_free(pools[2]);
    CHECK(!fail[0], "%s", fail);
}

/* Prefill (n_tok > 1) must agree with per-token decoding (n_tok == 1),
 * which uses the table's dot kernel: the two code paths check each other. */
TEST(matmul_prefill_matches_decode) {
    char fail[256] = "";
    for (int ty = 0; ty < KVQ_TYPE_COUNT && !fail[0]; ty++) {
        if (!kvq_type_get_scalar((kvq_type)ty)->dequantize) continue;   /* no row kernels: tiles, calibrated rows */
        case_data c;
        if (!case_make(&c, (kvq_type)ty, 9, cols_for((kvq_type)ty), 5, 77 + (uint64_t)ty)) {
            case_free(&c);
            CHECK(0, "out of memory");
        }
        float Y[9 * 5], y1[9];
        kvq_matmul(NULL, (kvq_type)ty, c.W, c.rows, c.cols, c.X, c.n_tok, Y);
        for (int64_t t = 0; t < c.n_tok && !fail[0]; t++) {
            kvq_matmul(NULL, (kvq_type)ty, c.W, c.rows, c.cols, c.X + t * c.cols, 1, y1);
            for (int64_t r = 0; r < c.rows; r++) {
                double tol = 1e-5 * c.mag[t * c.rows + r] + 1e-30;
                if (!(fabs((double)Y[t * c.rows + r] - y1[r]) <= tol)) {
                    snprintf(fail, sizeof fail, "%s tok %lld row %lld: prefill %g, decode %g",
                             kvq_type_name((kvq_type)ty), (long long)t, (long long)r,
                             Y[t * c.rows + r], y1[r]);
                    break;
                }
            }
        }
        case_free(&c);
    }
    CHECK(!fail[0], "%s", fail);
}

/* Every output is computed by one thread in a fixed order, so 1, 2 and 3
 * threads give the same bits (sizes span several row chunks; the products
 * are forced onto every thread, as they are small enough to run inline). */
TEST(matmul_bitwise_same_for_any_thread_count) {
    const kvq_type types[] = { KVQ_TYPE_F32, KVQ_TYPE_F16, KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_0,
                               KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };
    const int64_t toks[] = { 1, 7 };
    kvq_pool *pools[3] = { NULL, kvq_pool_create(2), kvq_pool_create(3) };
    CHECK(pools[1] && pools[2], "pool creation failed");
    char fail[200] = "";
    for (size_t i = 0; i < sizeof types / sizeof types[0] && !fail[0]; i++)
        for (size_t k = 0; k < 2 && !fail[0]; k++) {
            case_data c;
            const int64_t rows = 131;
            if (!case_make(&c, types[i], rows, cols_for(types[i]), toks[k], 5 + i)) {
                case_free(&c);
                snprintf(fail, sizeof fail, "out of memory");
                break;
            }
            size_t n = (size_t)(rows * toks[k]);
            float *Y[3];
            for (int p = 0; p < 3; p++) {
                Y[p] = malloc(n * sizeof(float));
                if (Y[p]) kvq_matmul_split(pools[p], 0, types[i], c.W, rows, c.cols, c.X, toks[k], Y[p]);
            }
            for (int p = 1; p < 3 && !fail[0]; p++)
                if (!Y[0] || !Y[p] || memcmp(Y[0], Y[p], n * sizeof(float)) != 0)
                    snprintf(fail, sizeof fail, "%s n_tok %lld: %d threads differ from 1 thread",
                             kvq_type_name(types[i]), (long long)toks[k], p + 1);
            for (int p = 0; p < 3; p++) free(Y[p]);
            case_free(&c);
        }
    kvq_pool_free(pools[1]);
    kvq_pool_free(pools[2]);
    CHECK(!fail[0], "%s", fail);
}

/* Bad arguments leave the output untouched instead of crashing. */
TEST(matmul_ignores_bad_arguments) {
    float w[4] = { 1, 2, 3, 4 }, x[4] = { 1, 1, 1, 1 }, y[2] = { -7, -7 };
    kvq_matmul(NULL, KVQ_TYPE_COUNT, w, 1, 4, x, 1, y);
    kvq_matmul(NULL, KVQ_TYPE_F32, w, 0, 4, x, 1, y);
    kvq_matmul(NULL, KVQ_TYPE_F32, w, 1, 0, x, 1, y);
    kvq_matmul(NULL, KVQ_TYPE_F32, NULL, 1, 4, x, 1, y);
    CHECK(y[0] == -7 && y[1] == -7, "output written on bad arguments");
    uint8_t q[2 * 34] = { 0 };   /* q8_0 rows must be whole 32-blocks: 40 columns are not */
    float xq[40] = { 0 };
    kvq_matmul(NULL, KVQ_TYPE_Q8_0, q, 1, 40, xq, 1, y);
    CHECK(y[0] == -7 && y[1] == -7, "output written for a partial-block weight row");
    kvq_matmul(NULL, KVQ_TYPE_F32, w, 1, 4, x, 1, y);
    CHECK(y[0] == 10 && y[1] == -7, "1x4 f32 matmul gave %g", y[0]);
}

/* Prefill with the caller's scratch (a context's, allocated once) gives
 * the same bits as with scratch the call allocates itself, for a pool of
 * 2 threads and scratch sized by kvq_matmul_scratch_floats; scratch too
 * small is not used (the call allocates instead), never overrun. */
TEST(matmul_caller_scratch_same_bits) {
    kvq_pool *pool = kvq_pool_create(2);
    CHECK(pool, "pool creation failed");
    case_data c;
    const int ok = case_make(&c, KVQ_TYPE_Q4_0, 37, cols_for(KVQ_TYPE_Q4_0), 9, 4242);
    const size_t n = (size_t)(c.rows * c.n_tok);
    const size_t ws_floats = kvq_matmul_scratch_floats(2, c.cols);
    float *ws = malloc((ws_floats + 1) * sizeof(float));
    float *own = malloc(n * sizeof(float)), *given = malloc(n * sizeof(float)), *small = malloc(n * sizeof(float));
    bool all = ok && ws && own && given && small;
    if (all) {
        ws[ws_floats] = 12345.0f;   /* guard past the end */
        kvq_matmul_split(pool, 0, KVQ_TYPE_Q4_0, c.W, c.rows, c.cols, c.X, c.n_tok, own);
        kvq_matmul_scratch(pool, 0, ws, ws_floats, KVQ_TYPE_Q4_0, c.W, c.rows, c.cols, c.X, c.n_tok, given);
        kvq_matmul_scratch(pool, 0, ws, 1, KVQ_TYPE_Q4_0, c.W, c.rows, c.cols, c.X, c.n_tok, small);
    }
    const bool same = all && !memcmp(own, given, n * sizeof(float)) && !memcmp(own, small, n * sizeof(float));
    const bool guard = all && ws[ws_floats] == 12345.0f;
    const int64_t bad = all ? first_bad(&c, given) : -1;
    free(ws); free(own); free(given); free(small);
    case_free(&c);
    kvq_pool_free(pool);
    CHECK(all, "out of memory");
    CHECK(same, "caller scratch changed the result");
    CHECK(guard, "scratch written past kvq_matmul_scratch_floats");
    CHECK(bad < 0, "output %lld off the reference", (long long)bad);
}

/* Decode products run in chunks of rows sized in weight bytes (matmul.c,
 * gemv_chunk_rows), spread over the threads by kvq_pool_run_spans: a
 * matrix of many chunks, the last one partial, gives every row its
 * reference dot, the same bits for 1, 2 and 3 threads, and the same
 * through the int8-activation path with 1 and 3 threads. */
TEST(matmul_decode_chunks_cover_every_row) {
    kvq_pool *pools[3] = { NULL, kvq_pool_create(2), kvq_pool_create(3) };
    CHECK(pools[1] && pools[2], "pool creation failed");
    case_data c;
    const int64_t rows = 3001, cols = 1024;   /* q8_0: 1088-byte rows, 60 a chunk: 51 chunks */
    const int ok = case_make(&c, KVQ_TYPE_Q8_0, rows, cols, 1, 777);
    float *Y[3] = { malloc(rows * sizeof(float)), malloc(rows * sizeof(float)), malloc(rows * sizeof(float)) };
    const size_t xq_bytes = kvq_matmul_act8_bytes(1, cols);
    void *xq = malloc(xq_bytes);
    float *A[2] = { malloc(rows * sizeof(float)), malloc(rows * sizeof(float)) };
    bool all = ok && Y[0] && Y[1] && Y[2] && xq && A[0] && A[1];
    int64_t bad = -1;
    bool same = false, same8 = false, ran8 = false;
    if (all) {
        for (int p = 0; p < 3; p++) {
            for (int64_t r = 0; r < rows; r++) Y[p][r] = NAN;   /* a row no task wrote stays NaN */
            kvq_matmul(pools[p], KVQ_TYPE_Q8_0, c.W, rows, cols, c.X, 1, Y[p]);
        }
        bad = first_bad(&c, Y[0]);
        same = !memcmp(Y[0], Y[1], rows * sizeof(float)) && !memcmp(Y[0], Y[2], rows * sizeof(float));
        for (int p = 0; p < 2; p++) for (int64_t r = 0; r < rows; r++) A[p][r] = NAN;
        ran8 = kvq_matmul_act8(NULL, 0, xq, xq_bytes, KVQ_TYPE_Q8_0, c.W, rows, cols, c.X, 1, A[0]) &&
               kvq_matmul_act8(pools[2], 0, xq, xq_bytes, KVQ_TYPE_Q8_0, c.W, rows, cols, c.X, 1, A[1]);
        same8 = ran8 && !memcmp(A[0], A[1], rows * sizeof(float));
        for (int64_t r = 0; r < rows && same8; r++) same8 = isfinite(A[0][r]);
    }
    for (int p = 0; p < 3; p++) free(Y[p]);
    free(A[0]); free(A[1]); free(xq);
    case_free(&c);
    kvq_pool_free(pools[1]);
    kvq_pool_free(pools[2]);
    CHECK(all, "out of memory");
    CHECK(bad < 0, "row %lld off the reference (or never written)", (long long)bad);
    CHECK(same, "2 or 3 threads differ from 1 thread");
    CHECK(ran8, "the int8 path refused a q8_0 product");
    CHECK(same8, "int8 activations: 3 threads differ from 1, or a row was not written");
}

/* K-quant decode products lay X out for their type once (kquants_xperm.h)
 * in the caller's scratch or memory of their own.  Checked per type:
 * the output is each row's laid-out dot (the level's kernel run directly:
 * the same bits) and near the reference; with caller scratch (exactly
 * kvq_kq_xperm_floats, nothing written past it) the same bits; and when
 * the product's own allocation fails it falls back to the row dots: every
 * output is then the row dot's bits, nothing is left unwritten. */
TEST(matmul_kquant_decode_laid_out_and_fallback) {
    const kvq_type types[] = { KVQ_TYPE_Q4_K, KVQ_TYPE_Q5_K, KVQ_TYPE_Q6_K };
    int tested = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const kvq_type ty = types[i];
        const kvq_kq_xrows_fn xrows = kvq_kq_xrows(ty);
        if (!xrows) continue;   /* scalar level: the row dots only */
        case_data c;
        const int64_t rows = 45, cols = 768;
        const int ok = case_make(&c, ty, rows, cols, 1, 99 + (uint64_t)i);
        const size_t xpf = kvq_kq_xperm_floats(cols), rb = kvq_row_bytes(ty, cols);
        float *xp = malloc((xpf + 1) * sizeof(float));
        float *direct = malloc(rows * sizeof(float)), *own = malloc(rows * sizeof(float));
        float *given = malloc(rows * sizeof(float)), *fell = malloc(rows * sizeof(float));
        bool all = ok && xp && direct && own && given && fell, laid = false, same = false, guard = false;
        bool rowdot = false;
        int64_t bad = -1;
        long failed = 0;
        if (all) {
            laid = kvq_kq_xperm(ty, c.X, cols, xp);
            xrows(c.W, rb, rows, xp, cols, direct);
            kvq_matmul(NULL, ty, c.W, rows, cols, c.X, 1, own);
            xp[xpf] = 12345.0f;   /* guard past the end */
            kvq_matmul_scratch(NULL, 0, xp, xpf, ty, c.W, rows, cols, c.X, 1, given);
            guard = xp[xpf] == 12345.0f;
            same = !memcmp(direct, own, rows * sizeof(float)) && !memcmp(direct, given, rows * sizeof(float));
            bad = first_bad(&c, own);
            for (int64_t r = 0; r < rows; r++) fell[r] = NAN;
            kvq_alloc_fail_at(1, 1);   /* the product's own copy of X, and anything after */
            kvq_matmul(NULL, ty, c.W, rows, cols, c.X, 1, fell);
            failed = kvq_alloc_failed();
            kvq_alloc_fail_at(0, 0);
            rowdot = true;
            for (int64_t r = 0; r < rows; r++) {
                const float want = kvq_type_get(ty)->dot(c.W + rb * (size_t)r, c.X, cols);
                rowdot = rowdot && !memcmp(&want, &fell[r], sizeof want);
            }
        }
        free(xp); free(direct); free(own); free(given); free(fell);
        case_free(&c);
        CHECK(all, "out of memory");
        CHECK(laid, "%s: kvq_kq_xperm refused", kvq_type_name(ty));
        CHECK(same, "%s: kvq_matmul's decode is not the laid-out kernel's bits", kvq_type_name(ty));
        CHECK(guard, "%s: scratch written past kvq_kq_xperm_floats", kvq_type_name(ty));
        CHECK(bad < 0, "%s: row %lld off the reference", kvq_type_name(ty), (long long)bad);
        CHECK(failed >= 1, "%s: the decode product allocated nothing to fail", kvq_type_name(ty));
        CHECK(rowdot, "%s: under a failed allocation the rows are not the row dots", kvq_type_name(ty));
        tested++;
    }
    if (!tested) SKIP("no laid-out K-quant kernels at this SIMD level");
}

/* A decode group (kvq_matmul_group, kvq_matmul_act8_group: one job for
 * matrices read by one input) gives each matrix the bits of its own
 * product, for 1, 2 and 3 threads, with f32 and int8 activations, for
 * q8_0 and a K-quant (its laid-out input shared by the group); the parts
 * are slices of one matrix of odd sizes (partial chunks, a part smaller
 * than a chunk).  Bad arguments (no part, too many) leave every output
 * untouched. */
TEST(matmul_decode_group_matches_each_product) {
    const kvq_type types[] = { KVQ_TYPE_Q8_0, KVQ_TYPE_Q4_K };
    const int64_t cols = 1024, part_rows[3] = { 1000, 17, 1984 }, rows = 3001;
    kvq_pool *pools[3] = { NULL, kvq_pool_create(2), kvq_pool_create(3) };
    CHECK(pools[1] && pools[2], "pool creation failed");
    const size_t xq_bytes = kvq_matmul_act8_bytes(1, cols);
    float *each = malloc(rows * sizeof(float)), *group = malloc(rows * sizeof(float));
    void *xq = malloc(xq_bytes);
    float *ws = malloc(kvq_matmul_scratch_floats(3, cols) * sizeof(float));
    bool all = each && group && xq && ws, made = true, same = true, untouched = true;
    int64_t first_diff = -1;
    for (size_t ti = 0; all && ti < sizeof types / sizeof types[0]; ti++) {
        case_data c;
        if (!case_make(&c, types[ti], rows, cols, 1, 900 + ti)) { made = false; case_free(&c); break; }
        const size_t rb = kvq_row_bytes(types[ti], cols);
        kvq_matmul_out outs[3];
        for (int act8 = 0; act8 < 2; act8++)
            for (int p = 0; p < 3; p++) {
                int64_t r0 = 0;
                for (int k = 0; k < 3; k++) {   /* each slice's own product */
                    float *y = each + r0;
                    if (act8) kvq_matmul_act8(pools[p], 0, xq, xq_bytes, types[ti], c.W + rb * (size_t)r0, part_rows[k],
                                              cols, c.X, 1, y);
                    else kvq_matmul_scratch(pools[p], 0, ws, kvq_matmul_scratch_floats(3, cols), types[ti],
                                            c.W + rb * (size_t)r0, part_rows[k], cols, c.X, 1, y);
                    outs[k] = (kvq_matmul_out){ c.W + rb * (size_t)r0, part_rows[k], group + r0 };
                    r0 += part_rows[k];
                }
                for (int64_t r = 0; r < rows; r++) group[r] = NAN;
                if (act8) same &= kvq_matmul_act8_group(pools[p], 0, xq, xq_bytes, types[ti], cols, c.X, 3, outs);
                else kvq_matmul_group(pools[p], 0, ws, kvq_matmul_scratch_floats(3, cols), types[ti], cols, c.X, 3, outs);
                for (int64_t r = 0; r < rows && same; r++)
                    if (memcmp(&each[r], &group[r], sizeof(float))) { same = false; first_diff = r; }
                if (!same) break;
            }
        for (int64_t r = 0; r < rows; r++) group[r] = NAN;
        kvq_matmul_group(pools[1], 0, NULL, 0, types[ti], cols, c.X, 0, outs);
        kvq_matmul_group(pools[1], 0, NULL, 0, types[ti], cols, c.X, KVQ_MATMUL_MAX_PARTS + 1, outs);
        untouched &= !kvq_matmul_act8_group(pools[1], 0, xq, xq_bytes, types[ti], cols, c.X, 0, outs);
        for (int64_t r = 0; r < rows; r++) untouched &= isnan(group[r]);
        case_free(&c);
        if (!same) break;
    }
    free(each); free(group); free(xq); free(ws);
    kvq_pool_free(pools[1]);
    kvq_pool_free(pools[2]);
    CHECK(all && made, "out of memory");
    CHECK(same, "a group's output differs from its matrix's own product (row %lld)", (long long)first_diff);
    CHECK(untouched, "a group of 0 or too many parts wrote an output");
}
