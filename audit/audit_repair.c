/* audit_repair.c - recovering a damaged log to its last signed checkpoint
 * (fa_audit_log_repair, `fedagg audit repair`), keeping the evidence. */
#include "audit/audit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_file.h"

/* One whole checkpoint frame of LOG.checkpoints. */
struct ckpt {
    uint64_t end;  /* file offset just after its frame */
    uint64_t size; /* tree size it signs */
    int ok;        /* signed by the key, parses */
    uint8_t root[FA_AUDIT_HLEN];
};

/* The records of LOG with good frames, from the start: their number, the
 * offset where the last one ends, and roots[k] = the root of the first k
 * records (k = 0 .. n, n + 1 roots). */
static int scan_records(const char *path, uint64_t *n_out, uint64_t **ends_out, uint8_t **roots_out,
                        fa_error *err)
{
    uint8_t hdr[FA_AUDIT_HDR_LEN], leaf[FA_AUDIT_HLEN], done[64 * FA_AUDIT_HLEN];
    struct fa_audit_rd r;
    fa_merkle_frontier fr;
    uint64_t size, n = 0, cap = 64, *ends = malloc(cap * sizeof(uint64_t));
    uint8_t *roots = malloc((cap + 1) * FA_AUDIT_HLEN);
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

    *n_out = 0;
    if (!ends || !roots) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (fd < 0) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto out;
    }
    fa_merkle_frontier_init(&fr);
    fa_merkle_empty_root(roots);
    ends[0] = FA_AUDIT_HDR_LEN;
    if (fa_audit_file_size(fd, &size) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (size < FA_AUDIT_HDR_LEN || fa_audit_read_all_at(fd, hdr, sizeof(hdr), 0) != 0 ||
        !fa_audit_header_ok(hdr, fa_audit_log_magic)) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: not a fedagg audit log (its header is gone): nothing to keep", path);
        goto out;
    }
    if (fa_audit_rd_init(&r, fd, FA_AUDIT_HDR_LEN, size) != 0) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        unsigned k;
        if (fa_audit_rd_frame(&r, FA_AUDIT_MAX_RECORD, &p, &len, &off) != FRAME_OK)
            break; /* the end, or the damage: what follows is not kept */
        if (n + 1 >= cap) {
            uint64_t *e2 = realloc(ends, 2 * cap * sizeof(uint64_t));
            uint8_t *r2 = e2 ? realloc(roots, (2 * cap + 1) * FA_AUDIT_HLEN) : NULL;
            if (e2)
                ends = e2;
            if (r2)
                roots = r2;
            if (!e2 || !r2) {
                rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
                break;
            }
            cap *= 2;
        }
        fa_merkle_leaf_hash(p, len, leaf);
        fa_merkle_frontier_push(&fr, leaf, done, &k);
        n++;
        ends[n] = r.off;
        fa_merkle_frontier_root(&fr, roots + n * FA_AUDIT_HLEN);
    }
    fa_audit_rd_free(&r);
out:
    if (fd >= 0)
        close(fd);
    if (rc != 0) {
        free(ends);
        free(roots);
        return rc;
    }
    *n_out = n;
    *ends_out = ends;
    *roots_out = roots;
    return 0;
}

/* The whole checkpoint frames of LOG.checkpoints, from the start, each
 * opened with v. */
static int scan_ckpts(const char *path, const fa_note_verifier *v, struct ckpt **out, size_t *n_out,
                      fa_error *err)
{
    uint8_t hdr[FA_AUDIT_HDR_LEN];
    struct fa_audit_rd r;
    struct ckpt *c = NULL;
    size_t n = 0, cap = 0;
    uint64_t size;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

    *out = NULL;
    *n_out = 0;
    if (fd < 0)
        return errno == ENOENT ? 0 : fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
    if (fa_audit_file_size(fd, &size) != 0 || size < FA_AUDIT_HDR_LEN ||
        fa_audit_read_all_at(fd, hdr, sizeof(hdr), 0) != 0 ||
        !fa_audit_header_ok(hdr, fa_audit_ckpt_magic)) {
        close(fd);
        return 0; /* no checkpoint can be kept */
    }
    if (fa_audit_rd_init(&r, fd, FA_AUDIT_HDR_LEN, size) != 0) {
        close(fd);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        fa_checkpoint cp;
        if (fa_audit_rd_frame(&r, FA_AUDIT_MAX_NOTE, &p, &len, &off) != FRAME_OK)
            break;
        if (n == cap) {
            struct ckpt *c2 = realloc(c, (cap ? 2 * cap : 16) * sizeof(*c));
            if (!c2) {
                rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
                break;
            }
            c = c2;
            cap = cap ? 2 * cap : 16;
        }
        memset(&c[n], 0, sizeof(c[n]));
        c[n].end = r.off;
        if (fa_checkpoint_open((const char *)p, len, v, &cp, NULL) == 0) {
            c[n].ok = 1;
            c[n].size = cp.size;
            memcpy(c[n].root, cp.root, FA_AUDIT_HLEN);
        }
        n++;
    }
    fa_audit_rd_free(&r);
    close(fd);
    if (rc != 0) {
        free(c);
        return rc;
    }
    *out = c;
    *n_out = n;
    return 0;
}

/* A copy of the first len bytes of src into a new file tmp (fsync'ed). */
static int copy_prefix(const char *src, const char *tmp, uint64_t len, fa_error *err)
{
    uint8_t buf[1 << 16];
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = 0;

    if (in < 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", src, strerror(errno));
    out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    for (uint64_t off = 0; off < len && rc == 0; off += sizeof(buf)) {
        size_t k = len - off < sizeof(buf) ? (size_t)(len - off) : sizeof(buf);
        if (fa_audit_read_all_at(in, buf, k, off) != 0)
            rc = fa_audit_read_failed(err, src);
        else if (fa_audit_write_all_at(out, buf, k, off) != 0)
            rc = fa_errorf(err, FA_ERR_IO, "%s: write: %s", tmp, strerror(errno));
    }
    if (rc == 0 && fa_audit_sync_fd(out) != 0)
        rc = fa_errorf(err, FA_ERR_IO, "%s: fsync: %s", tmp, strerror(errno));
out:
    close(in);
    if (out >= 0)
        close(out);
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* path + suffix, into a fixed buffer. */
static void with(char *out, size_t n, const char *path, const char *suffix)
{
    snprintf(out, n, "%s%s", path, suffix);
}

int fa_audit_log_repair(const char *path, const fa_note_verifier *v, int dry_run,
                        fa_audit_repair_report *rep, fa_error *err)
{
    fa_audit_log *log = NULL;
    fa_audit_open_report orep;
    struct ckpt *cps = NULL;
    uint64_t nrec = 0, *ends = NULL;
    uint8_t *roots = NULL;
    size_t ncp = 0, keep_cp = SIZE_MAX;
    char ckpt_path[4200], tree_path[4200], tmp_log[4300], tmp_ckpt[4300], aside[3][4300];
    const char *files[3];
    int rc;

    memset(rep, 0, sizeof(*rep));
    if (!v)
        return fa_errorf(err, FA_ERR_INVAL,
                         "the aggregator's public key is needed: only checkpoints it signed "
                         "are kept");
    {
        struct stat st;
        if (stat(path, &st) != 0)
            return fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                             strerror(errno));
    }
    memset(&orep, 0, sizeof(orep));
    rc = fa_audit_log_open_readonly(&log, path, v, &orep, err);
    if (rc == 0) {
        /* It opens: the aggregator's own open recovers from what is left
         * (a torn tail, one unsigned record). */
        rep->intact = 1;
        rep->records_found = rep->records_kept = fa_audit_log_size(log);
        rep->records_signed = fa_audit_log_signed_size(log);
        fa_audit_log_close(log);
        return 0;
    }
    if (rc == FA_ERR_IO || rc == FA_ERR_NOMEM || rc == FA_ERR_STATE)
        return rc; /* not damage: nothing to repair */
    snprintf(rep->damage, sizeof(rep->damage), "%s", err ? err->msg : "");
    with(ckpt_path, sizeof(ckpt_path), path, ".checkpoints");
    with(tree_path, sizeof(tree_path), path, ".tree");
    files[0] = path;
    files[1] = ckpt_path;
    files[2] = tree_path;
    if ((rc = scan_records(path, &nrec, &ends, &roots, err)) != 0)
        return rc;
    if ((rc = scan_ckpts(ckpt_path, v, &cps, &ncp, err)) != 0)
        goto out;
    rep->records_found = nrec;
    rep->checkpoints_found = ncp;
    /* The last checkpoint of an unbroken run of good ones from the start
     * (sizes never decreasing) whose tree the records still hold. */
    for (size_t i = 0; i < ncp; i++) {
        if (!cps[i].ok || (i > 0 && cps[i].size < cps[i - 1].size))
            break;
        if (cps[i].size <= nrec &&
            memcmp(roots + cps[i].size * FA_AUDIT_HLEN, cps[i].root, FA_AUDIT_HLEN) == 0)
            keep_cp = i;
        else if (cps[i].size <= nrec)
            break; /* the records differ from what was signed: stop before */
    }
    if (keep_cp == SIZE_MAX) {
        rc = fa_errorf(err, FA_ERR_CORRUPT,
                       "%s: no checkpoint signed by this key matches the records left (%" PRIu64
                       " whole records, %zu checkpoint frames): nothing can be kept; is --pubkey "
                       "the aggregator's key?",
                       path, nrec, ncp);
        goto out;
    }
    rep->records_kept = cps[keep_cp].size;
    rep->records_signed = cps[keep_cp].size;
    rep->checkpoints_kept = keep_cp + 1;
    /* a suffix that none of the three files has yet (repairs in one second) */
    for (unsigned k = 0;; k++) {
        int taken = 0;
        if (k == 0)
            snprintf(rep->suffix, sizeof(rep->suffix), ".damaged-%lld", (long long)time(NULL));
        else
            snprintf(rep->suffix, sizeof(rep->suffix), ".damaged-%lld.%u", (long long)time(NULL),
                     k);
        for (int i = 0; i < 3; i++) {
            struct stat st;
            with(aside[i], sizeof(aside[i]), files[i], rep->suffix);
            taken |= lstat(aside[i], &st) == 0;
        }
        if (!taken)
            break;
    }
    if (dry_run)
        goto out;

    /* The kept prefixes, as new files beside the old ones. */
    with(tmp_log, sizeof(tmp_log), path, ".repair-tmp");
    with(tmp_ckpt, sizeof(tmp_ckpt), ckpt_path, ".repair-tmp");
    if ((rc = copy_prefix(path, tmp_log, ends[rep->records_kept], err)) != 0 ||
        (rc = copy_prefix(ckpt_path, tmp_ckpt, cps[keep_cp].end, err)) != 0) {
        unlink(tmp_log);
        goto out;
    }
    /* The evidence: every file keeps its bytes under the .damaged name (a
     * second link to it for LOG and LOG.checkpoints, so that their names
     * never go missing; the tree, derived data, is moved), then the new
     * files take the names atomically. */
    for (int i = 0; i < 3; i++) {
        const char *orig = files[i];
        struct stat st;
        with(aside[i], sizeof(aside[i]), orig, rep->suffix);
        if (stat(orig, &st) != 0)
            continue;
        if (i < 2 ? link(orig, aside[i]) != 0 : rename(orig, aside[i]) != 0) {
            rc = fa_errorf(err, FA_ERR_IO, "cannot keep %s as %s: %s", orig, aside[i],
                           strerror(errno));
            unlink(tmp_log);
            unlink(tmp_ckpt);
            goto out;
        }
        rep->moved++;
    }
    if (rename(tmp_ckpt, ckpt_path) != 0 || rename(tmp_log, path) != 0) {
        rc = fa_errorf(err, FA_ERR_IO,
                       "cannot put the repaired files in place: %s (the old ones are kept as "
                       "*%s)",
                       strerror(errno), rep->suffix);
        goto out;
    }
    if ((rc = fa_file_sync_dir(path, err)) != 0)
        goto out;
    /* It must open now, as the aggregator will open it. */
    rc = fa_audit_log_open_readonly(&log, path, v, &orep, err);
    if (rc != 0)
        fa_error_prefix(err, rc, "the repaired log does not open");
    fa_audit_log_close(log);
out:
    free(cps);
    free(ends);
    free(roots);
    return rc;
}
