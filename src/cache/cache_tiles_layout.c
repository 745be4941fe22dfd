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
 *     the planes of the matching q*_1 type (narrowest first: 3 bits =
 *     bit 2, then bits 0-1; 5 = bit 4, then 0-3; 6 = bits 4-5, then 0-3),
 *     plane dword j holding the pairs p = j (16 / pbits) + k of channels
 *     (2p, 2p + 1) at bits pbits k and 16 + pbits k; 8-bit codes as
 *     q8_0's bytes c0 c2 c1 c3 per dword, read as code - 128.
 *   V (pairs): the units of the matching q*_0 type (q8_0's for 8 bits,
 *     the block quads of q3_0 / q2_0 for 3 and 2 bits, widths of 128),
 *     two tokens' codes of a channel in one int32 lane, each code stored
 *     as code - 2^(bits-1) in two's complement (the top bit of its high
 *     part flipped), summed with the token's S_t as every block's scale.
 *
 * Both are the record's 128 * width * bits / 8 bytes, so a record keeps
 * its size and its metadata's place; only files (state, codecs) and the
 * readers that need a token's codes see the token-major order, through
 * the two conversions here.  Every code is at most two fields, each
 * within one byte.
 */
#include "cache_tiles_layout.h"
#include "cache_lanes.h"

enum { T = KVQ_KVARN_TILE, GROUP = 16 };

bool kvq_tiles_layout_applies(kvq_kvarn_shape s) {
    if ((s.width != 64 && s.width != 128) || !kvq_kvarn_bits_valid(s.bits)) return false;
    return s.is_key || s.bits >= 4 || s.width == 128;   /* V block quads: whole 128 channels */
}

/* One field of a code: `width` bits at `bit` of byte `byte`, holding the
 * code's bits shift .. shift + width - 1 xor `flip`. */
typedef struct field { size_t byte; int bit, width, shift; unsigned flip; } field;

/* The planes of a K code of `bits` (the q*_1 types' split, cache_lanes.h). */
static int k_planes(int bits, int pbits[2], int shift[2]) {
    switch (bits) {
    case 3: pbits[0] = 1; shift[0] = 2; pbits[1] = 2; shift[1] = 0; return 2;
    case 5: pbits[0] = 1; shift[0] = 4; pbits[1] = 4; shift[1] = 0; return 2;
    case 6: pbits[0] = 2; shift[0] = 4; pbits[1] = 4; shift[1] = 0; return 2;
    default: pbits[0] = bits; shift[0] = 0; return 1;   /* 2, 4 */
    }
}

static int k_fields(kvq_kvarn_shape s, int t, int c, field f[2]) {
    const int nb = s.width / 32, l = t % GROUP, i = c % 32;
    const size_t base = (size_t)64 * s.bits * ((size_t)nb * (t / GROUP) + (size_t)(c / 32)) + 4 * (size_t)l;
    if (s.bits == 8) {   /* dword i / 4 holds codes 4j, 4j + 2, 4j + 1, 4j + 3 */
        static const int at[4] = { 0, 2, 1, 3 };
        f[0] = (field){ base + 64 * (size_t)(i / 4) + (size_t)at[i % 4], 0, 8, 0, 0x80u };
        return 1;
    }
    int pbits[2], shift[2], dwords = 0;
    const int n = k_planes(s.bits, pbits, shift);
    for (int p = 0; p < n; p++) {
        const int per = 16 / pbits[p], pair = i / 2, j = pair / per, pos = pbits[p] * (pair % per) + 16 * (i % 2);
        f[p] = (field){ base + 64 * (size_t)(dwords + j) + (size_t)(pos / 8), pos % 8, pbits[p], shift[p], 0u };
        dwords += pbits[p];
    }
    return n;
}

static int v_fields(kvq_kvarn_shape s, int t, int c, field f[2]) {
    const int u = (t % GROUP) / 2, half = t % 2;
    const size_t group = (size_t)2 * s.width * s.bits * (size_t)(t / GROUP), unit_bytes = kvq_vpairs_unit_bytes(s.bits);
    if (s.bits == 8) {   /* per block and token pair: dword L = channels L, L + 16 of both tokens */
        const int b = c / 32, i = c % 32;
        f[0] = (field){ group + 64 * (size_t)(8 * b + u) + 4 * (size_t)(i % 16) + 2 * (size_t)half + (size_t)(i / 16), 0,
                        8, 0, 0x80u };
        return 1;
    }
    if (s.bits <= 3) {   /* block quads: dword L = crumbs of quad channels 16k + L */
        const int qd = c % 128, k = qd / 16, L = qd % 16, pos = 2 * k + 16 * half;
        const size_t unit = group + unit_bytes * (size_t)(8 * (c / 128) + u);
        f[0] = (field){ unit + 4 * (size_t)L + (size_t)(pos / 8), pos % 8, 2, 0, s.bits == 2 ? 2u : 0u };
        if (s.bits == 2) return 1;
        f[1] = (field){ unit + 64 + 2 * (size_t)L + (size_t)half, k, 1, 2, 1u };
        return 2;
    }
    /* block pairs: dword L = 2j + e, the nibbles of channels 8k + j of block 2 bp + e */
    const int b = c / 32, i = c % 32, k = i / 8, L = 2 * (i % 8) + b % 2, pos = 4 * k + 16 * half;
    const size_t unit = group + unit_bytes * (size_t)(8 * (b / 2) + u);
    f[0] = (field){ unit + 4 * (size_t)L + (size_t)(pos / 8), pos % 8, 4, 0, s.bits == 4 ? 8u : 0u };
    if (s.bits == 4) return 1;
    if (s.bits == 5) f[1] = (field){ unit + 64 + (size_t)L, 4 * half + k, 1, 4, 1u };
    else f[1] = (field){ unit + 64 + 2 * (size_t)L + (size_t)half, 2 * k, 2, 4, 2u };
    return 2;
}

static int fields_of(kvq_kvarn_shape s, int t, int c, field f[2]) {
    return s.is_key ? k_fields(s, t, c, f) : v_fields(s, t, c, f);
}

/* A group's fields repeat in every group (2 width bits bytes on), so
 * each code position of a group is placed once and its 8 tokens written
 * from the tile's codes unpacked to bytes. */
void kvq_tiles_layout_put(kvq_kvarn_shape s, const uint8_t *tokens, uint8_t *payload) {
    uint8_t codes[T * 128];
    const size_t group_bytes = (size_t)2 * s.width * s.bits;
    kvq_kvarn_unpack(s, tokens, 0, T, codes);
    memset(payload, 0, (size_t)T * s.width * s.bits / 8);
    for (int l = 0; l < GROUP; l++)
        for (int c = 0; c < s.width; c++) {
            field f[2];
            const int n = fields_of(s, l, c, f);
            for (int g = 0; g < T / GROUP; g++) {
                const unsigned code = codes[(size_t)(GROUP * g + l) * s.width + c];
                for (int i = 0; i < n; i++) {
                    const unsigned v = ((code >> f[i].shift) & ((1u << f[i].width) - 1)) ^ f[i].flip;
                    payload[group_bytes * g + f[i].byte] |= (uint8_t)(v << f[i].bit);
                }
            }
        }
}

/* As the writer: each code position of a group placed once, then read
 * for every token of the range at that position. */
void kvq_tiles_layout_get(kvq_kvarn_shape s, const uint8_t *payload, int t0, int n, uint8_t *tokens) {
    uint8_t codes[T * 128];
    const size_t group_bytes = (size_t)2 * s.width * s.bits;
    for (int l = 0; l < GROUP; l++) {
        const int first = t0 + ((l - t0 % GROUP) + GROUP) % GROUP;   /* the range's first token at lane l */
        if (first >= t0 + n) continue;
        for (int c = 0; c < s.width; c++) {
            field f[2];
            const int nf = fields_of(s, l, c, f);
            for (int t = first; t < t0 + n; t += GROUP) {
                const uint8_t *p = payload + group_bytes * (size_t)(t / GROUP);
                unsigned code = 0;
                for (int i = 0; i < nf; i++)
                    code |= ((p[f[i].byte] >> f[i].bit & ((1u << f[i].width) - 1)) ^ f[i].flip) << f[i].shift;
                codes[(size_t)(t - t0) * s.width + c] = (uint8_t)code;
            }
        }
    }
    kvq_kvarn_pack(s, codes, 0, n, tokens);
}
