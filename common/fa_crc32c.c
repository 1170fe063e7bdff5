/* fa_crc32c.c - CRC-32C (fa_crc32c.h). */
#include "common/fa_crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u /* reflected Castagnoli */

static uint32_t table[256];

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

uint32_t fa_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    const uint8_t *p = data;
    uint32_t c = ~crc;
    pthread_once(&once, table_init);
    while (len--)
        c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *data,
                                                              size_t len)
{
    const uint8_t *p = data;
    uint64_t c = ~crc;
    while (len > 0 && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    for (; len >= 8; len -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}

uint32_t fa_crc32c(uint32_t crc, const void *data, size_t len)
{
    /* a load of what libgcc's constructor found: no cache of ours to race on */
    return __builtin_cpu_supports("sse4.2") ? crc32c_sse42(crc, data, len)
                                            : fa_crc32c_portable(crc, data, len);
}
#else
uint32_t fa_crc32c(uint32_t crc, const void *data, size_t len)
{
    return fa_crc32c_portable(crc, data, len);
}
#endif
