/* calib.h - KV caches calibrated on the model's own keys and values
 * (docs/calibration.md): the fitted transforms and bit allocations, the
 * row code of the calibrated types, and the calibration file.
 *
 * One KV head's side (K or V) is coded as
 *     y = T (x - mean)            T: d x d, fitted per layer and KV head
 *     y_i coded with b_i bits     b: the allocation for the type's rate
 * where T makes every coefficient unit-variance on the calibration data
 * and orders them by importance (the share of the output error a unit of
 * their error causes), so b is non-increasing.  Attention stays exact in
 * real arithmetic: a query is multiplied by T^-T (q'.y = q.(x - mean), and
 * the constant q.mean leaves the softmax unchanged), the accumulated
 * output by T^-1 (then mean added back, as the weights sum to 1). */
#ifndef KVQ_CALIB_H
#define KVQ_CALIB_H

#include "kvq_internal.h"

enum {
    KVQ_CALIB_N_RATES = 6,      /* the rates a calibration may hold            */
    KVQ_CALIB_MAX_LAYERS = 4096, KVQ_CALIB_MAX_HEADS = 4096,   /* sanity limits */
    KVQ_CALIB_MAX_BITS = 8,     /* most bits one coefficient gets              */
    KVQ_CALIB_MAX_GROUPS = 48,  /* runs of equal bits (trellis runs <= 128)    */
};

/* The rates of the calibrated types, in hundredths of a bit per value
 * (every scale and norm included): 225, 250, 300, 325, 350, 425. */
extern const int kvq_calib_rates[KVQ_CALIB_N_RATES];
/* Index of rate (hundredths) in kvq_calib_rates, -1 if none. */
int kvq_calib_rate_index(int rate);
/* Bytes of one calibrated row of d coefficients at `rate`: ceil(rate*d/800). */
int kvq_calib_row_bytes(int rate, int d);

/* ------------------------------------------------------ fitting (calib_fit.c) */

/* The transform of one side from the data's covariance C (about its mean)
 * and the metric G of the error that matters (NULL: the identity, plain
 * squared error; K: the queries' second moment, E[(q.dk)^2] = dk^T G dk):
 *     S = G^(1/2),  S C S = W diag(mu) W^T (mu descending),
 *     T = diag(mu)^(-1/2) W^T S,   T^-1 = S^-1 W diag(mu)^(1/2).
 * Each coefficient of y = T x has unit variance, and an error e in y costs
 * sum_i mu_i e_i^2 in the metric G: importance[i] = mu_i.  Eigenvalues are
 * floored at 1e-9 of the largest (so T stays finite; such coefficients
 * get no bits anyway).  fwd, inv: d*d row-major; importance: d. */
kvq_status kvq_calib_fit_transform(const double *cov, const double *metric, int d, double *fwd, double *inv,
                                   double *importance, kvq_error *err);

/* Reverse water-filling (Gaussian rate-distortion): the rates
 * r_i = max(0, log2(var_i / theta) / 2) with sum r_i = total_bits; returns
 * the water level theta (each coefficient's distortion is min(var_i, theta)). */
double kvq_reverse_waterfill(const double *var, int n, double total_bits, double *rates);

/* Distortion per unit-variance coefficient of the row code with `bits`
 * bits (0: the coefficient is not coded, distortion 1). */
double kvq_calib_distortion(int bits);

/* Integer allocation of code_bits bits to d coefficients of the given
 * importance (descending): minimises sum importance_i D(b_i) over b_i in
 * 0..KVQ_CALIB_MAX_BITS, counting the 6 start bits of every trellis run
 * (kvq_calib_profile).  Greedy on the marginal gain per bit, the discrete
 * form of reverse water-filling; the result is non-increasing. */
kvq_status kvq_calib_allocate(const double *importance, int d, int code_bits, uint8_t *bits, kvq_error *err);

/* ----------------------------------------------------- row code (calib_code.c) */

/* A run of coefficients with the same bit count: trellis-coded (2-4 bits,
 * the turbo*_tcq codebooks, at most 128 per run) or Lloyd-Max indices of
 * N(0,1) (1 and 5-8 bits). */
typedef struct kvq_calib_group {
    int bits, first, n;        /* coefficients first..first+n-1           */
    int bit0;                  /* first bit of the run in the code stream */
    bool tcq;
    float gain;                /* read as gain * scale * codebook value     */
    const float *codebook;     /* the run's levels (trellis: by state)      */
} kvq_calib_group;

/* How one side's rows are laid out at one rate. */
typedef struct kvq_calib_profile {
    int d;                     /* coefficients per row                    */
    int row_bytes;             /* fp16 scale + code stream, padded        */
    int n_coded;               /* coefficients with bits > 0 (a prefix)   */
    int n_groups;
    kvq_calib_group group[KVQ_CALIB_MAX_GROUPS];
    const float *weight;       /* [d] importance, for the scale fit       */
} kvq_calib_profile;

/* Lay out rows of d coefficients with allocation bits[d] (non-increasing)
 * in row_bytes; fails when the code does not fit.  unbiased: rows are read
 * with kvq_calib_logit_gain per run (K sides: unbiased logits), else as
 * coded (V sides, round trips: the MSE-best reconstruction). */
kvq_status kvq_calib_profile_make(const uint8_t *bits, const float *weight, int d, int row_bytes, bool unbiased,
                                  kvq_calib_profile *p, kvq_error *err);
/* Stream bits the allocation needs (values + trellis start bits). */
int kvq_calib_code_bits(const uint8_t *bits, int d);

/* Row of transformed coefficients y[d] -> row_bytes bytes: scale
 * g0 = RMS of the coded y_i, codes c_i of y_i / g0, then the stored fp16
 * scale g the weighted least-squares fit (sum w_i (y_i - g c_i)^2 least,
 * w: importance): the MSE-best row, which shrinks each coefficient by
 * about 1 - D(b_i) (an unbiased profile's reads undo that, K sides). */
void  kvq_calib_encode(const kvq_calib_profile *p, const float *y, uint8_t *row);
void  kvq_calib_decode(const kvq_calib_profile *p, const uint8_t *row, float *y);
float kvq_calib_dot(const kvq_calib_profile *p, const uint8_t *row, const float *q);
void  kvq_calib_axpy(const kvq_calib_profile *p, float w, const uint8_t *row, float *acc);

/* ------------------------- calibration (calib.c; the file: src/eval/calib_file.c) */

/* How a side's transform was fitted (the file records it; calib_build.c). */
typedef enum kvq_calib_method {
    KVQ_CALIB_QUERY_MIX = 1,   /* K: keys' covariance, metric mixing the queries' second moment with I */
    KVQ_CALIB_ATT2_WO = 2,     /* V: values weighted by sum p^2, metric Wo^T Wo                       */
} kvq_calib_method;
const char *kvq_calib_method_name(kvq_calib_method m);

/* One KV head's side. */
typedef struct kvq_calib_side {
    int d;
    float *mean;               /* [d]   subtracted before T                    */
    float *fwd;                /* [d*d] T                                       */
    float *inv;                /* [d*d] T^-1                                    */
    float *back;               /* [d*d] K: T^-T (for queries); V: T^-1 (outputs) */
    float *weight;             /* [d]   importance, descending                  */
    uint8_t *bits;             /* [n_rates][d] allocation per rate of the file  */
} kvq_calib_side;

struct kvq_calib {
    uint64_t model_hash;
    int n_layer, n_head_kv, head_dim_k, head_dim_v;
    int n_rates, rates[KVQ_CALIB_N_RATES];
    kvq_calib_method method_k, method_v;
    double query_mix;          /* K's metric: share of the queries' second moment */
    uint64_t checksum;         /* the file's (0 when not read from one): its identity */
    uint32_t n_tokens;         /* calibration positions per layer */
    kvq_calib_side *k, *v;     /* [n_layer][n_head_kv]            */
};

kvq_status kvq_calib_alloc(kvq_calib **out, int n_layer, int n_head_kv, int head_dim_k, int head_dim_v,
                           int n_rates, const int *rates, kvq_error *err);
kvq_calib_side *kvq_calib_side_at(const kvq_calib *c, int layer, int head, bool is_v);
/* Fill back[] from inv[] (after fitting or loading). */
void kvq_calib_side_finish(kvq_calib_side *s, bool is_v);
/* Index of rate in c->rates, or -1. */
int kvq_calib_find_rate(const kvq_calib *c, int rate);

/* kvq_calib_write is public (kvq.h). */
/* kvq_calib_load against a model hash (kvq_model_hash, or
 * kvq_model_file_hash of its file: the same). */
kvq_status kvq_calib_load_for(const char *path, uint64_t model_hash, kvq_calib **out, kvq_error *err);
/* The same from a file's bytes in memory (name: for messages). */
kvq_status kvq_calib_load_memory(const void *data, size_t size, const char *name, uint64_t model_hash, kvq_calib **out,
                                 kvq_error *err);
/* Make a calibration file's checksum match its bytes (the fuzz target's
 * second read; tests corrupting one value past the checksum). */
void kvq_calib_reseal(void *data, size_t size);

/* ------------------------------------------ in a cache (src/cache_calib.c) */

/* What a cache keeps of one KV head's side at its rate (copied from the
 * calibration at creation, so the calibration may be freed). */
typedef struct kvq_calib_head {
    int d;
    bool is_k;                 /* K side: back is T^-T, else T^-1             */
    const float *mean;         /* [d]                                          */
    const float *fwd;          /* [d*d] T: stored row y = T (x - mean)        */
    const float *back;         /* [d*d] K: T^-T (queries); V: T^-1 (outputs)  */
    kvq_calib_profile prof;    /* the row layout at the side's rate            */
} kvq_calib_head;

/* 1 / (1 - D(bits)) (1 for 0 bits): an MSE-optimal code keeps E[y c] =
 * E[c^2] = (1 - D) E[y^2], so a coefficient's reconstruction regresses on
 * the value with slope 1 - D; a K side reads its coded rows times this
 * gain, so q'.y_hat is unbiased for q'.y and the softmax keeps its
 * temperature (exact copies need none). */
double kvq_calib_logit_gain(int bits);

/* y = T (x - mean): the row the cache stores. */
void kvq_calib_head_forward(const kvq_calib_head *h, const float *x, float *y);
/* q' = T^-T q (K side): q'.y = q.(x - mean). */
void kvq_calib_head_query(const kvq_calib_head *h, const float *q, float *out);
/* acc <- T^-1 acc + mean: a stored row back to x, or (V side) the
 * attention output, acc = sum_t p_t y_t with sum p_t = 1.  (K sides keep
 * T^-T, whose transpose this applies.) */
void kvq_calib_head_output(const kvq_calib_head *h, float *acc);

#endif
