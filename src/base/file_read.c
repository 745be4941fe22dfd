/* file_read.c - whole-file reads with a type check and a cap (file_read.h). */
#include "file_read.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

/* Reads until end of input into a buffer of `first` bytes, doubled as
 * needed; one byte past the cap is read to tell "exactly cap" from "more". */
static kvq_status read_until_eof(FILE *f, const char *name, size_t cap, size_t first, char **buf, size_t *len,
                                 kvq_error *err) {
    *buf = NULL;
    *len = 0;
    size_t room = KVQ_MIN(first, cap + 1), n = 0;
    char *b = kvq_malloc(room + 1);
    for (;;) {
        if (!b) return kvq_fail(err, KVQ_ERR_NOMEM, "%s: out of memory after %zu bytes", name, n);
        n += fread(b + n, 1, room - n, f);
        if (n < room) break;                      /* end of input or an error */
        if (room > cap) {                         /* n = room > cap bytes read: too large */
            free(b);
            return kvq_fail(err, KVQ_ERR_ARG, "%s is larger than the %.0f MiB limit", name, mib(cap));
        }
        const size_t bigger = room > cap / 2 ? cap + 1 : 2 * room;
        char *nb = kvq_realloc(b, bigger + 1);
        if (!nb) free(b);
        b = nb;
        room = bigger;
    }
    if (ferror(f)) {
        free(b);
        return kvq_fail(err, KVQ_ERR_IO, "%s: read error", name);
    }
    if (n > cap) {
        free(b);
        return kvq_fail(err, KVQ_ERR_ARG, "%s is larger than the %.0f MiB limit", name, mib(cap));
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return KVQ_OK;
}

kvq_status kvq_read_stream(FILE *f, const char *name, size_t cap, char **buf, size_t *len, kvq_error *err) {
    return read_until_eof(f, name, cap, 1 << 16, buf, len, err);
}

kvq_status kvq_read_file(const char *path, const char *what, size_t cap, char **buf, size_t *len, kvq_error *err) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kvq_fail(err, KVQ_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return kvq_fail(err, KVQ_ERR_IO, "%s '%s' is not a regular file", what, path);
    }
    if ((uint64_t)st.st_size > (uint64_t)cap) {
        fclose(f);
        return kvq_fail(err, KVQ_ERR_ARG, "%s '%s' is %.1f MiB, more than the %.0f MiB limit", what, path,
                        mib((size_t)st.st_size), mib(cap));
    }
    char name[600];
    snprintf(name, sizeof name, "%s '%s'", what, path);
    /* the size is a hint: the file may still grow while it is read */
    kvq_status s = read_until_eof(f, name, cap, (size_t)st.st_size + 1, buf, len, err);
    fclose(f);
    return s;
}
