/* fa_hex.h - the one hex codec: lowercase out, either case in. */
#ifndef FA_HEX_H
#define FA_HEX_H

#include <stddef.h>
#include <stdint.h>

/* Bytes needed for the hex of n bytes and its NUL. */
#define FA_HEX_LEN(n) (2 * (n) + 1)

/* Writes the 2*len lowercase hex digits of in[0..len) and a NUL to out
 * (cap bytes).  Returns out, so that it can stand in a printf argument;
 * when cap < FA_HEX_LEN(len) it writes the whole bytes that fit (and the
 * NUL, cap > 0), as snprintf would. */
char *fa_hex_encode(char *out, size_t cap, const uint8_t *in, size_t len);

/* Decodes exactly 2*outlen hex digits (either case) of hex[0..hexlen) into
 * out.  Returns 0, or FA_ERR_PARSE (hexlen != 2*outlen, or a character that
 * is not a hex digit), in which case out is untouched. */
int fa_hex_decode(uint8_t *out, size_t outlen, const char *hex, size_t hexlen);

/* The value of one hex digit (either case), or -1. */
int fa_hex_digit(int c);

#endif
