/*
 * format_row.h - one row per storage type: everything kvq knows about a
 * format, in one place (src/format/types.c holds the table).
 *
 * A row is the public part (kvq_type_traits, include/kvq.h: name, layout,
 * sizes derived from the block description, encode/decode/dot/axpy) and
 * the hooks through which the cache stores and attention reads the type
 * (struct kvq_row_hooks, src/cache/row_hooks.h: score a chunk of keys
 * against a GQA group's query heads, accumulate weighted values, and for
 * record types their shape, quantise and row read).  The hooks are
 * implemented in the cache layer, above this one, so the cache installs
 * them into the rows once at start-up (kvq_format_set_hooks, called from
 * src/cache/row_hooks.c); the format layer only carries the pointer.
 *
 * Adding a format is adding its row to types.c, its file, and (for its
 * attention hooks, when the defaults built from decode are not enough)
 * one line in the cache's registration.
 */
#ifndef KVQ_FORMAT_ROW_H
#define KVQ_FORMAT_ROW_H

#include "kvq_internal.h"

struct kvq_row_hooks;   /* src/cache/row_hooks.h */

typedef struct kvq_format_row {
    kvq_type_traits traits;              /* scalar reference kernels     */
    const struct kvq_row_hooks *hooks;   /* NULL until the cache installs them */
} kvq_format_row;

/* The row of type t (scalar traits), NULL for an unknown type. */
const kvq_format_row *kvq_format_row_get(kvq_type t);

/* Install the cache's hooks of type t (the cache's start-up registration
 * only; it runs once, before any reader). */
void kvq_format_set_hooks(kvq_type t, const struct kvq_row_hooks *hooks);

#endif
