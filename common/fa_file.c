#include "common/fa_file.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_log.h"

struct fa_atomic_file {
    int fd;
    char *path;
    char *tmp;
    int reused;   /* tmp is a spare written over: cut to what was written at commit */
    uint64_t end; /* the end of what fa_atomic_file_pwrite wrote */
    uint64_t wb_step, wb_pending; /* fa_atomic_file_write_back_every; bytes since the last */
};

static char *dir_of(const char *path)
{
    char *copy = strdup(path), *d;
    if (!copy)
        return NULL;
    d = strdup(dirname(copy));
    free(copy);
    return d;
}

int fa_file_sync_dir(const char *path, fa_error *err)
{
    char *dir = dir_of(path);
    int fd, rc = 0;

    if (!dir)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        rc = fa_errorf(err, FA_ERR_IO, "%s: cannot sync directory: %s", dir, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(dir);
    return rc;
}

int fa_atomic_file_open(fa_atomic_file **out, const char *path, unsigned mode, fa_error *err)
{
    fa_atomic_file *f;
    size_t n = strlen(path) + 32;

    *out = NULL;
    f = calloc(1, sizeof(*f));
    if (!f)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    f->fd = -1;
    f->path = strdup(path);
    f->tmp = malloc(n);
    if (!f->path || !f->tmp) {
        fa_atomic_file_abort(f);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    snprintf(f->tmp, n, "%s.tmp.XXXXXX", path);
    f->fd = mkostemp(f->tmp, O_CLOEXEC);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        fa_atomic_file_abort(f);
        return fa_errorf(err, FA_ERR_IO, "%s: cannot create temporary file: %s", path, strerror(e));
    }
    if (fchmod(f->fd, mode) != 0) {
        int e = errno;
        fa_atomic_file_abort(f);
        return fa_errorf(err, FA_ERR_IO, "%s: chmod: %s", path, strerror(e));
    }
    *out = f;
    return 0;
}

/* A spare is written over only when it is a regular file of one name:
 * writing into a second name's file would change that file too. */
static int spare_usable(const struct stat *st)
{
    return S_ISREG(st->st_mode) && st->st_nlink == 1;
}

uint64_t fa_atomic_file_spare_bytes(const char *spare, uint64_t cap)
{
    struct stat st;
    uint64_t n;

    if (lstat(spare, &st) != 0 || !spare_usable(&st))
        return 0;
    n = (uint64_t)st.st_blocks * 512u;
    return n < cap ? n : cap;
}

int fa_atomic_file_open_reusing(fa_atomic_file **out, const char *path, const char *spare,
                                unsigned mode, fa_error *err)
{
    fa_atomic_file *f;
    struct stat st;
    int fd;

    *out = NULL;
    fd = open(spare, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT)
        return fa_atomic_file_open(out, path, mode, err);
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "%s: cannot open the spare file %s: %s", path, spare,
                         strerror(errno));
    if (fstat(fd, &st) != 0 || !spare_usable(&st)) {
        close(fd);
        return fa_errorf(err, FA_ERR_IO, "%s: the spare file %s is not a regular file of one name",
                         path, spare);
    }
    f = calloc(1, sizeof(*f));
    if (!f) {
        close(fd);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    f->fd = fd;
    f->reused = 1;
    f->path = strdup(path);
    f->tmp = strdup(spare);
    if (!f->path || !f->tmp) {
        fa_atomic_file_abort(f);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    if (fchmod(fd, mode) != 0) {
        int e = errno;
        fa_atomic_file_abort(f);
        return fa_errorf(err, FA_ERR_IO, "%s: chmod: %s", spare, strerror(e));
    }
    *out = f;
    return 0;
}

int fa_atomic_file_open_spare(fa_atomic_file **out, const char *path, const char *spare,
                              unsigned mode, fa_error *err)
{
    fa_error why;
    int rc;

    fa_error_clear(&why);
    rc = fa_atomic_file_open_reusing(out, path, spare, mode, &why);
    if (rc != FA_ERR_IO) {
        if (rc != 0 && err)
            *err = why;
        return rc;
    }
    fa_log(FA_LOG_WARN, "spare file not used; writing a new file instead", "spare=%s reason=\"%s\"",
           spare, why.msg);
    return fa_atomic_file_open(out, path, mode, err);
}

/* A spare written over may be longer than what was written into it now. */
static int cut_to_written(fa_atomic_file *f, fa_error *err)
{
    off_t end;
    if (!f->reused)
        return 0;
    end = lseek(f->fd, 0, SEEK_CUR);
    if (end >= 0 && (uint64_t)end < f->end)
        end = (off_t)f->end;
    if (end < 0 || ftruncate(f->fd, end) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: truncate: %s", f->path, strerror(errno));
    return 0;
}

int fa_atomic_file_fd(const fa_atomic_file *f)
{
    return f->fd;
}

void fa_atomic_file_write_back_every(fa_atomic_file *f, uint64_t step)
{
    f->wb_step = step;
    f->wb_pending = 0;
}

/* After len more bytes: every wb_step of them, the file's dirty pages go to
 * the disk's queue (over the whole file: pages already on their way are
 * not dirty, so each call walks only what was written since the last). */
static void write_back(fa_atomic_file *f, size_t len)
{
    if (f->wb_step == 0 || (f->wb_pending += len) < f->wb_step)
        return;
    f->wb_pending = 0;
    (void)sync_file_range(f->fd, 0, 0, SYNC_FILE_RANGE_WRITE); /* a hint: fsync reports */
}

int fa_atomic_file_write(fa_atomic_file *f, const void *data, size_t len, fa_error *err)
{
    const size_t all = len;
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t w = write(f->fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return fa_errorf(err, FA_ERR_IO, "%s: write: %s", f->path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    write_back(f, all);
    return 0;
}

int fa_atomic_file_pwrite(fa_atomic_file *f, const void *data, size_t len, uint64_t off,
                          fa_error *err)
{
    const uint8_t *p = data;
    const size_t all = len;
    if (off > (uint64_t)INT64_MAX - len)
        return fa_errorf(err, FA_ERR_INVAL, "%s: write at %" PRIu64 " is past any file", f->path,
                         off);
    if (len > 0 && off + len > f->end)
        f->end = off + len;
    while (len > 0) {
        ssize_t w = pwrite(f->fd, p, len, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return fa_errorf(err, FA_ERR_IO, "%s: write: %s", f->path, strerror(errno));
        }
        p += w;
        off += (uint64_t)w;
        len -= (size_t)w;
    }
    write_back(f, all);
    return 0;
}

int fa_atomic_file_pread(fa_atomic_file *f, void *buf, size_t len, uint64_t off, fa_error *err)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = pread(f->fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return fa_errorf(err, FA_ERR_IO, "%s: reading back what was written at %" PRIu64 ": %s",
                             f->path, off, r < 0 ? strerror(errno) : "the file is shorter");
        p += r;
        off += (uint64_t)r;
        len -= (size_t)r;
    }
    return 0;
}

int fa_atomic_file_commit(fa_atomic_file *f, fa_error *err)
{
    int rc = cut_to_written(f, err);

    if (rc != 0)
        goto fail;
    if (fsync(f->fd) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: fsync: %s", f->path, strerror(errno));
        goto fail;
    }
    if (close(f->fd) != 0) {
        f->fd = -1;
        rc = fa_errorf(err, FA_ERR_IO, "%s: close: %s", f->path, strerror(errno));
        goto fail;
    }
    f->fd = -1;
    if (rename(f->tmp, f->path) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: rename: %s", f->path, strerror(errno));
        goto fail;
    }
    free(f->tmp);
    f->tmp = NULL;
    rc = fa_file_sync_dir(f->path, err);
    fa_atomic_file_abort(f);
    return rc;
fail:
    fa_atomic_file_abort(f);
    return rc;
}

int fa_atomic_file_commit_nosync(fa_atomic_file *f, fa_error *err)
{
    int rc = cut_to_written(f, err);

    if (close(f->fd) != 0 && rc == 0)
        rc = fa_errorf(err, FA_ERR_IO, "%s: close: %s", f->path, strerror(errno));
    f->fd = -1;
    if (rc == 0 && rename(f->tmp, f->path) != 0)
        rc = fa_errorf(err, FA_ERR_IO, "%s: rename: %s", f->path, strerror(errno));
    if (rc == 0) {
        free(f->tmp);
        f->tmp = NULL;
    }
    fa_atomic_file_abort(f);
    return rc;
}

void fa_atomic_file_abort(fa_atomic_file *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    free(f->tmp);
    free(f->path);
    free(f);
}

int fa_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                         fa_error *err)
{
    fa_atomic_file *f;
    int rc = fa_atomic_file_open(&f, path, mode, err);
    if (rc != 0)
        return rc;
    rc = fa_atomic_file_write(f, data, len, err);
    if (rc != 0) {
        fa_atomic_file_abort(f);
        return rc;
    }
    return fa_atomic_file_commit(f, err);
}

int fa_file_read_all(const char *path, uint8_t **data, size_t *len, size_t max_len, fa_error *err)
{
    struct stat st;
    uint8_t *buf = NULL;
    size_t cap, n = 0;
    int fd, rc = 0;

    *data = NULL;
    *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: not a regular file", path);
        goto out;
    }
    if ((uint64_t)st.st_size > max_len) {
        rc = fa_errorf(err, FA_ERR_TOOBIG, "%s: %lld bytes, more than the limit of %zu", path,
                       (long long)st.st_size, max_len);
        goto out;
    }
    cap = (size_t)st.st_size + 1;
    buf = malloc(cap);
    if (!buf) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == cap - 1)
            break; /* the file grew since fstat: read what it had */
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

int fa_file_mkdirs(const char *path, unsigned mode, fa_error *err)
{
    char *p = strdup(path), *s;
    int rc = 0;

    if (!p)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, mode) != 0 && errno != EEXIST) {
                rc = fa_errorf(err, FA_ERR_IO, "%s: mkdir: %s", p, strerror(errno));
                break;
            }
            *s = c;
            if (c == '\0')
                break;
        }
    }
    free(p);
    return rc;
}

/* nftw's callback: one entry, after what is under it (FTW_DEPTH). */
static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 ? 0 : errno;
}

int fa_file_remove_tree(const char *path, fa_error *err)
{
    struct stat st;
    int rc;

    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
    rc = nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: cannot remove: %s", path,
                         strerror(rc > 0 ? rc : errno));
    return 0;
}

int fa_file_check_private(const char *path, fa_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                         strerror(errno));
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        return fa_errorf(err, FA_ERR_AUTH,
                         "%s: key file is accessible by group or others (mode %03o); "
                         "run: chmod 600 %s",
                         path, (unsigned)(st.st_mode & 0777), path);
    return 0;
}
