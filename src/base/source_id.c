/* source_id.c - the hash of the sources this library was built from
 * (include/kvq.h, kvq_source_id).  The Makefile writes it into
 * $(BUILD)/gen/kvq_source_id.h, rewriting that file only when the hash
 * changes, so this file alone recompiles when a source does. */
#include "kvq.h"
#include "kvq_source_id.h"

const char *kvq_source_id(void) { return KVQ_SOURCE_ID; }
