/* attn_block_vnni.c - the AVX-512 attention kernels (attn_block_avx512.c)
 * built again with AVX512_VNNI (the Makefile's *_vnni.c flags): the level
 * "avx512-vnni", chosen by attn_block_best where
 * kvq_cpu_features()->avx512vnni.  One source, so the same code but for
 * the paired K sums of the one-4-bit-plane types (q4_0, q4_1, iq4_nl),
 * whose second int16 product is added by vpdpwssd, and the int8-query
 * sums of q4_0/q4_1, one vpdpbusd for vpmaddubsw + vpmaddwd: exact
 * integer sums either way, so the bits of the avx512 level. */
#define ATTN_BLOCK_VNNI 1
#include "attn_block_avx512.c"
