/* api.h - the aggregator's HTTP/3 API (docs/api.md) over fa_fed.
 *
 *   GET  /v1/federation                      FederationInfo
 *   GET  /v1/models/latest, /v1/models/{v}   safetensors, streamed; headers
 *                                            fedagg-model-version, fedagg-model-sha256
 *   POST /v1/rounds/{r}/{a}/advertise        AdvertiseKeys -> PeerList (long-poll)
 *   POST /v1/rounds/{r}/{a}/shares           ShareKeys -> SharesForYou (long-poll)
 *   POST /v1/rounds/{r}/{a}/masked           bit-packed masked vector -> SurvivorList
 *   POST /v1/rounds/{r}/{a}/consistency      SignedSurvivors -> SurvivorSignatures
 *   POST /v1/rounds/{r}/{a}/unmask           UnmaskShares -> RoundResult
 *   GET  /v1/audit/checkpoint                the latest signed checkpoint (text)
 *   GET  /v1/audit/proof?round=R&region=ID   proof bundle (text)
 *   GET  /v1/status                          Status (JSON with Accept: application/json)
 *   GET  /v1/federations                     FederationList: the offers of the
 *                                            service's federations inviting the region
 *   .../v1/federations/{id}/<route>          any route above, of federation id
 *                                            (federation, status, models/..., ...)
 *   POST /v1/federations/{id}/decision       SignedDecision: the region's answer
 *
 * Paths match exactly, and their numbers are decimal digits only
 * (fa_api_parse_number): anything else is 404.  No answer names a path of
 * the server's files (fa_api_public_message); a failure of the aggregator
 * itself is answered 500 with a generic message and logged.
 *
 * The unprefixed routes are the service's default federation's
 * (service.h).  The caller's region is the one its verified client
 * certificate names; a region not in the default federation gets 403 on
 * every unprefixed path, and 404 on the paths of a federation that does
 * not invite it (as for one that does not exist).  Errors are an HTTP status
 * and a fedagg.Error body.  Long-polls are held until their phase closes.
 * Everything runs on the server's loop thread.
 */
#ifndef FA_AGGREGATOR_API_H
#define FA_AGGREGATOR_API_H

#include "aggregator/federation.h"
#include "aggregator/service.h"
#include "common/fa_err.h"
#include "transport/h3.h"

typedef struct fa_api fa_api;

/* Registers the routes of the service's federations on srv (before
 * fa_h3_server_run), the admin API's (api_admin.h, service_api.h) too.
 * Returns 0 or FA_ERR_NOMEM / FA_ERR_INVAL. */
int fa_api_new(fa_api **out, fa_h3_server *srv, fa_service *svc, fa_error *err);
void fa_api_del(fa_api *a);

/* Closes due phases and answers the long-polls that became answerable.
 * Call from the server's tick (and it is called after every accepted message). */
void fa_api_tick(fa_api *a);

/* The HTTP status of the core's answer (fa_fed_reply code and internal):
 * 200 for code 0; 500 when internal; else 403 FA_ERR_AUTH; 409
 * FA_ERR_REPLAY, FA_ERR_STATE, FA_ERR_EXISTS, FA_ERR_THRESHOLD (the region
 * resynchronises with the round and attempt of the Error); 413
 * FA_ERR_TOOBIG; 503 FA_ERR_AGAIN (retry); 500 FA_ERR_NOMEM; 400 for the
 * rest (a malformed, unverifiable or misplaced message). */
int fa_api_http_status(int code, int internal);

/* The largest round or model version a path or query may name: 2^53 - 1
 * (exact in a JSON number); UINT64_MAX means "latest" inside. */
#define FA_API_MAX_NUMBER ((UINT64_C(1) << 53) - 1)

/* A number of a path or query: s[0..len) must be decimal digits only (no
 * sign, space or leading zero), at most max.  Returns 0 with *out set,
 * FA_ERR_PARSE or FA_ERR_RANGE. */
int fa_api_parse_number(const char *s, size_t len, uint64_t max, uint64_t *out);

/* An error message as a peer may read it: every absolute path of this
 * server in msg (a '/' that starts a word, other than the API's own /v1/
 * paths) replaced by "<path>".  Writes at most cap bytes, terminated. */
void fa_api_public_message(char *out, size_t cap, const char *msg);

#endif
