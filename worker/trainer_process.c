/* trainer_process.c - an external trainer's process group (trainer_process.h). */
#include "worker/trainer_process.h"

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

#include "common/fa_log.h"
#include "common/fa_time.h"

extern char **environ;

char *fa_trainer_substitute(const char *s, const char *input, const char *output,
                            const char *result)
{
    static const char *const keys[3] = {"{input}", "{output}", "{result}"};
    const char *reps[3] = {input, output, result};
    size_t cap = strlen(s) + 1, len = 0, longest = 0;
    char *out;

    for (int k = 0; k < 3; k++)
        if (reps[k] && strlen(reps[k]) > longest)
            longest = strlen(reps[k]);
    for (const char *p = s; (p = strchr(p, '{')) != NULL; p++)
        cap += longest; /* generous */
    out = malloc(cap);
    if (!out)
        return NULL;
    while (*s) {
        int hit = -1;
        for (int k = 0; k < 3 && hit < 0; k++)
            if (reps[k] && strncmp(s, keys[k], strlen(keys[k])) == 0)
                hit = k;
        if (hit >= 0) {
            size_t rl = strlen(reps[hit]);
            memcpy(out + len, reps[hit], rl);
            len += rl;
            s += strlen(keys[hit]);
        } else {
            out[len++] = *s++;
        }
    }
    out[len] = '\0';
    return out;
}

static int overridden(const char *entry, const char *kv)
{
    size_t kl = (size_t)(strchr(kv, '=') - kv);
    return strncmp(entry, kv, kl + 1) == 0;
}

char **fa_trainer_env(char *const *ours, size_t n_ours, const char *const *extra, size_t n_extra)
{
    size_t n_env = 0, k = 0;
    char **envp;
    while (environ && environ[n_env])
        n_env++;
    envp = calloc(n_env + n_ours + n_extra + 1, sizeof(char *));
    if (!envp)
        return NULL;
    for (size_t i = 0; i < n_env; i++) {
        int over = 0;
        for (size_t j = 0; j < n_ours && !over; j++)
            over = overridden(environ[i], ours[j]);
        for (size_t j = 0; j < n_extra && !over; j++)
            over = overridden(environ[i], extra[j]);
        if (!over)
            envp[k++] = environ[i];
    }
    for (size_t j = 0; j < n_ours; j++)
        envp[k++] = ours[j];
    for (size_t j = 0; j < n_extra; j++)
        envp[k++] = (char *)extra[j];
    envp[k] = NULL;
    return envp;
}

/* argv joined by spaces, shortened. */
static void describe(char *buf, size_t n, char *const *argv)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; argv[i] && len + 1 < n; i++) {
        int w = snprintf(buf + len, n - len, "%s%s", i ? " " : "", argv[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (len >= n && n > 4)
        memcpy(buf + n - 4, "...", 4);
}

int fa_trainer_proc_spawn(fa_trainer_proc *p, char *const *argv, char *const *envp,
                          const char *workdir, const char *log_path, int append, fa_error *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    int e;

    memset(p, 0, sizeof(*p));
    p->pid = -1;
    describe(p->cmd, sizeof(p->cmd), argv);
    snprintf(p->log_path, sizeof(p->log_path), "%s", log_path);
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path,
                                     O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (workdir)
        posix_spawn_file_actions_addchdir_np(&fa, workdir);
    /* Own process group (killed as a whole), default dispositions (a
     * SIGTERM the worker ignores must still stop the trainer), no mask. */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigdefault(&attr, &all);

    e = posix_spawnp(&p->pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e != 0) {
        p->pid = -1;
        return fa_errorf(err, FA_ERR_CHILD, "external trainer `%s` could not be started: %s%s",
                         p->cmd, strerror(e),
                         e == ENOENT ? " (command or working directory not found)" : "");
    }
    p->started = fa_time_mono_s();
    fa_log_debug("external trainer started", "pid=%d", (int)p->pid);
    return 0;
}

int fa_trainer_proc_exited(fa_trainer_proc *p)
{
    siginfo_t si;
    if (p->pid <= 0 || p->reaped)
        return 1;
    for (;;) {
        memset(&si, 0, sizeof(si));
        if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0)
            return si.si_pid == p->pid ? 1 : 0;
        if (errno != EINTR)
            return -errno;
    }
}

int fa_trainer_proc_wait(fa_trainer_proc *p, double deadline, const volatile sig_atomic_t *cancel)
{
    uint64_t pause = 1; /* ms */
    for (;;) {
        int r = fa_trainer_proc_exited(p);
        double left;
        if (r != 0)
            return r;
        if (cancel && *cancel)
            return 0;
        left = (deadline - fa_time_mono_s()) * 1000.0;
        if (left <= 0)
            return 0;
        /* cut short by *cancel; a deadline less than 1 ms away is slept to */
        fa_time_sleep_ms((double)pause < left ? pause : (uint64_t)left + 1, cancel);
        if (pause < 50)
            pause *= 2;
    }
}

void fa_trainer_proc_finish(fa_trainer_proc *p)
{
    if (p->pid <= 0 || p->reaped)
        return;
    /* Stragglers of the group (children it left behind) go too: the leader
     * is still a zombie, so the group id is still ours. */
    kill(-p->pid, SIGKILL);
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR) {
    }
    p->reaped = 1;
}

void fa_trainer_proc_stop(fa_trainer_proc *p, uint32_t grace_ms)
{
    if (p->pid <= 0 || p->reaped)
        return;
    if (fa_trainer_proc_exited(p) == 0) {
        kill(-p->pid, SIGTERM);
        fa_trainer_proc_wait(p, fa_time_mono_s() + grace_ms / 1000.0, NULL);
    }
    fa_trainer_proc_finish(p);
}

void fa_trainer_proc_describe_end(const fa_trainer_proc *p, char *buf, size_t n, int *exit_status)
{
    int st = p->status;
    int es = -1;
    if (!p->reaped)
        snprintf(buf, n, "is still running");
    else if (WIFEXITED(st)) {
        es = WEXITSTATUS(st);
        snprintf(buf, n, "exited with status %d", es);
    } else if (WIFSIGNALED(st))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, n, "ended with wait status %d", st);
    if (exit_status)
        *exit_status = es;
}

void fa_trainer_log_tail(const char *path, char *buf, size_t n)
{
    char raw[241];
    ssize_t got;
    off_t size;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t j = 0;

    buf[0] = '\0';
    if (fd < 0)
        return;
    size = lseek(fd, 0, SEEK_END);
    if (size > 0) {
        off_t from = size > (off_t)(sizeof(raw) - 1) ? size - (off_t)(sizeof(raw) - 1) : 0;
        got = pread(fd, raw, (size_t)(size - from), from);
        if (got > 0) {
            size_t b = (size_t)got;
            while (b > 0 && (raw[b - 1] == '\n' || raw[b - 1] == ' ' || raw[b - 1] == '\r'))
                b--;
            for (size_t i = 0; i < b && j + 4 < n; i++) {
                unsigned char ch = (unsigned char)raw[i];
                if (ch == '\n') {
                    buf[j++] = ' ';
                    buf[j++] = '|';
                    buf[j++] = ' ';
                } else {
                    buf[j++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
                }
            }
            buf[j] = '\0';
        }
    }
    close(fd);
}
