/* file_read.h - read a whole file into memory, the one way kvq does it:
 * only regular files (a directory, /dev/zero or a FIFO is refused by its
 * type, before any allocation), never more than a cap (a clear error
 * instead of a huge allocation), the buffer NUL-terminated for text. */
#ifndef KVQ_FILE_READ_H
#define KVQ_FILE_READ_H

#include "kvq_internal.h"

/* Texts (-f, -p @file, tokenize): 256 MiB is far above any evaluation
 * text and low enough that tokenising it cannot exhaust memory. */
#define KVQ_TEXT_CAP ((size_t)256 << 20)

/* path: a regular file of at most cap bytes.  *buf (malloc'd, *len bytes
 * plus a NUL) on success; what ("text file", "kld base") names the file
 * in messages. */
kvq_status kvq_read_file(const char *path, const char *what, size_t cap, char **buf, size_t *len, kvq_error *err);

/* The rest of an open stream (standard input), at most cap bytes; name
 * is used in messages. */
kvq_status kvq_read_stream(FILE *f, const char *name, size_t cap, char **buf, size_t *len, kvq_error *err);

#endif
