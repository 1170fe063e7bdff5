/* service_admin.c - operators' doings on the service: who may touch which
 * federation (teams), creating federations, and the lifecycle.  See
 * service.h. */
#include "aggregator/service_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "proto/config_check.h"

/* ------------------------------------------------------------------------ */
/* Teams                                                                     */
/* ------------------------------------------------------------------------ */

static int listed(const fa_service *s, const char *op)
{
    for (size_t i = 0; op && i < s->cfg->n_operators; i++)
        if (s->cfg->operators[i] && !strcmp(s->cfg->operators[i], op))
            return 1;
    return 0;
}

static int in_team(const Fedagg__Team *t, const char *op)
{
    for (size_t i = 0; op && i < t->n_operators; i++)
        if (t->operators[i] && !strcmp(t->operators[i], op))
            return 1;
    return 0;
}

/* The teams op is in, for a refusal's words. */
static void teams_text(const fa_service *s, const char *op, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < s->cfg->n_teams && k < n; i++)
        if (in_team(s->cfg->teams[i], op))
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", s->cfg->teams[i]->name);
    if (!buf[0])
        snprintf(buf, n, "none");
}

/* Whether op may act for team.  Without teams every operator the config
 * lists acts on every federation (the handshake admits listed operators
 * only); with teams only the team's operators. */
static int authorize_team(const fa_service *s, const char *op, const char *team, const char *what,
                          fa_error *err)
{
    char teams[256];

    if (!listed(s, op))
        return fa_errorf(err, FA_ERR_AUTH,
                         "operator %s is not in this service's operators; ask its administrator "
                         "to list you",
                         op ? op : "(none)");
    if (s->cfg->n_teams == 0)
        return 0;
    for (size_t i = 0; team && i < s->cfg->n_teams; i++)
        if (s->cfg->teams[i]->name && !strcmp(s->cfg->teams[i]->name, team) &&
            in_team(s->cfg->teams[i], op))
            return 0;
    teams_text(s, op, teams, sizeof(teams));
    return fa_errorf(err, FA_ERR_AUTH, "operator %s (teams: %s) may not %s of team \"%s\"", op,
                     teams, what, team ? team : "");
}

int fa_service_authorize(const fa_service *s, const char *op, const char *id, fa_error *err)
{
    const struct svc_fed *e = fa_svc_find(s, id);
    char what[300];

    if (!e)
        return id ? fa_errorf(err, FA_ERR_NOTFOUND, "no federation '%s' on this service", id)
                  : fa_errorf(err, FA_ERR_NOTFOUND,
                              "this service has no default federation: name one (--federation "
                              "ID; fedagg federation list)");
    snprintf(what, sizeof(what), "touch federation %s", e->id);
    return authorize_team(s, op, e->team, what, err);
}

int fa_service_fed(fa_service *s, const char *id, fa_fed **fed, fa_error *err)
{
    const struct svc_fed *e = fa_svc_find(s, id);
    *fed = NULL;
    if (!e)
        return fa_errorf(err, FA_ERR_NOTFOUND, "no federation '%s'", id ? id : "(default)");
    if (!e->fed)
        return fa_errorf(err, FA_ERR_AGAIN, "federation %s is stopped: %s", e->id, e->fault);
    *fed = e->fed;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Create                                                                    */
/* ------------------------------------------------------------------------ */

/* Removes what dir holds, not dir itself: it may be a volume mounted there
 * for this federation.  A dir that does not exist is no error. */
static int clear_dir(const char *dir, fa_error *err)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[4096];
    int rc = 0;

    if (!d)
        return errno == ENOENT ? 0 : fa_errorf(err, FA_ERR_IO, "%s: %s", dir, strerror(errno));
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        rc = fa_file_remove_tree(path, err);
    }
    closedir(d);
    return rc;
}

static size_t held(const fa_service *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += !s->feds[i]->archived;
    return n;
}

int fa_service_create(fa_service *s, const char *op, const char *text, size_t len,
                      const char *filename, uint64_t now_ms, const char **id_out, fa_diags *diags,
                      fa_error *err)
{
    Fedagg__FederationConfig *fc = NULL;
    struct svc_fed *e = NULL;
    char what[64];
    fa_error e2;
    int rc;

    if (id_out)
        *id_out = NULL;
    if (!s->many)
        return fa_errorf(err, FA_ERR_STATE,
                         "this aggregator hosts one federation: add service { dir: \"...\" } to "
                         "its config to create more");
    rc = fa_svc_load_file(s, text, len, filename, 0, &fc, diags, err);
    if (rc != 0)
        return rc;
    snprintf(what, sizeof(what), "create federations");
    if ((rc = authorize_team(s, op, fc->team, what, err)) != 0)
        goto fail;
    if (fa_svc_find(s, fc->federation_id)) {
        rc = fa_errorf(err, FA_ERR_EXISTS,
                       "federation %s exists (fedagg federation show %s); choose another "
                       "federation_id",
                       fc->federation_id, fc->federation_id);
        goto fail;
    }
    if (held(s) >= s->cfg->service->max_federations) {
        rc = fa_errorf(err, FA_ERR_NOSPACE,
                       "the service holds %zu federations, its service.max_federations: archive "
                       "one first",
                       held(s));
        goto fail;
    }
    rc = fa_svc_entry_from_file(s, fc, text, len, filename, &e, err);
    fc = NULL; /* taken */
    if (rc != 0)
        return rc;
    snprintf(e->team, sizeof(e->team), "%s", e->fc->team);
    snprintf(e->created_by, sizeof(e->created_by), "%s", op);
    e->created_unix_ms = fa_time_unix_ms();
    /* A directory of this id holds nothing the log knows: what a create
     * that died before its record left, or an empty volume provisioned for
     * it. */
    fa_error_clear(&e2);
    if ((rc = clear_dir(e->dir, err)) != 0)
        goto fail;
    fa_svc_scope(s, e);
    rc = fa_svc_open_fed(s, e, now_ms, err);
    fa_log_set_scope(NULL);
    if (rc != 0) {
        fa_error_prefix(err, rc, "federation %s", e->id);
        goto fail_dir;
    }
    fa_svc_scope(s, e);
    rc = fa_svc_log_append(s, e->id, "create", op, e->team, e, "created", err);
    fa_log_set_scope(NULL);
    if (rc != 0)
        goto fail_dir;
    {
        /* for people: the file it was created from, beside its store */
        char path[4096];
        snprintf(path, sizeof(path), "%s/federation.textproto", e->dir);
        if (fa_file_write_atomic(path, e->text, e->text_len, 0644, &e2) != 0)
            fa_log(FA_LOG_WARN, "cannot keep the federation file beside its store",
                   "federation=%s error=\"%s\"", e->id, e2.msg);
    }
    if ((rc = fa_svc_add(s, e, err)) != 0) {
        /* recorded: the next start opens it; now it is only not served */
        fa_svc_entry_free(e);
        return rc;
    }
    fa_svc_scope(s, e);
    fa_log(FA_LOG_INFO, "federation created", "team=%s operator=%s regions=%zu memory_mib=%.1f",
           e->team, op, e->cfg->n_regions, (double)fa_fed_memory_need(e->fed) / 1048576.0);
    fa_log_set_scope(NULL);
    if (id_out)
        *id_out = e->id;
    return 0;
fail_dir:
    fa_fed_close(e->fed);
    e->fed = NULL;
    fa_error_clear(&e2);
    if (clear_dir(e->dir, &e2) != 0)
        fa_log(FA_LOG_WARN, "cannot remove a federation that was not created",
               "federation=%s error=\"%s\"", e->id, e2.msg);
    rmdir(e->dir); /* unless it is a mount point: then it stays, empty */
fail:
    if (fc)
        protobuf_c_message_free_unpacked(&fc->base, NULL);
    fa_svc_entry_free(e);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* The lifecycle                                                             */
/* ------------------------------------------------------------------------ */

static int need_log(const fa_service *s, const char *action, fa_error *err)
{
    if (s->many)
        return 0;
    return fa_errorf(err, FA_ERR_STATE,
                     "%s needs a service: add service { dir: \"...\" } to this aggregator's "
                     "config (its log records federations' lifecycles)",
                     action);
}

/* Records the action in the service log (when there is one); when it
 * cannot, undo() is run and the action is refused. */
static int record(fa_service *s, struct svc_fed *e, const char *action, const char *op,
                  const char *reason, void (*undo)(struct svc_fed *, const char *, uint64_t),
                  uint64_t now_ms, fa_error *err)
{
    int rc;
    if (!s->many)
        return 0;
    rc = fa_svc_log_append(s, e->id, action, op, e->team, NULL, reason, err);
    if (rc != 0 && undo) {
        undo(e, op, now_ms);
        fa_error_prefix(err, rc, "not done");
    }
    return rc;
}

static void undo_pause(struct svc_fed *e, const char *op, uint64_t now_ms)
{
    fa_error err;
    fa_fed_admin_resume(e->fed, op, now_ms, &err);
}

static void undo_resume(struct svc_fed *e, const char *op, uint64_t now_ms)
{
    fa_error err;
    fa_fed_admin_pause(e->fed, op, now_ms, &err);
}

static int act_pause(fa_service *s, struct svc_fed *e, const char *op, uint64_t now_ms, char *msg,
                     size_t n, fa_error *err)
{
    uint64_t round;
    uint32_t attempt;
    int rc = fa_fed_admin_pause(e->fed, op, now_ms, err);
    if (rc != 0)
        return rc;
    fa_fed_position(e->fed, &round, &attempt, NULL, NULL);
    snprintf(msg, n,
             "paused by %s: no new round opens after round %" PRIu64 " (attempt %u) completes "
             "or aborts",
             op, round, attempt);
    if ((rc = record(s, e, "pause", op, msg, undo_pause, now_ms, err)) != 0)
        return rc;
    e->logged_pause = s->many ? 1 : -1;
    return 0;
}

static int act_resume(fa_service *s, struct svc_fed *e, const char *op, uint64_t now_ms, char *msg,
                      size_t n, fa_error *err)
{
    int rc;

    if (e->aborted)
        return fa_errorf(err, FA_ERR_STATE,
                         "federation %s was aborted by %s: an aborted federation does not "
                         "resume (create a new one)",
                         e->id, e->aborted_by);
    if (e->fault[0]) {
        /* A fault stopped it: open it again (a committed round its log
         * missed is recorded from the saved round state). */
        char was[512];
        snprintf(was, sizeof(was), "%s", e->fault);
        if (e->fed && s->close_hook)
            s->close_hook(e->fed, s->close_arg);
        fa_fed_close(e->fed);
        e->fed = NULL;
        rc = fa_svc_open_fed(s, e, now_ms, err);
        if (rc != 0)
            return fa_error_prefix(err, rc, "federation %s is still stopped", e->id);
        snprintf(msg, n, "federation %s reopened by %s (it was stopped: %s)", e->id, op, was);
        fa_log(FA_LOG_INFO, "federation reopened", "federation=%s operator=%s", e->id, op);
        if (fa_fed_paused(e->fed) && (rc = fa_fed_admin_resume(e->fed, op, now_ms, err)) != 0)
            return rc;
        if ((rc = record(s, e, "resume", op, msg, NULL, now_ms, err)) != 0)
            return rc;
        e->logged_pause = s->many ? 0 : -1;
        return 0;
    }
    rc = fa_fed_admin_resume(e->fed, op, now_ms, err);
    if (rc != 0)
        return rc;
    snprintf(msg, n, "resumed by %s: rounds open again", op);
    if ((rc = record(s, e, "resume", op, msg, undo_resume, now_ms, err)) != 0)
        return rc;
    e->logged_pause = s->many ? 0 : -1;
    return 0;
}

/* Ends the federation: no new round, the attempt in flight aborted (both
 * in its own log), then the service log's record. */
static int act_abort(fa_service *s, struct svc_fed *e, const char *op, uint64_t now_ms, char *msg,
                     size_t n, fa_error *err)
{
    int rc, phase = 0, paused_here = 0;

    if ((rc = need_log(s, "aborting a federation", err)) != 0)
        return rc;
    if (e->aborted)
        return fa_errorf(err, FA_ERR_STATE, "federation %s was aborted already (by %s)", e->id,
                         e->aborted_by);
    if (e->fed && fa_fed_finished(e->fed))
        return fa_errorf(err, FA_ERR_STATE,
                         "federation %s has finished its rounds: archive it instead", e->id);
    if (e->fed && !e->fault[0]) {
        if (!fa_fed_paused(e->fed)) {
            if ((rc = fa_fed_admin_pause(e->fed, op, now_ms, err)) != 0)
                return rc;
            paused_here = 1;
        }
        fa_fed_position(e->fed, NULL, NULL, &phase, NULL);
        if (phase >= FEDAGG__PHASE__PHASE_ADVERTISE && phase <= FEDAGG__PHASE__PHASE_UNMASK &&
            (rc = fa_fed_admin_abort(e->fed, op, now_ms, err)) != 0) {
            if (paused_here)
                undo_pause(e, op, now_ms);
            return rc;
        }
    }
    snprintf(msg, n,
             "federation %s aborted by %s: no round opens again; its models and audit log stay "
             "readable",
             e->id, op);
    rc = fa_svc_log_append(s, e->id, "abort", op, e->team, NULL, msg, err);
    if (rc != 0) {
        /* Not recorded: the federation stays paused (its own log says so),
         * and the operator is told the abort was not done. */
        return fa_error_prefix(err, rc, "not done (the federation stays paused)");
    }
    e->aborted = 1;
    snprintf(e->aborted_by, sizeof(e->aborted_by), "%s", op);
    return 0;
}

static int act_archive(fa_service *s, struct svc_fed *e, const char *op, char *msg, size_t n,
                       fa_error *err)
{
    int rc;

    if ((rc = need_log(s, "archiving a federation", err)) != 0)
        return rc;
    if (e->archived)
        return fa_errorf(err, FA_ERR_STATE, "federation %s is archived already", e->id);
    if (!e->aborted && !e->fault[0] && e->fed && !fa_fed_finished(e->fed))
        return fa_errorf(err, FA_ERR_STATE,
                         "federation %s is still running (or paused): abort it first, or let it "
                         "finish its rounds",
                         e->id);
    snprintf(msg, n,
             "federation %s archived by %s: no region reaches it any more; operators still "
             "read it",
             e->id, op);
    if ((rc = fa_svc_log_append(s, e->id, "archive", op, e->team, NULL, msg, err)) != 0)
        return rc;
    e->archived = 1;
    return 0;
}

static int act(fa_service *s, const char *op, const char *id, const char *action,
               const char *region, uint64_t now_ms, char *msg, size_t n, fa_error *err);

int fa_service_act(fa_service *s, const char *op, const char *id, const char *action,
                   const char *region, uint64_t now_ms, char *msg, size_t n, fa_error *err)
{
    const struct svc_fed *e = fa_svc_find(s, id);
    int rc;
    if (e)
        fa_svc_scope(s, e);
    rc = act(s, op, id, action, region, now_ms, msg, n, err);
    fa_log_set_scope(NULL);
    return rc;
}

static int act(fa_service *s, const char *op, const char *id, const char *action,
               const char *region, uint64_t now_ms, char *msg, size_t n, fa_error *err)
{
    struct svc_fed *e = fa_svc_find(s, id);
    uint64_t round;
    uint32_t attempt;
    int rc;

    msg[0] = '\0';
    if (!e)
        return fa_errorf(err, FA_ERR_NOTFOUND, "no federation '%s' on this service",
                         id ? id : "(default)");
    if (!op || !op[0])
        return fa_errorf(err, FA_ERR_AUTH, "an operator action needs an operator name");
    if (!strcmp(action, "abort"))
        return act_abort(s, e, op, now_ms, msg, n, err);
    if (!strcmp(action, "archive"))
        return act_archive(s, e, op, msg, n, err);
    if (!strcmp(action, "resume"))
        return act_resume(s, e, op, now_ms, msg, n, err);
    if (e->archived || e->aborted || !e->fed || e->fault[0]) {
        char why[512];
        fa_svc_state(e, now_ms, why, sizeof(why));
        return fa_errorf(err, FA_ERR_STATE, "federation %s is %s: %s", e->id,
                         e->archived ? "archived" : "stopped", why);
    }
    if (!strcmp(action, "pause"))
        return act_pause(s, e, op, now_ms, msg, n, err);
    if (!strcmp(action, "abort-round")) {
        if ((rc = fa_fed_admin_abort(e->fed, op, now_ms, err)) != 0)
            return rc;
        fa_fed_position(e->fed, &round, &attempt, NULL, NULL);
        snprintf(msg, n, "aborted by %s; the federation is now at round %" PRIu64 " attempt %u", op,
                 round, attempt);
        return 0;
    }
    if (!strcmp(action, "drain") || !strcmp(action, "admit")) {
        int drain = !strcmp(action, "drain");
        if ((rc = fa_fed_admin_drain(e->fed, op, region, drain, now_ms, err)) != 0)
            return rc;
        if (drain)
            snprintf(msg, n,
                     "region %s drained by %s: it sits out from the next attempt on until "
                     "admitted",
                     region, op);
        else
            snprintf(msg, n, "region %s admitted by %s: it takes part from the next attempt",
                     region, op);
        return 0;
    }
    return fa_errorf(err, FA_ERR_INVAL,
                     "no action '%s' (pause, resume, abort, archive, abort-round, drain, admit)",
                     action);
}
