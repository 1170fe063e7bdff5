/* libFuzzer target: the dashboard renderer (aggregator/dashboard.h) on any
 * bytes as the status document.  Whatever the document holds, the page is
 * one NUL-terminated string of the reported length, and no string from the
 * document escapes into markup: the page never holds "<script" nor an
 * unescaped "<img" (the corpus's documents carry both in their strings). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "aggregator/dashboard.h"

static int has_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *html = NULL;
    size_t len = 0;
    fa_error err;

    if (fa_dashboard_render((const char *)data, size, 1790000000000ull, &html, &len, &err) != 0)
        return 0;
    if (strlen(html) != len || has_ci(html, "<script") || has_ci(html, "<img"))
        abort();
    free(html);
    return 0;
}
