/* textformat_print.c - protobuf-c message -> canonical text format. */
#include "proto/textformat.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/textformat_internal.h"

#define MEMBER(msg, off) ((const void *)((const char *)(msg) + (off)))

void fa_tf_buf_indent(fa_strbuf *b, int depth)
{
    for (int i = 0; i < depth; i++)
        fa_strbuf_put(b, "  ", 2);
}

size_t fa_tf_elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_ENUM: return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: return 8;
    case PROTOBUF_C_TYPE_FLOAT: return sizeof(float);
    case PROTOBUF_C_TYPE_DOUBLE: return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    default: return 0;
    }
}

/* protobuf-c's own presence rules (protobuf_c_message_pack), so that what
 * we print is exactly what would be encoded. */
int fa_tf_field_present(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f)
{
    const void *mem = MEMBER(m, f->offset);

    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return *(const size_t *)MEMBER(m, f->quantifier_offset) != 0;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        if (*(const uint32_t *)MEMBER(m, f->quantifier_offset) != f->id)
            return 0;
        if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) {
            const void *ptr = *(const void *const *)mem;
            return ptr != NULL && ptr != f->default_value;
        }
        return 1;
    }
    switch (f->label) {
    case PROTOBUF_C_LABEL_REQUIRED:
        return f->type != PROTOBUF_C_TYPE_MESSAGE || *(const void *const *)mem != NULL;
    case PROTOBUF_C_LABEL_OPTIONAL:
        if (f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) {
            const void *ptr = *(const void *const *)mem;
            return ptr != NULL && ptr != f->default_value;
        }
        return *(const protobuf_c_boolean *)MEMBER(m, f->quantifier_offset) != 0;
    case PROTOBUF_C_LABEL_NONE:
        switch (f->type) { /* protobuf-c's field_is_zeroish */
        case PROTOBUF_C_TYPE_STRING: {
            const char *s = *(const char *const *)mem;
            return s != NULL && *s != '\0';
        }
        case PROTOBUF_C_TYPE_BYTES: return ((const ProtobufCBinaryData *)mem)->len != 0;
        case PROTOBUF_C_TYPE_MESSAGE: return *(const void *const *)mem != NULL;
        case PROTOBUF_C_TYPE_FLOAT: return *(const float *)mem != 0;
        case PROTOBUF_C_TYPE_DOUBLE: return *(const double *)mem != 0;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64: return *(const uint64_t *)mem != 0;
        default: return *(const uint32_t *)mem != 0;
        }
    default: return 0;
    }
}

void fa_tf_print_quoted(fa_strbuf *b, const uint8_t *s, size_t n, int utf8_ok)
{
    size_t i = 0, run;

    fa_strbuf_put(b, "\"", 1);
    while (i < n) {
        unsigned c = s[i];
        char esc[8];
        switch (c) {
        case '\n':
            fa_strbuf_put(b, "\\n", 2);
            i++;
            continue;
        case '\r':
            fa_strbuf_put(b, "\\r", 2);
            i++;
            continue;
        case '\t':
            fa_strbuf_put(b, "\\t", 2);
            i++;
            continue;
        case '"':
            fa_strbuf_put(b, "\\\"", 2);
            i++;
            continue;
        case '\'':
            fa_strbuf_put(b, "\\'", 2);
            i++;
            continue;
        case '\\':
            fa_strbuf_put(b, "\\\\", 2);
            i++;
            continue;
        default: break;
        }
        if (c >= 0x20 && c < 0x7f) {
            for (run = i; run < n && s[run] >= 0x20 && s[run] < 0x7f && s[run] != '"' &&
                          s[run] != '\'' && s[run] != '\\';
                 run++)
                ;
            fa_strbuf_put(b, (const char *)s + i, run - i);
            i = run;
            continue;
        }
        if (c >= 0x80 && utf8_ok) {
            size_t len = (c & 0xE0) == 0xC0   ? 2
                         : (c & 0xF0) == 0xE0 ? 3
                         : (c & 0xF8) == 0xF0 ? 4
                                              : 0;
            if (len && i + len <= n && fa_tf_utf8_valid((const char *)s + i, len)) {
                fa_strbuf_put(b, (const char *)s + i, len);
                i += len;
                continue;
            }
        }
        /* three octal digits, so that a following digit is never absorbed */
        snprintf(esc, sizeof(esc), "\\%03o", c);
        fa_strbuf_put(b, esc, 4);
        i++;
    }
    fa_strbuf_put(b, "\"", 1);
}

/* Shortest %g form that reads back (as protoc's parser reads it) to the same bits. */
static void print_double(fa_strbuf *b, double v)
{
    char s[40];

    if (isnan(v)) {
        fa_strbuf_puts(b, signbit(v) ? "-nan" : "nan");
        return;
    }
    if (isinf(v)) {
        fa_strbuf_puts(b, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        double back;
        snprintf(s, sizeof(s), "%.*g", prec, v);
        back = strtod(s, NULL);
        if (memcmp(&back, &v, sizeof(v)) == 0)
            break;
    }
    fa_strbuf_puts(b, s);
}

static void print_float(fa_strbuf *b, float v)
{
    char s[40];

    if (isnan(v)) {
        fa_strbuf_puts(b, signbit(v) ? "-nan" : "nan");
        return;
    }
    if (isinf(v)) {
        fa_strbuf_puts(b, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 6; prec <= 9; prec++) {
        float back;
        snprintf(s, sizeof(s), "%.*g", prec, (double)v);
        back = (float)strtod(s, NULL); /* the parser reads a double, then narrows */
        if (memcmp(&back, &v, sizeof(v)) == 0)
            break;
    }
    fa_strbuf_puts(b, s);
}

void fa_tf_print_value(fa_strbuf *b, const ProtobufCFieldDescriptor *f, const void *mem)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: fa_strbuf_printf(b, "%" PRId32, *(const int32_t *)mem); break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: fa_strbuf_printf(b, "%" PRIu32, *(const uint32_t *)mem); break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: fa_strbuf_printf(b, "%" PRId64, *(const int64_t *)mem); break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: fa_strbuf_printf(b, "%" PRIu64, *(const uint64_t *)mem); break;
    case PROTOBUF_C_TYPE_FLOAT: print_float(b, *(const float *)mem); break;
    case PROTOBUF_C_TYPE_DOUBLE: print_double(b, *(const double *)mem); break;
    case PROTOBUF_C_TYPE_BOOL:
        fa_strbuf_puts(b, *(const protobuf_c_boolean *)mem ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)mem;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(f->descriptor, v);
        if (ev)
            fa_strbuf_puts(b, ev->name);
        else
            fa_strbuf_printf(b, "%d", v);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(const char *const *)mem;
        if (!s)
            s = "";
        fa_tf_print_quoted(b, (const uint8_t *)s, strlen(s), 1);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = mem;
        fa_tf_print_quoted(b, bd->data, bd->data ? bd->len : 0, 0);
        break;
    }
    default: break;
    }
}

static void print_message(fa_strbuf *b, const ProtobufCMessage *m, int depth);

static void print_element(fa_strbuf *b, const ProtobufCFieldDescriptor *f, const void *mem,
                          int depth)
{
    fa_tf_buf_indent(b, depth);
    fa_strbuf_puts(b, f->name);
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        fa_strbuf_put(b, " {\n", 3);
        print_message(b, *(const ProtobufCMessage *const *)mem, depth + 1);
        fa_tf_buf_indent(b, depth);
        fa_strbuf_put(b, "}\n", 2);
    } else {
        fa_strbuf_put(b, ": ", 2);
        fa_tf_print_value(b, f, mem);
        fa_strbuf_put(b, "\n", 1);
    }
}

static void print_message(fa_strbuf *b, const ProtobufCMessage *m, int depth)
{
    const ProtobufCMessageDescriptor *d;

    if (!m)
        return;
    d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields && !b->oom; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *mem = MEMBER(m, f->offset);
        if (!fa_tf_field_present(m, f))
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)MEMBER(m, f->quantifier_offset);
            size_t es = fa_tf_elem_size(f->type);
            const char *arr = *(const char *const *)mem;
            for (size_t k = 0; k < n && arr; k++)
                print_element(b, f, arr + k * es, depth);
        } else {
            print_element(b, f, mem, depth);
        }
    }
}

int fa_textformat_print(const ProtobufCMessage *m, char **out, size_t *len, fa_error *err)
{
    fa_strbuf b = {0};

    *out = NULL;
    if (len)
        *len = 0;
    if (!m)
        return fa_errorf(err, FA_ERR_INVAL, "fa_textformat_print: no message");
    fa_strbuf_put(&b, "", 0); /* an empty message prints as "" */
    print_message(&b, m, 0);
    if (b.oom) {
        free(b.data);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory printing %s", m->descriptor->name);
    }
    *out = b.data;
    if (len)
        *len = b.len;
    return 0;
}
