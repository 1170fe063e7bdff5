/* fedagg-hostile: misbehaving peers from the command line (hostile.h), for
 * the integration tests and `fedagg-bench hostile`.
 *
 *   fedagg-hostile halfopen SERVER --ca FILE [--bind IP[,IP...]] [--count N]
 *                           [--renew-ms MS] [--seconds S]
 *   fedagg-hostile close SERVER --ca FILE --reason TEXT   (\n, \t, \xHH, \\ decoded)
 *   fedagg-hostile streams SERVER --ca FILE --cert FILE --key FILE --path PATH
 *                          [--count N] [--bytes B] [--seconds S] [--reopen 1]
 *                          (--reopen: open new streams as the server ends some,
 *                          so that N are always held)
 *   fedagg-hostile certs SERVER --ca FILE --cert FILE --key FILE [--count N]
 *                        [--seconds S]   N idle connections with that certificate,
 *                                        reconnected as they are refused or closed
 *   fedagg-hostile idle HOST:PORT [--bind IP] [--count N] [--partial TEXT]
 *                       [--reopen-per-s R] [--seconds S]   (R: 2000 by default)
 *
 * Each runs for --seconds (default 10), or until SIGTERM, and prints one
 * JSON line of what it did when it ends.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hostile.h"
#include "transport/h3.h"

static atomic_int stop;

static void on_term(int sig)
{
    (void)sig;
    atomic_store(&stop, 1);
}

static const char *opt(int argc, char **argv, const char *name, const char *dflt)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return dflt;
}

static unsigned long num(int argc, char **argv, const char *name, unsigned long dflt)
{
    const char *v = opt(argc, argv, name, NULL);
    char *end;
    unsigned long x;
    if (!v)
        return dflt;
    x = strtoul(v, &end, 10);
    if (!*v || *end) {
        fprintf(stderr, "fedagg-hostile: %s %s: not a number\n", name, v);
        exit(2);
    }
    return x;
}

/* \n \r \t \\ \xHH: the reason text may carry any byte. */
static size_t unescape(const char *s, uint8_t *out, size_t cap)
{
    size_t n = 0;
    while (*s && n < cap) {
        if (s[0] == '\\' && s[1]) {
            s++;
            if (*s == 'n')
                out[n++] = '\n';
            else if (*s == 'r')
                out[n++] = '\r';
            else if (*s == 't')
                out[n++] = '\t';
            else if (*s == 'x' && s[1] && s[2]) {
                char hx[3] = {s[1], s[2], 0};
                out[n++] = (uint8_t)strtoul(hx, NULL, 16);
                s += 2;
            } else
                out[n++] = (uint8_t)*s;
            s++;
        } else {
            out[n++] = (uint8_t)*s++;
        }
    }
    return n;
}

static int usage(void)
{
    fprintf(stderr, "usage: fedagg-hostile halfopen|close|streams|certs|idle SERVER [options] "
                    "(see tests/tools/hostile/hostile_main.c)\n");
    return 2;
}

int main(int argc, char **argv)
{
    fa_error err = {0};
    unsigned long seconds;
    int rv;

    if (argc < 3)
        return usage();
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    seconds = num(argc, argv, "--seconds", 10);

    if (!strcmp(argv[1], "halfopen")) {
        char *binds = strdup(opt(argc, argv, "--bind", "")), *save = NULL, *tok;
        const char *list[256];
        size_t nb = 0;
        fa_hq_flood *f;
        fa_hq_flood_stats st;
        for (tok = strtok_r(binds, ",", &save); tok && nb < 256; tok = strtok_r(NULL, ",", &save))
            list[nb++] = tok;
        rv = fa_hq_flood_new(&f, argv[2], opt(argc, argv, "--ca", ""), list, nb,
                             (unsigned)num(argc, argv, "--count", 100),
                             (uint32_t)num(argc, argv, "--renew-ms", 2500), &err);
        if (rv != 0) {
            fprintf(stderr, "fedagg-hostile: %s\n", err.msg);
            return 1;
        }
        for (unsigned long i = 0; i < seconds * 10 && !atomic_load(&stop); i++)
            fa_hq_flood_run(f, 100);
        fa_hq_flood_get_stats(f, &st);
        printf("{\"attack\":\"halfopen\",\"started\":%llu,\"retries\":%llu,\"answered\":%llu,"
               "\"refused\":%llu,\"holding\":%u}\n",
               (unsigned long long)st.started, (unsigned long long)st.retries,
               (unsigned long long)st.answered, (unsigned long long)st.refused, st.holding);
        fa_hq_flood_del(f);
        free(binds);
        return 0;
    }
    if (!strcmp(argv[1], "close")) {
        uint8_t reason[1024];
        size_t n = unescape(opt(argc, argv, "--reason", ""), reason, sizeof(reason));
        rv = fa_hq_close_with_reason(argv[2], opt(argc, argv, "--ca", ""), reason, n, 5000, &err);
        if (rv != 0) {
            fprintf(stderr, "fedagg-hostile: %s\n", err.msg);
            return 1;
        }
        printf("{\"attack\":\"close\",\"reason_bytes\":%zu}\n", n);
        return 0;
    }
    if (!strcmp(argv[1], "streams")) {
        fa_hq_streams *s;
        fa_hq_streams_stats st;
        unsigned opened;
        rv = fa_hq_streams_new(&s, argv[2], opt(argc, argv, "--name", "localhost"),
                               opt(argc, argv, "--ca", ""), opt(argc, argv, "--cert", ""),
                               opt(argc, argv, "--key", ""), 10000, &err);
        if (rv != 0) {
            fprintf(stderr, "fedagg-hostile: %s\n", err.msg);
            return 1;
        }
        opened = fa_hq_streams_open(s, opt(argc, argv, "--path", "/v1/rounds/1/0/advertise"),
                                    (unsigned)num(argc, argv, "--count", 48),
                                    num(argc, argv, "--bytes", (16ul << 20) - 1));
        for (unsigned long i = 0; i < seconds * 10 && !atomic_load(&stop); i++) {
            unsigned want = (unsigned)num(argc, argv, "--count", 48);
            fa_hq_streams_run(s, 100);
            if (num(argc, argv, "--reopen", 0) && fa_hq_streams_active(s) < want)
                opened += fa_hq_streams_open(
                    s, opt(argc, argv, "--path", "/v1/rounds/1/0/advertise"),
                    want - fa_hq_streams_active(s), num(argc, argv, "--bytes", (16ul << 20) - 1));
        }
        fa_hq_streams_get_stats(s, &st);
        printf("{\"attack\":\"streams\",\"opened\":%u,\"body_bytes\":%llu,\"answered\":%llu,"
               "\"status_2xx\":%llu,\"status_413\":%llu,\"status_429\":%llu,\"status_503\":%llu,"
               "\"status_other\":%llu,\"reset\":%llu,\"connection_lost\":%s}\n",
               opened, (unsigned long long)st.body_bytes, (unsigned long long)st.answered,
               (unsigned long long)st.status_2xx, (unsigned long long)st.status_413,
               (unsigned long long)st.status_429, (unsigned long long)st.status_503,
               (unsigned long long)st.status_other, (unsigned long long)st.reset,
               st.dead ? "true" : "false");
        fa_hq_streams_del(s);
        return 0;
    }
    if (!strcmp(argv[1], "certs")) {
        unsigned n = (unsigned)num(argc, argv, "--count", 100);
        fa_h3_client **c = calloc(n, sizeof(*c));
        fa_h3_client_config cfg;
        uint64_t ok = 0, refused = 0;
        unsigned held = 0;
        if (!c)
            return 1;
        fa_h3_client_config_default(&cfg);
        cfg.server = argv[2];
        cfg.server_name = opt(argc, argv, "--name", "localhost");
        cfg.ca_file = opt(argc, argv, "--ca", "");
        cfg.cert_file = opt(argc, argv, "--cert", "");
        cfg.key_file = opt(argc, argv, "--key", "");
        cfg.connect_attempts = 1;
        cfg.connect_timeout_ms = 2000;
        for (unsigned i = 0; i < n; i++)
            if (fa_h3_client_new(&c[i], &cfg, &err) != 0) {
                fprintf(stderr, "fedagg-hostile: %s\n", err.msg);
                return 1;
            }
        {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (;;) {
                held = 0;
                for (unsigned i = 0; i < n && !atomic_load(&stop); i++) {
                    if (fa_h3_client_connect(c[i], 2000, &err) == 0) {
                        held++;
                        ok++;
                    } else {
                        refused++;
                    }
                }
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if (atomic_load(&stop) || (unsigned long)(t1.tv_sec - t0.tv_sec) >= seconds)
                    break;
                usleep(100 * 1000);
            }
        }
        printf("{\"attack\":\"certs\",\"held\":%u,\"connects_ok\":%llu,\"refused\":%llu}\n", held,
               (unsigned long long)ok, (unsigned long long)refused);
        for (unsigned i = 0; i < n; i++)
            fa_h3_client_del(c[i]);
        free(c);
        return 0;
    }
    if (!strcmp(argv[1], "idle")) {
        fa_ht_flood *f;
        rv = fa_ht_flood_new(&f, argv[2], opt(argc, argv, "--bind", NULL),
                             (unsigned)num(argc, argv, "--count", 1000),
                             opt(argc, argv, "--partial", NULL), &err);
        if (rv != 0) {
            fprintf(stderr, "fedagg-hostile: %s\n", err.msg);
            return 1;
        }
        fa_ht_flood_set_rate(f, (unsigned)num(argc, argv, "--reopen-per-s", 0));
        for (unsigned long i = 0; i < seconds * 10 && !atomic_load(&stop); i++)
            fa_ht_flood_run(f, 100);
        printf("{\"attack\":\"idle\",\"open\":%u,\"opened\":%llu}\n", fa_ht_flood_open(f),
               (unsigned long long)fa_ht_flood_opened(f));
        fa_ht_flood_del(f);
        return 0;
    }
    return usage();
}
