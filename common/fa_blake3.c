#include "common/fa_blake3.h"

#include <blake3.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_err.h"

struct fa_blake3_state {
    blake3_hasher h;
    size_t held; /* bytes in run, not hashed yet */
    uint8_t run[FA_BLAKE3_RUN];
};

int fa_blake3(uint8_t out[FA_BLAKE3_BYTES], const void *data, size_t len)
{
    blake3_hasher h;
    if (!out || (!data && len))
        return FA_ERR_INVAL;
    blake3_hasher_init(&h);
    blake3_hasher_update(&h, data, len);
    blake3_hasher_finalize(&h, out, FA_BLAKE3_BYTES);
    return 0;
}

int fa_blake3_init(fa_blake3_ctx *c)
{
    if (!c)
        return FA_ERR_INVAL;
    c->failed = 0;
    if (!c->st && !(c->st = malloc(sizeof(*c->st))))
        return c->failed = FA_ERR_NOMEM;
    blake3_hasher_init(&c->st->h);
    c->st->held = 0;
    return 0;
}

/* Whole runs go to the hasher in place while nothing is held, so that
 * everything it sees starts at a multiple of FA_BLAKE3_RUN. */
int fa_blake3_update(fa_blake3_ctx *c, const void *data, size_t len)
{
    struct fa_blake3_state *s;
    const uint8_t *p = data;

    if (!c)
        return FA_ERR_INVAL;
    if (!c->st)
        return FA_ERR_STATE;
    if (c->failed)
        return c->failed;
    if (!data && len)
        return c->failed = FA_ERR_INVAL;
    s = c->st;
    while (len > 0) {
        size_t take;
        if (s->held == 0 && len >= FA_BLAKE3_RUN) {
            take = len - len % FA_BLAKE3_RUN;
            blake3_hasher_update(&s->h, p, take);
        } else {
            take = FA_BLAKE3_RUN - s->held < len ? FA_BLAKE3_RUN - s->held : len;
            memcpy(s->run + s->held, p, take);
            s->held += take;
            if (s->held == FA_BLAKE3_RUN) {
                blake3_hasher_update(&s->h, s->run, FA_BLAKE3_RUN);
                s->held = 0;
            }
        }
        p += take;
        len -= take;
    }
    return 0;
}

int fa_blake3_final(fa_blake3_ctx *c, uint8_t out[FA_BLAKE3_BYTES])
{
    if (!c || !out)
        return FA_ERR_INVAL;
    if (!c->st)
        return FA_ERR_STATE;
    if (c->failed)
        return c->failed;
    blake3_hasher_update(&c->st->h, c->st->run, c->st->held);
    blake3_hasher_finalize(&c->st->h, out, FA_BLAKE3_BYTES);
    c->st->held = 0;
    c->failed = FA_ERR_STATE; /* ended: init starts another */
    return 0;
}

void fa_blake3_free(fa_blake3_ctx *c)
{
    if (!c)
        return;
    free(c->st);
    c->st = NULL;
    c->failed = 0;
}
