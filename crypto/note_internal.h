/* note_internal.h - the text rules of signed notes that checkpoint.c and
 * proof_bundle.c share with note.c (internal to crypto/).  The public face
 * is checkpoint.h. */
#ifndef FA_CRYPTO_NOTE_INTERNAL_H
#define FA_CRYPTO_NOTE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "crypto/checkpoint.h"

/* The length of the longest prefix of s[0..len) that is valid UTF-8
 * without control characters other than newline (len when all of it is). */
size_t fa_note_text_check(const uint8_t *s, size_t len);

/* Standard base64 with padding (RFC 4648 section 4).  Returns 0 when the
 * whole of s decodes into at most cap bytes, -1 otherwise. */
int fa_note_b64_decode(const char *s, size_t len, uint8_t *out, size_t cap, size_t *out_len);

/* The offset of the last "\n\n" in msg (where a note's text ends), or -1. */
long fa_note_last_blank(const char *msg, size_t len);

#endif
