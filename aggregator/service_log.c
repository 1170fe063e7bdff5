/* service_log.c - the service log: a signed audit log (audit/audit_log.h)
 * of lifecycle records, one per operator's action on a federation, under
 * the service's own origin, replayed at open (service.h). */
#include "aggregator/service_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "common/fa_time.h"
#include "proto/config_check.h"

int fa_svc_log_open(fa_service *s, fa_error *err)
{
    const char *origin = s->cfg->service->origin;
    fa_audit_open_report report;
    char path[4096];
    int rc;

    snprintf(path, sizeof(path), "%s/service.log", s->dir);
    rc = fa_fed_signer_load(s->cfg->audit->signing_key_file, origin, &s->signer, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "audit.signing_key_file");
    memset(&report, 0, sizeof(report));
    rc = fa_audit_log_open(&s->log, path, s->signer, origin, 0, &report, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "service log %s", path);
    if (report.torn_log_bytes || report.torn_checkpoint_bytes || report.unsigned_records ||
        report.tree_rebuilt)
        fa_log(FA_LOG_WARN, "service log recovered after a crash",
               "torn_log_bytes=%" PRIu64 " unsigned_records=%" PRIu64, report.torn_log_bytes,
               report.unsigned_records);
    return 0;
}

int fa_svc_log_append(fa_service *s, const char *fed_id, const char *action, const char *op,
                      const char *team, const struct svc_fed *created, const char *reason,
                      fa_error *err)
{
    Fedagg__AuditRecord rec = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__FederationLifecycle lc = FEDAGG__FEDERATION_LIFECYCLE__INIT;
    uint8_t none[32] = {0}, sha[32];
    fa_audit_append_result ar;
    uint64_t now = fa_time_unix_ms();
    int rc;

    if (!s->log)
        return fa_errorf(err, FA_ERR_STATE, "this aggregator has no service log");
    lc.operator_ = (char *)op;
    lc.action = (char *)action;
    lc.team = (char *)team;
    lc.reason = (char *)(reason ? reason : "");
    lc.unix_ms = now;
    if (created) {
        if ((rc = fa_sha256(sha, created->text, created->text_len)) != 0)
            return fa_errorf(err, rc, "SHA-256 failed");
        lc.config.data = (uint8_t *)created->text;
        lc.config.len = created->text_len;
        lc.config_sha256.data = sha;
        lc.config_sha256.len = 32;
        lc.config_name = created->config_name;
    }
    /* No round and no model: both digests are zeros, as the record rules
     * want an action's to be equal. */
    rec.version = 1;
    rec.federation_id = (char *)fed_id;
    rec.start_unix_ms = now;
    rec.commit_unix_ms = now;
    rec.prev_model_sha256.data = none;
    rec.prev_model_sha256.len = 32;
    rec.new_model_sha256.data = none;
    rec.new_model_sha256.len = 32;
    rec.software_version = FA_VERSION;
    rec.lifecycle = &lc;
    memset(&ar, 0, sizeof(ar));
    rc = fa_audit_log_append(s->log, &rec, &ar, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "the service log could not record the %s of %s", action,
                               fed_id);
    /* the caller's scope names the federation (fa_svc_scope) */
    fa_log(FA_LOG_INFO, "lifecycle action recorded",
           "operator=%s action=%s team=%s index=%" PRIu64 " reason=\"%s\"", op, action,
           team ? team : "", ar.index, lc.reason);
    fa_audit_append_result_free(&ar);
    return 0;
}

/* A create record: the federation's entry, from the file it recorded.  One
 * that no longer loads is kept, stopped with the reason. */
static int replay_create(fa_service *s, const Fedagg__AuditRecord *r, fa_error *err)
{
    const Fedagg__FederationLifecycle *l = r->lifecycle;
    Fedagg__FederationConfig *fc = NULL;
    struct svc_fed *e = NULL;
    fa_error le;
    int rc;

    if (fa_svc_find(s, r->federation_id)) {
        fa_log(FA_LOG_ERROR, "the service log creates a federation that exists; ignored",
               "federation=%s", r->federation_id);
        return 0;
    }
    fa_error_clear(&le);
    rc = fa_svc_load_file(s, (const char *)l->config.data, l->config.len,
                          l->config_name && l->config_name[0] ? l->config_name : r->federation_id,
                          FA_CONFIG_NO_FILES, &fc, NULL, &le);
    if (rc == 0 && strcmp(fc->federation_id, r->federation_id) != 0) {
        protobuf_c_message_free_unpacked(&fc->base, NULL);
        rc = fa_errorf(&le, FA_ERR_CORRUPT, "its file names federation %s", fc->federation_id);
    }
    if (rc == 0) {
        rc = fa_svc_entry_from_file(s, fc, (const char *)l->config.data, l->config.len,
                                    l->config_name, &e, err);
        if (rc != 0)
            return rc;
    } else {
        /* Kept so that it is listed, with why it is not open. */
        e = calloc(1, sizeof(*e));
        if (!e || !(e->id = strdup(r->federation_id))) {
            free(e);
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
        e->logged_pause = -1;
        snprintf(e->fault, sizeof(e->fault), "its recorded federation file no longer loads: %s",
                 le.msg);
        fa_log(FA_LOG_ERROR, "federation stopped", "federation=%s reason=\"%s\"", e->id, e->fault);
    }
    snprintf(e->team, sizeof(e->team), "%s", l->team ? l->team : "");
    snprintf(e->created_by, sizeof(e->created_by), "%s", l->operator_ ? l->operator_ : "");
    e->created_unix_ms = l->unix_ms;
    if (!e->cfg) {
        /* a stopped entry without a config: an empty one to read from */
        static const Fedagg__AggregatorConfig empty = FEDAGG__AGGREGATOR_CONFIG__INIT;
        e->cfg = &empty;
    }
    rc = fa_svc_add(s, e, err);
    if (rc != 0)
        fa_svc_entry_free(e);
    return rc;
}

int fa_svc_log_replay(fa_service *s, fa_error *err)
{
    uint64_t n = fa_audit_log_size(s->log);

    for (uint64_t i = 0; i < n; i++) {
        Fedagg__AuditRecord *r;
        const Fedagg__FederationLifecycle *l;
        struct svc_fed *e;
        uint8_t *buf = NULL;
        size_t len = 0;
        int rc = fa_audit_log_read(s->log, i, &buf, &len, err);
        if (rc != 0)
            return rc;
        r = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        if (!r || !r->lifecycle) {
            if (r)
                fedagg__audit_record__free_unpacked(r, NULL);
            return fa_errorf(err, FA_ERR_CORRUPT,
                             "service log record %" PRIu64 " is not a lifecycle record", i);
        }
        l = r->lifecycle;
        if (!strcmp(l->action, "create")) {
            rc = replay_create(s, r, err);
            fedagg__audit_record__free_unpacked(r, NULL);
            if (rc != 0)
                return rc;
            continue;
        }
        e = fa_svc_find(s, r->federation_id);
        if (!e) {
            fa_log(FA_LOG_WARN, "the service log names a federation this config does not hold",
                   "federation=%s action=%s index=%" PRIu64, r->federation_id, l->action, i);
        } else if (!strcmp(l->action, "pause") || !strcmp(l->action, "resume")) {
            e->logged_pause = !strcmp(l->action, "pause");
            snprintf(e->logged_pause_by, sizeof(e->logged_pause_by), "%s", l->operator_);
        } else if (!strcmp(l->action, "abort")) {
            e->aborted = 1;
            snprintf(e->aborted_by, sizeof(e->aborted_by), "%s", l->operator_);
        } else if (!strcmp(l->action, "archive")) {
            e->archived = 1;
        }
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    return 0;
}
