#include "common/fa_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Process-wide logging settings, written by main before threads start. */
static int log_level = -1;
static char log_context[256];
/* This thread's scope (fa_log_set_scope): what it is working on now. */
static _Thread_local char log_scope[160];

int fa_log_level_parse(const char *name)
{
    if (!name)
        return -1;
    if (!strcasecmp(name, "debug"))
        return FA_LOG_DEBUG;
    if (!strcasecmp(name, "info"))
        return FA_LOG_INFO;
    if (!strcasecmp(name, "warn") || !strcasecmp(name, "warning"))
        return FA_LOG_WARN;
    if (!strcasecmp(name, "error"))
        return FA_LOG_ERROR;
    return -1;
}

void fa_log_set_level(int level)
{
    log_level = level;
}

void fa_log_set_scope(const char *kv)
{
    snprintf(log_scope, sizeof(log_scope), "%s", kv ? kv : "");
}

void fa_log_set_context(const char *kv)
{
    snprintf(log_context, sizeof(log_context), "%s", kv ? kv : "");
}

int fa_log_enabled(int level)
{
    if (log_level < 0) {
        int l = fa_log_level_parse(getenv("FEDAGG_LOG_LEVEL"));
        log_level = l >= 0 ? l : FA_LOG_INFO;
    }
    return level >= log_level;
}

char *fa_log_quote(char *buf, size_t n, const char *s)
{
    size_t i = 0;
    int bare = s[0] != '\0';
    const char *p;

    if (n == 0)
        return buf;
    for (p = s; *p; p++)
        if (*p == ' ' || *p == '"' || *p == '=' || *p == '\\' || (unsigned char)*p < 0x20)
            bare = 0;
    if (bare) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    if (i + 1 < n)
        buf[i++] = '"';
    for (p = s; *p && i + 3 < n; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            buf[i++] = '\\';
            buf[i++] = (char)c;
        } else if (c == '\n') {
            buf[i++] = '\\';
            buf[i++] = 'n';
        } else if (c < 0x20) {
            buf[i++] = '?';
        } else {
            buf[i++] = (char)c;
        }
    }
    if (i + 1 < n)
        buf[i++] = '"';
    buf[i < n ? i : n - 1] = '\0';
    return buf;
}

static const char *level_name(int level)
{
    switch (level) {
    case FA_LOG_DEBUG: return "debug";
    case FA_LOG_INFO: return "info";
    case FA_LOG_WARN: return "warn";
    default: return "error";
    }
}

void fa_log(int level, const char *msg, const char *kvfmt, ...)
{
    char line[4096], qmsg[1024];
    struct timespec ts;
    struct tm tm;
    size_t len;
    int n;

    if (!fa_log_enabled(level))
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=%s",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000, level_name(level), fa_log_quote(qmsg, sizeof(qmsg), msg));
    len = n < 0 ? 0 : (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
    if (log_context[0] && len + 2 < sizeof(line)) {
        n = snprintf(line + len, sizeof(line) - len, " %s", log_context);
        len += n < 0 ? 0 : (size_t)n < sizeof(line) - len ? (size_t)n : sizeof(line) - len - 1;
    }
    if (log_scope[0] && len + 2 < sizeof(line)) {
        n = snprintf(line + len, sizeof(line) - len, " %s", log_scope);
        len += n < 0 ? 0 : (size_t)n < sizeof(line) - len ? (size_t)n : sizeof(line) - len - 1;
    }
    if (kvfmt && kvfmt[0] && len + 2 < sizeof(line)) {
        va_list ap;
        line[len++] = ' ';
        va_start(ap, kvfmt);
        n = vsnprintf(line + len, sizeof(line) - len, kvfmt, ap);
        va_end(ap);
        len += n < 0 ? 0 : (size_t)n < sizeof(line) - len ? (size_t)n : sizeof(line) - len - 1;
    }
    if (len >= sizeof(line) - 1)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line; a short write to stderr is not worth a retry loop. */
    if (write(STDERR_FILENO, line, len) < 0) {
        /* nothing useful to do */
    }
}
