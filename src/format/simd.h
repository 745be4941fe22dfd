/* simd.h - hooks through which the SIMD files replace kernels in the
 * active trait table.  Each install function overwrites only the entries
 * it implements; everything else keeps the scalar reference. */
#ifndef KVQ_SIMD_H
#define KVQ_SIMD_H

#include "kvq_internal.h"

void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]);
void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]);

/* A trait table with the kernels of one SIMD level ("scalar", "avx2",
 * "avx512") installed over the scalar ones, so that tests and benchmarks
 * can compare every level the CPU has, not only the active one.  Returns
 * false (table untouched) when the level is unknown or the CPU (or
 * KVQ_FORCE_SCALAR) does not allow it. */
bool kvq_simd_table(const char *level, kvq_type_traits table[KVQ_TYPE_COUNT]);

/* iq4_nl's scale search steps (quant_block.h) of one level, for tests
 * that compare them with the scalar steps directly: NULL where the level
 * is unknown, not allowed (as kvq_simd_table) or has no steps of its own. */
struct kvq_iq4nl_ops;
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops(const char *level);
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx2(void);
const struct kvq_iq4nl_ops *kvq_simd_iq4nl_ops_avx512(void);

#endif
