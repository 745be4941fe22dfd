/*
 * fuzz_input.h - what every fuzz target does with its input first: a
 * private copy of exactly size bytes (malloc's alignment, as a mapping
 * has), so ASan sees any read past the end and a target may rewrite the
 * bytes (reseal a checksum) without touching libFuzzer's buffer.
 */
#ifndef KVQ_FUZZ_INPUT_H
#define KVQ_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The copy (free it), or NULL when out of memory. */
static inline uint8_t *fuzz_copy_input(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (buf && size) memcpy(buf, data, size);
    return buf;
}

#endif
