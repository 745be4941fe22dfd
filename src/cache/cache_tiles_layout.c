/*
 * cache_tiles_layout.c - where a KVarN record's codes sit in the cache's
 * memory (cache_tiles_layout.h).
 *
 * A record's payload is token-major (kvarn.h): one token's `width` codes
 * together, which makes each key's score a horizontal sum and each value a
 * float to widen and multiply per head.  In the cache the same bytes are
 * rearranged as the block types' bodies are (cache_lanes.h), per group of
 * 16 tokens (tokens 16g .. 16g + 15 of the tile, 2 width bits bytes a
 * group) and 32-channel block b, so that the block types' lanes and pairs
 * kernels read them (attn_kvarn.inc):
 *
 *   K (lanes): block b of group g at 64 bits (nb g + b), one dword per
 *     token lane l and plane dword j at 64 j + 4 l; the code split into
 *     the planes of the matching q*_1 type (narrowest first: 5 bits =
 *     bit 4, then 0-3; 6 = bits 4-5, then 0-3), plane dword j holding
 *     the pairs p = j (16 / pbits) + k of channels (2p, 2p + 1) at bits
 *     pbits k and 16 + pbits k; 3-bit codes whole in one plane as q3_1's
 *     (cache_lanes.h); 8-bit codes as q8_0's bytes c0 c2 c1 c3 per dword,
 *     read as code - 128.
 *   V (pairs): the units of the matching q*_0 type (q8_0's for 8 bits,
 *     the block quads of q3_0 / q2_0 for 3 and 2 bits, widths of 128),
 *     two tokens' codes of a channel in one int32 lane, each code stored
 *     as code - 2^(bits-1) in two's complement (the top bit of its high
 *     part flipped), summed with the token's S_t as every block's scale.
 *
 * Both are the record's 128 * width * bits / 8 bytes, so a record keeps
 * its size and its metadata's place; only files (state, codecs) and the
 * readers that need a token's codes see the token-major order, through
 * the two conversions here, token by token.
 */
#include "cache_tiles_layout.h"
#include "cache_lanes.h"

enum { T = KVQ_KVARN_TILE, GROUP = 16 };

bool kvq_tiles_layout_applies(kvq_kvarn_shape s) {
    if ((s.width != 64 && s.width != 128) || !kvq_kvarn_bits_valid(s.bits)) return false;
    return s.is_key || s.bits >= 4 || s.width == 128;   /* V block quads: whole 128 channels */
}

/* The planes of a K code of `bits` (the q*_1 types' split, cache_lanes.h;
 * 8 bits one plane, q8_0's). */
static int k_planes(int bits, int pbits[2], int shift[2]) {
    switch (bits) {
    case 5: pbits[0] = 1; shift[0] = 4; pbits[1] = 4; shift[1] = 0; return 2;
    case 6: pbits[0] = 2; shift[0] = 4; pbits[1] = 4; shift[1] = 0; return 2;
    default: pbits[0] = bits; shift[0] = 0; return 1;   /* 2, 3 (whole codes, as q3_1's), 4, 8 */
    }
}

/* K: token t's codes (width of them) into its lane of each block, plane
 * by plane, by the block types' placement (kvq_lanes_put_plane); 8-bit
 * codes stored as code - 128 (q8_0's bytes), the others as they are. */
static void k_put_token(kvq_kvarn_shape s, const uint8_t *codes, int t, uint8_t *payload) {
    int pbits[2], shift[2];
    const int n = k_planes(s.bits, pbits, shift), nb = s.width / 32;
    const unsigned flip = s.bits == 8 ? 0x80u : 0u;
    for (int b = 0; b < nb; b++) {
        uint8_t *dst = payload + (size_t)64 * s.bits * ((size_t)nb * (t / GROUP) + (size_t)b) + 4 * (size_t)(t % GROUP);
        for (int p = 0; p < n; p++) {
            const unsigned mask = (1u << pbits[p]) - 1;
            uint8_t plane[32];
            for (int i = 0; i < 32; i++) plane[i] = (uint8_t)((((unsigned)codes[32 * b + i] >> shift[p]) & mask) ^ flip);
            kvq_lanes_put_plane(plane, pbits[p], dst);
            dst += 64 * pbits[p];
        }
    }
}

static void k_get_token(kvq_kvarn_shape s, const uint8_t *payload, int t, uint8_t *codes) {
    int pbits[2], shift[2];
    const int n = k_planes(s.bits, pbits, shift), nb = s.width / 32;
    const unsigned flip = s.bits == 8 ? 0x80u : 0u;
    memset(codes, 0, (size_t)s.width);
    for (int b = 0; b < nb; b++) {
        const uint8_t *src = payload + (size_t)64 * s.bits * ((size_t)nb * (t / GROUP) + (size_t)b) + 4 * (size_t)(t % GROUP);
        for (int p = 0; p < n; p++) {
            uint8_t plane[32];
            kvq_lanes_get_plane(src, pbits[p], plane);
            for (int i = 0; i < 32; i++) codes[32 * b + i] |= (uint8_t)(((unsigned)plane[i] ^ flip) << shift[p]);
            src += 64 * pbits[p];
        }
    }
}

/* V: token t's codes into its half of each unit (cache_lanes.h's pairs:
 * q8_0's units for 8 bits, the block quads of q3_0 / q2_0 for 3 and 2,
 * the block pairs of q4_0 and q5_0 / q6_0's high planes for 4-6), each
 * code as code - 2^(bits-1) in two's complement: its top field's top bit
 * flipped.  The two tokens of a pair share the units' bytes; each writer
 * sets only its own token's bits. */
static void v_put_token(kvq_kvarn_shape s, const uint8_t *c, int t, uint8_t *payload) {
    const int u = (t % GROUP) / 2, half = t % 2;
    uint8_t *group = payload + (size_t)2 * s.width * s.bits * (size_t)(t / GROUP);
    const size_t unit_bytes = kvq_vpairs_unit_bytes(s.bits);
    if (s.bits == 8) {   /* q8_0's units, a byte c - 128 (kvq_vpairs_put_block8) */
        for (int b = 0; b < s.width / 32; b++) {
            uint8_t x[32];
            for (int i = 0; i < 32; i++) x[i] = (uint8_t)(c[32 * b + i] ^ 0x80u);
            kvq_vpairs_put_block8(x, group + KVQ_VPAIRS_UNIT * (size_t)(8 * b + u), half);
        }
    } else if (s.bits <= 3) {   /* block quads, as q3_0's and q2_0's (kvq_vpairs_put_quad) */
        for (int q = 0; q < s.width / 128; q++) kvq_vpairs_put_quad(s.bits, c + 128 * q, group + unit_bytes * (size_t)(8 * q + u), half);
    } else {   /* block pairs, as q4_0's and q5_0 / q6_0's (kvq_vpairs_put_pair) */
        for (int bp = 0; bp < s.width / 64; bp++)
            kvq_vpairs_put_pair(s.bits, s.bits == 4 ? 8u : 0u, c + 64 * bp, group + unit_bytes * (size_t)(8 * bp + u), half);
    }
}

static void v_get_token(kvq_kvarn_shape s, const uint8_t *payload, int t, uint8_t *c) {
    const int u = (t % GROUP) / 2, half = t % 2;
    const uint8_t *group = payload + (size_t)2 * s.width * s.bits * (size_t)(t / GROUP);
    const size_t unit_bytes = kvq_vpairs_unit_bytes(s.bits);
    if (s.bits == 8) {
        for (int b = 0; b < s.width / 32; b++) {
            kvq_vpairs_get_block8(group + KVQ_VPAIRS_UNIT * (size_t)(8 * b + u), half, c + 32 * b);
            for (int i = 0; i < 32; i++) c[32 * b + i] ^= 0x80u;
        }
    } else if (s.bits <= 3) {
        for (int q = 0; q < s.width / 128; q++) kvq_vpairs_get_quad(s.bits, group + unit_bytes * (size_t)(8 * q + u), half, c + 128 * q);
    } else {
        for (int bp = 0; bp < s.width / 64; bp++)
            kvq_vpairs_get_pair(s.bits, s.bits == 4 ? 8u : 0u, group + unit_bytes * (size_t)(8 * bp + u), half, c + 64 * bp);
    }
}

/* Token by token: a token's codes fill its lane (K) or its half of its
 * pair's units (V). */
void kvq_tiles_layout_put(kvq_kvarn_shape s, const uint8_t *tokens, uint8_t *payload) {
    uint8_t codes[T * 128];
    kvq_kvarn_unpack(s, tokens, 0, T, codes);
    memset(payload, 0, (size_t)T * s.width * s.bits / 8);
    for (int t = 0; t < T; t++)
        (s.is_key ? k_put_token : v_put_token)(s, codes + (size_t)t * s.width, t, payload);
}

void kvq_tiles_layout_get(kvq_kvarn_shape s, const uint8_t *payload, int t0, int n, uint8_t *tokens) {
    uint8_t codes[T * 128];
    for (int t = t0; t < t0 + n; t++)
        (s.is_key ? k_get_token : v_get_token)(s, payload, t, codes + (size_t)(t - t0) * s.width);
    kvq_kvarn_pack(s, codes, 0, n, tokens);
}
