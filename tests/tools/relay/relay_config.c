/* relay_config.c - impairment options and named profiles of fedagg-relay.
 *
 * An option without a prefix sets both directions; "c2s-" or "s2c-" in front
 * sets one (c2s: client to server, i.e. towards --upstream).
 */
#include "relay.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000ULL
#define NS_PER_S 1000000000ULL

/* Parses a non-negative decimal number prefix; *end points after it. */
static int parse_number(const char *s, double *v, const char **end)
{
    char *e;

    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return FA_ERR_PARSE;
    errno = 0;
    *v = strtod(s, &e);
    if (e == s || errno != 0 || !isfinite(*v) || *v < 0)
        return FA_ERR_PARSE;
    *end = e;
    return 0;
}

int fa_relay_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *out)
{
    static const struct {
        const char *name;
        double ns;
    } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    const char *end;
    double v, mul = (double)bare_unit_ns;
    int found = *s != '\0';

    if (parse_number(s, &v, &end) != 0)
        return FA_ERR_PARSE;
    if (*end) {
        found = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (!strcmp(end, units[i].name)) {
                mul = units[i].ns;
                found = 1;
            }
    }
    if (!found || v * mul > 1e18)
        return FA_ERR_PARSE;
    *out = (uint64_t)llround(v * mul);
    return 0;
}

int fa_relay_parse_prob(const char *s, double *out)
{
    const char *end;
    double v;

    if (parse_number(s, &v, &end) != 0)
        return FA_ERR_PARSE;
    if (!strcmp(end, "%"))
        v /= 100.0;
    else if (*end)
        return FA_ERR_PARSE;
    if (v > 1.0)
        return FA_ERR_RANGE;
    *out = v;
    return 0;
}

int fa_relay_parse_rate(const char *s, uint64_t *out)
{
    static const struct {
        const char *name;
        double mul; /* to bytes/s */
    } units[] = {{"", 1},          {"B/s", 1},         {"k", 1e3},        {"kB/s", 1e3},
                 {"M", 1e6},       {"MB/s", 1e6},      {"G", 1e9},        {"GB/s", 1e9},
                 {"bit", 1.0 / 8}, {"kbit", 1e3 / 8},  {"mbit", 1e6 / 8}, {"Mbit", 1e6 / 8},
                 {"gbit", 1e9 / 8}, {"Gbit", 1e9 / 8}};
    const char *end;
    double v;

    if (parse_number(s, &v, &end) != 0)
        return FA_ERR_PARSE;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].name)) {
            if (v * units[i].mul > 1e15)
                return FA_ERR_PARSE;
            *out = (uint64_t)llround(v * units[i].mul);
            return 0;
        }
    return FA_ERR_PARSE;
}

int fa_relay_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *name;
        double mul;
    } units[] = {{"", 1},           {"B", 1},           {"k", 1024},      {"K", 1024},
                 {"KiB", 1024},     {"kB", 1000},       {"M", 1048576.0}, {"MiB", 1048576.0},
                 {"MB", 1e6},       {"G", 1073741824.0}, {"GiB", 1073741824.0}, {"GB", 1e9}};
    const char *end;
    double v;

    if (parse_number(s, &v, &end) != 0)
        return FA_ERR_PARSE;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].name)) {
            if (v * units[i].mul > 1e18)
                return FA_ERR_PARSE;
            *out = (uint64_t)llround(v * units[i].mul);
            return 0;
        }
    return FA_ERR_PARSE;
}

/* Splits "a:b:c" into at most max parts (pointers into buf). */
static int split_colon(char *buf, char **parts, int max)
{
    int n = 0;
    char *p = buf;

    for (;;) {
        char *c = strchr(p, ':');
        if (n == max)
            return -1;
        parts[n++] = p;
        if (!c)
            break;
        *c = '\0';
        p = c + 1;
    }
    return n;
}

/* One option applied to one direction. */
static int apply_dir(fa_relay_config *cfg, fa_relay_dir_params *p, const char *opt,
                     const char *name, const char *value, fa_error *err)
{
    char buf[128], *parts[4];
    int n;

#define BAD(what)                                                                                 \
    fa_errorf(err, FA_ERR_INVAL, "relay option --%s: bad value '%s' (%s)", opt, value ? value : "", \
              what)

    if (!strcmp(name, "jitter-reorder")) {
        p->jitter_reorder = 1;
        return 1;
    }
    if (!value)
        return fa_errorf(err, FA_ERR_INVAL, "relay option --%s needs a value", opt);
    if (strlen(value) >= sizeof(buf))
        return BAD("too long");
    memcpy(buf, value, strlen(value) + 1);

    if (!strcmp(name, "delay")) {
        if (fa_relay_parse_duration(value, NS_PER_MS, &p->delay_ns) != 0)
            return BAD("a duration such as 40ms, 0.1s; a bare number is ms");
    } else if (!strcmp(name, "jitter")) {
        if (fa_relay_parse_duration(value, NS_PER_MS, &p->jitter_ns) != 0)
            return BAD("a duration such as 5ms; a bare number is ms");
    } else if (!strcmp(name, "loss")) {
        if (fa_relay_parse_prob(value, &p->loss) != 0)
            return BAD("a probability such as 0.01 or 1%");
    } else if (!strcmp(name, "ge")) {
        double v[4] = {0, 0, 1.0, 0.0};
        n = split_colon(buf, parts, 4);
        if (n < 2)
            return BAD("P:R[:LOSS_BAD[:LOSS_GOOD]]");
        for (int i = 0; i < n; i++)
            if (fa_relay_parse_prob(parts[i], &v[i]) != 0)
                return BAD("P:R[:LOSS_BAD[:LOSS_GOOD]], each a probability");
        if (v[0] > 0 && v[1] <= 0)
            return BAD("R must be > 0 or the chain never leaves the bad state");
        p->ge_p = v[0];
        p->ge_r = v[1];
        p->ge_loss_bad = v[2];
        p->ge_loss_good = v[3];
    } else if (!strcmp(name, "burst-loss")) {
        double mean, burst;
        const char *end;
        n = split_colon(buf, parts, 2);
        if (n != 2 || fa_relay_parse_prob(parts[0], &mean) != 0 ||
            parse_number(parts[1], &burst, &end) != 0 || *end)
            return BAD("MEAN:BURST, e.g. 2%:3 for 2% loss in bursts of 3 packets on average");
        if (mean >= 1.0 || burst < 1.0)
            return BAD("MEAN must be below 1 and BURST at least 1 packet");
        /* Gilbert model (loss_bad 1, loss_good 0): stationary bad-state
         * probability p / (p + r) = mean, mean sojourn in bad = 1 / r. */
        p->ge_r = 1.0 / burst;
        p->ge_p = mean * p->ge_r / (1.0 - mean);
        p->ge_loss_bad = 1.0;
        p->ge_loss_good = 0.0;
        if (p->ge_p > 1.0)
            return BAD("MEAN too high for that BURST");
    } else if (!strcmp(name, "reorder")) {
        n = split_colon(buf, parts, 2);
        if (n < 1 || fa_relay_parse_prob(parts[0], &p->reorder) != 0 ||
            (n == 2 && fa_relay_parse_duration(parts[1], NS_PER_MS, &p->reorder_delay_ns) != 0))
            return BAD("P[:DELAY], e.g. 1%:10ms");
    } else if (!strcmp(name, "duplicate")) {
        if (fa_relay_parse_prob(value, &p->duplicate) != 0)
            return BAD("a probability such as 0.01 or 1%");
    } else if (!strcmp(name, "corrupt")) {
        n = split_colon(buf, parts, 2);
        if (n < 1 || fa_relay_parse_prob(parts[0], &p->corrupt) != 0)
            return BAD("P[:BITS], e.g. 3% or 0.03:2");
        if (n == 2) {
            double bits;
            const char *end;
            if (parse_number(parts[1], &bits, &end) != 0 || *end || bits < 1 || bits > 64 ||
                bits != floor(bits))
                return BAD("BITS is a whole number from 1 to 64");
            p->corrupt_bits = (unsigned)bits;
        }
    } else if (!strcmp(name, "rate")) {
        if (fa_relay_parse_rate(value, &p->rate) != 0)
            return BAD("bytes/s (e.g. 12500000, 12.5M) or bits/s (100mbit, 1gbit); 0 = unlimited");
    } else if (!strcmp(name, "rate-burst")) {
        if (fa_relay_parse_size(value, &p->rate_burst) != 0)
            return BAD("a size in bytes such as 64k");
    } else if (!strcmp(name, "queue-limit")) {
        if (fa_relay_parse_size(value, &p->queue_limit) != 0)
            return BAD("a size in bytes such as 1M");
    } else if (!strcmp(name, "blackhole")) {
        fa_relay_window w;
        n = split_colon(buf, parts, 2);
        if (n != 2 || fa_relay_parse_duration(parts[0], NS_PER_S, &w.start_ns) != 0 ||
            fa_relay_parse_duration(parts[1], NS_PER_S, &w.duration_ns) != 0)
            return BAD("START:DURATION, seconds after t0 unless a unit is given, e.g. 5.0:2.0");
        if (p->nblackholes >= FA_RELAY_MAX_BLACKHOLES)
            return fa_errorf(err, FA_ERR_INVAL, "relay option --%s: at most %d windows", opt,
                             FA_RELAY_MAX_BLACKHOLES);
        p->blackholes[p->nblackholes++] = w;
    } else {
        return 0;
    }
    (void)cfg;
    return 1;
#undef BAD
}

int fa_relay_option_has_value(const char *name)
{
    if (!strncmp(name, "c2s-", 4) || !strncmp(name, "s2c-", 4))
        name += 4;
    return strcmp(name, "jitter-reorder") != 0;
}

int fa_relay_option_parse(fa_relay_config *cfg, const char *name, const char *value,
                          fa_error *err)
{
    int lo = 0, hi = FA_RELAY_NDIR, rv = 0;
    const char *base = name;

    if (!strcmp(name, "seed")) {
        char *end;
        if (!value || !*value)
            return fa_errorf(err, FA_ERR_INVAL, "relay option --seed needs a value");
        errno = 0;
        cfg->seed = strtoull(value, &end, 0);
        if (*end || errno || *value == '-')
            return fa_errorf(err, FA_ERR_INVAL, "relay option --seed: bad value '%s'", value);
        return 1;
    }
    if (!strcmp(name, "max-buffer")) {
        if (!value || fa_relay_parse_size(value, &cfg->max_buffer) != 0)
            return fa_errorf(err, FA_ERR_INVAL, "relay option --max-buffer: bad value '%s'",
                             value ? value : "");
        return 1;
    }
    if (!strncmp(name, "c2s-", 4)) {
        hi = FA_RELAY_C2S + 1;
        base = name + 4;
    } else if (!strncmp(name, "s2c-", 4)) {
        lo = FA_RELAY_S2C;
        base = name + 4;
    }
    for (int d = lo; d < hi; d++) {
        rv = apply_dir(cfg, &cfg->dir[d], name, base, value, err);
        if (rv <= 0)
            return rv;
    }
    return rv;
}

/* The WAN profiles of the transport tests (README.md).  RTTs are split evenly
 * between the directions, and each direction gets the loss rate. */
static const struct {
    const char *name;
    const char *opts[8][2];
} profiles[] = {
    {"none", {{NULL, NULL}}},
    {"wan80", {{"delay", "40ms"}, {"loss", "1%"}, {NULL, NULL}}},
    {"wan220",
     {{"delay", "110ms"},
      {"jitter", "5ms"},
      {"burst-loss", "2%:3"},
      {"reorder", "1%:10ms"},
      {NULL, NULL}}},
    {"corrupt3", {{"corrupt", "3%"}, {NULL, NULL}}},
};

int fa_relay_profile_apply(fa_relay_config *cfg, const char *name, fa_error *err)
{
    for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
        if (strcmp(profiles[i].name, name) != 0)
            continue;
        for (int j = 0; profiles[i].opts[j][0]; j++) {
            int rv = fa_relay_option_parse(cfg, profiles[i].opts[j][0], profiles[i].opts[j][1],
                                           err);
            if (rv < 0)
                return rv;
        }
        return 0;
    }
    return fa_errorf(err, FA_ERR_NOTFOUND,
                     "relay: unknown profile '%s' (known: none, wan80, wan220, corrupt3)", name);
}
