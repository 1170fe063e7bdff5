/* Unit tests of netconfig/quic_config.c: fedagg.QuicConfig onto the
 * transport's options, field by field, and the defaults without a config. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "netconfig/quic_config.h"

static void test_defaults_without_config(void **state)
{
    fa_h3_quic_opts o, d;
    memset(&o, 0x5a, sizeof(o));
    fa_h3_quic_default(&d);
    fa_netconfig_quic_opts(&o, NULL);
    assert_memory_equal(&o, &d, sizeof(o));
}

/* The config's defaults (proto/config.proto) are the transport's own: a
 * daemon with no quic block runs as the library does by itself. */
static void test_proto_defaults_are_the_transports(void **state)
{
    Fedagg__QuicConfig q = FEDAGG__QUIC_CONFIG__INIT;
    fa_h3_quic_opts o, d;
    (void)state;
    fa_h3_quic_default(&d);
    fa_netconfig_quic_opts(&o, &q);
    assert_int_equal(o.max_stream_window, d.max_stream_window);
    assert_int_equal(o.max_connection_window, d.max_connection_window);
    assert_int_equal(o.cc, d.cc);
    assert_int_equal(d.cc, FA_H3_CC_BBR2);
    assert_int_equal(o.idle_timeout_ms, d.idle_timeout_ms);
    assert_int_equal(o.max_streams, d.max_streams);
    assert_null(o.qlog_dir);
    assert_int_equal(o.gso, d.gso);
    assert_int_equal(o.gro, d.gro);
    assert_int_equal(o.max_udp_payload, d.max_udp_payload);
}

static void test_every_field(void **state)
{
    Fedagg__QuicConfig q = FEDAGG__QUIC_CONFIG__INIT;
    fa_h3_quic_opts o;

    q.max_stream_window = 1u << 20;
    q.max_connection_window = 3u << 20;
    q.congestion_control = 1;
    q.idle_timeout_ms = 12345;
    q.max_streams_per_connection = 7;
    q.qlog_dir = "/tmp/qlog";
    q.gso = 0;
    q.gro = 1;
    q.max_udp_payload_size = 1400;
    fa_netconfig_quic_opts(&o, &q);
    assert_int_equal(o.max_stream_window, 1u << 20);
    assert_int_equal(o.max_connection_window, 3u << 20);
    assert_int_equal(o.cc, 1);
    assert_int_equal(o.idle_timeout_ms, 12345);
    assert_int_equal(o.max_streams, 7);
    assert_string_equal(o.qlog_dir, "/tmp/qlog");
    assert_int_equal(o.gso, 0);
    assert_int_equal(o.gro, 1);
    assert_int_equal(o.max_udp_payload, 1400);
    /* an empty qlog_dir is no qlog */
    q.qlog_dir = "";
    fa_netconfig_quic_opts(&o, &q);
    assert_null(o.qlog_dir);
}

/* The server's part: the proto's defaults are the transport's, and every
 * field lands where it belongs. */
static void test_server_config(void **state)
{
    Fedagg__QuicConfig q = FEDAGG__QUIC_CONFIG__INIT;
    Fedagg__TlsConfig tls = FEDAGG__TLS_CONFIG__INIT;
    fa_h3_server_config sc, d;

    fa_h3_server_config_default(&d);
    fa_netconfig_server_config(&sc, &q, NULL);
    assert_int_equal(sc.max_connections, d.max_connections);
    assert_int_equal(sc.max_body_bytes, d.max_body_bytes);
    assert_int_equal(sc.retry, d.retry);
    assert_int_equal(sc.retry_load_threshold, d.retry_load_threshold);
    assert_int_equal(sc.max_connections_per_address, d.max_connections_per_address);
    assert_int_equal(sc.max_handshakes, d.max_handshakes);
    assert_int_equal(sc.max_handshakes_per_address, d.max_handshakes_per_address);
    assert_int_equal(sc.handshake_timeout_ms, d.handshake_timeout_ms);
    assert_int_equal(sc.max_connections_per_identity, d.max_connections_per_identity);
    assert_int_equal(sc.max_buffered_bytes, d.max_buffered_bytes);
    assert_int_equal(sc.max_buffered_bytes_per_identity, d.max_buffered_bytes_per_identity);
    assert_null(sc.crl_file);

    q.max_connections = 11;
    q.max_body_bytes = 12;
    q.retry = 1;
    q.retry_load_threshold = 13;
    q.max_connections_per_address = 14;
    q.max_handshakes = 15;
    q.max_handshakes_per_address = 16;
    q.handshake_timeout_ms = 1700;
    q.max_connections_per_identity = 18;
    q.max_buffered_request_bytes = 19;
    q.max_buffered_request_bytes_per_identity = 20;
    tls.cert_file = "c.crt";
    tls.key_file = "c.key";
    tls.ca_file = "ca.crt";
    tls.crl_file = "ca.crl";
    fa_netconfig_server_config(&sc, &q, &tls);
    assert_int_equal(sc.max_connections, 11);
    assert_int_equal(sc.max_body_bytes, 12);
    assert_int_equal(sc.retry, 1);
    assert_int_equal(sc.retry_load_threshold, 13);
    assert_int_equal(sc.max_connections_per_address, 14);
    assert_int_equal(sc.max_handshakes, 15);
    assert_int_equal(sc.max_handshakes_per_address, 16);
    assert_int_equal(sc.handshake_timeout_ms, 1700);
    assert_int_equal(sc.max_connections_per_identity, 18);
    assert_int_equal(sc.max_buffered_bytes, 19);
    assert_int_equal(sc.max_buffered_bytes_per_identity, 20);
    assert_string_equal(sc.cert_file, "c.crt");
    assert_string_equal(sc.key_file, "c.key");
    assert_string_equal(sc.ca_file, "ca.crt");
    assert_string_equal(sc.crl_file, "ca.crl");
    tls.crl_file = "";
    fa_netconfig_server_config(&sc, &q, &tls);
    assert_null(sc.crl_file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_without_config),
        cmocka_unit_test(test_proto_defaults_are_the_transports),
        cmocka_unit_test(test_every_field),
        cmocka_unit_test(test_server_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
