/* server.c - the HTTP/3 server: one UDP socket, one epoll loop.
 *
 * The loop (fa_h3_server_run) reads datagrams (server_address.c dispatches
 * them), runs what is due in one min-heap of deadlines (timer_heap.c: each
 * connection's next ngtcp2 expiry -- loss detection, pacing, idle, ACK
 * delay -- and the application's timers), then lets every connection with
 * something to send write it (server_conn.c); epoll waits with nanosecond
 * resolution until the earliest deadline.  Requests are server_request.c's.
 * Other threads reach the loop through an eventfd: posted tasks, drain and
 * stop.
 */
#include "transport/server_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_log.h"

/* ----------------------------------------------------------------- defaults */

void fa_h3_server_config_default(fa_h3_server_config *c)
{
    memset(c, 0, sizeof(*c));
    fa_h3_quic_default(&c->quic);
    c->max_connections = 1024;
    c->max_body_bytes = 64ull << 30;
    c->retry = FA_H3_RETRY_ABOVE_LOAD;
    c->retry_load_threshold = 64;
    c->max_connections_per_address = 64;
    c->max_handshakes = 256;
    c->max_handshakes_per_address = 8;
    c->handshake_timeout_ms = 3000;
    c->max_connections_per_identity = 8;
    c->max_buffered_bytes = 256ull << 20;
    c->max_buffered_bytes_per_identity = 64ull << 20;
    c->drain_timeout_ms = 30000;
}

static void wake(fa_h3_server *s)
{
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof(one));
    (void)r;
}

int fa_h3_server_new(fa_h3_server **out, const fa_h3_server_config *cfg, fa_error *err)
{
    fa_h3_server *s;
    struct sockaddr_storage ss;
    socklen_t sl;
    uint8_t secret[32];
    int rv;
    struct epoll_event ev;

    *out = NULL;
    if (!cfg || !cfg->listen)
        return fa_errorf(err, FA_ERR_INVAL, "h3 server: listen address required");
    if (cfg->quic.max_stream_window < 16384 || cfg->quic.max_connection_window < 16384 ||
        cfg->quic.idle_timeout_ms < 100 || cfg->quic.max_streams == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "h3 server: windows must be >= 16384 bytes, idle timeout >= 100 ms, "
                         "max_streams >= 1 (start from fa_h3_server_config_default)");
    if (!cfg->max_connections || !cfg->max_connections_per_address || !cfg->max_handshakes ||
        !cfg->max_handshakes_per_address || cfg->handshake_timeout_ms < 100 ||
        !cfg->max_connections_per_identity || !cfg->max_buffered_bytes ||
        !cfg->max_buffered_bytes_per_identity)
        return fa_errorf(err, FA_ERR_INVAL,
                         "h3 server: the connection, handshake and buffer limits must be >= 1 "
                         "and the handshake timeout >= 100 ms (start from "
                         "fa_h3_server_config_default)");
    rv = fa_udp_parse_addr(cfg->listen, &ss, &sl, NULL, 0, err);
    if (rv != 0)
        return rv;
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->epfd = s->evfd = s->sigfd = -1;
    s->udp.fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    if (cfg->quic.qlog_dir && *cfg->quic.qlog_dir) {
        s->qlog_dir = strdup(cfg->quic.qlog_dir);
        if (!s->qlog_dir) {
            rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
        s->cfg.quic.qlog_dir = s->qlog_dir;
    } else {
        s->cfg.quic.qlog_dir = NULL;
    }
    s->cfg.listen = s->cfg.cert_file = s->cfg.key_file = s->cfg.ca_file = NULL;
    if (cfg->has_static_secret)
        memcpy(secret, cfg->static_secret, 32);
    else
        fa_h3_random(secret, 32);
    explicit_bzero(s->cfg.static_secret, sizeof(s->cfg.static_secret));
    rv = fa_srv_derive_keys(s, secret, err);
    explicit_bzero(secret, sizeof(secret));
    if (rv != 0)
        goto fail;
    rv = fa_tls_ctx_init(&s->tls, 1, cfg->cert_file, cfg->key_file, cfg->ca_file, err);
    if (rv != 0)
        goto fail;
    rv = fa_tls_crl_set(&s->tls, cfg->crl_file, err);
    if (rv != 0)
        goto fail;
    s->cfg.crl_file = NULL; /* the TLS context keeps its own copy */
    rv = fa_udp_open(&s->udp, (struct sockaddr *)&ss, sl, cfg->quic.gso, cfg->quic.gro, err);
    if (rv != 0)
        goto fail;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->evfd < 0) {
        rv = fa_errorf(err, FA_ERR_IO, "epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    ev.events = EPOLLIN;
    ev.data.u32 = 0;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->udp.fd, &ev);
    ev.data.u32 = 1;
    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev);
    {
        uint64_t seed;
        fa_h3_random((uint8_t *)&seed, sizeof(seed));
        if (fa_cid_map_init(&s->cids, seed) != 0 || fa_cid_map_init(&s->addrs, seed ^ 1) != 0) {
            rv = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    *out = s;
    return 0;
fail:
    fa_h3_server_del(s);
    return rv;
}

int fa_h3_server_port(const fa_h3_server *s)
{
    if (s->udp.local.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&s->udp.local)->sin6_port);
    return ntohs(((const struct sockaddr_in *)&s->udp.local)->sin_port);
}

int fa_h3_server_route(fa_h3_server *s, const char *method, const char *prefix,
                       const fa_h3_handler *h, void *arg)
{
    struct route *n;
    if (!method || !prefix || prefix[0] != '/' || !h)
        return FA_ERR_INVAL;
    n = realloc(s->routes, (s->nroutes + 1) * sizeof(*n));
    if (!n)
        return FA_ERR_NOMEM;
    s->routes = n;
    n = &s->routes[s->nroutes];
    n->method = strdup(method);
    n->prefix = strdup(prefix);
    if (!n->method || !n->prefix) {
        free(n->method);
        free(n->prefix);
        return FA_ERR_NOMEM;
    }
    n->plen = strlen(prefix);
    n->h = *h;
    n->arg = arg;
    s->nroutes++;
    return 0;
}

void fa_h3_server_del(fa_h3_server *s)
{
    struct task *t;
    if (!s)
        return;
    s->stopping = 1;
    while (s->conns)
        fa_srv_conn_free(s->conns);
    for (size_t i = 0; i < s->timers.len; i++)
        if (((hitem *)s->timers.v[i])->kind == HI_TIMER)
            free(s->timers.v[i]);
    fa_timer_heap_free(&s->timers);
    fa_cid_map_free(&s->cids);
    fa_cid_map_free(&s->addrs); /* every slot was released with its connections */
    while ((t = s->tasks)) {
        s->tasks = t->next;
        free(t);
    }
    for (size_t i = 0; i < s->nroutes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].prefix);
    }
    free(s->routes);
    fa_udp_close(&s->udp);
    fa_tls_ctx_free(&s->tls);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->evfd >= 0)
        close(s->evfd);
    if (s->sigfd >= 0)
        close(s->sigfd);
    pthread_mutex_destroy(&s->mu);
    explicit_bzero(s->reset_key, sizeof(s->reset_key));
    explicit_bzero(s->token_key, sizeof(s->token_key));
    free(s->qlog_dir);
    free(s);
}

void fa_h3_server_drain(fa_h3_server *s)
{
    atomic_store(&s->drain_req, 1);
    wake(s);
}

int fa_h3_server_draining(const fa_h3_server *s)
{
    return s->draining;
}

void fa_h3_server_stop(fa_h3_server *s)
{
    atomic_store(&s->stop_req, 1);
    wake(s);
}

void fa_h3_server_reload(fa_h3_server *s)
{
    atomic_store(&s->reload_req, 1);
    wake(s);
}

/* Reads the CRL again when it changed (or force); then closes the live
 * connections whose certificate it now lists. */
static void crl_check(fa_h3_server *s, int force)
{
    fa_error err;
    char why[400];
    int rv;

    fa_error_clear(&err);
    rv = fa_tls_crl_poll(&s->tls, force, &err);
    if (rv < 0) {
        fa_log(FA_LOG_ERROR, "CRL not reloaded; the previous one stays in force", "error=\"%s\"",
               err.msg);
        return;
    }
    if (rv == 0)
        return;
    s->st.crl_loads++;
    fa_log(FA_LOG_INFO, "CRL loaded", "file=%s crls=%u", s->tls.crl_file, s->tls.ncrls);
    for (srv_conn *c = s->conns, *n; c; c = n) {
        n = c->next;
        if (c->state != CS_LIVE || !c->q.verified ||
            !fa_tls_session_revoked(&s->tls, c->q.tls, why, sizeof(why)))
            continue;
        s->st.closed_revoked++;
        fa_log(FA_LOG_WARN, "connection of a revoked certificate closed",
               "peer=%s addr=%s reason=\"%s\"", c->q.peer_id, c->addr, why);
        fa_srv_conn_fail_requests(c, FA_ERR_CANCELLED);
        fa_srv_conn_close_app(c, NGHTTP3_H3_NO_ERROR);
    }
}

static void crl_poll(fa_h3_server *s, void *arg)
{
    (void)arg;
    crl_check(s, 0);
}

int fa_h3_server_post(fa_h3_server *s, void (*fn)(fa_h3_server *, void *), void *arg)
{
    struct task *t = malloc(sizeof(*t));
    if (!t)
        return FA_ERR_NOMEM;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tasks_tail)
        s->tasks_tail->next = t;
    else
        s->tasks = t;
    s->tasks_tail = t;
    pthread_mutex_unlock(&s->mu);
    wake(s);
    return 0;
}

int64_t fa_srv_timer_add(fa_h3_server *s, uint64_t delay_ns, uint64_t period,
                         void (*fn)(fa_h3_server *, void *), void *arg)
{
    app_timer *t = calloc(1, sizeof(*t));
    if (!t)
        return FA_ERR_NOMEM;
    fa_timer_item_init(&t->h.t);
    t->h.kind = HI_TIMER;
    t->id = ++s->next_timer_id;
    t->fn = fn;
    t->arg = arg;
    t->period = period;
    if (fa_timer_heap_set(&s->timers, &t->h.t, fa_h3_now() + delay_ns) != 0) {
        free(t);
        return FA_ERR_NOMEM;
    }
    return t->id;
}

int64_t fa_h3_server_timer(fa_h3_server *s, uint64_t delay_ms, void (*fn)(fa_h3_server *, void *),
                           void *arg)
{
    if (!fn)
        return FA_ERR_INVAL;
    return fa_srv_timer_add(s, delay_ms * NGTCP2_MILLISECONDS, 0, fn, arg);
}

void fa_h3_server_timer_cancel(fa_h3_server *s, int64_t id)
{
    for (size_t i = 0; i < s->timers.len; i++) {
        hitem *h = (hitem *)s->timers.v[i];
        if (h->kind == HI_TIMER && ((app_timer *)h)->id == id) {
            fa_timer_heap_remove(&s->timers, &h->t);
            free(h);
            return;
        }
    }
}

void fa_h3_server_get_stats(const fa_h3_server *s, fa_h3_server_stats *st)
{
    *st = s->st;
    st->largest_datagram_sent = s->udp.largest_sent;
    st->largest_datagram_received = s->udp.largest_recv;
    for (const srv_conn *c = s->conns; c; c = c->next) {
        st->datagram_fallbacks += c->q.dg.fallbacks;
        st->datagram_shrinks += c->q.dg.shrinks;
    }
}

/* ------------------------------------------------------------------ loop */

static void run_tasks(fa_h3_server *s)
{
    struct task *t;
    pthread_mutex_lock(&s->mu);
    t = s->tasks;
    s->tasks = s->tasks_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (t) {
        struct task *n = t->next;
        t->fn(s, t->arg);
        free(t);
        t = n;
    }
}

static void drain_goaway(fa_h3_server *s, void *arg)
{
    (void)arg;
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (c->state == CS_LIVE && c->q.h3 && !c->goaway_sent) {
            nghttp3_conn_shutdown(c->q.h3);
            c->goaway_sent = 1;
            fa_srv_mark_dirty(c);
        }
    }
}

static void start_drain(fa_h3_server *s)
{
    if (s->draining)
        return;
    s->draining = 1;
    s->drain_deadline = fa_h3_now() + (uint64_t)s->cfg.drain_timeout_ms * NGTCP2_MILLISECONDS;
    fa_log(FA_LOG_INFO, "draining", "connections=%zu timeout_ms=%u", s->nlive,
           s->cfg.drain_timeout_ms);
    /* first a shutdown notice, then (one round trip later) the GOAWAY with
     * the last stream we will serve (RFC 9114 5.2) */
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (c->state == CS_LIVE && c->q.h3) {
            nghttp3_conn_submit_shutdown_notice(c->q.h3);
            fa_srv_mark_dirty(c);
        }
    }
    (void)fa_srv_timer_add(s, 100 * NGTCP2_MILLISECONDS, 0, drain_goaway, NULL);
}

#define DRAIN_SILENCE_MS 3000

/* Returns 1 when the drain is complete. */
static int drain_step(fa_h3_server *s)
{
    srv_conn *c, *n;
    int timed_out = fa_h3_now() >= s->drain_deadline;
    size_t busy = 0;

    for (c = s->conns; c; c = n) {
        n = c->next;
        if (c->state != CS_LIVE)
            continue;
        /* A request answered in full is done for the drain: its client,
         * perhaps stopped before this server, may never acknowledge it.
         * One still in flight is waited for while its client is heard
         * from (a live one sends or acknowledges); after DRAIN_SILENCE_MS
         * of nothing its client is gone (killed mid-upload, its connection
         * not yet timed out), and the request with it. */
        if (fa_srv_conn_busy(c) && !timed_out &&
            fa_h3_now() - c->last_rx < DRAIN_SILENCE_MS * NGTCP2_MILLISECONDS) {
            busy++;
            continue;
        }
        if (c->established && !c->goaway_sent && !timed_out) {
            busy++; /* waiting for its GOAWAY to go out */
            continue;
        }
        /* closed now, so no packet reaches a request freed here */
        if (c->nreqs && timed_out) {
            fa_log(FA_LOG_WARN, "drain timeout: aborting requests", "peer=%s requests=%zu",
                   c->q.peer_id, c->nreqs);
            fa_srv_conn_fail_requests(c, FA_ERR_TIMEOUT);
        } else if (fa_srv_conn_busy(c)) {
            fa_log(FA_LOG_INFO, "drain: the requests of a silent client abandoned",
                   "peer=%s requests=%zu silent_ms=%" PRIu64, c->q.peer_id, c->nreqs,
                   (fa_h3_now() - c->last_rx) / NGTCP2_MILLISECONDS);
            fa_srv_conn_fail_requests(c, FA_ERR_TIMEOUT);
        } else if (c->nreqs) {
            fa_srv_conn_fail_requests(c, FA_ERR_CANCELLED); /* answered, never acknowledged */
        }
        fa_srv_conn_close_app(c, NGHTTP3_H3_NO_ERROR);
    }
    return busy == 0;
}

static void run_timers(fa_h3_server *s)
{
    uint64_t now = fa_h3_now();
    fa_timer_item *top;
    while ((top = fa_timer_heap_top(&s->timers)) && top->when <= now) {
        hitem *h = (hitem *)top;
        fa_timer_heap_remove(&s->timers, top);
        if (h->kind == HI_TIMER) {
            app_timer *t = (app_timer *)h;
            if (t->period)
                (void)fa_timer_heap_set(&s->timers, top, now + t->period);
            t->fn(s, t->arg);
            if (!t->period)
                free(t);
        } else {
            srv_conn *c = (srv_conn *)((char *)h - offsetof(srv_conn, h));
            if (c->state != CS_LIVE) {
                fa_srv_conn_free(c); /* closing or draining period over */
                continue;
            }
            {
                int rv = fa_qconn_expiry(&c->q, now);
                if (rv != 0) {
                    fa_srv_conn_close(c, rv);
                    continue;
                }
            }
            fa_srv_mark_dirty(c);
        }
        now = fa_h3_now();
    }
}

static void flush_dirty(fa_h3_server *s)
{
    srv_conn *list = s->dirty_head, *c;
    s->dirty_head = NULL;
    while ((c = list)) {
        list = c->dirty_next;
        c->dirty = 0;
        if (s->udp.blocked) {
            fa_srv_mark_dirty(c);
            continue;
        }
        fa_srv_conn_write(c);
    }
}

static void tick_fn(fa_h3_server *s, void *arg)
{
    (void)arg;
    if (s->cfg.on_tick)
        s->cfg.on_tick(s, s->cfg.tick_arg);
}

int fa_h3_server_run(fa_h3_server *s, fa_error *err)
{
    struct epoll_event evs[16];
    sigset_t set, old;
    int rv = 0, sigblocked = 0;

    if (s->cfg.drain_on_signal) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 2};
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &set, &old);
        sigblocked = 1;
        s->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (s->sigfd < 0) {
            rv = fa_errorf(err, FA_ERR_IO, "signalfd: %s", strerror(errno));
            goto out;
        }
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->sigfd, &ev);
    }
    if (s->tls.crl_file)
        (void)fa_srv_timer_add(s, NGTCP2_SECONDS, NGTCP2_SECONDS, crl_poll, NULL);
    if (s->cfg.tick_ms && s->cfg.on_tick)
        (void)fa_srv_timer_add(s, (uint64_t)s->cfg.tick_ms * NGTCP2_MILLISECONDS,
                               (uint64_t)s->cfg.tick_ms * NGTCP2_MILLISECONDS, tick_fn, NULL);
    fa_log(FA_LOG_INFO, "h3 server listening", "port=%d", fa_h3_server_port(s));
    for (;;) {
        struct timespec ts;
        uint64_t now;
        int n;

        if (atomic_exchange(&s->stop_req, 0)) {
            s->stopping = 1;
            break;
        }
        if (atomic_exchange(&s->drain_req, 0))
            start_drain(s);
        if (atomic_exchange(&s->reload_req, 0))
            crl_check(s, 1);
        run_timers(s);
        flush_dirty(s);
        if (s->draining && drain_step(s)) {
            flush_dirty(s);
            break;
        }
        if (s->udp.blocked && !s->out_armed) {
            /* a send (ours or a stateless reply) hit a full socket buffer */
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u32 = 0};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
            s->out_armed = 1;
        }
        now = fa_h3_now();
        if (s->dirty_head && !s->udp.blocked) {
            ts.tv_sec = 0;
            ts.tv_nsec = 0;
        } else if (fa_timer_heap_top(&s->timers)) {
            uint64_t when = fa_timer_heap_top(&s->timers)->when;
            uint64_t d = when > now ? when - now : 0;
            if (s->draining && d > 50 * NGTCP2_MILLISECONDS)
                d = 50 * NGTCP2_MILLISECONDS;
            ts.tv_sec = (time_t)(d / 1000000000u);
            ts.tv_nsec = (long)(d % 1000000000u);
        } else {
            ts.tv_sec = s->draining ? 0 : 3600;
            ts.tv_nsec = s->draining ? 50000000 : 0;
        }
        n = epoll_pwait2(s->epfd, evs, 16, &ts, NULL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rv = fa_errorf(err, FA_ERR_IO, "epoll_pwait2: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            switch (evs[i].data.u32) {
            case 0:
                if ((evs[i].events & EPOLLOUT) && fa_udp_flush(&s->udp) == 0) {
                    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
                    epoll_ctl(s->epfd, EPOLL_CTL_MOD, s->udp.fd, &ev);
                    s->out_armed = 0;
                }
                if (evs[i].events & EPOLLIN)
                    fa_udp_recv(&s->udp, fa_srv_on_datagram, s, 16);
                break;
            case 1: {
                uint64_t v;
                ssize_t r = read(s->evfd, &v, sizeof(v));
                (void)r;
                run_tasks(s);
                break;
            }
            case 2: {
                struct signalfd_siginfo si;
                while (read(s->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                    if (si.ssi_signo == SIGHUP) {
                        fa_log(FA_LOG_INFO, "SIGHUP: reading the CRL again", "file=%s",
                               s->tls.crl_file ? s->tls.crl_file : "(none)");
                        crl_check(s, 1);
                        continue;
                    }
                    fa_log(FA_LOG_INFO, "signal received, draining", "signal=%u", si.ssi_signo);
                    start_drain(s);
                }
                break;
            }
            }
        }
    }
    /* stop: close what remains without waiting */
    s->stopping = 1; /* conn_close frees at once from here on */
    while (s->conns) {
        srv_conn *c = s->conns;
        if (c->state == CS_LIVE && c->established)
            fa_srv_conn_close_app(c, NGHTTP3_H3_NO_ERROR);
        else
            fa_srv_conn_free(c);
    }
    s->stopping = 0;
out:
    if (sigblocked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (s->sigfd >= 0) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, s->sigfd, NULL);
        close(s->sigfd);
        s->sigfd = -1;
    }
    return rv;
}
