/* fa_failpoint.h - test switches: named crash points and values for the
 * multi-process tests, compiled in only by the build option
 * FEDAGG_TEST_HOOKS (CMake; it defines FA_TEST_HOOKS).
 *
 * A release build (the option off, the default) has none of them: the
 * functions below are empty inlines, the code they guard disappears (as
 * SQLite's sqlite3FaultSim under SQLITE_UNTESTABLE), and the environment
 * variables are ignored, with a warning (fa_test_hooks_warn_env).  The test
 * switches of the tree are
 *
 *   FEDAGG_FAILPOINTS="name[=action][,name[=action]...]"   this file
 *   FEDAGG_DEBUG_DUMP_DIR=DIR      a worker writes its quantised update, the
 *                                  aggregator each unmasked sum, under DIR
 *   FEDAGG_TEST_SIGTERM_AT_STEP=K  a worker signals itself at training step K
 *
 * The daemons call fa_failpoint("name") at the moments a crash matters
 * (between two phases, mid-upload, between a model commit and its audit
 * record).  Nothing happens unless FEDAGG_FAILPOINTS names it; action is
 * `pause` (the default: log one line and sleep until killed, so that a test
 * can SIGKILL the process at exactly that point) or `exit` (_exit(137) at
 * once, as a SIGKILL would).  The variable is read at every call, so that
 * an in-process test may change it between cases.
 */
#ifndef FA_FAILPOINT_H
#define FA_FAILPOINT_H

#include <stddef.h>

#ifdef FA_TEST_HOOKS

#define FA_TEST_HOOKS_COMPILED 1

void fa_failpoint(const char *name);

/* A test switch rather than a crash point: when FEDAGG_FAILPOINTS names
 * `name`, its value (the text after '=', "" when none) is copied into buf
 * (cap bytes, truncated) and buf returned; NULL when it is not named, which
 * is the production case: the caller then does exactly what it would do
 * without this call.  Neither pauses nor exits; read at every call. */
const char *fa_failpoint_value(const char *name, char *buf, size_t cap);

#else

#define FA_TEST_HOOKS_COMPILED 0

static inline void fa_failpoint(const char *name)
{
    (void)name;
}

static inline const char *fa_failpoint_value(const char *name, char *buf, size_t cap)
{
    (void)name;
    (void)buf;
    (void)cap;
    return NULL;
}

#endif

/* For the daemons at start-up (common/fa_daemon.c): in a build without test
 * hooks, logs one warning for each test switch set in the environment (it
 * does nothing there) and returns how many; in a build with them, returns 0
 * and logs nothing (a test build is expected to see them). */
int fa_test_hooks_warn_env(const char *prog);

#endif
