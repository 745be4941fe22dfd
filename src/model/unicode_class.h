/*
 * unicode_class.h - the little Unicode the tokenizers need: UTF-8
 * decoding that never fails, and a coarse character class (letter,
 * number, whitespace, other) for the BPE pre-tokenisers' \p{L}, \p{N}
 * and \s.
 *
 * The class table (unicode_class_table.h) is generated from Unicode data
 * by tools/gen_unicode_class.py: exact for every assigned code point of
 * that Unicode version (unassigned ones between two ranges of one class
 * take that class).  Combining marks are "other", as in Unicode (\p{M} is
 * neither \p{L} nor \p{N}); malformed UTF-8 bytes decode as U+FFFD,
 * "other".  llama.cpp's own tables may be of another Unicode version:
 * characters added in between can differ.
 */
#ifndef KVQ_UNICODE_CLASS_H
#define KVQ_UNICODE_CLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum uc_class { UC_OTHER = 0, UC_LETTER, UC_NUMBER, UC_SPACE } uc_class;

/* Decode the code point starting at s[0] (n >= 1 bytes available) and
 * store its byte length in *len (1..4).  A malformed or truncated
 * sequence decodes as one byte, code point 0xFFFD, so every byte of any
 * input belongs to exactly one "character". */
uint32_t uc_decode(const unsigned char *s, size_t n, int *len);

/* Write cp as UTF-8 into out (4 bytes room); returns the length. */
int uc_encode(uint32_t cp, char *out);

uc_class uc_classify(uint32_t cp);

/* Self-check of the table (sorted, non-overlapping ranges), for tests. */
bool uc_table_is_sorted(void);

#endif
