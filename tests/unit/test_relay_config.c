/* Unit tests of fedagg-relay's option values and profiles (relay_config.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "tests/tools/relay/relay.h"

#define MS 1000000ULL

static void test_durations(void **state)
{
    uint64_t v;
    assert_int_equal(fa_relay_parse_duration("40ms", MS, &v), 0);
    assert_int_equal(v, 40 * MS);
    assert_int_equal(fa_relay_parse_duration("40", MS, &v), 0); /* bare: the given unit */
    assert_int_equal(v, 40 * MS);
    assert_int_equal(fa_relay_parse_duration("2.5", 1000000000ULL, &v), 0);
    assert_int_equal(v, 2500 * MS);
    assert_int_equal(fa_relay_parse_duration("0.1s", MS, &v), 0);
    assert_int_equal(v, 100 * MS);
    assert_int_equal(fa_relay_parse_duration("250us", MS, &v), 0);
    assert_int_equal(v, 250000);
    assert_int_equal(fa_relay_parse_duration("7ns", MS, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(fa_relay_parse_duration("0", MS, &v), 0);
    assert_int_equal(v, 0);
    const char *bad[] = {"", "ms", "-5ms", "5 ms", "5min", "5msx", "1e30s", "nan", "inf"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(fa_relay_parse_duration(bad[i], MS, &v), FA_ERR_PARSE);
}

static void test_probabilities_rates_sizes(void **state)
{
    double p;
    uint64_t v;

    assert_int_equal(fa_relay_parse_prob("0.01", &p), 0);
    assert_true(fabs(p - 0.01) < 1e-15);
    assert_int_equal(fa_relay_parse_prob("2.5%", &p), 0);
    assert_true(fabs(p - 0.025) < 1e-15);
    assert_int_equal(fa_relay_parse_prob("1", &p), 0);
    assert_int_equal(fa_relay_parse_prob("1.5", &p), FA_ERR_RANGE);
    assert_int_equal(fa_relay_parse_prob("101%", &p), FA_ERR_RANGE);
    assert_int_equal(fa_relay_parse_prob("-0.1", &p), FA_ERR_PARSE);
    assert_int_equal(fa_relay_parse_prob("1%%", &p), FA_ERR_PARSE);

    assert_int_equal(fa_relay_parse_rate("12500000", &v), 0);
    assert_int_equal(v, 12500000);
    assert_int_equal(fa_relay_parse_rate("100mbit", &v), 0);
    assert_int_equal(v, 12500000);
    assert_int_equal(fa_relay_parse_rate("1gbit", &v), 0);
    assert_int_equal(v, 125000000);
    assert_int_equal(fa_relay_parse_rate("12.5M", &v), 0);
    assert_int_equal(v, 12500000);
    assert_int_equal(fa_relay_parse_rate("10kB/s", &v), 0);
    assert_int_equal(v, 10000);
    assert_int_equal(fa_relay_parse_rate("10 mbit", &v), FA_ERR_PARSE);
    assert_int_equal(fa_relay_parse_rate("10mb", &v), FA_ERR_PARSE);

    assert_int_equal(fa_relay_parse_size("64k", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(fa_relay_parse_size("1MB", &v), 0);
    assert_int_equal(v, 1000000);
    assert_int_equal(fa_relay_parse_size("256M", &v), 0);
    assert_int_equal(v, 256ULL << 20);
    assert_int_equal(fa_relay_parse_size("1GiB", &v), 0);
    assert_int_equal(v, 1ULL << 30);
    assert_int_equal(fa_relay_parse_size("12x", &v), FA_ERR_PARSE);
}

static void test_directions(void **state)
{
    fa_relay_config cfg;
    fa_error err;

    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "delay", "30ms", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "s2c-delay", "50", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-loss", "1%", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-jitter-reorder", NULL, &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "reorder", "2%", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "s2c-reorder", "3%:25ms", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "corrupt", "0.5:4", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "rate", "100mbit", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "queue-limit", "1M", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "seed", "0x2a", &err), 1);
    assert_int_equal(cfg.seed, 42);
    assert_int_equal(cfg.dir[0].delay_ns, 30 * MS);
    assert_int_equal(cfg.dir[1].delay_ns, 50 * MS);
    assert_true(cfg.dir[0].loss == 0.01 && cfg.dir[1].loss == 0);
    assert_true(cfg.dir[0].jitter_reorder && !cfg.dir[1].jitter_reorder);
    assert_int_equal(cfg.dir[0].reorder_delay_ns, 10 * MS); /* the default */
    assert_int_equal(cfg.dir[1].reorder_delay_ns, 25 * MS);
    assert_true(cfg.dir[1].reorder == 0.03);
    assert_int_equal(cfg.dir[0].corrupt_bits, 4);
    assert_int_equal(cfg.dir[1].rate, 12500000);
    assert_int_equal(cfg.dir[1].queue_limit, 1 << 20);
    assert_int_equal(fa_relay_config_check(&cfg, &err), 0);
    assert_false(fa_relay_option_has_value("s2c-jitter-reorder"));
    assert_true(fa_relay_option_has_value("c2s-loss"));
    /* Not an impairment option: left to the caller. */
    assert_int_equal(fa_relay_option_parse(&cfg, "listen", "x", &err), 0);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-listen", "x", &err), 0);
}

static void test_errors_name_the_option(void **state)
{
    fa_relay_config cfg;
    fa_error err;

    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_option_parse(&cfg, "c2s-loss", "2", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "--c2s-loss"));
    assert_non_null(strstr(err.msg, "'2'"));
    assert_int_equal(fa_relay_option_parse(&cfg, "delay", NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "needs a value"));
    assert_int_equal(fa_relay_option_parse(&cfg, "ge", "0.1", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "ge", "0.1:0", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "ge", "0.1:0.2:0.3:0.4:0.5", &err),
                     FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "burst-loss", "2%", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "burst-loss", "100%:3", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "burst-loss", "2%:0.5", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "corrupt", "1%:0", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "corrupt", "1%:65", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "corrupt", "1%:1.5", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "blackhole", "5", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "START:DURATION"));
    assert_int_equal(fa_relay_option_parse(&cfg, "blackhole", "5:x", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "rate", "fast", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "seed", "-1", &err), FA_ERR_INVAL);
    assert_int_equal(fa_relay_option_parse(&cfg, "reorder", "", &err), FA_ERR_INVAL);
    for (int i = 0; i < FA_RELAY_MAX_BLACKHOLES; i++)
        assert_int_equal(fa_relay_option_parse(&cfg, "s2c-blackhole", "1:1", &err), 1);
    assert_int_equal(fa_relay_option_parse(&cfg, "s2c-blackhole", "1:1", &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "at most"));
    /* Configuration-level checks. */
    fa_relay_config_default(&cfg);
    cfg.dir[0].rate = 1000;
    cfg.dir[0].queue_limit = 100;
    assert_int_equal(fa_relay_config_check(&cfg, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "c2s queue-limit"));
    fa_relay_config_default(&cfg);
    cfg.max_buffer = 1000;
    assert_int_equal(fa_relay_config_check(&cfg, &err), FA_ERR_INVAL);
}

static void test_profiles(void **state)
{
    fa_relay_config cfg;
    fa_error err;

    for (int d = 0; d < FA_RELAY_NDIR; d++) {
        fa_relay_config_default(&cfg);
        assert_int_equal(fa_relay_profile_apply(&cfg, "wan80", &err), 0);
        /* 80 ms RTT split over the two directions, 1 % loss each way. */
        assert_int_equal(cfg.dir[d].delay_ns, 40 * MS);
        assert_true(fabs(cfg.dir[d].loss - 0.01) < 1e-15);

        fa_relay_config_default(&cfg);
        assert_int_equal(fa_relay_profile_apply(&cfg, "wan220", &err), 0);
        assert_int_equal(cfg.dir[d].delay_ns, 110 * MS);
        assert_true(cfg.dir[d].jitter_ns > 0 && !cfg.dir[d].jitter_reorder);
        assert_true(cfg.dir[d].reorder > 0);
        /* Gilbert: stationary bad-state probability is the 2 % loss rate. */
        assert_true(fabs(cfg.dir[d].ge_p / (cfg.dir[d].ge_p + cfg.dir[d].ge_r) - 0.02) < 1e-12);
        assert_true(cfg.dir[d].ge_loss_bad == 1.0 && cfg.dir[d].ge_loss_good == 0.0);
        assert_true(cfg.dir[d].loss == 0);

        fa_relay_config_default(&cfg);
        assert_int_equal(fa_relay_profile_apply(&cfg, "corrupt3", &err), 0);
        assert_true(fabs(cfg.dir[d].corrupt - 0.03) < 1e-15);
        assert_int_equal(cfg.dir[d].delay_ns, 0);
        assert_int_equal(fa_relay_config_check(&cfg, &err), 0);
    }
    /* Flags refine a profile. */
    fa_relay_config_default(&cfg);
    assert_int_equal(fa_relay_profile_apply(&cfg, "wan80", &err), 0);
    assert_int_equal(fa_relay_option_parse(&cfg, "s2c-loss", "0", &err), 1);
    assert_true(cfg.dir[0].loss == 0.01 && cfg.dir[1].loss == 0);
    assert_int_equal(fa_relay_profile_apply(&cfg, "none", &err), 0);
    assert_int_equal(fa_relay_profile_apply(&cfg, "wan81", &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "wan220"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_probabilities_rates_sizes),
        cmocka_unit_test(test_directions),
        cmocka_unit_test(test_errors_name_the_option),
        cmocka_unit_test(test_profiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
