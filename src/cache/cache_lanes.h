/*
 * cache_lanes.h - the "lanes" layout of a K body: 16 keys side by side.
 *
 * Why: a K row scored alone leaves each key's dot product spread over
 * the lanes of a vector, and gathering 16 keys' partial sums into one
 * vector (the transposing add trees of attn_codes.inc) costs as many
 * instructions as the products themselves.  Stored with one key per
 * lane, the score kernel multiplies 16 keys' codes by the same query
 * values (broadcast) and each lane's sum is already its key's score:
 * no tree, no header gather (docs/cache.md "Layout").
 *
 * Layout of one KV head's body: groups of KVQ_LANES consecutive
 * positions (group g = positions 16g..16g+15, the body rounded up to
 * whole groups), each group the same bytes as its 16 rows, rearranged per
 * 32-value block b (16 x the type's block bytes):
 *
 *   d[16]             the 16 keys' fp16 scales (key t at 2t)
 *   m[16]             the q*_1 types: their fp16 mins, likewise
 *   codes[dwords][16] dword j of key t at 64j + 4t (after the header):
 *                     the key's codes, plane by plane as the row format
 *                     splits them (quant_block.c: a 4-bit, 2-bit or
 *                     1-bit plane, or q8_0's bytes), each plane in `bits`
 *                     dwords, dword j of a plane holding the code pairs
 *                     p = j (16 / bits) + k (k < 16 / bits): code 2p at
 *                     bits b k .. b k + b - 1, code 2p + 1 at 16 + b k ..,
 *                     so that one shift and one mask give the int16 pair
 *                     (code 2p, code 2p + 1) of that plane, and one
 *                     pairwise multiply-add (pmaddwd) with the query's
 *                     pair (qi[2p], qi[2p+1]) read as one int32 adds both
 *                     products (a plane holding a code's high bits is
 *                     masked in place, its pairs already scaled by 2^shift;
 *                     q8_0's bytes, c0 c2 c1 c3 per dword, are
 *                     sign-extended; iq4_nl's nibbles looked up in its
 *                     book first).  q3_0 and q3_1: one plane of whole
 *                     3-bit codes, pairs p < 15 at bits 3k and 16 + 3k
 *                     of dword j (p = 5j + k), the last pair's bit b at
 *                     bits 15 and 31 of dword b: a shift and a mask per
 *                     pair, not a pair from each of two planes joined.

 * The layout is a property of the memory only: rows go in and come out
 * in the type's row format (kvq_lanes_put_row / kvq_lanes_get_row), state
 * files hold rows, and every reader without a lanes kernel gets the rows
 * unpacked.  Quantised values are the row format's, bit for bit.
 *
 * Every 32-value block type of attn_codes.inc has this layout: a type is
 * a row of kvq_lanes_spec_of (header and planes) and the same planes in
 * attn_codes.inc's lanes_block_sums.
 */
#ifndef KVQ_CACHE_LANES_H
#define KVQ_CACHE_LANES_H

#include "kvq_internal.h"
#include "quant_block.h"

enum {
    KVQ_LANES = 16,                    /* keys per group                         */
    KVQ_LANES_MAX_BLOCKS = 16,         /* rows of at most 512 values             */
    KVQ_LANES_ROW_MAX = KVQ_LANES_MAX_BLOCKS * KVQ_BYTES_Q8_0,   /* bytes of the widest row */
};

/* How one type's blocks sit in a group: the header, then the code planes
 * in the row's order (narrowest first, quant_block.c). */
enum { KVQ_LANES_MAX_PLANES = 2 };
typedef struct kvq_lanes_plane {
    int bits;            /* 8, 4, 3, 2 or 1: dwords per key and block       */
    int row_offset;      /* where the plane starts in a row's block (3 bits:
                            the bit plane, the crumb plane 4 bytes on)     */
    int shift;           /* the bits of the code it holds: code >> shift    */
} kvq_lanes_plane;
typedef struct kvq_lanes_spec {
    int header;          /* header bytes of a row's block: 2 (d) or 4 (d, m) */
    int n_planes;
    kvq_lanes_plane plane[KVQ_LANES_MAX_PLANES];
} kvq_lanes_spec;

/* The spec of type t, or NULL when its K bodies keep rows. */
const kvq_lanes_spec *kvq_lanes_spec_of(kvq_type t);

/* Whether K bodies of type t with rows of `dim` values are stored in lanes
 * (a spec, whole blocks, at most KVQ_LANES_MAX_BLOCKS). */
bool kvq_lanes_type(kvq_type t, int dim);

/* Bytes of one block of a group (16 rows' blocks), and of one group of
 * dim-value rows. */
static inline int kvq_lanes_block_bytes(const kvq_lanes_spec *s) {
    int dwords = 0;
    for (int p = 0; p < s->n_planes; p++) dwords += s->plane[p].bits;
    return KVQ_LANES * (s->header + 4 * dwords);
}
static inline size_t kvq_lanes_group_bytes(const kvq_lanes_spec *s, int dim) {
    return (size_t)(dim / 32) * (size_t)kvq_lanes_block_bytes(s);
}

/* Row `pos` of a head's lanes body `head` (type t, rows of dim values):
 * store a row in the type's row format / read it back in that format. */
void kvq_lanes_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row);
void kvq_lanes_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row);

/* One key's 32 codes of one plane of a block (each below 2^bits; bits 8,
 * 4, 2 or 1) into the key's `bits` dwords, dword j at dst + 64 j (dst =
 * the plane's first byte + 4 x the key's lane), and back: the placement
 * above, for every writer of this layout (block rows here, KVarN's K
 * records in cache_tiles_layout.c). */
void kvq_lanes_put_plane(const uint8_t codes[32], int bits, uint8_t *dst);
void kvq_lanes_get_plane(const uint8_t *src, int bits, uint8_t codes[32]);

/* ---- V bodies: the "pairs" layout (every 32-value block type: q8_0, the
 * 4-, 5- and 6-bit types in block pairs, the 3- and 2-bit ones in quads).
 *
 * Why: a V sum runs along the dims of each key (out[i] += w_t v_t[i]),
 * so V wants the dims in the lanes and two keys in each lane's int16
 * pair: one pairwise multiply-add (pmaddwd) of two keys' codes with
 * their two integer weights adds both keys' products to the lane's dim,
 * against, per key and vector of dims, a code widening, a conversion and
 * an FMA per head in floats (attn_codes.inc pairs_accumulate; the weights
 * w_t d_t rounded to int16 per chunk and head, docs/cache.md).
 *
 * Layout of one KV head's body: groups of KVQ_LANES positions as for K,
 * each group the same bytes as its 16 rows of nb = dim / 32 blocks:
 *
 *   d[nb][16]          block b's fp16 scale of key t at 32 b + 2 t
 *   m[nb][16]          q4_1: its fp16 mins, likewise
 *   unit[nb/2][8]      then, per block pair bp (blocks 2bp, 2bp + 1) and
 *                      key pair u (keys 2u, 2u + 1), 64 bytes: dword L
 *                      (L = 2j + e: block 2bp + e, j < 8) holds, for
 *                      k < 4, the code of dim 8k + j of key 2u at bits
 *                      4k .. 4k + 3 and of key 2u + 1 at 16 + 4k ..,
 *                      q4_0's and q4_1's as c - 8 in 4-bit two's
 *                      complement (c ^ 8: one shift pair gives the
 *                      signed int16 pair), iq4_nl's as the book
 *                      index (the nibbles
 *                      of a byte looked up, bytes 0 and 2 sign-extended
 *                      give a pair)
 *
 * so that a 64-byte load is 16 lanes (two blocks' 8 dims, alternating)
 * of two keys.  Rows of dim % 64 == 0 values (whole block pairs).
 *
 * q5_0, q5_1, q6_0, q6_1: the same units (nibbles unflipped), each then
 * followed by the dims' high bits, per lane L one byte (q5: key 2u's bit
 * k at bit k, key 2u + 1's at 4 + k; k the nibble's) or two (q6: key
 * 2u's crumb k at bit 2k of byte 2L, key 2u + 1's of byte 2L + 1), the
 * high part's top bit flipped (c - 16 = nib - 16 (1 - hi), c - 32 = nib
 * + 16 (crumb - 2)): 80 and 96 bytes a unit.
 *
 * q8_0 (rows of whole blocks): d[nb][16], then per block b and key pair
 * u 64 bytes whose dword L holds the bytes of dims L and L + 16 of key
 * 2u, then of key 2u + 1: the even and the odd bytes sign-extended are
 * the pairs of dims L and L + 16.
 *
 * q3_0, q3_1, q2_0 and q2_1 (rows of whole block quads, dim % 128 ==
 * 0): d[nb][16] (the q*_1 types: then m[nb][16]), then per block quad bq
 * (blocks 4bq .. 4bq + 3, dims 0..127 of the quad) and key pair u a unit:
 * 64 bytes of words, then (3-bit types) 32 bytes, one byte per lane and
 * key.  Field k of lane L is quad dim 16k + L, stored as f = c ^ 2^(bits
 * - 1): the signed code (c - 4, c - 2) in two's complement.  2 bits: dword
 * L holds key 2u's fields at bits 2k and key 2u + 1's at 16 + 2k.  3 bits:
 * dword L holds key 2u's fields 0-4 at bits 3k and its field 7's top bit
 * at bit 15 (key 2u + 1's from bit 16 on), and byte 2L (key 2u) or 2L + 1
 * (key 2u + 1) after the words holds fields 5 and 6 at bits 0 and 3 and
 * field 7's low two bits at bit 6.  A field shifted to the top of its
 * int16 is then the signed pair, one arithmetic shift away (field 7: its
 * two parts joined by one select); field k is block 4bq + k / 2's dims
 * 16 (k % 2) + L, q8_0's sums; a q*_1 value d c + m is d (c - o) + (m +
 * o d). */
bool kvq_vpairs_type(kvq_type t, int dim);
void kvq_vpairs_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row);
void kvq_vpairs_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row);
/* Bytes of a unit's nibbles (q4_*, iq4_nl, and of the 5- and 6-bit types)
 * or crumbs (the 3- and 2-bit types; q8_0: of its block); then 16 bytes
 * per further bit of a code (32 for the 3-bit types' one). */
enum { KVQ_VPAIRS_UNIT = 64 };
/* One key's share of a unit (its half: key 2u + half), written and read
 * back: the placements above, once for every writer of these units (block
 * rows in cache_lanes.c, KVarN's V records in cache_tiles_layout.c).
 *   block8: q8_0's 32 bytes of a block, as stored (int8);
 *   pair:   a block pair's 64 codes (block e's dim i at 32 e + i, each
 *           below 2^bits, bits 4-6), each nibble xor'ed with nib_flip (8:
 *           q4_0's and q4_1's c - 8; 0: iq4_nl's book indices, the low
 *           nibble of a 5- or 6-bit code), the high part's top bit flipped;
 *   quad:   a block quad's 128 codes (quad dim order, bits 2 or 3), each
 *           as c ^ 2^(bits-1).
 * Each sets only its own key's bits of the unit. */
void kvq_vpairs_put_block8(const uint8_t bytes[32], uint8_t *unit, int half);
void kvq_vpairs_get_block8(const uint8_t *unit, int half, uint8_t bytes[32]);
void kvq_vpairs_put_pair(int bits, unsigned nib_flip, const uint8_t codes[64], uint8_t *unit, int half);
void kvq_vpairs_get_pair(int bits, unsigned nib_flip, const uint8_t *unit, int half, uint8_t codes[64]);
void kvq_vpairs_put_quad(int bits, const uint8_t codes[128], uint8_t *unit, int half);
void kvq_vpairs_get_quad(int bits, const uint8_t *unit, int half, uint8_t codes[128]);
/* Bytes of one unit of a type whose codes have `bits` bits (the writer,
 * cache_lanes.c, and the kernels, attn_codes.inc, both read this). */
static inline size_t kvq_vpairs_unit_bytes(int bits) {
    return KVQ_VPAIRS_UNIT + (size_t)(bits == 3 ? 32 : bits > 4 && bits < 8 ? 16 * (bits - 4) : 0);
}
_Static_assert(KVQ_BYTES_IQ4_NL == KVQ_BYTES_Q4_0 && KVQ_BYTES_Q4_1 == KVQ_BYTES_Q4_0 + 2,
               "the pairs types: a header of 2 or 4 bytes and 16 bytes of nibbles");

#endif
