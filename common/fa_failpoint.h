/* fa_failpoint.h - named crash points for the multi-process tests.
 *
 * The daemons call fa_failpoint("name") at the moments a crash matters
 * (between two phases, mid-upload, between a model commit and its audit
 * record).  Nothing happens unless the environment variable
 *
 *   FEDAGG_FAILPOINTS="name[=action][,name[=action]...]"
 *
 * names it; action is `pause` (the default: log one line and sleep until
 * killed, so that a test can SIGKILL the process at exactly that point) or
 * `exit` (_exit(137) at once, as a SIGKILL would).  Read once per process.
 */
#ifndef FA_FAILPOINT_H
#define FA_FAILPOINT_H

#include <stddef.h>

void fa_failpoint(const char *name);

/* A test switch rather than a crash point: when FEDAGG_FAILPOINTS names
 * `name`, its value (the text after '=', "" when none) is copied into buf
 * (cap bytes, truncated) and buf returned; NULL when it is not named, which
 * is the production case: the caller then does exactly what it would do
 * without this call.  Neither pauses nor exits; read at every call. */
const char *fa_failpoint_value(const char *name, char *buf, size_t cap);

#endif
