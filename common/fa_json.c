/* fa_json.c - see fa_json.h. */
#include "common/fa_json.h"

#include <stdint.h>

int fa_json_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned n; /* continuation bytes */
        uint32_t cp;
        if (*p < 0x80)
            n = 0, cp = *p;
        else if (*p >= 0xc2 && *p < 0xe0)
            n = 1, cp = *p & 0x1f;
        else if (*p >= 0xe0 && *p < 0xf0)
            n = 2, cp = *p & 0x0f;
        else if (*p >= 0xf0 && *p < 0xf5)
            n = 3, cp = *p & 0x07;
        else
            return 0;
        for (unsigned i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (p[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        p += n + 1;
    }
    return 1;
}
