#include "proto/diags.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fa_diags {
    char **items; /* the diagnostics kept */
    size_t n, cap;
    size_t lost; /* appends lost to out of memory */
};

int fa_diags_new(fa_diags **out)
{
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : FA_ERR_NOMEM;
}

void fa_diags_del(fa_diags *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free(d->items[i]);
    free(d->items);
    free(d);
}

int fa_diags_addf(fa_diags *d, const char *file, unsigned line, unsigned col, const char *fmt, ...)
{
    char prefix[600], body[1024];
    char *s;
    size_t n;
    va_list ap;

    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        char **items = realloc(d->items, cap * sizeof(*items));
        if (!items) {
            d->lost++;
            return FA_ERR_NOMEM;
        }
        d->items = items;
        d->cap = cap;
    }
    if (!file)
        file = "<input>";
    if (line == 0)
        snprintf(prefix, sizeof(prefix), "%s", file);
    else
        snprintf(prefix, sizeof(prefix), "%s:%u:%u", file, line, col);
    va_start(ap, fmt);
    vsnprintf(body, sizeof(body), fmt, ap);
    va_end(ap);
    n = strlen(prefix) + 2 + strlen(body) + 1;
    s = malloc(n);
    if (!s) {
        d->lost++;
        return FA_ERR_NOMEM;
    }
    snprintf(s, n, "%s: %s", prefix, body);
    d->items[d->n++] = s;
    return 0;
}

size_t fa_diags_count(const fa_diags *d)
{
    return d ? d->n + d->lost : 0;
}

size_t fa_diags_lost(const fa_diags *d)
{
    return d ? d->lost : 0;
}

const char *fa_diags_get(const fa_diags *d, size_t i)
{
    return d && i < d->n ? d->items[i] : NULL;
}

int fa_diags_to_error(const fa_diags *d, int code, fa_error *err)
{
    const char *first = fa_diags_get(d, 0);
    size_t n = fa_diags_count(d);

    if (d && d->lost)
        return fa_errorf(err, FA_ERR_NOMEM,
                         "%s%sout of memory: %zu of the %zu problems found lost%s",
                         first ? first : "", first ? " (" : "", d->lost, n, first ? ")" : "");
    if (!first)
        first = fa_strerror(code);
    if (n > 1)
        return fa_errorf(err, code, "%s (and %zu more)", first, n - 1);
    return fa_errorf(err, code, "%s", first);
}
