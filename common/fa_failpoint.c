#include "common/fa_failpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_log.h"

static const char *const test_switches[] = {
    "FEDAGG_FAILPOINTS",
    "FEDAGG_DEBUG_DUMP_DIR",
    "FEDAGG_TEST_SIGTERM_AT_STEP",
};

int fa_test_hooks_warn_env(const char *prog)
{
    int n = 0;

    if (FA_TEST_HOOKS_COMPILED)
        return 0;
    for (size_t i = 0; i < sizeof(test_switches) / sizeof(test_switches[0]); i++) {
        const char *v = getenv(test_switches[i]);
        if (!v || !*v)
            continue;
        fa_log(FA_LOG_WARN,
               "test switch ignored: this build has no test hooks (cmake -DFEDAGG_TEST_HOOKS=ON "
               "builds them for the tests)",
               "program=%s variable=%s", prog, test_switches[i]);
        n++;
    }
    return n;
}

#ifdef FA_TEST_HOOKS

/* The entry of FEDAGG_FAILPOINTS that names `name`: its start and length,
 * or NULL. */
static const char *find_entry(const char *name, size_t *entry_len)
{
    const char *spec = getenv("FEDAGG_FAILPOINTS");
    size_t nl = strlen(name);

    if (!spec || !*spec)
        return NULL;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= nl && !strncmp(p, name, nl) && (len == nl || p[nl] == '=')) {
            *entry_len = len;
            return p;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return NULL;
}

void fa_failpoint(const char *name)
{
    size_t nl = strlen(name), len = 0;
    const char *p = find_entry(name, &len);
    int do_exit;

    if (!p)
        return;
    do_exit = len > nl && !strncmp(p + nl, "=exit", len - nl);
    fa_log(FA_LOG_WARN, "failpoint reached", "failpoint=%s action=%s", name,
           do_exit ? "exit" : "pause");
    if (do_exit)
        _exit(137);
    for (;;)
        pause();
}

const char *fa_failpoint_value(const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name), len = 0, vl;
    const char *p = find_entry(name, &len);

    if (!p || cap == 0)
        return NULL;
    vl = len > nl ? len - nl - 1 : 0;
    if (vl >= cap)
        vl = cap - 1;
    memcpy(buf, p + nl + (len > nl), vl);
    buf[vl] = '\0';
    return buf;
}

#endif
