/* simd.h - hooks through which the SIMD files replace kernels in the
 * active trait table.  Each install function overwrites only the entries
 * it implements; everything else keeps the scalar reference. */
#ifndef KVQ_SIMD_H
#define KVQ_SIMD_H

#include "kvq_internal.h"

void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]);
void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]);

#endif
