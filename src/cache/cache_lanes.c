/* cache_lanes.c - rows in and out of the lanes layout of a K body and
 * the pairs layout of a V body (cache_lanes.h).  Writes and reads of single rows only: the score
 * kernels read the layout in place (attn_codes.inc). */
#include "cache_lanes.h"

#define ONE(h, b0, o0) { h, 1, { { b0, o0, 0 }, { 0, 0, 0 } } }
#define TWO(h, b0, o0, s0, b1, o1, s1) { h, 2, { { b0, o0, s0 }, { b1, o1, s1 } } }
/* the row formats' planes (quant_block.c): narrowest first, it holds the
 * high bits; q8_0 one plane of bytes; the 3-bit types one plane of whole
 * codes (the row's bit plane and the crumb plane after it, read as one) */
static const kvq_lanes_spec k_specs[KVQ_TYPE_COUNT] = {
    [KVQ_TYPE_Q8_0] = ONE(2, 8, 2),
    [KVQ_TYPE_Q6_0] = TWO(2, 2, 2, 4, 4, 10, 0), [KVQ_TYPE_Q6_1] = TWO(4, 2, 4, 4, 4, 12, 0),
    [KVQ_TYPE_Q5_0] = TWO(2, 1, 2, 4, 4, 6, 0),  [KVQ_TYPE_Q5_1] = TWO(4, 1, 4, 4, 4, 8, 0),
    [KVQ_TYPE_Q4_0] = ONE(2, 4, 2),              [KVQ_TYPE_Q4_1] = ONE(4, 4, 4),
    [KVQ_TYPE_IQ4_NL] = ONE(2, 4, 2),
    [KVQ_TYPE_Q3_0] = ONE(2, 3, 2),              [KVQ_TYPE_Q3_1] = ONE(4, 3, 4),
    [KVQ_TYPE_Q2_0] = ONE(2, 2, 2),              [KVQ_TYPE_Q2_1] = ONE(4, 2, 4),
};
#undef ONE
#undef TWO

const kvq_lanes_spec *kvq_lanes_spec_of(kvq_type t) {
    return (unsigned)t < KVQ_TYPE_COUNT && k_specs[t].n_planes ? &k_specs[t] : NULL;
}

bool kvq_lanes_type(kvq_type t, int dim) {
    return kvq_lanes_spec_of(t) && dim > 0 && dim % 32 == 0 && dim / 32 <= KVQ_LANES_MAX_BLOCKS;
}

/* Code i (0..31) of a row plane of `bits` (quant_block.c): 8, byte i; 4,
 * byte i % 16, nibble i / 16; 2, byte i % 8, crumb i / 8; 1, bit i; 3, the
 * 3-bit types' bit plane (4 bytes, the code's bit 2) and the crumb plane
 * after it (its bits 0-1) together. */
static int row_plane_code(const uint8_t *p, int bits, int i) {
    switch (bits) {
    case 8: return p[i];
    case 4: return (p[i % 16] >> (4 * (i / 16))) & 15;
    case 3: return ((p[i / 8] >> (i % 8)) & 1) << 2 | ((p[4 + i % 8] >> (2 * (i / 8))) & 3);
    case 2: return (p[i % 8] >> (2 * (i / 8))) & 3;
    default: return (p[i / 8] >> (i % 8)) & 1;
    }
}
static void row_plane_set(uint8_t *p, int bits, int i, int c) {
    switch (bits) {
    case 8: p[i] = (uint8_t)c; break;
    case 4: p[i % 16] |= (uint8_t)(c << (4 * (i / 16))); break;
    case 3: p[i / 8] |= (uint8_t)((c >> 2) << (i % 8)); p[4 + i % 8] |= (uint8_t)((c & 3) << (2 * (i / 8))); break;
    case 2: p[i % 8] |= (uint8_t)(c << (2 * (i / 8))); break;
    default: p[i / 8] |= (uint8_t)(c << (i % 8)); break;
    }
}

/* Where code i sits in a lanes plane of `bits` (1, 2, 4, 8): its pair p =
 * i / 2 is k = p % (16 / bits) of dword p / (16 / bits), the even code in
 * the low half, the odd one in the high half.  3 bits: pairs p < 15 are
 * k = p % 5 of dword p / 5 (bits 3k of each half); the last pair's bit b
 * is the top bit of each half of dword b. */
static int lanes_dword(int bits, int i) { return bits == 3 ? i / 10 : i / 2 / (16 / bits); }
static int lanes_bit(int bits, int i) { return (i % 2) * 16 + (bits == 3 ? 3 * (i / 2 % 5) : bits * (i / 2 % (16 / bits))); }

/* The loops below are inlined with `bits` a constant (the switches), so
 * that they fold into fixed shifts: every K row of a cache write, and
 * every KVarN K record (cache_tiles_layout.c), goes through them. */
static inline void put_plane_bits(const uint8_t *codes, int bits, uint8_t *dst) {
    uint32_t dw[8] = { 0 };
    const int whole = bits == 3 ? 30 : 32;   /* the pairs in fields */
    KVQ_UNROLL_N(32) for (int i = 0; i < whole; i++) dw[lanes_dword(bits, i)] |= (uint32_t)codes[i] << lanes_bit(bits, i);
    if (bits == 3)
        for (int b = 0; b < 3; b++) dw[b] |= (uint32_t)(codes[30] >> b & 1) << 15 | (uint32_t)(codes[31] >> b & 1) << 31;
    for (int j = 0; j < bits; j++) kvq_wr32(dst + 64 * j, dw[j]);
}
static inline void get_plane_bits(const uint8_t *src, int bits, uint8_t *codes) {
    const int whole = bits == 3 ? 30 : 32;
    KVQ_UNROLL_N(32) for (int i = 0; i < whole; i++)
        codes[i] = (uint8_t)((kvq_rd32(src + 64 * lanes_dword(bits, i)) >> lanes_bit(bits, i)) & ((1u << bits) - 1));
    if (bits == 3) {
        codes[30] = codes[31] = 0;
        for (int b = 0; b < 3; b++) {
            const uint32_t d = kvq_rd32(src + 64 * b);
            codes[30] |= (uint8_t)((d >> 15 & 1) << b);
            codes[31] |= (uint8_t)((d >> 31 & 1) << b);
        }
    }
}
static inline void row_codes_bits(const uint8_t *p, int bits, uint8_t *codes) {
    KVQ_UNROLL_N(32) for (int i = 0; i < 32; i++) codes[i] = (uint8_t)row_plane_code(p, bits, i);
}

/* fn(a, bits, b) with `bits` (8, 4, 3, 2, else 1) a constant in each
 * case, so that the inlined loop folds into fixed shifts. */
#define WITH_PLANE_BITS(fn, a, bits, b)                                                 \
    switch (bits) {                                                                     \
    case 8: fn(a, 8, b); break;                                                         \
    case 4: fn(a, 4, b); break;                                                         \
    case 3: fn(a, 3, b); break;                                                         \
    case 2: fn(a, 2, b); break;                                                         \
    default: fn(a, 1, b); break;                                                        \
    }

void kvq_lanes_put_plane(const uint8_t codes[32], int bits, uint8_t *dst) {
    WITH_PLANE_BITS(put_plane_bits, codes, bits, dst);
}

void kvq_lanes_get_plane(const uint8_t *src, int bits, uint8_t codes[32]) {
    WITH_PLANE_BITS(get_plane_bits, src, bits, codes);
}

/* A row plane's 32 codes (quant_block.c's order), `bits` a constant in
 * each case. */
static void row_plane_codes(const uint8_t *p, int bits, uint8_t codes[32]) {
    WITH_PLANE_BITS(row_codes_bits, p, bits, codes);
}

/* A row plane's 32 codes (quant_block.c's order) into a key's lanes
 * plane, the two steps inlined together. */
static inline void put_row_plane_bits(const uint8_t *p, int bits, uint8_t *dst) {
    uint8_t codes[32];
    row_codes_bits(p, bits, codes);
    put_plane_bits(codes, bits, dst);
}
static void put_row_plane(const uint8_t *p, int bits, uint8_t *dst) {
    WITH_PLANE_BITS(put_row_plane_bits, p, bits, dst);
}

void kvq_lanes_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row) {
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    const int row_block = kvq_lanes_block_bytes(s) / KVQ_LANES;
    uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(s, dim);
    const int lane = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += row_block) {
        uint8_t *blk = group + (size_t)b * kvq_lanes_block_bytes(s), *codes = blk + KVQ_LANES * s->header;
        for (int h = 0; h < s->header; h += 2) memcpy(blk + KVQ_LANES * h + 2 * lane, row + h, 2);
        for (int pl = 0; pl < s->n_planes; pl++) {
            const kvq_lanes_plane *P = &s->plane[pl];
            put_row_plane(row + P->row_offset, P->bits, codes + 4 * lane);
            codes += 64 * P->bits;
        }
    }
}

void kvq_lanes_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row) {
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    const int row_block = kvq_lanes_block_bytes(s) / KVQ_LANES;
    const uint8_t *group = head + (size_t)(pos / KVQ_LANES) * kvq_lanes_group_bytes(s, dim);
    const int lane = pos % KVQ_LANES;
    for (int b = 0; b < dim / 32; b++, row += row_block) {
        const uint8_t *blk = group + (size_t)b * kvq_lanes_block_bytes(s), *codes = blk + KVQ_LANES * s->header;
        for (int h = 0; h < s->header; h += 2) memcpy(row + h, blk + KVQ_LANES * h + 2 * lane, 2);
        memset(row + s->header, 0, (size_t)(row_block - s->header));
        for (int pl = 0; pl < s->n_planes; pl++) {
            const kvq_lanes_plane *P = &s->plane[pl];
            uint8_t c[32];
            kvq_lanes_get_plane(codes + 4 * lane, P->bits, c);
            for (int i = 0; i < 32; i++) row_plane_set(row + P->row_offset, P->bits, i, c[i]);
            codes += 64 * P->bits;
        }
    }
}

/* ---- V pairs (q8_0 below; the 3- and 2-bit types; q4_0, q4_1, iq4_nl): code i of a row block is nibble
 * i / 16 of byte i % 16 after the fp16 header (d, or d and m;
 * quant_block.c); q4_0's and q4_1's stored as c - 8 (c ^ 8, the kernel
 * reads signed nibbles), iq4_nl's as they are (book indices). */

/* The unit shapes follow from the row format's planes (k_specs): bits per
 * code. */
static int code_bits(kvq_type t) {
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    int bits = 0;
    for (int p = 0; s && p < s->n_planes; p++) bits += s->plane[p].bits;
    return bits;
}
/* the 3- and 2-bit types: block quads */
static bool vpairs_quad(kvq_type t) { return code_bits(t) == 2 || code_bits(t) == 3; }
/* the 5- and 6-bit types: q4_0's units with their high bits after them */
static int vpairs_high_bits(kvq_type t) { return code_bits(t) == 5 || code_bits(t) == 6 ? code_bits(t) - 4 : 0; }
static bool vpairs_wide(kvq_type t) { return vpairs_high_bits(t) > 0; }
static size_t vpairs_unit_bytes(kvq_type t) { return kvq_vpairs_unit_bytes(code_bits(t)); }

bool kvq_vpairs_type(kvq_type t, int dim) {
    if (!kvq_lanes_spec_of(t) || dim <= 0 || dim / 32 > KVQ_LANES_MAX_BLOCKS) return false;
    const int whole = t == KVQ_TYPE_Q8_0 ? 32 : vpairs_quad(t) ? 128 : 64;   /* a unit's values */
    return dim % whole == 0;
}

/* q8_0: per block b and key pair u a 64-byte unit, dword L holding bytes
 * (dim L, dim L + 16) of key 2u, then of key 2u + 1. */
void kvq_vpairs_put_block8(const uint8_t bytes[32], uint8_t *unit, int half) {
    for (int i = 0; i < 32; i++) unit[4 * (i % 16) + 2 * half + i / 16] = bytes[i];
}
void kvq_vpairs_get_block8(const uint8_t *unit, int half, uint8_t bytes[32]) {
    for (int i = 0; i < 32; i++) bytes[i] = unit[4 * (i % 16) + 2 * half + i / 16];
}
static size_t vpairs8_unit_at(int nb, int lane, int b) {
    return (size_t)nb * 2 * KVQ_LANES + (size_t)(b * 8 + lane / 2) * KVQ_VPAIRS_UNIT;
}

static void vpairs8_put_row(uint8_t *head, int dim, int pos, const uint8_t *row) {
    const int nb = dim / 32, lane = pos % KVQ_LANES;
    uint8_t *group = head + (size_t)(pos / KVQ_LANES) * (size_t)nb * KVQ_LANES * KVQ_BYTES_Q8_0;
    for (int b = 0; b < nb; b++, row += KVQ_BYTES_Q8_0) {
        memcpy(group + 2 * (KVQ_LANES * b + lane), row, 2);
        kvq_vpairs_put_block8(row + 2, group + vpairs8_unit_at(nb, lane, b), lane % 2);
    }
}

static void vpairs8_get_row(const uint8_t *head, int dim, int pos, uint8_t *row) {
    const int nb = dim / 32, lane = pos % KVQ_LANES;
    const uint8_t *group = head + (size_t)(pos / KVQ_LANES) * (size_t)nb * KVQ_LANES * KVQ_BYTES_Q8_0;
    for (int b = 0; b < nb; b++, row += KVQ_BYTES_Q8_0) {
        memcpy(row, group + 2 * (KVQ_LANES * b + lane), 2);
        kvq_vpairs_get_block8(group + vpairs8_unit_at(nb, lane, b), lane % 2, row + 2);
    }
}

/* The 4-bit types' nibbles are stored as c - 8 (c ^ 8) where the code is
 * a signed value's offset (q4_0, q4_1), as they are where it is a book
 * index (iq4_nl) or the low part of a wider code (q5, q6). */
static unsigned vpairs_nib_flip(kvq_type t) { return t == KVQ_TYPE_IQ4_NL || vpairs_wide(t) ? 0u : 8u; }

/* The 4- to 6-bit types' units (cache_lanes.h): KVQ_VPAIRS_UNIT bytes of
 * nibbles, then (5 bits) one byte or (6 bits) two per lane of high bits.
 * Lane L = 2j + e holds dims 8k + j (k < 4) of block e of the pair: key
 * 2u's nibbles at bits 4k of the lane's first 16-bit half, key 2u + 1's
 * in its second; the high bit of key 2u's nibble k at bit k of byte L and
 * key 2u + 1's at bit 4 + k (5 bits), or key 2u's crumb k at bit 2k of
 * byte 2L and key 2u + 1's of byte 2L + 1 (6 bits).  The high part is
 * stored with its top bit flipped (c - 16 = nib - 16 (1 - hi), c - 32 =
 * nib + 16 (crumb - 2): the kernel's signed fields). */
void kvq_vpairs_put_pair(int bits, unsigned nib_flip, const uint8_t codes[64], uint8_t *unit, int half) {
    const int hb = bits - 4;
    const unsigned hmask = (1u << hb) - 1, hflip = hb ? 1u << (hb - 1) : 0u;
    for (int L = 0; L < 16; L++) {
        const int e = L % 2, j = L / 2;
        unsigned lo = 0, hi = 0;
        for (int k = 0; k < 4; k++) {
            const unsigned c = codes[32 * e + 8 * k + j];
            lo |= ((c & 15u) ^ nib_flip) << (4 * k);
            hi |= ((c >> 4 & hmask) ^ hflip) << (hb * k);
        }
        kvq_wr16(unit + 4 * L + 2 * half, (uint16_t)lo);
        if (hb == 1) {   /* the byte is shared with the other key of the pair */
            uint8_t *p = unit + KVQ_VPAIRS_UNIT + L;
            *p = (uint8_t)((*p & ~(15u << (4 * half))) | hi << (4 * half));
        } else if (hb == 2) {
            unit[KVQ_VPAIRS_UNIT + 2 * L + half] = (uint8_t)hi;
        }
    }
}
void kvq_vpairs_get_pair(int bits, unsigned nib_flip, const uint8_t *unit, int half, uint8_t codes[64]) {
    const int hb = bits - 4;
    const unsigned hmask = (1u << hb) - 1, hflip = hb ? 1u << (hb - 1) : 0u;
    for (int L = 0; L < 16; L++) {
        const int e = L % 2, j = L / 2;
        const unsigned lo = kvq_rd16(unit + 4 * L + 2 * half);
        const unsigned hi = hb == 1   ? (unsigned)unit[KVQ_VPAIRS_UNIT + L] >> (4 * half)
                            : hb == 2 ? (unsigned)unit[KVQ_VPAIRS_UNIT + 2 * L + half]
                                      : 0u;
        for (int k = 0; k < 4; k++)
            codes[32 * e + 8 * k + j] =
                (uint8_t)((((lo >> (4 * k)) & 15u) ^ nib_flip) | ((hi >> (hb * k) & hmask) ^ hflip) << 4);
    }
}

/* Where, in a group, the unit of key `lane`'s pair for block pair (or,
 * 3 and 2 bits, block quad) `unit` starts: after the headers, 8 units per
 * block pair (quad), one per key pair. */
static size_t vpairs_unit_at(kvq_type t, int nb, int hdr, int lane, int unit) {
    return (size_t)nb * (size_t)hdr * KVQ_LANES + (size_t)(unit * 8 + lane / 2) * vpairs_unit_bytes(t);
}

/* One key's half of a block-quad unit (cache_lanes.h): code d (dim d of
 * the quad, 0..127) is field k = d / 16 of lane L = d % 16, stored as
 * f = c ^ 2^(bits-1), the signed code c - 2^(bits-1) in two's complement.
 * 2 bits: field k at bits 2k of the lane's 16-bit word.  3 bits: fields
 * 0-4 at bits 3k of the word, field 7's top bit at its bit 15, and fields
 * 5, 6 and field 7's low two bits at bits 0, 3 and 6 of the lane's byte
 * after the words, so that all but field 7 are one field of one int16
 * (a shift to the top, an arithmetic shift back: attn_codes.inc). */
static void quad_lane_put(int bits, const uint8_t *codes, int L, uint8_t *word, uint8_t *byte) {
    unsigned f[8], w = 0;
    for (int k = 0; k < 8; k++) f[k] = codes[16 * k + L] ^ (1u << (bits - 1));
    if (bits == 2) {
        for (int k = 0; k < 8; k++) w |= f[k] << (2 * k);
    } else {
        for (int k = 0; k < 5; k++) w |= f[k] << (3 * k);
        w |= (f[7] >> 2) << 15;
        *byte = (uint8_t)(f[5] | f[6] << 3 | (f[7] & 3u) << 6);
    }
    kvq_wr16(word, (uint16_t)w);
}
static void quad_lane_get(int bits, const uint8_t *word, const uint8_t *byte, int L, uint8_t *codes) {
    const unsigned w = kvq_rd16(word), flip = 1u << (bits - 1);
    for (int k = 0; k < 8; k++) {
        unsigned f;
        if (bits == 2) f = w >> (2 * k) & 3u;
        else if (k < 5) f = w >> (3 * k) & 7u;
        else if (k < 7) f = (unsigned)*byte >> (3 * (k - 5)) & 7u;
        else f = (w >> 15) << 2 | (unsigned)*byte >> 6;
        codes[16 * k + L] = (uint8_t)(f ^ flip);
    }
}

void kvq_vpairs_put_quad(int bits, const uint8_t codes[128], uint8_t *unit, int half) {
    for (int L = 0; L < 16; L++)
        quad_lane_put(bits, codes, L, unit + 4 * L + 2 * half, unit + KVQ_VPAIRS_UNIT + 2 * L + half);
}
void kvq_vpairs_get_quad(int bits, const uint8_t *unit, int half, uint8_t codes[128]) {
    for (int L = 0; L < 16; L++)
        quad_lane_get(bits, unit + 4 * L + 2 * half, unit + KVQ_VPAIRS_UNIT + 2 * L + half, L, codes);
}

/* A row block's 32 codes, its planes joined (each holds the code's bits
 * shift.. of it: quant_block.c's planes, k_specs), and back (into a block
 * zeroed past its header). */
static void row_block_codes(const kvq_lanes_spec *s, const uint8_t *blk, uint8_t codes[32]) {
    memset(codes, 0, 32);
    for (int p = 0; p < s->n_planes; p++) {
        uint8_t c[32];
        row_plane_codes(blk + s->plane[p].row_offset, s->plane[p].bits, c);
        for (int i = 0; i < 32; i++) codes[i] |= (uint8_t)(c[i] << s->plane[p].shift);
    }
}
static void row_block_set(const kvq_lanes_spec *s, uint8_t *blk, const uint8_t codes[32]) {
    for (int i = 0; i < 32; i++)
        for (int p = 0; p < s->n_planes; p++) {
            const kvq_lanes_plane *P = &s->plane[p];
            row_plane_set(blk + P->row_offset, P->bits, i, codes[i] >> P->shift & ((1 << P->bits) - 1));
        }
}

/* The row blocks one unit holds: a block quad (3 and 2 bits) or a block
 * pair (4-6 bits); its codes in a unit's order (block e's dim i at 32 e +
 * i) into key `half`'s share of it, and back. */
static int vpairs_unit_blocks(kvq_type t) { return vpairs_quad(t) ? 4 : 2; }
static void vpairs_put_unit(kvq_type t, const uint8_t *codes, uint8_t *unit, int half) {
    if (vpairs_quad(t)) kvq_vpairs_put_quad(code_bits(t), codes, unit, half);
    else kvq_vpairs_put_pair(code_bits(t), vpairs_nib_flip(t), codes, unit, half);
}
static void vpairs_get_unit(kvq_type t, const uint8_t *unit, int half, uint8_t *codes) {
    if (vpairs_quad(t)) kvq_vpairs_get_quad(code_bits(t), unit, half, codes);
    else kvq_vpairs_get_pair(code_bits(t), vpairs_nib_flip(t), unit, half, codes);
}

/* Every type but q8_0: a group is d[nb][16] (the q*_1 types: then
 * m[nb][16]), then the units. */
void kvq_vpairs_put_row(kvq_type t, uint8_t *head, int dim, int pos, const uint8_t *row) {
    if (t == KVQ_TYPE_Q8_0) { vpairs8_put_row(head, dim, pos, row); return; }
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);   /* the row block's header, planes and bytes */
    const int nb = dim / 32, lane = pos % KVQ_LANES, hdr = s->header, bytes = kvq_lanes_block_bytes(s) / KVQ_LANES;
    const int per = vpairs_unit_blocks(t);
    uint8_t *group = head + (size_t)(pos / KVQ_LANES) * (size_t)nb * KVQ_LANES * (size_t)bytes;
    for (int b = 0; b < nb; b++)
        for (int h = 0; h < hdr; h += 2)   /* d[nb][16], then m[nb][16] */
            memcpy(group + (size_t)h * nb * KVQ_LANES + 2 * (KVQ_LANES * b + lane), row + (size_t)b * bytes + h, 2);
    for (int u = 0; u < nb / per; u++) {
        uint8_t codes[128];
        for (int e = 0; e < per; e++) row_block_codes(s, row + (size_t)(per * u + e) * bytes, codes + 32 * e);
        vpairs_put_unit(t, codes, group + vpairs_unit_at(t, nb, hdr, lane, u), lane % 2);
    }
}

void kvq_vpairs_get_row(kvq_type t, const uint8_t *head, int dim, int pos, uint8_t *row) {
    if (t == KVQ_TYPE_Q8_0) { vpairs8_get_row(head, dim, pos, row); return; }
    const kvq_lanes_spec *s = kvq_lanes_spec_of(t);
    const int nb = dim / 32, lane = pos % KVQ_LANES, hdr = s->header, bytes = kvq_lanes_block_bytes(s) / KVQ_LANES;
    const int per = vpairs_unit_blocks(t);
    const uint8_t *group = head + (size_t)(pos / KVQ_LANES) * (size_t)nb * KVQ_LANES * (size_t)bytes;
    for (int b = 0; b < nb; b++) {
        for (int h = 0; h < hdr; h += 2)
            memcpy(row + (size_t)b * bytes + h, group + (size_t)h * nb * KVQ_LANES + 2 * (KVQ_LANES * b + lane), 2);
        memset(row + (size_t)b * bytes + hdr, 0, (size_t)(bytes - hdr));
    }
    for (int u = 0; u < nb / per; u++) {
        uint8_t codes[128];
        vpairs_get_unit(t, group + vpairs_unit_at(t, nb, hdr, lane, u), lane % 2, codes);
        for (int e = 0; e < per; e++) row_block_set(s, row + (size_t)(per * u + e) * bytes, codes + 32 * e);
    }
}
