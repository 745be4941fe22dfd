/* source_id.c - the hash of the sources this library was built from
 * (include/kvq.h, kvq_source_id).  The Makefile passes it as
 * KVQ_SOURCE_ID and recompiles this file alone when it changes. */
#include "kvq.h"

#ifndef KVQ_SOURCE_ID
#error "KVQ_SOURCE_ID is set by the Makefile (the hash of the sources)"
#endif

const char *kvq_source_id(void) { return KVQ_SOURCE_ID; }
