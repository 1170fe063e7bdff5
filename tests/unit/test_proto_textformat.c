/* Unit tests of the text-format parser and printer (proto/textformat.h).
 * The byte-for-byte comparison with protoc over the corpus is
 * tests/integration/it_textformat_protoc.sh; this file checks the C API:
 * the values and presence flags in protobuf-c structs, error messages and
 * their positions, the positions table, suggestions, and the printer. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "config.pb-c.h"
#include "proto/textformat.h"
#include "testmsg.pb-c.h"
#include "testmsg3.pb-c.h"

static ProtobufCMessage *parse_ok(const ProtobufCMessageDescriptor *d, const char *text)
{
    ProtobufCMessage *m = NULL;
    fa_error err = {0};
    int rc = fa_textformat_parse(d, text, strlen(text), "t.txtpb", &m, &err);

    if (rc != 0)
        fail_msg("parse failed: %s", err.msg);
    assert_non_null(m);
    return m;
}

/* Parses text that must fail; returns the error message (static). */
static const char *parse_err(const ProtobufCMessageDescriptor *d, const char *text)
{
    static fa_error err;
    ProtobufCMessage *m = (ProtobufCMessage *)&err; /* must be reset to NULL */
    int rc;

    memset(&err, 0, sizeof(err));
    rc = fa_textformat_parse(d, text, strlen(text), "t.txtpb", &m, &err);
    assert_int_equal(rc, FA_ERR_PARSE);
    assert_null(m);
    assert_int_equal(err.code, FA_ERR_PARSE);
    return err.msg;
}

static void test_values_and_presence(void **state)
{
    Fatest__All *a;
    (void)state;

    a = (Fatest__All *)parse_ok(&fatest__all__descriptor,
                                "i32: -5 u64: 0xFFFFFFFFFFFFFFFF str: 'h\\u00e9' by: \"\\0\\001\" "
                                "b: t color: BLUE inner < a: 1 kids [{a: 2}, {a: 3}] > "
                                "r_str: [\"x\", 'y' \"z\"] o_str: \"one\" db: -inf fl: 1.5f");
    assert_true(a->has_i32);
    assert_int_equal(a->i32, -5);
    assert_true(a->has_u64);
    assert_true(a->u64 == UINT64_MAX);
    assert_string_equal(a->str, "h\xc3\xa9");
    assert_true(a->has_by);
    assert_int_equal(a->by.len, 2);
    assert_memory_equal(a->by.data, "\0\1", 2);
    assert_true(a->has_b && a->b);
    assert_int_equal(a->color, FATEST__COLOR__BLUE);
    assert_non_null(a->inner);
    assert_int_equal(a->inner->n_kids, 2);
    assert_int_equal(a->inner->kids[1]->a, 3);
    assert_int_equal(a->n_r_str, 2);
    assert_string_equal(a->r_str[1], "yz");
    assert_int_equal(a->choice_case, FATEST__ALL__CHOICE_O_STR);
    assert_string_equal(a->o_str, "one");
    assert_true(isinf(a->db) && a->db < 0);
    assert_true(a->fl == 1.5f);
    /* what the text did not set keeps its default and is absent */
    assert_false(a->has_i64);
    assert_false(a->has_d_i32);
    assert_int_equal(a->d_i32, -7);
    assert_string_equal(a->d_str, "hi");
    assert_null(a->child);
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

static void test_empty_and_unterminated_input(void **state)
{
    ProtobufCMessage *m = NULL;
    fa_error err = {0};
    char *buf;
    (void)state;

    /* empty text: the default message, nothing on the wire */
    assert_int_equal(fa_textformat_parse(&fatest__all__descriptor, "", 0, NULL, &m, &err), 0);
    assert_int_equal(protobuf_c_message_get_packed_size(m), 0);
    protobuf_c_message_free_unpacked(m, NULL);
    assert_int_equal(fa_textformat_parse(&fatest__all__descriptor, NULL, 0, NULL, &m, &err), 0);
    protobuf_c_message_free_unpacked(m, NULL);

    /* the text need not be NUL-terminated: a buffer ending inside a string */
    buf = malloc(9);
    memcpy(buf, "str: \"ab", 8);
    buf[8] = 'c';
    assert_int_equal(fa_textformat_parse(&fatest__all__descriptor, buf, 9, "u", &m, &err),
                     FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "u:1:6: string has no closing \""));
    memcpy(buf, "i32: 1234", 9);
    assert_int_equal(fa_textformat_parse(&fatest__all__descriptor, buf, 9, "u", &m, &err), 0);
    assert_int_equal(((Fatest__All *)m)->i32, 1234);
    protobuf_c_message_free_unpacked(m, NULL);
    free(buf);
}

static void test_error_messages(void **state)
{
    (void)state;
    assert_string_equal(parse_err(&fatest__all__descriptor, "i32: 1\n  i33: 2\n"),
                        "t.txtpb:2:3: unknown field `i33` in fatest.All; did you mean `i32`?");
    assert_string_equal(parse_err(&fatest__all__descriptor, "inner {\n  kids { b: 1 }\n}"),
                        "t.txtpb:2:10: unknown field `inner.kids[0].b` in fatest.Inner");
    assert_string_equal(
        parse_err(&fatest__all__descriptor, "u32: 4294967296"),
        "t.txtpb:1:6: `u32` (uint32): 4294967296 is out of range (0 to 4294967295)");
    assert_string_equal(
        parse_err(&fatest__all__descriptor, "i32: 1 i32: 2"),
        "t.txtpb:1:8: `i32` is set twice (first at 1:1); it is not a repeated field");
    assert_string_equal(
        parse_err(&fatest__all__descriptor, "o_int: 1 o_msg {}"),
        "t.txtpb:1:10: `o_msg` and `o_int` are members of the same oneof; set only one");
    assert_string_equal(parse_err(&fatest__all__descriptor, "color: BLU"),
                        "t.txtpb:1:8: `color`: `BLU` is not a value of enum fatest.Color; did you "
                        "mean `BLUE`?");
    assert_string_equal(parse_err(&fatest__all__descriptor, "inner { a: 1"),
                        "t.txtpb:1:13: end of input inside `inner` (opened with `{` at 1:7): "
                        "missing `}`");
    assert_string_equal(parse_err(&fatest__all__descriptor, "str: \"\\xff\""),
                        "t.txtpb:1:6: `str` (string) is not valid UTF-8; use a bytes field for "
                        "binary data");
    assert_string_equal(parse_err(&fatest__with_required__descriptor, "note: \"x\""),
                        "t.txtpb:1:1: missing required field `id`");
    assert_string_equal(parse_err(&fedagg__aggregator_config__descriptor, "min_regions: 3"),
                        "t.txtpb:1:1: unknown field `min_regions` in fedagg.AggregatorConfig; did "
                        "you mean `round { min_regions: ... }`?");
    /* columns count characters, not bytes */
    assert_string_equal(parse_err(&fatest__all__descriptor, "str: \"é\" i32: x"),
                        "t.txtpb:1:15: `i32` (int32): expected an integer, got `x`");
}

static void test_all_errors_collected(void **state)
{
    const char *text = "i32: 99999999999\ncolor: NOPE\nnope: 1\nu32: -1\nb: 2\ni64: 1 }\ni64: 2\n";
    fa_textformat_parse_opts o = {0};
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    fa_error err = {0};
    (void)state;

    assert_int_equal(fa_diags_new(&d), 0);
    o.filename = "many";
    o.diags = d;
    assert_int_equal(
        fa_textformat_parse_ex(&fatest__all__descriptor, text, strlen(text), &o, &m, &err),
        FA_ERR_PARSE);
    assert_null(m);
    /* value errors do not stop the parser; the stray `}` does */
    assert_int_equal(fa_diags_count(d), 6);
    assert_non_null(strstr(fa_diags_get(d, 0), "many:1:6: "));
    assert_non_null(strstr(fa_diags_get(d, 1), "many:2:8: "));
    assert_non_null(strstr(fa_diags_get(d, 2), "many:3:1: unknown field `nope`"));
    assert_non_null(strstr(fa_diags_get(d, 3), "many:4:6: `u32` (uint32) cannot be negative"));
    assert_non_null(strstr(fa_diags_get(d, 4), "many:5:4: `b` (bool): 2 is out of range"));
    assert_non_null(strstr(fa_diags_get(d, 5), "many:6:8: expected a field name"));
    assert_non_null(strstr(err.msg, "(and 5 more)"));
    fa_diags_del(d);

    /* max_errors bounds the work on garbage */
    assert_int_equal(fa_diags_new(&d), 0);
    o.diags = d;
    o.max_errors = 2;
    assert_int_equal(
        fa_textformat_parse_ex(&fatest__all__descriptor, text, strlen(text), &o, &m, &err),
        FA_ERR_PARSE);
    assert_int_equal(fa_diags_count(d), 2);
    fa_diags_del(d);
}

static void test_positions(void **state)
{
    const char *text = "# header\nround {\n  threshold: 2\n}\nregions { id: \"a\" }\n"
                       "regions {\n    id: \"b\"\n}\nmodel { hidden: [1, 2] }\n";
    fa_textformat_positions *pos = NULL;
    fa_textformat_parse_opts o = {0};
    Fedagg__AggregatorConfig *c = NULL;
    fa_error err = {0};
    unsigned line = 0, col = 0;
    (void)state;

    o.filename = "p";
    o.positions = &pos;
    assert_int_equal(fa_textformat_parse_ex(&fedagg__aggregator_config__descriptor, text,
                                            strlen(text), &o, (ProtobufCMessage **)&c, &err),
                     0);
    assert_non_null(pos);
    assert_int_equal(fa_textformat_position(pos, &c->round->base, "threshold", 0, &line, &col), 0);
    assert_int_equal(line, 3);
    assert_int_equal(col, 3);
    assert_int_equal(fa_textformat_position(pos, &c->regions[1]->base, "id", 0, &line, &col), 0);
    assert_int_equal(line, 7);
    assert_int_equal(col, 5);
    assert_int_equal(fa_textformat_position(pos, &c->base, "regions", 1, &line, &col), 0);
    assert_int_equal(line, 6);
    assert_int_equal(fa_textformat_position(pos, &c->model->base, "hidden", 1, &line, &col), 0);
    assert_int_equal(line, 9);
    assert_int_equal(col, 9);
    assert_int_equal(fa_textformat_position_of(pos, &c->regions[1]->base, &line, &col), 0);
    assert_int_equal(line, 6);
    assert_int_equal(col, 1);
    /* not written */
    assert_int_equal(fa_textformat_position(pos, &c->round->base, "min_regions", 0, &line, &col),
                     FA_ERR_NOTFOUND);
    assert_int_equal(fa_textformat_position(pos, &c->base, "no_such_field", 0, &line, &col),
                     FA_ERR_NOTFOUND);
    assert_int_equal(fa_textformat_position_of(pos, &c->base, &line, &col), FA_ERR_NOTFOUND);
    fa_textformat_positions_del(pos);
    fa_textformat_positions_del(NULL);
    protobuf_c_message_free_unpacked(&c->base, NULL);
}

static void test_suggestions(void **state)
{
    const ProtobufCMessageDescriptor *r = &fedagg__round_policy__descriptor;
    (void)state;

    assert_string_equal(fa_textformat_suggest_field(r, "min_region"), "min_regions");
    assert_string_equal(fa_textformat_suggest_field(r, "MinRegions"), "min_regions");
    assert_string_equal(fa_textformat_suggest_field(r, "treshold"), "threshold");
    assert_string_equal(fa_textformat_suggest_field(r, "advertise_deadline"),
                        "advertise_deadline_ms");
    assert_null(fa_textformat_suggest_field(r, "xyzzy"));
    assert_null(fa_textformat_suggest_field(r, "a"));
}

static void test_printer_canonical(void **state)
{
    Fatest__All *a;
    fa_error err = {0};
    char *text = NULL;
    size_t len = 0;
    (void)state;

    a = (Fatest__All *)parse_ok(
        &fatest__all__descriptor,
        "r_i32: [3, 1] color: MINUS str: \"q\\\"\\n\\\\é\" by: \"\\x00\\3779\" "
        "db: 0.1 fl: 0.1 inner { kids {} } d_fl: -nan r_db: [-0.0, 1e300]");
    assert_int_equal(fa_textformat_print(&a->base, &text, &len, &err), 0);
    assert_string_equal(text, "fl: 0.1\n"
                              "db: 0.1\n"
                              "str: \"q\\\"\\n\\\\é\"\n"
                              "by: \"\\000\\3779\"\n"
                              "color: MINUS\n"
                              "inner {\n"
                              "  kids {\n"
                              "  }\n"
                              "}\n"
                              "r_i32: 3\n"
                              "r_i32: 1\n"
                              "r_db: -0\n"
                              "r_db: 1e+300\n"
                              "d_fl: -nan\n");
    assert_int_equal(len, strlen(text));
    free(text);
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

/* print -> parse gives the same encoding, for values that need care */
static void test_print_round_trip(void **state)
{
    static const char *const cases[] = {
        "fl: 3.4028235e38 db: 4.9e-324 r_fl: [1e-45, 0.3333333, -0.0, nan, -nan, inf]",
        "r_db: [0.1, 0.2, 0.30000000000000004, 1e23, 123456789012345678, -1.5e-300]",
        "i64: -9223372036854775808 sf64: -1 s32: -2147483648 u32: 4294967295 f64: 0",
        "by: \"\\001\\0012\\n\\t\\\"'\\\\\\377\" r_by: [\"\", \"\\x80\"] str: \"\\U0001F600\"",
        "o_enum: RED p_color: [MINUS, BLUE] r_b: [true, false] d_str: \"hi\" d_i32: -7",
        "child { child { r_inner [{kids [{a: 1}]}] } }",
    };
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ProtobufCMessage *m = parse_ok(&fatest__all__descriptor, cases[i]), *m2;
        size_t l1 = protobuf_c_message_get_packed_size(m), l2, tlen;
        uint8_t *b1 = malloc(l1 + 1), *b2;
        fa_error err = {0};
        char *text;
        protobuf_c_message_pack(m, b1);
        assert_int_equal(fa_textformat_print(m, &text, &tlen, &err), 0);
        m2 = parse_ok(&fatest__all__descriptor, text);
        l2 = protobuf_c_message_get_packed_size(m2);
        b2 = malloc(l2 + 1);
        protobuf_c_message_pack(m2, b2);
        if (l1 != l2 || memcmp(b1, b2, l1) != 0)
            fail_msg("round trip of case %zu changed the encoding; printed:\n%s", i, text);
        free(text);
        free(b1);
        free(b2);
        protobuf_c_message_free_unpacked(m, NULL);
        protobuf_c_message_free_unpacked(m2, NULL);
    }
}

static void test_proto3(void **state)
{
    Fatest3__Scalars *s;
    char *text;
    fa_error err = {0};
    (void)state;

    /* zero values are not "set": writing them again is allowed, and they
     * are neither encoded nor printed */
    s = (Fatest3__Scalars *)parse_ok(&fatest3__scalars__descriptor,
                                     "i32: 0 i32: 7 str: \"\" level: 42 p_int: 0 b: false");
    assert_int_equal(s->i32, 7);
    assert_int_equal(s->level, 42); /* open enum */
    assert_int_equal(s->pick_case, FATEST3__SCALARS__PICK_P_INT);
    assert_int_equal(fa_textformat_print(&s->base, &text, NULL, &err), 0);
    assert_string_equal(text, "i32: 7\nlevel: 42\np_int: 0\n");
    free(text);
    protobuf_c_message_free_unpacked(&s->base, NULL);
    assert_non_null(
        strstr(parse_err(&fatest3__scalars__descriptor, "i32: 7 i32: 0"), "`i32` is set twice"));
}

static void test_bad_arguments(void **state)
{
    ProtobufCMessage *m = (ProtobufCMessage *)1;
    fa_error err = {0};
    char *text = (char *)1;
    (void)state;

    assert_int_equal(fa_textformat_parse(NULL, "", 0, NULL, &m, &err), FA_ERR_INVAL);
    assert_null(m);
    assert_int_equal(fa_textformat_parse(&fatest__all__descriptor, NULL, 5, NULL, &m, NULL),
                     FA_ERR_INVAL);
    assert_int_equal(fa_textformat_print(NULL, &text, NULL, &err), FA_ERR_INVAL);
    assert_null(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_presence),
        cmocka_unit_test(test_empty_and_unterminated_input),
        cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_all_errors_collected),
        cmocka_unit_test(test_positions),
        cmocka_unit_test(test_suggestions),
        cmocka_unit_test(test_printer_canonical),
        cmocka_unit_test(test_print_round_trip),
        cmocka_unit_test(test_proto3),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
