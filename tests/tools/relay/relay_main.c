/* relay_main.c - fedagg-relay: the socket edge around the impairment core.
 *
 * One listening UDP socket faces the clients; each client address gets its
 * own upstream socket, connected to --upstream, so the server sees distinct
 * clients.  Datagrams are read in batches with recvmmsg (with UDP_GRO, a
 * coalesced super-datagram is split back at its gso_size), pushed into the
 * core with the time they arrived, and written with sendmmsg when the core
 * releases them; a timerfd wakes the loop at the next release.  SIGTERM and
 * SIGINT stop it, SIGUSR1 logs the counters; both log one logfmt stats line.
 */
#include "relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_version.h"
#include "common/fa_time.h"

#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define BATCH 32
#define BUFSZ 65536
#define NS_PER_S 1000000000ULL

enum { EV_LISTEN = 1, EV_TIMER, EV_SIGNAL, EV_UPSTREAM };

typedef struct session {
    struct sockaddr_storage client;
    socklen_t client_len;
    int fd;                     /* upstream socket, connected; -1: free slot */
    uint32_t gen;               /* bumped when the slot is freed */
    int hnext;                  /* hash chain */
    uint64_t last_ns;
} session;

typedef struct options {
    const char *listen, *upstream, *port_file, *profile;
    int print_port, gro, t0_first;
    unsigned max_clients;
    uint64_t idle_ns, stats_interval_ns;
    uint64_t signal_blackhole_ns; /* SIGUSR2 starts a blackhole this long */
} options;

typedef struct edge {
    options o;
    fa_relay *core;
    int listen_fd, ep, tfd, sfd;
    int have_t0;
    struct sockaddr_storage up;
    socklen_t up_len;
    session *s;
    int *hash;
    unsigned hash_mask;
    unsigned nsessions;
    uint64_t clients_total, clients_refused, clients_expired;
    uint64_t gro_split;         /* GRO super-datagrams split back */
    uint64_t truncated;         /* datagrams larger than the buffer */
    uint64_t late_max_ns;       /* worst delay beyond a packet's release time */
    uint64_t armed_ns, next_hk_ns, next_stats_ns;
    /* receive batch */
    uint8_t *rbuf;
    struct mmsghdr rmsg[BATCH];
    struct iovec riov[BATCH];
    struct sockaddr_storage raddr[BATCH];
    struct {
        _Alignas(size_t) char buf[CMSG_SPACE(sizeof(int))]; /* cmsghdr alignment */
    } rctl[BATCH];
} edge;

static const char usage_text[] =
    "usage: fedagg-relay --listen HOST:PORT --upstream HOST:PORT [options]\n"
    "\n"
    "A UDP relay that impairs traffic like a WAN path (netem stand-in).\n"
    "\n"
    "sockets:\n"
    "  --listen HOST:PORT      where clients send (port 0: the kernel picks one)\n"
    "  --upstream HOST:PORT    the server; each client gets its own upstream socket\n"
    "  --port-file FILE        write the bound listen port there (atomically) once bound\n"
    "  --print-port            print the bound listen port on stdout, one line\n"
    "  --max-clients N         client addresses served at once (default 1024)\n"
    "  --idle-timeout DUR      forget a client idle this long (default 300s; bare = s)\n"
    "  --no-gro                do not enable UDP_GRO on receive\n"
    "  --stats-interval DUR    also log the counters this often (default 0: at exit only)\n"
    "  --t0 start|first-packet origin of the blackhole windows (default start)\n"
    "  --signal-blackhole DUR  SIGUSR2 starts a blackhole of DUR at once (bare = s)\n"
    "  --seed N                PRNG seed (default 1)\n"
    "  --max-buffer SIZE       bytes held in all delay queues (default 256M)\n"
    "\n"
    "impairments (both directions; prefix c2s- or s2c- for one, e.g. --s2c-loss 2%):\n"
    "  --profile NAME          wan80 | wan220 | corrupt3 | none, applied before the flags\n"
    "  --delay DUR             one-way delay (bare = ms)\n"
    "  --jitter DUR            uniform in [-DUR, +DUR] on top of the delay, order kept\n"
    "  --jitter-reorder        let jitter reorder packets\n"
    "  --loss P                random loss (0.01 or 1%)\n"
    "  --burst-loss MEAN:LEN   Gilbert loss: mean rate, mean burst length in packets\n"
    "  --ge P:R[:LB[:LG]]      Gilbert-Elliott: P good->bad, R bad->good, loss in bad/good\n"
    "  --reorder P[:DUR]       hold a fraction P back by DUR (default 10ms)\n"
    "  --duplicate P           send a fraction P twice\n"
    "  --corrupt P[:BITS]      flip BITS random bits (default 1) in a fraction P\n"
    "  --rate RATE             token bucket: bytes/s (12.5M) or bits/s (100mbit)\n"
    "  --rate-burst SIZE       bucket depth (default 2 ms of rate, >= 3000)\n"
    "  --queue-limit SIZE      drop-tail queue (default 100 ms of rate, >= 64k)\n"
    "  --blackhole START:DUR   drop everything from START for DUR (bare = s); repeatable\n"
    "\n"
    "SIGTERM/SIGINT: log the counters and exit 0.  SIGUSR1: log the counters.\n"
    "SIGUSR2: with --signal-blackhole, drop everything (both directions) from now on for DUR.\n";

/* --- addresses ----------------------------------------------------------- */

static int parse_hostport(const char *s, int passive, struct sockaddr_storage *ss,
                          socklen_t *len, fa_error *err)
{
    char host[256];
    const char *colon, *port, *h;
    size_t hl;
    struct addrinfo hints, *res = NULL;
    int rv;

    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': expected [IPv6]:PORT", s);
        h = s + 1;
        hl = (size_t)(rb - h);
        port = rb + 2;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': expected HOST:PORT", s);
        h = s;
        hl = (size_t)(colon - s);
        port = colon + 1;
    }
    if (hl >= sizeof(host) || !*port)
        return fa_errorf(err, FA_ERR_INVAL, "address '%s': expected HOST:PORT", s);
    memcpy(host, h, hl);
    host[hl] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    rv = getaddrinfo(hl ? host : NULL, port, &hints, &res);
    if (rv != 0 || !res)
        return fa_errorf(err, FA_ERR_INVAL, "address '%s': %s", s, gai_strerror(rv));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static const char *addr_str(const struct sockaddr_storage *ss, char *buf, size_t n)
{
    char host[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        snprintf(buf, n, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        snprintf(buf, n, "%s:%u", host, ntohs(a->sin_port));
    }
    return buf;
}

static unsigned addr_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static uint32_t addr_hash(const struct sockaddr_storage *ss)
{
    const uint8_t *p;
    size_t n;
    uint32_t h = 2166136261u;

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        p = (const uint8_t *)&a->sin6_addr;
        n = 16;
        h = (h ^ a->sin6_port) * 16777619u;
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        p = (const uint8_t *)&a->sin_addr;
        n = 4;
        h = (h ^ a->sin_port) * 16777619u;
    }
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static int addr_equal(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a,
                                  *y = (const struct sockaddr_in6 *)b;
        return x->sin6_port == y->sin6_port &&
               !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
    }
    const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
}

/* --- sockets ------------------------------------------------------------- */

/* Large kernel buffers: the relay must not be the one dropping at WAN rates.
 * SO_*BUFFORCE passes rmem_max when we may; otherwise take what we get. */
static void tune_socket(int fd, int gro)
{
    int rcv = 16 << 20, snd = 8 << 20, one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd));
    if (gro)
        (void)setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one));
}

static int epoll_add(edge *e, int fd, uint32_t type, uint32_t index)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = ((uint64_t)type << 32) | index;
    return epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev);
}

static void session_close(edge *e, unsigned i)
{
    session *s = &e->s[i];
    unsigned b = addr_hash(&s->client) & e->hash_mask;
    int *pp = &e->hash[b];

    while (*pp >= 0 && *pp != (int)i)
        pp = &e->s[*pp].hnext;
    if (*pp == (int)i)
        *pp = s->hnext;
    close(s->fd);
    s->fd = -1;
    s->gen++;
    e->nsessions--;
}

/* Finds the session of a client address, creating it (and its upstream
 * socket) on first sight.  Returns the slot or -1. */
static int session_get(edge *e, const struct sockaddr_storage *from, socklen_t from_len,
                       uint64_t now)
{
    unsigned b = addr_hash(from) & e->hash_mask, i;
    int fd;
    session *s;
    char buf[80];

    for (int j = e->hash[b]; j >= 0; j = e->s[j].hnext)
        if (addr_equal(&e->s[j].client, from)) {
            e->s[j].last_ns = now;
            return j;
        }
    if (e->nsessions >= e->o.max_clients) {
        if (e->clients_refused++ == 0)
            fa_log_warn("relay refuses a client", "client=%s max_clients=%u",
                        addr_str(from, buf, sizeof(buf)), e->o.max_clients);
        return -1;
    }
    for (i = 0; i < e->o.max_clients && e->s[i].fd >= 0; i++)
        ;
    fd = socket(e->up.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        char q[128];
        fa_log_error("relay upstream socket failed", "err=%s",
                     fa_log_quote(q, sizeof(q), strerror(errno)));
        return -1;
    }
    tune_socket(fd, e->o.gro);
    if (connect(fd, (const struct sockaddr *)&e->up, e->up_len) != 0 ||
        epoll_add(e, fd, EV_UPSTREAM, i) != 0) {
        char q[128];
        fa_log_error("relay upstream connect failed", "err=%s",
                     fa_log_quote(q, sizeof(q), strerror(errno)));
        close(fd);
        return -1;
    }
    s = &e->s[i];
    memcpy(&s->client, from, from_len);
    s->client_len = from_len;
    s->fd = fd;
    s->last_ns = now;
    s->hnext = e->hash[b];
    e->hash[b] = (int)i;
    e->nsessions++;
    e->clients_total++;
    {
        struct sockaddr_storage local;
        socklen_t ll = sizeof(local);
        char lb[80];
        getsockname(fd, (struct sockaddr *)&local, &ll);
        fa_log_debug("relay new client", "client=%s upstream_local=%s",
                     addr_str(from, buf, sizeof(buf)), addr_str(&local, lb, sizeof(lb)));
    }
    return (int)i;
}

static uint64_t tag_of(const edge *e, unsigned i) { return ((uint64_t)e->s[i].gen << 32) | i; }

/* --- receive ------------------------------------------------------------- */

static void push_datagram(edge *e, int dir, uint64_t now, const uint8_t *p, size_t len,
                          uint64_t tag)
{
    if (!e->have_t0 && e->o.t0_first) {
        fa_relay_set_t0(e->core, now);
        e->have_t0 = 1;
    }
    if (fa_relay_push(e->core, dir, now, p, len, tag) == FA_ERR_NOMEM)
        fa_log_warn("relay out of memory, packet dropped", "dir=%d len=%zu", dir, len);
}

/* Reads up to a few batches from fd.  session < 0: the listening socket. */
static void receive(edge *e, int fd, int sess)
{
    for (int round = 0; round < 8; round++) {
        int n;
        uint64_t now;

        for (int i = 0; i < BATCH; i++) {
            struct msghdr *h = &e->rmsg[i].msg_hdr;
            e->riov[i].iov_base = e->rbuf + (size_t)i * BUFSZ;
            e->riov[i].iov_len = BUFSZ;
            memset(h, 0, sizeof(*h));
            h->msg_iov = &e->riov[i];
            h->msg_iovlen = 1;
            h->msg_name = sess < 0 ? &e->raddr[i] : NULL;
            h->msg_namelen = sess < 0 ? sizeof(e->raddr[i]) : 0;
            h->msg_control = e->rctl[i].buf;
            h->msg_controllen = sizeof(e->rctl[i].buf);
        }
        n = recvmmsg(fd, e->rmsg, BATCH, MSG_DONTWAIT, NULL);
        if (n <= 0) {
            /* EAGAIN, or ECONNREFUSED from an ICMP error on a connected
             * upstream socket: nothing to forward either way. */
            return;
        }
        now = fa_time_mono_ns();
        for (int i = 0; i < n; i++) {
            struct msghdr *h = &e->rmsg[i].msg_hdr;
            size_t len = e->rmsg[i].msg_len, seg = len;
            const uint8_t *p = e->rbuf + (size_t)i * BUFSZ;
            int slot = sess;
            struct cmsghdr *c;

            if (h->msg_flags & MSG_TRUNC) {
                e->truncated++;
                continue;
            }
            for (c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
                if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
                    int g;
                    memcpy(&g, CMSG_DATA(c), sizeof(g));
                    if (g > 0)
                        seg = (size_t)g;
                }
            if (sess < 0) {
                slot = session_get(e, &e->raddr[i], h->msg_namelen, now);
                if (slot < 0)
                    continue;
            } else {
                e->s[sess].last_ns = now;
            }
            /* A GRO super-datagram is back-to-back segments of gso_size
             * bytes, the last one possibly shorter: the sender's datagrams. */
            if (seg < len)
                e->gro_split++;
            for (size_t off = 0; off < len; off += seg) {
                size_t l = len - off < seg ? len - off : seg;
                push_datagram(e, sess < 0 ? FA_RELAY_C2S : FA_RELAY_S2C, now, p + off, l,
                              tag_of(e, (unsigned)slot));
            }
            if (len == 0)
                push_datagram(e, sess < 0 ? FA_RELAY_C2S : FA_RELAY_S2C, now, p, 0,
                              tag_of(e, (unsigned)slot));
        }
        if (n < BATCH)
            return;
    }
}

/* --- send ---------------------------------------------------------------- */

static void send_batch(edge *e, int fd, fa_relay_pkt **pk, struct mmsghdr *m, int n)
{
    int done = 0;

    while (done < n) {
        int rv = sendmmsg(fd, m + done, (unsigned)(n - done), 0);
        if (rv > 0) {
            done += rv;
            continue;
        }
        if (rv < 0 && errno == EINTR)
            continue;
        /* The kernel refused this one (buffer full, ICMP error pending):
         * a loss the edge caused, counted as such; go on with the rest. */
        fa_relay_count_edge_drop(e->core, pk[done]->dir, pk[done]->len);
        done++;
    }
    for (int i = 0; i < n; i++)
        fa_relay_pkt_free(e->core, pk[i]);
}

/* Sends every packet the core releases at or before now, batching runs of
 * packets that leave through the same socket. */
static void flush_due(edge *e, uint64_t now)
{
    fa_relay_pkt *pk[BATCH];
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH];
    int n = 0, cur_fd = -1;
    fa_relay_pkt *p;

    while ((p = fa_relay_pop(e->core, now)) != NULL) {
        unsigned slot = (unsigned)(p->tag & 0xffffffffu);
        if (now - p->release_ns > e->late_max_ns)
            e->late_max_ns = now - p->release_ns;
        uint32_t gen = (uint32_t)(p->tag >> 32);
        session *s = slot < e->o.max_clients ? &e->s[slot] : NULL;
        int fd;

        if (!s || s->fd < 0 || s->gen != gen) {
            fa_relay_count_edge_drop(e->core, p->dir, p->len);
            fa_relay_pkt_free(e->core, p);
            continue;
        }
        fd = p->dir == FA_RELAY_C2S ? s->fd : e->listen_fd;
        if (n > 0 && (fd != cur_fd || n == BATCH)) {
            send_batch(e, cur_fd, pk, m, n);
            n = 0;
        }
        cur_fd = fd;
        pk[n] = p;
        iov[n].iov_base = p->data;
        iov[n].iov_len = p->len;
        memset(&m[n], 0, sizeof(m[n]));
        m[n].msg_hdr.msg_iov = &iov[n];
        m[n].msg_hdr.msg_iovlen = 1;
        if (p->dir == FA_RELAY_S2C) {
            m[n].msg_hdr.msg_name = &s->client;
            m[n].msg_hdr.msg_namelen = s->client_len;
        }
        n++;
    }
    if (n > 0)
        send_batch(e, cur_fd, pk, m, n);
}

/* --- housekeeping -------------------------------------------------------- */

/* The counters of one direction as fa_log arguments (14, in DIR_KV's
 * order), and the format of their keys. */
#define DIR_KV(d)                                                                                  \
    d "_in=%llu " d "_out=%llu " d "_dropped=%llu " d "_corrupted=%llu " d "_duplicated=%llu " d   \
      "_reordered=%llu " d "_bytes_in=%llu " d "_bytes_out=%llu " d "_dropped_loss=%llu " d        \
      "_dropped_burst=%llu " d "_dropped_blackhole=%llu " d "_dropped_queue=%llu " d               \
      "_dropped_buffer=%llu " d "_dropped_edge=%llu"
#define DIR_ARGS(s)                                                                                \
    (unsigned long long)(s)->in, (unsigned long long)(s)->out,                                     \
        (unsigned long long)((s)->dropped_loss + (s)->dropped_burst + (s)->dropped_blackhole +     \
                             (s)->dropped_queue + (s)->dropped_buffer + (s)->dropped_edge),        \
        (unsigned long long)(s)->corrupted, (unsigned long long)(s)->duplicated,                   \
        (unsigned long long)(s)->reordered, (unsigned long long)(s)->bytes_in,                     \
        (unsigned long long)(s)->bytes_out, (unsigned long long)(s)->dropped_loss,                 \
        (unsigned long long)(s)->dropped_burst, (unsigned long long)(s)->dropped_blackhole,        \
        (unsigned long long)(s)->dropped_queue, (unsigned long long)(s)->dropped_buffer,           \
        (unsigned long long)(s)->dropped_edge

/* The counters, one key=value each through fa_log's format (which
 * escapes a pre-built list of pairs as one value). */
static void log_stats(edge *e, const char *msg)
{
    const fa_relay_dir_stats *c = fa_relay_stats(e->core, FA_RELAY_C2S);
    const fa_relay_dir_stats *s = fa_relay_stats(e->core, FA_RELAY_S2C);
    fa_log(FA_LOG_INFO, msg,
           DIR_KV("c2s") " " DIR_KV("s2c") " queued=%zu clients=%u clients_total=%llu "
                                           "clients_refused=%llu clients_expired=%llu "
                                           "gro_split=%llu truncated=%llu late_max_us=%llu",
           DIR_ARGS(c), DIR_ARGS(s), fa_relay_queued(e->core), e->nsessions,
           (unsigned long long)e->clients_total, (unsigned long long)e->clients_refused,
           (unsigned long long)e->clients_expired, (unsigned long long)e->gro_split,
           (unsigned long long)e->truncated, (unsigned long long)(e->late_max_ns / 1000));
}

static void housekeeping(edge *e, uint64_t now)
{
    if (now >= e->next_hk_ns) {
        for (unsigned i = 0; i < e->o.max_clients; i++)
            if (e->s[i].fd >= 0 && now - e->s[i].last_ns > e->o.idle_ns) {
                session_close(e, i);
                e->clients_expired++;
            }
        e->next_hk_ns = now + NS_PER_S;
    }
    if (e->o.stats_interval_ns && now >= e->next_stats_ns) {
        log_stats(e, "relay stats");
        e->next_stats_ns = now + e->o.stats_interval_ns;
    }
}

static void arm_timer(edge *e, uint64_t at)
{
    struct itimerspec its;

    if (at == e->armed_ns)
        return;
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(at / NS_PER_S);
    its.it_value.tv_nsec = (long)(at % NS_PER_S);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
        its.it_value.tv_nsec = 1; /* zero would disarm */
    timerfd_settime(e->tfd, TFD_TIMER_ABSTIME, &its, NULL);
    e->armed_ns = at;
}

/* --- main ---------------------------------------------------------------- */

static int opt_value(int argc, char **argv, int *i, const char **name, const char **value,
                     char *namebuf, size_t nbuf)
{
    const char *a = argv[*i] + 2, *eq = strchr(a, '=');

    if (eq) {
        size_t l = (size_t)(eq - a);
        if (l >= nbuf)
            return -1;
        memcpy(namebuf, a, l);
        namebuf[l] = '\0';
        *name = namebuf;
        *value = eq + 1;
        return 0;
    }
    *name = a;
    *value = NULL;
    return 0;
}

static int needs_value(const char *name)
{
    static const char *const flags[] = {"print-port", "no-gro", "help", "version"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (!strcmp(name, flags[i]))
            return 0;
    return fa_relay_option_has_value(name);
}

static int parse_args(int argc, char **argv, options *o, fa_relay_config *cfg, fa_error *err)
{
    char namebuf[64];
    int rv;

    /* The profile first, whatever its position, so that flags refine it. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *name, *value;
            if (strncmp(argv[i], "--", 2) != 0)
                return fa_errorf(err, FA_ERR_INVAL, "unexpected argument '%s'", argv[i]);
            if (opt_value(argc, argv, &i, &name, &value, namebuf, sizeof(namebuf)) != 0)
                return fa_errorf(err, FA_ERR_INVAL, "unknown option '%s'", argv[i]);
            if (!value && needs_value(name)) {
                if (i + 1 >= argc)
                    return fa_errorf(err, FA_ERR_INVAL, "option --%s needs a value", name);
                value = argv[++i];
            }
            if (pass == 0) {
                if (!strcmp(name, "profile")) {
                    o->profile = value;
                    if ((rv = fa_relay_profile_apply(cfg, value, err)) != 0)
                        return rv;
                }
                continue;
            }
            if (!strcmp(name, "profile"))
                continue;
            if (!strcmp(name, "help") || !strcmp(name, "version"))
                return 1;
            if (!strcmp(name, "listen"))
                o->listen = value;
            else if (!strcmp(name, "upstream"))
                o->upstream = value;
            else if (!strcmp(name, "port-file"))
                o->port_file = value;
            else if (!strcmp(name, "print-port"))
                o->print_port = 1;
            else if (!strcmp(name, "no-gro"))
                o->gro = 0;
            else if (!strcmp(name, "t0")) {
                if (!strcmp(value, "start"))
                    o->t0_first = 0;
                else if (!strcmp(value, "first-packet"))
                    o->t0_first = 1;
                else
                    return fa_errorf(err, FA_ERR_INVAL,
                                     "option --t0: '%s' is neither start nor first-packet", value);
            } else if (!strcmp(name, "max-clients")) {
                char *end;
                unsigned long v = strtoul(value, &end, 10);
                if (*end || v == 0 || v > 65536 || *value == '-')
                    return fa_errorf(err, FA_ERR_INVAL,
                                     "option --max-clients: '%s' is not in 1..65536", value);
                o->max_clients = (unsigned)v;
            } else if (!strcmp(name, "idle-timeout")) {
                if (fa_relay_parse_duration(value, NS_PER_S, &o->idle_ns) != 0 || !o->idle_ns)
                    return fa_errorf(err, FA_ERR_INVAL,
                                     "option --idle-timeout: bad duration '%s'", value);
            } else if (!strcmp(name, "signal-blackhole")) {
                if (fa_relay_parse_duration(value, NS_PER_S, &o->signal_blackhole_ns) != 0 ||
                    !o->signal_blackhole_ns)
                    return fa_errorf(err, FA_ERR_INVAL,
                                     "option --signal-blackhole: bad duration '%s'", value);
            } else if (!strcmp(name, "stats-interval")) {
                if (fa_relay_parse_duration(value, NS_PER_S, &o->stats_interval_ns) != 0)
                    return fa_errorf(err, FA_ERR_INVAL,
                                     "option --stats-interval: bad duration '%s'", value);
            } else {
                rv = fa_relay_option_parse(cfg, name, value, err);
                if (rv < 0)
                    return rv;
                if (rv == 0)
                    return fa_errorf(err, FA_ERR_INVAL, "unknown option '--%s' (see --help)",
                                     name);
            }
        }
    }
    if (!o->listen || !o->upstream)
        return fa_errorf(err, FA_ERR_INVAL, "--listen and --upstream are required (see --help)");
    return 0;
}

static int edge_open(edge *e, fa_error *err)
{
    struct sockaddr_storage la;
    socklen_t ll;
    sigset_t mask;
    unsigned hs = 1;
    char buf[80], ub[80];

    if (parse_hostport(e->o.upstream, 0, &e->up, &e->up_len, err) != 0 ||
        parse_hostport(e->o.listen, 1, &la, &ll, err) != 0)
        return FA_ERR_INVAL;
    while (hs < 2 * e->o.max_clients)
        hs <<= 1;
    e->hash_mask = hs - 1;
    e->hash = malloc(hs * sizeof(*e->hash));
    e->s = calloc(e->o.max_clients, sizeof(*e->s));
    e->rbuf = malloc((size_t)BATCH * BUFSZ);
    if (!e->hash || !e->s || !e->rbuf)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    for (unsigned i = 0; i < hs; i++)
        e->hash[i] = -1;
    for (unsigned i = 0; i < e->o.max_clients; i++)
        e->s[i].fd = -1;

    e->listen_fd = socket(la.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (e->listen_fd < 0)
        return fa_errorf(err, FA_ERR_IO, "socket: %s", strerror(errno));
    tune_socket(e->listen_fd, e->o.gro);
    if (bind(e->listen_fd, (struct sockaddr *)&la, ll) != 0)
        return fa_errorf(err, FA_ERR_IO, "bind %s: %s", e->o.listen, strerror(errno));
    ll = sizeof(la);
    getsockname(e->listen_fd, (struct sockaddr *)&la, &ll);

    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGUSR2);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    e->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    if (e->sfd < 0 || e->tfd < 0 || e->ep < 0)
        return fa_errorf(err, FA_ERR_IO, "signalfd/timerfd/epoll: %s", strerror(errno));
    if (epoll_add(e, e->listen_fd, EV_LISTEN, 0) != 0 || epoll_add(e, e->tfd, EV_TIMER, 0) != 0 ||
        epoll_add(e, e->sfd, EV_SIGNAL, 0) != 0)
        return fa_errorf(err, FA_ERR_IO, "epoll_ctl: %s", strerror(errno));

    fa_log_info("relay listening", "listen=%s upstream=%s profile=%s",
                addr_str(&la, buf, sizeof(buf)), addr_str(&e->up, ub, sizeof(ub)),
                e->o.profile ? e->o.profile : "none");
    if (e->o.port_file) {
        char pb[16];
        int l = snprintf(pb, sizeof(pb), "%u\n", addr_port(&la));
        if (fa_file_write_atomic(e->o.port_file, pb, (size_t)l, 0644, err) != 0)
            return FA_ERR_IO;
    }
    if (e->o.print_port) {
        printf("%u\n", addr_port(&la));
        fflush(stdout);
    }
    return 0;
}

static void edge_close(edge *e)
{
    if (e->s)
        for (unsigned i = 0; i < e->o.max_clients; i++)
            if (e->s[i].fd >= 0)
                close(e->s[i].fd);
    free(e->s);
    free(e->hash);
    free(e->rbuf);
    if (e->listen_fd >= 0)
        close(e->listen_fd);
    if (e->ep >= 0)
        close(e->ep);
    if (e->tfd >= 0)
        close(e->tfd);
    if (e->sfd >= 0)
        close(e->sfd);
    fa_relay_del(e->core);
}

/* SIGUSR2: a blackhole in both directions from now on, so that a test can
 * cut the path at a moment it chooses (mid-transfer). */
static void signal_blackhole(edge *e)
{
    uint64_t now = fa_time_mono_ns(), t0 = fa_relay_t0(e->core), start;
    int rv;

    if (!e->o.signal_blackhole_ns) {
        fa_log_warn("relay ignores SIGUSR2", "reason=\"no --signal-blackhole\"");
        return;
    }
    if (!e->have_t0 && e->o.t0_first) { /* no packet yet: the origin is now */
        fa_relay_set_t0(e->core, now);
        e->have_t0 = 1;
        t0 = now;
    }
    start = now > t0 ? now - t0 : 0;
    rv = fa_relay_blackhole_add(e->core, -1, start, e->o.signal_blackhole_ns);
    if (rv != 0)
        fa_log_warn("relay blackhole not added", "reason=\"%d windows already\"",
                    FA_RELAY_MAX_BLACKHOLES);
    else
        fa_log_info("relay blackhole", "start_ms=%llu duration_ms=%llu",
                    (unsigned long long)(start / 1000000),
                    (unsigned long long)(e->o.signal_blackhole_ns / 1000000));
}

/* Logs an error message quoted as a logfmt value. */
static void log_errno(const char *msg, int errnum)
{
    char q[256];
    fa_log_error(msg, "err=%s", fa_log_quote(q, sizeof(q), strerror(errnum)));
}

static int run(edge *e)
{
    struct epoll_event evs[64];

    for (;;) {
        uint64_t now = fa_time_mono_ns(), next;
        int n;

        flush_due(e, now);
        housekeeping(e, now);
        next = fa_relay_next_release(e->core);
        if (e->next_hk_ns < next)
            next = e->next_hk_ns;
        if (e->o.stats_interval_ns && e->next_stats_ns < next)
            next = e->next_stats_ns;
        arm_timer(e, next);
        n = epoll_wait(e->ep, evs, 64, -1);
        if (n < 0 && errno != EINTR) {
            log_errno("relay epoll_wait failed", errno);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            uint32_t type = (uint32_t)(evs[i].data.u64 >> 32);
            uint32_t idx = (uint32_t)evs[i].data.u64;
            if (type == EV_LISTEN) {
                receive(e, e->listen_fd, -1);
            } else if (type == EV_UPSTREAM) {
                if (idx < e->o.max_clients && e->s[idx].fd >= 0)
                    receive(e, e->s[idx].fd, (int)idx);
            } else if (type == EV_TIMER) {
                uint64_t ticks;
                if (read(e->tfd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
                    log_errno("relay timerfd read failed", errno);
                e->armed_ns = 0;
            } else if (type == EV_SIGNAL) {
                struct signalfd_siginfo si;
                while (read(e->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                    if (si.ssi_signo == SIGUSR1) {
                        log_stats(e, "relay stats");
                    } else if (si.ssi_signo == SIGUSR2) {
                        signal_blackhole(e);
                    } else {
                        log_stats(e, "relay stopped");
                        return 0;
                    }
                }
            }
        }
    }
}

int main(int argc, char **argv)
{
    edge e;
    fa_relay_config cfg;
    fa_error err;
    int rv;

    memset(&e, 0, sizeof(e));
    e.listen_fd = e.ep = e.tfd = e.sfd = -1;
    e.o.gro = 1;
    e.o.max_clients = 1024;
    e.o.idle_ns = 300 * NS_PER_S;
    fa_error_clear(&err);
    fa_log_set_context("proc=relay");
    fa_relay_config_default(&cfg);

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--version")) {
            printf("fedagg-relay %s\n", fa_version);
            return 0;
        }
    }
    rv = parse_args(argc, argv, &e.o, &cfg, &err);
    if (rv != 0) {
        fprintf(stderr, "fedagg-relay: %s\n", fa_error_msg(&err, rv));
        return 2;
    }
    if ((rv = fa_relay_new(&e.core, &cfg, fa_time_mono_ns(), &err)) != 0) {
        fprintf(stderr, "fedagg-relay: %s\n", fa_error_msg(&err, rv));
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    if ((rv = edge_open(&e, &err)) != 0) {
        char q[600];
        fa_log_error("relay failed to start", "err=%s",
                     fa_log_quote(q, sizeof(q), fa_error_msg(&err, rv)));
        edge_close(&e);
        return 1;
    }
    rv = run(&e);
    edge_close(&e);
    return rv;
}
