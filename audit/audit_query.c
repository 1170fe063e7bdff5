/* audit_query.c - queries of the audit log: records, roots, inclusion and consistency
 * proofs, proof bundles. */
#include "audit/audit_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>

/* ---------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------- */

uint64_t fa_audit_log_size(fa_audit_log *log)
{
    uint64_t n;
    pthread_mutex_lock(&log->mu);
    n = log->n;
    pthread_mutex_unlock(&log->mu);
    return n;
}

uint64_t fa_audit_log_signed_size(fa_audit_log *log)
{
    uint64_t n;
    pthread_mutex_lock(&log->mu);
    n = log->signed_size;
    pthread_mutex_unlock(&log->mu);
    return n;
}

int fa_audit_log_checkpoint(fa_audit_log *log, char **note, size_t *len, fa_error *err)
{
    int rc = 0;
    *note = NULL;
    pthread_mutex_lock(&log->mu);
    if (!log->latest)
        rc = fa_errorf(err, FA_ERR_NOTFOUND, "%s: no checkpoint signed yet", log->path);
    else if (!(*note = strdup(log->latest)))
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    else if (len)
        *len = log->latest_len;
    pthread_mutex_unlock(&log->mu);
    return rc;
}

/* A read that found the files damaged marks the log so (rc is returned). */
static int damaged(fa_audit_log *log, int rc, const fa_error *err)
{
    if (rc == FA_ERR_CORRUPT && !log->damaged) {
        log->damaged = 1;
        snprintf(log->damage, sizeof(log->damage), "%s", err ? err->msg : "a record is damaged");
    }
    return rc;
}

static int read_locked(fa_audit_log *log, uint64_t index, uint8_t **rec, size_t *len, fa_error *err)
{
    uint8_t head[4], tail[4];
    uint32_t n;
    uint64_t off;

    *rec = NULL;
    if (index >= log->n)
        return fa_errorf(err, FA_ERR_RANGE,
                         "record %" PRIu64 " is beyond the log (%" PRIu64 " records)", index,
                         log->n);
    off = log->off[index];
    if (fa_audit_read_all_at(log->fd, head, 4, off) != 0)
        return damaged(log, fa_audit_read_failed(err, log->path), err);
    n = fa_audit_get_be32(head);
    if (n == 0 || n > FA_AUDIT_MAX_RECORD)
        return damaged(log,
                       fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 ": invalid length",
                                 log->path, index),
                       err);
    *rec = malloc(n);
    if (!*rec)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if (fa_audit_read_all_at(log->fd, *rec, n, off + 4) != 0 ||
        fa_audit_read_all_at(log->fd, tail, 4, off + 4 + n)) {
        free(*rec);
        *rec = NULL;
        return damaged(log, fa_audit_read_failed(err, log->path), err);
    }
    if (fa_audit_get_be32(tail) != fa_audit_frame_crc(head, *rec, n)) {
        free(*rec);
        *rec = NULL;
        return damaged(log,
                       fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 ": checksum mismatch",
                                 log->path, index),
                       err);
    }
    *len = n;
    return 0;
}

int fa_audit_log_read(fa_audit_log *log, uint64_t index, uint8_t **rec, size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    rc = read_locked(log, index, rec, len, err);
    pthread_mutex_unlock(&log->mu);
    return rc;
}

static Fedagg__AuditRecord *decode_locked(fa_audit_log *log, uint64_t index, fa_error *err)
{
    uint8_t *buf;
    size_t len;
    Fedagg__AuditRecord *r;
    if (read_locked(log, index, &buf, &len, err) != 0)
        return NULL;
    r = fedagg__audit_record__unpack(NULL, len, buf);
    free(buf);
    if (!r)
        fa_errorf(err, FA_ERR_CORRUPT, "%s: record %" PRIu64 " is not an AuditRecord", log->path,
                  index);
    return r;
}

static uint64_t record_round(const Fedagg__AuditRecord *r)
{
    return r->round;
}

static uint64_t record_version(const Fedagg__AuditRecord *r)
{
    return r->new_version;
}

/* Binary search: the first of records [0, hi) whose key_of is above key,
 * into *pos (hi when none); the key never decreases along the log (rounds
 * and new versions both grow).  0, or -1 when a record does not decode
 * (err says which). */
static int first_above_locked(fa_audit_log *log, uint64_t hi,
                              uint64_t (*key_of)(const Fedagg__AuditRecord *), uint64_t key,
                              uint64_t *pos, fa_error *err)
{
    uint64_t lo = 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        Fedagg__AuditRecord *r = decode_locked(log, mid, err);
        if (!r)
            return -1;
        if (key_of(r) <= key)
            lo = mid + 1;
        else
            hi = mid;
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    *pos = lo;
    return 0;
}

int fa_audit_log_find(fa_audit_log *log, uint64_t round, const char *region, uint64_t *index,
                      fa_error *err)
{
    uint64_t lo = 0, hi;
    int rc = FA_ERR_NOTFOUND;

    pthread_mutex_lock(&log->mu);
    hi = log->n;
    if (first_above_locked(log, hi, record_round, round, &lo, err) != 0) {
        rc = err ? err->code : FA_ERR_CORRUPT;
        goto out;
    }
    while (lo > 0) {
        Fedagg__AuditRecord *r = decode_locked(log, lo - 1, err);
        int found;
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        if (r->round != round) {
            fedagg__audit_record__free_unpacked(r, NULL);
            break;
        }
        found = fa_audit_in_sorted(r->participants, r->n_participants, region) ||
                fa_audit_in_sorted(r->dropped, r->n_dropped, region);
        fedagg__audit_record__free_unpacked(r, NULL);
        lo--;
        if (found) {
            *index = lo;
            rc = 0;
            goto out;
        }
    }
    fa_errorf(err, FA_ERR_NOTFOUND,
              "%s: no record of round %" PRIu64 " in which region %s took part", log->path, round,
              region);
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_root(fa_audit_log *log, uint64_t size, uint8_t root[FA_AUDIT_HLEN], fa_error *err)
{
    int rc = 0;
    pthread_mutex_lock(&log->mu);
    if (size > log->n)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "tree size %" PRIu64 " is beyond the log (%" PRIu64 " records)", size,
                       log->n);
    else if (size == log->n)
        fa_merkle_frontier_root(&log->fr, root);
    else if (size == 0)
        fa_merkle_empty_root(root);
    else if ((rc = fa_merkle_range_root(fa_audit_node_get, log, 0, size, root)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_inclusion_proof(fa_audit_log *log, uint64_t index, uint64_t size, uint8_t *proof,
                                 size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    if (size > log->n || index >= size)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no record %" PRIu64 " in a tree of %" PRIu64 " (the log has %" PRIu64 ")",
                       index, size, log->n);
    else if ((rc = fa_merkle_inclusion_proof(fa_audit_node_get, log, index, size, proof, len)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_consistency_proof(fa_audit_log *log, uint64_t old_size, uint64_t size,
                                   uint8_t *proof, size_t *len, fa_error *err)
{
    int rc;
    pthread_mutex_lock(&log->mu);
    if (size > log->n || old_size > size)
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no consistency proof from %" PRIu64 " to %" PRIu64 " records (the log has "
                       "%" PRIu64 ")",
                       old_size, size, log->n);
    else if ((rc = fa_merkle_consistency_proof(fa_audit_node_get, log, old_size, size, proof,
                                               len)) < 0)
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_prove(fa_audit_log *log, uint64_t index, char **bundle, size_t *len, fa_error *err)
{
    fa_proof_bundle b;
    int rc;

    *bundle = NULL;
    memset(&b, 0, sizeof(b));
    pthread_mutex_lock(&log->mu);
    if (!log->latest || index >= log->signed_size) {
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "record %" PRIu64
                       " is not covered by a signed checkpoint (tree size %" PRIu64 ")",
                       index, log->signed_size);
        goto out;
    }
    rc = read_locked(log, index, &b.record, &b.record_len, err);
    if (rc < 0)
        goto out;
    rc = fa_merkle_inclusion_proof(fa_audit_node_get, log, index, log->signed_size, b.proof,
                                   &b.proof_len);
    if (rc < 0) {
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
        goto out;
    }
    b.index = index;
    b.checkpoint = log->latest;
    b.checkpoint_len = log->latest_len;
    rc = fa_proof_bundle_format(&b, bundle, len, err);
    b.checkpoint = NULL;
out:
    pthread_mutex_unlock(&log->mu);
    fa_proof_bundle_free(&b);
    return rc;
}

int fa_audit_log_find_version(fa_audit_log *log, uint64_t version, uint64_t *index, fa_error *err)
{
    uint64_t lo = 0, hi;
    int rc = 0;

    pthread_mutex_lock(&log->mu);
    hi = log->signed_size;
    if (first_above_locked(log, hi, record_version, version, &lo, err) != 0) {
        rc = err ? err->code : FA_ERR_CORRUPT;
        goto out;
    }
    if (lo > 0) {
        Fedagg__AuditRecord *r = decode_locked(log, lo - 1, err);
        if (!r) {
            rc = err ? err->code : FA_ERR_CORRUPT;
            goto out;
        }
        rc = r->new_version == version ? 0 : FA_ERR_NOTFOUND;
        fedagg__audit_record__free_unpacked(r, NULL);
    } else {
        rc = FA_ERR_NOTFOUND;
    }
    if (rc == 0)
        *index = lo - 1;
    else
        fa_errorf(err, FA_ERR_NOTFOUND,
                  "%s: no signed record makes or keeps model version %" PRIu64 " (%" PRIu64
                  " signed records)",
                  log->path, version, log->signed_size);
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}

int fa_audit_log_prove_consistency(fa_audit_log *log, uint64_t old_size, uint64_t size, char **text,
                                   size_t *len, fa_error *err)
{
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_AUDIT_HLEN];
    size_t n = 0;
    int rc;

    *text = NULL;
    pthread_mutex_lock(&log->mu);
    if (size == UINT64_MAX)
        size = log->signed_size;
    if (size > log->signed_size || old_size > size) {
        rc = fa_errorf(err, FA_ERR_RANGE,
                       "no consistency proof from %" PRIu64 " to %" PRIu64
                       " records: the latest checkpoint signs %" PRIu64,
                       old_size, size, log->signed_size);
        goto out;
    }
    rc = fa_merkle_consistency_proof(fa_audit_node_get, log, old_size, size, proof, &n);
    if (rc < 0) {
        fa_errorf(err, rc, "%s: reading the tree: %s", log->tree_path, fa_strerror(rc));
        goto out;
    }
    rc = fa_checkpoint_consistency_format(old_size, size, proof, n, text, len, err);
out:
    pthread_mutex_unlock(&log->mu);
    return rc;
}
