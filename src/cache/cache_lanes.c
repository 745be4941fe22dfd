/* cache_lanes.c - rows in and out of the lanes layout of a K body
 * (cache_lanes.h).  Writes and reads of single rows only: the score
 * kernels read the layout in place (attn_codes.inc). */
#include "cache_lanes.h"
#include "quant_block.h"

static const kvq_lanes_spec k_nibbles = { 2, 4, 4 };       /* q4_0, iq4_nl */
static const kvq_lanes_spec k_nibbles_min = { 4, 4, 4 };   /* q4_1 */
static const kvq_lanes_spec k_bytes = { 2, 8, 8 };         /* q8_0 */

const kvq_lanes_spec *kvq_lanes_spec_of(kvq_type t) {
    switch (t) {
    case KVQ_TYPE_Q4_0:
    case KVQ_TYPE_IQ4_NL: return &k_nibbles;
    case KVQ_TYPE_Q4_1: return &k_nibbles_min;
    case KVQ_TYPE_Q8_0: return &k_bytes;
    default: return NULL;
    }
}

bool kvq_lanes_type(kvq_type t, int dim) {
    return kvq_lanes_spec_of(t) && dim > 0 && dim % 32 == 0 && dim / 32 <= KVQ_LANES_MAX_BLOCKS;
}

/* Code i (0..31) of a 4-bit block's 16 code bytes: byte i % 16, low
 * nibble for i < 16, high for i >= 16. */
static int nibble_code(const uint8_t *codes, int i) { return i < 16 ? codes[i] & 15 : codes[i - 16] >> 4; }

/* Where code i goes in its dword: 4-bit codes, nibble 4(i % 2) + (i % 8) / 2
 * of dword i / 8 (nibble k holds code 8j + 2(k % 4) + k / 4); 8-bit codes,
 * byte (0, 2, 1, 3)[i % 4] of dword i / 4. */
static int code_shift(const kvq_lanes_spec *s, int i) {
    static const int byte_of[4] = { 0, 2, 1, 3 };
    return s->code_bits == 4 ? 4 * (4 * (i % 2) + (i % 8) / 2) : 8 * byte_of[i % 4];
}

void kvq_lanes_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row) {
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    const int block = s->header + 4 * s->dwords, per_dword = 32 / s->code_bits, mask = (1 << s->code_bits) - 1;
    uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(s, dim);
    const int lane = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += block) {
        uint8_t *blk = group + (size_t)b * kvq_lanes_block_bytes(s), *codes = blk + KVQ_LANES * s->header;
        for (int h = 0; h < s->header; h += 2) memcpy(blk + KVQ_LANES * h + 2 * lane, row + h, 2);
        for (int j = 0; j < s->dwords; j++) {
            uint32_t dw = 0;
            for (int i = per_dword * j; i < per_dword * (j + 1); i++) {
                const int c = s->code_bits == 4 ? nibble_code(row + s->header, i) : row[s->header + i];
                dw |= (uint32_t)(c & mask) << code_shift(s, i);
            }
            kvq_wr32(codes + 64 * j + 4 * lane, dw);
        }
    }
}

void kvq_lanes_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row) {
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    const int block = s->header + 4 * s->dwords, per_dword = 32 / s->code_bits, mask = (1 << s->code_bits) - 1;
    const uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(s, dim);
    const int lane = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += block) {
        const uint8_t *blk = group + (size_t)b * kvq_lanes_block_bytes(s), *codes = blk + KVQ_LANES * s->header;
        for (int h = 0; h < s->header; h += 2) memcpy(row + h, blk + KVQ_LANES * h + 2 * lane, 2);
        memset(row + s->header, 0, (size_t)(block - s->header));
        for (int j = 0; j < s->dwords; j++) {
            const uint32_t dw = kvq_rd32(codes + 64 * j + 4 * lane);
            for (int i = per_dword * j; i < per_dword * (j + 1); i++) {
                const uint8_t c = (uint8_t)((dw >> code_shift(s, i)) & (uint32_t)mask);
                if (s->code_bits == 8) row[s->header + i] = c;
                else row[s->header + i % 16] |= (uint8_t)(i < 16 ? c : c << 4);
            }
        }
    }
}
