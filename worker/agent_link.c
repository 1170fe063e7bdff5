/* agent_link.c - a federation worker's link to its region agent (agent_link.h). */
#include "worker/agent_link.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

/* A privacy answer comes at once unless the agent is listing a service
 * (a request of a few seconds at most). */
#define PRIVACY_WAIT_MS 120000

struct fa_agent_link {
    int fd;
    uint64_t seq;
    Fedagg__AgentReply *last; /* the last privacy answer (res->st points into it) */
};

int fa_agent_link_addr(const char *path, struct sockaddr_un *sa, socklen_t *len, int *dirfd,
                       fa_error *err)
{
    const char *slash;
    char dir[4096];

    *dirfd = -1;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) < sizeof(sa->sun_path)) {
        memcpy(sa->sun_path, path, strlen(path) + 1);
    } else {
        /* a long state directory: reach it through a descriptor */
        slash = strrchr(path, '/');
        if (!slash || (size_t)(slash - path) >= sizeof(dir) || strlen(slash) > 64)
            return fa_errorf(err, FA_ERR_INVAL, "agent socket path too long: %.80s...", path);
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        *dirfd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (*dirfd < 0)
            return fa_errorf(err, FA_ERR_IO, "%s: %s", dir, strerror(errno));
        snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d%s", *dirfd, slash);
    }
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(sa->sun_path) + 1);
    return 0;
}

int fa_agent_link_send(int fd, const ProtobufCMessage *m, fa_error *err)
{
    uint8_t buf[FA_AGENT_MSG_MAX];
    size_t n = protobuf_c_message_get_packed_size(m);
    ssize_t w;

    if (n > sizeof(buf))
        return fa_errorf(err, FA_ERR_TOOBIG, "agent message of %zu bytes", n);
    protobuf_c_message_pack(m, buf);
    do
        w = send(fd, buf, n, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    if (w < 0 || (size_t)w != n)
        return fa_errorf(err, FA_ERR_IO, "cannot send to the agent's socket: %s",
                         w < 0 ? strerror(errno) : "short send");
    return 0;
}

int fa_agent_link_recv(int fd, const ProtobufCMessageDescriptor *d, int timeout_ms,
                       ProtobufCMessage **m, fa_error *err)
{
    uint8_t buf[FA_AGENT_MSG_MAX];
    struct pollfd p = {fd, POLLIN, 0};
    ssize_t r;
    int pr;

    *m = NULL;
    do
        pr = poll(&p, 1, timeout_ms);
    while (pr < 0 && errno == EINTR && timeout_ms < 0);
    if (pr < 0)
        return fa_errorf(err, errno == EINTR ? FA_ERR_CANCELLED : FA_ERR_IO, "poll: %s",
                         strerror(errno));
    if (pr == 0)
        return fa_errorf(err, FA_ERR_TIMEOUT, "no answer on the agent's socket in %d ms",
                         timeout_ms);
    do
        r = recv(fd, buf, sizeof(buf), MSG_TRUNC);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return fa_errorf(err, FA_ERR_IO, "the other end of the agent's socket closed");
    if (r < 0)
        return fa_errorf(err, FA_ERR_IO, "agent socket: %s", strerror(errno));
    if ((size_t)r > sizeof(buf))
        return fa_errorf(err, FA_ERR_PROTOCOL, "agent message of %zd bytes (at most %d)", r,
                         FA_AGENT_MSG_MAX);
    *m = protobuf_c_message_unpack(d, NULL, (size_t)r, buf);
    if (!*m)
        return fa_errorf(err, FA_ERR_PROTOCOL, "undecodable message on the agent's socket");
    return 0;
}

void fa_agent_link_spend_to_wire(const fa_privacy_spend *sp, Fedagg__AgentSpend *w)
{
    fedagg__agent_spend__init(w);
    w->mechanism = (char *)sp->mechanism;
    w->noise_multiplier = sp->noise_multiplier;
    w->clip = sp->clip;
    w->sampling_rate = sp->sampling_rate;
    w->steps = sp->steps;
    w->ddg_l2_sens = sp->ddg_l2_sens;
    w->ddg_sigma2 = sp->ddg_sigma2;
    w->ddg_regions = sp->ddg_regions;
    w->ddg_dim = sp->ddg_dim;
}

void fa_agent_link_spend_from_wire(const Fedagg__AgentSpend *w, fa_privacy_spend *sp)
{
    memset(sp, 0, sizeof(*sp));
    if (!w)
        return;
    snprintf(sp->mechanism, sizeof(sp->mechanism), "%s", w->mechanism ? w->mechanism : "");
    sp->noise_multiplier = w->noise_multiplier;
    sp->clip = w->clip;
    sp->sampling_rate = w->sampling_rate;
    sp->steps = w->steps;
    sp->ddg_l2_sens = w->ddg_l2_sens;
    sp->ddg_sigma2 = w->ddg_sigma2;
    sp->ddg_regions = w->ddg_regions;
    sp->ddg_dim = w->ddg_dim;
}

/* ---------------------------------------------------------------------- */
/* The worker's end                                                         */
/* ---------------------------------------------------------------------- */

/* Waits for the reply to seq (older replies, to a request given up, are
 * dropped). */
static int reply_to(fa_agent_link *l, uint64_t seq, int timeout_ms, volatile sig_atomic_t *cancel,
                    Fedagg__AgentReply **out, fa_error *err)
{
    for (;;) {
        ProtobufCMessage *m = NULL;
        int wait = timeout_ms, rc;
        if (cancel) {
            if (*cancel)
                return fa_errorf(err, FA_ERR_CANCELLED, "stopped while waiting for the agent");
            wait = 200; /* look at the flag now and then */
        }
        rc = fa_agent_link_recv(l->fd, &fedagg__agent_reply__descriptor, wait, &m, err);
        if (rc == FA_ERR_TIMEOUT && cancel)
            continue;
        if (rc == FA_ERR_CANCELLED && cancel)
            continue;
        if (rc != 0)
            return rc;
        if (((Fedagg__AgentReply *)m)->seq == seq) {
            *out = (Fedagg__AgentReply *)m;
            return 0;
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
}

int fa_agent_link_open(fa_agent_link **out, const char *socket_path, const char *service,
                       const char *federation, fa_error *err)
{
    Fedagg__AgentRequest q = FEDAGG__AGENT_REQUEST__INIT;
    Fedagg__AgentReply *r = NULL;
    struct sockaddr_un sa;
    socklen_t len;
    fa_agent_link *l;
    int dirfd, rc;

    *out = NULL;
    if (!socket_path || !*socket_path)
        return fa_errorf(err, FA_ERR_INVAL, "no agent socket");
    l = calloc(1, sizeof(*l));
    if (!l)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    l->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = fa_errorf(err, FA_ERR_IO, "socket: %s", strerror(errno));
        goto fail;
    }
    if ((rc = fa_agent_link_addr(socket_path, &sa, &len, &dirfd, err)) != 0) {
        fa_error_prefix(err, rc, "cannot reach the region agent at %s", socket_path);
        goto fail;
    }
    rc = connect(l->fd, (struct sockaddr *)&sa, len);
    if (dirfd >= 0)
        close(dirfd);
    if (rc != 0) {
        rc = fa_errorf(err, FA_ERR_IO,
                       "cannot reach the region agent at %s: %s (a federation worker with an "
                       "`agent` block is started by the agent)",
                       socket_path, strerror(errno));
        goto fail;
    }
    q.kind = FEDAGG__AGENT_REQUEST__KIND__HELLO;
    q.seq = ++l->seq;
    q.service = (char *)(service ? service : "");
    q.federation = (char *)(federation ? federation : "");
    q.pid = (uint32_t)getpid();
    if ((rc = fa_agent_link_send(l->fd, &q.base, err)) != 0 ||
        (rc = reply_to(l, q.seq, PRIVACY_WAIT_MS, NULL, &r, err)) != 0)
        goto fail;
    if (r->code != 0) {
        rc = fa_errorf(err, r->code < 0 ? r->code : FA_ERR_PROTOCOL, "the region agent: %s",
                       r->message ? r->message : "refused");
        fedagg__agent_reply__free_unpacked(r, NULL);
        goto fail;
    }
    fedagg__agent_reply__free_unpacked(r, NULL);
    *out = l;
    return 0;
fail:
    fa_agent_link_del(l);
    return rc;
}

void fa_agent_link_del(fa_agent_link *l)
{
    if (!l)
        return;
    if (l->fd >= 0)
        close(l->fd);
    if (l->last)
        fedagg__agent_reply__free_unpacked(l->last, NULL);
    free(l);
}

int fa_agent_link_fd(const fa_agent_link *l)
{
    return l->fd;
}

typedef struct watch {
    int fd;
    volatile sig_atomic_t *trainer_pgid;
} watch;

static void *watchdog(void *arg)
{
    static const char msg[] = "level=error msg=\"the region agent is gone; this federation "
                              "worker stops (the agent starts it again)\" proc=worker\n";
    watch *wt = arg;
    struct pollfd p = {wt->fd, POLLRDHUP, 0};
    ssize_t w;

    /* only the other end's close wakes it (POLLRDHUP, POLLHUP): answers
     * are the main thread's to read */
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    if (wt->trainer_pgid && *wt->trainer_pgid > 0)
        kill(-(pid_t)*wt->trainer_pgid, SIGKILL);
    _exit(1);
    return NULL;
}

int fa_agent_link_guard(fa_agent_link *l, const char *state_dir,
                        volatile sig_atomic_t *trainer_pgid, fa_error *err)
{
    static watch wt; /* one link per process */
    char path[4200];
    sigset_t all, old;
    pthread_t t;
    int fd, rc;

    snprintf(path, sizeof(path), "%s/worker.lock", state_dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600); /* never closed: the lock */
    if (fd < 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return fa_errorf(err, FA_ERR_STATE, "%s: another worker runs in this state directory",
                         path);
    }
    if ((wt.fd = dup(l->fd)) < 0)
        return fa_errorf(err, FA_ERR_IO, "dup: %s", strerror(errno));
    wt.trainer_pgid = trainer_pgid;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    rc = pthread_create(&t, NULL, watchdog, &wt);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_NOMEM, "cannot start the agent link's watchdog: %s",
                         strerror(rc));
    pthread_detach(t);
    return 0;
}

int fa_agent_link_acquire(fa_agent_link *l, uint64_t deadline_unix_ms,
                          volatile sig_atomic_t *cancel, char *why, size_t n, fa_error *err)
{
    Fedagg__AgentRequest q = FEDAGG__AGENT_REQUEST__INIT;
    Fedagg__AgentReply *r = NULL;
    int rc;

    q.kind = FEDAGG__AGENT_REQUEST__KIND__ACQUIRE;
    q.seq = ++l->seq;
    q.deadline_unix_ms = deadline_unix_ms;
    if ((rc = fa_agent_link_send(l->fd, &q.base, err)) != 0)
        return rc;
    rc = reply_to(l, q.seq, -1, cancel, &r, err);
    if (rc == FA_ERR_CANCELLED) {
        fa_error e2;
        fa_agent_link_release(l, 0, &e2); /* leave the queue */
        return rc;
    }
    if (rc != 0)
        return rc;
    if (r->granted) {
        fedagg__agent_reply__free_unpacked(r, NULL);
        return 0;
    }
    snprintf(why, n, "%s", r->message && *r->message ? r->message : "the agent says skip");
    rc = fa_errorf(err, FA_ERR_RANGE, "%s", why);
    fedagg__agent_reply__free_unpacked(r, NULL);
    return rc;
}

int fa_agent_link_release(fa_agent_link *l, int trained, fa_error *err)
{
    Fedagg__AgentRequest q = FEDAGG__AGENT_REQUEST__INIT;
    Fedagg__AgentReply *r = NULL;
    int rc;

    q.kind = FEDAGG__AGENT_REQUEST__KIND__RELEASE;
    q.seq = ++l->seq;
    q.trained = trained != 0;
    if ((rc = fa_agent_link_send(l->fd, &q.base, err)) != 0 ||
        (rc = reply_to(l, q.seq, PRIVACY_WAIT_MS, NULL, &r, err)) != 0)
        return rc;
    fedagg__agent_reply__free_unpacked(r, NULL);
    return 0;
}

int fa_agent_link_privacy(fa_agent_link *l, const fa_agent_privacy_req *req,
                          fa_agent_privacy_res *res, fa_error *err)
{
    Fedagg__AgentRequest q = FEDAGG__AGENT_REQUEST__INIT;
    Fedagg__AgentSpend sp;
    Fedagg__AgentReply *r = NULL;
    int rc;

    memset(res, 0, sizeof(*res));
    fedagg__privacy_statement__init(&res->st);
    q.kind = FEDAGG__AGENT_REQUEST__KIND__PRIVACY;
    q.seq = ++l->seq;
    q.privacy_op = (uint32_t)req->op;
    q.have_spend = req->have_spend != 0;
    fa_agent_link_spend_to_wire(&req->spend, &sp);
    q.spend = &sp;
    q.round = req->round;
    q.attempt = req->attempt;
    q.version = req->version;
    q.digest.data = (uint8_t *)req->digest;
    q.digest.len = 32;
    if ((rc = fa_agent_link_send(l->fd, &q.base, err)) != 0 ||
        (rc = reply_to(l, q.seq, PRIVACY_WAIT_MS, NULL, &r, err)) != 0)
        return res->rc = rc;
    if (l->last)
        fedagg__agent_reply__free_unpacked(l->last, NULL);
    l->last = r;
    res->rc = r->code;
    snprintf(res->msg, sizeof(res->msg), "%s", r->message ? r->message : "");
    res->charged = r->charged;
    res->eps_round = r->epsilon_round;
    res->eps_total = r->epsilon_total;
    res->spent = r->epsilon_spent;
    res->budget = r->budget_epsilon;
    res->delta = r->delta;
    res->rounds = r->rounds;
    res->ds = -1;
    if (r->last) {
        res->have_last = 1;
        res->last.round = r->last->round;
        res->last.version = r->last->version;
        if (r->last->digest.len == 32)
            memcpy(res->last.digest, r->last->digest.data, 32);
        fa_agent_link_spend_from_wire(r->last->spend, &res->last.spend);
        res->last.epsilon_round = r->last->epsilon_round;
        res->last.epsilon_total = r->last->epsilon_total;
    }
    if (r->statement)
        res->st = *r->statement; /* strings point into l->last */
    if (res->rc != 0)
        fa_errorf(err, res->rc, "%s", res->msg);
    return res->rc;
}
