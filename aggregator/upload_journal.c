/* upload_journal.c - masked-upload journals in files.  See upload_journal.h. */
#include "aggregator/upload_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_mem.h"

struct slot {
    uint8_t *mem;   /* a memory slot's journal (slot_bytes, allocated at its first write) */
    int fd;         /* a file slot's file; -1 before the first write */
    uint64_t bytes; /* written (in the file, and the buffer after it) */
    uint8_t *buf;   /* FA_UPLOAD_JOURNAL_BUF: the bytes after `flushed` */
    size_t buf_len;
    uint64_t flushed; /* bytes in the file */
};

struct fa_upload_journal {
    char *dir;
    uint32_t n, n_mem; /* slots; the first n_mem keep their journal in memory */
    uint64_t slot_bytes;
    struct slot *slots;
};

static uint32_t memory_slots(uint32_t slots, uint64_t slot_bytes, uint64_t memory_budget)
{
    if (slot_bytes == 0 || slot_bytes > SIZE_MAX / 2)
        return 0;
    return memory_budget / slot_bytes < slots ? (uint32_t)(memory_budget / slot_bytes) : slots;
}

uint64_t fa_upload_journal_memory_need(uint32_t slots, uint64_t slot_bytes, uint64_t memory_budget)
{
    uint32_t m = memory_slots(slots, slot_bytes, memory_budget);
    return (uint64_t)m * slot_bytes + (uint64_t)(slots - m) * FA_UPLOAD_JOURNAL_BUF;
}

int fa_upload_journal_new(fa_upload_journal **out, const char *dir, uint32_t slots,
                          uint64_t slot_bytes, uint64_t memory_budget, fa_error *err)
{
    fa_upload_journal *j;

    *out = NULL;
    if (slots < 1 || slots > 1024)
        return fa_errorf(err, FA_ERR_INVAL, "upload journal: %u slots (1..1024)", slots);
    j = calloc(1, sizeof(*j));
    if (!j || !(j->dir = strdup(dir)) || !(j->slots = calloc(slots, sizeof(*j->slots)))) {
        if (j)
            free(j->dir);
        free(j);
        return fa_errorf(err, FA_ERR_NOMEM, "upload journal: out of memory");
    }
    j->n = slots;
    j->slot_bytes = slot_bytes;
    j->n_mem = memory_slots(slots, slot_bytes, memory_budget);
    for (uint32_t i = 0; i < slots; i++)
        j->slots[i].fd = -1;
    *out = j;
    return 0;
}

void fa_upload_journal_del(fa_upload_journal *j)
{
    if (!j)
        return;
    for (uint32_t i = 0; i < j->n; i++) {
        if (j->slots[i].fd >= 0)
            close(j->slots[i].fd);
        free(j->slots[i].buf);
        free(j->slots[i].mem);
    }
    free(j->slots);
    free(j->dir);
    free(j);
}

uint32_t fa_upload_journal_memory_slots(const fa_upload_journal *j)
{
    return j->n_mem;
}

uint64_t fa_upload_journal_bytes(const fa_upload_journal *j)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < j->n; i++)
        n += j->slots[i].flushed;
    return n;
}

/* A file nobody else can see: O_TMPFILE, or a name unlinked at once. */
static int open_file(fa_upload_journal *j, uint32_t slot, fa_error *err)
{
    char path[4200];
    int fd;

#ifdef O_TMPFILE
    fd = open(j->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0)
        return fd;
#endif
    snprintf(path, sizeof(path), "%s/upload-journal.%u.XXXXXX", j->dir, slot);
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "upload journal in %s: %s", j->dir, strerror(errno));
    unlink(path);
    return fd;
}

static int pwrite_all(int fd, const uint8_t *p, size_t len, uint64_t off, const char *dir,
                      fa_error *err)
{
    while (len > 0) {
        ssize_t w = pwrite(fd, p, len, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return fa_errorf(err, FA_ERR_IO, "upload journal in %s: write: %s", dir,
                             w < 0 ? strerror(errno) : "no progress");
        p += w;
        len -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static int flush_slot(fa_upload_journal *j, struct slot *s, fa_error *err)
{
    int rc;
    if (s->buf_len == 0)
        return 0;
    rc = pwrite_all(s->fd, s->buf, s->buf_len, s->flushed, j->dir, err);
    if (rc == 0) {
        s->flushed += s->buf_len;
        s->buf_len = 0;
    }
    return rc;
}

static int jwrite(void *ctx, uint32_t slot, uint64_t off, const uint8_t *data, size_t len,
                  fa_error *err)
{
    fa_upload_journal *j = ctx;
    struct slot *s;
    int rc;

    if (slot >= j->n)
        return fa_errorf(err, FA_ERR_INVAL, "upload journal: slot %u of %u", slot, j->n);
    s = &j->slots[slot];
    if (off == 0) { /* a new upload in the slot (its last may never have been cleared) */
        s->bytes = s->flushed = 0;
        s->buf_len = 0;
    }
    if (off != s->bytes)
        return fa_errorf(err, FA_ERR_INVAL,
                         "upload journal: slot %u written at %llu after %llu bytes", slot,
                         (unsigned long long)off, (unsigned long long)s->bytes);
    if (slot < j->n_mem) {
        if (len > j->slot_bytes - off)
            return fa_errorf(err, FA_ERR_INVAL,
                             "upload journal: slot %u: %zu bytes after %llu, it holds %llu", slot,
                             len, (unsigned long long)off, (unsigned long long)j->slot_bytes);
        if (!s->mem && !(s->mem = malloc((size_t)j->slot_bytes)))
            return fa_errorf(err, FA_ERR_NOMEM, "upload journal: out of memory");
        fa_copy_cold(s->mem + off, data, len); /* read back only if the upload breaks off */
        s->bytes += len;
        return 0;
    }
    if (s->fd < 0 && (s->fd = open_file(j, slot, err)) < 0)
        return s->fd;
    if (!s->buf && !(s->buf = malloc(FA_UPLOAD_JOURNAL_BUF)))
        return fa_errorf(err, FA_ERR_NOMEM, "upload journal: out of memory");
    while (len > 0) {
        size_t take = FA_UPLOAD_JOURNAL_BUF - s->buf_len;
        if (take > len)
            take = len;
        memcpy(s->buf + s->buf_len, data, take);
        s->buf_len += take;
        data += take;
        len -= take;
        s->bytes += take;
        if (s->buf_len == FA_UPLOAD_JOURNAL_BUF && (rc = flush_slot(j, s, err)) != 0) {
            /* None of this call's bytes count (the caller sums none of them);
             * those before it stay readable, in the file or the buffer. */
            s->bytes = off;
            if (s->flushed > off) {
                s->flushed = off;
                s->buf_len = 0;
            } else {
                s->buf_len = (size_t)(off - s->flushed);
            }
            return rc;
        }
    }
    return 0;
}

static int jread(void *ctx, uint32_t slot, uint64_t off, uint8_t *buf, size_t len, fa_error *err)
{
    fa_upload_journal *j = ctx;
    struct slot *s;
    int rc;

    if (slot >= j->n)
        return fa_errorf(err, FA_ERR_INVAL, "upload journal: slot %u of %u", slot, j->n);
    s = &j->slots[slot];
    if (off > s->bytes || len > s->bytes - off)
        return fa_errorf(err, FA_ERR_INVAL,
                         "upload journal: slot %u: bytes [%llu, +%zu) read of %llu", slot,
                         (unsigned long long)off, len, (unsigned long long)s->bytes);
    if (slot < j->n_mem) {
        memcpy(buf, s->mem + off, len);
        return 0;
    }
    if ((rc = flush_slot(j, s, err)) != 0)
        return rc;
    while (len > 0) {
        ssize_t r = pread(s->fd, buf, len, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return fa_errorf(err, FA_ERR_IO, "upload journal in %s: read: %s", j->dir,
                             r < 0 ? strerror(errno) : "short file");
        buf += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static void jclear(void *ctx, uint32_t slot)
{
    fa_upload_journal *j = ctx;
    struct slot *s;

    if (slot >= j->n)
        return;
    s = &j->slots[slot];
    if (s->fd >= 0 && s->flushed > 0 && ftruncate(s->fd, 0) != 0) {
        /* Cannot shrink it: start over in a new file. */
        close(s->fd);
        s->fd = -1;
    }
    s->bytes = s->flushed = 0;
    s->buf_len = 0;
}

void fa_upload_journal_iface(fa_upload_journal *j, fa_secagg_journal *out)
{
    out->write = jwrite;
    out->read = jread;
    out->clear = jclear;
    out->ctx = j;
}
