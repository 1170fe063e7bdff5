/* admin_render.h - the admin API's documents as text for people: the tables
 * of `fedagg status|rounds|regions|models|audit-head` and the frame of
 * `fedagg watch`.  Pure: a JSON document and the time in, text out (to a
 * FILE, which may be an open_memstream).  Tolerant like the dashboard: a
 * field the document lacks is shown as "-".
 */
#ifndef FA_TOOLS_ADMIN_RENDER_H
#define FA_TOOLS_ADMIN_RENDER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Each returns 0, or 1 with a message on stderr when json is not the
 * document it expects (prog names the command in that message). */
int fa_admin_render_status(FILE *out, const char *prog, const char *json, uint64_t now_unix_ms);
int fa_admin_render_regions(FILE *out, const char *prog, const char *json, uint64_t now_unix_ms);
/* last: only the newest `last` attempts (0 = all). */
int fa_admin_render_rounds(FILE *out, const char *prog, const char *json, size_t last);
int fa_admin_render_models(FILE *out, const char *prog, const char *json);
int fa_admin_render_audit_head(FILE *out, const char *prog, const char *json);

/* One frame of `fedagg watch` from the status document (NULL: none yet;
 * error: why the last fetch failed, or NULL): at most `cols` columns and
 * `rows` lines, ANSI colours when color.  Lines end with "\n" only; the
 * caller positions and clears. */
void fa_admin_render_watch(FILE *out, const char *json, const char *error, const char *aggregator,
                           uint64_t now_unix_ms, int cols, int rows, int color);

#endif
