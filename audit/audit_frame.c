/* audit_frame.c - the audit log's files at the byte level: headers, CRC-framed records,
 * positioned reads and writes, the sequential frame reader. */
#include "audit/audit_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char fa_audit_log_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 'a', 'u', 'd', 'i', 't'};
const char fa_audit_ckpt_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 'c', 'k', 'p', 't', 's'};
const char fa_audit_tree_magic[12] = {'f', 'e', 'd', 'a', 'g', 'g', '-', 't', 'r', 'e', 'e', 0};

/* ---------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------- */

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint32_t fa_audit_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint32_t fa_audit_frame_crc(const uint8_t *len_be, const uint8_t *payload, uint32_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, len_be, 4);
    c = crc32(c, payload, len);
    return (uint32_t)c;
}

/* Writes a frame (length | payload | crc) into out (room for len + 8). */
void fa_audit_frame_encode(uint8_t *out, const uint8_t *payload, uint32_t len)
{
    put_be32(out, len);
    memcpy(out + 4, payload, len);
    put_be32(out + 4 + len, fa_audit_frame_crc(out, payload, len));
}

char *fa_audit_path_with(const char *path, const char *suffix)
{
    size_t n = strlen(path) + strlen(suffix) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", path, suffix);
    return s;
}

int fa_audit_write_all_at(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int fa_audit_read_all_at(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = 0; /* short file */
            return -1;
        }
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int fa_audit_read_failed(fa_error *err, const char *path)
{
    if (errno == 0) /* fa_audit_read_all_at: the file ended early */
        return fa_errorf(err, FA_ERR_CORRUPT,
                         "%s: the file ends before what was written to it (cut short while the "
                         "aggregator ran?): the audit log is damaged; see `fedagg audit repair` "
                         "in docs/operations.md",
                         path);
    return fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(errno));
}

int fa_audit_file_size(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *size = (uint64_t)st.st_size;
    return 0;
}

int fa_audit_sync_fd(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

void fa_audit_make_header(uint8_t hdr[FA_AUDIT_HDR_LEN], const char magic[12])
{
    memcpy(hdr, magic, 12);
    put_be32(hdr + 12, FA_AUDIT_FORMAT_VERSION);
}

int fa_audit_header_ok(const uint8_t hdr[FA_AUDIT_HDR_LEN], const char magic[12])
{
    return memcmp(hdr, magic, 12) == 0 && fa_audit_get_be32(hdr + 12) == FA_AUDIT_FORMAT_VERSION;
}

/* ---------------------------------------------------------------------------
 * Sequential frame reader
 * ------------------------------------------------------------------------- */

int fa_audit_rd_init(struct fa_audit_rd *r, int fd, uint64_t start, uint64_t file_size)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->cap = 64u * 1024; /* grows for larger frames */
    r->buf = malloc(r->cap);
    r->off = start;
    r->file_size = file_size;
    return r->buf ? 0 : -1;
}

void fa_audit_rd_free(struct fa_audit_rd *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Makes min(n, bytes left in the file) bytes available at r->buf + r->pos.
 * Returns the count available, or -1 on an I/O error or out of memory. */
long fa_audit_rd_fill(struct fa_audit_rd *r, size_t n)
{
    uint64_t left = r->file_size > r->off ? r->file_size - r->off : 0;
    if (n > left)
        n = (size_t)left;
    if (r->len >= n)
        return (long)n;
    if (n > r->cap) {
        size_t cap = r->cap;
        uint8_t *b;
        while (cap < n)
            cap *= 2;
        b = malloc(cap);
        if (!b)
            return -1;
        memcpy(b, r->buf + r->pos, r->len);
        free(r->buf);
        r->buf = b;
        r->cap = cap;
        r->pos = 0;
    } else if (r->pos + n > r->cap) {
        memmove(r->buf, r->buf + r->pos, r->len);
        r->pos = 0;
    }
    while (r->len < n) {
        size_t want = r->cap - r->pos - r->len;
        ssize_t got = pread(r->fd, r->buf + r->pos + r->len, want, (off_t)(r->off + r->len));
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (got == 0)
            break; /* the file shrank under us */
        r->len += (size_t)got;
    }
    return (long)(r->len < n ? r->len : n);
}

void fa_audit_rd_skip(struct fa_audit_rd *r, size_t n)
{
    r->pos += n;
    r->len -= n;
    r->off += n;
}

/* Reads the next frame.  On FRAME_OK and FRAME_BADCRC, *payload and *len point
 * into the reader (valid until the next call) and the frame is consumed. */
enum fa_audit_frame_status fa_audit_rd_frame(struct fa_audit_rd *r, uint32_t max_len,
                                             const uint8_t **payload, uint32_t *len,
                                             uint64_t *frame_off)
{
    long got;
    uint32_t n;
    const uint8_t *p;

    *frame_off = r->off;
    got = fa_audit_rd_fill(r, 4);
    if (got < 0)
        return FRAME_IOERR;
    if (got == 0)
        return FRAME_EOF;
    if (got < 4)
        return FRAME_TORN;
    n = fa_audit_get_be32(r->buf + r->pos);
    if ((uint64_t)n + FA_AUDIT_FRAME_OVERHEAD > r->file_size - r->off)
        return FRAME_TORN;
    if (n == 0 || n > max_len)
        return FRAME_BADLEN;
    got = fa_audit_rd_fill(r, (size_t)n + FA_AUDIT_FRAME_OVERHEAD);
    if (got < 0)
        return FRAME_IOERR;
    if ((size_t)got < (size_t)n + FA_AUDIT_FRAME_OVERHEAD)
        return FRAME_TORN;
    p = r->buf + r->pos;
    *payload = p + 4;
    *len = n;
    fa_audit_rd_skip(r, (size_t)n + FA_AUDIT_FRAME_OVERHEAD);
    return fa_audit_get_be32(p + 4 + n) == fa_audit_frame_crc(p, p + 4, n) ? FRAME_OK
                                                                           : FRAME_BADCRC;
}
