/* bench_transport.c - `fedagg-bench transport`: HTTP/3 goodput (docs/history.md,
 * Transport).
 *
 * Loopback, one body of --bytes (default 1 GiB) per run, each stack's server
 * and client in their own processes, the same file served by every server:
 *   ours      fa_h3 server (forked child) and fa_h3 client (this process)
 *   anchor 1  Debian's gtlsserver + gtlsclient (ngtcp2 0.12 examples, GnuTLS)
 *   anchor 2  openssl s_server -WWW + curl: TLS 1.3 over TCP (download only:
 *             neither has an upload path without a web server)
 * measured in the same run, alternating, median of --runs.  Each line gives
 * goodput (MB/s = 1e6 bytes/s, handshake included), CPU seconds per GB of
 * both processes together, and ratios.  Every stack runs with its defaults:
 * ours sizes datagrams from the route (max_udp_payload 0: on loopback
 * 65507-byte datagrams, like TCP's 64 KiB segments there; "udp_payload"
 * says what our client used), the ngtcp2 examples discover 1200..1452.
 * With --internet a download line pins ours to 1452 (Internet-sized, the
 * same discovery as the examples); with --jumbo one lets both QUIC stacks
 * send 8952-byte datagrams (a 9000-byte MTU LAN).
 *
 * WAN: goodput through fedagg-relay with the test profiles (wan80, wan220,
 * corrupt3, a 2 s blackhole), CUBIC next to BBR2, our stack both times, with
 * Internet-sized datagrams (1452): the relay listens on loopback, and its
 * per-datagram loss on 64 KB datagrams would not be the profile's path.
 * Needs the deploy/pki.sh script (found via $FA_SRC or this file's path) and
 * fedagg-relay next to this binary.  Never fails for being slow.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "benchmarks/measure.h"
#include "common/fa_log.h"
#include "transport/h3.h"

const char fa_bench_transport_help[] = "HTTP/3 goodput on loopback vs gtlsclient/gtlsserver and "
                                       "curl/openssl TLS-TCP; WAN profiles CUBIC vs BBR2";

typedef struct opts {
    uint64_t bytes;
    int runs;
    int wan, loopback, jumbo, internet, anchors;
    const char *only;
    int links;          /* the cross-region link grid (wan_links) */
    double link_mbit;   /* > 0: only the grid's links of this rate (--link-mbit) */
    uint64_t big_bytes; /* its multi-GB upload; 0 = none */
} opts;

/* Datagrams through the WAN relay: Internet-sized (see the top). */
#define WAN_UDP_PAYLOAD 1452

/* The largest UDP payload our client used in its last transfer. */
static uint32_t last_udp_payload;

static char tmpdir[256], pki[300], binfile[400], bindir[PATH_MAX];

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

static double self_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
}

static const char *src_dir(void)
{
    static char buf[PATH_MAX];
    const char *s = getenv("FA_SRC"), *p;
    if (s && *s)
        return s;
    snprintf(buf, sizeof(buf), "%s", __FILE__);
    p = strstr(buf, "/benchmarks/");
    if (p)
        buf[p - buf] = '\0';
    return buf;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0), port = 0;
    struct sockaddr_in a;
    socklen_t l = sizeof(a);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Starts argv with stdout/stderr to /dev/null (cwd when given). */
static pid_t spawn(char *const argv[], const char *cwd)
{
    pid_t pid = fork();
    if (pid == 0) {
        int dn = open("/dev/null", O_RDWR);
        if (dn >= 0) {
            dup2(dn, 0);
            dup2(dn, 1);
            dup2(dn, 2);
        }
        if (cwd && chdir(cwd) != 0)
            _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; returns its CPU seconds (user + sys), or -1 on failure. */
static double reap(pid_t pid, int *status)
{
    struct rusage ru;
    int st = 0;
    if (wait4(pid, &st, 0, &ru) != pid)
        return -1;
    if (status)
        *status = st;
    return tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
}

static double stop(pid_t pid)
{
    kill(pid, SIGTERM);
    return reap(pid, NULL);
}

static int have(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

typedef struct result {
    double mbps, cpu_per_gb;
    int ok;
} result;

/* Median of the successful runs. */
static result median(const result *r, int n)
{
    double m[16], c[16];
    int k = 0;
    result out = {0, 0, 0};
    for (int i = 0; i < n; i++)
        if (r[i].ok) {
            m[k] = r[i].mbps;
            c[k] = r[i].cpu_per_gb;
            k++;
        }
    if (!k)
        return out;
    qsort(m, (size_t)k, sizeof(double), fa_bench_cmp_double);
    qsort(c, (size_t)k, sizeof(double), fa_bench_cmp_double);
    out.mbps = m[k / 2];
    out.cpu_per_gb = c[k / 2];
    out.ok = 1;
    return out;
}

/* ------------------------------------------------------------ our server */

static int srv_fd_file(fa_h3_request *req, void *arg);

typedef struct file_src {
    int fd;
} file_src;

static ssize_t file_read(void *arg, uint8_t *buf, size_t cap)
{
    file_src *f = arg;
    ssize_t n;
    do {
        n = read(f->fd, buf, cap);
    } while (n < 0 && errno == EINTR);
    return n < 0 ? FA_ERR_IO : n;
}

static void file_done(void *arg, int err)
{
    file_src *f = arg;
    close(f->fd);
    free(f);
}

typedef struct mapping {
    void *p;
    size_t len;
} mapping;

static void unmap(void *arg)
{
    mapping *m = arg;
    munmap(m->p, m->len);
    free(m);
}

/* The file is mapped and sent without a copy (as gtlsserver does), or
 * streamed through read() with ?read. */
static int srv_fd_file(fa_h3_request *req, void *arg)
{
    file_src *f = malloc(sizeof(*f));
    struct stat st;
    if (!f)
        return -1;
    f->fd = open(binfile, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &st) != 0) {
        free(f);
        return fa_h3_respond(req, 404, NULL, 0, NULL, 0);
    }
    if (strcmp(fa_h3_request_query(req), "read") != 0 && st.st_size > 0) {
        mapping *m = malloc(sizeof(*m));
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, f->fd, 0);
        file_done(f, 0);
        if (!m || p == MAP_FAILED) {
            free(m);
            if (p != MAP_FAILED)
                munmap(p, (size_t)st.st_size);
            return -1;
        }
        madvise(p, (size_t)st.st_size, MADV_SEQUENTIAL);
        m->p = p;
        m->len = (size_t)st.st_size;
        if (fa_h3_respond_ref(req, 200, NULL, 0, p, m->len, unmap, m) != 0) {
            unmap(m);
            return -1;
        }
        return 0;
    }
    if (fa_h3_respond_stream(req, 200, NULL, 0, st.st_size, file_read, file_done, f) != 0) {
        file_done(f, 0);
        return -1;
    }
    return 0;
}

static int srv_sink_body(fa_h3_request *req, const uint8_t *d, size_t n, void *arg)
{
    return 0;
}

static void srv_sink_end(fa_h3_request *req, void *arg)
{
    char b[32];
    snprintf(b, sizeof(b), "%" PRIu64, fa_h3_request_body_received(req));
    (void)fa_h3_respond(req, 200, NULL, 0, b, strlen(b));
}

static int srv_sink(fa_h3_request *req, void *arg)
{
    return 0;
}

/* Forks a child running our server on `port`; returns its pid. */
static pid_t our_server(int port, int cc, uint32_t udp_payload)
{
    int p[2];
    pid_t pid;
    char ready;
    if (pipe(p) != 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        fa_h3_server_config cfg;
        fa_h3_server *srv;
        fa_error err;
        char listen[64], cert[400], key[400], ca[400];
        fa_h3_handler file = {.on_request = srv_fd_file};
        fa_h3_handler sink = {
            .on_request = srv_sink, .on_body = srv_sink_body, .on_body_end = srv_sink_end};
        close(p[0]);
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
        snprintf(cert, sizeof(cert), "%s/server.crt", pki);
        snprintf(key, sizeof(key), "%s/server.key", pki);
        snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
        fa_h3_server_config_default(&cfg);
        cfg.listen = listen;
        cfg.cert_file = cert;
        cfg.key_file = key;
        cfg.ca_file = ca;
        cfg.quic.cc = cc;
        cfg.quic.max_udp_payload = udp_payload;
        cfg.drain_on_signal = 1;
        cfg.drain_timeout_ms = 1000;
        if (fa_h3_server_new(&srv, &cfg, &err) != 0) {
            fprintf(stderr, "bench: server: %s\n", err.msg);
            _exit(1);
        }
        fa_h3_server_route(srv, "GET", "/file", &file, NULL);
        fa_h3_server_route(srv, "POST", "/sink", &sink, NULL);
        ready = 1;
        if (write(p[1], &ready, 1) != 1)
            _exit(1);
        close(p[1]);
        fa_h3_server_run(srv, &err);
        fa_h3_server_del(srv);
        _exit(0);
    }
    close(p[1]);
    if (pid < 0 || read(p[0], &ready, 1) != 1) {
        close(p[0]);
        if (pid > 0)
            reap(pid, NULL);
        return -1;
    }
    close(p[0]);
    return pid;
}

/* ------------------------------------------------------------ our client */

typedef struct counter {
    uint64_t n;
    double t0, limit_s; /* limit_s > 0: stop the download after that long */
    int stopped;
} counter;

static int count_body(void *arg, const uint8_t *d, size_t n)
{
    counter *c = arg;
    c->n += n;
    if (c->limit_s > 0 && fa_bench_now_s() - c->t0 > c->limit_s) {
        c->stopped = 1;
        return -1; /* cancels the request: goodput is what came by then */
    }
    return 0;
}

typedef struct upsrc {
    int fd;
} upsrc;

static ssize_t up_read(void *arg, uint8_t *buf, size_t cap)
{
    ssize_t n = read(((upsrc *)arg)->fd, buf, cap);
    return n < 0 ? FA_ERR_IO : n;
}

/* One transfer with our client against 127.0.0.1:port.  Returns seconds or
 * a negative value; *moved = body bytes. */
/* One transfer; the seconds it took, or -1.  limit_s > 0 (downloads only):
 * stop after that long and put what came by then in *moved. */
static double our_transfer_for(int port, int upload, uint64_t bytes, int cc, uint32_t udp_payload,
                               double limit_s, uint64_t *moved)
{
    fa_h3_client_config cfg;
    fa_h3_client *c;
    fa_h3_client_req req;
    fa_h3_response resp;
    fa_error err = {0};
    char server[64], cert[400], key[400], ca[400];
    counter cnt = {0};
    upsrc src = {-1};
    double t0, t1;
    int rv;

    snprintf(server, sizeof(server), "127.0.0.1:%d", port);
    snprintf(cert, sizeof(cert), "%s/client-eu-west.crt", pki);
    snprintf(key, sizeof(key), "%s/client-eu-west.key", pki);
    snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
    fa_h3_client_config_default(&cfg);
    cfg.server = server;
    cfg.server_name = "localhost";
    cfg.ca_file = ca;
    cfg.cert_file = cert;
    cfg.key_file = key;
    cfg.quic.cc = cc;
    cfg.quic.max_udp_payload = udp_payload;
    if (fa_h3_client_new(&c, &cfg, &err) != 0) {
        fprintf(stderr, "bench: client: %s\n", err.msg);
        return -1;
    }
    memset(&req, 0, sizeof(req));
    req.timeout_ms = 600000;
    if (upload) {
        src.fd = open(binfile, O_RDONLY | O_CLOEXEC);
        req.method = "POST";
        req.path = "/sink";
        req.body_read = up_read;
        req.body_arg = &src;
        req.body_length = (int64_t)bytes;
    } else {
        req.method = "GET";
        req.path = "/file";
        req.on_body = count_body;
        req.on_body_arg = &cnt;
    }
    t0 = fa_bench_now_s();
    cnt.t0 = t0;
    cnt.limit_s = upload ? 0 : limit_s;
    rv = fa_h3_client_request(c, &req, &resp, &err);
    t1 = fa_bench_now_s();
    if (src.fd >= 0)
        close(src.fd);
    {
        fa_h3_client_stats st;
        fa_h3_client_get_stats(c, &st);
        last_udp_payload = st.udp_payload;
    }
    fa_h3_client_del(c);
    if (cnt.stopped) {
        *moved = cnt.n;
        fa_h3_response_free(&resp);
        return t1 - t0;
    }
    if (rv != 0 || resp.status != 200) {
        fprintf(stderr, "bench: our %s: %s (status %d)\n", upload ? "upload" : "download",
                rv ? err.msg : "", resp.status);
        fa_h3_response_free(&resp);
        return -1;
    }
    *moved = upload ? (resp.body ? strtoull((char *)resp.body, NULL, 10) : 0) : cnt.n;
    fa_h3_response_free(&resp);
    return t1 - t0;
}

static double our_transfer(int port, int upload, uint64_t bytes, int cc, uint32_t udp_payload,
                           uint64_t *moved)
{
    return our_transfer_for(port, upload, bytes, cc, udp_payload, 0, moved);
}

static result run_ours(int upload, uint64_t bytes, uint32_t udp_payload)
{
    result r = {0, 0, 0};
    int port = free_port();
    fa_h3_quic_opts d;
    pid_t srv;
    double c0, sec, scpu;
    uint64_t moved = 0;
    fa_h3_quic_default(&d); /* ours with its defaults, as the anchors run with theirs */
    srv = our_server(port, d.cc, udp_payload);
    if (srv < 0)
        return r;
    c0 = self_cpu();
    sec = our_transfer(port, upload, bytes, d.cc, udp_payload, &moved);
    scpu = stop(srv);
    if (sec > 0 && moved == bytes) {
        r.mbps = (double)bytes / 1e6 / sec;
        r.cpu_per_gb = (self_cpu() - c0 + scpu) / ((double)bytes / 1e9);
        r.ok = 1;
    }
    return r;
}

/* ------------------------------------------------------------- anchors */

static result run_gtls(int upload, uint64_t bytes, uint32_t udp_payload)
{
    result r = {0, 0, 0};
    int port = free_port(), st = 0;
    char ps[16], url[128], key[400], crt[400], ckey[400], ccrt[400], pay[16];
    pid_t srv, cli;
    double t0, t1, ccpu, scpu;

    snprintf(ps, sizeof(ps), "%d", port);
    snprintf(url, sizeof(url), "https://localhost:%d/%s", port, upload ? "small.txt" : "blob.bin");
    snprintf(key, sizeof(key), "%s/server.key", pki);
    snprintf(crt, sizeof(crt), "%s/server.crt", pki);
    snprintf(ckey, sizeof(ckey), "%s/client-eu-west.key", pki);
    snprintf(ccrt, sizeof(ccrt), "%s/client-eu-west.crt", pki);
    snprintf(pay, sizeof(pay), "%u", udp_payload);
    {
        char *argv[16];
        int k = 0;
        argv[k++] = "gtlsserver";
        argv[k++] = "-q";
        argv[k++] = "-d";
        argv[k++] = tmpdir;
        if (udp_payload) {
            argv[k++] = "--max-udp-payload-size";
            argv[k++] = pay;
        }
        argv[k++] = "127.0.0.1";
        argv[k++] = ps;
        argv[k++] = key;
        argv[k++] = crt;
        argv[k] = NULL;
        srv = spawn(argv, NULL);
    }
    usleep(300000); /* gtlsserver has no readiness signal */
    {
        char *argv[24];
        int k = 0;
        argv[k++] = "gtlsclient";
        argv[k++] = "-q";
        argv[k++] = "--exit-on-all-streams-close";
        argv[k++] = "--cert";
        argv[k++] = ccrt;
        argv[k++] = "--key";
        argv[k++] = ckey;
        if (udp_payload) {
            argv[k++] = "--max-udp-payload-size";
            argv[k++] = pay;
        }
        if (upload) {
            argv[k++] = "-m";
            argv[k++] = "POST";
            argv[k++] = "-d";
            argv[k++] = binfile;
        }
        argv[k++] = "127.0.0.1";
        argv[k++] = ps;
        argv[k++] = url;
        argv[k] = NULL;
        t0 = fa_bench_now_s();
        cli = spawn(argv, NULL);
        ccpu = reap(cli, &st);
        t1 = fa_bench_now_s();
    }
    scpu = stop(srv);
    if (ccpu >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        r.mbps = (double)bytes / 1e6 / (t1 - t0);
        r.cpu_per_gb = (ccpu + scpu) / ((double)bytes / 1e9);
        r.ok = 1;
    }
    return r;
}

static result run_tcp(uint64_t bytes)
{
    result r = {0, 0, 0};
    int port = free_port(), st = 0; /* TCP and UDP ports are separate; usually free too */
    char ps[16], url[128], key[400], crt[400], ca[400];
    pid_t srv, cli;
    double t0, t1, ccpu, scpu;

    snprintf(ps, sizeof(ps), "%d", port);
    snprintf(url, sizeof(url), "https://localhost:%d/blob.bin", port);
    snprintf(key, sizeof(key), "%s/server.key", pki);
    snprintf(crt, sizeof(crt), "%s/server.crt", pki);
    snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
    {
        char *argv[] = {"openssl", "s_server", "-quiet", "-WWW", "-accept", ps,
                        "-cert",   crt,        "-key",   key,    "-tls1_3", NULL};
        srv = spawn(argv, tmpdir);
    }
    usleep(300000);
    {
        char *argv[] = {"curl", "-s", "-f", "--cacert", ca, "-o", "/dev/null", url, NULL};
        t0 = fa_bench_now_s();
        cli = spawn(argv, NULL);
        ccpu = reap(cli, &st);
        t1 = fa_bench_now_s();
    }
    scpu = stop(srv);
    if (ccpu >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        r.mbps = (double)bytes / 1e6 / (t1 - t0);
        r.cpu_per_gb = (ccpu + scpu) / ((double)bytes / 1e9);
        r.ok = 1;
    }
    return r;
}

/* ----------------------------------------------------------------- setup */

static int make_file(uint64_t bytes)
{
    uint8_t *buf = malloc(1 << 20);
    uint64_t x = 0x9e3779b97f4a7c15ull, left = bytes;
    int fd;
    FILE *f;
    char small[300];

    snprintf(binfile, sizeof(binfile), "%s/blob.bin", tmpdir);
    fd = open(binfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !buf) {
        free(buf);
        return -1;
    }
    for (size_t i = 0; i < (1 << 20); i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    while (left) {
        size_t n = left < (1 << 20) ? (size_t)left : (1 << 20);
        buf[0]++; /* not one MiB repeated */
        if (write(fd, buf, n) != (ssize_t)n) {
            close(fd);
            free(buf);
            return -1;
        }
        left -= n;
    }
    close(fd);
    free(buf);
    snprintf(small, sizeof(small), "%s/small.txt", tmpdir);
    f = fopen(small, "w");
    if (f) {
        fputs("ok\n", f);
        fclose(f);
    }
    return 0;
}

static int setup(uint64_t bytes)
{
    char cmd[1200];
    ssize_t n;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_bench_transport.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    if (make_file(bytes) != 0)
        return -1;
    snprintf(pki, sizeof(pki), "%s/pki", tmpdir);
    snprintf(cmd, sizeof(cmd), "bash '%s/deploy/pki.sh' '%s' --regions eu-west >/dev/null 2>&1",
             src_dir(), pki);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench: %s failed\n", cmd);
        return -1;
    }
    n = readlink("/proc/self/exe", bindir, sizeof(bindir) - 1);
    if (n > 0) {
        char *s;
        bindir[n] = '\0';
        s = strrchr(bindir, '/');
        if (s)
            *s = '\0';
    }
    return 0;
}

static void cleanup(void)
{
    char cmd[400];
    if (!tmpdir[0])
        return;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: cannot remove %s\n", tmpdir);
}

/* ------------------------------------------------------------- loopback */

static void print_line(const char *op, uint64_t bytes, const char *ref, result ours, result anchor,
                       const char *extra)
{
    printf(
        "{\"bench\":\"transport\",\"op\":\"%s\",\"bytes\":%" PRIu64 "%s,\"mbytes_per_s\":%.1f,"
        "\"cpu_s_per_gb\":%.2f,\"ref\":\"%s\",\"ref_mbytes_per_s\":%.1f,\"ref_cpu_s_per_gb\":%.2f,"
        "\"ratio\":%.2f,\"cpu_ratio\":%.2f}\n",
        op, bytes, extra, ours.mbps, ours.cpu_per_gb, ref, anchor.mbps, anchor.cpu_per_gb,
        anchor.mbps > 0 ? ours.mbps / anchor.mbps : 0,
        ours.cpu_per_gb > 0 ? anchor.cpu_per_gb / ours.cpu_per_gb : 0);
    fflush(stdout);
}

static void loopback(const opts *o)
{
    result ours[16], gtls[16], tcp[16];
    int have_gtls = o->anchors && have("gtlsclient") && have("gtlsserver");
    int have_tcp = o->anchors && have("curl") && have("openssl");
    int runs = o->runs > 16 ? 16 : o->runs;

    char extra[64];

    /* download: alternate the stacks run by run, so drift hits all alike */
    for (int i = 0; i < runs; i++) {
        ours[i] = run_ours(0, o->bytes, 0);
        gtls[i] = have_gtls ? run_gtls(0, o->bytes, 0) : (result){0, 0, 0};
        tcp[i] = have_tcp ? run_tcp(o->bytes) : (result){0, 0, 0};
    }
    snprintf(extra, sizeof(extra), ",\"udp_payload\":%u", last_udp_payload);
    print_line("download", o->bytes, "gtlsclient+gtlsserver (ngtcp2 0.12 examples)",
               median(ours, runs), median(gtls, runs), extra);
    print_line("download", o->bytes, "curl+openssl s_server -WWW (TLS 1.3 over TCP)",
               median(ours, runs), median(tcp, runs), extra);
    for (int i = 0; i < runs; i++) {
        ours[i] = run_ours(1, o->bytes, 0);
        gtls[i] = have_gtls ? run_gtls(1, o->bytes, 0) : (result){0, 0, 0};
    }
    snprintf(extra, sizeof(extra), ",\"udp_payload\":%u", last_udp_payload);
    print_line("upload", o->bytes, "gtlsclient+gtlsserver (ngtcp2 0.12 examples)",
               median(ours, runs), median(gtls, runs), extra);
    if (o->internet) {
        for (int i = 0; i < runs; i++) {
            ours[i] = run_ours(0, o->bytes, 1452);
            gtls[i] = have_gtls ? run_gtls(0, o->bytes, 0) : (result){0, 0, 0};
            tcp[i] = have_tcp ? run_tcp(o->bytes) : (result){0, 0, 0};
        }
        print_line("download", o->bytes, "gtlsclient+gtlsserver (ngtcp2 0.12 examples)",
                   median(ours, runs), median(gtls, runs), ",\"udp_payload\":1452");
        print_line("download", o->bytes, "curl+openssl s_server -WWW (TLS 1.3 over TCP)",
                   median(ours, runs), median(tcp, runs), ",\"udp_payload\":1452");
    }
    if (o->jumbo) {
        for (int i = 0; i < runs; i++) {
            ours[i] = run_ours(0, o->bytes, 8952);
            gtls[i] = have_gtls ? run_gtls(0, o->bytes, 8952) : (result){0, 0, 0};
        }
        print_line("download", o->bytes, "gtlsclient+gtlsserver (ngtcp2 0.12 examples)",
                   median(ours, runs), median(gtls, runs), ",\"udp_payload\":8952");
    }
}

/* ------------------------------------------------------------------ WAN */

typedef struct profile {
    const char *name;
    const char *args[8];
    uint64_t bytes;
} profile;

static const profile profiles[] = {
    {"wan80", {"--profile", "wan80", NULL}, 4u << 20},
    {"wan220", {"--profile", "wan220", NULL}, 2u << 20},
    {"corrupt3", {"--profile", "corrupt3", NULL}, 50u << 20},
    {"blackhole2s",
     {"--rate", "40M", "--blackhole", "1.0:2.0", "--t0", "first-packet", NULL},
     100u << 20},
};

/* One transfer through fedagg-relay (impairments: args, NULL-terminated) to
 * our server with controller cc: MB/s, or -1.  limit_s as our_transfer_for;
 * a stopped download counts what came by then. */
static double relayed_once(const char *const *args, int cc, int upload, uint64_t bytes,
                           double limit_s)
{
    int sport = free_port(), rport = free_port();
    char up[64], listen[64], relay[PATH_MAX + 32];
    char *argv[24];
    int k = 0;
    pid_t srv, rel;
    double sec;
    uint64_t moved = 0;

    srv = our_server(sport, cc, WAN_UDP_PAYLOAD);
    if (srv < 0)
        return -1;
    snprintf(relay, sizeof(relay), "%s/fedagg-relay", bindir);
    snprintf(up, sizeof(up), "127.0.0.1:%d", sport);
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", rport);
    argv[k++] = relay;
    argv[k++] = "--listen";
    argv[k++] = listen;
    argv[k++] = "--upstream";
    argv[k++] = up;
    argv[k++] = "--seed";
    argv[k++] = "7";
    for (int i = 0; args[i] && k < 23; i++)
        argv[k++] = (char *)args[i];
    argv[k] = NULL;
    rel = spawn(argv, NULL);
    usleep(200000);
    sec = our_transfer_for(rport, upload, bytes, cc, WAN_UDP_PAYLOAD, limit_s, &moved);
    stop(rel);
    stop(srv);
    if (sec <= 0 || (moved != bytes && !(limit_s > 0 && !upload && moved > 0)))
        return -1;
    return (double)moved / 1e6 / sec;
}

static double wan_once(const profile *p, int cc, int upload)
{
    /* the file on disk has the profile's size (see wan()) */
    return relayed_once(p->args, cc, upload, p->bytes, 0);
}

static void wan(const opts *o)
{
    char relay[PATH_MAX + 32];
    snprintf(relay, sizeof(relay), "%s/fedagg-relay", bindir);
    if (access(relay, X_OK) != 0) {
        printf("{\"bench\":\"transport_wan\",\"skipped\":\"%s not built\"}\n", relay);
        return;
    }
    for (size_t i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++) {
        const profile *p = &profiles[i];
        double cubic, bbr2;
        if (o->only && strcmp(o->only, p->name) != 0)
            continue;
        if (make_file(p->bytes) != 0)
            return;
        cubic = wan_once(p, FA_H3_CC_CUBIC, 0);
        bbr2 = wan_once(p, FA_H3_CC_BBR2, 0);
        printf(
            "{\"bench\":\"transport_wan\",\"profile\":\"%s\",\"op\":\"download\",\"bytes\":%" PRIu64
            ",\"udp_payload\":%d,\"cubic_mbytes_per_s\":%.2f,\"bbr2_mbytes_per_s\":%.2f,"
            "\"ref\":\"cubic\",\"ratio\":%.2f}\n",
            p->name, p->bytes, WAN_UDP_PAYLOAD, cubic, bbr2,
            cubic > 0 && bbr2 > 0 ? bbr2 / cubic : 0);
        fflush(stdout);
    }
}

/* Cross-region links: a rate, 150 ms RTT and random loss (both directions),
 * drop-tail queue of 100 ms of the rate (the relay's default).  Downloads
 * stop after LINK_SECONDS, so every line costs about the same; goodput is
 * what arrived by then (handshake included) over the time, and its ratio to
 * the link rate (payload bytes over line rate: headers make ~0.96 the most
 * any stack gets).  CUBIC and BBR2 side by side, our stack both times; the
 * transport's default is one of the two (named in the line). */
#define LINK_SECONDS 15.0

typedef struct wan_link {
    double mbit, loss_pct;
} wan_link;

static const wan_link links[] = {
    {200, 0}, {200, 0.1}, {200, 1}, {1000, 0}, {1000, 0.1}, {1000, 1},
};

static double link_once(const wan_link *l, int cc, int upload, uint64_t bytes, double limit_s)
{
    char rate[32], loss[32];
    const char *args[] = {"--rate", rate, "--delay", "75ms", "--loss", loss, NULL};
    snprintf(rate, sizeof(rate), "%.0fmbit", l->mbit);
    snprintf(loss, sizeof(loss), "%g%%", l->loss_pct);
    return relayed_once(args, cc, upload, bytes, limit_s);
}

static void link_line(const wan_link *l, const char *op, uint64_t bytes, double cubic, double bbr2)
{
    fa_h3_quic_opts d;
    double cap = l->mbit / 8.0; /* MB/s */
    char c[32], b[32], cr[32], br[32], dr[32];
    fa_h3_quic_default(&d);
    printf("{\"bench\":\"transport_link\",\"link_mbit\":%.0f,\"rtt_ms\":150,\"loss_pct\":%g,"
           "\"op\":\"%s\",\"bytes\":%" PRIu64 ",\"udp_payload\":%d,"
           "\"cubic_mbytes_per_s\":%s,\"bbr2_mbytes_per_s\":%s,\"cubic_ratio_to_link\":%s,"
           "\"bbr2_ratio_to_link\":%s,\"default_cc\":\"%s\",\"default_ratio_to_link\":%s}\n",
           l->mbit, l->loss_pct, op, bytes, WAN_UDP_PAYLOAD,
           fa_bench_json_num(c, sizeof(c), cubic > 0 ? cubic : NAN, 2),
           fa_bench_json_num(b, sizeof(b), bbr2 > 0 ? bbr2 : NAN, 2),
           fa_bench_json_num(cr, sizeof(cr), cubic > 0 ? cubic / cap : NAN, 3),
           fa_bench_json_num(br, sizeof(br), bbr2 > 0 ? bbr2 / cap : NAN, 3),
           d.cc == FA_H3_CC_BBR2 ? "bbr2" : d.cc == FA_H3_CC_CUBIC ? "cubic" : "reno",
           fa_bench_json_num(dr, sizeof(dr),
                             d.cc == FA_H3_CC_BBR2    ? (bbr2 > 0 ? bbr2 / cap : NAN)
                             : d.cc == FA_H3_CC_CUBIC ? (cubic > 0 ? cubic / cap : NAN)
                                                      : NAN,
                             3));
    fflush(stdout);
}

static void wan_links(const opts *o)
{
    /* the file: enough for LINK_SECONDS at the fastest link's rate */
    uint64_t file = (uint64_t)(1000 / 8.0 * 1e6 * LINK_SECONDS);
    const wan_link target = {200, 0.1};
    if (make_file(file) != 0)
        return;
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++) {
        const wan_link *l = &links[i];
        double cubic, bbr2;
        if (o->link_mbit > 0 && l->mbit != o->link_mbit)
            continue;
        cubic = link_once(l, FA_H3_CC_CUBIC, 0, file, LINK_SECONDS);
        bbr2 = link_once(l, FA_H3_CC_BBR2, 0, file, LINK_SECONDS);
        link_line(l, "download", file, cubic, bbr2);
    }
    /* a region's upload on the path the targets name (the client sends) */
    {
        uint64_t n = 64u << 20;
        if (make_file(n) != 0)
            return;
        link_line(&target, "upload", n, link_once(&target, FA_H3_CC_CUBIC, 1, n, 0),
                  link_once(&target, FA_H3_CC_BBR2, 1, n, 0));
    }
    /* and one multi-GB upload on it, with the transport's defaults only */
    if (o->big_bytes) {
        fa_h3_quic_opts d;
        double mbps;
        char v[32], rt[32];
        fa_h3_quic_default(&d);
        if (make_file(o->big_bytes) != 0)
            return;
        mbps = link_once(&target, d.cc, 1, o->big_bytes, 0);
        printf("{\"bench\":\"transport_link_big\",\"link_mbit\":200,\"rtt_ms\":150,"
               "\"loss_pct\":0.1,\"op\":\"upload\",\"bytes\":%" PRIu64 ",\"cc\":\"%s\","
               "\"mbytes_per_s\":%s,\"ratio_to_link\":%s}\n",
               o->big_bytes, d.cc == FA_H3_CC_BBR2 ? "bbr2" : "cubic",
               fa_bench_json_num(v, sizeof(v), mbps > 0 ? mbps : NAN, 2),
               fa_bench_json_num(rt, sizeof(rt), mbps > 0 ? mbps / 25.0 : NAN, 3));
        fflush(stdout);
    }
}

int fa_bench_transport(int argc, char **argv)
{
    opts o = {1ull << 30, 3, 1, 1, 0, 0, 1, NULL, 1, 0, 2ull << 30};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bytes") && i + 1 < argc) {
            o.bytes = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            o.runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--no-wan")) {
            o.wan = 0;
        } else if (!strcmp(argv[i], "--wan-only")) {
            o.loopback = 0;
        } else if (!strcmp(argv[i], "--profile") && i + 1 < argc) {
            o.only = argv[++i];
        } else if (!strcmp(argv[i], "--jumbo")) {
            o.jumbo = 1;
        } else if (!strcmp(argv[i], "--internet")) {
            o.internet = 1;
        } else if (!strcmp(argv[i], "--no-links")) {
            o.links = 0;
        } else if (!strcmp(argv[i], "--links-only")) {
            o.loopback = 0;
            o.wan = 0;
        } else if (!strcmp(argv[i], "--link-mbit") && i + 1 < argc) {
            o.link_mbit = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--big-bytes") && i + 1 < argc) {
            o.big_bytes = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--no-anchors")) {
            o.anchors = 0; /* for profiling our stack alone; ratios are then 0 */
        } else {
            fprintf(stderr,
                    "usage: fedagg-bench transport [--bytes N] [--runs R] [--no-wan | --wan-only] "
                    "[--profile NAME] [--internet] [--jumbo] [--no-anchors]\n"
                    "       [--no-links | --links-only] [--link-mbit 200|1000] [--big-bytes N (2 GiB; 0 = none)]\n");
            return 2;
        }
    }
    if (o.runs < 1)
        o.runs = 1;
    fa_log_set_level(FA_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN);
    if (setup(o.bytes) != 0) {
        fprintf(stderr, "bench: setup failed\n");
        cleanup();
        return 1;
    }
    if (o.loopback)
        loopback(&o);
    if (o.wan)
        wan(&o);
    if (o.links && !o.only)
        wan_links(&o);
    cleanup();
    return 0;
}
