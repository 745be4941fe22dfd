/* matmul.h - weight matrix times activations, the engine's one heavy op.
 *
 *   kvq_matmul(pool, wtype, W, rows, cols, X, n_tok, Y)
 *
 * W: `rows` rows of `cols` values stored as wtype (each row
 * kvq_row_bytes(wtype, cols) bytes, rows back to back, as in a GGUF
 * tensor with ne[0] = cols).  X: n_tok rows of cols f32 activations.
 * Y: n_tok rows of `rows` f32 outputs, Y[t*rows + r] = dot(W row r, X row t).
 * Activations stay f32 here; kvq_matmul_act8 below is the int8 option
 * (llama.cpp quantises them to q8 for quantised weights; docs/engine.md).
 *
 * n_tok == 1 (decoding) runs the type's dot kernel per row.  n_tok > 1
 * (prefill) dequantises a few weight rows at a time into per-thread f32
 * scratch and multiplies them against all tokens with a register-blocked
 * tile kernel, so the unpacking is paid once per row, not once per token.
 *
 * Threads split the output rows into fixed chunks; every output element is
 * computed by one thread in an order that depends only on (rows, cols,
 * n_tok, CPU kernel level), so the result is bitwise the same for any
 * thread count.  Nonsense arguments (unknown type, sizes < 1, NULL
 * pointers) leave Y untouched. */
#ifndef KVQ_MATMUL_H
#define KVQ_MATMUL_H

#include "kvq_internal.h"

void kvq_matmul(kvq_pool *pool, kvq_type wtype, const void *W, int64_t rows, int64_t cols,
                const float *X, int64_t n_tok, float *Y);

/* Products of fewer multiply-adds (rows * cols * n_tok) than this run on
 * the calling thread even when a pool is given: handing work to another
 * thread costs a few microseconds (more when the cores are shared), which
 * is all a 256x256 decode product takes.  Measured by `kvq-bench matmul`
 * (its "threads break-even" table): on the 2-core
 * development VM 2 threads lost below ~1M multiply-adds even with a
 * spinning worker; 2^18 keeps the tiny test models' decode (<= 131k per
 * product) on one thread and every product of a real model (n_embd >=
 * 1024: >= 1M per decode product) shared. */
#define KVQ_MATMUL_MIN_PARALLEL_MACS (double)(1 << 18)

/* kvq_matmul with the threshold given: 0 always shares the rows among
 * the pool's threads (tests of thread independence, the break-even
 * benchmark). */
void kvq_matmul_split(kvq_pool *pool, double min_parallel_macs, kvq_type wtype, const void *W, int64_t rows,
                      int64_t cols, const float *X, int64_t n_tok, float *Y);

/* kvq_matmul_split with the prefill scratch supplied by the caller, so that
 * a forward pass allocates nothing per call: `scratch` holds
 * scratch_floats floats, enough when >= kvq_matmul_scratch_floats(threads of
 * the pool, cols).  NULL or too small: the call allocates its own. */
size_t kvq_matmul_scratch_floats(int n_threads, int64_t max_cols);
void kvq_matmul_scratch(kvq_pool *pool, double min_parallel_macs, float *scratch, size_t scratch_floats,
                        kvq_type wtype, const void *W, int64_t rows, int64_t cols, const float *X,
                        int64_t n_tok, float *Y);

/* ---- int8 activations (the option KVQ_ACT_INT8, src/format/act8.h) ----
 * kvq_matmul_scratch with X quantised to int8 blocks once per token row
 * (into xq, xq_bytes >= kvq_matmul_act8_bytes(n_tok, cols)), then every
 * output is the type's int8 dot of its weight row and its token's row:
 * the same kernel for decode and prefill, so a token's outputs have the
 * same bits however it is batched, and for any thread count.  Returns
 * false, Y untouched, when wtype has no int8 path (f32/f16/bf16 and the
 * other types keep f32 activations: the caller runs kvq_matmul_scratch)
 * or xq is too small. */
size_t kvq_matmul_act8_bytes(int64_t n_tok, int64_t cols);
bool kvq_matmul_act8(kvq_pool *pool, double min_parallel_macs, void *xq, size_t xq_bytes, kvq_type wtype,
                     const void *W, int64_t rows, int64_t cols, const float *X, int64_t n_tok, float *Y);

/* ---- decode groups ----
 * One token's products with up to KVQ_MATMUL_MAX_PARTS matrices of one
 * type and width that read the same input (a layer's q, k and v; gate
 * and up): outs[p].Y = outs[p].W x X in one job (a single decode
 * product, kvq_matmul_scratch or kvq_matmul_act8 with n_tok 1, is a group
 * of one, so each output has its own product's bits): the
 * threads' shares run across the matrices, so the group pays one
 * hand-off and one end where the products paid one each, and (int8) X
 * is quantised once.  The threshold applies to the group's
 * multiply-adds.  Bad arguments leave every Y untouched; the int8 call
 * returns false where kvq_matmul_act8 would. */
enum { KVQ_MATMUL_MAX_PARTS = 4 };
typedef struct kvq_matmul_out {
    const void *W;   /* rows x cols, the group's type */
    int64_t rows;
    float *Y;        /* rows outputs */
} kvq_matmul_out;
void kvq_matmul_group(kvq_pool *pool, double min_parallel_macs, float *scratch, size_t scratch_floats,
                      kvq_type wtype, int64_t cols, const float *X, int n, const kvq_matmul_out *outs);
bool kvq_matmul_act8_group(kvq_pool *pool, double min_parallel_macs, void *xq, size_t xq_bytes, kvq_type wtype,
                           int64_t cols, const float *X, int n, const kvq_matmul_out *outs);

/* ---- tile kernels (internal to matmul.c and its ISA files) ----
 * out[t*rows_per_tile + r] = sum_k w[r][k] * x[t][k] for one tile of
 * rows_per_tile weight rows and toks_per_tile token rows; unused slots of a
 * partial tile repeat a valid pointer (their results are dropped). */
typedef void (*kvq_gemm_tile_fn)(const float *const *w, const float *const *x, int64_t k,
                                 float *out);
typedef struct kvq_gemm_tile {
    kvq_gemm_tile_fn fn;
    int rows, toks;          /* tile shape */
} kvq_gemm_tile;

kvq_gemm_tile kvq_gemm_tile_scalar(void);
kvq_gemm_tile kvq_gemm_tile_avx2(void);
kvq_gemm_tile kvq_gemm_tile_avx512(void);

#endif
