/* fa_log.c - one logfmt line per event; every value escaped here.
 *
 * The caller's kvfmt is walked conversion by conversion instead of being
 * handed to vsnprintf whole: numbers are printed as printf prints them,
 * and every string (%s, %c) is escaped for where it stands in the format,
 * so that no value can end the line, open a key of its own, or put bytes a
 * terminal or grep would trip over into the log.  The format itself is the
 * program's; the values are whatever a peer, a file or the environment
 * gave.  See fa_log.h for the rules.
 */
#include "common/fa_log.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Process-wide logging settings, written by main before threads start. */
static int log_level = -1;
static char log_context[256];
/* This thread's scope (fa_log_set_scope): what it is working on now. */
static _Thread_local char log_scope[160];

/* Longest line written, newline included.  Room is kept at the end for a
 * closing quote and the newline of a line that had to be cut. */
#define LINE_MAX_BYTES 4096
#define LINE_RESERVE 4

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

int fa_log_enabled(int level)
{
    if (log_level < 0) {
        int l = fa_log_level_parse(getenv("FEDAGG_LOG_LEVEL"));
        log_level = l >= 0 ? l : FA_LOG_INFO;
    }
    return level >= log_level;
}

/* ------------------------------------------------------------ escaping */

/* Where a string stands, which decides what must be escaped in it. */
enum esc_mode {
    ESC_QUOTED, /* between the format's own double quotes: key="%s" */
    ESC_VALUE,  /* a whole value, key=%s followed by a space or the end */
    ESC_TOKEN,  /* part of a key or value: %s=1, addr=%s:%d, a%sb */
    ESC_TEXT,   /* the program's own text (the format, the context) */
};

/* The length of the well-formed UTF-8 sequence at s (RFC 3629 4: no
 * overlong forms, no surrogates, nothing above U+10FFFF), or 0 when the
 * byte at s starts none.  *cp receives the code point. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xc2 && c <= 0xdf) {
        if (n < 2 || (s[1] & 0xc0) != 0x80)
            return 0;
        *cp = ((uint32_t)(c & 0x1f) << 6) | (s[1] & 0x3f);
        return 2;
    }
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0))
            return 0; /* overlong; surrogate */
        *cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90))
            return 0; /* overlong; above U+10FFFF */
        *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) |
              ((uint32_t)(s[2] & 0x3f) << 6) | (s[3] & 0x3f);
        return 4;
    }
    return 0;
}

/* Code points that are valid text but change how a line reads: C1
 * controls (U+009B is a terminal's CSI), line and paragraph separators,
 * and the bidirectional overrides that reorder what a reader sees. */
static int cp_hidden(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Writes the escaped form of s[0..n) into out (at most cap bytes, no NUL)
 * and returns its length; stops before a unit that does not fit.
 *   \" \\ \n \r \t    quote, backslash, newline, return, tab (not ESC_TEXT
 *                     for the quote and the backslash)
 *   \xHH              other C0 controls, DEL, every byte that is not part
 *                     of well-formed UTF-8; in ESC_TOKEN also space and '='
 *   \uHHHH            C1 controls, U+2028/9, bidirectional controls
 * Well-formed UTF-8 otherwise passes unchanged.  *done receives how many
 * bytes of s were consumed. */
static size_t escape(char *out, size_t cap, const char *s, size_t n, int mode, size_t *done)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;

    while (i < n) {
        char unit[8];
        size_t ul = 0, sl = 1;
        uint32_t cp;
        unsigned char c = u[i];

        if (c < 0x80) {
            if (c == '\n' || c == '\r' || c == '\t') {
                unit[ul++] = '\\';
                unit[ul++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            } else if ((c == '"' || c == '\\') && mode != ESC_TEXT) {
                unit[ul++] = '\\';
                unit[ul++] = (char)c;
            } else if (c < 0x20 || c == 0x7f || (mode == ESC_TOKEN && (c == ' ' || c == '='))) {
                unit[ul++] = '\\';
                unit[ul++] = 'x';
                unit[ul++] = hex[c >> 4];
                unit[ul++] = hex[c & 15];
            } else {
                unit[ul++] = (char)c;
            }
        } else if ((sl = utf8_seq(u + i, n - i, &cp)) == 0) {
            sl = 1;
            unit[ul++] = '\\';
            unit[ul++] = 'x';
            unit[ul++] = hex[c >> 4];
            unit[ul++] = hex[c & 15];
        } else if (cp_hidden(cp)) {
            unit[ul++] = '\\';
            unit[ul++] = 'u';
            for (int k = 12; k >= 0; k -= 4)
                unit[ul++] = hex[(cp >> k) & 15];
        } else {
            memcpy(unit, u + i, sl);
            ul = sl;
        }
        if (o + ul > cap)
            break;
        memcpy(out + o, unit, ul);
        o += ul;
        i += sl;
    }
    if (done)
        *done = i;
    return o;
}

/* Whether s[0..n) needs quotes to be one logfmt value: a space, quote,
 * '=', backslash, a control character, or anything escape() spells out.
 * Other well-formed UTF-8 stays bare. */
static int needs_quotes(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    if (n == 0)
        return 1;
    while (i < n) {
        uint32_t cp;
        size_t sl = utf8_seq(u + i, n - i, &cp);
        if (sl == 0 || cp <= ' ' || cp == '"' || cp == '=' || cp == '\\' || cp == 0x7f ||
            cp_hidden(cp))
            return 1;
        i += sl;
    }
    return 0;
}

/* Whether s[0..n) is already one quoted logfmt value, as fa_log_quote
 * writes it: quotes at both ends, and inside only backslash escapes and
 * printable ASCII other than a bare quote.  Such a value is kept as is, so
 * that a caller who quoted it before calling fa_log does not see it
 * escaped twice. */
static int already_quoted(const char *s, size_t n)
{
    if (n < 2 || s[0] != '"' || s[n - 1] != '"')
        return 0;
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') {
            if (i + 2 >= n)
                return 0; /* would escape the closing quote */
            i++;
            continue;
        }
        if (c == '"' || c < 0x20 || c >= 0x7f)
            return 0;
    }
    return 1;
}

/* ----------------------------------------------------------- the line */

struct line {
    char buf[LINE_MAX_BYTES];
    size_t len;
    int full; /* something did not fit: nothing more is added */
};

static size_t room(const struct line *l)
{
    return l->full ? 0 : sizeof(l->buf) - LINE_RESERVE - l->len;
}

static void put_raw(struct line *l, const char *s, size_t n)
{
    size_t r = room(l);
    if (n > r) {
        n = r;
        l->full = 1;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
}

static void put_escaped(struct line *l, const char *s, size_t n, int mode)
{
    size_t done = 0;
    l->len += escape(l->buf + l->len, room(l), s, n, mode, &done);
    if (done < n)
        l->full = 1;
}

/* A string argument, width-padded, escaped for its place. */
static void put_string(struct line *l, const char *s, size_t n, int mode, int width, int left)
{
    char tmp[LINE_MAX_BYTES];
    size_t tl;
    int quote = 0;

    if (mode == ESC_VALUE) {
        if (already_quoted(s, n)) {
            mode = ESC_TEXT;
        } else if (needs_quotes(s, n)) {
            quote = 1;
            mode = ESC_QUOTED;
        }
    }
    tl = escape(tmp, sizeof(tmp), s, n, mode, NULL);
    if (quote)
        put_raw(l, "\"", 1);
    for (int pad = width - (int)tl; !left && pad > 0; pad--)
        put_raw(l, " ", 1);
    put_raw(l, tmp, tl);
    for (int pad = width - (int)tl; left && pad > 0; pad--)
        put_raw(l, " ", 1);
    if (quote && l->len < sizeof(l->buf) - 2) {
        l->buf[l->len++] = '"'; /* from the reserve when the value was cut */
    }
}

/* printf of one numeric conversion (spec: one conversion the compiler
 * checked against its argument in the caller's format) into the line. */
static void put_number(struct line *l, const char *spec, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, spec);
    n = vsnprintf(tmp, sizeof(tmp), spec, ap);
    va_end(ap);
    if (n > 0)
        put_escaped(l, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1, ESC_TEXT);
}

/* The mode of a string conversion: between the format's quotes; a whole
 * value (after '=' and before a space or the end); else a token part. */
static int string_mode(const char *fmt, const char *pct, const char *after, int in_quote)
{
    if (in_quote)
        return ESC_QUOTED;
    if (pct > fmt && pct[-1] == '=' && (*after == '\0' || *after == ' '))
        return ESC_VALUE;
    return ESC_TOKEN;
}

/* The key=value tail: literal text as written, each conversion formatted
 * alone, strings escaped for where they stand. */
static void put_kv(struct line *l, const char *fmt, va_list ap)
{
    const char *p = fmt;
    int in_quote = 0;

    while (*p && !l->full) {
        const char *lit = p;
        char spec[48];
        size_t sl = 0;
        int width = -1, prec = -1, left = 0;
        char len1 = 0, len2 = 0, conv;
        const char *pct;

        while (*p && *p != '%') {
            if (*p == '"')
                in_quote = !in_quote;
            p++;
        }
        put_escaped(l, lit, (size_t)(p - lit), ESC_TEXT);
        if (!*p)
            break;
        pct = p++;
        if (*p == '%') {
            put_raw(l, "%", 1);
            p++;
            continue;
        }
        spec[sl++] = '%';
        while (*p && strchr("-+ #0", *p)) {
            if (*p == '-')
                left = 1;
            if (sl < 8)
                spec[sl++] = *p;
            p++;
        }
        if (*p == '*') {
            width = va_arg(ap, int);
            if (width < 0) {
                left = 1;
                width = -width;
            }
            p++;
        } else if (*p >= '0' && *p <= '9') {
            width = 0;
            for (; *p >= '0' && *p <= '9'; p++)
                if (width < 10000)
                    width = width * 10 + (*p - '0');
        }
        if (*p == '.') {
            p++;
            prec = 0;
            if (*p == '*') {
                prec = va_arg(ap, int);
                p++;
            } else {
                for (; *p >= '0' && *p <= '9'; p++)
                    if (prec < 10000)
                        prec = prec * 10 + (*p - '0');
            }
        }
        if (*p && strchr("hlzjtL", *p)) {
            len1 = *p++;
            if ((len1 == 'h' || len1 == 'l') && *p == len1)
                len2 = *p++;
        }
        conv = *p;
        if (!conv)
            break;
        p++;
        if (width >= 0)
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, "%d", width);
        if (prec >= 0)
            sl += (size_t)snprintf(spec + sl, sizeof(spec) - sl, ".%d", prec);
        if (len1)
            spec[sl++] = len1;
        if (len2)
            spec[sl++] = len2;
        spec[sl++] = conv;
        spec[sl] = '\0';

        switch (conv) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            size_t n;
            if (!s)
                s = "(null)";
            n = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
            put_string(l, s, n, string_mode(fmt, pct, p, in_quote), width, left);
            break;
        }
        case 'c': {
            char ch = (char)va_arg(ap, int);
            put_string(l, &ch, 1, string_mode(fmt, pct, p, in_quote), width, left);
            break;
        }
        case 'd':
        case 'i':
            if (len1 == 'l' && len2)
                put_number(l, spec, va_arg(ap, long long));
            else if (len1 == 'l')
                put_number(l, spec, va_arg(ap, long));
            else if (len1 == 'z')
                put_number(l, spec, va_arg(ap, ssize_t));
            else if (len1 == 'j')
                put_number(l, spec, va_arg(ap, intmax_t));
            else if (len1 == 't')
                put_number(l, spec, va_arg(ap, ptrdiff_t));
            else
                put_number(l, spec, va_arg(ap, int));
            break;
        case 'u':
        case 'x':
        case 'X':
        case 'o':
            if (len1 == 'l' && len2)
                put_number(l, spec, va_arg(ap, unsigned long long));
            else if (len1 == 'l')
                put_number(l, spec, va_arg(ap, unsigned long));
            else if (len1 == 'z')
                put_number(l, spec, va_arg(ap, size_t));
            else if (len1 == 'j')
                put_number(l, spec, va_arg(ap, uintmax_t));
            else if (len1 == 't')
                put_number(l, spec, va_arg(ap, ptrdiff_t));
            else
                put_number(l, spec, va_arg(ap, unsigned));
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            if (len1 == 'L')
                put_number(l, spec, va_arg(ap, long double));
            else
                put_number(l, spec, va_arg(ap, double));
            break;
        case 'p': put_number(l, spec, va_arg(ap, void *)); break;
        case 'n': (void)va_arg(ap, void *); break;                 /* never written through */
        default: put_escaped(l, pct, (size_t)(p - pct), ESC_TEXT); /* not a conversion */
        }
    }
    if (l->full && in_quote && l->len < sizeof(l->buf) - 2)
        l->buf[l->len++] = '"';
}

/* ------------------------------------------------------------- public */

char *fa_log_quote(char *buf, size_t n, const char *s)
{
    size_t len = strlen(s), o = 0;

    if (n == 0)
        return buf;
    if (!needs_quotes(s, len)) {
        snprintf(buf, n, "%s", s);
        return buf;
    }
    if (n < 3) {
        buf[0] = '\0';
        return buf;
    }
    buf[o++] = '"';
    o += escape(buf + o, n - 3, s, len, ESC_QUOTED, NULL);
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

void fa_log_set_context(const char *kv)
{
    size_t n = escape(log_context, sizeof(log_context) - 1, kv ? kv : "", kv ? strlen(kv) : 0,
                      ESC_TEXT, NULL);
    log_context[n] = '\0';
}

void fa_log_set_scope(const char *kv)
{
    size_t n =
        escape(log_scope, sizeof(log_scope) - 1, kv ? kv : "", kv ? strlen(kv) : 0, ESC_TEXT, NULL);
    log_scope[n] = '\0';
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
    struct line l;
    char head[64];
    struct timespec ts;
    struct tm tm;
    int n;

    if (!fa_log_enabled(level))
        return;
    l.len = 0;
    l.full = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(head, sizeof(head),
                 "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s msg=", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                 level_name(level));
    put_raw(&l, head, n > 0 ? (size_t)n : 0);
    put_string(&l, msg ? msg : "", msg ? strlen(msg) : 0, ESC_VALUE, -1, 0);
    if (log_context[0]) {
        put_raw(&l, " ", 1);
        put_raw(&l, log_context, strlen(log_context));
    }
    if (log_scope[0]) {
        put_raw(&l, " ", 1);
        put_raw(&l, log_scope, strlen(log_scope));
    }
    if (kvfmt && kvfmt[0]) {
        va_list ap;
        put_raw(&l, " ", 1);
        va_start(ap, kvfmt);
        put_kv(&l, kvfmt, ap);
        va_end(ap);
    }
    l.buf[l.len++] = '\n';
    /* One write per line; a short write to stderr is not worth a retry loop. */
    if (write(STDERR_FILENO, l.buf, l.len) < 0) {
        /* nothing useful to do */
    }
}
