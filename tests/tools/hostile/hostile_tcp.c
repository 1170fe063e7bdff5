/* hostile_tcp.c - idle HTTP/1.1 clients (hostile.h): connections to the
 * metrics and health port that send a request they never finish, or
 * nothing, and hold their slot for as long as the server lets them. */
#include "hostile.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct fa_ht_flood {
    struct sockaddr_storage to, from;
    socklen_t tolen, fromlen;
    int has_from;
    char *partial;
    int *fd;
    unsigned n, open;
    unsigned per_turn; /* reopens per 50 ms turn */
    uint64_t opened;
};

static int parse(const char *s, const char *port_dflt, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(s, ':'), *port = port_dflt;
    struct addrinfo hints, *ai = NULL;
    size_t hl = strlen(s);

    if (colon && port_dflt == NULL) {
        hl = (size_t)(colon - s);
        port = colon + 1;
    }
    if (hl && s[0] == '[' && s[hl - 1] == ']') {
        s++;
        hl -= 2;
    }
    if (hl == 0 || hl >= sizeof(host) || !port)
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
        return -1;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* One connection (at most 300 ms to connect: a server whose backlog is
 * full does not answer at all), then the partial request. */
static int ht_connect(fa_ht_flood *f)
{
    int fd = socket(f->to.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), soerr = 0;
    socklen_t sl = sizeof(soerr);
    struct pollfd p;

    if (fd < 0)
        return -1;
    if (f->has_from && bind(fd, (struct sockaddr *)&f->from, f->fromlen) != 0)
        goto fail;
    if (connect(fd, (struct sockaddr *)&f->to, f->tolen) != 0) {
        if (errno != EINPROGRESS)
            goto fail;
        p.fd = fd;
        p.events = POLLOUT;
        p.revents = 0;
        if (poll(&p, 1, 300) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ||
            soerr != 0)
            goto fail;
    }
    if (f->partial && write(fd, f->partial, strlen(f->partial)) < 0)
        goto fail;
    f->opened++;
    return fd;
fail:
    close(fd);
    return -1;
}

int fa_ht_flood_new(fa_ht_flood **out, const char *addr, const char *bind_addr, unsigned count,
                    const char *partial, fa_error *err)
{
    fa_ht_flood *f = calloc(1, sizeof(*f));

    *out = NULL;
    if (!f)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    f->fd = calloc(count ? count : 1, sizeof(*f->fd));
    f->partial = partial ? strdup(partial) : NULL;
    if (!f->fd || (partial && !f->partial)) {
        fa_ht_flood_del(f);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    f->n = count;
    f->per_turn = 100;
    for (unsigned i = 0; i < count; i++)
        f->fd[i] = -1;
    if (parse(addr, NULL, &f->to, &f->tolen) != 0) {
        fa_ht_flood_del(f);
        return fa_errorf(err, FA_ERR_INVAL, "'%s': expected host:port", addr);
    }
    if (bind_addr && *bind_addr) {
        if (parse(bind_addr, "0", &f->from, &f->fromlen) != 0) {
            fa_ht_flood_del(f);
            return fa_errorf(err, FA_ERR_INVAL, "'%s': not an address", bind_addr);
        }
        f->has_from = 1;
    }
    for (unsigned i = 0; i < count; i++)
        if ((f->fd[i] = ht_connect(f)) >= 0)
            f->open++;
    *out = f;
    return 0;
}

void fa_ht_flood_run(fa_ht_flood *f, uint32_t ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        uint64_t el;
        unsigned reopened = 0;
        for (unsigned i = 0; i < f->n; i++) {
            char buf[4096];
            if (f->fd[i] >= 0) {
                /* answered or closed by the server: read it away; EOF frees the slot */
                ssize_t r = read(f->fd[i], buf, sizeof(buf));
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                    close(f->fd[i]);
                    f->fd[i] = -1;
                    f->open--;
                }
            }
            if (f->fd[i] < 0 && reopened < f->per_turn) {
                reopened++;
                if ((f->fd[i] = ht_connect(f)) >= 0)
                    f->open++;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        el =
            (uint64_t)(t.tv_sec - t0.tv_sec) * 1000u + (uint64_t)(t.tv_nsec - t0.tv_nsec) / 1000000;
        if (el >= ms)
            break;
        poll(NULL, 0, el + 50 < ms ? 50 : (int)(ms - el));
    }
}

void fa_ht_flood_set_rate(fa_ht_flood *f, unsigned reopen_per_s)
{
    f->per_turn = reopen_per_s ? (reopen_per_s + 19) / 20 : 100;
}

unsigned fa_ht_flood_open(const fa_ht_flood *f)
{
    return f->open;
}

uint64_t fa_ht_flood_opened(const fa_ht_flood *f)
{
    return f->opened;
}

void fa_ht_flood_del(fa_ht_flood *f)
{
    if (!f)
        return;
    for (unsigned i = 0; f->fd && i < f->n; i++)
        if (f->fd[i] >= 0)
            close(f->fd[i]);
    free(f->fd);
    free(f->partial);
    free(f);
}
