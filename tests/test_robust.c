/* test_robust.c - bad input gives one clear error and never a crash or a
 * huge allocation: the shared file reader, and the CLI cases of the
 * robustness review (each must exit 1 with exactly one line). */
#include "test.h"
#include "file_read.h"

#include <string.h>
#include <unistd.h>

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* cmd (a printf format) must exit 1 with one line containing "error" and
 * `want` (when not NULL). */
#define CHECK_ONE_ERROR(want, ...)                                                                   \
    do {                                                                                              \
        char cmd_[4096];                                                                              \
        static char out_[8192];                                                                       \
        CHECK(snprintf(cmd_, sizeof cmd_, __VA_ARGS__) < (int)sizeof cmd_, "command too long");      \
        int rc_ = test_run(cmd_, out_, sizeof out_);                                                  \
        CHECK(rc_ == 1, "'%s' exited %d: %s", cmd_, rc_, out_);                                       \
        CHECK(count_lines(out_) == 1 && strstr(out_, "error"), "'%s' printed %d lines: %s", cmd_,     \
              count_lines(out_), out_);                                                               \
        CHECK(!(want) || strstr(out_, (want) ? (want) : ""), "'%s': no '%s' in: %s", cmd_,            \
              (want) ? (want) : "", out_);                                                            \
    } while (0)

TEST(read_file_refuses_non_regular_and_large) {
    char *buf = NULL;
    size_t len = 0;
    kvq_error err = { 0 };
    CHECK(kvq_read_file("/", "text file", KVQ_TEXT_CAP, &buf, &len, &err) == KVQ_ERR_IO && !buf,
          "a directory must be refused");
    CHECK(strstr(err.msg, "not a regular file"), "message: %s", err.msg);
    if (access("/dev/zero", R_OK) == 0)
        CHECK(kvq_read_file("/dev/zero", "text file", KVQ_TEXT_CAP, &buf, &len, &err) != KVQ_OK && !buf,
              "/dev/zero must be refused");
    char path[128];
    snprintf(path, sizeof path, "/tmp/kvq_test_read_%d.txt", (int)getpid());
    FILE *f = fopen(path, "wb");
    CHECK(f, "cannot write %s", path);
    fputs("0123456789", f);
    fclose(f);
    kvq_status st = kvq_read_file(path, "text file", 9, &buf, &len, &err);
    CHECK(st == KVQ_ERR_ARG && !buf && strstr(err.msg, "limit"), "10 bytes over a cap of 9: %d %s", (int)st, err.msg);
    st = kvq_read_file(path, "text file", 10, &buf, &len, &err);
    remove(path);
    CHECK(st == KVQ_OK && len == 10 && buf && !memcmp(buf, "0123456789", 11), "exactly the cap must be read");
    free(buf);
    CHECK(kvq_read_file("/nonexistent/x", "text file", 10, &buf, &len, &err) == KVQ_ERR_IO, "missing file");
}

TEST(read_stream_caps_standard_input) {
    FILE *f = tmpfile();
    CHECK(f, "no tmpfile");
    for (int i = 0; i < 100000; i++) fputc('a' + i % 26, f);
    rewind(f);
    char *buf = NULL;
    size_t len = 0;
    kvq_error err = { 0 };
    kvq_status st = kvq_read_stream(f, "standard input", 99999, &buf, &len, &err);
    CHECK(st == KVQ_ERR_ARG && !buf, "one byte over the cap must be refused (%d)", (int)st);
    rewind(f);
    st = kvq_read_stream(f, "standard input", 100000, &buf, &len, &err);
    fclose(f);
    CHECK(st == KVQ_OK && len == 100000 && buf[99999] == 'a' + 99999 % 26 && buf[100000] == 0, "read at the cap");
    free(buf);
}

TEST(cli_files_that_are_not_files) {
    const char *bin = test_kvq_bin();
    char model[1024];
    if (!bin) SKIP("KVQ_BIN not set");
    if (!test_shared_path(model, sizeof model, "models/stories260K.gguf")) SKIP("../shared not found");
    CHECK_ONE_ERROR("regular file", "%s kld -m %s --base /tmp", bin, model);
    CHECK_ONE_ERROR("regular file", "%s perplexity -m %s -f /tmp", bin, model);
    CHECK_ONE_ERROR("regular file", "%s tokenize -m %s -f /dev/zero", bin, model);
    CHECK_ONE_ERROR("regular file", "%s plan -m %s -f / --budget 100%%", bin, model);
}
