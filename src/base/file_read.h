/* file_read.h - read a whole file into memory, the one way kvq does it:
 * only regular files (a directory, /dev/zero or a FIFO is refused by its
 * type, before any allocation), never more than a cap (a clear error
 * instead of a huge allocation), the buffer NUL-terminated for text. */
#ifndef KVQ_FILE_READ_H
#define KVQ_FILE_READ_H

#include "kvq_internal.h"

/* KVQ_TEXT_CAP, kvq_read_file and kvq_read_stream are public (kvq.h,
 * "utilities"); src/base/file_read.c implements them. */

#endif
