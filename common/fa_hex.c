#include "common/fa_hex.h"

#include "common/fa_err.h"

char *fa_hex_encode(char *out, size_t cap, const uint8_t *in, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    size_t i = 0;

    if (!cap)
        return out;
    for (; i < len && 2 * i + 2 < cap; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * i] = '\0';
    return out;
}

int fa_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int fa_hex_decode(uint8_t *out, size_t outlen, const char *hex, size_t hexlen)
{
    if (hexlen / 2 != outlen || hexlen % 2)
        return FA_ERR_PARSE;
    for (size_t i = 0; i < hexlen; i++)
        if (fa_hex_digit((unsigned char)hex[i]) < 0)
            return FA_ERR_PARSE;
    for (size_t i = 0; i < outlen; i++)
        out[i] = (uint8_t)(fa_hex_digit((unsigned char)hex[2 * i]) << 4 |
                           fa_hex_digit((unsigned char)hex[2 * i + 1]));
    return 0;
}
