/* fa_json.h - telling jansson's failures apart.  json_load* return NULL
 * both for text that is not JSON and for want of memory, json_string and
 * json_object_set* both for a string that is not UTF-8 and for want of
 * memory; a parser of untrusted bytes must report memory as FA_ERR_NOMEM,
 * not as the peer's fault, and a writer must not call a full memory bad
 * input. */
#ifndef FA_JSON_H
#define FA_JSON_H

#include <jansson.h>

/* Whether a json_load* that returned NULL with e failed for want of
 * memory.  jansson says so in the error's code, except when its lexer
 * cannot allocate its first buffer: then it leaves the error empty, which
 * no parse error does. */
static inline int fa_json_out_of_memory(const json_error_t *e)
{
    return json_error_code(e) == json_error_out_of_memory || e->text[0] == '\0';
}

/* Whether the NUL-terminated s is valid UTF-8 (RFC 3629: no overlong
 * form, no surrogate, nothing above U+10FFFF), as jansson requires of
 * every string and key: checked first, a later failure of jansson's can
 * only be memory. */
int fa_json_utf8_valid(const char *s);

#endif
