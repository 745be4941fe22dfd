/* calib_query.c - what a calibration holds, for callers of the public
 * API (kvq.h, "calibration"). */
#include "calib.h"

_Static_assert(KVQ_CALIB_N_RATES <= 16, "kvq_calib_info holds at most 16 rates");

void kvq_calib_get_info(const kvq_calib *c, kvq_calib_info *out) {
    memset(out, 0, sizeof *out);
    if (!c) return;
    out->n_layer = c->n_layer;
    out->n_head_kv = c->n_head_kv;
    out->head_dim_k = c->head_dim_k;
    out->head_dim_v = c->head_dim_v;
    out->n_rates = c->n_rates;
    for (int r = 0; r < c->n_rates && r < 16; r++) out->rates[r] = c->rates[r];
    out->query_mix = c->query_mix;
    out->checksum = c->checksum;
    out->n_tokens = c->n_tokens;
}
