/* fa_endian.h - little-endian integer codecs for our wire and file formats.
 *
 * memcpy, so alignment does not matter (each compiles to one load or
 * store), and a byte swap only on a big-endian host.  Fast enough for the
 * packers of crypto/ring.c. */
#ifndef FA_ENDIAN_H
#define FA_ENDIAN_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FA_LE16(v) __builtin_bswap16(v)
#define FA_LE32(v) __builtin_bswap32(v)
#define FA_LE64(v) __builtin_bswap64(v)
#else
#define FA_LE16(v) (v)
#define FA_LE32(v) (v)
#define FA_LE64(v) (v)
#endif

static inline void fa_le_put_u16(uint8_t *p, uint16_t v)
{
    v = FA_LE16(v);
    memcpy(p, &v, 2);
}

static inline void fa_le_put_u32(uint8_t *p, uint32_t v)
{
    v = FA_LE32(v);
    memcpy(p, &v, 4);
}

static inline void fa_le_put_u64(uint8_t *p, uint64_t v)
{
    v = FA_LE64(v);
    memcpy(p, &v, 8);
}

static inline uint16_t fa_le_get_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return FA_LE16(v);
}

static inline uint32_t fa_le_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return FA_LE32(v);
}

static inline uint64_t fa_le_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return FA_LE64(v);
}

#endif
