/* trainer_process.h - an external trainer's process, at the edge: started
 * with posix_spawnp (safe in a process that already runs MPI, OpenBLAS or
 * CUDA threads: nothing but exec happens in the child) in its own process
 * group with default signal dispositions and an empty mask, stdin from
 * /dev/null, stdout and stderr to a log file; waited for with
 * waitpid(WNOHANG) polls; stopped as a whole group (a torchrun launcher and
 * its ranks, a shell and the jobs it left behind).
 *
 * The group is always signalled while its leader is still unreaped (a
 * zombie), so the group id cannot have been reused by then.
 */
#ifndef FA_WORKER_TRAINER_PROCESS_H
#define FA_WORKER_TRAINER_PROCESS_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <sys/types.h>

#include "common/fa_err.h"

typedef struct fa_trainer_proc {
    pid_t pid;  /* the leader; its pid is the group id; -1 when none */
    int status; /* wait status once reaped */
    int reaped;
    double started; /* monotonic seconds */
    char cmd[160];  /* the command line, shortened, for messages */
    char log_path[4200];
} fa_trainer_proc;

/* s with every "{input}", "{output}" and "{result}" replaced (NULL
 * replacements leave the placeholder).  malloc'ed, or NULL when out of
 * memory. */
char *fa_trainer_substitute(const char *s, const char *input, const char *output,
                            const char *result);

/* environ, minus the keys set in ours (n_ours "KEY=VALUE") and extra
 * (n_extra), plus ours then extra.  The array is malloc'ed (free it alone:
 * the strings are borrowed); NULL when out of memory. */
char **fa_trainer_env(char *const *ours, size_t n_ours, const char *const *extra, size_t n_extra);

/* Starts argv (argv[0] looked up in PATH) with envp in workdir, output to
 * log_path (truncated, or appended to with append).  Returns 0 or
 * FA_ERR_CHILD (could not be started: the message says why). */
int fa_trainer_proc_spawn(fa_trainer_proc *p, char *const *argv, char *const *envp,
                          const char *workdir, const char *log_path, int append, fa_error *err);

/* Whether the leader has exited, without reaping it (0 running, 1 exited,
 * negative errno on a wait error). */
int fa_trainer_proc_exited(fa_trainer_proc *p);

/* Waits until the leader exits or deadline (monotonic seconds) passes,
 * polling; *cancel (may be NULL) set ends the wait early.  Returns 1 when it
 * exited (not yet reaped), 0 on the deadline or a cancel, negative errno. */
int fa_trainer_proc_wait(fa_trainer_proc *p, double deadline, const volatile sig_atomic_t *cancel);

/* SIGKILLs whatever is left of the group, then reaps the leader (which
 * must have exited: fa_trainer_proc_wait returned 1). */
void fa_trainer_proc_finish(fa_trainer_proc *p);

/* Stops a running group: SIGTERM to the group, up to grace_ms for the
 * leader to exit, then SIGKILL to the group; reaps the leader. */
void fa_trainer_proc_stop(fa_trainer_proc *p, uint32_t grace_ms);

/* The leader's end for a message: "exited with status 3", "was killed by
 * signal 9 (Killed)"; *exit_status gets the status or -1. */
void fa_trainer_proc_describe_end(const fa_trainer_proc *p, char *buf, size_t n, int *exit_status);

/* The last lines of the log (about 240 bytes), newlines shown as " | " and
 * control characters as '?', for an error message; "" when none. */
void fa_trainer_log_tail(const char *path, char *buf, size_t n);

#endif
