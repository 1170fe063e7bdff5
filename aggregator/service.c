/* service.c - the federations of the service: opening and replaying them,
 * ticking them, their states, and what regions reach of them.  Operators'
 * actions are in service_admin.c, the service log in service_log.c.  See
 * service.h. */
#include "aggregator/service_internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "aggregator/metrics.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "fedagg.pb-c.h"
#include "proto/config_check.h"

const char *fa_service_state_name(int state)
{
    static const char *const names[] = {"running", "paused", "finished", "stopped", "archived"};
    return state >= 0 && state <= FA_SERVICE_ARCHIVED ? names[state] : "unknown";
}

/* ------------------------------------------------------------------------ */
/* Entries                                                                   */
/* ------------------------------------------------------------------------ */

struct svc_fed *fa_svc_find(const fa_service *s, const char *id)
{
    for (size_t i = 0; i < s->n; i++)
        if (id ? !strcmp(s->feds[i]->id, id) : s->feds[i]->is_default)
            return s->feds[i];
    return NULL;
}

void fa_svc_entry_free(struct svc_fed *e)
{
    if (!e)
        return;
    fa_fed_close(e->fed);
    if (e->fc)
        protobuf_c_message_free_unpacked(&e->fc->base, NULL);
    free(e->eval.command);
    free(e->id);
    free(e->dir);
    free(e->log_file);
    free(e->origin);
    free(e->text);
    free(e->config_name);
    free(e);
}

int fa_svc_add(fa_service *s, struct svc_fed *e, fa_error *err)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct svc_fed **v = realloc(s->feds, cap * sizeof(*v));
        if (!v)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        s->feds = v;
        s->cap = cap;
    }
    s->feds[s->n++] = e;
    return 0;
}

/* The service's evaluator named name, or NULL. */
static const Fedagg__NamedEvaluator *evaluator(const fa_service *s, const char *name)
{
    const Fedagg__ServiceConfig *sv = s->cfg->service;
    for (size_t i = 0; sv && name && i < sv->n_evaluators; i++)
        if (sv->evaluators[i]->name && !strcmp(sv->evaluators[i]->name, name))
            return sv->evaluators[i];
    return NULL;
}

/* Where a top-level field is written in a text ("name:" at a line's start
 * or after a blank), 1-based; 1:1 when it is not found. */
static void field_position(const char *text, size_t len, const char *name, unsigned *line,
                           unsigned *col)
{
    size_t nl = strlen(name);
    unsigned l = 1, c = 1;
    for (size_t i = 0; i + nl <= len; i++) {
        if ((i == 0 || text[i - 1] == ' ' || text[i - 1] == '\n' || text[i - 1] == '\t') &&
            !strncmp(text + i, name, nl)) {
            size_t k = i + nl;
            while (k < len && (text[k] == ' ' || text[k] == '\t'))
                k++;
            if (k < len && text[k] == ':') {
                *line = l;
                *col = c;
                return;
            }
        }
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else {
            c++;
        }
    }
    *line = *col = 1;
}

int fa_svc_load_file(fa_service *s, const char *text, size_t len, const char *name, unsigned flags,
                     Fedagg__FederationConfig **out, fa_diags *diags, fa_error *err)
{
    ProtobufCMessage *m = NULL;
    Fedagg__FederationConfig *fc;
    int rc;

    *out = NULL;
    rc = fa_config_load_text(FA_CONFIG_FEDERATION, text, len, name, s->dir, flags, &m, diags, err);
    if (rc != 0)
        return rc;
    fc = (Fedagg__FederationConfig *)m;
    if (fc->evaluator && fc->evaluator[0] && !evaluator(s, fc->evaluator)) {
        unsigned line, col;
        char names[512] = "";
        size_t k = 0;
        const Fedagg__ServiceConfig *sv = s->cfg->service;
        for (size_t i = 0; i < sv->n_evaluators && k < sizeof(names); i++)
            k += (size_t)snprintf(names + k, sizeof(names) - k, "%s%s", i ? ", " : "",
                                  sv->evaluators[i]->name);
        field_position(text, len, "evaluator", &line, &col);
        if (diags)
            fa_diags_addf(diags, name, line, col,
                          "`evaluator` \"%s\" is not one of the service's evaluators (%s)",
                          fc->evaluator, names[0] ? names : "it names none");
        fa_errorf(err, FA_ERR_INVAL,
                  "%s:%u:%u: `evaluator` \"%s\" is not one of the service's evaluators (%s)", name,
                  line, col, fc->evaluator, names[0] ? names : "it names none");
        protobuf_c_message_free_unpacked(m, NULL);
        return FA_ERR_INVAL;
    }
    *out = fc;
    return 0;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + 1 + strlen(b) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

int fa_svc_entry_from_file(fa_service *s, Fedagg__FederationConfig *fc, const char *text,
                           size_t len, const char *name, struct svc_fed **out, fa_error *err)
{
    const Fedagg__AggregatorConfig *cfg = s->cfg;
    Fedagg__AggregatorConfig a = FEDAGG__AGGREGATOR_CONFIG__INIT;
    Fedagg__Storage st = FEDAGG__STORAGE__INIT;
    Fedagg__AuditConfig au = FEDAGG__AUDIT_CONFIG__INIT;
    Fedagg__Evaluation ev = FEDAGG__EVALUATION__INIT;
    const Fedagg__NamedEvaluator *ne = evaluator(s, fc->evaluator);
    struct svc_fed *e = calloc(1, sizeof(*e));
    char *feds = NULL;

    *out = NULL;
    if (!e) {
        protobuf_c_message_free_unpacked(&fc->base, NULL);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    e->fc = fc;
    e->logged_pause = -1;
    e->id = strdup(fc->federation_id);
    feds = join(s->dir, "federations");
    e->dir = feds ? join(feds, fc->federation_id) : NULL;
    free(feds);
    e->log_file = e->dir ? join(e->dir, "audit.log") : NULL;
    e->origin = malloc(strlen(fc->federation_id) + 8);
    e->text = malloc(len ? len : 1);
    e->config_name = strdup(name ? name : "");
    if (!e->id || !e->dir || !e->log_file || !e->origin || !e->text || !e->config_name ||
        (ne && ne->n_command && !(ev.command = malloc(ne->n_command * sizeof(char *))))) {
        fa_svc_entry_free(e);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    memcpy(e->text, text, len);
    e->text_len = len;
    snprintf(e->origin, strlen(fc->federation_id) + 8, "fedagg/%s", fc->federation_id);
    snprintf(e->team, sizeof(e->team), "%s", fc->team);

    /* The aggregator config it opens with: its own parts, the service's key
     * and memory limit, its files under service.dir/federations/<id>. */
    st.dir = e->dir;
    st.has_keep_versions = 1;
    st.keep_versions = fc->keep_versions;
    au.log_file = e->log_file;
    au.signing_key_file = cfg->audit->signing_key_file;
    au.origin = e->origin;
    ev.test_images = fc->evaluation->test_images;
    ev.test_labels = fc->evaluation->test_labels;
    ev.has_every = 1;
    ev.every = fc->evaluation->every;
    ev.has_timeout_s = 1;
    ev.timeout_s = ne ? ne->timeout_s : fc->evaluation->timeout_s;
    ev.has_max_region_examples = 1;
    ev.max_region_examples = fc->evaluation->max_region_examples;
    if (ne) {
        for (size_t i = 0; i < ne->n_command; i++)
            ev.command[i] = ne->command[i];
        ev.n_command = ne->n_command;
    }
    e->storage = st;
    e->audit = au;
    e->eval = ev;
    a.federation_id = fc->federation_id;
    a.n_regions = fc->n_regions;
    a.regions = fc->regions;
    a.round = fc->round;
    a.model = fc->model;
    a.optimizer = fc->optimizer;
    a.quantization = fc->quantization;
    a.model_delta = fc->model_delta;
    a.distributed_dp = fc->distributed_dp;
    a.promotion = fc->promotion;
    a.storage = &e->storage;
    a.audit = &e->audit;
    a.evaluation = &e->eval;
    a.has_memory_limit_bytes = 1;
    a.memory_limit_bytes = cfg->memory_limit_bytes;
    a.team = fc->team;
    a.trainer = fc->trainer && fc->trainer[0] ? fc->trainer : NULL;
    a.dataset = fc->dataset && fc->dataset[0] ? fc->dataset : NULL;
    a.listen = NULL;
    a.metrics_listen = NULL;
    a.log_level = NULL;
    e->own = a;
    e->cfg = &e->own;
    *out = e;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* States and memory                                                         */
/* ------------------------------------------------------------------------ */

/* Can hold a round: open, not stopped, aborted, archived or finished. */
int fa_svc_can_run(const struct svc_fed *e)
{
    return e->fed && !e->fault[0] && !e->aborted && !e->archived && !fa_fed_finished(e->fed);
}

int fa_svc_state(const struct svc_fed *e, uint64_t now_ms, char *why, size_t n)
{
    why[0] = '\0';
    if (e->archived) {
        snprintf(why, n, "%s", e->aborted ? "aborted, then archived" : "archived");
        return FA_SERVICE_ARCHIVED;
    }
    if (e->fault[0]) {
        snprintf(why, n, "%s", e->fault);
        return FA_SERVICE_STOPPED;
    }
    if (e->aborted) {
        snprintf(why, n, "aborted by operator %s", e->aborted_by);
        return FA_SERVICE_STOPPED;
    }
    if (!e->fed) {
        snprintf(why, n, "not open");
        return FA_SERVICE_STOPPED;
    }
    if (fa_fed_finished(e->fed))
        return FA_SERVICE_FINISHED;
    if (fa_fed_paused(e->fed))
        return FA_SERVICE_PAUSED;
    if (!fa_fed_ready(e->fed, now_ms, why, n))
        return FA_SERVICE_STOPPED; /* its storage: it resumes by itself */
    return FA_SERVICE_RUNNING;
}

int fa_service_state(const fa_service *s, const char *id, uint64_t now_ms, char *why, size_t n)
{
    const struct svc_fed *e = fa_svc_find(s, id);
    return e ? fa_svc_state(e, now_ms, why, n) : -1;
}

int fa_svc_open_fed(fa_service *s, struct svc_fed *e, uint64_t now_ms, fa_error *err)
{
    fa_fed_open_opts o = {0};
    int rc;

    o.metrics = s->metrics;
    o.metrics_label = s->many;
    o.memory_requests = s->cfg->quic ? s->cfg->quic->max_buffered_request_bytes : 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->feds[i] != e && fa_svc_can_run(s->feds[i])) {
            o.memory_used += fa_fed_memory_need(s->feds[i]->fed);
            o.memory_others++;
        }
    if (e->dir && (rc = fa_file_mkdirs(e->dir, 0700, err)) != 0)
        return rc;
    rc = fa_fed_open_ex(&e->fed, e->cfg, &o, now_ms, err);
    if (rc != 0) {
        snprintf(e->fault, sizeof(e->fault), "it could not be opened: %s", fa_error_msg(err, rc));
        return rc;
    }
    e->fault[0] = '\0';
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Opening                                                                   */
/* ------------------------------------------------------------------------ */

/* The pause state the service log last set for e, where it differs from
 * the federation's own (a crash between the two logs' appends): the
 * federation is set to the log's, and its own log records that. */
static void reconcile_pause(struct svc_fed *e, uint64_t now_ms)
{
    fa_error err;
    int rc;

    if (!e->fed || e->logged_pause < 0 || e->aborted || e->archived || fa_fed_finished(e->fed) ||
        fa_fed_paused(e->fed) == e->logged_pause)
        return;
    fa_error_clear(&err);
    rc = e->logged_pause
             ? fa_fed_admin_pause(e->fed, e->logged_pause_by[0] ? e->logged_pause_by : "service",
                                  now_ms, &err)
             : fa_fed_admin_resume(e->fed, "service", now_ms, &err);
    fa_log(rc == 0 ? FA_LOG_WARN : FA_LOG_ERROR,
           "federation's pause state set to the service log's",
           "federation=%s paused=%d error=\"%s\"", e->id, e->logged_pause,
           rc == 0 ? "" : fa_error_msg(&err, rc));
}

/* An aborted federation: no round opens, the attempt in flight (after a
 * crash between the abort's appends) is aborted. */
static void settle_aborted(struct svc_fed *e, uint64_t now_ms)
{
    fa_error err;
    int phase;

    if (!e->fed || !e->aborted || e->archived)
        return;
    fa_error_clear(&err);
    if (!fa_fed_paused(e->fed) && !fa_fed_finished(e->fed))
        fa_fed_admin_pause(e->fed, e->aborted_by[0] ? e->aborted_by : "service", now_ms, &err);
    fa_fed_position(e->fed, NULL, NULL, &phase, NULL);
    if (phase >= FEDAGG__PHASE__PHASE_ADVERTISE && phase <= FEDAGG__PHASE__PHASE_UNMASK)
        fa_fed_admin_abort(e->fed, e->aborted_by[0] ? e->aborted_by : "service", now_ms, &err);
}

int fa_service_open(fa_service **out, const Fedagg__AggregatorConfig *cfg,
                    struct fa_metrics *metrics, uint64_t now_ms, fa_error *err)
{
    fa_service *s = calloc(1, sizeof(*s));
    int rc = 0;

    *out = NULL;
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if (sodium_init() < 0) {
        free(s);
        return fa_errorf(err, FA_ERR_CRYPTO, "libsodium initialisation failed");
    }
    s->cfg = cfg;
    s->metrics = metrics;
    s->many = cfg->service && cfg->service->dir && cfg->service->dir[0];
    if (s->many && !(s->dir = strdup(cfg->service->dir))) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (metrics && s->many)
        fa_metrics_define(metrics, "fedagg_federation_state", FA_METRIC_GAUGE,
                          "1 for the state each federation of the service is in (running, "
                          "paused, finished, stopped, archived), else 0.",
                          NULL, 0, NULL);
    if (cfg->n_regions) {
        struct svc_fed *e = calloc(1, sizeof(*e));
        if (!e || !(e->id = strdup(cfg->federation_id ? cfg->federation_id : "fedagg"))) {
            free(e);
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        e->is_default = 1;
        e->logged_pause = -1;
        e->cfg = cfg;
        snprintf(e->team, sizeof(e->team), "%s", cfg->team ? cfg->team : "");
        if ((rc = fa_svc_add(s, e, err)) != 0) {
            fa_svc_entry_free(e);
            goto fail;
        }
    }
    if (s->many) {
        rc = fa_file_mkdirs(s->dir, 0700, err);
        if (rc == 0)
            rc = fa_svc_log_open(s, err);
        if (rc == 0)
            rc = fa_svc_log_replay(s, err);
        if (rc != 0)
            goto fail;
    }
    /* The default federation first, then the created ones in the order of
     * the log: each beside those opened before it. */
    for (size_t i = 0; i < s->n; i++) {
        struct svc_fed *e = s->feds[i];
        fa_error e_err;
        if (e->fed || (e->fault[0] && !e->is_default))
            continue;
        fa_error_clear(&e_err);
        fa_svc_scope(s, e);
        rc = fa_svc_open_fed(s, e, now_ms, &e_err);
        if (rc != 0 && !s->many) {
            fa_errorf(err, rc, "%s", e_err.msg);
            goto fail;
        }
        rc = 0;
        if (!e->fed) {
            fa_log(FA_LOG_ERROR, "federation stopped: it could not be opened",
                   "federation=%s error=\"%s\"", e->id, e_err.msg);
            continue;
        }
        reconcile_pause(e, now_ms);
        settle_aborted(e, now_ms);
    }
    fa_log_set_scope(NULL);
    if (s->many)
        fa_log(FA_LOG_INFO, "service open", "dir=%s federations=%zu default=%s", s->dir, s->n,
               cfg->n_regions ? s->feds[0]->id : "(none)");
    *out = s;
    return 0;
fail:
    fa_log_set_scope(NULL);
    fa_service_close(s);
    return rc;
}

void fa_service_close(fa_service *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        fa_svc_entry_free(s->feds[i]);
    free(s->feds);
    fa_audit_log_close(s->log);
    fa_note_signer_del(s->signer);
    free(s->dir);
    free(s);
}

void fa_service_log_scope(const fa_service *s, const fa_fed *fed)
{
    char kv[160], q[128];
    if (!s->many || !fed) {
        fa_log_set_scope(NULL);
        return;
    }
    snprintf(kv, sizeof(kv), "federation=%s", fa_log_quote(q, sizeof(q), fa_fed_id(fed)));
    fa_log_set_scope(kv);
}

/* The same for an entry, open or not. */
void fa_svc_scope(const fa_service *s, const struct svc_fed *e)
{
    char kv[160], q[128];
    if (!s->many) {
        fa_log_set_scope(NULL);
        return;
    }
    snprintf(kv, sizeof(kv), "federation=%s", fa_log_quote(q, sizeof(q), e->id));
    fa_log_set_scope(kv);
}

void fa_service_set_close_hook(fa_service *s, void (*fn)(fa_fed *fed, void *arg), void *arg)
{
    s->close_hook = fn;
    s->close_arg = arg;
}

int fa_service_hosts_many(const fa_service *s)
{
    return s->many;
}

size_t fa_service_count(const fa_service *s)
{
    return s->n;
}

fa_fed *fa_service_fed_at(const fa_service *s, size_t i)
{
    return i < s->n ? s->feds[i]->fed : NULL;
}

fa_fed *fa_service_default(const fa_service *s)
{
    const struct svc_fed *e = fa_svc_find(s, NULL);
    return e && !e->fault[0] ? e->fed : NULL;
}

/* ------------------------------------------------------------------------ */
/* The loop                                                                  */
/* ------------------------------------------------------------------------ */

static void export_states(fa_service *s, uint64_t now_ms)
{
    char why[8], labels[320];
    if (!s->metrics || !s->many)
        return;
    for (size_t i = 0; i < s->n; i++) {
        int st = fa_svc_state(s->feds[i], now_ms, why, sizeof(why));
        for (int k = 0; k <= FA_SERVICE_ARCHIVED; k++) {
            labels[0] = '\0';
            fa_metrics_label(labels, sizeof(labels), "federation", s->feds[i]->id);
            fa_metrics_label(labels, sizeof(labels), "state", fa_service_state_name(k));
            fa_metrics_set(s->metrics, "fedagg_federation_state", labels, st == k ? 1 : 0);
        }
    }
}

int fa_service_tick(fa_service *s, uint64_t now_ms)
{
    int changed = 0;

    for (size_t i = 0; i < s->n; i++) {
        struct svc_fed *e = s->feds[i];
        if (!e->fed || e->fault[0] || e->archived || e->aborted)
            continue;
        fa_svc_scope(s, e);
        changed |= fa_fed_tick(e->fed, now_ms);
        if (s->many && fa_fed_fatal(e->fed)) {
            snprintf(e->fault, sizeof(e->fault),
                     "a committed round could not be recorded in its audit log; once its "
                     "storage has room, `fedagg federation resume %s` reopens it and repairs "
                     "the log",
                     e->id);
            fa_log(FA_LOG_ERROR, "federation stopped", "federation=%s reason=\"%s\"", e->id,
                   e->fault);
            changed = 1;
        }
    }
    fa_log_set_scope(NULL);
    if (now_ms - s->states_at >= 1000) { /* the state gauges: once a second is enough */
        s->states_at = now_ms;
        export_states(s, now_ms);
    }
    return changed;
}

int fa_service_fatal(const fa_service *s)
{
    const struct svc_fed *e = fa_svc_find(s, NULL);
    return !s->many && e && e->fed && fa_fed_fatal(e->fed);
}

int fa_service_finished(const fa_service *s)
{
    const struct svc_fed *e = fa_svc_find(s, NULL);
    return !s->many && e && e->fed && fa_fed_finished(e->fed);
}

int fa_service_ready(const fa_service *s, uint64_t now_ms, char *why, size_t n)
{
    const struct svc_fed *e = fa_svc_find(s, NULL);
    if (s->many || !e || !e->fed)
        return 1;
    return fa_fed_ready(e->fed, now_ms, why, n);
}

/* ------------------------------------------------------------------------ */
/* Regions                                                                   */
/* ------------------------------------------------------------------------ */

static int invites(const struct svc_fed *e, const char *region)
{
    for (size_t i = 0; region && i < e->cfg->n_regions; i++)
        if (e->cfg->regions[i]->id && !strcmp(e->cfg->regions[i]->id, region))
            return 1;
    return 0;
}

int fa_service_fed_for_region(fa_service *s, const char *id, const char *region, int write,
                              fa_fed **fed, fa_error *err)
{
    const struct svc_fed *e = fa_svc_find(s, id);

    *fed = NULL;
    if (!id) {
        if (!e)
            return fa_errorf(err, FA_ERR_NOTFOUND,
                             "this service has no default federation: use "
                             "/v1/federations/{id}/... (GET /v1/federations lists yours)");
        if (!invites(e, region))
            return fa_errorf(err, FA_ERR_AUTH,
                             "the certificate names region '%s', which is not a member of "
                             "this federation",
                             region ? region : "");
    } else if (!e || e->archived || !invites(e, region)) {
        return fa_errorf(err, FA_ERR_NOTFOUND, "no federation '%s' for region %s", id,
                         region ? region : "");
    }
    if (!e->fed || (write && e->fault[0]))
        return fa_errorf(err, FA_ERR_AGAIN, "federation %s is stopped: %s", e->id,
                         e->fault[0] ? e->fault : "not open");
    *fed = e->fed;
    return 0;
}

int fa_service_fed_ended(const fa_service *s, const fa_fed *fed)
{
    for (size_t i = 0; fed && i < s->n; i++)
        if (s->feds[i]->fed == fed)
            return s->feds[i]->aborted;
    return 0;
}

size_t fa_service_invitations(const fa_service *s, const char *region)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += (size_t)invites(s->feds[i], region);
    return n;
}

/* The size of the current model file, 0 when unknown. */
static uint64_t model_bytes(fa_fed *f)
{
    char path[4096];
    uint64_t v;
    uint8_t sha[32];
    struct stat st;

    if (fa_fed_model(f, UINT64_MAX, 0, path, sizeof(path), &v, sha) != 0 || stat(path, &st) != 0)
        return 0;
    return (uint64_t)st.st_size;
}

int fa_service_offers(fa_service *s, const char *region, uint64_t now_ms, uint8_t **out,
                      size_t *len, fa_error *err)
{
    Fedagg__FederationList list = FEDAGG__FEDERATION_LIST__INIT;
    Fedagg__FederationOffer *offers = calloc(s->n ? s->n : 1, sizeof(*offers));
    Fedagg__FederationOffer **ptrs = calloc(s->n ? s->n : 1, sizeof(*ptrs));
    Fedagg__FederationInfo **infos = calloc(s->n ? s->n : 1, sizeof(*infos));
    Fedagg__FederationInfo *bare = calloc(s->n ? s->n : 1, sizeof(*bare));
    char(*why)[512] = calloc(s->n ? s->n : 1, sizeof(*why));
    size_t k = 0;
    int rc = 0;

    *out = NULL;
    *len = 0;
    if (!offers || !ptrs || !infos || !bare || !why) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        const struct svc_fed *e = s->feds[i];
        Fedagg__FederationOffer *o = &offers[k];
        int dec = 0;
        if (e->archived || !invites(e, region))
            continue;
        fedagg__federation_offer__init(o);
        if (e->fed) {
            uint8_t *ib;
            size_t il;
            fa_error ie;
            if (fa_fed_info(e->fed, now_ms, &ib, &il, &ie) == 0) {
                infos[i] = fedagg__federation_info__unpack(NULL, il, ib);
                free(ib);
            }
            fa_fed_region_decision(e->fed, region, &dec, NULL);
            o->model_bytes = model_bytes(e->fed);
        }
        if (infos[i]) {
            o->info = infos[i];
        } else {
            fedagg__federation_info__init(&bare[i]);
            bare[i].federation_id = e->id;
            o->info = &bare[i];
        }
        o->team = (char *)e->team;
        o->state = (char *)fa_service_state_name(fa_svc_state(e, now_ms, why[i], sizeof(why[i])));
        o->state_reason = why[i];
        o->trainer = (char *)(e->cfg->trainer ? e->cfg->trainer : "");
        o->dataset = (char *)(e->cfg->dataset ? e->cfg->dataset : "");
        o->privacy_mechanism =
            (char *)(e->cfg->distributed_dp && e->cfg->distributed_dp->enabled ? "ddg" : "");
        o->rounds = e->cfg->round ? e->cfg->round->rounds : 0;
        o->decision = (char *)(dec > 0 ? "accepted" : dec < 0 ? "refused" : "");
        ptrs[k++] = o;
    }
    list.n_federations = k;
    list.federations = ptrs;
    *len = fedagg__federation_list__get_packed_size(&list);
    *out = malloc(*len ? *len : 1);
    if (!*out) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    fedagg__federation_list__pack(&list, *out);
out:
    for (size_t i = 0; infos && i < s->n; i++)
        if (infos[i])
            fedagg__federation_info__free_unpacked(infos[i], NULL);
    free(infos);
    free(bare);
    free(offers);
    free(ptrs);
    free(why);
    return rc;
}

int fa_service_offer_ids_json(fa_service *s, const char *region, char **out, fa_error *err)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < s->n; i++)
        if (!s->feds[i]->archived && invites(s->feds[i], region))
            json_array_append_new(a, json_string(s->feds[i]->id));
    *out = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return *out ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}

/* ------------------------------------------------------------------------ */
/* Documents                                                                 */
/* ------------------------------------------------------------------------ */

/* The service's fields of a federation, added to o. */
static void service_fields(const struct svc_fed *e, uint64_t now_ms, json_t *o)
{
    char why[512];
    int st = fa_svc_state(e, now_ms, why, sizeof(why));
    const Fedagg__FederationConfig *fc = e->fc;

    json_object_set_new(o, "id", json_string(e->id));
    json_object_set_new(o, "team", json_string(e->team));
    json_object_set_new(o, "state", json_string(fa_service_state_name(st)));
    json_object_set_new(o, "state_reason", json_string(why));
    json_object_set_new(o, "default", json_boolean(e->is_default));
    json_object_set_new(o, "description",
                        json_string(fc && fc->description ? fc->description : ""));
    json_object_set_new(o, "trainer", json_string(e->cfg->trainer ? e->cfg->trainer : ""));
    json_object_set_new(o, "dataset", json_string(e->cfg->dataset ? e->cfg->dataset : ""));
    json_object_set_new(o, "rounds_configured",
                        json_integer(e->cfg->round ? e->cfg->round->rounds : 0));
    if (!e->is_default) {
        json_object_set_new(o, "created_by", json_string(e->created_by));
        json_object_set_new(o, "created_unix_ms", json_integer((json_int_t)e->created_unix_ms));
        json_object_set_new(o, "config_name", json_string(e->config_name ? e->config_name : ""));
    }
    if (!e->fed) {
        json_object_set_new(o, "federation_id", json_string(e->id));
        json_object_set_new(o, "regions", json_array());
    }
}

/* The list entry of e. */
static json_t *summary(const struct svc_fed *e, uint64_t now_ms)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    service_fields(e, now_ms, o);
    if (e->fed) {
        uint64_t round, version;
        uint32_t attempt;
        int phase;
        char *st = NULL;
        fa_error err;
        fa_fed_position(e->fed, &round, &attempt, &phase, &version);
        json_object_set_new(o, "round", json_integer((json_int_t)round));
        json_object_set_new(o, "attempt", json_integer(attempt));
        json_object_set_new(o, "model_version", json_integer((json_int_t)version));
        /* rounds completed and the phase's name, as the status says them */
        fa_error_clear(&err);
        if (fa_fed_status_json(e->fed, now_ms, &st, &err) == 0) {
            json_t *sj = json_loads(st, 0, NULL);
            json_t *rc = sj ? json_object_get(sj, "rounds_completed") : NULL;
            json_t *ph = sj ? json_object_get(sj, "phase") : NULL;
            if (rc)
                json_object_set(o, "rounds_completed", rc);
            if (ph)
                json_object_set(o, "phase", ph);
            json_decref(sj);
            free(st);
        }
    }
    json_object_set_new(o, "regions_invited", json_integer((json_int_t)e->cfg->n_regions));
    return o;
}

/* fa_service_authorize's team check alone (the caller knows e exists). */
static int may_read(const fa_service *s, const char *op, const struct svc_fed *e)
{
    fa_error err;
    return !op || fa_service_authorize(s, op, e->id, &err) == 0;
}

int fa_service_list_json(fa_service *s, const char *op, uint64_t now_ms, char **out, fa_error *err)
{
    json_t *o = json_object(), *a = json_array();
    *out = NULL;
    for (size_t i = 0; o && a && i < s->n; i++)
        if (may_read(s, op, s->feds[i]))
            json_array_append_new(a, summary(s->feds[i], now_ms));
    if (o && a) {
        json_object_set_new(o, "federations", a);
        a = NULL;
        json_object_set_new(o, "service", json_boolean(s->many));
        *out = json_dumps(o, JSON_COMPACT);
    }
    json_decref(a);
    json_decref(o);
    return *out ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}

static json_t *show(const struct svc_fed *e, uint64_t now_ms)
{
    json_t *o = NULL;
    if (e->fed) {
        char *doc = NULL;
        fa_error err;
        fa_error_clear(&err);
        if (fa_fed_admin_json(e->fed, "status", now_ms, &doc, &err) == 0)
            o = json_loads(doc, 0, NULL);
        free(doc);
    }
    if (!o)
        o = json_object();
    if (o)
        service_fields(e, now_ms, o);
    return o;
}

int fa_service_show_json(fa_service *s, const char *id, uint64_t now_ms, char **out, fa_error *err)
{
    const struct svc_fed *e = fa_svc_find(s, id);
    json_t *o;

    *out = NULL;
    if (!e)
        return fa_errorf(err, FA_ERR_NOTFOUND, "no federation '%s'", id ? id : "(default)");
    o = show(e, now_ms);
    *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return *out ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}

int fa_service_status_json(fa_service *s, uint64_t now_ms, char **out, fa_error *err)
{
    json_t *o = json_object(), *sv = json_object(), *states = json_object(), *a = json_array();
    int count[FA_SERVICE_ARCHIVED + 1] = {0};
    char why[8];

    *out = NULL;
    for (size_t i = 0; o && sv && states && a && i < s->n; i++) {
        count[fa_svc_state(s->feds[i], now_ms, why, sizeof(why))]++;
        json_array_append_new(a, show(s->feds[i], now_ms));
    }
    if (o && sv && states && a) {
        for (int k = 0; k <= FA_SERVICE_ARCHIVED; k++)
            json_object_set_new(states, fa_service_state_name(k), json_integer(count[k]));
        json_object_set_new(sv, "federations", json_integer((json_int_t)s->n));
        json_object_set_new(sv, "states", states);
        states = NULL;
        json_object_set_new(o, "service", sv);
        sv = NULL;
        json_object_set_new(o, "federations", a);
        a = NULL;
        *out = json_dumps(o, JSON_COMPACT);
    }
    json_decref(states);
    json_decref(sv);
    json_decref(a);
    json_decref(o);
    return *out ? 0 : fa_errorf(err, FA_ERR_NOMEM, "out of memory");
}
