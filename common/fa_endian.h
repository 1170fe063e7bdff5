/* fa_endian.h - little-endian integer codecs for our wire and file formats.
 *
 * Byte by byte, so alignment and the host's order do not matter; GCC and
 * clang turn each into a single load or store. */
#ifndef FA_ENDIAN_H
#define FA_ENDIAN_H

#include <stdint.h>

static inline void fa_le_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline void fa_le_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void fa_le_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t fa_le_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static inline uint32_t fa_le_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t fa_le_get_u64(const uint8_t *p)
{
    return (uint64_t)fa_le_get_u32(p) | (uint64_t)fa_le_get_u32(p + 4) << 32;
}

#endif
