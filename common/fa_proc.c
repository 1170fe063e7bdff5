/* fa_proc.c - child processes in their own process group.  See fa_proc.h. */
#include "common/fa_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_time.h"

extern char **environ;

struct fa_proc {
    pid_t pid;
    int exited;
    int status;
};

/* environ, minus the keys of env, plus env. */
static char **merge_env(const char *const *env, size_t n)
{
    size_t n_env = 0, k = 0;
    char **envp;

    while (environ && environ[n_env])
        n_env++;
    envp = calloc(n_env + n + 1, sizeof(char *));
    if (!envp)
        return NULL;
    for (size_t i = 0; i < n_env; i++) {
        int overridden = 0;
        for (size_t j = 0; j < n && !overridden; j++) {
            size_t kl = (size_t)(strchr(env[j], '=') - env[j]);
            overridden = strncmp(environ[i], env[j], kl + 1) == 0;
        }
        if (!overridden)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < n; j++)
        envp[k++] = (char *)env[j];
    envp[k] = NULL;
    return envp;
}

int fa_proc_spawn(fa_proc **out, const fa_proc_opts *o, fa_error *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    char **argv = NULL, **envp = NULL;
    fa_proc *p = NULL;
    pid_t pid = -1;
    int e, rc = 0;

    *out = NULL;
    if (!o->argc || !o->argv[0] || !o->argv[0][0])
        return fa_errorf(err, FA_ERR_INVAL, "no command to run");
    for (size_t i = 0; i < o->n_env; i++)
        if (!o->env[i] || !strchr(o->env[i], '=') || o->env[i][0] == '=')
            return fa_errorf(err, FA_ERR_INVAL, "environment entry %zu is not KEY=VALUE", i);
    argv = calloc(o->argc + 1, sizeof(char *));
    envp = merge_env(o->env, o->n_env);
    p = calloc(1, sizeof(*p));
    if (!argv || !envp || !p) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < o->argc; i++)
        argv[i] = (char *)o->argv[i];
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, o->log_path ? o->log_path : "/dev/null",
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (o->workdir)
        posix_spawn_file_actions_addchdir_np(&fa, o->workdir);
    /* Own process group (killed as a whole), default dispositions (a
     * signal the parent ignores must still stop the child), no mask. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    e = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0) {
        rc = fa_errorf(err, FA_ERR_CHILD, "`%s` could not be started: %s%s", argv[0], strerror(e),
                       e == ENOENT ? " (command or working directory not found)" : "");
        goto out;
    }
    p->pid = pid;
    *out = p;
    p = NULL;
out:
    free(p);
    free(argv);
    free(envp);
    return rc;
}

int fa_proc_poll(fa_proc *p, int *status)
{
    pid_t r;

    if (p->exited) {
        *status = p->status;
        return 1;
    }
    do
        r = waitpid(p->pid, &p->status, WNOHANG);
    while (r < 0 && errno == EINTR);
    if (r == 0)
        return 0;
    if (r < 0)
        return FA_ERR_CHILD;
    p->exited = 1;
    kill(-p->pid, SIGKILL); /* stragglers of the group */
    *status = p->status;
    return 1;
}

void fa_proc_kill(fa_proc *p, uint32_t grace_ms)
{
    int status;

    if (!p || p->exited)
        return;
    kill(-p->pid, SIGTERM);
    for (uint32_t waited = 0; waited < grace_ms; waited += 10) {
        if (fa_proc_poll(p, &status) != 0)
            return;
        fa_time_sleep_ms(10, NULL);
    }
    kill(-p->pid, SIGKILL);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR)
        ;
    p->exited = 1;
}

pid_t fa_proc_pid(const fa_proc *p)
{
    return p->pid;
}

char *fa_proc_describe_status(int status, char *buf, size_t n)
{
    if (WIFEXITED(status))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(buf, n, "ended with wait status %d", status);
    return buf;
}

char *fa_proc_log_tail(const char *path, char *buf, size_t n)
{
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    off_t size;
    ssize_t r;

    buf[0] = '\0';
    if (fd < 0 || n < 2)
        goto out;
    size = lseek(fd, 0, SEEK_END);
    if (size <= 0)
        goto out;
    if (lseek(fd, size > (off_t)(n - 1) ? size - (off_t)(n - 1) : 0, SEEK_SET) < 0)
        goto out;
    r = read(fd, buf, n - 1);
    if (r < 0)
        r = 0;
    buf[r] = '\0';
    while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' '))
        buf[--r] = '\0';
    for (ssize_t i = 0; i < r; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = ' ';
out:
    if (fd >= 0)
        close(fd);
    return buf;
}

void fa_proc_del(fa_proc *p)
{
    if (!p)
        return;
    fa_proc_kill(p, 0);
    free(p);
}
