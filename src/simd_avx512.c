/* simd_avx512.c - AVX-512 kernels (compiled with -mavx512f/bw/vl/dq,
 * called only after run-time detection). */
#include "simd.h"

void kvq_simd_install_avx512(kvq_type_traits table[KVQ_TYPE_COUNT]) {
    (void)table;
}
