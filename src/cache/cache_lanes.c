/* cache_lanes.c - rows in and out of the lanes layout of a K body
 * (cache_lanes.h).  Writes and reads of single rows only: the score
 * kernels read the layout in place (attn_codes.inc). */
#include "cache_lanes.h"
#include "quant_block.h"

bool kvq_lanes_type(kvq_type t, int dim) {
    return t == KVQ_TYPE_Q4_0 && dim > 0 && dim % 32 == 0 && dim / 32 <= KVQ_LANES_MAX_BLOCKS;
}

size_t kvq_lanes_group_bytes(int dim) { return (size_t)(dim / 32) * KVQ_LANES_BLOCK; }

/* Code i (0..31) of a q4_0 block's 16 code bytes: byte i % 16, low
 * nibble for i < 16, high for i >= 16. */
static int q4_code(const uint8_t *codes, int i) { return i < 16 ? codes[i] & 15 : codes[i - 16] >> 4; }

/* Code i of a block stored as lanes dwords; nibble k of dword j holds
 * code 8j + 2(k % 4) + k / 4, so code i is nibble 4(i % 2) + (i % 8) / 2. */
static int lanes_nibble(int i) { return 4 * (i % 2) + (i % 8) / 2; }

void kvq_lanes_put_row(uint8_t *head, int dim, int pos, const uint8_t *row) {
    uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(dim);
    const int t = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += KVQ_BYTES_Q4_0) {
        uint8_t *blk = group + (size_t)b * KVQ_LANES_BLOCK;
        memcpy(blk + KVQ_LANES_D + 2 * t, row, 2);
        for (int j = 0; j < KVQ_LANES_DWORDS; j++) {
            uint32_t dw = 0;
            for (int i = 8 * j; i < 8 * j + 8; i++) dw |= (uint32_t)q4_code(row + 2, i) << (4 * lanes_nibble(i));
            kvq_wr32(blk + KVQ_LANES_CODES + 64 * j + 4 * t, dw);
        }
    }
}

void kvq_lanes_get_row(const uint8_t *head, int dim, int pos, uint8_t *row) {
    const uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(dim);
    const int t = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += KVQ_BYTES_Q4_0) {
        const uint8_t *blk = group + (size_t)b * KVQ_LANES_BLOCK;
        memcpy(row, blk + KVQ_LANES_D + 2 * t, 2);
        memset(row + 2, 0, 16);
        for (int j = 0; j < KVQ_LANES_DWORDS; j++) {
            const uint32_t dw = kvq_rd32(blk + KVQ_LANES_CODES + 64 * j + 4 * t);
            for (int i = 8 * j; i < 8 * j + 8; i++) {
                const uint8_t c = (uint8_t)((dw >> (4 * lanes_nibble(i))) & 15);
                row[2 + i % 16] |= (uint8_t)(i < 16 ? c : c << 4);
            }
        }
    }
}
