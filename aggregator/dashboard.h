/* dashboard.h - the aggregator's read-only web dashboard: one HTML page.
 *
 * A pure function: the "status" JSON document of fa_fed_admin_json()
 * (federation.h), or a service's, in, one self-contained HTML page out: inline CSS, charts
 * drawn on the server as inline SVG, no script, no external asset, so that
 * it works behind any proxy and offline.  aggregator/metrics.c serves it at
 * GET /dashboard on the metrics port from a snapshot the server loop
 * refreshes about once a second; the page reloads itself every
 * FA_DASHBOARD_REFRESH_S seconds (<meta http-equiv="refresh">).
 *
 * What it shows: the federation (round, attempt, phase and its deadline,
 * paused, model version, rounds completed and aborted, storage, the latest
 * accuracies), the regions (state, last seen, rounds, dropouts, bytes
 * received, privacy budget when the region reports one), the accuracy of
 * every model version (one SVG point per version and series: the
 * built-in evaluation ("global"), the evaluator command ("central") and the
 * regions' federated evaluation), the round timeline (an SVG bar per
 * attempt, one segment per phase, and a table of the latest attempts), and
 * the audit log's size and latest signed checkpoint.  The status document
 * holds only counters, names and public digests (federation.h: "nothing
 * secret"), and every string taken from it is HTML-escaped.
 *
 * A service's document (fa_service_status_json, service.h: "service" and
 * "federations") gives a service's page instead: a table of its
 * federations (id, team, state and why, round, phase, model version,
 * latest accuracy, regions connected), then each federation's panels as
 * above, their element ids prefixed "f<i>-" (i its row) and each under
 * <div class="federation" id="f<i>">; the table's hooks are the ids
 * federations (table) and service-summary.
 *
 * Parts of the document that are missing (a federation before its first
 * round, no evaluation configured) are shown as such, never as an error.
 * Stable hooks for tests and scrapers: the elements with ids federation-id,
 * round, phase, regions (table, one tbody row per region, first cell the
 * id), rounds (table), accuracy-chart (svg; circle.point with data-series
 * and data-version), timeline-chart (svg; rect.phase with data-phase and
 * data-round), checkpoint (pre).
 */
#ifndef FA_AGGREGATOR_DASHBOARD_H
#define FA_AGGREGATOR_DASHBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

/* Seconds between the page's own reloads. */
#define FA_DASHBOARD_REFRESH_S 5
/* Attempts drawn in the timeline chart and listed in its table (the newest). */
#define FA_DASHBOARD_TIMELINE 60
#define FA_DASHBOARD_TABLE_ROWS 20

/* Renders the page for the status document status_json (len bytes) at
 * now_unix_ms (for "seen 3 s ago" and "deadline in 12 s").  *out is
 * malloc'ed, NUL-terminated, *out_len bytes.  Returns 0, FA_ERR_PARSE (not
 * a JSON object: the message says where) or FA_ERR_NOMEM. */
int fa_dashboard_render(const char *status_json, size_t len, uint64_t now_unix_ms, char **out,
                        size_t *out_len, fa_error *err);

/* A page saying that no status is available yet (the aggregator is
 * starting), with the same look and refresh.  Same returns, less
 * FA_ERR_PARSE. */
int fa_dashboard_render_unavailable(const char *why, char **out, size_t *out_len, fa_error *err);

/* Human formats, shared with `fedagg status` and `fedagg watch` so that the
 * page and the terminal say the same: "1.50 GiB", "2026-12-01 18:30:29Z"
 * ("-" for 0), "12.3 s" / "4 min 3 s" ("-" below 0), "3 s ago". */
void fa_dashboard_fmt_bytes(double bytes, char *buf, size_t n);
void fa_dashboard_fmt_utc(double unix_ms, char *buf, size_t n);
void fa_dashboard_fmt_secs(double seconds, char *buf, size_t n);
void fa_dashboard_fmt_ago(double ms, char *buf, size_t n);

#endif
