/* test_common_log.c - fa_log escapes every value itself: a peer's text can
 * neither end the line nor forge a key, and the log stays valid UTF-8. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_log.h"

/* ------------------------------------------------ capturing stderr */

static int saved_stderr = -1;
static int pipe_rd = -1;
static char captured[16384];

static void capture_start(void)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    assert_true(saved_stderr >= 0);
    assert_true(dup2(p[1], STDERR_FILENO) >= 0);
    close(p[1]);
    pipe_rd = p[0];
}

/* Returns what was written since capture_start (NUL-terminated). */
static const char *capture_end(void)
{
    ssize_t n;
    size_t len = 0;
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    while ((n = read(pipe_rd, captured + len, sizeof(captured) - 1 - len)) > 0)
        len += (size_t)n;
    close(pipe_rd);
    captured[len] = '\0';
    return captured;
}

/* ------------------------------------------- a small logfmt reader */

struct kv {
    char key[64];
    char val[4096];
};

/* Splits one logfmt line into pairs as a log shipper would (Go's logfmt,
 * Loki, Vector): key=bare or key="quoted", \n \r \t \" \\ decoded.  Returns the
 * number of pairs, or -1 when the line is not well formed. */
static int logfmt_parse(const char *line, struct kv *out, int max)
{
    int n = 0;
    const char *p = line;
    while (*p) {
        size_t k = 0, v = 0;
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n')
            break;
        if (n == max)
            return -1;
        while (*p && *p != '=' && *p != ' ' && *p != '\n') {
            if (k + 1 >= sizeof(out[n].key))
                return -1;
            out[n].key[k++] = *p++;
        }
        out[n].key[k] = '\0';
        if (*p != '=' || k == 0)
            return -1;
        p++;
        if (*p == '"') {
            p++;
            while (*p && *p != '"') {
                char c = *p;
                if (c == '\n' || v + 2 >= sizeof(out[n].val))
                    return -1;
                if (c == '\\' && p[1] && strchr("nrt\"\\", p[1])) {
                    p++;
                    c = *p == 'n' ? '\n' : *p == 'r' ? '\r' : *p == 't' ? '\t' : *p;
                } else if (c == '\\' && p[1]) {
                    out[n].val[v++] = *p++; /* \xHH, \uHHHH: kept as written */
                    c = *p;
                }
                out[n].val[v++] = c;
                p++;
            }
            if (*p != '"')
                return -1;
            p++;
            if (*p && *p != ' ' && *p != '\n')
                return -1;
        } else {
            while (*p && *p != ' ' && *p != '\n') {
                if (*p == '"' || v + 1 >= sizeof(out[n].val))
                    return -1;
                out[n].val[v++] = *p++;
            }
        }
        out[n].val[v] = '\0';
        n++;
    }
    return n;
}

static const char *get(const struct kv *kv, int n, const char *key)
{
    const char *found = NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(kv[i].key, key)) {
            if (found)
                return "(twice)";
            found = kv[i].val;
        }
    return found;
}

/* One line, ending in its only newline, printable ASCII or UTF-8 before. */
static void assert_one_clean_line(const char *out)
{
    size_t len = strlen(out);
    assert_true(len > 0);
    assert_int_equal(out[len - 1], '\n');
    assert_null(memchr(out, '\n', len - 1));
    for (size_t i = 0; i + 1 < len; i++)
        assert_true((unsigned char)out[i] >= 0x20 && (unsigned char)out[i] != 0x7f);
}

/* ---------------------------------------------------------- tests */

/* A peer's text with a newline and a forged line after it stays a value of
 * the one line it was logged in, whatever its place in the format. */
static void test_forged_line_stays_one_line(void **state)
{
    static const char forged[] =
        "x\nts=2026-01-01T00:00:00.000Z level=error msg=\"aggregator compromised\" region=eu";
    struct kv kv[16];
    const char *out;
    int n;

    fa_log_set_context("proc=test");
    capture_start();
    fa_log(FA_LOG_INFO, "request refused", "region=%s status=%d reason=\"%s\" tail=%s", forged, 403,
           forged, forged);
    out = capture_end();
    assert_one_clean_line(out);
    n = logfmt_parse(out, kv, 16);
    assert_int_equal(n, 8);
    assert_string_equal(get(kv, n, "level"), "info");
    assert_string_equal(get(kv, n, "msg"), "request refused");
    assert_string_equal(get(kv, n, "proc"), "test");
    assert_string_equal(get(kv, n, "status"), "403");
    /* each value reads back as the peer sent it */
    assert_string_equal(get(kv, n, "region"), forged);
    assert_string_equal(get(kv, n, "reason"), forged);
    assert_string_equal(get(kv, n, "tail"), forged);
    assert_null(strstr(out, "\nts="));
}

/* A CONNECTION_CLOSE reason as the transport logs it: control bytes,
 * escape sequences for a terminal, bytes that are not UTF-8. */
static void test_control_and_binary_bytes(void **state)
{
    static const char bad[] = "a\tb\rc\x1b[31mred\x7f"
                              "\xff\xfe"         /* never UTF-8 */
                              "\xc0\xaf"         /* overlong '/' */
                              "\xed\xa0\x80"     /* a surrogate */
                              "\xc2\x9b"         /* C1 CSI */
                              "\xe2\x80\xae"     /* right-to-left override */
                              "\xf4\x90\x80\x80" /* above U+10FFFF */
                              "\x80z";           /* lone continuation */
    const char *out;

    fa_log_set_context(NULL);
    capture_start();
    fa_log(FA_LOG_WARN, "handshake refused", "reason=\"%s\" raw=%s", bad, bad);
    out = capture_end();
    assert_one_clean_line(out);
    assert_non_null(strstr(out, "reason=\"a\\tb\\rc\\x1b[31mred\\x7f\\xff\\xfe\\xc0\\xaf\\xed"
                                "\\xa0\\x80\\u009b\\u202e\\xf4\\x90\\x80\\x80\\x80z\""));
    /* a whole value with such bytes is quoted, the same escapes inside */
    assert_non_null(strstr(out, "raw=\"a\\tb\\rc\\x1b[31m"));
}

/* Well-formed UTF-8 passes unchanged: region names and paths in any
 * script stay readable. */
static void test_utf8_kept(void **state)
{
    const char *out;
    capture_start();
    fa_log(FA_LOG_INFO, "m", "name=%s", "r\xc3\xa9gion-\xe4\xb8\xad-\xf0\x9f\x99\x82");
    out = capture_end();
    assert_non_null(strstr(out, " name=r\xc3\xa9gion-\xe4\xb8\xad-\xf0\x9f\x99\x82\n"));
}

/* key=%s: bare when it can be, quoted when it must, one value always. */
static void test_value_quoting(void **state)
{
    char q[64];
    const char *out;
    capture_start();
    fa_log(FA_LOG_INFO, "m", "a=%s b=%s c=%s d=%s e=%s", "eu-west", "two words", "",
           fa_log_quote(q, sizeof(q), "quoted \"by\" caller"), "\"x\" y=\"z\"");
    out = capture_end();
    assert_non_null(strstr(out, " a=eu-west b=\"two words\" c=\"\" d=\"quoted \\\"by\\\" caller\" "
                                "e=\"\\\"x\\\" y=\\\"z\\\"\"\n"));
}

/* A string inside a key or glued to other text cannot open a key of its
 * own: space and '=' are escaped there. */
static void test_token_parts(void **state)
{
    struct kv kv[8];
    const char *out;
    int n;
    capture_start();
    fa_log(FA_LOG_INFO, "m", "%s=%d addr=%s:%d", "k level=error", 1, "1.2.3.4 x=y", 443);
    out = capture_end();
    assert_one_clean_line(out);
    assert_non_null(strstr(out, " k\\x20level\\x3derror=1 addr=1.2.3.4\\x20x\\x3dy:443\n"));
    n = logfmt_parse(out, kv, 8);
    assert_int_equal(n, 5);
    assert_string_equal(get(kv, n, "level"), "info");
}

/* Numbers and the other conversions print as printf prints them. */
static void test_conversions(void **state)
{
    char buf[5] = {'a', 'b', 'c', 'd', 'e'}; /* not NUL-terminated */
    const char *out;
    capture_start();
    fa_log(FA_LOG_INFO, "m",
           "d=%d u=%u zu=%zu llu=%llu lld=%lld x=%x x2=%02x f=%.3f g=%g pct=%% c=%c "
           "p3=%.3s pstar=%.*s w=[%-5s] r=[%5s] star=[%*d]",
           -7, 7u, (size_t)8, 18446744073709551615ull, -9223372036854775807ll - 1, 255u, 5u,
           3.14159, 0.5, 'Z', "abcdef", 4, buf, "ab", "ab", 4, 12);
    out = capture_end();
    assert_non_null(strstr(out, " d=-7 u=7 zu=8 llu=18446744073709551615 "
                                "lld=-9223372036854775808 x=ff x2=05 f=3.142 g=0.5 pct=% c=Z "
                                "p3=abc pstar=abcd w=[ab   ] r=[   ab] star=[  12]\n"));
}

/* The message is one value; a NULL string argument prints (null). */
static void test_message_and_null(void **state)
{
    const char *volatile nothing = NULL; /* unknown to the format check */
    const char *out;
    capture_start();
    fa_log(FA_LOG_ERROR, "bad\nthing", "v=%s", nothing);
    out = capture_end();
    assert_one_clean_line(out);
    assert_non_null(strstr(out, " level=error msg=\"bad\\nthing\" v=(null)\n"));
}

/* A value longer than a line is cut; the line still ends, its quote
 * closed. */
static void test_long_value_cut(void **state)
{
    struct kv kv[8];
    char *big = malloc(20000);
    const char *out;
    int n;
    assert_non_null(big);
    memset(big, 'A', 19999);
    big[19999] = '\0';
    big[100] = '\n';
    capture_start();
    fa_log(FA_LOG_INFO, "m", "reason=\"%s\" after=%d", big, 1);
    out = capture_end();
    free(big);
    assert_one_clean_line(out);
    assert_true(strlen(out) <= 4096);
    n = logfmt_parse(out, kv, 8);
    assert_true(n >= 4);
    assert_string_equal(get(kv, n, "level"), "info");
}

/* The context is the program's, yet it is copied with control bytes
 * escaped: a region id read from a config cannot break the lines either. */
static void test_context_escaped(void **state)
{
    const char *out;
    fa_log_set_context("region=eu\nlevel=error");
    capture_start();
    fa_log(FA_LOG_INFO, "m", NULL);
    out = capture_end();
    fa_log_set_context(NULL);
    assert_one_clean_line(out);
    assert_non_null(strstr(out, " region=eu\\nlevel=error\n"));
}

static void test_quote_helper(void **state)
{
    char buf[64];
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "eu-west"), "eu-west");
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "a\x01z"), "\"a\\x01z\"");
    assert_string_equal(fa_log_quote(buf, sizeof(buf), "\xff"), "\"\\xff\"");
    /* cut at an escape's boundary, still quoted */
    assert_string_equal(fa_log_quote(buf, 8, "a\nb\nc\nd"), "\"a\\nb\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forged_line_stays_one_line),
        cmocka_unit_test(test_control_and_binary_bytes),
        cmocka_unit_test(test_utf8_kept),
        cmocka_unit_test(test_value_quoting),
        cmocka_unit_test(test_token_parts),
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_message_and_null),
        cmocka_unit_test(test_long_value_cut),
        cmocka_unit_test(test_context_escaped),
        cmocka_unit_test(test_quote_helper),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
