/* textformat.h - protobuf text format over protobuf-c descriptors.
 *
 * protobuf-c has no text format, so this is ours.  It works for any message
 * type protoc-c generates (proto2 and proto3) and accepts what protoc 3.21
 * (`protoc --encode`, C++ TextFormat::Parser) accepts:
 *
 *   # comments            name: value            name { ... }  name < ... >
 *   name: [1, 2, 3]       name [ {a: 1}, {a: 2} ]  (the colon is optional before a message)
 *   fields separated by whitespace, `,` or `;`
 *   integers in decimal, hex (0x1F) and octal (017), range-checked per type
 *   floats: 1, 1.5, .5, 1e-3, 1.5f, inf, -inf, infinity, nan (case-insensitive)
 *   bools: true false True False t f 1 0
 *   enums by name or number; strings and bytes in '...' or "..." with C
 *   escapes (\n \t \\ \' \" \x41 \101 \u00e9 \U0001F600) and adjacent
 *   literals concatenated ("a" "b" is "ab")
 *
 * and rejects what protoc rejects: unknown fields, a non-repeated field set
 * twice, two members of one oneof, values out of range for their type,
 * malformed tokens, missing required (proto2) fields.  Extensions and
 * google.protobuf.Any expansion (`[name]`) are not supported (protoc-c
 * generates no extension registry); map fields read as their repeated entry
 * messages (`m { key: "a" value: 1 }`), in the order written.
 *
 * Deliberate differences (tests/textformat/stricter/ lists each, and the
 * differential test checks that protoc still accepts them):
 *   - a `string` field must hold valid UTF-8 (protoc logs an error and writes
 *     the bytes anyway) and no NUL character (protobuf-c strings are
 *     NUL-terminated and would silently lose the rest; use `bytes`);
 *   - missing proto2 `required` fields are an error (protoc --encode allows
 *     partial messages, but protobuf-c would encode a zero for them);
 *   - messages nest at most 100 deep (protoc's text parser has no limit and
 *     overflows its stack near 20000).
 * Not representable in protobuf-c at all: proto3 `optional` (protoc-c 1.4
 * refuses it), and -0.0 in a proto3 float/double field without presence
 * (protoc writes it; protobuf-c treats it as the zero default and omits it).
 *
 * The parsed message encodes (protobuf_c_message_pack) byte for byte as
 * protoc encodes the same text: fields the text sets are present (proto2
 * `has_` flags set, strings freshly allocated so they never alias the
 * default), fields it does not set keep the descriptor's defaults and are
 * absent on the wire.  tests/integration/it_textformat_protoc.sh checks this
 * against protoc over tests/textformat/.
 *
 * Errors are "file:line:column: message" naming the field's path
 * (`round.min_regions`, `regions[2].id`), and an unknown field suggests the
 * nearest known name ("did you mean `min_regions`?").  The parser never
 * crashes or leaks on any input; it is fuzzed (tests/fuzz).
 */
#ifndef FA_TEXTFORMAT_H
#define FA_TEXTFORMAT_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

#include "common/fa_err.h"
#include "proto/diags.h"

/* Where each field of a parsed message was written, for messages about
 * meaning that come after parsing ("threshold 5 exceeds the 3 regions" at
 * the threshold's line and column).  Keys are the message object, the field
 * name and, for repeated fields, the element index.  Valid as long as the
 * parsed message is not freed or modified structurally. */
typedef struct fa_textformat_positions fa_textformat_positions;

/* Parser options; zero-initialise and set what you need. */
typedef struct fa_textformat_parse_opts {
    const char *filename;                /* used in messages; NULL means "<input>" */
    fa_diags *diags;                     /* when not NULL, every error is appended here */
    unsigned max_errors;                 /* stop after this many errors; 0 means 50 */
    fa_textformat_positions **positions; /* when not NULL, receives the positions
                                            table on success (free with
                                            fa_textformat_positions_del) */
} fa_textformat_parse_opts;

/* Parses len bytes of text (not necessarily NUL-terminated) as a message of
 * type d.  On success *out is a new message (free it with
 * protobuf_c_message_free_unpacked(*out, NULL)).  On failure *out is NULL,
 * err holds the first error ("(and N more)"), and opts->diags, when given,
 * every error.  opts may be NULL.
 * Returns 0, FA_ERR_PARSE (the text is not a valid message), FA_ERR_TOOBIG
 * (len over 1 GiB) or FA_ERR_NOMEM. */
int fa_textformat_parse_ex(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                           const fa_textformat_parse_opts *opts, ProtobufCMessage **out,
                           fa_error *err);

/* fa_textformat_parse_ex with only a filename. */
int fa_textformat_parse(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                        const char *filename, ProtobufCMessage **out, fa_error *err);

/* Prints m as canonical text format: one field per line in field-number
 * order, two-space indentation, messages as `name {`...`}`, floats in the
 * shortest form that reads back to the same bits, strings and bytes
 * double-quoted with C escapes (valid UTF-8 in `string` fields kept as is).
 * Parsing the output (with this parser or protoc) gives a message with the
 * same binary encoding, except that NaN payloads are not kept (text format
 * has only `nan` and `-nan`) and unknown fields (kept by protobuf-c when it
 * unpacks a binary of a newer schema) are not printed.  *out is malloc'ed and NUL-terminated; *len
 * (when not NULL) excludes the NUL.  Returns 0 or FA_ERR_NOMEM. */
int fa_textformat_print(const ProtobufCMessage *m, char **out, size_t *len, fa_error *err);

/* Finds where field `field` of message `msg` (an object inside the parsed
 * message) was written; `index` is the element for repeated fields, 0
 * otherwise.  Sets *line and *col (1-based) and returns 0, or returns
 * FA_ERR_NOTFOUND when the text did not set it. */
int fa_textformat_position(const fa_textformat_positions *p, const ProtobufCMessage *msg,
                           const char *field, size_t index, unsigned *line, unsigned *col);

/* Finds where message object `msg` was opened (the position of the field
 * name whose value it is).  Returns 0 or FA_ERR_NOTFOUND (the top-level
 * message, or a message the text did not write). */
int fa_textformat_position_of(const fa_textformat_positions *p, const ProtobufCMessage *msg,
                              unsigned *line, unsigned *col);

/* Frees the table.  NULL is a no-op. */
void fa_textformat_positions_del(fa_textformat_positions *p);

/* The field of d whose name is nearest to `name` (edit distance, ignoring
 * case and underscores), or NULL when none is close enough to be a likely
 * typo.  Used for "did you mean" hints; exposed for the config checker. */
const char *fa_textformat_suggest_field(const ProtobufCMessageDescriptor *d, const char *name);

#endif
