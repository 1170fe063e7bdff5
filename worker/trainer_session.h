/* trainer_session.h - a long-lived external trainer (TRAINER_LONG_LIVED,
 * docs/trainer-contract.md): the process and its Unix socket, around the
 * sans-I/O protocol of worker/trainer_proto.h.
 *
 *   start   listen on <scratch>/trainer.sock (or, when that path is too long
 *           for a socket address, on a private directory under /tmp, logged),
 *           start the command (worker/trainer_process.h: own process group,
 *           log appended to log_path) with FEDAGG_SOCKET set; it has
 *           start_timeout_s to connect and say hello;
 *   round   one "round" line, then a "done" or "error" line within timeout_s;
 *   end     a "shutdown" line; the group gets SIGTERM after kill_grace_ms,
 *           SIGKILL after another kill_grace_ms;
 *   cancel  (the worker got SIGTERM: preemption) the group gets SIGTERM at
 *           once, with the socket still open, and SIGKILL after
 *           preempt_grace_ms: the trainer may save its round first.
 *
 * The trainer is started on the first round, and again on the round after
 * one where it died, timed out or broke the protocol (it is stopped then,
 * as a whole group): a failure costs its region one round, never the worker.
 * An "error" message is the trainer giving one round up: it stays.
 */
#ifndef FA_WORKER_TRAINER_SESSION_H
#define FA_WORKER_TRAINER_SESSION_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "worker/trainer_proto.h"

typedef struct fa_trainer_session_opts {
    char *const *argv; /* the command (placeholders already replaced) */
    char *const *env;  /* "KEY=VALUE" added to the worker's environment */
    size_t n_env;
    const char *workdir;                 /* NULL: the worker's */
    const char *scratch_dir;             /* the socket's directory (absolute) */
    const char *log_path;                /* stdout and stderr of the trainer (appended) */
    uint32_t start_timeout_s;            /* hello deadline, >= 1 */
    uint32_t timeout_s;                  /* a round's deadline, >= 1 */
    uint32_t kill_grace_ms;              /* shutdown to SIGTERM, SIGTERM to SIGKILL */
    const volatile sig_atomic_t *cancel; /* set (a signal): give up at once; may be NULL */
    uint32_t preempt_grace_ms; /* on a cancel: SIGTERM to the group, SIGKILL after this long
                                  (0: kill_grace_ms) */
} fa_trainer_session_opts;

typedef struct fa_trainer_session fa_trainer_session;

/* Copies o (the strings too).  Nothing starts yet.  Returns 0, FA_ERR_INVAL
 * (no command, a zero timeout, no scratch or log path) or FA_ERR_NOMEM. */
int fa_trainer_session_new(fa_trainer_session **out, const fa_trainer_session_opts *o,
                           fa_error *err);

/* Shuts the trainer down (see the top).  NULL is a no-op. */
void fa_trainer_session_del(fa_trainer_session *s);

/* Hands round m to the trainer, starting it first when none is running,
 * and waits for its answer.  Returns 0 with res filled (from "done"), or
 *   FA_ERR_CHILD      the trainer could not be started, died, closed its
 *                     connection, or answered "error" (the message is its own)
 *   FA_ERR_TIMEOUT    no hello within start_timeout_s, or no answer within
 *                     timeout_s
 *   FA_ERR_PROTOCOL   it broke the protocol (trainer_proto.h)
 *   FA_ERR_CANCELLED  *cancel was set
 *   FA_ERR_IO, FA_ERR_INVAL (a socket path that cannot be made), FA_ERR_NOMEM
 * and every message names the command and ends with the tail of its log.
 * On every failure but "error" the trainer's group is stopped first. */
int fa_trainer_session_round(fa_trainer_session *s, const fa_trainer_round_msg *m,
                             fa_trainer_result *res, fa_error *err);

/* The pid of the running trainer (its process group), or -1. */
long fa_trainer_session_pid(const fa_trainer_session *s);

/* Times the trainer was started. */
unsigned fa_trainer_session_starts(const fa_trainer_session *s);

#endif
