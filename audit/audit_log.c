/* audit_log.c - the audit log: the node store, open (scan, recovery of a torn tail,
 * tree rebuild), append and its commit point, close.  See audit_log.h. */
#include "audit/audit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"

/* ---------------------------------------------------------------------------
 * Node store
 * ------------------------------------------------------------------------- */

int fa_audit_node_get(void *ctx, unsigned level, uint64_t index, uint8_t out[FA_AUDIT_HLEN])
{
    fa_audit_log *log = ctx;
    uint64_t pos;

    if (level >= 64 || index > (UINT64_MAX >> level) - 1 || ((index + 1) << level) > log->n)
        return FA_ERR_RANGE;
    pos = fa_merkle_node_pos(level, index);
    if (log->mem && pos >= log->mem_base) {
        if (pos - log->mem_base >= log->mem_count)
            return FA_ERR_RANGE;
        memcpy(out, log->mem + (pos - log->mem_base) * FA_AUDIT_HLEN, FA_AUDIT_HLEN);
        return 0;
    }
    if (fa_audit_read_all_at(log->tree_fd, out, FA_AUDIT_HLEN,
                             FA_AUDIT_HDR_LEN + pos * FA_AUDIT_HLEN) != 0) {
        if (errno != 0)
            return FA_ERR_IO;
        if (!log->damaged) {
            log->damaged = 1;
            snprintf(log->damage, sizeof(log->damage),
                     "%s: the file ends before what was written to it (cut short while the "
                     "aggregator ran?)",
                     log->tree_path);
        }
        return FA_ERR_CORRUPT;
    }
    return 0;
}

static int mem_push(fa_audit_log *log, const uint8_t *h)
{
    if (log->mem_count == log->mem_cap) {
        uint64_t cap = log->mem_cap ? log->mem_cap * 2 : 1024;
        uint8_t *m = realloc(log->mem, cap * FA_AUDIT_HLEN);
        if (!m)
            return -1;
        log->mem = m;
        log->mem_cap = cap;
    }
    memcpy(log->mem + log->mem_count * FA_AUDIT_HLEN, h, FA_AUDIT_HLEN);
    log->mem_count++;
    return 0;
}

static int off_reserve(fa_audit_log *log, uint64_t more)
{
    if (log->n + more > log->off_cap) {
        size_t cap = log->off_cap ? log->off_cap : 1024;
        uint64_t *o;
        while (cap < log->n + more)
            cap *= 2;
        o = realloc(log->off, cap * sizeof(*o));
        if (!o)
            return -1;
        log->off = o;
        log->off_cap = cap;
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * Open
 * ------------------------------------------------------------------------- */

static void log_free(fa_audit_log *log)
{
    if (!log)
        return;
    if (log->fd >= 0)
        close(log->fd);
    if (log->ckpt_fd >= 0)
        close(log->ckpt_fd);
    if (log->tree_fd >= 0)
        close(log->tree_fd);
    free(log->path);
    free(log->ckpt_path);
    free(log->tree_path);
    free(log->off);
    free(log->mem);
    free(log->latest);
    pthread_mutex_destroy(&log->mu);
    free(log);
}

void fa_audit_log_close(fa_audit_log *log)
{
    log_free(log);
}

/* Creates the three files of an empty log (writer).  The log header goes
 * last: a log file with a valid header always has its companions. */
static int create_files(fa_audit_log *log, fa_error *err)
{
    uint8_t hdr[FA_AUDIT_HDR_LEN];

    fa_audit_make_header(hdr, fa_audit_ckpt_magic);
    if (ftruncate(log->ckpt_fd, 0) != 0 ||
        fa_audit_write_all_at(log->ckpt_fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
        (!log->nosync && fa_audit_sync_fd(log->ckpt_fd) != 0))
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->ckpt_path, strerror(errno));
    fa_audit_make_header(hdr, fa_audit_tree_magic);
    if (ftruncate(log->tree_fd, 0) != 0 ||
        fa_audit_write_all_at(log->tree_fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
    fa_audit_make_header(hdr, fa_audit_log_magic);
    if (ftruncate(log->fd, 0) != 0 ||
        fa_audit_write_all_at(log->fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
        (!log->nosync && fa_audit_sync_fd(log->fd) != 0))
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->path, strerror(errno));
    if (!log->nosync && fa_file_sync_dir(log->path, err) != 0)
        return FA_ERR_IO;
    log->log_end = FA_AUDIT_HDR_LEN;
    log->ckpt_end = FA_AUDIT_HDR_LEN;
    return 0;
}

/* Scans the checkpoints file: finds the last complete frame, cuts (writer) or
 * reports a torn tail, loads and checks the latest checkpoint. */
static int scan_checkpoints(fa_audit_log *log, const fa_note_verifier *v, fa_audit_open_report *rep,
                            fa_error *err)
{
    uint64_t size, last_off = 0, k = 0;
    uint32_t last_len = 0;
    uint8_t hdr[FA_AUDIT_HDR_LEN];
    struct fa_audit_rd r;
    fa_checkpoint cp;
    int rc = 0;

    if (fa_audit_file_size(log->ckpt_fd, &size) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->ckpt_path, strerror(errno));
    if (size < FA_AUDIT_HDR_LEN ||
        fa_audit_read_all_at(log->ckpt_fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
        !fa_audit_header_ok(hdr, fa_audit_ckpt_magic))
        return fa_errorf(err, FA_ERR_CORRUPT, "%s: not a fedagg checkpoints file (bad header)",
                         log->ckpt_path);
    if (fa_audit_rd_init(&r, log->ckpt_fd, FA_AUDIT_HDR_LEN, size) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        enum fa_audit_frame_status st = fa_audit_rd_frame(&r, FA_AUDIT_MAX_NOTE, &p, &len, &off);
        if (st == FRAME_OK) {
            last_off = off;
            last_len = len;
            k++;
            continue;
        }
        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_audit_read_failed(err, log->ckpt_path);
            goto out;
        }
        if (st == FRAME_TORN || (st == FRAME_BADCRC && r.off == size)) {
            /* A crash while the last checkpoint was written. */
            rep->torn_checkpoint_bytes = size - off;
            if (!log->readonly) {
                if (ftruncate(log->ckpt_fd, (off_t)off) != 0 ||
                    (!log->nosync && fa_audit_sync_fd(log->ckpt_fd) != 0)) {
                    rc = fa_errorf(err, FA_ERR_IO, "%s: truncate: %s", log->ckpt_path,
                                   strerror(errno));
                    goto out;
                }
                fa_log(FA_LOG_WARN, "audit: cut off a torn checkpoint",
                       "file=%s offset=%" PRIu64 " bytes=%" PRIu64, log->ckpt_path, off,
                       size - off);
            }
            size = off;
            break;
        }
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: checkpoint %" PRIu64 " at offset %" PRIu64 ": %s (run `fedagg audit "
                       "verify` for details)",
                       log->ckpt_path, k, off,
                       st == FRAME_BADLEN ? "invalid length" : "checksum mismatch");
        goto out;
    }
    log->ckpt_end = size;
    if (k == 0) {
        log->signed_size = 0;
        goto out;
    }
    log->latest = malloc((size_t)last_len + 1);
    if (!log->latest) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (fa_audit_read_all_at(log->ckpt_fd, log->latest, last_len, last_off + 4) != 0) {
        rc = fa_audit_read_failed(err, log->ckpt_path);
        goto out;
    }
    log->latest[last_len] = 0;
    log->latest_len = last_len;
    rc = fa_checkpoint_parse(log->latest, last_len, &cp, err);
    if (rc == 0 && log->origin[0] && strcmp(cp.origin, log->origin) != 0) {
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "%s: the log's origin is \"%s\", not \"%s\" (a different log, or "
                       "audit.origin changed?)",
                       log->path, cp.origin, log->origin);
        goto out;
    }
    if (rc == 0 && v)
        rc = fa_checkpoint_open(log->latest, last_len, v, &cp, err);
    if (rc < 0) {
        fa_error_prefix(err, rc, "%s: latest checkpoint", log->ckpt_path);
        goto out;
    }
    snprintf(log->origin, sizeof(log->origin), "%s", cp.origin);
    log->signed_size = cp.size;
    memcpy(log->latest_root, cp.root, FA_AUDIT_HLEN);
out:
    fa_audit_rd_free(&r);
    return rc;
}

/* Where scan_log puts the nodes it computes. */
struct tree_sink {
    uint64_t stored; /* nodes in the tree file at open */
    uint64_t pos;    /* next node position */
    int stale;       /* from `from` on, the file is not trusted */
    uint64_t from;
    struct fa_audit_rd r; /* reads the stored nodes in order */
    uint8_t *wbuf;        /* writer: buffered rewrite */
    size_t wlen;
    uint64_t wpos;
};

static int sink_flush(fa_audit_log *log, struct tree_sink *t)
{
    if (t->wlen == 0)
        return 0;
    if (fa_audit_write_all_at(log->tree_fd, t->wbuf, t->wlen * FA_AUDIT_HLEN,
                              FA_AUDIT_HDR_LEN + t->wpos * FA_AUDIT_HLEN) != 0)
        return -1;
    t->wpos += t->wlen;
    t->wlen = 0;
    return 0;
}

static int sink_node(fa_audit_log *log, struct tree_sink *t, const uint8_t *h)
{
    if (!t->stale && t->pos < t->stored) {
        long got = fa_audit_rd_fill(&t->r, FA_AUDIT_HLEN);
        if (got == FA_AUDIT_HLEN && memcmp(t->r.buf + t->r.pos, h, FA_AUDIT_HLEN) == 0) {
            fa_audit_rd_skip(&t->r, FA_AUDIT_HLEN);
            t->pos++;
            return 0;
        }
    }
    if (!t->stale) {
        t->stale = 1;
        t->from = t->pos;
        t->wpos = t->pos;
        if (!log->readonly && !t->wbuf && !(t->wbuf = malloc(4096 * FA_AUDIT_HLEN)))
            return -1;
        if (log->readonly)
            log->mem_base = t->pos;
    }
    t->pos++;
    if (log->readonly)
        return mem_push(log, h);
    memcpy(t->wbuf + t->wlen * FA_AUDIT_HLEN, h, FA_AUDIT_HLEN);
    if (++t->wlen == 4096)
        return sink_flush(log, t);
    return 0;
}

/* Scans the log: checksums, offsets, the tree (checked against LOG.tree and
 * the latest checkpoint), the last record; cuts or reports a torn tail. */
static int scan_log(fa_audit_log *log, fa_audit_open_report *rep, fa_error *err)
{
    uint8_t want_root[FA_AUDIT_HLEN], root[FA_AUDIT_HLEN], hdr[FA_AUDIT_HDR_LEN],
        done[64 * FA_AUDIT_HLEN];
    uint64_t size, tree_size = 0;
    struct tree_sink t;
    struct fa_audit_rd r;
    int rc = 0, have_want = log->latest != NULL;
    uint8_t *last = NULL;
    uint32_t last_len = 0;

    memcpy(want_root, log->latest_root, FA_AUDIT_HLEN);
    fa_merkle_frontier_init(&log->fr);
    memset(&t, 0, sizeof(t));
    if (fa_audit_file_size(log->fd, &size) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", log->path, strerror(errno));
    if (fa_audit_file_size(log->tree_fd, &tree_size) == 0 && tree_size >= FA_AUDIT_HDR_LEN &&
        fa_audit_read_all_at(log->tree_fd, hdr, FA_AUDIT_HDR_LEN, 0) == 0 &&
        fa_audit_header_ok(hdr, fa_audit_tree_magic))
        t.stored = (tree_size - FA_AUDIT_HDR_LEN) / FA_AUDIT_HLEN;
    else if (!log->readonly) {
        fa_audit_make_header(hdr, fa_audit_tree_magic);
        if (fa_audit_write_all_at(log->tree_fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0)
            return fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
    }
    if (fa_audit_rd_init(&r, log->fd, FA_AUDIT_HDR_LEN, size) != 0 ||
        fa_audit_rd_init(&t.r, log->tree_fd, FA_AUDIT_HDR_LEN,
                         FA_AUDIT_HDR_LEN + t.stored * FA_AUDIT_HLEN) != 0) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (have_want && log->signed_size == 0) {
        fa_merkle_empty_root(root);
        if (memcmp(root, want_root, FA_AUDIT_HLEN) != 0) {
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: the latest checkpoint signs an empty tree with a wrong root",
                           log->ckpt_path);
            goto out;
        }
    }
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        unsigned k;
        enum fa_audit_frame_status st = fa_audit_rd_frame(&r, FA_AUDIT_MAX_RECORD, &p, &len, &off);

        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_audit_read_failed(err, log->path);
            goto out;
        }
        if (st != FRAME_OK) {
            int at_end = st == FRAME_TORN || (st == FRAME_BADCRC && r.off == size);
            if (at_end && log->n >= log->signed_size) {
                /* A crash while the last record was written: it was never
                 * committed (no checkpoint covers it). */
                rep->torn_log_bytes = size - off;
                if (!log->readonly) {
                    if (ftruncate(log->fd, (off_t)off) != 0 ||
                        (!log->nosync && fa_audit_sync_fd(log->fd) != 0)) {
                        rc = fa_errorf(err, FA_ERR_IO, "%s: truncate: %s", log->path,
                                       strerror(errno));
                        goto out;
                    }
                    fa_log(FA_LOG_WARN, "audit: cut off a torn record",
                           "file=%s record=%" PRIu64 " offset=%" PRIu64 " bytes=%" PRIu64,
                           log->path, log->n, off, size - off);
                }
                size = off;
                break;
            }
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: record %" PRIu64 " at offset %" PRIu64
                           ": %s; the log is damaged (run `fedagg audit verify` for details)",
                           log->path, log->n, off,
                           st == FRAME_BADLEN ? "invalid length"
                           : st == FRAME_TORN ? "the file ends inside it, but a signed checkpoint "
                                                "covers it"
                                              : "checksum mismatch");
            goto out;
        }
        if (off_reserve(log, 1) != 0) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out;
        }
        log->off[log->n++] = off;
        fa_merkle_leaf_hash(p, len, done);
        fa_merkle_frontier_push(&log->fr, done, done, &k);
        for (unsigned i = 0; i < k; i++)
            if (sink_node(log, &t, done + i * FA_AUDIT_HLEN) != 0) {
                rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
                goto out;
            }
        if (have_want && log->n == log->signed_size) {
            fa_merkle_frontier_root(&log->fr, root);
            if (memcmp(root, want_root, FA_AUDIT_HLEN) != 0) {
                rc = fa_errorf(err, FA_ERR_CORRUPT,
                               "%s: records 0..%" PRIu64 " do not match the latest signed "
                               "checkpoint (tree size %" PRIu64
                               "); the log was changed (run `fedagg audit verify` to find the "
                               "record)",
                               log->path, log->n - 1, log->signed_size);
                goto out;
            }
        }
        last_len = len;
    }
    if (log->n < log->signed_size) {
        rc =
            fa_errorf(err, FA_ERR_CORRUPT,
                      "%s: the log has %" PRIu64 " records but the latest checkpoint signs %" PRIu64
                      ": records %" PRIu64 "..%" PRIu64 " are missing (truncated or deleted)",
                      log->path, log->n, log->signed_size, log->n, log->signed_size - 1);
        goto out;
    }
    log->log_end = size;

    /* The tree file: finish the rewrite, drop nodes beyond the log. */
    if (t.stale || t.stored != t.pos) {
        rep->tree_rebuilt = 1;
        if (!log->readonly) {
            if (sink_flush(log, &t) != 0 ||
                ftruncate(log->tree_fd, (off_t)(FA_AUDIT_HDR_LEN + t.pos * FA_AUDIT_HLEN)) != 0) {
                rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
                goto out;
            }
            if (t.stale && t.from < t.stored)
                fa_log(FA_LOG_WARN, "audit: tree file was stale and was rebuilt",
                       "file=%s from_node=%" PRIu64, log->tree_path, t.from);
        } else if (!t.stale) {
            log->mem_base = t.pos; /* only extra nodes: nothing to hold */
        }
    }

    /* The last record, for the rules of the next append. */
    if (log->n > 0) {
        Fedagg__AuditRecord *rec;
        last = malloc(last_len);
        if (!last) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out;
        }
        if (fa_audit_read_all_at(log->fd, last, last_len, log->off[log->n - 1] + 4) != 0) {
            rc = fa_audit_read_failed(err, log->path);
            goto out;
        }
        rec = fedagg__audit_record__unpack(NULL, last_len, last);
        if (rec) {
            log->have_last = 1;
            log->last_admin = fa_audit_record_is_action(rec);
            log->last_round = rec->round;
            log->last_attempt = rec->attempt;
            log->last_new_version = rec->new_version;
            if (rec->new_model_sha256.len == FA_AUDIT_HLEN)
                memcpy(log->last_new_model, rec->new_model_sha256.data, FA_AUDIT_HLEN);
            fedagg__audit_record__free_unpacked(rec, NULL);
        } else if (!log->readonly) {
            rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 " is not an AuditRecord",
                           log->path, log->n - 1);
            goto out;
        }
    }
out:
    free(last);
    free(t.wbuf);
    fa_audit_rd_free(&t.r);
    fa_audit_rd_free(&r);
    return rc;
}

static int commit_checkpoint(fa_audit_log *log, fa_error *err);

static int open_common(fa_audit_log **out, const char *path, const fa_note_signer *signer,
                       const char *origin, const fa_note_verifier *v, unsigned flags,
                       fa_audit_open_report *report, fa_error *err)
{
    fa_audit_log *log;
    fa_audit_open_report dummy;
    fa_note_verifier own;
    uint64_t size = 0;
    int rc = 0, oflags;
    uint8_t hdr[FA_AUDIT_HDR_LEN];

    *out = NULL;
    if (!report)
        report = &dummy;
    memset(report, 0, sizeof(*report));
    log = calloc(1, sizeof(*log));
    if (!log)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&log->mu, NULL);
    log->fd = log->ckpt_fd = log->tree_fd = -1;
    log->readonly = signer == NULL;
    log->nosync = (flags & FA_AUDIT_LOG_NOSYNC) != 0;
    log->signer = signer;
    log->path = strdup(path);
    log->ckpt_path = fa_audit_path_with(path, ".checkpoints");
    log->tree_path = fa_audit_path_with(path, ".tree");
    if (!log->path || !log->ckpt_path || !log->tree_path) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (signer) {
        const char *o = origin && origin[0] ? origin : fa_note_signer_name(signer);
        if (strcmp(o, fa_note_signer_name(signer)) != 0 || !fa_note_name_valid(o)) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "origin \"%s\" must be a valid key name and the signer's name (\"%s\")",
                           o, fa_note_signer_name(signer));
            goto fail;
        }
        snprintf(log->origin, sizeof(log->origin), "%s", o);
        memset(&own, 0, sizeof(own));
        snprintf(own.name, sizeof(own.name), "%s", o);
        memcpy(own.pk, fa_note_signer_public_key(signer), FA_ED25519_PK_LEN);
        v = &own;
    }

    oflags = log->readonly ? O_RDONLY : O_RDWR | O_CREAT;
    log->fd = open(path, oflags | O_CLOEXEC, 0644);
    if (log->fd < 0) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto fail;
    }
    if (!log->readonly && flock(log->fd, LOCK_EX | LOCK_NB) != 0) {
        rc = fa_errorf(err, FA_ERR_STATE, "%s: another process has the audit log open for writing",
                       path);
        goto fail;
    }
    if (fa_audit_file_size(log->fd, &size) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    /* The companions are created only with a new log; a missing checkpoints
     * file of an existing log is damage, not something to recreate. */
    log->ckpt_fd = open(log->ckpt_path,
                        (size < FA_AUDIT_HDR_LEN ? oflags : oflags & ~O_CREAT) | O_CLOEXEC, 0644);
    if (log->ckpt_fd < 0 && errno == ENOENT && size >= FA_AUDIT_HDR_LEN) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: missing (the checkpoints of %s)", log->ckpt_path,
                       path);
        goto fail;
    }
    log->tree_fd = open(log->tree_path, oflags | O_CLOEXEC, 0644);
    if (log->ckpt_fd < 0 && !(log->readonly && errno == ENOENT && size < FA_AUDIT_HDR_LEN)) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_CORRUPT : FA_ERR_IO,
                       "%s: %s (the log's checkpoints)", log->ckpt_path, strerror(errno));
        goto fail;
    }
    if (log->tree_fd < 0 && !log->readonly) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", log->tree_path, strerror(errno));
        goto fail;
    }

    if (size < FA_AUDIT_HDR_LEN) {
        /* New log, or one whose creation was cut short (its header is written
         * last, so nothing can have been committed). */
        if (log->readonly) {
            rc = fa_errorf(err, size == 0 ? FA_ERR_NOTFOUND : FA_ERR_CORRUPT, "%s: %s", path,
                           size == 0 ? "empty file, not an audit log yet" : "incomplete header");
            goto fail;
        }
        rc = create_files(log, err);
        if (rc < 0)
            goto fail;
        report->created = 1;
        fa_merkle_frontier_init(&log->fr);
        rc = commit_checkpoint(log, err);
        if (rc < 0)
            goto fail;
        fa_log(FA_LOG_INFO, "audit: created log", "file=%s origin=%s", path, log->origin);
        *out = log;
        return 0;
    }
    if (fa_audit_read_all_at(log->fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
        !fa_audit_header_ok(hdr, fa_audit_log_magic)) {
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s: not a fedagg audit log (bad header)", path);
        goto fail;
    }
    if (log->tree_fd < 0) {
        /* read-only without a tree file: every node in memory */
        log->tree_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    }
    rc = scan_checkpoints(log, v, report, err);
    if (rc < 0)
        goto fail;
    rc = scan_log(log, report, err);
    if (rc < 0)
        goto fail;
    report->records = log->n;
    if (log->n > log->signed_size || !log->latest) {
        report->unsigned_records = log->n - log->signed_size;
        if (!log->readonly && report->unsigned_records > 1 && !(flags & FA_AUDIT_LOG_RESIGN_TAIL)) {
            rc = fa_errorf(err, FA_ERR_CORRUPT,
                           "%s: records %" PRIu64 "..%" PRIu64 " are not covered by the latest "
                           "checkpoint (tree size %" PRIu64 "); a crash during one append leaves "
                           "at most one such record: were checkpoints removed? (run `fedagg audit "
                           "verify`)",
                           path, log->signed_size, log->n - 1, log->signed_size);
            goto fail;
        }
        if (!log->readonly) {
            rc = commit_checkpoint(log, err);
            if (rc < 0)
                goto fail;
            if (report->unsigned_records)
                fa_log(FA_LOG_WARN, "audit: signed records appended before a crash",
                       "file=%s records=%" PRIu64 " tree_size=%" PRIu64, path,
                       report->unsigned_records, log->n);
        }
    }
    *out = log;
    return 0;
fail:
    log_free(log);
    return rc;
}

int fa_audit_log_open(fa_audit_log **out, const char *path, const fa_note_signer *signer,
                      const char *origin, unsigned flags, fa_audit_open_report *report,
                      fa_error *err)
{
    if (!signer)
        return fa_errorf(err, FA_ERR_INVAL, "a signing key is needed to open the log for writing");
    return open_common(out, path, signer, origin, NULL, flags, report, err);
}

int fa_audit_log_open_readonly(fa_audit_log **out, const char *path, const fa_note_verifier *v,
                               fa_audit_open_report *report, fa_error *err)
{
    return open_common(out, path, NULL, NULL, v, 0, report, err);
}

/* ---------------------------------------------------------------------------
 * Append
 * ------------------------------------------------------------------------- */

/* Signs the checkpoint of the current tree and appends it (fsync unless
 * nosync).  On failure the checkpoints file is as before. */
static int commit_checkpoint(fa_audit_log *log, fa_error *err)
{
    fa_checkpoint cp;
    char *note = NULL;
    size_t len = 0;
    uint8_t *frame;
    int rc;

    memset(&cp, 0, sizeof(cp));
    snprintf(cp.origin, sizeof(cp.origin), "%s", log->origin);
    cp.size = log->n;
    fa_merkle_frontier_root(&log->fr, cp.root);
    rc = fa_checkpoint_sign(log->signer, &cp, &note, &len, err);
    if (rc < 0)
        return rc;
    frame = malloc(len + FA_AUDIT_FRAME_OVERHEAD);
    if (!frame) {
        free(note);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    fa_audit_frame_encode(frame, (const uint8_t *)note, (uint32_t)len);
    if (fa_audit_write_all_at(log->ckpt_fd, frame, len + FA_AUDIT_FRAME_OVERHEAD, log->ckpt_end) !=
            0 ||
        (!log->nosync && fa_audit_sync_fd(log->ckpt_fd) != 0)) {
        int e = errno;
        if (ftruncate(log->ckpt_fd, (off_t)log->ckpt_end) != 0)
            log->broken = 1;
        free(frame);
        free(note);
        return fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->ckpt_path, strerror(e));
    }
    free(frame);
    log->ckpt_end += len + FA_AUDIT_FRAME_OVERHEAD;
    free(log->latest);
    log->latest = note;
    log->latest_len = len;
    log->signed_size = log->n;
    return 0;
}

void fa_audit_append_result_free(fa_audit_append_result *res)
{
    if (res) {
        free(res->checkpoint);
        res->checkpoint = NULL;
    }
}

/* fa_audit_log_check under the lock. */
static int check_locked(fa_audit_log *log, fa_error *err)
{
    static const char *const what[2] = {"records", "checkpoints"};
    const int fds[2] = {log->fd, log->ckpt_fd};
    const char *const paths[2] = {log->path, log->ckpt_path};
    const char *const magics[2] = {fa_audit_log_magic, fa_audit_ckpt_magic};
    const uint64_t ends[2] = {log->log_end, log->ckpt_end};

    if (log->damaged)
        return fa_errorf(err, FA_ERR_CORRUPT, "%s", log->damage);
    for (int i = 0; i < 2; i++) {
        uint8_t hdr[FA_AUDIT_HDR_LEN];
        uint64_t size;
        if (fa_audit_file_size(fds[i], &size) != 0)
            return fa_errorf(err, FA_ERR_IO, "%s: fstat: %s", paths[i], strerror(errno));
        if (size != ends[i])
            snprintf(log->damage, sizeof(log->damage),
                     "%s has %" PRIu64 " bytes, but its %s written by this aggregator end at "
                     "byte %" PRIu64 " (%s while it ran)",
                     paths[i], size, what[i], ends[i],
                     size < ends[i] ? "cut short" : "written to by something else");
        else if (fa_audit_read_all_at(fds[i], hdr, sizeof(hdr), 0) != 0)
            return fa_audit_read_failed(err, paths[i]);
        else if (!fa_audit_header_ok(hdr, magics[i]))
            snprintf(log->damage, sizeof(log->damage),
                     "%s: its header was overwritten while the aggregator ran", paths[i]);
        else
            continue;
        log->damaged = 1;
        return fa_errorf(err, FA_ERR_CORRUPT, "%s", log->damage);
    }
    return 0;
}

int fa_audit_log_check(fa_audit_log *log, fa_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&log->mu);
    if (!log->readonly)
        rc = check_locked(log, err);
    else if (log->damaged)
        rc = fa_errorf(err, FA_ERR_CORRUPT, "%s", log->damage);
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_damaged(fa_audit_log *log, char *why, size_t n)
{
    int d;
    pthread_mutex_lock(&log->mu);
    d = log->damaged;
    if (d && why && n)
        snprintf(why, n, "%s", log->damage);
    pthread_mutex_unlock(&log->mu);
    return d;
}

static int append_locked(fa_audit_log *log, const uint8_t *const *recs, const size_t *lens,
                         size_t n, fa_audit_append_result *res, fa_error *err)
{
    char why[300];
    size_t total = 0, pos = 0;
    uint8_t *buf = NULL, *nodes = NULL;
    uint64_t old_n = log->n, old_log_end = log->log_end, nnodes = 0;
    fa_merkle_frontier old_fr;
    int have = log->have_last, admin = log->last_admin, rc = 0, wrote = 0;
    uint64_t round = log->last_round, newv = log->last_new_version;
    uint32_t attempt = log->last_attempt;
    uint8_t model[FA_AUDIT_HLEN];

    if (res)
        memset(res, 0, sizeof(*res));
    if (log->readonly)
        return fa_errorf(err, FA_ERR_STATE, "%s: opened read-only", log->path);
    if (log->broken)
        return fa_errorf(err, FA_ERR_STATE,
                         "%s: an earlier failed append could not be undone; reopen the log",
                         log->path);
    /* Never write after files that changed under us: an append to a log
     * cut short would leave a hole of zeros before its record. */
    if ((rc = check_locked(log, err)) != 0)
        return rc;
    if (n == 0)
        return fa_errorf(err, FA_ERR_INVAL, "no record to append");
    memcpy(model, log->last_new_model, FA_AUDIT_HLEN);

    /* Check every record before touching the disk. */
    for (size_t i = 0; i < n; i++) {
        Fedagg__AuditRecord *r;
        uint64_t r_round;
        uint32_t r_attempt;
        if (lens[i] == 0 || lens[i] > FA_AUDIT_MAX_RECORD)
            return fa_errorf(err, FA_ERR_TOOBIG, "audit record of %zu bytes (limit %u)", lens[i],
                             FA_AUDIT_MAX_RECORD);
        r = fedagg__audit_record__unpack(NULL, lens[i], recs[i]);
        if (!r)
            return fa_errorf(err, FA_ERR_INVAL, "record %zu of the batch is not an AuditRecord", i);
        r_round = r->round;
        r_attempt = r->attempt;
        rc = fa_audit_record_check(r, why, sizeof(why));
        if (rc == 0)
            rc = fa_audit_record_follows(have, round, attempt, admin, newv, model, r, why,
                                         sizeof(why));
        if (rc == 0) {
            have = 1;
            admin = fa_audit_record_is_action(r);
            round = r->round;
            attempt = r->attempt;
            newv = r->new_version;
            memcpy(model, r->new_model_sha256.data, FA_AUDIT_HLEN);
        }
        fedagg__audit_record__free_unpacked(r, NULL);
        if (rc < 0)
            return fa_errorf(err, FA_ERR_INVAL,
                             "audit record of round %" PRIu64 " attempt %u refused: %s", r_round,
                             r_attempt, why);
        total += lens[i] + FA_AUDIT_FRAME_OVERHEAD;
    }
    if (off_reserve(log, n) != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    buf = malloc(total);
    nodes = malloc((n + 64) * 2 * FA_AUDIT_HLEN);
    if (!buf || !nodes) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        fa_audit_frame_encode(buf + pos, recs[i], (uint32_t)lens[i]);
        pos += lens[i] + FA_AUDIT_FRAME_OVERHEAD;
    }

    /* 1. the records */
    memcpy(&old_fr, &log->fr, sizeof(old_fr));
    wrote = 1;
    if (fa_audit_write_all_at(log->fd, buf, total, log->log_end) != 0 ||
        (!log->nosync && fa_audit_sync_fd(log->fd) != 0)) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->path, strerror(errno));
        goto out;
    }
    /* 2. the tree nodes they complete */
    pos = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t leaf[FA_AUDIT_HLEN];
        unsigned k;
        fa_merkle_leaf_hash(recs[i], lens[i], leaf);
        fa_merkle_frontier_push(&log->fr, leaf, nodes + nnodes * FA_AUDIT_HLEN, &k);
        nnodes += k;
        log->off[log->n + i] = log->log_end + pos;
        pos += lens[i] + FA_AUDIT_FRAME_OVERHEAD;
    }
    if (fa_audit_write_all_at(log->tree_fd, nodes, nnodes * FA_AUDIT_HLEN,
                              FA_AUDIT_HDR_LEN + fa_merkle_node_count(old_n) * FA_AUDIT_HLEN) !=
        0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: write: %s", log->tree_path, strerror(errno));
        goto out;
    }
    log->n += n;
    log->log_end += total;
    /* 3. the signed checkpoint: the commit point */
    rc = commit_checkpoint(log, err);
    if (rc < 0)
        goto out;
    log->have_last = 1;
    log->last_admin = admin;
    log->last_round = round;
    log->last_attempt = attempt;
    log->last_new_version = newv;
    memcpy(log->last_new_model, model, FA_AUDIT_HLEN);

    if (res) {
        res->index = log->n - 1;
        res->tree_size = log->n;
        fa_merkle_frontier_root(&log->fr, res->root);
        res->checkpoint = strdup(log->latest);
        res->checkpoint_len = log->latest_len;
        if (!res->checkpoint) {
            rc = 0; /* committed; only the copy failed */
            fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto out_ok;
        }
        fa_merkle_inclusion_proof(fa_audit_node_get, log, res->index, res->tree_size, res->proof,
                                  &res->proof_len);
    }
out_ok:
    wrote = 0;
out:
    if (rc < 0 && wrote) {
        /* Undo: nothing of this append stays on disk. */
        log->n = old_n;
        log->log_end = old_log_end;
        memcpy(&log->fr, &old_fr, sizeof(old_fr));
        if (ftruncate(log->fd, (off_t)old_log_end) != 0 ||
            ftruncate(log->tree_fd, (off_t)(FA_AUDIT_HDR_LEN +
                                            fa_merkle_node_count(old_n) * FA_AUDIT_HLEN)) != 0 ||
            (!log->nosync && fa_audit_sync_fd(log->fd) != 0))
            log->broken = 1;
    }
    free(buf);
    free(nodes);
    return rc;
}

int fa_audit_log_append_encoded(fa_audit_log *log, const uint8_t *const *recs, const size_t *lens,
                                size_t n, fa_audit_append_result *res, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    rc = append_locked(log, recs, lens, n, res, err);
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_append(fa_audit_log *log, const Fedagg__AuditRecord *rec,
                        fa_audit_append_result *res, fa_error *err)
{
    size_t len = fedagg__audit_record__get_packed_size(rec);
    uint8_t *buf;
    int rc;

    if (len == 0 || len > FA_AUDIT_MAX_RECORD)
        return fa_errorf(err, FA_ERR_TOOBIG, "audit record of %zu bytes (limit %u)", len,
                         FA_AUDIT_MAX_RECORD);
    buf = malloc(len);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    fedagg__audit_record__pack(rec, buf);
    rc = fa_audit_log_append_encoded(log, (const uint8_t *const *)&buf, &len, 1, res, err);
    free(buf);
    return rc;
}
