/* round_proc.c - child processes of `fedagg-bench round`.  See round_bench.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "benchmarks/round_bench.h"

extern char **environ;

/* Children alive, for the signal handler (a bench interrupted by Ctrl-C or
 * a timeout must not leave an aggregator running). */
#define MAX_CHILDREN 16
static volatile pid_t children[MAX_CHILDREN];

static void child_add(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
}

static void child_remove(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

void fa_rbench_cleanup_on_signals(void)
{
    signal(SIGINT, on_fatal_signal);
    signal(SIGTERM, on_fatal_signal);
    signal(SIGHUP, on_fatal_signal);
}

/* environ with OPENBLAS_NUM_THREADS=1 (every process of the federation
 * shares the machine's cores: one BLAS thread each, as deploy/demo.sh). */
static char **child_env(void)
{
    size_t n = 0, j = 0;
    char **env;
    while (environ[n])
        n++;
    env = calloc(n + 2, sizeof(char *));
    if (!env)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "OPENBLAS_NUM_THREADS=", 21) != 0)
            env[j++] = environ[i];
    env[j++] = "OPENBLAS_NUM_THREADS=1";
    env[j] = NULL;
    return env;
}

int fa_rbench_spawn(pid_t *pid, char *const argv[], const char *log_path, fa_error *err)
{
    posix_spawn_file_actions_t fa;
    char **env = child_env();
    int rc;

    if (!env)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    rc = posix_spawn(pid, argv[0], &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    if (rc == 0)
        child_add(*pid);
    free(env);
    if (rc != 0)
        return fa_errorf(err, FA_ERR_IO, "cannot start %s: %s", argv[0], strerror(rc));
    return 0;
}

static int exit_status(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

int fa_rbench_run(char *const argv[], const char *log_path)
{
    pid_t pid;
    int st;
    if (fa_rbench_spawn(&pid, argv, log_path, NULL) != 0)
        return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            child_remove(pid);
            return -1;
        }
    child_remove(pid);
    return exit_status(st);
}

int fa_rbench_alive(pid_t pid)
{
    int st;
    return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
}

int fa_rbench_stop(pid_t pid, unsigned timeout_ms)
{
    int st, rc = -1;
    if (pid <= 0)
        return -1;
    kill(pid, SIGTERM);
    for (unsigned waited = 0; waited < timeout_ms; waited += 20) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            rc = exit_status(st);
            goto out;
        }
        if (r < 0)
            goto out;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            goto out;
    rc = exit_status(st);
out:
    child_remove(pid);
    return rc;
}

long fa_rbench_vmhwm_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

double fa_rbench_cpu_seconds(pid_t pid)
{
    char path[64], buf[2048], *p;
    unsigned long long ut, st;
    long hz = sysconf(_SC_CLK_TCK);
    size_t n;
    FILE *f;

    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/stat");
    else
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if (!(f = fopen(path, "r")))
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields after the command (which may hold spaces) in parentheses */
    p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)(hz > 0 ? hz : 100);
}

int fa_rbench_free_port(int udp)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0), port = -1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}
