/* textformat_parse.c - text format -> protobuf-c message.
 *
 * A recursive-descent parser following protoc 3.21's TextFormat::Parser
 * (ConsumeField, ConsumeFieldValue, ConsumeSignedInteger, ConsumeDouble...)
 * so that it accepts and rejects the same texts, but it goes on after an
 * error where it safely can (a bad value, an unknown or repeated field) so
 * that one run reports every such problem.  A structural error (a missing
 * `:` or `}`) stops it.
 *
 * The message is built directly in protobuf-c's structures and is kept
 * consistent at every step (counts match arrays, a oneof case is set only
 * with its member), so that protobuf_c_message_free_unpacked() frees a
 * half-built message after an error.
 */
#include "proto/textformat.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/textformat_internal.h"

#define TF_MAX_DEPTH 100 /* protoc's default recursion limit */
#define TF_MAX_INPUT (1u << 30)
#define TF_DEFAULT_MAX_ERRORS 50

/* ---- Positions table: (message, field, index) -> line:col ---- */

struct pos_entry {
    const ProtobufCMessage *msg;
    const ProtobufCFieldDescriptor *field;
    size_t index;
    unsigned line, col;
    const ProtobufCMessage *child; /* the message value, for message fields */
};

struct fa_textformat_positions {
    struct pos_entry *e;
    size_t n, cap;
    size_t *slots; /* open addressing; entry index + 1, 0 = empty */
    size_t nslots;
};

static size_t pos_hash(const void *msg, const void *field, size_t index)
{
    uint64_t h = (uint64_t)(uintptr_t)msg * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uintptr_t)field + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)index * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (size_t)h;
}

static const struct pos_entry *pos_find(const struct fa_textformat_positions *p, const void *msg,
                                        const void *field, size_t index)
{
    size_t i;

    if (!p || !p->nslots)
        return NULL;
    for (i = pos_hash(msg, field, index) & (p->nslots - 1); p->slots[i];
         i = (i + 1) & (p->nslots - 1)) {
        const struct pos_entry *e = &p->e[p->slots[i] - 1];
        if (e->msg == msg && e->field == field && e->index == index)
            return e;
    }
    return NULL;
}

static int pos_add(struct fa_textformat_positions *p, const ProtobufCMessage *msg,
                   const ProtobufCFieldDescriptor *field, size_t index, unsigned line, unsigned col,
                   const ProtobufCMessage *child)
{
    size_t i;

    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct pos_entry *e = realloc(p->e, cap * sizeof(*e));
        if (!e)
            return -1;
        p->e = e;
        p->cap = cap;
    }
    if ((p->n + 1) * 2 > p->nslots) { /* keep the load under one half */
        size_t nslots = p->nslots ? p->nslots * 2 : 128;
        size_t *slots = calloc(nslots, sizeof(*slots));
        if (!slots)
            return -1;
        free(p->slots);
        p->slots = slots;
        p->nslots = nslots;
        for (size_t k = 0; k < p->n; k++) {
            const struct pos_entry *e = &p->e[k];
            for (i = pos_hash(e->msg, e->field, e->index) & (nslots - 1); slots[i];
                 i = (i + 1) & (nslots - 1))
                ;
            slots[i] = k + 1;
        }
    }
    p->e[p->n] = (struct pos_entry){msg, field, index, line, col, child};
    for (i = pos_hash(msg, field, index) & (p->nslots - 1); p->slots[i];
         i = (i + 1) & (p->nslots - 1))
        ;
    p->slots[i] = ++p->n;
    return 0;
}

void fa_textformat_positions_del(fa_textformat_positions *p)
{
    if (!p)
        return;
    free(p->e);
    free(p->slots);
    free(p);
}

int fa_textformat_position(const fa_textformat_positions *p, const ProtobufCMessage *msg,
                           const char *field, size_t index, unsigned *line, unsigned *col)
{
    const ProtobufCFieldDescriptor *f;
    const struct pos_entry *e;

    if (!p || !msg || !field)
        return FA_ERR_NOTFOUND;
    f = protobuf_c_message_descriptor_get_field_by_name(msg->descriptor, field);
    if (!f || !(e = pos_find(p, msg, f, index)))
        return FA_ERR_NOTFOUND;
    *line = e->line;
    *col = e->col;
    return 0;
}

int fa_textformat_position_of(const fa_textformat_positions *p, const ProtobufCMessage *msg,
                              unsigned *line, unsigned *col)
{
    if (!p || !msg)
        return FA_ERR_NOTFOUND;
    for (size_t i = 0; i < p->n; i++) {
        if (p->e[i].child == msg) {
            *line = p->e[i].line;
            *col = p->e[i].col;
            return 0;
        }
    }
    return FA_ERR_NOTFOUND;
}

/* ---- "Did you mean" ---- */

/* Lower-cased name without underscores, so MinRegions and min_regions meet. */
static void normalize(const char *s, char *out, size_t cap)
{
    size_t n = 0;

    for (; *s && n + 1 < cap; s++) {
        if (*s == '_')
            continue;
        out[n++] = (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
    }
    out[n] = '\0';
}

/* Levenshtein distance, giving up (returning limit + 1) on long names. */
static size_t edit_distance(const char *a, const char *b, size_t limit)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[65];

    if (la > 64 || lb > 64)
        return limit + 1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0], best;
        row[0] = i;
        best = row[0];
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], v;
            v = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < v)
                v = up + 1;
            if (row[j - 1] + 1 < v)
                v = row[j - 1] + 1;
            diag = up;
            row[j] = v;
            if (v < best)
                best = v;
        }
        if (best > limit)
            return limit + 1;
    }
    return row[lb];
}

const char *fa_textformat_suggest_field(const ProtobufCMessageDescriptor *d, const char *name)
{
    char want[128], have[128];
    const char *best = NULL;
    size_t best_d, limit, len;

    if (!d || !name)
        return NULL;
    normalize(name, want, sizeof(want));
    len = strlen(want);
    limit = len <= 2 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
    best_d = limit + 1;
    for (unsigned i = 0; i < d->n_fields; i++) {
        size_t dist;
        normalize(d->fields[i].name, have, sizeof(have));
        dist = edit_distance(want, have, limit);
        if (dist < best_d) {
            best_d = dist;
            best = d->fields[i].name;
        }
    }
    return best;
}

static const char *suggest_enum(const ProtobufCEnumDescriptor *e, const char *name)
{
    char want[128], have[128];
    const char *best = NULL;
    size_t best_d, limit, len;

    normalize(name, want, sizeof(want));
    len = strlen(want);
    limit = len <= 2 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
    best_d = limit + 1;
    for (unsigned i = 0; i < e->n_values; i++) {
        size_t dist;
        normalize(e->values[i].name, have, sizeof(have));
        dist = edit_distance(want, have, limit);
        if (dist < best_d) {
            best_d = dist;
            best = e->values[i].name;
        }
    }
    return best;
}

/* ---- The parser ---- */

struct tf_parser {
    struct fa_tf_lexer lx;
    const char *file;
    fa_diags *diags;
    unsigned nerr, max_errors;
    char first[512];
    int stop; /* a structural error, too many errors or out of memory: unwind */
    int oom;
    int depth;
    struct fa_textformat_positions *pos;
    char path[512]; /* dotted path of the message being parsed ("" at the top) */
    size_t pathlen;
};

static void verror(struct tf_parser *p, unsigned line, unsigned col, const char *fmt, va_list ap)
{
    char msg[768];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (p->nerr == 0)
        snprintf(p->first, sizeof(p->first), "%s:%u:%u: %s", p->file, line, col, msg);
    if (p->diags && p->nerr < p->max_errors &&
        fa_diags_addf(p->diags, p->file, line, col, "%s", msg) != 0)
        p->oom = 1;
    if (++p->nerr >= p->max_errors)
        p->stop = 1;
}

static void perr(struct tf_parser *p, unsigned line, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void perr(struct tf_parser *p, unsigned line, unsigned col, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    verror(p, line, col, fmt, ap);
    va_end(ap);
}

static void lex_error_cb(void *ctx, unsigned line, unsigned col, const char *fmt, va_list ap)
{
    verror(ctx, line, col, fmt, ap);
}

static void next(struct tf_parser *p)
{
    fa_tf_lex_next(&p->lx);
}

static const struct fa_tf_token *cur(const struct tf_parser *p)
{
    return &p->lx.cur;
}

static int at_symbol(const struct tf_parser *p, char c)
{
    return cur(p)->type == FA_TF_SYMBOL && cur(p)->len == 1 && cur(p)->text[0] == c;
}

static int try_symbol(struct tf_parser *p, char c)
{
    if (!at_symbol(p, c))
        return 0;
    next(p);
    return 1;
}

/* "`abc`", "end of input", "a string" -- for "expected X, got Y". */
static const char *describe(const struct fa_tf_token *t, char *buf, size_t cap)
{
    switch (t->type) {
    case FA_TF_END:
        return "end of input";
    case FA_TF_STRING:
        return "a string";
    default:
        break;
    }
    if (t->len > 40)
        snprintf(buf, cap, "`%.40s...`", t->text);
    else
        snprintf(buf, cap, "`%.*s`", (int)t->len, t->text);
    for (char *s = buf; *s; s++) /* keep messages printable */
        if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
            *s = '?';
    return buf;
}

/* The field's dotted path for messages: "round.min_regions". */
static const char *field_path(const struct tf_parser *p, const ProtobufCFieldDescriptor *f,
                              char *buf, size_t cap)
{
    if (p->pathlen)
        snprintf(buf, cap, "%s.%s", p->path, f->name);
    else
        snprintf(buf, cap, "%s", f->name);
    return buf;
}

static size_t path_push(struct tf_parser *p, const ProtobufCFieldDescriptor *f, size_t index)
{
    size_t old = p->pathlen;
    int n;

    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        n = snprintf(p->path + old, sizeof(p->path) - old, "%s%s[%zu]", old ? "." : "", f->name,
                     index);
    else
        n = snprintf(p->path + old, sizeof(p->path) - old, "%s%s", old ? "." : "", f->name);
    if (n > 0)
        p->pathlen = old + (size_t)n < sizeof(p->path) ? old + (size_t)n : sizeof(p->path) - 1;
    return old;
}

static void path_pop(struct tf_parser *p, size_t old)
{
    p->pathlen = old;
    p->path[old] = '\0';
}

static const char *type_name(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
        return "int32";
    case PROTOBUF_C_TYPE_SINT32:
        return "sint32";
    case PROTOBUF_C_TYPE_SFIXED32:
        return "sfixed32";
    case PROTOBUF_C_TYPE_INT64:
        return "int64";
    case PROTOBUF_C_TYPE_SINT64:
        return "sint64";
    case PROTOBUF_C_TYPE_SFIXED64:
        return "sfixed64";
    case PROTOBUF_C_TYPE_UINT32:
        return "uint32";
    case PROTOBUF_C_TYPE_FIXED32:
        return "fixed32";
    case PROTOBUF_C_TYPE_UINT64:
        return "uint64";
    case PROTOBUF_C_TYPE_FIXED64:
        return "fixed64";
    case PROTOBUF_C_TYPE_FLOAT:
        return "float";
    case PROTOBUF_C_TYPE_DOUBLE:
        return "double";
    case PROTOBUF_C_TYPE_BOOL:
        return "bool";
    case PROTOBUF_C_TYPE_ENUM:
        return "enum";
    case PROTOBUF_C_TYPE_STRING:
        return "string";
    case PROTOBUF_C_TYPE_BYTES:
        return "bytes";
    case PROTOBUF_C_TYPE_MESSAGE:
        return "message";
    default:
        return "?";
    }
}

#define MEMBER(msg, off) ((void *)((char *)(msg) + (off)))

/* protobuf-c's proto3 fields have no label; a message with any such field is proto3. */
static int is_proto3(const ProtobufCMessageDescriptor *d)
{
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].label == PROTOBUF_C_LABEL_NONE)
            return 1;
    return 0;
}

/* protoc's Reflection::HasField, for the "set twice" check. */
static int has_field(const struct tf_parser *p, const ProtobufCMessage *msg,
                     const ProtobufCFieldDescriptor *f)
{
    const void *m = MEMBER(msg, f->offset);

    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)MEMBER(msg, f->quantifier_offset) == f->id;
    switch (f->label) {
    case PROTOBUF_C_LABEL_REQUIRED:
        return pos_find(p->pos, msg, f, 0) != NULL;
    case PROTOBUF_C_LABEL_OPTIONAL:
        if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) {
            const void *ptr = *(void *const *)m;
            return ptr != NULL && ptr != f->default_value;
        }
        return *(const protobuf_c_boolean *)MEMBER(msg, f->quantifier_offset) != 0;
    case PROTOBUF_C_LABEL_NONE:
        /* proto3 without presence: set means "not the zero value" (bitwise for floats) */
        switch (f->type) {
        case PROTOBUF_C_TYPE_MESSAGE:
            return *(void *const *)m != NULL;
        case PROTOBUF_C_TYPE_STRING:
            return *(char *const *)m && **(char *const *)m;
        case PROTOBUF_C_TYPE_BYTES:
            return ((const ProtobufCBinaryData *)m)->len != 0;
        default: {
            size_t sz = fa_tf_elem_size(f->type);
            static const unsigned char zero[8];
            return memcmp(m, zero, sz) != 0;
        }
        }
    default:
        return 0;
    }
}

/* Frees the current value of a singular string/bytes member when it is ours
 * (not the static default), before it is replaced (proto3 `s: "" s: "x"`). */
static void release_old(const ProtobufCFieldDescriptor *f, void *m)
{
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return; /* never set twice: the oneof check refuses it */
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        char *old = *(char **)m;
        if (old && old != f->default_value)
            free(old);
        *(char **)m = NULL;
    } else if (f->type == PROTOBUF_C_TYPE_BYTES) {
        ProtobufCBinaryData *bd = m;
        const ProtobufCBinaryData *def = f->default_value;
        if (bd->data && (!def || bd->data != def->data))
            free(bd->data);
        bd->data = NULL;
        bd->len = 0;
    }
}

/* Stores one value (already in its C representation, elem_size bytes at val)
 * in field f of msg: appended when repeated, else set with its presence. On
 * failure the value is NOT owned by msg (the caller frees it). */
static int store(struct tf_parser *p, ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f,
                 const void *val, size_t *index)
{
    size_t es = fa_tf_elem_size(f->type);
    void *m = MEMBER(msg, f->offset);

    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        size_t *n = MEMBER(msg, f->quantifier_offset);
        char **arr = m;
        if ((*n & (*n - 1)) == 0) { /* 0 or a power of two: grow */
            size_t cap = *n ? *n * 2 : 1;
            char *grown = realloc(*arr, cap * es);
            if (!grown) {
                p->oom = p->stop = 1;
                return -1;
            }
            *arr = grown;
        }
        memcpy(*arr + *n * es, val, es);
        *index = (*n)++;
        return 0;
    }
    release_old(f, m);
    memcpy(m, val, es);
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)MEMBER(msg, f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
             f->type != PROTOBUF_C_TYPE_MESSAGE)
        *(protobuf_c_boolean *)MEMBER(msg, f->quantifier_offset) = 1;
    *index = 0;
    return 0;
}

static void record(struct tf_parser *p, const ProtobufCMessage *msg,
                   const ProtobufCFieldDescriptor *f, size_t index, const struct fa_tf_token *at,
                   const ProtobufCMessage *child)
{
    if (pos_add(p->pos, msg, f, index, at->line, at->col, child) != 0)
        p->oom = p->stop = 1;
}

/* After a bad value: skip the rest of it when it looks like a value, so that
 * parsing can go on; otherwise stop (the structure is unclear). */
static void skip_bad_value(struct tf_parser *p)
{
    switch (cur(p)->type) {
    case FA_TF_IDENT:
    case FA_TF_INT:
    case FA_TF_FLOAT:
        next(p);
        break;
    case FA_TF_STRING:
        while (cur(p)->type == FA_TF_STRING)
            next(p);
        break;
    default:
        p->stop = 1;
    }
}

/* ConsumeUnsignedInteger / ConsumeSignedInteger.  Returns 0, or -1 after
 * reporting an error. */
static int consume_integer(struct tf_parser *p, const ProtobufCFieldDescriptor *f, int is_signed,
                           uint64_t max_value, int64_t min_value, uint64_t *uval, int64_t *sval)
{
    char fp[600], desc[64];
    const struct fa_tf_token *minus = NULL;
    struct fa_tf_token minus_tok;
    uint64_t v;

    if (at_symbol(p, '-')) {
        minus_tok = *cur(p);
        minus = &minus_tok;
        if (!is_signed) {
            perr(p, cur(p)->line, cur(p)->col, "`%s` (%s) cannot be negative",
                 field_path(p, f, fp, sizeof(fp)), type_name(f->type));
            next(p);
            skip_bad_value(p);
            return -1;
        }
        next(p);
    }
    if (cur(p)->type != FA_TF_INT) {
        perr(p, cur(p)->line, cur(p)->col, "`%s` (%s): expected an integer, got %s",
             field_path(p, f, fp, sizeof(fp)), type_name(f->type),
             describe(cur(p), desc, sizeof(desc)));
        skip_bad_value(p);
        return -1;
    }
    if (fa_tf_parse_uint(cur(p)->text, cur(p)->len, minus ? max_value + 1 : max_value, &v) != 0) {
        if (is_signed)
            perr(p, minus ? minus->line : cur(p)->line, minus ? minus->col : cur(p)->col,
                 "`%s` (%s): %s%.*s is out of range (%" PRId64 " to %" PRIu64 ")",
                 field_path(p, f, fp, sizeof(fp)), type_name(f->type), minus ? "-" : "",
                 (int)(cur(p)->len > 60 ? 60 : cur(p)->len), cur(p)->text, min_value, max_value);
        else
            perr(p, cur(p)->line, cur(p)->col, "`%s` (%s): %.*s is out of range (0 to %" PRIu64 ")",
                 field_path(p, f, fp, sizeof(fp)), type_name(f->type),
                 (int)(cur(p)->len > 60 ? 60 : cur(p)->len), cur(p)->text, max_value);
        next(p);
        return -1;
    }
    next(p);
    if (uval)
        *uval = v;
    if (sval) {
        if (minus)
            *sval = (v & 0x8000000000000000ull) ? INT64_MIN : -(int64_t)v;
        else
            *sval = (int64_t)v;
    }
    return 0;
}

/* ConsumeDouble: integers (decimal only), floats, inf/infinity/nan in any case. */
static int consume_double(struct tf_parser *p, const ProtobufCFieldDescriptor *f, double *out)
{
    char fp[600], desc[64];
    const struct fa_tf_token *t;
    int neg = try_symbol(p, '-');
    double v;

    t = cur(p);
    if (t->type == FA_TF_INT) {
        uint64_t u;
        if (t->len >= 2 && t->text[0] == '0' &&
            (t->text[1] == 'x' || t->text[1] == 'X' || (t->text[1] >= '0' && t->text[1] <= '7'))) {
            perr(p, t->line, t->col, "`%s` (%s): expected a decimal number, got %s",
                 field_path(p, f, fp, sizeof(fp)), type_name(f->type),
                 describe(t, desc, sizeof(desc)));
            next(p);
            return -1;
        }
        if (fa_tf_parse_uint(t->text, t->len, UINT64_MAX, &u) == 0) {
            v = (double)u;
        } else if (fa_tf_parse_float(t->text, t->len, &v) != 0) {
            p->oom = p->stop = 1;
            return -1;
        }
    } else if (t->type == FA_TF_FLOAT) {
        if (fa_tf_parse_float(t->text, t->len, &v) != 0) {
            p->oom = p->stop = 1;
            return -1;
        }
    } else if (t->type == FA_TF_IDENT) {
        char low[16];
        size_t i;
        for (i = 0; i < t->len && i + 1 < sizeof(low); i++)
            low[i] = (char)(t->text[i] >= 'A' && t->text[i] <= 'Z' ? t->text[i] - 'A' + 'a'
                                                                   : t->text[i]);
        low[i] = '\0';
        if (t->len < sizeof(low) && (!strcmp(low, "inf") || !strcmp(low, "infinity"))) {
            v = INFINITY;
        } else if (t->len < sizeof(low) && !strcmp(low, "nan")) {
            v = NAN;
        } else {
            perr(p, t->line, t->col, "`%s` (%s): expected a number, got %s",
                 field_path(p, f, fp, sizeof(fp)), type_name(f->type),
                 describe(t, desc, sizeof(desc)));
            next(p);
            return -1;
        }
    } else {
        perr(p, t->line, t->col, "`%s` (%s): expected a number, got %s",
             field_path(p, f, fp, sizeof(fp)), type_name(f->type), describe(t, desc, sizeof(desc)));
        skip_bad_value(p);
        return -1;
    }
    next(p);
    *out = neg ? -v : v;
    return 0;
}

/* ConsumeString: one or more adjacent literals. *out is malloc'ed. */
static int consume_string(struct tf_parser *p, const ProtobufCFieldDescriptor *f, char **out,
                          size_t *len)
{
    char fp[600], desc[64];

    *out = NULL;
    *len = 0;
    if (cur(p)->type != FA_TF_STRING) {
        perr(p, cur(p)->line, cur(p)->col, "`%s` (%s): expected a quoted string, got %s",
             field_path(p, f, fp, sizeof(fp)), type_name(f->type),
             describe(cur(p), desc, sizeof(desc)));
        skip_bad_value(p);
        return -1;
    }
    while (cur(p)->type == FA_TF_STRING) {
        if (fa_tf_string_append(cur(p), out, len) != 0) {
            p->oom = p->stop = 1;
            return -1;
        }
        next(p);
    }
    return 0;
}

/* What protoc 3.21 does with a float field's value: it reads a double and
 * narrows it with round-to-nearest (3.4028235e38 becomes FLT_MAX, 3.4028236e38
 * infinity, as IEEE 754 conversion does). */
static float double_to_float(double v)
{
    return (float)v;
}

/* ConsumeFieldValue for a non-message field.  Returns 0 when a value was
 * stored, -1 after an error (reported). */
static int parse_scalar(struct tf_parser *p, ProtobufCMessage *msg,
                        const ProtobufCFieldDescriptor *f, const struct fa_tf_token *name)
{
    union {
        int32_t i32;
        uint32_t u32;
        int64_t i64;
        uint64_t u64;
        float fl;
        double db;
        protobuf_c_boolean b;
        char *str;
        ProtobufCBinaryData bd;
    } v;
    char fp[600], desc[64];
    size_t index;
    uint64_t u;
    int64_t s;
    double d;

    memset(&v, 0, sizeof(v));
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (consume_integer(p, f, 1, INT32_MAX, INT32_MIN, NULL, &s) != 0)
            return -1;
        v.i32 = (int32_t)s;
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (consume_integer(p, f, 1, INT64_MAX, INT64_MIN, NULL, &s) != 0)
            return -1;
        v.i64 = s;
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (consume_integer(p, f, 0, UINT32_MAX, 0, &u, NULL) != 0)
            return -1;
        v.u32 = (uint32_t)u;
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (consume_integer(p, f, 0, UINT64_MAX, 0, &u, NULL) != 0)
            return -1;
        v.u64 = u;
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        if (consume_double(p, f, &d) != 0)
            return -1;
        v.fl = double_to_float(d);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        if (consume_double(p, f, &d) != 0)
            return -1;
        v.db = d;
        break;
    case PROTOBUF_C_TYPE_BOOL:
        if (cur(p)->type == FA_TF_INT) {
            if (consume_integer(p, f, 0, 1, 0, &u, NULL) != 0)
                return -1;
            v.b = u != 0;
        } else {
            const struct fa_tf_token *t = cur(p);
            if (t->type == FA_TF_IDENT && ((t->len == 4 && !memcmp(t->text, "true", 4)) ||
                                           (t->len == 4 && !memcmp(t->text, "True", 4)) ||
                                           (t->len == 1 && t->text[0] == 't'))) {
                v.b = 1;
            } else if (t->type == FA_TF_IDENT && ((t->len == 5 && !memcmp(t->text, "false", 5)) ||
                                                  (t->len == 5 && !memcmp(t->text, "False", 5)) ||
                                                  (t->len == 1 && t->text[0] == 'f'))) {
                v.b = 0;
            } else {
                perr(p, t->line, t->col, "`%s` (bool): expected true or false, got %s",
                     field_path(p, f, fp, sizeof(fp)), describe(t, desc, sizeof(desc)));
                skip_bad_value(p);
                return -1;
            }
            next(p);
        }
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        const ProtobufCEnumValue *ev = NULL;
        const struct fa_tf_token *t = cur(p);
        if (t->type == FA_TF_IDENT) {
            char ident[128];
            snprintf(ident, sizeof(ident), "%.*s", (int)(t->len < 127 ? t->len : 127), t->text);
            if (t->len < 127)
                ev = protobuf_c_enum_descriptor_get_value_by_name(ed, ident);
            if (!ev) {
                const char *hint = suggest_enum(ed, ident);
                perr(p, t->line, t->col, "`%s`: %s is not a value of enum %s%s%s%s",
                     field_path(p, f, fp, sizeof(fp)), describe(t, desc, sizeof(desc)), ed->name,
                     hint ? "; did you mean `" : "", hint ? hint : "", hint ? "`?" : "");
                next(p);
                return -1;
            }
            next(p);
            v.i32 = ev->value;
        } else if (t->type == FA_TF_INT || at_symbol(p, '-')) {
            unsigned line = t->line, col = t->col;
            if (consume_integer(p, f, 1, INT32_MAX, INT32_MIN, NULL, &s) != 0)
                return -1;
            ev = protobuf_c_enum_descriptor_get_value(ed, (int)s);
            if (!ev && !is_proto3(msg->descriptor)) { /* proto2 enums are closed */
                perr(p, line, col, "`%s`: %" PRId64 " is not a value of enum %s",
                     field_path(p, f, fp, sizeof(fp)), s, ed->name);
                return -1;
            }
            v.i32 = (int32_t)s;
        } else {
            perr(p, t->line, t->col, "`%s` (enum %s): expected a name or a number, got %s",
                 field_path(p, f, fp, sizeof(fp)), ed->name, describe(t, desc, sizeof(desc)));
            skip_bad_value(p);
            return -1;
        }
        break;
    }
    case PROTOBUF_C_TYPE_STRING:
    case PROTOBUF_C_TYPE_BYTES: {
        const struct fa_tf_token start = *cur(p);
        char *str;
        size_t len;
        if (consume_string(p, f, &str, &len) != 0)
            return -1;
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            if (memchr(str, '\0', len)) {
                perr(p, start.line, start.col,
                     "`%s` (string) cannot hold a NUL character (\\0); use a bytes field",
                     field_path(p, f, fp, sizeof(fp)));
                free(str);
                return -1;
            }
            if (!fa_tf_utf8_valid(str, len)) {
                perr(p, start.line, start.col,
                     "`%s` (string) is not valid UTF-8; use a bytes field for binary data",
                     field_path(p, f, fp, sizeof(fp)));
                free(str);
                return -1;
            }
            v.str = str;
        } else {
            v.bd.len = len;
            v.bd.data = (uint8_t *)str; /* never NULL, even when empty */
        }
        break;
    }
    default:
        perr(p, name->line, name->col, "`%s`: unsupported field type",
             field_path(p, f, fp, sizeof(fp)));
        p->stop = 1;
        return -1;
    }
    if (store(p, msg, f, &v, &index) != 0) {
        if (f->type == PROTOBUF_C_TYPE_STRING)
            free(v.str);
        else if (f->type == PROTOBUF_C_TYPE_BYTES)
            free(v.bd.data);
        return -1;
    }
    record(p, msg, f, index, name, NULL);
    return 0;
}

static void parse_field(struct tf_parser *p, ProtobufCMessage *msg);
static void skip_field_value(struct tf_parser *p);

/* ConsumeFieldMessage: `{ ... }` or `< ... >` into a new message of field f. */
static void parse_message_value(struct tf_parser *p, ProtobufCMessage *msg,
                                const ProtobufCFieldDescriptor *f, const struct fa_tf_token *name)
{
    const ProtobufCMessageDescriptor *sd = f->descriptor;
    char fp[600], desc[64];
    struct fa_tf_token open;
    ProtobufCMessage *child;
    size_t index, oldpath;
    char close;

    if (p->depth >= TF_MAX_DEPTH) {
        perr(p, cur(p)->line, cur(p)->col, "`%s`: messages nested more than %d deep",
             field_path(p, f, fp, sizeof(fp)), TF_MAX_DEPTH);
        p->stop = 1;
        return;
    }
    if (at_symbol(p, '{')) {
        close = '}';
    } else if (at_symbol(p, '<')) {
        close = '>';
    } else {
        perr(p, cur(p)->line, cur(p)->col, "`%s` is a message (%s): expected `{`, got %s",
             field_path(p, f, fp, sizeof(fp)), sd->name, describe(cur(p), desc, sizeof(desc)));
        p->stop = 1;
        return;
    }
    open = *cur(p);
    next(p);
    child = malloc(sd->sizeof_message);
    if (!child) {
        p->oom = p->stop = 1;
        return;
    }
    protobuf_c_message_init(sd, child);
    if (store(p, msg, f, &child, &index) != 0) {
        protobuf_c_message_free_unpacked(child, NULL);
        return;
    }
    record(p, msg, f, index, name, child);
    oldpath = path_push(p, f, index);
    p->depth++;
    while (!p->stop && !at_symbol(p, '}') && !at_symbol(p, '>')) {
        if (cur(p)->type == FA_TF_END) {
            perr(p, cur(p)->line, cur(p)->col,
                 "end of input inside `%s` (opened with `%c` at %u:%u): missing `%c`", p->path,
                 close == '}' ? '{' : '<', open.line, open.col, close);
            p->stop = 1;
            break;
        }
        parse_field(p, child);
    }
    p->depth--;
    if (!p->stop) {
        if (at_symbol(p, close)) {
            next(p);
        } else {
            perr(p, cur(p)->line, cur(p)->col,
                 "`%s` opened with `%c` at %u:%u must close with `%c`, got %s", p->path,
                 close == '}' ? '{' : '<', open.line, open.col, close,
                 describe(cur(p), desc, sizeof(desc)));
            p->stop = 1;
        }
    }
    path_pop(p, oldpath);
}

/* ConsumeField: `name: value`, `name { ... }`, `name: [ ... ]`. */
static void parse_field(struct tf_parser *p, ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const ProtobufCFieldDescriptor *f;
    struct fa_tf_token name = *cur(p);
    char fname[256], fp[600], desc[64];

    if (name.type != FA_TF_IDENT) {
        if (at_symbol(p, '['))
            perr(p, name.line, name.col,
                 "extensions and Any expansions (`[name]`) are not supported; %s has none",
                 d->name);
        else
            perr(p, name.line, name.col, "expected a field name of %s, got %s", d->name,
                 describe(&name, desc, sizeof(desc)));
        p->stop = 1;
        return;
    }
    snprintf(fname, sizeof(fname), "%.*s", (int)(name.len < 255 ? name.len : 255), name.text);
    next(p);
    f = name.len < 255 ? protobuf_c_message_descriptor_get_field_by_name(d, fname) : NULL;
    if (!f) {
        const char *hint = fa_textformat_suggest_field(d, fname);
        const char *where = NULL;
        /* perhaps it belongs one level down ("did you mean round { ... }"); an
         * exact name there beats a typo hint unless the typo is one letter */
        for (unsigned i = 0; !where && i < d->n_fields; i++) {
            const ProtobufCFieldDescriptor *sf = &d->fields[i];
            if (sf->type == PROTOBUF_C_TYPE_MESSAGE &&
                protobuf_c_message_descriptor_get_field_by_name(sf->descriptor, fname))
                where = sf->name;
        }
        if (hint && where) {
            char a[128], b[128];
            normalize(fname, a, sizeof(a));
            normalize(hint, b, sizeof(b));
            if (edit_distance(a, b, 1) > 1)
                hint = NULL;
        }
        if (hint)
            perr(p, name.line, name.col, "unknown field `%s%s%s` in %s; did you mean `%s`?",
                 p->path, p->pathlen ? "." : "", fname, d->name, hint);
        else if (where)
            perr(p, name.line, name.col,
                 "unknown field `%s%s%s` in %s; did you mean `%s { %s: ... }`?", p->path,
                 p->pathlen ? "." : "", fname, d->name, where, fname);
        else
            perr(p, name.line, name.col, "unknown field `%s%s%s` in %s", p->path,
                 p->pathlen ? "." : "", fname, d->name);
        skip_field_value(p);
        return;
    }
    if (f->label != PROTOBUF_C_LABEL_REPEATED) {
        if (has_field(p, msg, f)) {
            const struct pos_entry *e = pos_find(p->pos, msg, f, 0);
            if (e)
                perr(p, name.line, name.col,
                     "`%s` is set twice (first at %u:%u); it is not a repeated field",
                     field_path(p, f, fp, sizeof(fp)), e->line, e->col);
            else
                perr(p, name.line, name.col, "`%s` is set twice; it is not a repeated field",
                     field_path(p, f, fp, sizeof(fp)));
            skip_field_value(p);
            return;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)MEMBER(msg, f->quantifier_offset);
            if (which != 0) {
                const ProtobufCFieldDescriptor *other =
                    protobuf_c_message_descriptor_get_field(d, (unsigned)which);
                perr(p, name.line, name.col,
                     "`%s` and `%s` are members of the same oneof; set only one",
                     field_path(p, f, fp, sizeof(fp)), other ? other->name : "?");
                skip_field_value(p);
                return;
            }
        }
    }
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        try_symbol(p, ':');
    } else if (!try_symbol(p, ':')) {
        perr(p, cur(p)->line, cur(p)->col, "expected `:` after `%s`, got %s",
             field_path(p, f, fp, sizeof(fp)), describe(cur(p), desc, sizeof(desc)));
        p->stop = 1;
        return;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED && try_symbol(p, '[')) {
        if (!try_symbol(p, ']')) {
            for (;;) {
                if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                    parse_message_value(p, msg, f, &name);
                else
                    parse_scalar(p, msg, f, &name);
                if (p->stop)
                    return;
                if (try_symbol(p, ']'))
                    break;
                if (!try_symbol(p, ',')) {
                    perr(p, cur(p)->line, cur(p)->col,
                         "expected `,` or `]` in the list of `%s`, got %s",
                         field_path(p, f, fp, sizeof(fp)), describe(cur(p), desc, sizeof(desc)));
                    p->stop = 1;
                    return;
                }
            }
        }
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        parse_message_value(p, msg, f, &name);
    } else {
        parse_scalar(p, msg, f, &name);
    }
    if (p->stop)
        return;
    if (!try_symbol(p, ';'))
        try_symbol(p, ',');
}

/* ---- Skipping the value of an unknown or refused field (protoc's SkipField) ---- */

static void skip_message(struct tf_parser *p);

static void skip_scalar(struct tf_parser *p)
{
    char desc[64];

    try_symbol(p, '-');
    switch (cur(p)->type) {
    case FA_TF_IDENT:
    case FA_TF_INT:
    case FA_TF_FLOAT:
        next(p);
        return;
    case FA_TF_STRING:
        while (cur(p)->type == FA_TF_STRING)
            next(p);
        return;
    default:
        perr(p, cur(p)->line, cur(p)->col, "expected a value, got %s",
             describe(cur(p), desc, sizeof(desc)));
        p->stop = 1;
    }
}

static void skip_list(struct tf_parser *p)
{
    char desc[64];

    next(p); /* [ */
    if (try_symbol(p, ']'))
        return;
    for (;;) {
        if (at_symbol(p, '{') || at_symbol(p, '<'))
            skip_message(p);
        else
            skip_scalar(p);
        if (p->stop || try_symbol(p, ']'))
            return;
        if (!try_symbol(p, ',')) {
            perr(p, cur(p)->line, cur(p)->col, "expected `,` or `]` in a list, got %s",
                 describe(cur(p), desc, sizeof(desc)));
            p->stop = 1;
            return;
        }
    }
}

static void skip_message(struct tf_parser *p)
{
    char close = at_symbol(p, '{') ? '}' : '>', desc[64];
    struct fa_tf_token open = *cur(p);

    if (p->depth >= TF_MAX_DEPTH) {
        perr(p, open.line, open.col, "messages nested more than %d deep", TF_MAX_DEPTH);
        p->stop = 1;
        return;
    }
    next(p);
    p->depth++;
    while (!p->stop && !at_symbol(p, '}') && !at_symbol(p, '>')) {
        if (cur(p)->type != FA_TF_IDENT) {
            if (cur(p)->type == FA_TF_END)
                perr(p, cur(p)->line, cur(p)->col,
                     "end of input inside the message opened at %u:%u: missing `%c`", open.line,
                     open.col, close);
            else
                perr(p, cur(p)->line, cur(p)->col, "expected a field name, got %s",
                     describe(cur(p), desc, sizeof(desc)));
            p->stop = 1;
            break;
        }
        next(p);
        skip_field_value(p);
    }
    p->depth--;
    if (!p->stop) {
        if (at_symbol(p, close)) {
            next(p);
        } else {
            perr(p, cur(p)->line, cur(p)->col,
                 "the message opened at %u:%u must close with `%c`, got %s", open.line, open.col,
                 close, describe(cur(p), desc, sizeof(desc)));
            p->stop = 1;
        }
    }
}

static void skip_field_value(struct tf_parser *p)
{
    char desc[64];

    if (try_symbol(p, ':')) {
        if (at_symbol(p, '{') || at_symbol(p, '<'))
            skip_message(p);
        else if (at_symbol(p, '['))
            skip_list(p);
        else
            skip_scalar(p);
    } else if (at_symbol(p, '{') || at_symbol(p, '<')) {
        skip_message(p);
    } else if (at_symbol(p, '[')) {
        skip_list(p);
    } else {
        perr(p, cur(p)->line, cur(p)->col, "expected `:` or `{` after a field name, got %s",
             describe(cur(p), desc, sizeof(desc)));
        p->stop = 1;
        return;
    }
    if (!p->stop && !try_symbol(p, ';'))
        try_symbol(p, ',');
}

/* Required fields of proto2 (what protoc's parser checks unless partial). */
static void check_required(struct tf_parser *p, const ProtobufCMessage *msg, int depth)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;

    if (depth > TF_MAX_DEPTH)
        return;
    for (unsigned i = 0; i < d->n_fields && !p->stop; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *m = MEMBER(msg, f->offset);
        if (f->label == PROTOBUF_C_LABEL_REQUIRED && !pos_find(p->pos, msg, f, 0)) {
            unsigned line = 1, col = 1;
            char fp[600];
            fa_textformat_position_of(p->pos, msg, &line, &col);
            perr(p, line, col, "missing required field `%s`", field_path(p, f, fp, sizeof(fp)));
        }
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)MEMBER(msg, f->quantifier_offset);
            for (size_t k = 0; k < n; k++) {
                size_t old = path_push(p, f, k);
                check_required(p, (*(ProtobufCMessage *const *const *)m)[k], depth + 1);
                path_pop(p, old);
            }
        } else if ((!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) ||
                    *(const uint32_t *)MEMBER(msg, f->quantifier_offset) == f->id) &&
                   *(ProtobufCMessage *const *)m) {
            size_t old = path_push(p, f, 0);
            check_required(p, *(ProtobufCMessage *const *)m, depth + 1);
            path_pop(p, old);
        }
    }
}

int fa_textformat_parse_ex(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                           const fa_textformat_parse_opts *opts, ProtobufCMessage **out,
                           fa_error *err)
{
    struct tf_parser *p;
    ProtobufCMessage *msg = NULL;
    int rc = 0;

    *out = NULL;
    if (opts && opts->positions)
        *opts->positions = NULL;
    if (!d || (!text && len))
        return fa_errorf(err, FA_ERR_INVAL, "fa_textformat_parse: no descriptor or text");
    if (len > TF_MAX_INPUT)
        return fa_errorf(err, FA_ERR_TOOBIG, "%s: text of %zu bytes exceeds the 1 GiB limit",
                         opts && opts->filename ? opts->filename : "<input>", len);
    p = calloc(1, sizeof(*p));
    if (!p)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    p->file = opts && opts->filename ? opts->filename : "<input>";
    p->diags = opts ? opts->diags : NULL;
    p->max_errors = opts && opts->max_errors ? opts->max_errors : TF_DEFAULT_MAX_ERRORS;
    p->pos = calloc(1, sizeof(*p->pos));
    msg = malloc(d->sizeof_message);
    if (!p->pos || !msg) {
        free(msg); /* not initialised: not for protobuf_c_message_free_unpacked */
        msg = NULL;
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    protobuf_c_message_init(d, msg);
    fa_tf_lex_init(&p->lx, text ? text : "", len, lex_error_cb, p);
    while (!p->stop && cur(p)->type != FA_TF_END)
        parse_field(p, msg);
    if (!p->stop && p->nerr == 0)
        check_required(p, msg, 0);
    if (p->oom) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "%s: out of memory while parsing", p->file);
    } else if (p->nerr) {
        if (p->nerr > 1)
            rc = fa_errorf(err, FA_ERR_PARSE, "%s (and %u more)", p->first, p->nerr - 1);
        else
            rc = fa_errorf(err, FA_ERR_PARSE, "%s", p->first);
    }
out:
    if (rc == 0) {
        *out = msg;
        if (opts && opts->positions) {
            *opts->positions = p->pos;
            p->pos = NULL;
        }
    } else if (msg) {
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    fa_textformat_positions_del(p->pos);
    free(p);
    return rc;
}

int fa_textformat_parse(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                        const char *filename, ProtobufCMessage **out, fa_error *err)
{
    fa_textformat_parse_opts o = {0};

    o.filename = filename;
    return fa_textformat_parse_ex(d, text, len, &o, out, err);
}
