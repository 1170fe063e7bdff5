/* api_admin.h - the operators' HTTP/3 API of the aggregator (docs/operations.md).
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
 *   POST /v1/admin/drain?region=ID   the region sits out until admitted
 *   POST /v1/admin/admit?region=ID   undoes drain
 *
 * Every answer is application/json: the document, {"ok": true, "message":
 * "..."} for an action, or {"error": "..."} with the HTTP status (400 a bad
 * query, 403 not an operator, 404 no such path or region, 405 wrong method,
 * 409 nothing to do, 503 the audit log could not record the action, so it
 * was not done).  Request bodies are ignored (at most 4 KiB).
 *
 * Who.  Only a client certificate with the operator role (SAN URI
 * fedagg://operator/<name>, transport/h3.h) may use these paths; a region's
 * gets 403 on every one of them.  Any operator certificate of the
 * federation CA is accepted: issuing one (deploy/pki.sh --operators) is the
 * grant.  The reverse holds too: fa_h3_request_peer() is "" for an operator,
 * so aggregator/api.c refuses operators (403) on every region path, the
 * model downloads and /v1/status included (operators read
 * /v1/admin/models and /v1/admin/status instead).
 *
 * Every admin request, refused or not, is logged with the operator's name
 * (or the refused peer's), the method, path and status; actions are also
 * recorded in the signed audit log by fa_fed_admin_* (federation.h).
 * Everything runs on the server's loop thread, like aggregator/api.c.
 */
#ifndef FA_AGGREGATOR_API_ADMIN_H
#define FA_AGGREGATOR_API_ADMIN_H

#include "aggregator/federation.h"
#include "common/fa_err.h"
#include "transport/h3.h"

/* Registers the /v1/admin/ routes on srv (before fa_h3_server_run); they
 * keep only fed, which must outlive the server's loop.  Returns 0 or
 * FA_ERR_NOMEM / FA_ERR_INVAL (from fa_h3_server_route). */
int fa_api_admin_routes(fa_h3_server *srv, fa_fed *fed);

#endif
