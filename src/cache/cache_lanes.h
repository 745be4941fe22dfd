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
 *                     the key's codes packed so that two shifts or masks
 *                     give int16 pairs of consecutive codes (2p, 2p+1),
 *                     one pairwise multiply-add (pmaddwd) with the
 *                     query's pair (qi[2p], qi[2p+1]) read as one int32:
 *     4-bit codes (q4_0, q4_1, iq4_nl), 4 dwords: codes 8j..8j+7, nibble
 *       k (bits 4k..4k+3) holding code 8j + 2(k % 4) + k / 4, so that
 *       (dword >> 4p) & 0x000F000F is the pair (8j + 2p, 8j + 2p + 1);
 *     8-bit codes (q8_0), 8 dwords: codes 4j..4j+3 as bytes c0 c2 c1 c3,
 *       so that the low and high bytes of each 16-bit half, sign-extended,
 *       are the pairs (4j, 4j + 1) and (4j + 2, 4j + 3).
 *
 * The layout is a property of the memory only: rows go in and come out
 * in the type's row format (kvq_lanes_put_row / kvq_lanes_get_row), state
 * files hold rows, and every reader without a lanes kernel gets the rows
 * unpacked.  Quantised values are the row format's, bit for bit.
 *
 * A type is added by a row of kvq_lanes_spec_of (its header and code
 * packing) and its pair extraction in attn_codes.inc's lanes_scores.
 */
#ifndef KVQ_CACHE_LANES_H
#define KVQ_CACHE_LANES_H

#include "kvq_internal.h"

enum {
    KVQ_LANES = 16,                    /* keys per group                         */
    KVQ_LANES_MAX_BLOCKS = 16,         /* rows of at most 512 values             */
    KVQ_LANES_ROW_MAX = KVQ_LANES_MAX_BLOCKS * 34,   /* bytes of the widest row (q8_0) */
};

/* How one type's blocks sit in a group. */
typedef struct kvq_lanes_spec {
    int header;          /* header bytes of a row's block: 2 (d) or 4 (d, m) */
    int dwords;          /* code dwords per key and block                   */
    int code_bits;       /* 4 or 8                                          */
} kvq_lanes_spec;

/* The spec of type t, or NULL when its K bodies keep rows. */
const kvq_lanes_spec *kvq_lanes_spec_of(kvq_type t);

/* Whether K bodies of type t with rows of `dim` values are stored in lanes
 * (a spec, whole blocks, at most KVQ_LANES_MAX_BLOCKS). */
bool kvq_lanes_type(kvq_type t, int dim);

/* Bytes of one block of a group (16 rows' blocks), and of one group of
 * dim-value rows. */
static inline int kvq_lanes_block_bytes(const kvq_lanes_spec *s) { return KVQ_LANES * (s->header + 4 * s->dwords); }
static inline size_t kvq_lanes_group_bytes(const kvq_lanes_spec *s, int dim) {
    return (size_t)(dim / 32) * (size_t)kvq_lanes_block_bytes(s);
}

/* Row `pos` of a head's lanes body `head` (type t, rows of dim values):
 * store a row in the type's row format / read it back in that format. */
void kvq_lanes_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row);
void kvq_lanes_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row);

#endif
