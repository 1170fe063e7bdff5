/* fa_proc.h - a child process in its own process group, for the commands a
 * daemon runs beside its loop (the aggregator's evaluator, a region's
 * trainer).
 *
 * The child is started with posix_spawnp (safe in a process that already
 * runs MPI, OpenBLAS or CUDA threads: nothing but exec happens in the
 * child) in a new process group, with default signal dispositions and an
 * empty signal mask, stdin from /dev/null and stdout and stderr into a log
 * file.  Its environment is the parent's with the given KEY=VALUE entries
 * added (replacing the parent's values of those keys).  The caller polls it
 * (never blocks) and ends it by killing the whole group, so no straggler
 * the command forked outlives it.
 */
#ifndef FA_COMMON_PROC_H
#define FA_COMMON_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/fa_err.h"

typedef struct fa_proc_opts {
    const char *const *argv; /* argv[0] looked up in PATH; argc entries */
    size_t argc;
    const char *const *env; /* "KEY=VALUE" entries added to the environment */
    size_t n_env;
    const char *workdir;  /* NULL: the parent's */
    const char *log_path; /* stdout and stderr (truncated); NULL: /dev/null */
} fa_proc_opts;

typedef struct fa_proc fa_proc;

/* Starts the command.  Returns 0, FA_ERR_INVAL (no argv, an env entry
 * without '='), FA_ERR_NOMEM or FA_ERR_CHILD (could not be started: the
 * message names the command and why). */
int fa_proc_spawn(fa_proc **out, const fa_proc_opts *o, fa_error *err);

/* Whether it has exited: 1 with *status its wait status (waitpid), 0 while
 * it runs, FA_ERR_CHILD when waiting failed.  Once it has exited, the rest
 * of its process group is killed. */
int fa_proc_poll(fa_proc *p, int *status);

/* SIGTERM to its process group, SIGKILL after grace_ms if it has not
 * exited by then; reaps it.  Blocks at most grace_ms (plus the reap). */
void fa_proc_kill(fa_proc *p, uint32_t grace_ms);

/* The process id (also its process group id). */
pid_t fa_proc_pid(const fa_proc *p);

/* "exited with status 2", "was killed by signal 9 (Killed)" into buf. */
char *fa_proc_describe_status(int status, char *buf, size_t n);

/* The last bytes (at most n - 1) of a log file, one line, printable. */
char *fa_proc_log_tail(const char *path, char *buf, size_t n);

/* Kills a running child's group and frees p.  NULL is a no-op. */
void fa_proc_del(fa_proc *p);

#endif
