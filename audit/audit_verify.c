/* audit_verify.c - offline verification of an audit log (fa_audit_verify). */
#include "audit/audit_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "audit/audit_gov.h"
#include "audit/privacy_audit.h"

/* ---------------------------------------------------------------------------
 * Full verification
 * ------------------------------------------------------------------------- */

struct vstate {
    const fa_audit_verify_opts *o;
    fa_audit_verify_result *res;
    fa_error *err;
    const char *path;
    fa_privacy_audit *privacy; /* the regions' privacy ledger, added up */
    fa_audit_gov *gov;         /* decisions, rollbacks, channels, data statements */
};

static void vreport(struct vstate *v, int sev, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void vreport(struct vstate *v, int sev, int64_t index, const char *fmt, ...)
{
    char msg[480];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (sev == FA_AUDIT_PROBLEM) {
        v->res->problems++;
        if (index < v->res->first_bad) {
            v->res->first_bad = index;
            if (index < 0)
                fa_errorf(v->err, FA_ERR_VERIFY, "%s: %s", v->path, msg);
            else
                fa_errorf(v->err, FA_ERR_VERIFY, "record %" PRId64 ": %s", index, msg);
        }
    }
    if (v->o->report)
        v->o->report(v->o->report_ctx, sev, index, msg);
}

/* Reads the checkpoints one by one, checking each on its own. */
struct ckcur {
    struct fa_audit_rd r;
    int ok;        /* reader usable */
    uint64_t k;    /* frames read */
    uint64_t prev; /* tree size of the last valid checkpoint */
    int have_prev;
    fa_checkpoint cp; /* the current valid checkpoint */
    char origin[FA_NOTE_NAME_MAX + 1];
    char *note;
};

static int64_t size_index(uint64_t size)
{
    return size == 0 ? -1 : (int64_t)(size - 1);
}

/* Loads the next valid checkpoint into c->cp; returns 1, or 0 at the end. */
static int ck_next(struct vstate *v, struct ckcur *c)
{
    while (c->ok) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off, k = c->k;
        /* Until the checkpoint is trusted, blame the record after the last
         * valid checkpoint (the first empty-tree checkpoint: the file). */
        int64_t at = c->have_prev ? (int64_t)c->prev : -1;
        fa_checkpoint cp;
        fa_error e;
        enum fa_audit_frame_status st = fa_audit_rd_frame(&c->r, FA_AUDIT_MAX_NOTE, &p, &len, &off);

        if (st == FRAME_EOF) {
            c->ok = 0;
            return 0;
        }
        if (st == FRAME_IOERR || st == FRAME_TORN || st == FRAME_BADLEN) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " at offset %" PRIu64 " of %s.checkpoints: %s", k, off,
                    v->path,
                    st == FRAME_IOERR  ? strerror(errno)
                    : st == FRAME_TORN ? "incomplete, the file ends inside it (a torn write, or "
                                         "the file was truncated)"
                                       : "invalid length; the checkpoints after it cannot be read");
            c->ok = 0;
            return 0;
        }
        c->k++;
        memcpy(c->note, p, len);
        c->note[len] = 0;
        if (fa_checkpoint_parse(c->note, len, &cp, &e) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at, "checkpoint %" PRIu64 "%s: %s", k,
                    st == FRAME_BADCRC ? " (checksum mismatch)" : "", e.msg);
            continue;
        }
        if (st == FRAME_BADCRC) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 "?): checksum mismatch (it was "
                    "changed)",
                    k, cp.size);
            continue;
        }
        at = size_index(cp.size);
        if (c->origin[0] && strcmp(c->origin, cp.origin) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 "): origin \"%s\" differs from "
                    "\"%s\" of the checkpoints before it",
                    k, cp.size, cp.origin, c->origin);
            continue;
        }
        if (c->have_prev && cp.size <= c->prev) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "checkpoint %" PRIu64 " (tree size %" PRIu64 ") does not grow the tree of the "
                    "checkpoint before it (%" PRIu64 ")",
                    k, cp.size, c->prev);
            continue;
        }
        if (fa_checkpoint_open(c->note, len, v->o->key, &cp, &e) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at, "checkpoint %" PRIu64 " (tree size %" PRIu64 "): %s",
                    k, cp.size, e.msg);
            continue;
        }
        if (!c->origin[0])
            snprintf(c->origin, sizeof(c->origin), "%s", cp.origin);
        c->prev = cp.size;
        c->have_prev = 1;
        c->cp = cp;
        v->res->checkpoints++;
        return 1;
    }
    return 0;
}

static const uint8_t *region_key(const fa_audit_verify_opts *o, const char *region)
{
    return fa_audit_region_key_find(o->region_keys, o->nregion_keys, region);
}

/* Checks one decoded record, its place after the one before it, and its
 * region signatures. */
struct vprev {
    int have, admin;
    uint64_t round, new_version;
    uint32_t attempt;
    uint8_t new_model[FA_AUDIT_HLEN];
    char federation[256];
    int have_table;
    uint8_t table[FA_AUDIT_HLEN];
    double ddp_total; /* distributed DP: the last record's epsilon_total */
    uint64_t ddp_rounds;
};

/* A record's distributed-DP round (audit.proto DdpRound): its noisy
 * contributions are its participants, and the aggregator's account only
 * grows, by one round a record.  (The epsilons themselves are the
 * accountant's, privacy/, which this module does not link.) */
static void verify_ddp(struct vstate *v, int64_t at, const Fedagg__AuditRecord *r,
                       struct vprev *prev)
{
    const Fedagg__DdpRound *d = r->ddp;
    if (!d)
        return;
    if (!d->params) {
        vreport(v, FA_AUDIT_PROBLEM, at, "distributed DP round without its parameters");
        return;
    }
    if (d->noisy_contributions != r->n_participants)
        vreport(v, FA_AUDIT_PROBLEM, at,
                "distributed DP: %u noisy contributions recorded, %zu participants",
                d->noisy_contributions, r->n_participants);
    else if (d->noisy_contributions < d->params->min_regions)
        vreport(v, FA_AUDIT_NOTE, at,
                "distributed DP: round %" PRIu64 " has the noise of %u regions, fewer than the "
                "%u its regions charged for (its epsilon %.6g is recorded with the true count)",
                r->round, d->noisy_contributions, d->params->min_regions, d->epsilon_round);
    if (!(d->epsilon_round >= 0) ||
        !(d->epsilon_total + 1e-9 * d->epsilon_total >= d->epsilon_round) ||
        !(d->epsilon_total + 1e-9 * d->epsilon_total >= prev->ddp_total) ||
        d->rounds_accounted != prev->ddp_rounds + 1)
        vreport(v, FA_AUDIT_PROBLEM, at,
                "distributed DP: the account does not add up (epsilon_round %.6g, epsilon_total "
                "%.6g after %.6g, rounds_accounted %" PRIu64 " after %" PRIu64 ")",
                d->epsilon_round, d->epsilon_total, prev->ddp_total, d->rounds_accounted,
                prev->ddp_rounds);
    prev->ddp_total = d->epsilon_total;
    prev->ddp_rounds = d->rounds_accounted;
}

/* The federated-evaluation statements of a record: each signed by the
 * region it names, about the model the round started from; and the means
 * the record publishes are those of the statements. */
static void verify_evaluations(struct vstate *v, int64_t at, const Fedagg__AuditRecord *r)
{
    double n = 0, sl = 0, wl = 0, sa = 0, wa = 0;
    size_t ok = 0;

    for (size_t k = 0; k < r->n_evaluations; k++) {
        const Fedagg__SignedEval *se = r->evaluations[k];
        Fedagg__EvalStatement *s =
            fedagg__eval_statement__unpack(NULL, se->statement.len, se->statement.data);
        const uint8_t *pk;
        if (!s) {
            vreport(v, FA_AUDIT_PROBLEM, at, "evaluation %zu: the statement does not decode", k);
            continue;
        }
        if (!s->region || !s->federation_id || strcmp(s->federation_id, r->federation_id) ||
            s->model_version != r->prev_version || s->model_sha256.len != FA_AUDIT_HLEN ||
            memcmp(s->model_sha256.data, r->prev_model_sha256.data, FA_AUDIT_HLEN) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "evaluation %zu (region %s) is not of this record's previous model "
                    "(version %" PRIu64 " of federation %s)",
                    k, s->region ? s->region : "?", r->prev_version, r->federation_id);
        } else if (!(pk = region_key(v->o, s->region))) {
            v->res->region_unknown++;
        } else if (fa_identity_verify_statement(pk, FA_IDENTITY_DOMAIN_EVAL, se->statement.data,
                                                se->statement.len, se->signature.data) != 0) {
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "region %s: the signature of its evaluation report does not verify with its "
                    "key",
                    s->region);
        } else {
            v->res->eval_signatures++;
        }
        n += (double)s->num_examples;
        if (!isnan(s->loss)) {
            sl += (double)s->num_examples * s->loss;
            wl += (double)s->num_examples;
        }
        if (!isnan(s->accuracy)) {
            sa += (double)s->num_examples * s->accuracy;
            wa += (double)s->num_examples;
        }
        ok++;
        fedagg__eval_statement__free_unpacked(s, NULL);
    }
    if (r->federated_eval && ok) {
        const Fedagg__EvalSummary *m = r->federated_eval;
        double ml = wl > 0 ? sl / wl : NAN, ma = wa > 0 ? sa / wa : NAN;
        int same_l = isnan(ml) ? isnan(m->loss) : fabs(m->loss - ml) <= 1e-9 * (1 + fabs(ml));
        int same_a = isnan(ma) ? isnan(m->accuracy) : fabs(m->accuracy - ma) <= 1e-9;
        if (m->num_examples != (uint64_t)n || m->regions != ok || !same_l || !same_a)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "the federated evaluation means (n=%" PRIu64 " loss=%g accuracy=%g) are not "
                    "those of its %zu signed statements (n=%.0f loss=%g accuracy=%g)",
                    m->num_examples, m->loss, m->accuracy, ok, n, ml, ma);
    } else if (r->federated_eval && r->federated_eval->regions) {
        vreport(v, FA_AUDIT_PROBLEM, at,
                "a federated evaluation summary of %u regions without their statements",
                r->federated_eval->regions);
    }
}

static void verify_record(struct vstate *v, uint64_t i, const Fedagg__AuditRecord *r,
                          struct vprev *prev)
{
    char why[300];
    int64_t at = (int64_t)i;

    if (fa_audit_record_check(r, why, sizeof(why)) != 0) {
        vreport(v, FA_AUDIT_PROBLEM, at, "%s", why);
        return;
    }
    /* A service log's records are each about their own federation. */
    if (!r->lifecycle && prev->federation[0] && strcmp(prev->federation, r->federation_id) != 0)
        vreport(v, FA_AUDIT_PROBLEM, at, "federation \"%s\" differs from \"%s\" of record 0",
                r->federation_id, prev->federation);
    if (fa_audit_record_follows(prev->have, prev->round, prev->attempt, prev->admin,
                                prev->new_version, prev->new_model, r, why, sizeof(why)) != 0)
        vreport(v, FA_AUDIT_PROBLEM, at, "%s", why);
    if (r->tensor_table_digest.len == FA_AUDIT_HLEN) {
        if (prev->have_table &&
            memcmp(prev->table, r->tensor_table_digest.data, FA_AUDIT_HLEN) != 0)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "the model's tensor table differs from that of the records before it");
        prev->have_table = 1;
        memcpy(prev->table, r->tensor_table_digest.data, FA_AUDIT_HLEN);
    }
    verify_evaluations(v, at, r);
    verify_ddp(v, at, r, prev);
    if (v->privacy)
        fa_privacy_audit_record(v->privacy, at, r);
    if (v->gov && fa_audit_gov_record(v->gov, i, r) != 0)
        vreport(v, FA_AUDIT_PROBLEM, at, "out of memory replaying the governance records");
    for (size_t k = 0; k < r->n_commitments; k++) {
        const Fedagg__RegionCommitment *c = r->commitments[k];
        const uint8_t *pk = region_key(v->o, c->region);
        if (!pk) {
            v->res->region_unknown++;
            continue;
        }
        int rc = fa_audit_commitment_check(r, c, pk);
        if (rc == FA_ERR_NOTFOUND) {
            vreport(v, FA_AUDIT_NOTE, at,
                    "region %s: upload commitment unsigned (it dropped out after uploading, "
                    "before the consistency check; round %" PRIu64 " attempt %u)",
                    c->region, r->round, r->attempt);
            continue;
        }
        if (rc != 0)
            vreport(v, FA_AUDIT_PROBLEM, at,
                    "region %s: the signature of its upload commitment does not verify with its "
                    "key (round %" PRIu64 " attempt %u)",
                    c->region, r->round, r->attempt);
        else
            v->res->region_signatures++;
    }
    if (!prev->federation[0] && !r->lifecycle)
        snprintf(prev->federation, sizeof(prev->federation), "%s", r->federation_id);
    prev->have = 1;
    prev->admin = fa_audit_record_is_action(r);
    prev->round = r->round;
    prev->attempt = r->attempt;
    prev->new_version = r->new_version;
    memcpy(prev->new_model, r->new_model_sha256.data, FA_AUDIT_HLEN);
}

/* The privacy ledger's and the governance replay's findings are the
 * verification's. */
static void privacy_finding(void *ctx, int severity, int64_t index, const char *msg)
{
    vreport(ctx, severity, index, "%s", msg);
}

int fa_audit_verify(const char *path, const fa_audit_verify_opts *opts, fa_audit_verify_result *res,
                    fa_error *err)
{
    struct vstate v = {opts, res, err, path, NULL, NULL};
    struct ckcur c;
    struct fa_audit_rd r, tr;
    struct vprev prev;
    fa_merkle_frontier fr;
    uint8_t hdr[FA_AUDIT_HDR_LEN], root[FA_AUDIT_HLEN], done[64 * FA_AUDIT_HLEN];
    uint64_t size = 0, tsize = 0, tstored = 0, tpos = 0, tstale_from = 0, matched = 0;
    uint64_t n = 0, root_bad = 0;
    int fd = -1, cfd = -1, tfd = -1, have_ck = 0, tstale = 0, have_tree = 0;
    char *cpath = NULL, *tpath = NULL;
    int rc = 0;

    memset(res, 0, sizeof(*res));
    memset(&c, 0, sizeof(c));
    memset(&prev, 0, sizeof(prev));
    memset(&r, 0, sizeof(r));
    memset(&tr, 0, sizeof(tr));
    res->first_bad = INT64_MAX;
    fa_error_clear(err);
    if (!opts || !opts->key)
        return fa_errorf(err, FA_ERR_INVAL, "the aggregator's public key is needed to verify");
    if (fa_privacy_audit_new(&v.privacy, opts->region_keys, opts->nregion_keys, privacy_finding, &v,
                             err) != 0)
        return FA_ERR_NOMEM;
    if (fa_audit_gov_new(&v.gov, opts->region_keys, opts->nregion_keys, privacy_finding, &v, err) !=
        0) {
        fa_privacy_audit_del(v.privacy);
        return FA_ERR_NOMEM;
    }
    fa_merkle_frontier_init(&fr);

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = fa_errorf(err, errno == ENOENT ? FA_ERR_NOTFOUND : FA_ERR_IO, "%s: %s", path,
                       strerror(errno));
        goto out;
    }
    cpath = fa_audit_path_with(path, ".checkpoints");
    tpath = fa_audit_path_with(path, ".tree");
    c.note = malloc(FA_AUDIT_MAX_NOTE + 1);
    if (!cpath || !tpath || !c.note) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (fa_audit_file_size(fd, &size) != 0 ||
        fa_audit_rd_init(&r, fd, FA_AUDIT_HDR_LEN, size) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (size < FA_AUDIT_HDR_LEN || fa_audit_read_all_at(fd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
        !fa_audit_header_ok(hdr, fa_audit_log_magic)) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "not a fedagg audit log (bad file header)");
        goto done;
    }

    cfd = open(cpath, O_RDONLY | O_CLOEXEC);
    if (cfd < 0) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "%s: %s: no signed checkpoints to verify against", cpath,
                strerror(errno));
    } else if (fa_audit_file_size(cfd, &tsize) != 0 || tsize < FA_AUDIT_HDR_LEN ||
               fa_audit_read_all_at(cfd, hdr, FA_AUDIT_HDR_LEN, 0) != 0 ||
               !fa_audit_header_ok(hdr, fa_audit_ckpt_magic)) {
        vreport(&v, FA_AUDIT_PROBLEM, -1, "%s: not a fedagg checkpoints file (bad header)", cpath);
    } else if (fa_audit_rd_init(&c.r, cfd, FA_AUDIT_HDR_LEN, tsize) == 0) {
        c.ok = 1;
    } else {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    tfd = open(tpath, O_RDONLY | O_CLOEXEC);
    if (tfd >= 0 && fa_audit_file_size(tfd, &tsize) == 0 && tsize >= FA_AUDIT_HDR_LEN &&
        fa_audit_read_all_at(tfd, hdr, FA_AUDIT_HDR_LEN, 0) == 0 &&
        fa_audit_header_ok(hdr, fa_audit_tree_magic) &&
        fa_audit_rd_init(&tr, tfd, FA_AUDIT_HDR_LEN, tsize) == 0) {
        have_tree = 1;
        tstored = (tsize - FA_AUDIT_HDR_LEN) / FA_AUDIT_HLEN;
    }

    have_ck = ck_next(&v, &c);
    while (have_ck && c.cp.size == 0) {
        fa_merkle_empty_root(root);
        if (memcmp(root, c.cp.root, FA_AUDIT_HLEN) != 0)
            vreport(&v, FA_AUDIT_PROBLEM, -1,
                    "checkpoint %" PRIu64 " signs an empty tree with a wrong root", c.k - 1);
        res->signed_size = 0;
        memcpy(res->root, c.cp.root, FA_AUDIT_HLEN);
        have_ck = ck_next(&v, &c);
    }

    for (;;) {
        const uint8_t *p;
        uint32_t len;
        uint64_t off;
        unsigned k;
        Fedagg__AuditRecord *rec;
        enum fa_audit_frame_status st = fa_audit_rd_frame(&r, FA_AUDIT_MAX_RECORD, &p, &len, &off);

        if (st == FRAME_EOF)
            break;
        if (st == FRAME_IOERR) {
            rc = fa_errorf(err, FA_ERR_IO, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (st == FRAME_TORN || st == FRAME_BADLEN) {
            vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n, "at offset %" PRIu64 ": %s", off,
                    st == FRAME_TORN
                        ? "incomplete, the file ends inside it (a torn write: the aggregator cuts "
                          "it off when it next opens the log; or the log was truncated)"
                        : "invalid length field; the records after it cannot be read");
            break;
        }
        if (st == FRAME_BADCRC)
            vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n,
                    "at offset %" PRIu64 ": checksum mismatch (the record was changed)", off);
        rec = fedagg__audit_record__unpack(NULL, len, p);
        if (!rec) {
            if (st == FRAME_OK)
                vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n, "not a valid AuditRecord (protobuf)");
        } else {
            verify_record(&v, n, rec, &prev);
            fedagg__audit_record__free_unpacked(rec, NULL);
        }

        fa_merkle_leaf_hash(p, len, done);
        fa_merkle_frontier_push(&fr, done, done, &k);
        for (unsigned j = 0; j < k; j++, tpos++) {
            if (!have_tree || tstale)
                continue;
            if (tpos >= tstored || fa_audit_rd_fill(&tr, FA_AUDIT_HLEN) != FA_AUDIT_HLEN ||
                memcmp(tr.buf + tr.pos, done + j * FA_AUDIT_HLEN, FA_AUDIT_HLEN) != 0) {
                tstale = 1;
                tstale_from = tpos;
            } else {
                fa_audit_rd_skip(&tr, FA_AUDIT_HLEN);
            }
        }
        n++;
        res->records = n;
        while (have_ck && c.cp.size == n) {
            fa_merkle_frontier_root(&fr, root);
            if (memcmp(root, c.cp.root, FA_AUDIT_HLEN) != 0) {
                if (root_bad++ == 0)
                    vreport(&v, FA_AUDIT_PROBLEM, (int64_t)matched,
                            "the tree of records 0..%" PRIu64 " does not match signed checkpoint "
                            "%" PRIu64 " (tree size %" PRIu64 ") although the one before matched "
                            "%" PRIu64 " records: record %" PRIu64 "%s was changed, removed, "
                            "inserted or reordered",
                            n - 1, c.k - 1, n, matched, matched,
                            matched + 1 < n ? " or a later one" : "");
            } else if (!root_bad) {
                matched = n;
            }
            res->signed_size = n;
            memcpy(res->root, c.cp.root, FA_AUDIT_HLEN);
            have_ck = ck_next(&v, &c);
        }
    }

    if (have_ck) {
        uint64_t s = c.cp.size;
        while (ck_next(&v, &c))
            s = c.cp.size;
        vreport(&v, FA_AUDIT_PROBLEM, (int64_t)n,
                "the log ends after %" PRIu64 " records but a checkpoint signs a tree of %" PRIu64
                ": records %" PRIu64 "..%" PRIu64 " are missing (truncated or deleted)",
                n, s, n, s - 1);
        res->signed_size = s;
        memcpy(res->root, c.cp.root, FA_AUDIT_HLEN);
    } else if (n > res->signed_size) {
        vreport(&v, FA_AUDIT_PROBLEM, (int64_t)res->signed_size,
                "records %" PRIu64 "..%" PRIu64 " are not covered by any valid signed checkpoint "
                "(the aggregator stopped before signing them, or checkpoints were removed)",
                res->signed_size, n - 1);
    }
    if (root_bad > 1)
        vreport(&v, FA_AUDIT_NOTE, (int64_t)matched,
                "%" PRIu64 " later checkpoints do not match either (they cover the same records)",
                root_bad - 1);
    if (res->region_unknown)
        vreport(&v, FA_AUDIT_NOTE, -1,
                "%" PRIu64 " region commitment signatures were not checked: no key given for "
                "their region",
                res->region_unknown);
    /* A stale tree file is worth a note only when the records are sound (a
     * changed record makes it differ too). */
    if (have_tree && res->problems == 0 && (tstale || tstored != tpos))
        vreport(&v, FA_AUDIT_NOTE, -1,
                "%s differs from the records (from node %" PRIu64 " of %" PRIu64 "): a stale "
                "cache, rebuilt when the aggregator next opens the log",
                tpath, tstale ? tstale_from : (tpos < tstored ? tpos : tstored), tpos);
    snprintf(res->origin, sizeof(res->origin), "%s", c.origin);
done:
    rc = res->problems ? FA_ERR_VERIFY : 0;
out:
    if (v.privacy)
        for (size_t i = 0; i < fa_privacy_audit_count(v.privacy); i++)
            res->privacy_signatures += fa_privacy_audit_at(v.privacy, i)->verified;
    fa_privacy_audit_del(v.privacy);
    if (v.gov) {
        fa_gov_counts gc;
        fa_audit_gov_counts(v.gov, &gc);
        res->data_signatures = gc.data_signatures;
        res->decisions = gc.promotions + gc.rejections + gc.expirations;
    }
    fa_audit_gov_del(v.gov);
    fa_audit_rd_free(&r);
    fa_audit_rd_free(&tr);
    fa_audit_rd_free(&c.r);
    free(c.note);
    free(cpath);
    free(tpath);
    if (fd >= 0)
        close(fd);
    if (cfd >= 0)
        close(cfd);
    if (tfd >= 0)
        close(tfd);
    return rc;
}
