/* bench_main.c - placeholder benchmark driver. */
#include "kvq.h"
#include <stdio.h>
int main(void) { printf("simd: %s\n", kvq_simd_level()); return 0; }
