/* textformat_lex.c - the tokenizer of protobuf text format.
 *
 * A transcription of the behaviour of protoc 3.21's io::Tokenizer as
 * TextFormat::Parser configures it ('#' comments, 'f' allowed after a float,
 * a space required between a number and an identifier, strings on one line),
 * so that we accept and reject exactly the same token streams.  Errors are
 * reported through a callback and lexing goes on, as protoc's does; a
 * malformed token still comes out as a token of its type.
 */
#include "proto/textformat_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEX_EOF (-1)

static int peek(const struct fa_tf_lexer *lx, size_t k)
{
    return lx->pos + k < lx->len ? (unsigned char)lx->buf[lx->pos + k] : LEX_EOF;
}

static int cur_char(const struct fa_tf_lexer *lx)
{
    return peek(lx, 0);
}

static void advance(struct fa_tf_lexer *lx)
{
    unsigned char c;

    if (lx->pos >= lx->len)
        return;
    c = (unsigned char)lx->buf[lx->pos++];
    if (c == '\n') {
        lx->line++;
        lx->col = 1;
    } else if ((c & 0xC0) != 0x80) { /* count characters, not UTF-8 continuation bytes */
        lx->col++;
    }
}

static void lex_error(struct fa_tf_lexer *lx, unsigned line, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void lex_error(struct fa_tf_lexer *lx, unsigned line, unsigned col, const char *fmt, ...)
{
    va_list ap;

    if (!lx->on_error)
        return;
    va_start(ap, fmt);
    lx->on_error(lx->ctx, line, col, fmt, ap);
    va_end(ap);
}

static int is_letter(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int is_octal(int c)
{
    return c >= '0' && c <= '7';
}

static int is_hex(int c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int is_whitespace(int c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* protoc's "Unprintable" class, plus NUL (which protoc also refuses). */
static int is_control(int c)
{
    return c >= 0 && c < ' ';
}

static int hex_value(int c)
{
    if (is_digit(c))
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return c - 'A' + 10;
}

/* ConsumeNumber: started_with_zero / started_with_dot as in protoc. */
static enum fa_tf_toktype lex_number(struct fa_tf_lexer *lx, int started_with_zero,
                                     int started_with_dot)
{
    int is_float = 0;

    if (started_with_zero && (cur_char(lx) == 'x' || cur_char(lx) == 'X')) {
        advance(lx);
        if (!is_hex(cur_char(lx)))
            lex_error(lx, lx->line, lx->col, "\"0x\" must be followed by hex digits");
        while (is_hex(cur_char(lx)))
            advance(lx);
    } else if (started_with_zero && is_digit(cur_char(lx))) {
        while (is_octal(cur_char(lx)))
            advance(lx);
        if (is_digit(cur_char(lx))) {
            lex_error(lx, lx->line, lx->col,
                      "a number starting with 0 is octal; 8 and 9 are not octal digits");
            while (is_digit(cur_char(lx)))
                advance(lx);
        }
    } else {
        if (started_with_dot) {
            is_float = 1;
            while (is_digit(cur_char(lx)))
                advance(lx);
        } else {
            while (is_digit(cur_char(lx)))
                advance(lx);
            if (cur_char(lx) == '.') {
                advance(lx);
                is_float = 1;
                while (is_digit(cur_char(lx)))
                    advance(lx);
            }
        }
        if (cur_char(lx) == 'e' || cur_char(lx) == 'E') {
            advance(lx);
            is_float = 1;
            if (cur_char(lx) == '-' || cur_char(lx) == '+')
                advance(lx);
            if (!is_digit(cur_char(lx)))
                lex_error(lx, lx->line, lx->col, "\"e\" must be followed by an exponent");
            while (is_digit(cur_char(lx)))
                advance(lx);
        }
        if (cur_char(lx) == 'f' || cur_char(lx) == 'F') {
            advance(lx);
            is_float = 1;
        }
    }
    if (is_letter(cur_char(lx)))
        lex_error(lx, lx->line, lx->col, "need a space between a number and an identifier");
    else if (cur_char(lx) == '.')
        lex_error(lx, lx->line, lx->col,
                  is_float ? "a number cannot have a second decimal point or exponent"
                           : "hex and octal numbers must be integers");
    return is_float ? FA_TF_FLOAT : FA_TF_INT;
}

/* ConsumeString: validates escapes; the token keeps its quotes. */
static void lex_string(struct fa_tf_lexer *lx, int quote)
{
    unsigned line = lx->line, col = lx->col;

    advance(lx); /* opening quote */
    for (;;) {
        int c = cur_char(lx);
        if (c == LEX_EOF || c == 0) {
            lex_error(lx, line, col, "string has no closing %c", quote);
            return;
        }
        if (c == '\n') {
            lex_error(lx, line, col,
                      "string has no closing %c on its line "
                      "(a string cannot cross a line break; write \\n)",
                      quote);
            return;
        }
        if (c == '\\') {
            unsigned el = lx->line, ec = lx->col;
            advance(lx);
            c = cur_char(lx);
            if (c != LEX_EOF && strchr("abfnrtv\\?'\"", c) && c != 0) {
                advance(lx);
            } else if (is_octal(c)) {
                advance(lx); /* further octal digits are ordinary characters here */
            } else if (c == 'x') {
                advance(lx);
                if (is_hex(cur_char(lx)))
                    advance(lx);
                else
                    lex_error(lx, el, ec, "\\x must be followed by hex digits");
            } else if (c == 'u') {
                int i;
                advance(lx);
                for (i = 0; i < 4 && is_hex(cur_char(lx)); i++)
                    advance(lx);
                if (i < 4)
                    lex_error(lx, el, ec, "\\u must be followed by four hex digits");
            } else if (c == 'U') {
                /* eight hex digits, at most 0x001fffff ("00" then 0 or 1, as protoc) */
                int ok = 1, i;
                advance(lx);
                if (cur_char(lx) == '0')
                    advance(lx);
                else
                    ok = 0;
                if (ok && cur_char(lx) == '0')
                    advance(lx);
                else
                    ok = 0;
                if (ok && (cur_char(lx) == '0' || cur_char(lx) == '1'))
                    advance(lx);
                else
                    ok = 0;
                for (i = 0; ok && i < 5; i++) {
                    if (is_hex(cur_char(lx)))
                        advance(lx);
                    else
                        ok = 0;
                }
                if (!ok)
                    lex_error(lx, el, ec,
                              "\\U must be followed by eight hex digits, at most 0010ffff");
            } else {
                if (c >= 0x20 && c < 0x7f)
                    lex_error(lx, el, ec, "invalid escape sequence \\%c in string", c);
                else
                    lex_error(lx, el, ec, "invalid escape sequence in string");
            }
            continue;
        }
        advance(lx);
        if (c == quote)
            return;
    }
}

void fa_tf_lex_next(struct fa_tf_lexer *lx)
{
    struct fa_tf_token *t = &lx->cur;

    lx->prev = lx->cur;
    for (;;) {
        int c;
        while (is_whitespace(cur_char(lx)))
            advance(lx);
        c = cur_char(lx);
        if (c == '#') {
            while (cur_char(lx) != LEX_EOF && cur_char(lx) != '\n' && cur_char(lx) != 0)
                advance(lx);
            continue;
        }
        t->line = lx->line;
        t->col = lx->col;
        t->text = lx->buf + lx->pos;
        if (c == LEX_EOF) {
            t->type = FA_TF_END;
            t->len = 0;
            t->end_col = t->col;
            return;
        }
        if (is_control(c)) {
            lex_error(lx, lx->line, lx->col,
                      "invalid control character 0x%02x (only space, tab and line breaks "
                      "may appear outside strings)",
                      c);
            advance(lx);
            while (is_control(cur_char(lx)))
                advance(lx);
            continue;
        }
        if (is_letter(c)) {
            t->type = FA_TF_IDENT;
            while (is_letter(cur_char(lx)) || is_digit(cur_char(lx)))
                advance(lx);
        } else if (c == '0') {
            advance(lx);
            t->type = lex_number(lx, 1, 0);
        } else if (is_digit(c)) {
            advance(lx);
            t->type = lex_number(lx, 0, 0);
        } else if (c == '.' && is_digit(peek(lx, 1))) {
            if (lx->prev.type == FA_TF_IDENT && lx->prev.line == t->line &&
                lx->prev.end_col == t->col)
                lex_error(lx, t->line, t->col,
                          "need a space between an identifier and a decimal point");
            advance(lx);
            advance(lx);
            t->type = lex_number(lx, 0, 1);
        } else if (c == '"' || c == '\'') {
            t->type = FA_TF_STRING;
            lex_string(lx, c);
        } else {
            t->type = FA_TF_SYMBOL;
            advance(lx);
            if (c >= 0x80) {
                /* one token for the whole UTF-8 sequence, one error */
                while ((cur_char(lx) & 0xC0) == 0x80 && cur_char(lx) != LEX_EOF)
                    advance(lx);
                lex_error(lx, t->line, t->col, "non-ASCII character outside a string or comment");
            }
        }
        t->len = (size_t)(lx->buf + lx->pos - t->text);
        t->end_col = lx->col;
        return;
    }
}

void fa_tf_lex_init(struct fa_tf_lexer *lx, const char *buf, size_t len, fa_tf_lex_error_fn fn,
                    void *ctx)
{
    memset(lx, 0, sizeof(*lx));
    lx->buf = buf;
    lx->len = len;
    lx->line = 1;
    lx->col = 1;
    lx->on_error = fn;
    lx->ctx = ctx;
    lx->cur.type = FA_TF_END;
    fa_tf_lex_next(lx);
    lx->prev.type = FA_TF_END;
}

/* ---- Values of tokens ---- */

struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
};

static void sb_put(struct sbuf *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16;
        char *p;
        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_putc(struct sbuf *b, int c)
{
    char ch = (char)c;
    sb_put(b, &ch, 1);
}

/* protoc's AppendUTF8, including its quirk for code points above U+10FFFF
 * (which the \U check lets through up to 0x1fffff): the escape is kept as text. */
static void append_utf8(struct sbuf *b, uint32_t cp)
{
    unsigned char out[4];
    char esc[16];

    if (cp <= 0x7f) {
        out[0] = (unsigned char)cp;
        sb_put(b, out, 1);
    } else if (cp <= 0x7ff) {
        out[0] = (unsigned char)(0xC0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        sb_put(b, out, 2);
    } else if (cp <= 0xffff) {
        out[0] = (unsigned char)(0xE0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        sb_put(b, out, 3);
    } else if (cp <= 0x10ffff) {
        out[0] = (unsigned char)(0xF0 | (cp >> 18));
        out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[3] = (unsigned char)(0x80 | (cp & 0x3f));
        sb_put(b, out, 4);
    } else {
        snprintf(esc, sizeof(esc), "\\U%08x", (unsigned)cp);
        sb_put(b, esc, strlen(esc));
    }
}

static int read_hex(const char *s, size_t avail, size_t n, uint32_t *out)
{
    uint32_t v = 0;

    if (avail < n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_hex((unsigned char)s[i]))
            return 0;
        v = (v << 4) | (uint32_t)hex_value((unsigned char)s[i]);
    }
    *out = v;
    return 1;
}

static char translate_escape(char c)
{
    switch (c) {
    case 'a':
        return '\a';
    case 'b':
        return '\b';
    case 'f':
        return '\f';
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case 'v':
        return '\v';
    case '\\':
        return '\\';
    case '?':
        return '?';
    case '\'':
        return '\'';
    case '"':
        return '"';
    default:
        return '?'; /* an error was reported when lexing */
    }
}

int fa_tf_string_append(const struct fa_tf_token *t, char **buf, size_t *out_len)
{
    struct sbuf b = {*buf, *out_len, 0, 0};
    const char *s = t->text;
    size_t n = t->len;

    if (b.p)
        b.cap = b.len + 1;
    else
        sb_put(&b, "", 0); /* always return a buffer, even for "" */
    for (size_t i = 1; i < n; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            c = s[++i];
            if (is_octal((unsigned char)c)) {
                unsigned code = (unsigned)(c - '0');
                if (i + 1 < n && is_octal((unsigned char)s[i + 1]))
                    code = code * 8 + (unsigned)(s[++i] - '0');
                if (i + 1 < n && is_octal((unsigned char)s[i + 1]))
                    code = code * 8 + (unsigned)(s[++i] - '0');
                sb_putc(&b, (int)(code & 0xff));
            } else if (c == 'x') {
                unsigned code = 0;
                if (i + 1 < n && is_hex((unsigned char)s[i + 1]))
                    code = (unsigned)hex_value((unsigned char)s[++i]);
                if (i + 1 < n && is_hex((unsigned char)s[i + 1]))
                    code = code * 16 + (unsigned)hex_value((unsigned char)s[++i]);
                sb_putc(&b, (int)code);
            } else if (c == 'u' || c == 'U') {
                size_t digits = c == 'u' ? 4 : 8, p = i + 1;
                uint32_t cp, trail;
                if (!read_hex(s + p, n - p, digits, &cp)) {
                    sb_putc(&b, c); /* malformed; reported when lexing */
                    continue;
                }
                p += digits;
                /* a UTF-16 head surrogate followed by \u and a trail surrogate is one code point */
                if (cp >= 0xD800 && cp <= 0xDBFF && p + 1 < n && s[p] == '\\' && s[p + 1] == 'u' &&
                    read_hex(s + p + 2, n - p - 2, 4, &trail) && trail >= 0xDC00 &&
                    trail <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (trail - 0xDC00);
                    p += 6;
                }
                append_utf8(&b, cp);
                i = p - 1;
            } else {
                sb_putc(&b, translate_escape(c));
            }
        } else if (c == s[0] && i == n - 1) {
            /* the closing quote */
        } else {
            sb_putc(&b, c);
        }
    }
    if (b.oom) {
        free(b.p);
        *buf = NULL;
        *out_len = 0;
        return -1;
    }
    *buf = b.p;
    *out_len = b.len;
    return 0;
}

int fa_tf_parse_uint(const char *text, size_t len, uint64_t max_value, uint64_t *out)
{
    unsigned base = 10;
    size_t i = 0;
    uint64_t v = 0;

    if (len == 0)
        return -1;
    if (text[0] == '0') {
        if (len > 1 && (text[1] == 'x' || text[1] == 'X')) {
            base = 16;
            i = 2;
        } else {
            base = 8;
        }
    }
    for (; i < len; i++) {
        int c = (unsigned char)text[i];
        unsigned d;
        if (!is_hex(c))
            return -1;
        d = (unsigned)hex_value(c);
        if (d >= base)
            return -1;
        if (d > max_value || v > (max_value - d) / base)
            return -1;
        v = v * base + d;
    }
    *out = v;
    return 0;
}

int fa_tf_parse_float(const char *text, size_t len, double *out)
{
    char small[128], *s = small;

    if (len >= sizeof(small)) {
        s = malloc(len + 1);
        if (!s)
            return -1;
    }
    memcpy(s, text, len);
    s[len] = '\0';
    *out = strtod(s, NULL); /* stops at a trailing 'f'; overflow gives +-HUGE_VAL = inf */
    if (s != small)
        free(s);
    return 0;
}

int fa_tf_utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;

    while (i < len) {
        unsigned c = s[i];
        size_t n;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xE0) == 0xC0) {
            n = 2;
            cp = c & 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 3;
            cp = c & 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 4;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return 0;
        }
        if (len - i < n)
            return 0;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n;
    }
    return 1;
}
