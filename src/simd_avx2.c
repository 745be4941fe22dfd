/* simd_avx2.c - AVX2/FMA/F16C kernels (compiled with -mavx2 -mfma -mf16c,
 * called only after run-time detection). */
#include "simd.h"

void kvq_simd_install_avx2(kvq_type_traits table[KVQ_TYPE_COUNT]) {
    (void)table;
}
