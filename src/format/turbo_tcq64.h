/* turbo_tcq64.h - the byte tables of the trellis codes' look-up kernels
 * (turbo_tcq64.inc) and their instances; internal to src/format. */
#ifndef KVQ_TURBO_TCQ64_H
#define KVQ_TURBO_TCQ64_H

#include "turbo_internal.h"

/* What the kernels of one k read besides the codes, made once from the
 * committed codebook (kvq_turbo_tcq_codebook):
 *   word_bytes  byte 8i + b = k*i + b: 64-bit word i of the spread codes
 *               starts at the code byte of value 8i's window;
 *   word_bytes_w  the same words in the order 0 4 1 5 2 6 3 7 (word i
 *               starts at value 8 pi(i)'s window): the values' bytes
 *               come out so that widening them to int16 with the
 *               in-lane unpacks (low, high 8 bytes of each 16) gives
 *               values 0..31 and 32..63 of the half in order (the
 *               int16 query's dot);
 *   shift_lo    byte 8i + j = j*k: value 8i+j's window in word i;
 *   shift_hi    j*k + 7: the window's bits 7.. (the table it reads);
 *   steps       steps[s][e] = the codebook's value 128 s + e in steps of
 *               2^-TURBO_TCQ_STEP_BITS, a signed byte (s < 2^(k-1));
 *   steps_u     the same plus 128, an unsigned byte: what vpdpbusd
 *               multiplies with the int8 query (its first operand is
 *               unsigned), and, zero-extended to int16, vpdpwssd with the
 *               int16 query and the V sums' weights; 128 times the
 *               query's (weights') sum is taken off after. */
typedef struct tcq64_tables {
    _Alignas(64) uint8_t word_bytes[64];
    _Alignas(64) uint8_t word_bytes_w[64];
    _Alignas(64) uint8_t shift_lo[64];
    _Alignas(64) uint8_t shift_hi[64];
    _Alignas(64) uint8_t steps[8][128];
    _Alignas(64) uint8_t steps_u[8][128];
} tcq64_tables;

/* The tables of k = 2..4 (made at first use, thread-safe). */
const tcq64_tables *tcq64_tables_for(int k);

/* Put the look-up kernels (tcq_dot, tcq_axpy, tcq_dot_heads,
 * tcq_axpy_keys, tcq_dot_heads8, tcq_dot_heads16,
 * tcq_axpy_keys16) of k = 2..4 into kern:
 * the scalar instance (any machine; the same bits as the VBMI one, its
 * test oracle), or the AVX-512 VBMI one (call only where
 * kvq_cpu_features() has avx512vbmi and avx512vnni). */
void tcq64_install_scalar(turbo_kernels *kern);
void tcq64_install_vbmi(turbo_kernels *kern);

#endif
