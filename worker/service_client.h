/* service_client.h - a region agent's requests to one aggregation service
 * (docs/service.md "Routes"): the federations the service invites this
 * region to, and the region's signed decision on each.
 *
 *   GET  /v1/federations                  -> FederationList (one FederationOffer each)
 *   POST /v1/federations/{id}/decision    SignedDecision (RegionDecision signed with
 *                                         the identity key, FA_IDENTITY_DOMAIN_DECISION)
 *
 * Requests are short (the agent's loop waits on them): each has a
 * deadline of a few seconds, after which the caller backs off.  Rounds
 * are not this client's: each federation's worker has its own
 * (worker/round_client.h).
 */
#ifndef FA_WORKER_SERVICE_CLIENT_H
#define FA_WORKER_SERVICE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "fedagg.pb-c.h"

typedef struct fa_service_client fa_service_client;

/* The client of cfg->services[service] for region cfg->region_id (its TLS
 * files and identity key).  No traffic yet.  Returns 0, FA_ERR_INVAL,
 * FA_ERR_IO, FA_ERR_AUTH (a key file others can read), FA_ERR_TLS or
 * FA_ERR_NOMEM. */
int fa_service_client_new(fa_service_client **out, const Fedagg__WorkerConfig *cfg, int service,
                          fa_error *err);

/* NULL is a no-op (wipes the identity key). */
void fa_service_client_del(fa_service_client *sc);

/* GET /v1/federations within timeout_ms.  *list: free with
 * fedagg__federation_list__free_unpacked.  Returns 0, FA_ERR_TIMEOUT or a
 * transport error, FA_ERR_AUTH (403: the service refuses this region),
 * FA_ERR_HTTP (another status), FA_ERR_PROTOCOL (undecodable). */
int fa_service_client_list(fa_service_client *sc, uint32_t timeout_ms,
                           Fedagg__FederationList **list, fa_error *err);

/* Signs and posts this region's decision on federation id (its offer's
 * config_digest, may be empty) within timeout_ms.  Returns 0 (200), or
 * FA_ERR_PROTOCOL (400), FA_ERR_AUTH (403), FA_ERR_NOTFOUND (404: not a
 * federation of this region any more), FA_ERR_HTTP, a transport error. */
int fa_service_client_decide(fa_service_client *sc, const char *id, int accept, const char *reason,
                             const uint8_t *config_digest, size_t digest_len, uint64_t unix_ms,
                             uint32_t timeout_ms, fa_error *err);

#endif
