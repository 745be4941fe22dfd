/* hash64.h - kvq's 64-bit streaming checksum (not cryptographic), used by
 * the exact base file (base_kvq.h) for its model, token and payload hashes.
 *
 * Definition (version 1), so other tools can reproduce it:
 *   - the input is read as little-endian 64-bit words; word i goes to
 *     lane i mod 4; the four lanes start at K0 + j * K1 (j = 0..3);
 *   - each word w updates its lane h:  h = (h ^ w) * K1;  h ^= h >> 32;
 *     (both steps are bijections, so changing any one word always changes
 *     that lane, hence the result);
 *   - the last 0..7 bytes are zero-padded into one more word, which is
 *     processed like the others;
 *   - result: r = total byte count; for each lane j in order:
 *     r = (r ^ fmix(h_j)) * K1; then fmix(r), where fmix is splitmix64's
 *     finaliser (x ^= x>>30; x *= 0xbf58476d1ce4e5b9; x ^= x>>27;
 *     x *= 0x94d049bb133111eb; x ^= x>>31).
 *   K0 = 0x6b76712d68617368 ("kvq-hash"), K1 = 0x9e3779b97f4a7c15.
 * Four independent lanes keep the multiplier pipelines busy: several GB/s. */
#ifndef KVQ_HASH64_H
#define KVQ_HASH64_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvq_hash64 {
    uint64_t lane[4];
    uint64_t n_words;      /* words processed (selects the lane)  */
    uint64_t total;        /* bytes consumed                      */
    uint8_t part[8];       /* bytes of an incomplete word         */
    unsigned n_part;
} kvq_hash64;

void kvq_hash64_init(kvq_hash64 *h);
void kvq_hash64_update(kvq_hash64 *h, const void *data, size_t len);
uint64_t kvq_hash64_final(const kvq_hash64 *h);   /* h may be updated further */
uint64_t kvq_hash64_of(const void *data, size_t len);

#endif
