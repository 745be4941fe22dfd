/* kquants_simd.h - install hooks of the K-quant SIMD kernels
 * (kquants_avx2.c, kquants_avx512.c), called from types.c after run-time
 * CPU detection; each replaces only the K-quant rows of the table. */
#ifndef KVQ_KQUANTS_SIMD_H
#define KVQ_KQUANTS_SIMD_H

#include "kvq_internal.h"

void kvq_kquants_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]);
void kvq_kquants_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]);

#endif
