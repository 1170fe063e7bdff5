/* fa_strbuf.h - a growable, NUL-terminated text buffer, for code that builds
 * a document piece by piece (the text-format printers, the dashboard).
 *
 * Zero-initialise it ({0}); append; take data (malloc'ed, or NULL when
 * nothing was appended) and len.  A failed allocation sets oom and makes
 * every later append do nothing, so a caller checks once, at the end. */
#ifndef FA_STRBUF_H
#define FA_STRBUF_H

#include <stddef.h>

typedef struct fa_strbuf {
    char *data; /* NUL-terminated once anything was appended */
    size_t len, cap;
    int oom;
} fa_strbuf;

void fa_strbuf_put(fa_strbuf *b, const char *s, size_t n);
void fa_strbuf_puts(fa_strbuf *b, const char *s);
void fa_strbuf_printf(fa_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
