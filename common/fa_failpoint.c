#include "common/fa_failpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_log.h"

void fa_failpoint(const char *name)
{
    const char *spec = getenv("FEDAGG_FAILPOINTS");
    size_t nl = strlen(name);

    if (!spec || !*spec)
        return;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= nl && !strncmp(p, name, nl) && (len == nl || p[nl] == '=')) {
            int do_exit = len > nl && !strncmp(p + nl, "=exit", len - nl);
            fa_log(FA_LOG_WARN, "failpoint reached", "failpoint=%s action=%s", name,
                   do_exit ? "exit" : "pause");
            if (do_exit)
                _exit(137);
            for (;;)
                pause();
        }
        p += len;
        if (*p == ',')
            p++;
    }
}

const char *fa_failpoint_value(const char *name, char *buf, size_t cap)
{
    const char *spec = getenv("FEDAGG_FAILPOINTS");
    size_t nl = strlen(name);

    if (!spec || !*spec || cap == 0)
        return NULL;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= nl && !strncmp(p, name, nl) && (len == nl || p[nl] == '=')) {
            size_t vl = len > nl ? len - nl - 1 : 0;
            if (vl >= cap)
                vl = cap - 1;
            memcpy(buf, p + nl + (len > nl), vl);
            buf[vl] = '\0';
            return buf;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return NULL;
}
