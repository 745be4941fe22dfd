/*
 * cache_lanes.h - the "lanes" layout of a K body: 16 keys side by side.
 *
 * Why: a K row scored alone leaves each key's dot product spread over
 * the lanes of a vector, and gathering 16 keys' partial sums into one
 * vector (the transposing add trees of attn_codes.inc) costs as many
 * instructions as the products themselves.  Stored with one key per
 * lane, the score kernel multiplies 16 keys' codes by the same query
 * values (broadcast) and each lane's sum is already its key's score:
 * no tree, no header gather (docs/benchmarks.md section 6).
 *
 * Layout of one KV head's body: groups of KVQ_LANES consecutive
 * positions (group g = positions 16g..16g+15, the body rounded up to
 * whole groups), each group the same bytes as its 16 rows, rearranged per
 * 32-value block b:
 *
 *   d[16]           the 16 keys' fp16 scales (key t at 2t)
 *   codes[4][16]    dword j of key t at 32 + 64j + 4t: codes 8j..8j+7 of
 *                   the key's block, nibble k of the dword (bits 4k..4k+3)
 *                   holding code 8j + 2(k % 4) + k / 4
 *
 * so that (dword >> 4p) & 0x000F000F is the int16 pair (code 8j + 2p,
 * code 8j + 2p + 1): one pairwise multiply-add (pmaddwd) with the query's
 * int16 pair (qi[8j + 2p], qi[8j + 2p + 1]), read as one int32, adds both
 * products into the key's lane.
 *
 * The layout is a property of the memory only: rows go in and come out
 * in the type's row format (kvq_lanes_put_row / kvq_lanes_get_row), state
 * files hold rows, and every reader without a lanes kernel gets the rows
 * unpacked.  Quantised values are the row format's, bit for bit.
 *
 * Types with a lanes layout: q4_0 (one row of kvq_lanes_spec_of; a type
 * is added by giving its block's header and code packing here and its
 * score kernel in attn_codes.inc).
 */
#ifndef KVQ_CACHE_LANES_H
#define KVQ_CACHE_LANES_H

#include "kvq_internal.h"

enum {
    KVQ_LANES = 16,                    /* keys per group                    */
    KVQ_LANES_D = 0,                   /* offset of the scales in a block   */
    KVQ_LANES_CODES = 2 * KVQ_LANES,   /* offset of the code dwords         */
    KVQ_LANES_DWORDS = 4,              /* code dwords per key and block     */
    KVQ_LANES_BLOCK = KVQ_LANES_CODES + KVQ_LANES_DWORDS * 4 * KVQ_LANES,   /* 288 bytes: 16 x 18 */
    KVQ_LANES_MAX_BLOCKS = 16,         /* rows of at most 512 values        */
    KVQ_LANES_ROW_MAX = KVQ_LANES_MAX_BLOCKS * KVQ_LANES_BLOCK / KVQ_LANES,   /* bytes of the widest row */
};

/* Whether K bodies of type t are stored in lanes (rows of `dim` values). */
bool kvq_lanes_type(kvq_type t, int dim);

/* Bytes of one group of dim-value rows (16 rows' bytes). */
size_t kvq_lanes_group_bytes(int dim);

/* Row `pos` of a head's lanes body `head` (rows of dim values): store a
 * row in the type's row format / read it back in that format. */
void kvq_lanes_put_row(uint8_t *head, int dim, int pos, const uint8_t *row);
void kvq_lanes_get_row(const uint8_t *head, int dim, int pos, uint8_t *row);

#endif
