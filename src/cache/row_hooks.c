/* row_hooks.c - the cache's start-up registration: every cache type's row
 * (src/format/format_row.h) gets its attention and record hooks, once.
 * Cache types without hooks of their own get the defaults built from
 * decode; each file of hooks then installs the rows it implements. */
#include "row_hooks.h"
#include "format_row.h"

#include <pthread.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void install(void) {
    for (int t = 0; t < KVQ_TYPE_COUNT; t++) {
        const kvq_type_traits *tr = kvq_type_get_scalar((kvq_type)t);
        if (tr && tr->is_cache_type && tr->dequantize) kvq_format_set_hooks((kvq_type)t, &attn_hooks_decode);
    }
    attn_block_register();    /* f32/f16/bf16 in place, the 32-value block types fused (attn_block.c) */
    kvq_kvarn_register();     /* KVarN records (cache_tiles.c) */
    kvq_calib_register();     /* calibrated rows (cache_calib.c) */
    kvq_turbo_register();     /* TurboQuant codes (attn_turbo.c) */
}

const kvq_row_hooks *kvq_row_hooks_of(kvq_type t) {
    pthread_once(&g_once, install);
    const kvq_format_row *row = kvq_format_row_get(t);
    return row ? row->hooks : NULL;
}
