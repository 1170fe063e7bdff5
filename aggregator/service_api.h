/* service_api.h - the operators' HTTP/3 API of the service's federations
 * (docs/service.md):
 *
 *   GET  /v1/admin/federations            {"federations": [...]}: the
 *                                         operator's teams' (fa_service_list_json)
 *   POST /v1/admin/federations            create: the body is a federation
 *                                         file, header fedagg-filename names it;
 *                                         {"ok", "message", "id"}, or 400 with
 *                                         {"error", "problems": ["FILE:L:C: ..."]}
 *   GET  /v1/admin/federations/{id}       show (fa_service_show_json)
 *   GET  /v1/admin/federations/{id}/{status|regions|rounds|models|audit-head}
 *   POST /v1/admin/federations/{id}/{pause|resume|abort|archive|abort-round}
 *   POST /v1/admin/federations/{id}/{drain|admit}?region=ID
 *
 * Operators only, each request after fa_service_authorize: an operator
 * acting on a federation of a team it is not in gets 403, and the refusal
 * is logged with its name.  Statuses as api_admin.h's: 400 a bad file or
 * query, 403, 404 no such federation, region or path, 405, 409 nothing to
 * do or an id taken or no room in the memory budget, 503 a log could not
 * record the action (not done).  Everything runs on the server's loop
 * thread. */
#ifndef FA_AGGREGATOR_SERVICE_API_H
#define FA_AGGREGATOR_SERVICE_API_H

#include "aggregator/service.h"
#include "transport/h3.h"

/* Registers the routes on srv (before fa_h3_server_run); svc must outlive
 * the loop.  Returns 0 or FA_ERR_NOMEM / FA_ERR_INVAL. */
int fa_service_api_routes(fa_h3_server *srv, fa_service *svc);

#endif
