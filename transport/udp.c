/* udp.c - the UDP endpoint: few syscalls per byte.
 *
 * Send: one sendmsg per batch of equal-sized QUIC packets with UDP_SEGMENT
 * (GSO), so the kernel cuts the datagrams; ECN codepoint in an IP_TOS /
 * IPV6_TCLASS control message.  Receive: recvmmsg into 64 KiB buffers with
 * UDP_GRO, so one call can return dozens of coalesced datagrams; the TOS
 * byte reports ECN marks.  Both fall back to one datagram per call where the
 * kernel lacks the feature.  Datagrams are never fragmented (DF on IPv4,
 * IPV6_DONTFRAG behaviour on IPv6, RFC 9000 14): one larger than the
 * kernel's path MTU is refused with EMSGSIZE, reported as FA_ERR_TOOBIG so
 * the connection can shrink its datagrams.  fa_udp_route_mtu tells a
 * connection how large they may be to begin with.
 */
#include "transport/h3_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

int fa_udp_parse_addr(const char *s, struct sockaddr_storage *ss, socklen_t *len, char *host,
                      size_t hostcap, fa_error *err)
{
    char h[256];
    const char *port, *p;
    size_t hl;
    struct addrinfo hints, *res = NULL;
    int rv;

    if (!s || !*s)
        return fa_errorf(err, FA_ERR_INVAL, "empty address (want host:port)");
    if (s[0] == '[') {
        p = strchr(s, ']');
        if (!p || p[1] != ':')
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': want [ipv6]:port", s);
        hl = (size_t)(p - s - 1);
        if (hl >= sizeof(h))
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': host too long", s);
        memcpy(h, s + 1, hl);
        port = p + 2;
    } else {
        p = strrchr(s, ':');
        if (!p)
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': want host:port", s);
        hl = (size_t)(p - s);
        if (hl >= sizeof(h))
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': host too long", s);
        memcpy(h, s, hl);
        port = p + 1;
    }
    h[hl] = '\0';
    {
        char *end;
        long pn = strtol(port, &end, 10);
        if (!*port || *end || pn < 0 || pn > 65535)
            return fa_errorf(err, FA_ERR_INVAL, "address '%s': bad port '%s'", s, port);
    }
    if (host && hostcap) {
        snprintf(host, hostcap, "%s", h);
    }
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_DGRAM;
    hints.ai_family = AF_UNSPEC;
    rv = getaddrinfo(hl ? h : NULL, port, &hints, &res);
    if (rv != 0 || !res)
        return fa_errorf(err, FA_ERR_INVAL, "address '%s': %s", s, gai_strerror(rv));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = (socklen_t)res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

void fa_udp_addr_str(const struct sockaddr *sa, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, cap, "%s:%u", ip, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, cap, "[%s]:%u", ip, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, cap, "?");
    }
}

int fa_udp_open(fa_udp *u, const struct sockaddr *addr, socklen_t len, int want_gso, int want_gro,
                fa_error *err)
{
    int one = 1, fd, bufsz = 16 << 20;

    memset(u, 0, sizeof(*u));
    u->fd = -1;
    u->family = addr->sa_family;
    fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "socket: %s", strerror(errno));
    /* Large buffers absorb bursts of a fast peer; the kernel caps them at
     * net.core.{r,w}mem_max unless we may force them. */
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof(bufsz)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof(bufsz)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof(bufsz));
    if (addr->sa_family == AF_INET6) {
        int pmtu = IPV6_PMTUDISC_DO; /* no fragmentation at the source either */
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof(pmtu));
    } else {
        int pmtu = IP_PMTUDISC_DO; /* DF set: QUIC does its own PMTUD (RFC 9000 14.2) */
        (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
    }
    if (bind(fd, addr, len) != 0) {
        char a[80];
        int e = errno;
        fa_udp_addr_str(addr, a, sizeof(a));
        close(fd);
        return fa_errorf(err, FA_ERR_IO, "bind %s: %s", a, strerror(e));
    }
    u->local_len = sizeof(u->local);
    if (getsockname(fd, (struct sockaddr *)&u->local, &u->local_len) != 0) {
        close(fd);
        return fa_errorf(err, FA_ERR_IO, "getsockname: %s", strerror(errno));
    }
    if (want_gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) == 0)
        u->gro = 1;
    u->gso = want_gso ? 1 : 0; /* confirmed (or withdrawn) by the first send */
    u->rxbuf = malloc((size_t)FA_UDP_RX_BATCH * FA_UDP_RX_BUFSZ);
    u->pend_cap = FA_UDP_MAX_GSO_BYTES + 2048;
    u->pend = malloc(u->pend_cap);
    if (!u->rxbuf || !u->pend) {
        close(fd);
        free(u->rxbuf);
        free(u->pend);
        u->rxbuf = u->pend = NULL;
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory for UDP buffers");
    }
    u->fd = fd;
    return 0;
}

void fa_udp_close(fa_udp *u)
{
    if (u->fd >= 0)
        close(u->fd);
    u->fd = -1;
    free(u->rxbuf);
    free(u->pend);
    u->rxbuf = u->pend = NULL;
}

/* One sendmsg of a (GSO) batch.  Returns bytes accepted, or -errno. */
static ssize_t send_one(fa_udp *u, const struct sockaddr *to, socklen_t tolen, unsigned ecn,
                        const uint8_t *data, size_t len, size_t gso)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    union {
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))];
        size_t align; /* cmsghdr alignment (it has a flexible member) */
    } ctl;
    struct msghdr msg;
    struct cmsghdr *cm;
    size_t ctllen = 0;
    ssize_t n;

    memset(&msg, 0, sizeof(msg));
    memset(&ctl, 0, sizeof(ctl));
    msg.msg_name = (void *)to;
    msg.msg_namelen = tolen;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = sizeof(ctl.buf);
    cm = CMSG_FIRSTHDR(&msg);
    /* ECN codepoint (RFC 9000 13.4) */
    if (u->family == AF_INET6) {
        cm->cmsg_level = IPPROTO_IPV6;
        cm->cmsg_type = IPV6_TCLASS;
    } else {
        cm->cmsg_level = IPPROTO_IP;
        cm->cmsg_type = IP_TOS;
    }
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    {
        int tos = (int)(ecn & 0x3);
        memcpy(CMSG_DATA(cm), &tos, sizeof(tos));
    }
    ctllen += CMSG_SPACE(sizeof(int));
    if (gso && len > gso) {
        uint16_t seg = (uint16_t)gso;
        cm = CMSG_NXTHDR(&msg, cm);
        cm->cmsg_level = IPPROTO_UDP;
        cm->cmsg_type = UDP_SEGMENT;
        cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
        ctllen += CMSG_SPACE(sizeof(uint16_t));
    }
    msg.msg_controllen = ctllen;
    do {
        n = sendmsg(u->fd, &msg, 0);
    } while (n < 0 && errno == EINTR);
    u->send_calls++;
    if (n < 0) {
        if (errno == EMSGSIZE)
            u->too_big++;
        return -errno;
    }
    {
        size_t dgram = gso && len > gso ? gso : len;
        u->dgrams_sent += dgram < len ? (len + gso - 1) / gso : 1;
        u->bytes_sent += (uint64_t)n;
        if (dgram > u->largest_sent)
            u->largest_sent = dgram;
    }
    return n;
}

/* Sends a batch; on EAGAIN returns FA_ERR_AGAIN with *sent = the bytes the
 * kernel took before it blocked (whole datagrams); FA_ERR_TOOBIG when the
 * datagrams exceed the path MTU (the batch is dropped). */
static int send_batch(fa_udp *u, const struct sockaddr *to, socklen_t tolen, unsigned ecn,
                      const uint8_t *data, size_t len, size_t gso, size_t *sent)
{
    ssize_t n;
    int gso_refused = 0;

    *sent = 0;
    if (gso >= len)
        gso = 0;
    if (gso && u->gso) {
        n = send_one(u, to, tolen, ecn, data, len, gso);
        if (n >= 0)
            return 0;
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return FA_ERR_AGAIN;
        if (n == -EMSGSIZE) {
            *sent = len;
            return FA_ERR_TOOBIG;
        }
        if (n != -EIO && n != -EINVAL && n != -ENOPROTOOPT && n != -EOPNOTSUPP)
            return 0; /* lost: QUIC recovers */
        /* The kernel has no GSO here, or (EINVAL) a segment is larger than
         * its path MTU: send this batch datagram by datagram, and give up
         * GSO only when that works. */
        gso_refused = 1;
    }
    if (!gso)
        gso = len;
    while (*sent < len) {
        size_t seg = len - *sent < gso ? len - *sent : gso;
        n = send_one(u, to, tolen, ecn, data + *sent, seg, 0);
        if (n == -EAGAIN || n == -EWOULDBLOCK)
            return FA_ERR_AGAIN;
        if (n == -EMSGSIZE) {
            /* the rest of the batch has the same size: drop it too */
            *sent = len;
            return FA_ERR_TOOBIG;
        }
        if (n >= 0 && gso_refused) {
            u->gso = 0; /* no GSO here: one datagram per call from now on */
            gso_refused = 0;
        }
        /* other errors: the datagram is lost, QUIC loss recovery resends */
        *sent += seg;
    }
    return 0;
}

int fa_udp_send(fa_udp *u, const struct sockaddr *to, socklen_t tolen, unsigned ecn,
                const uint8_t *data, size_t len, size_t gso)
{
    size_t sent;

    int rv;

    if (u->blocked)
        return FA_ERR_AGAIN; /* callers flush first: never reorder behind it */
    rv = send_batch(u, to, tolen, ecn, data, len, gso, &sent);
    if (rv != FA_ERR_AGAIN)
        return rv;
    len -= sent;
    if (len > u->pend_cap)
        len = u->pend_cap; /* cannot happen: batches are capped */
    memcpy(u->pend, data + sent, len);
    u->pend_len = len;
    u->pend_gso = gso;
    memcpy(&u->pend_to, to, tolen);
    u->pend_tolen = tolen;
    u->pend_ecn = ecn;
    u->blocked = 1;
    return FA_ERR_AGAIN;
}

int fa_udp_flush(fa_udp *u)
{
    size_t sent;
    int rv;

    if (!u->blocked)
        return 0;
    /* FA_ERR_TOOBIG here: dropped, and the connection that queued the batch
     * hears of the smaller path MTU at its next send */
    rv = send_batch(u, (struct sockaddr *)&u->pend_to, u->pend_tolen, u->pend_ecn, u->pend,
                    u->pend_len, u->pend_gso, &sent);
    if (rv == FA_ERR_AGAIN) {
        memmove(u->pend, u->pend + sent, u->pend_len - sent);
        u->pend_len -= sent;
        return FA_ERR_AGAIN;
    }
    u->blocked = 0;
    u->pend_len = 0;
    return 0;
}

int fa_udp_recv(fa_udp *u, fa_udp_rx_fn fn, void *arg, int max_calls)
{
    struct mmsghdr msgs[FA_UDP_RX_BATCH];
    struct iovec iov[FA_UDP_RX_BATCH];
    struct sockaddr_storage from[FA_UDP_RX_BATCH];
    union {
        char buf[CMSG_SPACE(sizeof(int)) * 4];
        size_t align; /* cmsghdr alignment (it has a flexible member) */
    } ctl[FA_UDP_RX_BATCH];
    int total = 0;

    for (int call = 0; call < max_calls; call++) {
        int n;
        for (int i = 0; i < FA_UDP_RX_BATCH; i++) {
            iov[i].iov_base = u->rxbuf + (size_t)i * FA_UDP_RX_BUFSZ;
            iov[i].iov_len = FA_UDP_RX_BUFSZ;
            memset(&msgs[i].msg_hdr, 0, sizeof(msgs[i].msg_hdr));
            msgs[i].msg_hdr.msg_name = &from[i];
            msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = ctl[i].buf;
            msgs[i].msg_hdr.msg_controllen = sizeof(ctl[i].buf);
        }
        do {
            n = recvmmsg(u->fd, msgs, FA_UDP_RX_BATCH, MSG_DONTWAIT, NULL);
        } while (n < 0 && errno == EINTR);
        u->recv_calls++;
        if (n <= 0)
            break;
        for (int i = 0; i < n; i++) {
            struct msghdr *mh = &msgs[i].msg_hdr;
            size_t len = msgs[i].msg_len, seg = len;
            unsigned ecn = 0;
            uint8_t *p = iov[i].iov_base;
            struct cmsghdr *cm;
            for (cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
                if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS &&
                    cm->cmsg_len >= CMSG_LEN(1)) {
                    ecn = *(uint8_t *)CMSG_DATA(cm) & 0x3;
                } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS &&
                           cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
                    int tc;
                    memcpy(&tc, CMSG_DATA(cm), sizeof(tc));
                    ecn = (unsigned)tc & 0x3;
                } else if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO &&
                           cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
                    int g;
                    memcpy(&g, CMSG_DATA(cm), sizeof(g));
                    if (g > 0)
                        seg = (size_t)g;
                }
            }
            u->bytes_recv += len;
            if ((seg < len ? seg : len) > u->largest_recv)
                u->largest_recv = seg < len ? seg : len;
            while (len) {
                size_t l = len < seg ? len : seg;
                u->dgrams_recv++;
                total++;
                fn(arg, p, l, (struct sockaddr *)&from[i], mh->msg_namelen, ecn);
                p += l;
                len -= l;
            }
        }
        if (n < FA_UDP_RX_BATCH)
            break;
    }
    return total;
}

unsigned fa_udp_header_len(const struct sockaddr *peer)
{
    if (peer->sa_family == AF_INET6 &&
        !IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)peer)->sin6_addr))
        return 40 + 8;
    return 20 + 8;
}

unsigned fa_udp_route_mtu(const struct sockaddr *peer, socklen_t len)
{
    int fd, mtu = 0;
    socklen_t ol = sizeof(mtu);

    if (peer->sa_family != AF_INET && peer->sa_family != AF_INET6)
        return 0;
    fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    /* connect() on UDP only looks the route up: nothing is sent */
    if (connect(fd, peer, len) != 0 ||
        (peer->sa_family == AF_INET6 ? getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &ol)
                                     : getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &ol)) != 0)
        mtu = 0;
    close(fd);
    return mtu > 0 ? (unsigned)mtu : 0;
}
