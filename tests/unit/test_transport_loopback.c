/* Loopback transfers over HTTP/3: 1 KB, 10 MB and 1 GB in both directions,
 * SHA-256 checked at the far end, with QUIC key updates along the way, in
 * the path-sized datagrams loopback's MTU allows (max_udp_payload 0: see
 * test_transport_dgram.c for the sizes themselves).
 * Under ASan/UBSan (or FA_TEST_BIG_BYTES=N) the large transfer shrinks so the
 * sanitizer build stays quick. */
#include "test_transport_util.h"

static tp_server srv;

/* 1 GiB; under ASan 256 MiB: QUIC spaces key updates at least 3 PTOs apart
 * (~80 ms on loopback), and in path-sized datagrams 64 MiB crossed loopback
 * too fast for the four key updates this test wants. */
static uint64_t big_bytes(void)
{
    const char *e = getenv("FA_TEST_BIG_BYTES");
    if (e && *e)
        return strtoull(e, NULL, 10);
#if defined(__SANITIZE_ADDRESS__)
    return 256ull << 20;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 256ull << 20;
#endif
#endif
    return 1ull << 30;
}

static int setup(void **state)
{
    fa_h3_server_config cfg;
    tp_gen_init();
    if (tp_setup_pki() != 0)
        return -1;
    tp_server_config(&cfg);
    /* the server initiates key updates too: both directions change phase */
    cfg.quic.key_update_bytes = 48ull << 20;
    return tp_server_start(&srv, &cfg);
}

static int teardown(void **state)
{
    tp_server_stop(&srv);
    tp_teardown_pki();
    return 0;
}

static fa_h3_client *client_new(uint64_t key_update_bytes)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_error err = {0};
    int rv;
    tp_client_config(&cfg, &srv, "client-eu-west.crt", "client-eu-west.key");
    cfg.quic.key_update_bytes = key_update_bytes;
    rv = fa_h3_client_new(&c, &cfg, &err);
    if (rv != 0)
        fail_msg("client: %s", fa_error_msg(&err, rv));
    return c;
}

static void test_small_both_ways(void **state)
{
    fa_h3_client *c = client_new(0);
    fa_h3_client_stats st;
    tp_download(c, 1000);
    tp_upload(c, 1000);
    tp_download(c, 0);
    tp_upload(c, 0);
    fa_h3_client_get_stats(c, &st);
    assert_int_equal(st.connects, 1); /* one connection carried every request */
    assert_string_equal(tp_last.peer, "eu-west");
    fa_h3_client_del(c);
}

static void test_borrowed_buffer_body(void **state)
{
    fa_h3_client *c = client_new(0);
    int before = atomic_load(&tp_ref_released);
    tp_download_path(c, "/ref/", 1000);
    tp_download_path(c, "/ref/", 10u << 20);
    fa_h3_client_del(c);
    /* each buffer went back to its owner once its stream was over */
    for (int i = 0; i < 200 && atomic_load(&tp_ref_released) < before + 2; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&tp_ref_released), before + 2);
}

static void test_10mb_both_ways(void **state)
{
    fa_h3_client *c = client_new(0);
    tp_download(c, 10u << 20);
    tp_upload(c, 10u << 20);
    tp_download(c, 10000000);
    tp_upload(c, 10000001);
    fa_h3_client_del(c);
}

static void test_big_both_ways_with_key_updates(void **state)
{
    uint64_t n = big_bytes();
    fa_h3_client *c = client_new(n / 16);
    fa_h3_client_stats st;
    tp_download(c, n);
    tp_upload(c, n);
    fa_h3_client_get_stats(c, &st);
    /* the client initiated a key update every n/16 bytes it sent and the
     * server every 48 MiB: the transfers crossed key phases intact */
    assert_true(st.key_updates >= 4);
    assert_int_equal(st.connects, 1);
    /* in datagrams of route MTU - 28 bytes (65507 with lo's usual MTU) */
    assert_true(st.udp_payload >= 60000);
    assert_true(st.largest_datagram_sent >= 60000);
    assert_true(st.largest_datagram_received >= 60000);
    fa_h3_client_del(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_both_ways),
        cmocka_unit_test(test_10mb_both_ways),
        cmocka_unit_test(test_borrowed_buffer_body),
        cmocka_unit_test(test_big_both_ways_with_key_updates),
    };
    tp_log_level(FA_LOG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
