/* trainer_session.c - a long-lived trainer's process and socket
 * (trainer_session.h); the protocol itself is trainer_proto.c. */
#include "worker/trainer_session.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/fa_log.h"
#include "common/fa_time.h"
#include "worker/trainer_process.h"

#define POLL_MS 50
#define READ_CHUNK 65536

struct fa_trainer_session {
    fa_trainer_session_opts o;
    char **argv, **env; /* owned copies */
    size_t argc;
    char *workdir, *scratch, *log_path;
    char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char sock_dir[64]; /* the /tmp fallback directory, "" when unused */
    int listen_fd, conn_fd;
    fa_trainer_proc proc; /* pid -1: not running */
    fa_trainer_proto *proto;
    unsigned starts;
};

static char *dup_or_null(const char *s, int *oom)
{
    char *d;
    if (!s)
        return NULL;
    d = strdup(s);
    if (!d)
        *oom = 1;
    return d;
}

int fa_trainer_session_new(fa_trainer_session **out, const fa_trainer_session_opts *o,
                           fa_error *err)
{
    fa_trainer_session *s;
    int oom = 0;

    *out = NULL;
    if (!o->argv || !o->argv[0] || !o->argv[0][0])
        return fa_errorf(err, FA_ERR_INVAL, "long-lived trainer: the command is empty");
    if (o->start_timeout_s == 0 || o->timeout_s == 0)
        return fa_errorf(err, FA_ERR_INVAL,
                         "long-lived trainer: timeout_s and start_timeout_s must be at least 1");
    if (!o->scratch_dir || !o->scratch_dir[0] || !o->log_path || !o->log_path[0])
        return fa_errorf(err, FA_ERR_INVAL, "long-lived trainer: no scratch directory or log");
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "long-lived trainer: out of memory");
    s->o = *o;
    s->listen_fd = s->conn_fd = -1;
    s->proc.pid = -1;
    while (o->argv[s->argc])
        s->argc++;
    s->argv = calloc(s->argc + 1, sizeof(char *));
    s->env = calloc(o->n_env + 1, sizeof(char *));
    oom = !s->argv || !s->env;
    for (size_t i = 0; !oom && i < s->argc; i++)
        s->argv[i] = dup_or_null(o->argv[i], &oom);
    for (size_t i = 0; !oom && i < o->n_env; i++)
        s->env[i] = dup_or_null(o->env[i], &oom);
    s->workdir = dup_or_null(o->workdir, &oom);
    s->scratch = dup_or_null(o->scratch_dir, &oom);
    s->log_path = dup_or_null(o->log_path, &oom);
    if (oom) {
        fa_trainer_session_del(s);
        return fa_errorf(err, FA_ERR_NOMEM, "long-lived trainer: out of memory");
    }
    s->o.argv = s->argv;
    s->o.env = s->env;
    s->o.workdir = s->workdir;
    s->o.scratch_dir = s->scratch;
    s->o.log_path = s->log_path;
    *out = s;
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void close_socket(fa_trainer_session *s)
{
    close_fd(&s->conn_fd);
    if (s->listen_fd >= 0 && s->sock_path[0])
        unlink(s->sock_path);
    close_fd(&s->listen_fd);
}

/* Stops the trainer's group and forgets the connection: the next round
 * starts a new one. */
static void stop_trainer(fa_trainer_session *s)
{
    close_socket(s);
    if (s->proc.pid > 0)
        fa_trainer_proc_stop(&s->proc, s->o.kill_grace_ms);
    s->proc.pid = -1;
    fa_trainer_proto_del(s->proto);
    s->proto = NULL;
}

/* The worker was told to stop (preemption): the SIGTERM goes on to the
 * trainer's group at once, with the socket still open (a trainer that
 * notices a closed socket first might exit before saving), and the group
 * has preempt_grace_ms to exit before SIGKILL.  Then as stop_trainer. */
static void preempt_trainer(fa_trainer_session *s)
{
    uint32_t grace = s->o.preempt_grace_ms ? s->o.preempt_grace_ms : s->o.kill_grace_ms;
    if (s->proc.pid > 0) {
        fa_log_info("forwarding SIGTERM to the long-lived trainer", "pid=%d grace_ms=%u",
                    (int)s->proc.pid, grace);
        fa_trainer_proc_stop(&s->proc, grace);
    }
    stop_trainer(s);
}

/* Sends all of line before the deadline. */
static int send_line(fa_trainer_session *s, const char *line, size_t len, uint64_t deadline,
                     fa_error *err)
{
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(s->conn_fd, line + off, len - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {s->conn_fd, POLLOUT, 0};
            if (fa_time_mono_ms() >= deadline)
                return fa_errorf(err, FA_ERR_TIMEOUT,
                                 "the trainer does not read its socket (a message could not be "
                                 "sent in time)");
            poll(&pf, 1, POLL_MS);
            continue;
        }
        return fa_errorf(err, FA_ERR_CHILD, "the trainer's connection broke: %s", strerror(errno));
    }
    return 0;
}

void fa_trainer_session_del(fa_trainer_session *s)
{
    if (!s)
        return;
    if (s->proc.pid > 0) {
        char *line = NULL;
        size_t len = 0;
        /* Ask first; the group is signalled only after the grace period. */
        if (s->conn_fd >= 0 && s->proto &&
            fa_trainer_proto_shutdown(s->proto, &line, &len, NULL) == 0 &&
            send_line(s, line, len, fa_time_mono_ms() + s->o.kill_grace_ms, NULL) == 0) {
            fa_trainer_proc_wait(&s->proc, fa_time_mono_s() + s->o.kill_grace_ms / 1000.0, NULL);
        }
        free(line);
        if (fa_trainer_proc_exited(&s->proc) == 0)
            fa_log_info("long-lived trainer did not exit after shutdown; stopping its group",
                        "pid=%d", (int)s->proc.pid);
    }
    stop_trainer(s);
    if (s->sock_dir[0])
        rmdir(s->sock_dir);
    for (size_t i = 0; s->argv && i < s->argc; i++)
        free(s->argv[i]);
    for (size_t i = 0; s->env && i < s->o.n_env; i++)
        free(s->env[i]);
    free(s->argv);
    free(s->env);
    free(s->workdir);
    free(s->scratch);
    free(s->log_path);
    free(s);
}

long fa_trainer_session_pid(const fa_trainer_session *s)
{
    return s->proc.pid > 0 ? (long)s->proc.pid : -1;
}

unsigned fa_trainer_session_starts(const fa_trainer_session *s)
{
    return s->starts;
}

/* The socket's path: in the scratch directory when it fits in sun_path. */
static int socket_path(fa_trainer_session *s, fa_error *err)
{
    int w;
    if (s->sock_path[0])
        return 0;
    w = snprintf(s->sock_path, sizeof(s->sock_path), "%s/trainer.sock", s->scratch);
    if (w > 0 && (size_t)w < sizeof(s->sock_path))
        return 0;
    snprintf(s->sock_dir, sizeof(s->sock_dir), "/tmp/fedagg-trainer.XXXXXX");
    if (!mkdtemp(s->sock_dir)) {
        s->sock_dir[0] = '\0';
        s->sock_path[0] = '\0';
        return fa_errorf(err, FA_ERR_IO,
                         "long-lived trainer: %s is too long for a socket address and no "
                         "directory could be made under /tmp: %s",
                         s->scratch, strerror(errno));
    }
    snprintf(s->sock_path, sizeof(s->sock_path), "%s/trainer.sock", s->sock_dir);
    fa_log_info("the scratch directory is too long for a socket address; the trainer's socket "
                "is under /tmp",
                "socket=%s", s->sock_path);
    return 0;
}

static int listen_socket(fa_trainer_session *s, fa_error *err)
{
    struct sockaddr_un a;
    int rc = socket_path(s, err);
    if (rc != 0)
        return rc;
    memset(&a, 0, sizeof(a));
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, s->sock_path, strlen(s->sock_path) + 1);
    unlink(s->sock_path);
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s->listen_fd < 0)
        return fa_errorf(err, FA_ERR_IO, "long-lived trainer: socket: %s", strerror(errno));
    if (bind(s->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        chmod(s->sock_path, 0600) != 0 || listen(s->listen_fd, 4) != 0) {
        rc = fa_errorf(err, FA_ERR_IO, "long-lived trainer: cannot listen on %s: %s", s->sock_path,
                       strerror(errno));
        close_socket(s);
        return rc;
    }
    return 0;
}

/* Rewrites err's message as "long-lived trainer `cmd`: <msg>; last output: <tail>". */
static int with_context(fa_trainer_session *s, int rc, fa_error *err)
{
    char msg[sizeof(err->msg)], tail[256];
    if (!err)
        return rc;
    snprintf(msg, sizeof(msg), "%s", fa_error_msg(err, rc));
    fa_trainer_log_tail(s->log_path, tail, sizeof(tail));
    return fa_errorf(err, rc, "long-lived trainer `%s`: %s%s%s", s->proc.cmd, msg,
                     tail[0] ? "; last output: " : "", tail);
}

/* The trainer's leader exited while we waited for it. */
static int died(fa_trainer_session *s, const char *when, fa_error *err)
{
    char end[128];
    int es;
    fa_trainer_proc_finish(&s->proc);
    fa_trainer_proc_describe_end(&s->proc, end, sizeof(end), &es);
    return fa_errorf(err, FA_ERR_CHILD, "%s %s", end, when);
}

/* Starts the trainer and waits for its hello. */
static int start(fa_trainer_session *s, fa_error *err)
{
    char env_sock[sizeof(s->sock_path) + 32];
    char *ours[1];
    char **envp = NULL;
    int rc;

    if ((rc = listen_socket(s, err)) != 0)
        return rc;
    snprintf(env_sock, sizeof(env_sock), "FEDAGG_SOCKET=%s", s->sock_path);
    ours[0] = env_sock;
    envp = fa_trainer_env(ours, 1, (const char *const *)s->env, s->o.n_env);
    if (!envp) {
        close_socket(s);
        return fa_errorf(err, FA_ERR_NOMEM, "long-lived trainer: out of memory");
    }
    {
        /* a mark in the log, so that each start's output reads apart */
        FILE *lf = fopen(s->log_path, "a");
        if (lf) {
            fprintf(lf, "--- fedagg-worker: starting the long-lived trainer (start %u) ---\n",
                    s->starts + 1);
            fclose(lf);
        }
    }
    rc = fa_trainer_proc_spawn(&s->proc, s->argv, envp, s->workdir, s->log_path, 1, err);
    free(envp);
    if (rc != 0) {
        close_socket(s);
        s->proc.pid = -1;
        return rc;
    }
    s->starts++;
    fa_log_info("long-lived trainer started", "pid=%d start=%u socket=%s", (int)s->proc.pid,
                s->starts, s->sock_path);
    rc = fa_trainer_proto_new(&s->proto, fa_time_mono_ms(), (uint64_t)s->o.start_timeout_s * 1000u,
                              err);
    if (rc != 0)
        goto fail;
    for (;;) {
        struct pollfd pf;
        int x;

        if (s->o.cancel && *s->o.cancel) {
            rc = fa_errorf(err, FA_ERR_CANCELLED, "stopped while waiting for the trainer's hello");
            rc = with_context(s, rc, err);
            preempt_trainer(s);
            return rc;
        }
        if ((x = fa_trainer_proc_exited(&s->proc)) != 0) {
            rc = died(s, "before saying hello", err);
            goto fail;
        }
        if ((rc = fa_trainer_proto_check_time(s->proto, fa_time_mono_ms(), err)) != 0)
            goto fail;
        pf.fd = s->conn_fd >= 0 ? s->conn_fd : s->listen_fd;
        pf.events = POLLIN;
        pf.revents = 0;
        if (poll(&pf, 1, POLL_MS) <= 0)
            continue;
        if (s->conn_fd < 0) {
            s->conn_fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (s->conn_fd >= 0) {
                /* one connection per trainer: nobody else gets in */
                unlink(s->sock_path);
                close_fd(&s->listen_fd);
            }
            continue;
        }
        {
            char buf[READ_CHUNK];
            fa_trainer_event ev;
            ssize_t n = recv(s->conn_fd, buf, sizeof(buf), 0);
            if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
                continue;
            if (n <= 0) {
                rc = fa_errorf(err, FA_ERR_CHILD, "closed its connection before saying hello");
                goto fail;
            }
            if ((rc = fa_trainer_proto_feed(s->proto, buf, (size_t)n, err)) != 0 ||
                (rc = fa_trainer_proto_next(s->proto, &ev, err)) != 0)
                goto fail;
            if (ev.kind == FA_TRAINER_EV_HELLO) {
                fa_log_info("long-lived trainer connected", "pid=%d seconds=%.2f", (int)s->proc.pid,
                            fa_time_mono_s() - s->proc.started);
                return 0;
            }
        }
    }
fail:
    rc = with_context(s, rc, err);
    stop_trainer(s);
    return rc;
}

int fa_trainer_session_round(fa_trainer_session *s, const fa_trainer_round_msg *m,
                             fa_trainer_result *res, fa_error *err)
{
    char *line = NULL;
    size_t len = 0;
    int rc;

    fa_trainer_result_init(res);
    if (s->proc.pid <= 0 || !s->proto || fa_trainer_proto_state(s->proto) != FA_TRAINER_IDLE) {
        stop_trainer(s);
        if ((rc = start(s, err)) != 0)
            return rc;
    }
    rc = fa_trainer_proto_round(s->proto, m, fa_time_mono_ms(), (uint64_t)s->o.timeout_s * 1000u,
                                &line, &len, err);
    if (rc == FA_ERR_INVAL || rc == FA_ERR_NOMEM) {
        free(line);
        return rc; /* ours, not the trainer's: it stays */
    }
    if (rc == 0)
        rc = send_line(s, line, len, fa_trainer_proto_deadline(s->proto), err);
    free(line);
    while (rc == 0) {
        struct pollfd pf = {s->conn_fd, POLLIN, 0};
        fa_trainer_event ev;
        char buf[READ_CHUNK];
        ssize_t n;

        /* Lines already buffered first (a trainer may answer at once). */
        if ((rc = fa_trainer_proto_next(s->proto, &ev, err)) != 0)
            break;
        if (ev.kind == FA_TRAINER_EV_DONE) {
            *res = ev.result;
            return 0;
        }
        if (ev.kind == FA_TRAINER_EV_ERROR) {
            rc =
                fa_errorf(err, FA_ERR_CHILD, "gave round %" PRIu64 " up: %s", ev.round, ev.message);
            return with_context(s, rc, err); /* it stays for the next round */
        }
        if (s->o.cancel && *s->o.cancel) {
            rc = fa_errorf(err, FA_ERR_CANCELLED, "stopped during round %" PRIu64, m->round);
            rc = with_context(s, rc, err);
            preempt_trainer(s);
            return rc;
        }
        if ((rc = fa_trainer_proto_check_time(s->proto, fa_time_mono_ms(), err)) != 0)
            break;
        if (poll(&pf, 1, POLL_MS) <= 0) {
            if (fa_trainer_proc_exited(&s->proc) != 0) {
                char when[64];
                snprintf(when, sizeof(when), "during round %" PRIu64, m->round);
                rc = died(s, when, err);
            }
            continue;
        }
        n = recv(s->conn_fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (n <= 0) {
            char when[96];
            snprintf(when, sizeof(when), "during round %" PRIu64 " (it closed its connection)",
                     m->round);
            /* give it a moment to exit, for a better message */
            if (fa_trainer_proc_wait(&s->proc, fa_time_mono_s() + 0.5, NULL) == 1)
                rc = died(s, when, err);
            else
                rc = fa_errorf(err, FA_ERR_CHILD, "closed its connection during round %" PRIu64,
                               m->round);
            break;
        }
        rc = fa_trainer_proto_feed(s->proto, buf, (size_t)n, err);
    }
    rc = with_context(s, rc, err);
    stop_trainer(s);
    return rc;
}
