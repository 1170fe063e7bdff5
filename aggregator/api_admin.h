/* api_admin.h - the operators' HTTP/3 API of the aggregator's default
 * federation (docs/operations.md, docs/service.md).
 *
 *   GET  /v1/admin/status        the federation: round, phase and deadline,
 *                                paused, model, evaluations, storage, regions,
 *                                rounds (fa_fed_admin_json "status")
 *   GET  /v1/admin/regions       {"regions": [...]}
 *   GET  /v1/admin/rounds        {"rounds": [...]} (the last FA_FED_HISTORY attempts)
 *   GET  /v1/admin/models        {"models": [...]}
 *   GET  /v1/admin/audit-head    {tree_size, signed_size, root, checkpoint}
 *   POST /v1/admin/pause         no new round opens after the current one
 *   POST /v1/admin/resume        rounds open again
 *   POST /v1/admin/abort         the current attempt is aborted, a new one opens
 *                                (a federation's end is service_api.h's)
 *   POST /v1/admin/drain?region=ID   the region sits out until admitted
 *   POST /v1/admin/admit?region=ID   undoes drain
 *   GET  /v1/admin/governance, /v1/admin/card?version=V,
 *   POST /v1/admin/release?version=V&channel=NAME, /v1/admin/rollback
 *                                    the promotion gate (aggregator/fed_gov.h)
 *
 * Every answer is application/json: the document, {"ok": true, "message":
 * "..."} for an action, or {"error": "..."} with the HTTP status (400 a bad
 * query, 403 not an operator, 404 no such path or region, 405 wrong method,
 * 409 nothing to do, 503 the audit log could not record the action, so it
 * was not done).  Request bodies are ignored (at most 4 KiB).
 *
 * Who.  Only a client certificate with the operator role (SAN URI
 * fedagg://operator/<name>, transport/h3.h) may use these paths; a region's
 * gets 403 on every one of them.  Only the operators the config lists
 * (`operators`) pass the TLS handshake (fedagg_aggregator_main.c, admit);
 * with `teams`, each acts only on the federations of their teams
 * (service.h), 403 otherwise.  The reverse holds too:
 * fa_h3_request_peer() is "" for an operator, so aggregator/api.c refuses operators (403) on every
 * region path, the model downloads and /v1/status included (operators read /v1/admin/models and
 * /v1/admin/status instead).
 *
 * Every admin request, refused or not, is logged with the operator's name
 * (or the refused peer's), the method, path and status; actions are also
 * recorded in the signed audit log by fa_fed_admin_* (federation.h).
 * Everything runs on the server's loop thread, like aggregator/api.c.
 */
#ifndef FA_AGGREGATOR_API_ADMIN_H
#define FA_AGGREGATOR_API_ADMIN_H

#include "aggregator/federation.h"
#include "aggregator/service.h"
#include "common/fa_err.h"
#include "transport/h3.h"

/* Registers the /v1/admin/ routes on srv (before fa_h3_server_run): the
 * service's default federation's (service.h).  They keep only svc, which
 * must outlive the server's loop.  Returns 0 or FA_ERR_NOMEM /
 * FA_ERR_INVAL (from fa_h3_server_route). */
int fa_api_admin_routes(fa_h3_server *srv, fa_service *svc);

/* What the admin routes of the default federation and those of every
 * federation (aggregator/service_api.h) share.  operator_only answers 403
 * and returns 0 unless the certificate is an operator's.  document answers
 * GET of `what` (status, regions, rounds, models, audit-head) of
 * federation id (NULL: the default one); action runs `action` of
 * fa_service_act (drain and admit take ?region=ID), each after
 * fa_service_authorize (403 and logged when the operator's teams do not
 * hold the federation).  respond_json and respond_msg answer a document or
 * {"ok": true, "message"} / {"error"}, logged with the operator's name;
 * status_of maps a service's FA_ERR_* to the HTTP status; query_value is
 * ?key=... when plain ([A-Za-z0-9._-], 1..n-1 bytes). */
int fa_api_admin_operator_only(fa_h3_request *req);
void fa_api_admin_document(fa_h3_request *req, fa_service *svc, const char *id, const char *what);
void fa_api_admin_action(fa_h3_request *req, fa_service *svc, const char *id, const char *action);
void fa_api_admin_respond_json(fa_h3_request *req, int status, const char *json);
void fa_api_admin_respond_msg(fa_h3_request *req, int status, const char *msg);
int fa_api_admin_status_of(int rc);
int fa_api_admin_query_value(const char *q, const char *key, char *out, size_t n);

#endif
