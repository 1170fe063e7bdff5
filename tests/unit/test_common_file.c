/* Unit tests of common/: errors, logging, atomic files. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_err.h"
#include "common/fa_file.h"
#include "common/fa_log.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_common.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_errorf_and_prefix(void **state)
{
    fa_error err;
    fa_error_clear(&err);
    assert_int_equal(fa_errorf(&err, FA_ERR_PARSE, "line %d: bad", 7), FA_ERR_PARSE);
    assert_string_equal(err.msg, "line 7: bad");
    assert_int_equal(fa_error_prefix(&err, FA_ERR_IO, "cfg.textproto"), FA_ERR_PARSE);
    assert_string_equal(err.msg, "cfg.textproto: line 7: bad");
    assert_int_equal(fa_errorf(NULL, FA_ERR_NOMEM, "x"), FA_ERR_NOMEM);
    assert_string_equal(fa_strerror(FA_ERR_NOMEM), "out of memory");
    assert_string_equal(fa_strerror(-9999), "unknown error");
    fa_error_clear(&err);
    assert_string_equal(fa_error_msg(&err, FA_ERR_TIMEOUT), "timed out");
}

static void test_log_quote(void **state)
{
    char buf[64];
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "eu-west"), "eu-west");
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "a b"), "\"a b\"");
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "say \"hi\"\n"), "\"say \\\"hi\\\"\\n\"");
    assert_string_equal(fa_log_quote(buf, sizeof(buf), ""), "\"\"");
    /* truncation always terminates */
    assert_true(strlen(fa_log_quote(buf, 8, "a long value with spaces")) < 8);
    assert_int_equal(fa_log_level_parse("WARN"), FA_LOG_WARN);
    assert_int_equal(fa_log_level_parse("loud"), -1);
}

static void test_log_line_format(void **state)
{
    int fds[2], saved;
    char out[1024] = {0};
    ssize_t n;

    assert_int_equal(pipe(fds), 0);
    saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    fa_log_set_level(FA_LOG_INFO);
    fa_log(FA_LOG_DEBUG, "hidden", NULL);
    fa_log(FA_LOG_INFO, "round started", "round=%d region=%s", 12, "eu-west");
    /* a thread's scope, after the message (and the context), until cleared */
    fa_log_set_scope("federation=beta");
    fa_log(FA_LOG_INFO, "scoped", "k=%d", 1);
    fa_log_set_scope(NULL);
    fa_log(FA_LOG_INFO, "unscoped", "k=%d", 2);
    dup2(saved, STDERR_FILENO);
    close(fds[1]);
    n = read(fds[0], out, sizeof(out) - 1);
    close(fds[0]);
    assert_true(n > 0);
    assert_non_null(strstr(out, "level=info msg=\"round started\" round=12 region=eu-west\n"));
    assert_non_null(strstr(out, "msg=scoped federation=beta k=1\n"));
    assert_non_null(strstr(out, "msg=unscoped k=2\n"));
    assert_memory_equal(out, "ts=", 3);
    assert_null(strstr(out, "hidden"));
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static void test_atomic_write_replace_and_abort(void **state)
{
    char path[300];
    uint8_t *data;
    size_t len;
    fa_atomic_file *f;
    struct stat st;

    snprintf(path, sizeof(path), "%s/model.bin", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, "first", 5, 0644, NULL), 0);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "first", 5);
    free(data);

    /* An aborted write leaves the old content and no temporary file. */
    assert_int_equal(fa_atomic_file_open(&f, path, 0600, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "half-written", 12, NULL), 0);
    fa_atomic_file_abort(f);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    assert_memory_equal(data, "first", 5);
    free(data);
    assert_int_equal(count_entries(tmpdir), 1);

    /* A committed write replaces it and keeps the mode asked for. */
    assert_int_equal(fa_atomic_file_open(&f, path, 0600, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "second!", 7, NULL), 0);
    assert_int_equal(fa_atomic_file_commit(f, NULL), 0);
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(data, "second!", 7);
    free(data);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(count_entries(tmpdir), 1);
    fa_atomic_file_abort(NULL);
}

/* The file at path holds exactly the string want. */
static void assert_file_is(const char *path, const char *want)
{
    uint8_t *data;
    size_t len;
    assert_int_equal(fa_file_read_all(path, &data, &len, 1 << 20, NULL), 0);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(data, want, len);
    free(data);
}

/* Written over a spare: the spare's inode becomes the file, cut to what was
 * written (or grown to it), in the mode asked for; without a spare, a new
 * file; an abort removes the spare and leaves the file; a spare that is not
 * a regular file of one name is refused, naming it, and nothing changes. */
static void test_atomic_write_over_spare(void **state)
{
    char dir[300], path[400], spare[400], other[400];
    fa_atomic_file *f;
    struct stat st, sp;
    fa_error err;

    snprintf(dir, sizeof(dir), "%s/spare", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/sum", dir);
    snprintf(spare, sizeof(spare), "%s/sum-spare", dir);
    /* no spare: a temporary file, as fa_atomic_file_open */
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "new file", 8, NULL), 0);
    assert_int_equal(fa_atomic_file_commit_nosync(f, NULL), 0);
    assert_int_equal(count_entries(dir), 1);
    /* a longer spare: cut to the 5 bytes written, its inode now the file */
    assert_int_equal(fa_file_write_atomic(spare, "0123456789abcdef", 16, 0644, NULL), 0);
    assert_int_equal(stat(spare, &sp), 0);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "short", 5, NULL), 0);
    assert_int_equal(fa_atomic_file_commit_nosync(f, NULL), 0);
    assert_file_is(path, "short");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_ino, sp.st_ino);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(access(spare, F_OK), -1);
    /* a shorter spare grows, through the fsync'ing commit too */
    assert_int_equal(rename(path, spare), 0);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0644, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "longer than five", 16, NULL), 0);
    assert_int_equal(fa_atomic_file_commit(f, NULL), 0);
    assert_file_is(path, "longer than five");
    assert_int_equal(count_entries(dir), 1);
    /* an abort removes the spare, the file stays */
    assert_int_equal(fa_file_write_atomic(spare, "spare", 5, 0644, NULL), 0);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, NULL), 0);
    assert_int_equal(fa_atomic_file_write(f, "half", 4, NULL), 0);
    fa_atomic_file_abort(f);
    assert_int_equal(access(spare, F_OK), -1);
    assert_file_is(path, "longer than five");
    /* refused: a spare with a second name, a directory, a symbolic link */
    snprintf(other, sizeof(other), "%s/other", dir);
    assert_int_equal(fa_file_write_atomic(spare, "spare", 5, 0644, NULL), 0);
    assert_int_equal(link(spare, other), 0);
    fa_error_clear(&err);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, &err), FA_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(err.msg, spare));
    assert_int_equal(unlink(other), 0);
    assert_int_equal(unlink(spare), 0);
    assert_int_equal(mkdir(spare, 0700), 0);
    fa_error_clear(&err);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, spare));
    assert_int_equal(rmdir(spare), 0);
    assert_int_equal(symlink(path, spare), 0);
    fa_error_clear(&err);
    assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, &err), FA_ERR_IO);
    assert_non_null(strstr(err.msg, spare));
    assert_int_equal(unlink(spare), 0);
    assert_file_is(path, "longer than five");
    assert_int_equal(count_entries(dir), 1);
}

/* Early write-back (fa_atomic_file_write_back_every) changes when the
 * kernel writes, never what the file holds: appends and writes at offsets
 * ahead and behind, in pieces around a small step, over a longer spare
 * (cut at commit) and into a new file, read back byte for byte. */
static void test_atomic_write_back(void **state)
{
    enum { N = 1 << 20 };
    uint8_t *want = malloc(N), *got = malloc(N + 1);
    char path[400], spare[400];
    uint32_t x = 12345;
    (void)state;

    for (size_t i = 0; i < N; i++)
        want[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
    snprintf(path, sizeof(path), "%s/wb", tmpdir);
    snprintf(spare, sizeof(spare), "%s/wb-spare", tmpdir);
    for (int reuse = 0; reuse < 2; reuse++) {
        fa_atomic_file *f = NULL;
        size_t len = 0;
        int fd;
        if (reuse) {
            uint8_t *big = calloc(1, 2 * N);
            assert_int_equal(fa_file_write_atomic(spare, big, 2 * N, 0600, NULL), 0);
            free(big);
        }
        assert_int_equal(fa_atomic_file_open_reusing(&f, path, spare, 0600, NULL), 0);
        fa_atomic_file_write_back_every(f, 4096);
        /* the second half first, at its offsets, in pieces of 1..9000 bytes */
        for (size_t off = N / 2; off < N;) {
            size_t m = 1 + (x = x * 1103515245u + 12345u) % 9000;
            m = m < N - off ? m : N - off;
            assert_int_equal(fa_atomic_file_pwrite(f, want + off, m, off, NULL), 0);
            off += m;
        }
        /* then the first half appended, the step turned off and on again */
        for (size_t off = 0; off < N / 2;) {
            size_t m = 1 + (x = x * 1103515245u + 12345u) % 9000;
            m = m < N / 2 - off ? m : N / 2 - off;
            if (off > N / 8 && off < N / 4)
                fa_atomic_file_write_back_every(f, 0);
            else if (off >= N / 4)
                fa_atomic_file_write_back_every(f, 65536);
            assert_int_equal(fa_atomic_file_write(f, want + off, m, NULL), 0);
            off += m;
        }
        assert_int_equal(fa_atomic_file_commit(f, NULL), 0);
        fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        for (ssize_t r; (r = read(fd, got + len, N + 1 - len)) > 0;)
            len += (size_t)r;
        close(fd);
        assert_int_equal(len, N);
        assert_memory_equal(got, want, N);
        assert_int_equal(access(spare, F_OK), -1);
    }
    free(want);
    free(got);
}

/* Opens path over spare with fa_atomic_file_open_spare, writes what and
 * commits; returns what it logged (stderr), for the caller to free. */
static char *write_over_spare(const char *path, const char *spare, const char *what)
{
    fa_atomic_file *f = NULL;
    char *out = calloc(1, 2048);
    int fds[2], saved;

    assert_int_equal(pipe(fds), 0);
    saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    assert_int_equal(fa_atomic_file_open_spare(&f, path, spare, 0600, NULL), 0);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    assert_true(read(fds[0], out, 2047) >= 0);
    close(fds[0]);
    assert_int_equal(fa_atomic_file_write(f, what, strlen(what), NULL), 0);
    assert_int_equal(fa_atomic_file_commit_nosync(f, NULL), 0);
    return out;
}

/* A spare that only saves work never stops a write: a usable one is
 * written over silently; one with a second name, a directory or a
 * symbolic link is left as it is, with a warning naming it and why, and a
 * new file is written.  fa_atomic_file_spare_bytes counts exactly the
 * spares that are written over. */
static void test_atomic_write_spare_fallback(void **state)
{
    char dir[300], path[400], spare[400], other[400];
    struct stat st, sp;
    char *log;

    snprintf(dir, sizeof(dir), "%s/fallback", tmpdir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof(path), "%s/state", dir);
    snprintf(spare, sizeof(spare), "%s/state.spare", dir);
    snprintf(other, sizeof(other), "%s/backup", dir);
    /* none, then a usable one: no warning; a free-space check counts its
     * blocks (at most the cap) */
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 1 << 20), 0);
    log = write_over_spare(path, spare, "first");
    assert_string_equal(log, "");
    free(log);
    assert_int_equal(rename(path, spare), 0);
    assert_int_equal(stat(spare, &sp), 0);
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 1 << 20), (uint64_t)sp.st_blocks * 512u);
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 3), sp.st_blocks ? 3 : 0);
    log = write_over_spare(path, spare, "second");
    assert_string_equal(log, "");
    free(log);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_ino, sp.st_ino);
    assert_file_is(path, "second");
    /* a second name (a backup by hard link): both names keep its bytes */
    assert_int_equal(fa_file_write_atomic(spare, "linked", 6, 0644, NULL), 0);
    assert_int_equal(link(spare, other), 0);
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 1 << 20), 0);
    log = write_over_spare(path, spare, "third");
    assert_non_null(
        strstr(log, "level=warn msg=\"spare file not used; writing a new file instead\""));
    assert_non_null(strstr(log, spare));
    assert_non_null(strstr(log, "not a regular file of one name"));
    free(log);
    assert_file_is(path, "third");
    assert_file_is(spare, "linked");
    assert_file_is(other, "linked");
    assert_int_equal(unlink(other), 0);
    assert_int_equal(unlink(spare), 0);
    /* a directory, a symbolic link to the file itself */
    assert_int_equal(mkdir(spare, 0700), 0);
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 1 << 20), 0);
    log = write_over_spare(path, spare, "fourth");
    assert_non_null(strstr(log, spare));
    free(log);
    assert_file_is(path, "fourth");
    assert_int_equal(rmdir(spare), 0);
    assert_int_equal(symlink(path, spare), 0);
    assert_int_equal(fa_atomic_file_spare_bytes(spare, 1 << 20), 0);
    log = write_over_spare(path, spare, "fifth");
    assert_non_null(strstr(log, spare));
    free(log);
    assert_file_is(path, "fifth");
    assert_int_equal(lstat(spare, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(unlink(spare), 0);
    assert_int_equal(count_entries(dir), 1);
}

static void test_read_all_errors(void **state)
{
    char path[300];
    uint8_t *data;
    size_t len;
    fa_error err;

    snprintf(path, sizeof(path), "%s/missing", tmpdir);
    fa_error_clear(&err);
    assert_int_equal(fa_file_read_all(path, &data, &len, 100, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "missing"));
    snprintf(path, sizeof(path), "%s/big", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, "0123456789", 10, 0644, NULL), 0);
    assert_int_equal(fa_file_read_all(path, &data, &len, 9, &err), FA_ERR_TOOBIG);
    assert_non_null(strstr(err.msg, "limit"));
    assert_int_equal(fa_file_read_all(tmpdir, &data, &len, 9, &err), FA_ERR_IO);
}

static void test_private_and_mkdirs(void **state)
{
    char path[300];
    fa_error err;

    snprintf(path, sizeof(path), "%s/a/b/c", tmpdir);
    assert_int_equal(fa_file_mkdirs(path, 0755, NULL), 0);
    assert_int_equal(fa_file_mkdirs(path, 0755, NULL), 0);
    snprintf(path, sizeof(path), "%s/a/key", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, "k", 1, 0644, NULL), 0);
    assert_int_equal(fa_file_check_private(path, &err), FA_ERR_AUTH);
    assert_non_null(strstr(err.msg, "chmod 600"));
    chmod(path, 0600);
    assert_int_equal(fa_file_check_private(path, &err), 0);
}

/* A tree removed whole; a link in it removed, not followed; a path that
 * is not there is no error. */
static void test_remove_tree(void **state)
{
    char root[300], path[400], outside[300];
    struct stat st;
    fa_error err;
    (void)state;

    snprintf(root, sizeof(root), "%s/tree", tmpdir);
    snprintf(outside, sizeof(outside), "%s/outside", tmpdir);
    snprintf(path, sizeof(path), "%s/a/b", root);
    assert_int_equal(fa_file_mkdirs(path, 0755, NULL), 0);
    assert_int_equal(fa_file_mkdirs(outside, 0755, NULL), 0);
    snprintf(path, sizeof(path), "%s/a/b/file", root);
    assert_int_equal(fa_file_write_atomic(path, "x", 1, 0644, NULL), 0);
    snprintf(path, sizeof(path), "%s/outside/kept", tmpdir);
    assert_int_equal(fa_file_write_atomic(path, "y", 1, 0644, NULL), 0);
    snprintf(path, sizeof(path), "%s/a/link", root);
    assert_int_equal(symlink(outside, path), 0);
    assert_int_equal(fa_file_remove_tree(root, &err), 0);
    assert_int_not_equal(stat(root, &st), 0);
    snprintf(path, sizeof(path), "%s/outside/kept", tmpdir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(fa_file_remove_tree(root, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errorf_and_prefix),
        cmocka_unit_test(test_log_quote),
        cmocka_unit_test(test_log_line_format),
        cmocka_unit_test(test_atomic_write_replace_and_abort),
        cmocka_unit_test(test_atomic_write_over_spare),
        cmocka_unit_test(test_atomic_write_back),
        cmocka_unit_test(test_atomic_write_spare_fallback),
        cmocka_unit_test(test_read_all_errors),
        cmocka_unit_test(test_private_and_mkdirs),
        cmocka_unit_test(test_remove_tree),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
