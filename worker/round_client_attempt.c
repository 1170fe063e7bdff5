/* round_client_attempt.c - the saved attempt (attempt.state and
 * attempt.delta in the state directory, written before the first masked
 * byte leaves) and the update buffer mapped from update.f32 that saving
 * need not copy (see round_client.h, "Crash safety"). */
#include "worker/round_client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_file.h"

#define STATE_MAGIC "fedagg-attempt-v1"

static void state_paths(fa_round_client *rc, char *st, char *dl, size_t n)
{
    snprintf(st, n, "%s/attempt.state", rc->state_dir);
    snprintf(dl, n, "%s/attempt.delta", rc->state_dir);
}

/* The update buffer's file: a header page (the saved attempt's header line,
 * padded with spaces: read_saved reads it like attempt.delta's), then the
 * floats, page-aligned. */
#define UPDATE_HDR 4096

static void update_path(const fa_round_client *rc, char *p, size_t n)
{
    snprintf(p, n, "%s/update.f32", rc->state_dir);
}

void fa_round_client_unmap_update(fa_round_client *rc, int remove_file)
{
    char path[4096];
    struct stat sb;

    if (!rc->ubuf_map)
        return;
    munmap(rc->ubuf_map, rc->ubuf_len);
    rc->ubuf_map = NULL;
    rc->ubuf_len = rc->ubuf_d = 0;
    update_path(rc, path, sizeof(path));
    if (remove_file && stat(path, &sb) == 0 && sb.st_nlink == 1)
        unlink(path);
}

int fa_round_client_update_buffer(fa_round_client *rc, size_t d, float **out, fa_error *err)
{
    char path[4096];
    size_t len = UPDATE_HDR + (d ? d : 1) * sizeof(float);
    void *p;
    int fd, e;

    *out = NULL;
    if (rc->ubuf_map && rc->ubuf_d == d) {
        *out = (float *)(void *)(rc->ubuf_map + UPDATE_HDR);
        return 0;
    }
    fa_round_client_unmap_update(rc, 0);
    update_path(rc, path, sizeof(path));
    /* A new file: the old one may be a saved attempt's update, which lives
     * on as attempt.delta; and the pages of a new file need no reads. */
    if (unlink(path) != 0 && errno != ENOENT)
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: cannot remove the old file: %s", path,
                         strerror(errno));
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: %s", path, strerror(errno));
    e = posix_fallocate(fd, 0, (off_t)len);
    if (e != 0) {
        close(fd);
        unlink(path);
        return fa_errorf(err, e == ENOSPC ? FA_ERR_NOSPACE : FA_ERR_IO,
                         "update buffer %s: cannot reserve %zu bytes: %s", path, len, strerror(e));
    }
    p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        unlink(path);
        return fa_errorf(err, FA_ERR_IO, "update buffer %s: mmap of %zu bytes: %s", path, len,
                         strerror(e));
    }
    rc->ubuf_map = p;
    rc->ubuf_len = len;
    rc->ubuf_d = d;
    *out = (float *)(void *)(rc->ubuf_map + UPDATE_HDR);
    return 0;
}

/* Saves an update that lies in the update buffer without copying it: the
 * header into its first page, then attempt.delta as a second name for the
 * file (link, rename).  Returns 0, or 1 when the filesystem has no hard
 * links (the caller copies). */
static int save_update_in_place(fa_round_client *rc, const char *dl, const char *hdr, size_t n,
                                fa_error *err)
{
    char path[4096], tmp[4200];

    memset(rc->ubuf_map, ' ', UPDATE_HDR);
    memcpy(rc->ubuf_map, hdr, n - 1); /* without its newline */
    rc->ubuf_map[UPDATE_HDR - 1] = '\n';
    update_path(rc, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", dl);
    unlink(tmp);
    if (link(path, tmp) != 0) {
        if (errno == EPERM || errno == EOPNOTSUPP || errno == EXDEV || errno == EMLINK)
            return 1;
        return fa_errorf(err, FA_ERR_IO, "saving the attempt: link %s -> %s: %s", tmp, path,
                         strerror(errno));
    }
    if (rename(tmp, dl) != 0) {
        int e = errno;
        unlink(tmp);
        return fa_errorf(err, FA_ERR_IO, "saving the attempt: rename %s -> %s: %s", tmp, dl,
                         strerror(e));
    }
    return 0;
}

/* Both files are replaced atomically but not fsync'ed: a SIGKILL never loses
 * them, and losing them to a machine crash loses the attempt's keys with its
 * input, so no mask can ever meet another input: the restarted worker just
 * sits that attempt out (the aggregator refuses a second, different
 * advertisement) and joins the next.  Saving 4 bytes per parameter with
 * fsync before every upload would cost more than the upload on a fast link.
 *
 * attempt.state: "<magic> <round> <attempt> <d> <weight>\n" then the sealed
 * client (weight in C99 hex-float notation, exact).
 * attempt.delta: the same header line (padded with spaces before its
 * newline when it is the update buffer's file), then d floats
 * (little-endian).  An update in the update buffer is not written again:
 * attempt.delta is a second name for its file. */
/* attempt.delta: a second name for the update buffer's file when the update
 * lies there and the filesystem links, else a copy of the update. */
static int save_update(fa_round_client *rc, const char *dl, const char *hdr, size_t n,
                       const float *delta, size_t d, fa_error *err)
{
    fa_atomic_file *f = NULL;
    int r;

    if (rc->ubuf_map && d == rc->ubuf_d &&
        delta == (const float *)(void *)(rc->ubuf_map + UPDATE_HDR)) {
        r = save_update_in_place(rc, dl, hdr, n, err);
        if (r != 1)
            return r;
    }
    r = fa_atomic_file_open(&f, dl, 0600, err);
    if (r == 0)
        r = fa_atomic_file_write(f, hdr, n, err);
    if (r == 0)
        r = fa_atomic_file_write(f, delta, d * sizeof(float), err);
    if (r == 0)
        return fa_atomic_file_commit_nosync(f, err);
    fa_atomic_file_abort(f);
    return r;
}

int fa_round_client_save_attempt(fa_round_client *rc, const fa_secagg_client *c, uint64_t round,
                                 uint32_t attempt, const float *delta, size_t d, double weight,
                                 fa_error *err)
{
    char st[4096], dl[4096], hdr[128];
    fa_atomic_file *f = NULL;
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    int n, r;

    state_paths(rc, st, dl, sizeof(st));
    n = snprintf(hdr, sizeof(hdr), "%s %" PRIu64 " %u %zu %a\n", STATE_MAGIC, round, attempt, d,
                 weight);
    r = save_update(rc, dl, hdr, (size_t)n, delta, d, err);
    if (r == 0)
        r = fa_secagg_client_save(c, &blob, &blob_len, err);
    if (r == 0)
        r = fa_atomic_file_open(&f, st, 0600, err);
    if (r == 0)
        r = fa_atomic_file_write(f, hdr, (size_t)n, err);
    if (r == 0)
        r = fa_atomic_file_write(f, blob, blob_len, err);
    if (r == 0) {
        r = fa_atomic_file_commit_nosync(f, err);
        f = NULL;
    }
    fa_atomic_file_abort(f);
    if (blob) {
        sodium_memzero(blob, blob_len);
        free(blob);
    }
    return r;
}

/* Reads a saved file whose header matches; *payload points into *data. */
static int read_saved(const char *path, uint64_t round, uint32_t attempt, uint8_t **data,
                      size_t *len, const uint8_t **payload, size_t *payload_len, size_t *d,
                      double *weight)
{
    char magic[32];
    uint64_t r;
    unsigned a;
    size_t dd;
    double wt;
    int used = 0;
    uint8_t *nl;

    if (fa_file_read_all(path, data, len, (size_t)8 << 30, NULL) != 0)
        return FA_ERR_NOTFOUND;
    nl = memchr(*data, '\n', *len < UPDATE_HDR ? *len : UPDATE_HDR);
    if (nl &&
        sscanf((char *)*data, "%31s %" SCNu64 " %u %zu %la%n", magic, &r, &a, &dd, &wt, &used) == 5)
        while ((uint8_t *)*data + used < nl &&
               (*data)[used] == ' ') /* the update buffer's padding */
            used++;
    if (!nl || used == 0 || strcmp(magic, STATE_MAGIC) || (uint8_t *)*data + used != nl ||
        r != round || a != attempt) {
        free(*data);
        *data = NULL;
        return FA_ERR_NOTFOUND;
    }
    *payload = nl + 1;
    *payload_len = *len - (size_t)(nl + 1 - *data);
    *d = dd;
    *weight = wt;
    return 0;
}

int fa_round_client_has_saved(fa_round_client *rc, uint64_t round, uint32_t attempt)
{
    char st[4096], dl[4096];
    uint8_t *data = NULL;
    const uint8_t *p;
    size_t len, pl, d;
    double wt;
    int ok;

    state_paths(rc, st, dl, sizeof(st));
    ok = read_saved(st, round, attempt, &data, &len, &p, &pl, &d, &wt) == 0;
    if (data) {
        sodium_memzero(data, len);
        free(data);
    }
    return ok;
}

void fa_round_client_forget(fa_round_client *rc)
{
    char st[4096], dl[4096];
    state_paths(rc, st, dl, sizeof(st));
    unlink(st);
    unlink(dl);
}

int fa_round_client_restore_attempt(fa_round_client *rc, uint64_t round, uint32_t attempt,
                                    fa_secagg_client **c, float **delta, size_t *d, double *weight,
                                    fa_error *err)
{
    char st[4096], dl[4096];
    uint8_t *sdata = NULL, *ddata = NULL;
    const uint8_t *sp, *dp;
    size_t slen, dlen, spl, dpl, sd, dd;
    double w1, w2;
    int r;

    state_paths(rc, st, dl, sizeof(st));
    if (read_saved(st, round, attempt, &sdata, &slen, &sp, &spl, &sd, &w1) != 0 ||
        read_saved(dl, round, attempt, &ddata, &dlen, &dp, &dpl, &dd, &w2) != 0 || sd != dd ||
        w1 != w2 || dpl != dd * sizeof(float)) {
        r = fa_errorf(err, FA_ERR_NOTFOUND,
                      "no complete saved state for round %" PRIu64 " attempt %u", round, attempt);
        goto out;
    }
    *delta = malloc(dd * sizeof(float) + 1);
    if (!*delta) {
        r = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    memcpy(*delta, dp, dd * sizeof(float));
    *d = dd;
    *weight = w1;
    r = fa_secagg_client_restore(c, sp, spl, rc->seed, rc->members, rc->n_members, NULL, err);
    if (r != 0) {
        free(*delta);
        *delta = NULL;
    }
out:
    if (sdata) {
        sodium_memzero(sdata, slen);
        free(sdata);
    }
    free(ddata);
    return r;
}
