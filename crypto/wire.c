#include "crypto/wire.h"

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_endian.h"

void fa_wbuf_init(fa_wbuf *w, int secret)
{
    memset(w, 0, sizeof(*w));
    w->secret = secret;
}

void fa_wbuf_free(fa_wbuf *w)
{
    if (w->p && w->secret)
        sodium_memzero(w->p, w->cap);
    free(w->p);
    w->p = NULL;
    w->len = w->cap = 0;
}

uint8_t *fa_wbuf_reserve(fa_wbuf *w, size_t n)
{
    if (w->failed)
        return NULL;
    if (n > SIZE_MAX / 2 - w->len) {
        w->failed = 1;
        return NULL;
    }
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        uint8_t *p;
        while (cap < w->len + n)
            cap *= 2;
        /* Not realloc: a secret buffer must not be left behind unwiped. */
        p = malloc(cap);
        if (!p) {
            w->failed = 1;
            return NULL;
        }
        if (w->p) {
            memcpy(p, w->p, w->len);
            if (w->secret)
                sodium_memzero(w->p, w->cap);
            free(w->p);
        }
        w->p = p;
        w->cap = cap;
    }
    w->len += n;
    return w->p + w->len - n;
}

void fa_wbuf_raw(fa_wbuf *w, const void *p, size_t n)
{
    uint8_t *d = fa_wbuf_reserve(w, n);
    if (d && n)
        memcpy(d, p, n);
}

void fa_wbuf_u8(fa_wbuf *w, uint8_t v)
{
    fa_wbuf_raw(w, &v, 1);
}

void fa_wbuf_u32(fa_wbuf *w, uint32_t v)
{
    uint8_t *d = fa_wbuf_reserve(w, 4);
    if (d)
        fa_le_put_u32(d, v);
}

void fa_wbuf_u64(fa_wbuf *w, uint64_t v)
{
    uint8_t *d = fa_wbuf_reserve(w, 8);
    if (d)
        fa_le_put_u64(d, v);
}

void fa_wbuf_f64(fa_wbuf *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    fa_wbuf_u64(w, u);
}

void fa_wbuf_bytes(fa_wbuf *w, const void *p, size_t n)
{
    if (n > UINT32_MAX) {
        w->failed = 1;
        return;
    }
    fa_wbuf_u32(w, (uint32_t)n);
    fa_wbuf_raw(w, p, n);
}

void fa_wbuf_str(fa_wbuf *w, const char *s)
{
    fa_wbuf_bytes(w, s, strlen(s));
}

void fa_rbuf_init(fa_rbuf *r, const void *p, size_t len)
{
    r->p = p;
    r->len = len;
    r->off = 0;
    r->failed = 0;
}

const uint8_t *fa_rbuf_raw(fa_rbuf *r, size_t n)
{
    const uint8_t *p;
    if (r->failed || n > r->len - r->off) {
        r->failed = 1;
        return NULL;
    }
    p = r->p + r->off;
    r->off += n;
    return p;
}

void fa_rbuf_copy(fa_rbuf *r, void *out, size_t n)
{
    const uint8_t *p = fa_rbuf_raw(r, n);
    if (p)
        memcpy(out, p, n);
    else
        memset(out, 0, n);
}

uint8_t fa_rbuf_u8(fa_rbuf *r)
{
    const uint8_t *p = fa_rbuf_raw(r, 1);
    return p ? p[0] : 0;
}

uint32_t fa_rbuf_u32(fa_rbuf *r)
{
    const uint8_t *p = fa_rbuf_raw(r, 4);
    return p ? fa_le_get_u32(p) : 0;
}

uint64_t fa_rbuf_u64(fa_rbuf *r)
{
    const uint8_t *p = fa_rbuf_raw(r, 8);
    return p ? fa_le_get_u64(p) : 0;
}

double fa_rbuf_f64(fa_rbuf *r)
{
    uint64_t u = fa_rbuf_u64(r);
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

void fa_rbuf_str(fa_rbuf *r, char *out, size_t cap)
{
    uint32_t n = fa_rbuf_u32(r);
    const uint8_t *p;
    out[0] = '\0';
    if (r->failed || n >= cap) {
        r->failed = 1;
        return;
    }
    p = fa_rbuf_raw(r, n);
    if (!p || memchr(p, 0, n)) {
        r->failed = 1;
        return;
    }
    memcpy(out, p, n);
    out[n] = '\0';
}
