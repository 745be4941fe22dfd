/* attn_block_avx512_vnni.c - the AVX-512 attention kernels again, their
 * int16 multiply-adds accumulating in one instruction (AVX512_VNNI's
 * vpdpwssd): the level "avx512-vnni", chosen over "avx512" where the CPU
 * has AVX512_VNNI.  Same integers, same bits (attn_block_avx512.c). */
#define ATTN_BLOCK_VNNI 1
#include "attn_block_avx512.c"
