/* error.c - the one helper that fills a kvq_error. */
#include "kvq_internal.h"

kvq_status kvq_fail(kvq_error *err, kvq_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}
