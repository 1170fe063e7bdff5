#include "common/fa_mem.h"

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Below this a copy is a few lines: memcpy, through the caches. */
#define COLD_MIN 256

void fa_copy_cold(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__)
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;

    if (n < COLD_MIN) {
        memcpy(dst, src, n);
        return;
    }
    memcpy(d, s, head); /* up to dst's first 16-byte boundary */
    d += head;
    s += head;
    n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));
        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
    memcpy(d, s, n);
    _mm_sfence(); /* the streamed stores ordered before any later one */
#else
    memcpy(dst, src, n);
#endif
}
