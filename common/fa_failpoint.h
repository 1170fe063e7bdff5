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

void fa_failpoint(const char *name);

#endif
