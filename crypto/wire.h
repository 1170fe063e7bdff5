/* wire.h - canonical byte strings for signatures, KDF labels and saved state
 * (internal to crypto/).
 *
 * Integers are little-endian, strings and byte strings are prefixed by their
 * length as a u32.  A writer that fails (out of memory) or a reader that runs
 * past its end sets a sticky flag, so a sequence of calls is checked once.
 */
#ifndef FA_CRYPTO_WIRE_H
#define FA_CRYPTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct fa_wbuf {
    uint8_t *p;
    size_t len, cap;
    int failed; /* out of memory */
    int secret; /* wipe every buffer given up while growing */
} fa_wbuf;

void fa_wbuf_init(fa_wbuf *w, int secret);
/* Wipes (when secret) and frees the buffer. */
void fa_wbuf_free(fa_wbuf *w);
/* Makes room for n more bytes; returns the place to write them or NULL. */
uint8_t *fa_wbuf_reserve(fa_wbuf *w, size_t n);
void fa_wbuf_raw(fa_wbuf *w, const void *p, size_t n);
void fa_wbuf_u8(fa_wbuf *w, uint8_t v);
void fa_wbuf_u32(fa_wbuf *w, uint32_t v);
void fa_wbuf_u64(fa_wbuf *w, uint64_t v);
void fa_wbuf_f64(fa_wbuf *w, double v);
/* u32 length, then the bytes. */
void fa_wbuf_bytes(fa_wbuf *w, const void *p, size_t n);
void fa_wbuf_str(fa_wbuf *w, const char *s);

typedef struct fa_rbuf {
    const uint8_t *p;
    size_t len, off;
    int failed; /* ran past the end, or a length out of bounds */
} fa_rbuf;

void fa_rbuf_init(fa_rbuf *r, const void *p, size_t len);
/* Returns a pointer to the next n bytes (NULL and failed when short). */
const uint8_t *fa_rbuf_raw(fa_rbuf *r, size_t n);
void fa_rbuf_copy(fa_rbuf *r, void *out, size_t n);
uint8_t fa_rbuf_u8(fa_rbuf *r);
uint32_t fa_rbuf_u32(fa_rbuf *r);
uint64_t fa_rbuf_u64(fa_rbuf *r);
double fa_rbuf_f64(fa_rbuf *r);
/* A length-prefixed string into out[cap] (NUL-terminated); fails when it is
 * longer than cap - 1 or contains a NUL. */
void fa_rbuf_str(fa_rbuf *r, char *out, size_t cap);

#endif
