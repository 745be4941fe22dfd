/*
 * cache_tiles_layout.c - where a KVarN record's codes sit in the cache's
 * memory (cache_tiles_layout.h).
 *
 * A record's payload is token-major (kvarn.h): one token's `width` codes
 * together, which makes each key's score a horizontal sum and each value a
 * float to widen and multiply per head.  In the cache, 4-bit records keep
 * the same bytes rearranged as the block types' bodies are
 * (cache_lanes.h), per group of 16 tokens (tokens 16g .. 16g + 15 of the
 * tile) and 32-channel block b, nb = width / 32 blocks:
 *
 *   K (lanes): at 256 (nb g + b), dword j (< 4) of token lane l at 64 j +
 *     4 l, holding for k < 4 the codes of channels 32 b + 8 j + 2 k (bits
 *     4k..4k+3) and 32 b + 8 j + 2 k + 1 (bits 16 + 4k..): one shift and
 *     one mask give 16 keys' int16 pairs of two channels, multiplied by
 *     the folded query's pair (attn_kvarn.inc kvarn_scores_lanes);
 *   V (pairs): at 256 nb g, per block pair bp and token pair u (tokens 2u,
 *     2u + 1 of the group) a unit of 64 bytes at 64 (8 bp + u), dword L =
 *     2 j + e (j < 8) holding for k < 4 the code of channel 32 (2 bp + e)
 *     + 8 k + j of token 2u at bits 4k and of token 2u + 1 at 16 + 4k, as
 *     c ^ 8 (c - 8 in 4-bit two's complement): q4_0's pairs units, summed
 *     by its kernels with the token's S_t as the block scale
 *     (attn_kvarn.inc kvarn_values_pairs).
 *
 * Both are the record's 128 * width / 2 bytes, so a record keeps its size
 * and its metadata's place; only files (state, codecs) and the readers
 * that need a token's codes see the token-major order, through the two
 * conversions here.
 */
#include "cache_tiles_layout.h"

enum { T = KVQ_KVARN_TILE, GROUP = 16 };

bool kvq_tiles_layout_applies(kvq_kvarn_shape s) { return s.bits == 4 && (s.width == 64 || s.width == 128); }

/* Byte offset and bit of channel c's code of tile token t in each layout. */
static void lanes_place(int nb, int t, int c, size_t *byte, int *bit) {
    const int g = t / GROUP, l = t % GROUP, b = c / 32, i = c % 32, j = i / 8, k = (i % 8) / 2;
    *byte = (size_t)256 * ((size_t)nb * g + b) + 64 * j + 4 * l + (i % 2 ? 2 : 0) + k / 2;
    *bit = 4 * (k % 2);
}
static void pairs_place(int nb, int t, int c, size_t *byte, int *bit) {
    const int g = t / GROUP, u = (t % GROUP) / 2, b = c / 32, bp = b / 2, e = b % 2, i = c % 32;
    const int k = i / 8, j = i % 8, L = 2 * j + e;
    *byte = (size_t)256 * nb * g + 64 * (8 * (size_t)bp + u) + 4 * L + (t % 2 ? 2 : 0) + k / 2;
    *bit = 4 * (k % 2);
}

static void place(kvq_kvarn_shape s, int t, int c, size_t *byte, int *bit) {
    if (s.is_key) lanes_place(s.width / 32, t, c, byte, bit);
    else pairs_place(s.width / 32, t, c, byte, bit);
}

/* Code c of token t of a token-major payload of `width` channels. */
static uint32_t code_at(const uint8_t *tokens, int width, int t, int c) {
    return (uint32_t)(tokens[(size_t)t * width / 2 + c / 2] >> (4 * (c % 2))) & 15u;
}

/* The writers walk the cache order dword by dword (a tile is written once,
 * when it completes); kvq_tiles_layout_get reads through place(). */
static void lanes_put(int width, const uint8_t *tokens, uint32_t *dw) {
    const int nb = width / 32;
    for (int g = 0; g < T / GROUP; g++)
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < GROUP; l++) {
                    const int t = GROUP * g + l, c0 = 32 * b + 8 * j;
                    uint32_t v = 0;
                    for (int k = 0; k < 4; k++)
                        v |= code_at(tokens, width, t, c0 + 2 * k) << (4 * k) |
                             code_at(tokens, width, t, c0 + 2 * k + 1) << (16 + 4 * k);
                    *dw++ = v;
                }
}
static void pairs_put(int width, const uint8_t *tokens, uint32_t *dw) {
    const int nb = width / 32;
    for (int g = 0; g < T / GROUP; g++)
        for (int bp = 0; bp < nb / 2; bp++)
            for (int u = 0; u < GROUP / 2; u++)
                for (int L = 0; L < 16; L++) {
                    const int t = GROUP * g + 2 * u, c0 = 32 * (2 * bp + L % 2) + L / 2;
                    uint32_t v = 0;
                    for (int k = 0; k < 4; k++)
                        v |= (code_at(tokens, width, t, c0 + 8 * k) ^ 8u) << (4 * k) |
                             (code_at(tokens, width, t + 1, c0 + 8 * k) ^ 8u) << (16 + 4 * k);
                    *dw++ = v;
                }
}

void kvq_tiles_layout_put(kvq_kvarn_shape s, const uint8_t *tokens, uint8_t *payload) {
    uint32_t dw[T * 128 / 8];   /* the dwords in order, stored little-endian */
    if (s.is_key) lanes_put(s.width, tokens, dw);
    else pairs_put(s.width, tokens, dw);
    for (int i = 0; i < T * s.width / 8; i++) kvq_wr32(payload + 4 * i, dw[i]);
}

void kvq_tiles_layout_get(kvq_kvarn_shape s, const uint8_t *payload, int t0, int n, uint8_t *tokens) {
    const uint8_t flip = s.is_key ? 0 : 8;
    memset(tokens, 0, (size_t)n * s.width / 2);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < s.width; c++) {
            size_t byte;
            int bit;
            place(s, t0 + i, c, &byte, &bit);
            const uint8_t code = (uint8_t)(((payload[byte] >> bit) & 15) ^ flip);
            tokens[(size_t)i * s.width / 2 + c / 2] |= (uint8_t)(code << (4 * (c % 2)));
        }
}
