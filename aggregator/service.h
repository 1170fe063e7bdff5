/* service.h - the aggregation service: many federations in one aggregator
 * (docs/service.md).
 *
 * A service holds federations (each an fa_fed, federation.h): the default
 * one its config describes, and those operators create at run time under
 * service.dir.  It knows nothing of sockets either: the HTTP/3 layer
 * (aggregator/api.c, api_admin.c, service_api.c) asks it which federation a
 * request is for and whether the caller may touch it, and hands requests to
 * that fa_fed; the server loop calls fa_service_tick().  Everything runs on
 * that one thread.
 *
 * The service log.  With service.dir set, every lifecycle action (create,
 * pause, resume, abort, archive) is first done, then recorded in a signed
 * audit log of its own (service.dir/service.log, origin service.origin):
 * the source of truth of which federations exist and in which state.  An
 * action the log cannot record is undone and refused ("not done").  At open
 * the log is replayed: every federation created is opened as its recorded
 * file says, the recorded aborts and archives applied, and a federation
 * whose own pause state differs from the log's last pause or resume of it
 * (a crash between the two appends) is set back to the log's, recorded in
 * its own log.
 *
 * Isolation.  A federation that does not open (a damaged store, a round
 * that no longer fits the memory budget), or whose committed round could
 * not be recorded, is stopped with the reason; the others go on.  Without
 * service.dir (a single-federation config) nothing changes from before: the
 * default federation's faults are the process's (fa_service_fatal).
 *
 * Errors: every int function returns 0 or a negative FA_ERR_* code and
 * fills err with a message for the operator or the region.
 */
#ifndef FA_AGGREGATOR_SERVICE_H
#define FA_AGGREGATOR_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/federation.h"
#include "common/fa_err.h"
#include "config.pb-c.h"
#include "proto/diags.h"

typedef struct fa_service fa_service;
struct fa_metrics;

/* A federation's state as operators and regions see it. */
enum fa_service_state {
    FA_SERVICE_RUNNING = 0,
    FA_SERVICE_PAUSED = 1,
    FA_SERVICE_FINISHED = 2, /* its configured rounds are done; models stay downloadable */
    FA_SERVICE_STOPPED = 3,  /* a fault or an operator's abort stopped it (the reason says) */
    FA_SERVICE_ARCHIVED = 4, /* no region reaches it; operators still read it */
};

/* "running", "paused", "finished", "stopped", "archived". */
const char *fa_service_state_name(int state);

/* Opens the service of cfg (loaded and checked, proto/config_check.h; it
 * must outlive the service): the default federation when cfg names regions,
 * and with service.dir the service log, replayed.  metrics may be NULL.
 * Without service.dir a default federation that does not open fails the
 * open, as a single aggregator did; with it, that federation is stopped
 * with the reason.  Returns 0, or FA_ERR_* (the service log cannot be
 * opened or read: FA_ERR_IO, FA_ERR_CORRUPT, FA_ERR_VERIFY). */
int fa_service_open(fa_service **out, const Fedagg__AggregatorConfig *cfg,
                    struct fa_metrics *metrics, uint64_t now_ms, fa_error *err);
void fa_service_close(fa_service *s);

/* 1 when cfg has service.dir (federations can be created). */
int fa_service_hosts_many(const fa_service *s);

/* Ticks every federation that can run; a federation whose committed round
 * could not be recorded is stopped (with service.dir).  Returns 1 when
 * anything changed (long-polls may be answerable). */
int fa_service_tick(fa_service *s, uint64_t now_ms);

/* 1 when the process must stop: without service.dir, the default
 * federation committed a round it could not record (a restart repairs it). */
int fa_service_fatal(const fa_service *s);

/* 1 when the process may end: without service.dir, the default
 * federation's configured rounds are done.  A service never ends so. */
int fa_service_finished(const fa_service *s);

/* What /readyz answers: without service.dir the default federation's
 * readiness (fa_fed_ready); with it 1 (one federation's fault is in its own
 * state, not the process's).  why gets the reason when 0. */
int fa_service_ready(const fa_service *s, uint64_t now_ms, char *why, size_t n);

/* The default federation, or NULL (none configured, or it is stopped). */
fa_fed *fa_service_default(const fa_service *s);

/* The federations, in order (the default first): their number, and the
 * fa_fed of the i-th (NULL when it could not be opened). */
size_t fa_service_count(const fa_service *s);
fa_fed *fa_service_fed_at(const fa_service *s, size_t i);

/* ---- regions ---------------------------------------------------------- */

/* The federation a region's request is for: id (NULL: the default one).
 * write: the request changes something (a round message, an evaluation, a
 * privacy statement, a decision).  Returns 0 with *fed, or
 *   FA_ERR_NOTFOUND  no such federation for this region (unknown, not
 *                    invited, archived; with id NULL: no default one): 404;
 *   FA_ERR_AUTH      id NULL and the region is not a member of the default
 *                    federation: 403, as a single aggregator answered;
 *   FA_ERR_AGAIN     write, and the federation is stopped by a fault: 503
 *                    with the reason.
 * The message never says whether a federation the region is not invited to
 * exists. */
int fa_service_fed_for_region(fa_service *s, const char *id, const char *region, int write,
                              fa_fed **fed, fa_error *err);

/* 1 when an operator aborted fed (service.h "abort"): it has ended, and
 * its FederationInfo says finished, so that a region stops waiting for its
 * rounds. */
int fa_service_fed_ended(const fa_service *s, const fa_fed *fed);

/* How many federations of the service invite region: 0 when it is no
 * member (the membership a handshake checks); a region's share of
 * connections grows with it, one worker a federation. */
size_t fa_service_invitations(const fa_service *s, const char *region);

/* GET /v1/federations: the FederationList (packed, malloc'ed) of the
 * federations inviting region, archived ones left out.  Returns 0 or
 * FA_ERR_NOMEM. */
int fa_service_offers(fa_service *s, const char *region, uint64_t now_ms, uint8_t **out,
                      size_t *len, fa_error *err);

/* The ids of the federations inviting region that are not archived, as a
 * JSON array (malloc'ed) for /v1/status. */
int fa_service_offer_ids_json(fa_service *s, const char *region, char **out, fa_error *err);

/* ---- operators ---------------------------------------------------------- */

/* Whether operator op may read or act on federation id (NULL: the default
 * one).  Returns 0, FA_ERR_NOTFOUND (no such federation), or FA_ERR_AUTH
 * (op is not in the config's operators, or not in the federation's team):
 * the message says which. */
int fa_service_authorize(const fa_service *s, const char *op, const char *id, fa_error *err);

/* Creates the federation of a federation file (text, len bytes; filename
 * names it in messages), checked exactly as `fedagg config check --type
 * federation` checks it, paths relative to service.dir.  *id_out (may be
 * NULL) points at the new federation's id.  Returns 0, or
 *   FA_ERR_INVAL    the file is not valid: every problem in diags as
 *                   filename:line:column: message;
 *   FA_ERR_AUTH     op may not create federations of its team;
 *   FA_ERR_EXISTS   the id is taken;
 *   FA_ERR_NOSPACE  its round would not fit the memory budget beside the
 *                   running federations (every part in the message), or
 *                   service.max_federations are held;
 *   FA_ERR_STATE    this aggregator has no service.dir;
 *   FA_ERR_IO ...   it could not be opened or recorded: nothing is left. */
int fa_service_create(fa_service *s, const char *op, const char *text, size_t len,
                      const char *filename, uint64_t now_ms, const char **id_out, fa_diags *diags,
                      fa_error *err);

/* An operator's action on federation id (NULL: the default one), after
 * fa_service_authorize: the lifecycle "pause", "resume", "abort",
 * "archive"; and "abort-round", "drain", "admit" (region: the region id),
 * which are fa_fed_admin_*'s.  msg (n bytes) says what was done.  Returns
 * 0, FA_ERR_NOTFOUND (no such federation or region), FA_ERR_STATE (nothing
 * to do, or not in this state: the message says why), FA_ERR_INVAL (no
 * such action), FA_ERR_IO (a log could not record it: not done), or the
 * errors of reopening a stopped federation (resume). */
int fa_service_act(fa_service *s, const char *op, const char *id, const char *action,
                   const char *region, uint64_t now_ms, char *msg, size_t n, fa_error *err);

/* The fa_fed of federation id for an operator's documents (NULL id: the
 * default one).  Returns 0, FA_ERR_NOTFOUND, or FA_ERR_AGAIN (it is
 * stopped and not open: the message says why). */
int fa_service_fed(fa_service *s, const char *id, fa_fed **fed, fa_error *err);

/* JSON documents (malloc'ed, NUL-terminated):
 *   list   {"federations": [{id, team, state, state_reason, default,
 *          description, trainer, dataset, created_by, created_unix_ms,
 *          round, phase, model_version, rounds_completed, rounds (configured),
 *          regions}]}: those op may read (all when op is NULL);
 *   show   the federation's status document (fa_fed_admin_json "status",
 *          its regions with their decisions) with the service's fields
 *          above added;
 *   status {"service": {federations, states: {running: n, ...}},
 *          "federations": [show...]}: every federation, for the dashboard
 *          and the operator gauges.
 * Return 0, FA_ERR_NOTFOUND (show) or FA_ERR_NOMEM. */
int fa_service_list_json(fa_service *s, const char *op, uint64_t now_ms, char **out, fa_error *err);
int fa_service_show_json(fa_service *s, const char *id, uint64_t now_ms, char **out, fa_error *err);
int fa_service_status_json(fa_service *s, uint64_t now_ms, char **out, fa_error *err);

/* Makes this thread's log lines name fed ("federation=<id>", fa_log.h
 * fa_log_set_scope) while it works for it; fed NULL, or a single-federation
 * config: none (its lines stay as they always were). */
void fa_service_log_scope(const fa_service *s, const fa_fed *fed);

/* Called with a federation's fa_fed just before the service closes it
 * while the process runs (a stopped federation reopened by resume), so that
 * the HTTP layer lets go of it.  fn NULL: none. */
void fa_service_set_close_hook(fa_service *s, void (*fn)(fa_fed *fed, void *arg), void *arg);

/* The state of federation id and why (n bytes), or -1 when there is none. */
int fa_service_state(const fa_service *s, const char *id, uint64_t now_ms, char *why, size_t n);

#endif
