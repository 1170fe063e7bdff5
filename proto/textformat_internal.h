/* textformat_internal.h - pieces shared by the text-format lexer, parser,
 * printer and the config example printer.  Not a public interface. */
#ifndef FA_TEXTFORMAT_INTERNAL_H
#define FA_TEXTFORMAT_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "common/fa_strbuf.h"

/* ---- Lexer: the tokens of protoc's io::Tokenizer in text-format mode ----
 * ('#' comments, 'f' allowed after a float, space required after a number,
 * no multi-line strings). */
enum fa_tf_toktype {
    FA_TF_END = 0,
    FA_TF_IDENT,  /* [A-Za-z_][A-Za-z0-9_]* */
    FA_TF_INT,    /* 123, 0x1F, 017 */
    FA_TF_FLOAT,  /* 1.5, .5, 1e3, 1f */
    FA_TF_STRING, /* one quoted literal, quotes included, escapes not decoded */
    FA_TF_SYMBOL, /* any other single byte: { } < > [ ] : , ; - . */
};

struct fa_tf_token {
    enum fa_tf_toktype type;
    const char *text; /* points into the input; not NUL-terminated */
    size_t len;
    unsigned line, col; /* 1-based; col counts characters, not bytes */
    unsigned end_col;   /* column just after the token */
};

/* Called for each malformed token; the lexer goes on (as protoc's does). */
typedef void (*fa_tf_lex_error_fn)(void *ctx, unsigned line, unsigned col, const char *fmt,
                                   va_list ap);

struct fa_tf_lexer {
    const char *buf;
    size_t len, pos;
    unsigned line, col;
    struct fa_tf_token cur, prev;
    fa_tf_lex_error_fn on_error;
    void *ctx;
};

/* Starts lexing buf and reads the first token into lx->cur. */
void fa_tf_lex_init(struct fa_tf_lexer *lx, const char *buf, size_t len, fa_tf_lex_error_fn fn,
                    void *ctx);

/* Advances lx->cur to the next token (lx->prev receives the old one). */
void fa_tf_lex_next(struct fa_tf_lexer *lx);

/* Decodes a string token's escapes (protoc's Tokenizer::ParseStringAppend)
 * into a malloc'ed buffer of *out_len bytes (plus a NUL not counted).
 * Appends to *buf (realloc) so adjacent literals concatenate.  Returns 0 or
 * -1 on out of memory. */
int fa_tf_string_append(const struct fa_tf_token *t, char **buf, size_t *out_len);

/* protoc's Tokenizer::ParseInteger: decimal, 0x hex or 0 octal, at most
 * max_value.  Returns 0, or -1 when out of range or malformed. */
int fa_tf_parse_uint(const char *text, size_t len, uint64_t max_value, uint64_t *out);

/* protoc's Tokenizer::ParseFloat (strtod, ignoring a trailing f/F).
 * Returns 0, or -1 on out of memory. */
int fa_tf_parse_float(const char *text, size_t len, double *out);

/* True when s[0..len) is valid UTF-8 (no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
int fa_tf_utf8_valid(const char *s, size_t len);

/* ---- Output of the printers: a common/fa_strbuf.h buffer ---- */
void fa_tf_buf_indent(fa_strbuf *b, int depth);

/* Appends one value of a non-message field in text format (an element of
 * a repeated field when the field is repeated): `member` points at the
 * value itself (int32_t, double, char *, ProtobufCBinaryData...). */
void fa_tf_print_value(fa_strbuf *b, const ProtobufCFieldDescriptor *f, const void *member);

/* Appends a quoted, escaped string literal. utf8_ok keeps valid UTF-8 as is. */
void fa_tf_print_quoted(fa_strbuf *b, const uint8_t *s, size_t n, int utf8_ok);

/* Whether field f of message m is present (has_ flag, non-default pointer,
 * oneof case, non-zero proto3 value; repeated: at least one element). */
int fa_tf_field_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f);

/* Size of one element of a repeated field of type t. */
size_t fa_tf_elem_size(ProtobufCType t);

#endif
