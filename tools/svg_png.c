/* svg_png.c - the sweep plot's PNG through rsvg-convert (svg_png.h). */
#include "svg_png.h"
#include "cli.h"

#include <errno.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

kvq_status cli_svg_to_png(const char *svg_path, const char *png_path, kvq_error *err) {
    char *argv[] = { "rsvg-convert", "-o", (char *)png_path, (char *)svg_path, NULL };
    pid_t pid;
    int rc = posix_spawnp(&pid, "rsvg-convert", NULL, NULL, argv, environ);
    if (rc == ENOENT) return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "rsvg-convert not found (Debian: librsvg2-bin)");
    if (rc != 0) return kvq_fail(err, KVQ_ERR_IO, "cannot run rsvg-convert: %s", strerror(rc));
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return kvq_fail(err, KVQ_ERR_IO, "waiting for rsvg-convert: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)   /* shells' "not found" */
        return kvq_fail(err, KVQ_ERR_UNSUPPORTED, "rsvg-convert not found (Debian: librsvg2-bin)");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return kvq_fail(err, KVQ_ERR_IO, "rsvg-convert failed on %s (status %d)", svg_path, status);
    return KVQ_OK;
}
