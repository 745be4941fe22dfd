/* calib_build.h - fitting a calibration from the statistics `kvq
 * calibrate` measured (calib_stats.h): transforms per layer, KV head and
 * side by the chosen methods, allocations for every rate. */
#ifndef KVQ_CALIB_BUILD_H
#define KVQ_CALIB_BUILD_H

#include "calib.h"
#include "calib_stats.h"

/* query_mix: the share of the queries' second moment in K's error metric
 * (0: plain squared error, the KLT; docs/calibration.md measured 0.2 best).
 * pred_db (optional): [n_layer][n_head_kv][2 (K, V)][n_rates] the
 * predicted gain in dB of the fitted code over an isotropic code of the
 * same stream bits, each in its side's own error metric (model: every
 * coefficient's error is D(bits) of its unit variance). */
kvq_status kvq_calib_build(const kvq_calib_stats *s, const kvq_model *m, uint64_t model_hash, double query_mix,
                           int n_rates, const int *rates, kvq_calib **out, double *pred_db, kvq_error *err);

/* One head's calibrated code fitted to plain rows (plain squared error,
 * the rows' covariance): kvq quant-test's calibrated round trip and the
 * Gaussian sanity check. */
typedef struct kvq_calib_rows {
    kvq_calib_head head;                 /* mean, T, T^-1, the rate's layout */
    uint8_t bits[KVQ_MAX_HEAD_DIM];
    float *mem;
} kvq_calib_rows;
kvq_status kvq_calib_fit_rows(const float *rows, int n, int d, int rate, kvq_calib_rows *out, kvq_error *err);
void kvq_calib_rows_free(kvq_calib_rows *c);
/* out = the row x coded and decoded (row: kvq_calib_row_bytes scratch). */
void kvq_calib_rows_round_trip(const kvq_calib_rows *c, const float *x, float *out, uint8_t *row);

#endif
