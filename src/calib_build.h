/* calib_build.h - fitting a calibration from the statistics `kvq
 * calibrate` measured (calib_stats.h): transforms per layer, KV head and
 * side by the chosen methods, allocations for every rate. */
#ifndef KVQ_CALIB_BUILD_H
#define KVQ_CALIB_BUILD_H

#include "calib.h"
#include "calib_stats.h"

/* pred_db (optional): [n_layer][n_head_kv][2 (K, V)][n_rates] the
 * predicted gain in dB of the fitted code over an isotropic code of the
 * same stream bits, each in its side's own error metric (model: every
 * coefficient's error is D(bits) of its unit variance). */
kvq_status kvq_calib_build(const kvq_calib_stats *s, const kvq_model *m, uint64_t model_hash,
                           kvq_calib_method method_k, kvq_calib_method method_v, int n_rates, const int *rates,
                           kvq_calib **out, double *pred_db, kvq_error *err);

#endif
