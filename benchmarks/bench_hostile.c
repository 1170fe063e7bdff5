/* bench_hostile.c - `fedagg-bench hostile`: does a federation go on while
 * it is attacked?
 *
 * A 3-region federation on loopback (benchmarks/bench-hostile-setup.sh: the
 * real fedagg-aggregator and fedagg-worker binaries, the built-in trainer,
 * the default QUIC settings and request budget, memory_limit_bytes 1 GiB),
 * measured for --window seconds (45) alone, then under each attack in turn
 * (tests/tools/hostile, the fedagg-hostile binary beside this one), then
 * alone again, in the same run:
 *
 *   none        no attack (the anchor of the ratios)
 *   halfopen    400 handshakes from 31 addresses that answer Retry and
 *               fall silent, renewed every 2.5 s
 *   certs       300 connections held with the certificate of a region that
 *               is no member (issued by the same CA), and 50 with a listed
 *               operator's, each reconnected as it is refused or dropped
 *   metrics     1,000 idle connections from one address and 800 from 8
 *               others on the metrics port, each sending a request it never
 *               finishes, each process reopening at most 200 a second of
 *               those the port refuses or drops
 *   streams     48 round-message streams of 16 MiB from a region's own
 *               certificate that never end, reopened as the aggregator
 *               refuses them
 *   none_after  no attack again (drift of the machine over the run)
 *
 * One JSON line per part: rounds completed per minute over the window and
 * its ratio to `none` (the goal is at least 0.9), the aggregator's peak
 * resident memory in the window next to its memory limit and its budget
 * of buffered requests, and fresh connections: every window/6 s a new
 * client with a region's certificate connects and GETs /v1/federation,
 * and the line gives the slowest and how many took at most 1 s; /healthz
 * is timed the same way.  The aggregator's own counters of its defences
 * (its /metrics: connections refused, handshakes dropped, Retries,
 * requests refused for the buffer budget, metrics-port connections shut)
 * are given as their change over the window, and the CPU seconds of the
 * aggregator, the workers and the attackers.  The attacks run on the same two
 * cores as the federation, so a ratio includes the attackers' own CPU.
 * Never fails for being slow: exits 1 only when a part could not be
 * measured (an "error" line).  About 6 minutes with the default window.
 */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "benchmarks/round_bench.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "transport/h3.h"

const char fa_bench_hostile_help[] =
    "rounds per minute of a 3-region federation alone and under each attack (half-open "
    "handshakes, certificate slots, metrics flood, stream memory hold), memory, fresh connections";

#define N_REGIONS 3
#define PROBES 6
#define MEMORY_LIMIT_MIB 1024.0
#define REQUEST_BUDGET_MIB 256.0
#define MAX_ATTACKERS 12
#define ROUND_DONE "msg=\"round completed\""

struct fed {
    char src[PATH_MAX], bin[PATH_MAX], dir[PATH_MAX];
    char agg_cfg[PATH_MAX + 32], agg_log[PATH_MAX + 32];
    char wcfg[N_REGIONS][PATH_MAX + 64], wlog[N_REGIONS][PATH_MAX + 64];
    pid_t agg, worker[N_REGIONS];
    int port, mport;
};

static const char *const regions[N_REGIONS] = {"eu-west", "us-east", "ap-south"};

static void json_error(const char *part, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void json_error(const char *part, const char *fmt, ...)
{
    char head[128];
    va_list ap;
    snprintf(head, sizeof(head), "\"bench\":\"hostile\",\"attack\":\"%s\"", part);
    va_start(ap, fmt);
    fa_bench_verror("hostile", part, head, fmt, ap);
    va_end(ap);
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static long count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[8192];
    long n = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle))
            n++;
    fclose(f);
    return n;
}

/* VmRSS of pid in MiB, or -1. */
static double rss_mib(pid_t pid)
{
    char path[64], line[256];
    FILE *f;
    double v = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6)) {
            v = strtod(line + 6, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

/* ------------------------------------------------------------- probes */

/* A fresh region connection: a new client with eu-west's certificate,
 * connected and asked GET /v1/federation.  Seconds, or -1. */
static double probe_quic(const struct fed *F)
{
    fa_h3_client_config cfg;
    fa_h3_client *c = NULL;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err;
    char addr[64], ca[PATH_MAX + 32], crt[PATH_MAX + 32], key[PATH_MAX + 32];
    double t0, dt = -1;

    snprintf(addr, sizeof(addr), "127.0.0.1:%d", F->port);
    snprintf(ca, sizeof(ca), "%s/pki/ca.crt", F->dir);
    snprintf(crt, sizeof(crt), "%s/pki/client-eu-west.crt", F->dir);
    snprintf(key, sizeof(key), "%s/pki/client-eu-west.key", F->dir);
    fa_h3_client_config_default(&cfg);
    cfg.server = addr;
    cfg.server_name = "localhost";
    cfg.ca_file = ca;
    cfg.cert_file = crt;
    cfg.key_file = key;
    cfg.connect_attempts = 3;
    cfg.connect_timeout_ms = 5000;
    if (fa_h3_client_new(&c, &cfg, &err) != 0)
        return -1;
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = "/v1/federation";
    req.timeout_ms = 15000;
    t0 = fa_time_mono_s();
    if (fa_h3_client_request(c, &req, &resp, &err) == 0) {
        if (resp.status == 200)
            dt = fa_time_mono_s() - t0;
        fa_h3_response_free(&resp);
    }
    fa_h3_client_del(c);
    return dt;
}

/* GET /healthz on a new TCP connection: seconds, or -1 (no 200 in 10 s). */
static double probe_health(const struct fed *F)
{
    struct sockaddr_in a;
    struct timeval tv = {10, 0};
    char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", buf[256];
    ssize_t n;
    size_t got = 0;
    double t0 = fa_time_mono_s(), dt = -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)F->mport);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1)) {
        while (got < sizeof(buf) - 1 && (n = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)n;
        buf[got] = '\0';
        if (!strncmp(buf, "HTTP/1.1 200", 12))
            dt = fa_time_mono_s() - t0;
    }
    close(fd);
    return dt;
}

/* The aggregator's /metrics (at most 1 MiB, malloc'ed), or NULL. */
static char *scrape(const struct fed *F)
{
    struct sockaddr_in a;
    struct timeval tv = {10, 0};
    char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    size_t cap = 1 << 20, got = 0;
    char *buf = malloc(cap);
    ssize_t n;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || !buf) {
        free(buf);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)F->mport);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
        while (got < cap - 1 && (n = read(fd, buf + got, cap - 1 - got)) > 0)
            got += (size_t)n;
    close(fd);
    buf[got] = '\0';
    return buf;
}

/* The sum of every series of metric in a scrape (0 when absent). */
static double metric_sum(const char *text, const char *metric)
{
    double s = 0;
    size_t ml = strlen(metric);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n');
        if (!strncmp(p, metric, ml) && (p[ml] == ' ' || p[ml] == '{')) {
            const char *sp = strchr(p, ' ');
            if (sp && (!nl || sp < nl))
                s += strtod(sp + 1, NULL);
        }
        p = nl ? nl + 1 : NULL;
    }
    return s;
}

/* The aggregator's counters of its defences. */
#define N_COUNTERS 5
static const char *const counter_names[N_COUNTERS] = {
    "fedagg_quic_refused_total", "fedagg_quic_handshakes_dropped_total",
    "fedagg_quic_retries_total", "fedagg_request_buffer_refused_total",
    "fedagg_metrics_port_dropped"};
static const char *const counter_keys[N_COUNTERS] = {"refused", "handshakes_dropped", "retries",
                                                     "request_refused", "metrics_port_dropped"};

static void counters(const struct fed *F, double out[N_COUNTERS])
{
    char *t = scrape(F);
    for (int i = 0; i < N_COUNTERS; i++)
        out[i] = t ? metric_sum(t, counter_names[i]) : NAN;
    free(t);
}

/* ------------------------------------------------------------ attacks */

struct attackers {
    pid_t pid[MAX_ATTACKERS];
    char log[MAX_ATTACKERS][PATH_MAX + 64];
    int n;
};

static int attack(const struct fed *F, struct attackers *A, const char *name, char *const args[],
                  int window)
{
    char exe[PATH_MAX + 32], secs[16], *argv[32];
    int argc = 0;
    fa_error err;

    if (A->n == MAX_ATTACKERS)
        return -1;
    snprintf(exe, sizeof(exe), "%s/fedagg-hostile", F->bin);
    snprintf(secs, sizeof(secs), "%d", window + 60);
    argv[argc++] = exe;
    for (int i = 0; args[i] && argc < 28; i++)
        argv[argc++] = args[i];
    argv[argc++] = "--seconds";
    argv[argc++] = secs;
    argv[argc] = NULL;
    snprintf(A->log[A->n], sizeof(A->log[A->n]), "%s/logs/attack-%s-%d.log", F->dir, name, A->n);
    if (fa_rbench_spawn(&A->pid[A->n], argv, A->log[A->n], &err) != 0)
        return -1;
    A->n++;
    return 0;
}

static int start_attack(const struct fed *F, const char *part, struct attackers *A, int window)
{
    char srv[64], msrv[64], ca[PATH_MAX + 32];
    snprintf(srv, sizeof(srv), "127.0.0.1:%d", F->port);
    snprintf(msrv, sizeof(msrv), "127.0.0.1:%d", F->mport);
    snprintf(ca, sizeof(ca), "%s/pki/ca.crt", F->dir);
    A->n = 0;
    if (!strcmp(part, "halfopen")) {
        char binds[1024] = "127.0.0.2";
        for (int i = 1; i <= 30; i++)
            snprintf(binds + strlen(binds), sizeof(binds) - strlen(binds), ",127.0.1.%d", i);
        char *a[] = {"halfopen", srv,   "--ca",       ca,     "--bind", binds,
                     "--count",  "400", "--renew-ms", "2500", NULL};
        return attack(F, A, part, a, window);
    }
    if (!strcmp(part, "certs")) {
        char crt[PATH_MAX + 32], key[PATH_MAX + 32], ocrt[PATH_MAX + 32], okey[PATH_MAX + 32];
        snprintf(crt, sizeof(crt), "%s/pki/client-retired-region.crt", F->dir);
        snprintf(key, sizeof(key), "%s/pki/client-retired-region.key", F->dir);
        snprintf(ocrt, sizeof(ocrt), "%s/pki/operator-ops.crt", F->dir);
        snprintf(okey, sizeof(okey), "%s/pki/operator-ops.key", F->dir);
        char *a[] = {"certs", srv, "--ca", ca, "--cert", crt, "--key", key, "--count", "300", NULL};
        char *b[] = {"certs", srv,  "--ca",    ca,   "--cert", ocrt,
                     "--key", okey, "--count", "50", NULL};
        return attack(F, A, part, a, window) || attack(F, A, part, b, window);
    }
    if (!strcmp(part, "metrics")) {
        char *a[] = {"idle",           msrv,   "--bind",    "127.0.0.3",
                     "--count",        "1000", "--partial", "GET /metrics HTTP/1.1\r\n",
                     "--reopen-per-s", "200",  NULL};
        if (attack(F, A, part, a, window))
            return -1;
        for (int i = 1; i <= 8; i++) {
            char bind[32];
            snprintf(bind, sizeof(bind), "127.0.3.%d", i);
            char *b[] = {"idle",           msrv,  "--bind",    bind,
                         "--count",        "100", "--partial", "GET /metrics HTTP/1.1\r\n",
                         "--reopen-per-s", "200", NULL};
            if (attack(F, A, part, b, window))
                return -1;
        }
        return 0;
    }
    if (!strcmp(part, "streams")) {
        char crt[PATH_MAX + 32], key[PATH_MAX + 32];
        snprintf(crt, sizeof(crt), "%s/pki/client-ap-south.crt", F->dir);
        snprintf(key, sizeof(key), "%s/pki/client-ap-south.key", F->dir);
        char *a[] = {"streams", srv,     "--ca",    ca,         "--cert",
                     crt,       "--key", key,       "--path",   "/v1/rounds/1/0/advertise",
                     "--count", "48",    "--bytes", "16777215", "--reopen",
                     "1",       NULL};
        return attack(F, A, part, a, window);
    }
    return 0; /* none */
}

/* Stops the attackers; their one-line reports (JSON) into report. */
static void stop_attack(struct attackers *A, char *report, size_t cap)
{
    size_t used = 0;
    report[0] = '\0';
    for (int i = 0; i < A->n; i++) {
        char *t;
        (void)fa_rbench_stop(A->pid[i], 5000);
        t = fa_rbench_read_text(A->log[i]);
        if (t) {
            char *j = strstr(t, "{\"attack\"");
            if (j) {
                char *nl = strchr(j, '\n');
                if (nl)
                    *nl = '\0';
                used += (size_t)snprintf(report + used, used < cap ? cap - used : 0, "%s%s",
                                         used ? "," : "", j);
            }
            free(t);
        }
    }
    A->n = 0;
}

/* ----------------------------------------------------------- the run */

static int setup(struct fed *F, char *why, size_t n)
{
    char script[PATH_MAX + 64], port[16], mport[16], log[PATH_MAX + 32];
    char *argv[] = {"/bin/bash", script, F->dir, F->bin, port, mport, NULL};

    F->port = fa_rbench_free_port(1);
    F->mport = fa_rbench_free_port(0);
    if (F->port <= 0 || F->mport <= 0) {
        snprintf(why, n, "no free port");
        return -1;
    }
    snprintf(port, sizeof(port), "%d", F->port);
    snprintf(mport, sizeof(mport), "%d", F->mport);
    snprintf(script, sizeof(script), "%s/benchmarks/bench-hostile-setup.sh", F->src);
    snprintf(log, sizeof(log), "%s/setup.log", F->dir);
    if (fa_rbench_run(argv, log) != 0) {
        snprintf(why, n, "%s failed: see %s", script, log);
        return -1;
    }
    snprintf(F->agg_cfg, sizeof(F->agg_cfg), "%s/aggregator.textproto", F->dir);
    snprintf(F->agg_log, sizeof(F->agg_log), "%s/logs/aggregator.log", F->dir);
    for (int i = 0; i < N_REGIONS; i++) {
        snprintf(F->wcfg[i], sizeof(F->wcfg[i]), "%s/worker-%s.textproto", F->dir, regions[i]);
        snprintf(F->wlog[i], sizeof(F->wlog[i]), "%s/logs/worker-%s.log", F->dir, regions[i]);
    }
    return 0;
}

static int start_fed(struct fed *F)
{
    char exe[PATH_MAX + 32];
    fa_error err;
    {
        char *argv[] = {exe, "--config", F->agg_cfg, NULL};
        snprintf(exe, sizeof(exe), "%s/fedagg-aggregator", F->bin);
        if (fa_rbench_spawn(&F->agg, argv, F->agg_log, &err) != 0)
            return -1;
    }
    for (int i = 0; i < N_REGIONS; i++) {
        char *argv[] = {exe, "--config", F->wcfg[i], NULL};
        snprintf(exe, sizeof(exe), "%s/fedagg-worker", F->bin);
        if (fa_rbench_spawn(&F->worker[i], argv, F->wlog[i], &err) != 0)
            return -1;
    }
    return 0;
}

static const char *who_died(const struct fed *F)
{
    if (!fa_rbench_alive(F->agg))
        return "the aggregator";
    for (int i = 0; i < N_REGIONS; i++)
        if (!fa_rbench_alive(F->worker[i]))
            return regions[i];
    return NULL;
}

struct part_result {
    double rounds_per_min, rss_peak, quic[PROBES], health[PROBES];
    int nquic, nhealth;
    double cpu_agg, cpu_workers, cpu_attack; /* CPU seconds in the window */
    double counters[N_COUNTERS];             /* their change in the window */
};

static double cpu_workers(const struct fed *F)
{
    double s = 0;
    for (int i = 0; i < N_REGIONS; i++)
        s += fa_rbench_cpu_seconds(F->worker[i]);
    return s;
}

static double cpu_attackers(const struct attackers *A)
{
    double s = 0;
    for (int i = 0; i < A->n; i++)
        s += fa_rbench_cpu_seconds(A->pid[i]);
    return s;
}

static double max_of(const double *v, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        if (v[i] < 0 || v[i] > m)
            m = v[i] < 0 ? INFINITY : v[i];
    return m;
}

static int within(const double *v, int n, double limit)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += v[i] >= 0 && v[i] <= limit;
    return k;
}

/* One part: the attack (if any) for window seconds, after 3 s for it to
 * take hold.  0, or -1 with why. */
static int run_part(const struct fed *F, const char *part, int window, struct part_result *R,
                    char *report, size_t rcap, char *why, size_t wn)
{
    struct attackers A;
    double t0, next_probe, step = (double)window / PROBES;
    long c0;
    const char *dead;

    memset(R, 0, sizeof(*R));
    if (start_attack(F, part, &A, window) != 0) {
        snprintf(why, wn, "cannot start %s/fedagg-hostile", F->bin);
        stop_attack(&A, report, rcap);
        return -1;
    }
    sleep_s(3);
    c0 = count_lines(F->agg_log, ROUND_DONE);
    R->cpu_agg = -fa_rbench_cpu_seconds(F->agg);
    R->cpu_workers = -cpu_workers(F);
    R->cpu_attack = -cpu_attackers(&A);
    {
        double c[N_COUNTERS];
        counters(F, c);
        for (int i = 0; i < N_COUNTERS; i++)
            R->counters[i] = -c[i];
    }
    t0 = fa_time_mono_s();
    next_probe = t0 + step / 2;
    while (fa_time_mono_s() - t0 < window) {
        double r = rss_mib(F->agg);
        if (r > R->rss_peak)
            R->rss_peak = r;
        if ((dead = who_died(F)) != NULL) {
            snprintf(why, wn, "%s exited during the attack (see %s/logs)", dead, F->dir);
            stop_attack(&A, report, rcap);
            return -1;
        }
        if (fa_time_mono_s() >= next_probe && R->nquic < PROBES) {
            R->quic[R->nquic++] = probe_quic(F);
            R->health[R->nhealth++] = probe_health(F);
            next_probe += step;
        }
        sleep_s(0.25);
    }
    R->rounds_per_min =
        (double)(count_lines(F->agg_log, ROUND_DONE) - c0) * 60.0 / (fa_time_mono_s() - t0);
    R->cpu_agg += fa_rbench_cpu_seconds(F->agg);
    R->cpu_workers += cpu_workers(F);
    R->cpu_attack += cpu_attackers(&A);
    sleep_s(1.2); /* the aggregator exports its counters every second */
    {
        double c[N_COUNTERS];
        counters(F, c);
        for (int i = 0; i < N_COUNTERS; i++)
            R->counters[i] += c[i];
    }
    stop_attack(&A, report, rcap);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg-bench hostile [--window SECONDS] [--only PART,...] [--keep] "
               "[--dir DIR]\n"
               "  parts: none,halfopen,certs,metrics,streams,none_after (all by default)\n");
}

int fa_bench_hostile(int argc, char **argv)
{
    static const struct option lopts[] = {
        {"window", required_argument, NULL, 'w'}, {"only", required_argument, NULL, 'o'},
        {"keep", no_argument, NULL, 'k'},         {"dir", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    static const char *const parts[] = {"none",    "halfopen", "certs",
                                        "metrics", "streams",  "none_after"};
    static struct fed F;
    static char report[8192];
    const char *only = NULL, *dir = NULL;
    double base_rpm = NAN, base_rss = NAN;
    int c, window = 45, keep = 0, status = 0;
    char why[1024] = "";
    ssize_t len;

    memset(&F, 0, sizeof(F));
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
        switch (c) {
        case 'w': window = atoi(optarg); break;
        case 'o': only = optarg; break;
        case 'k': keep = 1; break;
        case 'D': dir = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (window < 10 || window > 3600) {
        usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    fa_rbench_cleanup_on_signals();
    fa_log_set_level(FA_LOG_ERROR);
    len = readlink("/proc/self/exe", F.bin, sizeof(F.bin) - 1);
    if (len <= 0) {
        json_error("setup", "cannot find this program (/proc/self/exe)");
        return 1;
    }
    F.bin[len] = '\0';
    {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof(tmp), "%s", F.bin);
        snprintf(F.bin, sizeof(F.bin), "%s", dirname(tmp));
    }
    {
        struct fa_rbench_paths P;
        if (fa_rbench_find_src(&P) != 0) {
            json_error("setup", "cannot find the source tree; set FA_SRC");
            return 1;
        }
        snprintf(F.src, sizeof(F.src), "%s", P.src);
    }
    if (dir) {
        snprintf(F.dir, sizeof(F.dir), "%s", dir);
    } else {
        snprintf(F.dir, sizeof(F.dir), "/tmp/fedagg-bench-hostile.XXXXXX");
        if (!mkdtemp(F.dir)) {
            json_error("setup", "mkdtemp: %s", strerror(errno));
            return 1;
        }
    }
    fprintf(stderr, "fedagg-bench hostile: a 3-region federation in %s, %d s a part\n", F.dir,
            window);
    if (setup(&F, why, sizeof(why)) != 0 || start_fed(&F) != 0) {
        json_error("setup", "%s", why[0] ? why : "cannot start the federation");
        status = 1;
        goto out;
    }
    /* warm up: two rounds, so that every process has loaded its data */
    for (double t0 = fa_time_mono_s(); count_lines(F.agg_log, ROUND_DONE) < 2;) {
        const char *dead = who_died(&F);
        if (dead || fa_time_mono_s() - t0 > 180) {
            json_error("setup", "%s",
                       dead ? "a process died before the second round"
                            : "no second round in 180 s");
            status = 1;
            goto out;
        }
        sleep_s(0.2);
    }
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
        struct part_result R;
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32];
        double qm, hm;
        if (only && !strstr(only, parts[p]))
            continue;
        if (run_part(&F, parts[p], window, &R, report, sizeof(report), why, sizeof(why)) != 0) {
            json_error(parts[p], "%s", why);
            status = 1;
            goto out;
        }
        if (!strcmp(parts[p], "none")) {
            base_rpm = R.rounds_per_min;
            base_rss = R.rss_peak;
        }
        qm = max_of(R.quic, R.nquic);
        hm = max_of(R.health, R.nhealth);
        printf("{\"bench\":\"hostile\",\"attack\":\"%s\",\"window_s\":%d,\"rounds_per_min\":%s,"
               "\"ref\":\"none\",\"ref_rounds_per_min\":%s,\"ratio\":%s,\"goal_ratio\":0.9,"
               "\"agg_rss_peak_mib\":%s,\"agg_rss_none_mib\":%s,\"memory_limit_mib\":%.0f,"
               "\"request_budget_mib\":%.0f,\"connect_probes\":%d,\"connect_within_1s\":%d,"
               "\"connect_max_s\":%s,\"healthz_within_1s\":%d,\"healthz_max_s\":%s,"
               "\"cpu_s_aggregator\":%.1f,\"cpu_s_workers\":%.1f,\"cpu_s_attackers\":%.1f,"
               "\"aggregator\":{\"%s\":%.0f,\"%s\":%.0f,\"%s\":%.0f,\"%s\":%.0f,\"%s\":%.0f},"
               "\"attackers\":[%s]}\n",
               parts[p], window, fa_bench_json_num(b1, sizeof(b1), R.rounds_per_min, 2),
               fa_bench_json_num(b2, sizeof(b2), base_rpm, 2),
               fa_bench_json_num(b3, sizeof(b3), R.rounds_per_min / base_rpm, 3),
               fa_bench_json_num(b4, sizeof(b4), R.rss_peak, 1),
               fa_bench_json_num(b5, sizeof(b5), base_rss, 1), MEMORY_LIMIT_MIB, REQUEST_BUDGET_MIB,
               R.nquic, within(R.quic, R.nquic, 1.0), fa_bench_json_num(b6, sizeof(b6), qm, 3),
               within(R.health, R.nhealth, 1.0), fa_bench_json_num(b7, sizeof(b7), hm, 3),
               R.cpu_agg, R.cpu_workers, R.cpu_attack, counter_keys[0], R.counters[0],
               counter_keys[1], R.counters[1], counter_keys[2], R.counters[2], counter_keys[3],
               R.counters[3], counter_keys[4], R.counters[4], report);
        fflush(stdout);
    }
out:
    if (F.agg > 0)
        (void)fa_rbench_stop(F.agg, 10000);
    for (int i = 0; i < N_REGIONS; i++)
        if (F.worker[i] > 0)
            (void)fa_rbench_stop(F.worker[i], 10000);
    if (!keep && status == 0 && !dir)
        fa_rbench_rm_rf(F.dir);
    else
        fprintf(stderr, "fedagg-bench hostile: the run's files are in %s\n", F.dir);
    return status;
}
