/* agent.c - the region agent's I/O: services, federation workers, the
 * socket, the datasets' accountants (agent.h).  Every decision is
 * worker/agent_core.c's. */
#include "worker/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "proto/textformat.h"
#include "worker/agent_core.h"
#include "worker/agent_link.h"
#include "worker/privacy_state.h"
#include "worker/service_client.h"

/* A service's listing and a decision's post: the loop waits on them. */
#define LIST_TIMEOUT_MS 5000u
#define DECIDE_TIMEOUT_MS 5000u
/* The loop wakes at least this often (children, stops). */
#define TICK_MS 250
#define MAX_CONNS 256

typedef struct child {
    pid_t pid; /* also its process group */
    int fed;
    uint64_t kill_at; /* stopping: SIGKILL after this (unix ms); 0: not stopping */
} child;

typedef struct conn {
    int fd;
    int fed;      /* -1 until its hello */
    int waiting;  /* an ACQUIRE waits for GRANT or SKIP */
    uint64_t seq; /* the waiting ACQUIRE's */
} conn;

typedef struct agent {
    const Fedagg__WorkerConfig *cfg;
    fa_agent_core *core;
    fa_service_client **svc;
    Fedagg__FederationList **lists; /* each service's last listing */
    size_t *ignored;                /* each service's offers without a usable id, last listing */
    fa_privacy_state **ds;          /* each dataset's accountant, NULL without a budget */
    int listen_fd, lock_fd;
    char sock_path[4200];
    char exe[4096];
    conn conns[MAX_CONNS];
    size_t n_conns;
    child *children;
    size_t n_children, cap_children;
    uint32_t stop_grace_ms;
} agent;

static void log_err(int level, const char *msg, int rc, const fa_error *err)
{
    char q[700];
    fa_log(level, msg, "error=%s", fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
}

static uint64_t now_ms(void)
{
    return fa_time_unix_ms();
}

static const char *fed_id(const agent *a, int f)
{
    return fa_agent_core_fed_id(a->core, f);
}

static const char *svc_name(const agent *a, int s)
{
    return a->cfg->services[s]->name;
}

/* state_dir/federations/<service>/<federation> */
static void fed_dir(const agent *a, int f, char *buf, size_t n)
{
    snprintf(buf, n, "%s/federations/%s/%s", a->cfg->state_dir,
             svc_name(a, fa_agent_core_fed_service(a->core, f)), fed_id(a, f));
}

/* ---------------------------------------------------------------------- */
/* Start: the state directory, the datasets' accountants, the socket       */
/* ---------------------------------------------------------------------- */

static int take_lock(agent *a, fa_error *err)
{
    char path[4200];

    snprintf(path, sizeof(path), "%s/agent.lock", a->cfg->state_dir);
    a->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (a->lock_fd < 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
    if (flock(a->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return fa_errorf(err, FA_ERR_STATE,
                         "%s: another region agent runs with this state directory", path);
    return 0;
}

/* The accountant of dataset i: state_dir/datasets/<name>/, made with its
 * accountant in one rename, so that a directory without one is a deleted
 * accountant (refused) rather than a new one. */
static int open_dataset(agent *a, size_t i, fa_error *err)
{
    const Fedagg__PolicyDataset *d = a->cfg->policy->datasets[i];
    char dir[4200], tmp[4300], file[4400], owner[160], used[4400];
    struct stat st;
    int rc;

    snprintf(dir, sizeof(dir), "%s/datasets/%s", a->cfg->state_dir, d->name);
    snprintf(owner, sizeof(owner), "dataset:%s", d->name);
    if (stat(dir, &st) != 0) {
        fa_privacy_state *fresh = NULL;
        snprintf(tmp, sizeof(tmp), "%s/datasets/.%s.new", a->cfg->state_dir, d->name);
        snprintf(file, sizeof(file), "%s/%s", tmp, FA_PRIVACY_BUDGET_FILE);
        unlink(file); /* what an interrupted start left */
        rmdir(tmp);
        if (mkdir(tmp, 0700) != 0)
            return fa_errorf(err, FA_ERR_IO, "%s: %s", tmp, strerror(errno));
        rc = fa_privacy_state_open_dir(&fresh, tmp, owner, a->cfg->region_id,
                                       a->cfg->identity_key_file, d->privacy, NULL, NULL, err);
        fa_privacy_state_del(fresh);
        if (rc != 0)
            return rc;
        if (rename(tmp, dir) != 0)
            return fa_errorf(err, FA_ERR_IO, "rename %s: %s", tmp, strerror(errno));
        snprintf(tmp, sizeof(tmp), "%s/datasets", a->cfg->state_dir);
        if ((rc = fa_file_sync_dir(tmp, err)) != 0)
            return rc;
        fa_log(FA_LOG_INFO, "new privacy accountant of a dataset", "dataset=%s dir=%s", d->name,
               dir);
    }
    snprintf(used, sizeof(used), "its directory %s exists (it is made with its accountant)", dir);
    rc = fa_privacy_state_open_dir(&a->ds[i], dir, owner, a->cfg->region_id,
                                   a->cfg->identity_key_file, d->privacy, used, NULL, err);
    if (rc != 0)
        return fa_error_prefix(err, rc, "dataset '%s'", d->name);
    {
        fa_privacy_budget *b = fa_privacy_state_budget(a->ds[i]);
        fa_agent_core_set_accountant(a->core, (int)i, b);
        fa_log(FA_LOG_INFO, "dataset privacy budget",
               "dataset=%s epsilon_spent=%.4f budget=%g delta=%g rounds_accounted=%" PRIu64
               " mechanism=%s",
               d->name, fa_privacy_budget_epsilon(b), fa_privacy_budget_target_epsilon(b),
               fa_privacy_budget_delta(b), fa_privacy_budget_rounds(b), d->privacy->mechanism);
    }
    return 0;
}

static int open_socket(agent *a, fa_error *err)
{
    struct sockaddr_un sa;
    socklen_t len;
    int dirfd, rc;

    snprintf(a->sock_path, sizeof(a->sock_path), "%s/%s", a->cfg->state_dir, FA_AGENT_SOCKET_FILE);
    unlink(a->sock_path); /* a previous agent's (the lock says none runs) */
    a->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (a->listen_fd < 0)
        return fa_errorf(err, FA_ERR_IO, "socket: %s", strerror(errno));
    if ((rc = fa_agent_link_addr(a->sock_path, &sa, &len, &dirfd, err)) != 0)
        return rc;
    rc = bind(a->listen_fd, (struct sockaddr *)&sa, len);
    if (dirfd >= 0)
        close(dirfd);
    if (rc != 0 || chmod(a->sock_path, 0600) != 0 || listen(a->listen_fd, 64) != 0)
        return fa_errorf(err, FA_ERR_IO, "%s: %s", a->sock_path, strerror(errno));
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Federation workers                                                       */
/* ---------------------------------------------------------------------- */

/* argv[0] of a launch command, looked up in PATH here (the child only
 * calls exec). */
static int resolve(const char *cmd, char *out, size_t n)
{
    const char *path = getenv("PATH");
    if (strchr(cmd, '/')) {
        snprintf(out, n, "%s", cmd);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    while (path && *path) {
        const char *colon = strchr(path, ':');
        size_t len = colon ? (size_t)(colon - path) : strlen(path);
        snprintf(out, n, "%.*s/%s", (int)len, len ? path : ".", cmd);
        if (access(out, X_OK) == 0)
            return 0;
        path = colon ? colon + 1 : NULL;
    }
    return -1;
}

/* The config of fed's worker: the agent's identity, TLS and known regions,
 * the service's address and pinned key, the policy's trainer and dataset
 * (an external trainer gets the dataset's files in its environment), the
 * federation's own state directory, and the link back here. */
static int write_worker_config(agent *a, int f, const char *dir, char *path, size_t n,
                               fa_error *err)
{
    const Fedagg__WorkerConfig *cfg = a->cfg;
    const Fedagg__AggregationService *sv = cfg->services[fa_agent_core_fed_service(a->core, f)];
    const Fedagg__PolicyTrainer *pt = cfg->policy->trainers[fa_agent_core_fed_trainer(a->core, f)];
    const Fedagg__PolicyDataset *pd = cfg->policy->datasets[fa_agent_core_fed_dataset(a->core, f)];
    Fedagg__WorkerConfig c = FEDAGG__WORKER_CONFIG__INIT;
    Fedagg__TlsConfig tls = *cfg->tls;
    Fedagg__Trainer trainer = FEDAGG__TRAINER__INIT;
    Fedagg__ExternalTrainer ext;
    Fedagg__AgentLink link = FEDAGG__AGENT_LINK__INIT;
    Fedagg__DataConfig no_data = FEDAGG__DATA_CONFIG__INIT;
    char env[6][4200], *envp[64], metrics[4400], *text = NULL;
    size_t len = 0, ne = 0;
    int rc;

    c.region_id = cfg->region_id;
    c.federation_id = (char *)fed_id(a, f);
    c.aggregator = sv->address;
    c.has_service_routes = 1;
    c.service_routes = 1;
    tls.server_name = sv->server_name && *sv->server_name ? sv->server_name : NULL;
    c.tls = &tls;
    c.quic = cfg->quic;
    c.identity_key_file = cfg->identity_key_file;
    c.aggregator_public_key = sv->public_key && *sv->public_key ? sv->public_key : NULL;
    c.aggregator_public_key_file =
        sv->public_key_file && *sv->public_key_file ? sv->public_key_file : NULL;
    c.n_regions = cfg->n_regions;
    c.regions = cfg->regions;
    c.compression = cfg->compression;
    c.has_device = 1;
    c.device = cfg->device;
    c.state_dir = (char *)dir;
    c.log_level = cfg->log_level;
    c.has_local_tensors = 1;
    c.local_tensors = cfg->local_tensors;
    c.has_federated_evaluation = 1;
    c.federated_evaluation = cfg->federated_evaluation;
    c.has_preempt_grace_s = 1;
    c.preempt_grace_s = cfg->preempt_grace_s;
    c.has_local_checkpoint_minutes = 1;
    c.local_checkpoint_minutes = cfg->local_checkpoint_minutes;
    if (cfg->metrics_file && *cfg->metrics_file) {
        /* one file per federation beside the agent's: <base>-<service>-<id>.prom */
        const char *dot = strrchr(cfg->metrics_file, '.');
        const char *slash = strrchr(cfg->metrics_file, '/');
        int stem = dot && (!slash || dot > slash) ? (int)(dot - cfg->metrics_file)
                                                  : (int)strlen(cfg->metrics_file);
        snprintf(metrics, sizeof(metrics), "%.*s-%s-%s%s", stem, cfg->metrics_file, sv->name,
                 fed_id(a, f), cfg->metrics_file + stem);
        c.metrics_file = metrics;
    }
    if (pd->privacy && pd->privacy->target_epsilon > 0)
        c.privacy = pd->privacy;
    c.data = &no_data;
    if (pt->kind_case == FEDAGG__POLICY_TRAINER__KIND_BUILTIN) {
        trainer.kind_case = FEDAGG__TRAINER__KIND_BUILTIN;
        trainer.builtin = pt->builtin;
        c.data = pd->data;
    } else {
        /* the dataset's files reach the external trainer in its environment */
        const Fedagg__DataConfig *dc = pd->data;
        const char *names[4] = {"TRAIN_IMAGES", "TRAIN_LABELS", "TEST_IMAGES", "TEST_LABELS"};
        const char *vals[4] = {dc->train_images, dc->train_labels, dc->test_images,
                               dc->test_labels};
        ext = *pt->external;
        for (size_t i = 0; i < pt->external->n_env && ne < 48; i++)
            envp[ne++] = pt->external->env[i];
        for (int i = 0; i < 4; i++)
            if (vals[i] && *vals[i]) {
                snprintf(env[i], sizeof(env[i]), "FEDAGG_DATA_%s=%s", names[i], vals[i]);
                envp[ne++] = env[i];
            }
        snprintf(env[4], sizeof(env[4]), "FEDAGG_DATASET=%s", pd->name);
        envp[ne++] = env[4];
        if (pd->path && *pd->path) {
            snprintf(env[5], sizeof(env[5]), "FEDAGG_DATASET_PATH=%s", pd->path);
            envp[ne++] = env[5];
        }
        ext.env = envp;
        ext.n_env = ne;
        trainer.kind_case = FEDAGG__TRAINER__KIND_EXTERNAL;
        trainer.external = &ext;
    }
    c.trainer = &trainer;
    link.socket = a->sock_path;
    link.service = sv->name;
    link.dataset = pd->name;
    link.trainer = pt->name;
    link.device = (char *)fa_agent_core_device_name(a->core, fa_agent_core_fed_device(a->core, f));
    c.agent = &link;
    if ((rc = fa_textformat_print(&c.base, &text, &len, err)) != 0)
        return rc;
    snprintf(path, n, "%s/worker.textproto", dir);
    {
        static const char head[] =
            "# Written by the region agent for this federation (docs/region-policy.md); it is\n"
            "# written again at every start: edit the agent's config, not this file.\n";
        char *full = malloc(sizeof(head) + len);
        if (!full) {
            free(text);
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
        memcpy(full, head, sizeof(head) - 1);
        memcpy(full + sizeof(head) - 1, text, len);
        rc = fa_file_write_atomic(path, full, sizeof(head) - 1 + len, 0600, err);
        free(full);
    }
    free(text);
    return rc;
}

static int start_worker(agent *a, int f, uint64_t now, fa_error *err)
{
    const Fedagg__PolicyTrainer *pt =
        a->cfg->policy->trainers[fa_agent_core_fed_trainer(a->core, f)];
    char dir[4200], cfgpath[4300], launch0[4096], q[600];
    const char *argv[64];
    size_t argc = 0;
    child *c;
    pid_t pid, parent = getpid();
    int rc;

    fed_dir(a, f, dir, sizeof(dir));
    if ((rc = fa_file_mkdirs(dir, 0700, err)) != 0 ||
        (rc = write_worker_config(a, f, dir, cfgpath, sizeof(cfgpath), err)) != 0)
        return rc;
    if (pt->n_launch + 4 > sizeof(argv) / sizeof(argv[0]))
        return fa_errorf(err, FA_ERR_INVAL, "trainer '%s': launch has too many words", pt->name);
    if (pt->n_launch) {
        if (resolve(pt->launch[0], launch0, sizeof(launch0)) != 0)
            return fa_errorf(err, FA_ERR_NOTFOUND, "trainer '%s': launch command '%s' not found",
                             pt->name, pt->launch[0]);
        argv[argc++] = launch0;
        for (size_t i = 1; i < pt->n_launch; i++)
            argv[argc++] = pt->launch[i];
    }
    argv[argc++] = a->exe;
    argv[argc++] = "--config";
    argv[argc++] = cfgpath;
    argv[argc] = NULL;
    if (a->n_children == a->cap_children) {
        size_t cap = a->cap_children ? a->cap_children * 2 : 8;
        child *nc = realloc(a->children, cap * sizeof(*nc));
        if (!nc)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        a->children = nc;
        a->cap_children = cap;
    }
    pid = fork();
    if (pid < 0)
        return fa_errorf(err, FA_ERR_CHILD, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* only async-signal-safe calls until exec */
        sigset_t none;
        int devnull = open("/dev/null", O_RDONLY);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the agent dies: so does this worker */
        if (getppid() != parent)
            _exit(127);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        closefrom(3);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no window where a signal misses the group */
    c = &a->children[a->n_children++];
    c->pid = pid;
    c->fed = f;
    c->kill_at = 0;
    fa_log(FA_LOG_INFO, "federation worker started",
           "service=%s federation=%s pid=%d trainer=%s dataset=%s device=%s config=%s",
           svc_name(a, fa_agent_core_fed_service(a->core, f)), fed_id(a, f), (int)pid, pt->name,
           a->cfg->policy->datasets[fa_agent_core_fed_dataset(a->core, f)]->name,
           fa_agent_core_device_name(a->core, fa_agent_core_fed_device(a->core, f)),
           fa_log_quote(q, sizeof(q), cfgpath));
    (void)now;
    return 0;
}

static child *child_of(agent *a, int f)
{
    for (size_t i = 0; i < a->n_children; i++)
        if (a->children[i].fed == f)
            return &a->children[i];
    return NULL;
}

static void reap(agent *a)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        char how[96];
        if (pid <= 0)
            return;
        for (size_t i = 0; i < a->n_children; i++) {
            child c = a->children[i];
            int done = WIFEXITED(status) && WEXITSTATUS(status) == 0;
            if (c.pid != pid)
                continue;
            kill(-pid, SIGKILL); /* whatever it left in its group */
            a->children[i] = a->children[--a->n_children];
            if (WIFEXITED(status))
                snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
            else
                snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
            fa_log(done || c.kill_at ? FA_LOG_INFO : FA_LOG_WARN, "federation worker ended",
                   "service=%s federation=%s pid=%d how=\"%s\"",
                   svc_name(a, fa_agent_core_fed_service(a->core, c.fed)), fed_id(a, c.fed),
                   (int)pid, how);
            fa_agent_core_exited(a->core, now_ms(), c.fed, done);
            if (!done && !c.kill_at)
                fa_log(FA_LOG_INFO, "federation worker restarts after a back-off",
                       "federation=%s failures=%u", fed_id(a, c.fed),
                       fa_agent_core_fed_failures(a->core, c.fed));
            break;
        }
    }
}

static void kill_overdue(agent *a, uint64_t now)
{
    for (size_t i = 0; i < a->n_children; i++)
        if (a->children[i].kill_at && now >= a->children[i].kill_at) {
            fa_log(FA_LOG_WARN, "federation worker did not stop in time; killed",
                   "federation=%s pid=%d", fed_id(a, a->children[i].fed), (int)a->children[i].pid);
            kill(-a->children[i].pid, SIGKILL);
            a->children[i].kill_at = UINT64_MAX - 1;
        }
}

/* ---------------------------------------------------------------------- */
/* The socket                                                               */
/* ---------------------------------------------------------------------- */

static conn *conn_of(agent *a, int f)
{
    for (size_t i = 0; i < a->n_conns; i++)
        if (a->conns[i].fed == f)
            return &a->conns[i];
    return NULL;
}

static void reply(agent *a, conn *c, Fedagg__AgentReply *r)
{
    fa_error e;
    if (fa_agent_link_send(c->fd, &r->base, &e) != 0)
        log_err(FA_LOG_WARN, "cannot answer a federation worker", FA_ERR_IO, &e);
    (void)a;
}

static void reply_code(agent *a, conn *c, uint64_t seq, int code, const char *msg)
{
    Fedagg__AgentReply r = FEDAGG__AGENT_REPLY__INIT;
    r.seq = seq;
    r.code = code;
    r.message = (char *)(msg ? msg : "");
    reply(a, c, &r);
}

static void drop_conn(agent *a, size_t i)
{
    conn *c = &a->conns[i];
    if (c->fed >= 0)
        fa_agent_core_detached(a->core, now_ms(), c->fed);
    close(c->fd);
    a->conns[i] = a->conns[--a->n_conns];
}

static void on_hello(agent *a, conn *c, const Fedagg__AgentRequest *q)
{
    int s = -1, f = -1;
    conn *old;

    for (size_t i = 0; i < a->cfg->n_services; i++)
        if (q->service && !strcmp(a->cfg->services[i]->name, q->service))
            s = (int)i;
    if (s >= 0)
        f = fa_agent_core_find(a->core, s, q->federation);
    if (f < 0 || !child_of(a, f)) {
        reply_code(a, c, q->seq, FA_ERR_INVAL,
                   "not a federation this agent runs (service and federation of the hello)");
        return;
    }
    if ((old = conn_of(a, f)) != NULL && old != c) {
        fa_agent_core_detached(a->core, now_ms(), f);
        old->fed = -1; /* a stale link of a previous process */
    }
    c->fed = f;
    reply_code(a, c, q->seq, 0, NULL);
}

static void on_acquire(agent *a, conn *c, const Fedagg__AgentRequest *q)
{
    char why[FA_AGENT_REASON_MAX];
    Fedagg__AgentReply r = FEDAGG__AGENT_REPLY__INIT;

    switch (fa_agent_core_device_acquire(a->core, now_ms(), c->fed, q->deadline_unix_ms, why,
                                         sizeof(why))) {
    case FA_AGENT_DEVICE_GRANTED:
        r.seq = q->seq;
        r.granted = 1;
        reply(a, c, &r);
        return;
    case FA_AGENT_DEVICE_SKIP:
        fa_log(FA_LOG_INFO, "round skipped: the device would make it late", "federation=%s %s",
               fed_id(a, c->fed), why);
        reply_code(a, c, q->seq, 0, why);
        return;
    case FA_AGENT_DEVICE_QUEUED:
        c->waiting = 1;
        c->seq = q->seq;
        fa_log(FA_LOG_INFO, "federation waits for the device", "federation=%s device=%s",
               fed_id(a, c->fed),
               fa_agent_core_device_name(a->core, fa_agent_core_fed_device(a->core, c->fed)));
        return;
    }
}

static void on_privacy(agent *a, conn *c, const Fedagg__AgentRequest *q)
{
    Fedagg__AgentReply r = FEDAGG__AGENT_REPLY__INIT;
    Fedagg__AgentRelease last = FEDAGG__AGENT_RELEASE__INIT;
    Fedagg__AgentSpend last_spend;
    fa_agent_privacy_req req;
    fa_agent_privacy_res res;

    memset(&req, 0, sizeof(req));
    req.op = (fa_agent_privacy_op)q->privacy_op;
    req.have_spend = q->have_spend;
    fa_agent_link_spend_from_wire(q->spend, &req.spend);
    req.round = q->round;
    req.attempt = q->attempt;
    req.version = q->version;
    if (q->digest.len == 32)
        memcpy(req.digest, q->digest.data, 32);
    if (q->privacy_op > FA_AGENT_PRIVACY_STATEMENT) {
        reply_code(a, c, q->seq, FA_ERR_INVAL, "unknown privacy request");
        return;
    }
    fa_agent_core_privacy(a->core, c->fed, &req, &res);
    if (res.save) {
        fa_error e;
        int rc = fa_privacy_state_save(a->ds[res.ds], &e);
        fa_agent_core_privacy_saved(a->core, res.ds, rc);
        if (rc != 0) {
            /* charged in memory only: nothing leaves until a save succeeds */
            log_err(FA_LOG_ERROR, "cannot save a dataset's privacy accountant", rc, &e);
            res.rc = FA_ERR_IO;
            snprintf(res.msg, sizeof(res.msg), "%s", fa_error_msg(&e, rc));
        }
    }
    if (res.charged && res.rc == 0)
        fa_log(FA_LOG_INFO, "dataset privacy spent",
               "dataset=%s federation=%s round=%" PRIu64 " epsilon_round=%.4f epsilon_total=%.4f "
               "budget=%g rounds_accounted=%" PRIu64,
               a->cfg->policy->datasets[res.ds]->name, fed_id(a, c->fed), req.round, res.eps_round,
               res.eps_total, res.budget, res.rounds);
    else if (res.rc == FA_ERR_RANGE)
        fa_log(FA_LOG_INFO, "dataset privacy budget refuses a round",
               "federation=%s round=%" PRIu64 " epsilon_spent=%.4f budget=%g", fed_id(a, c->fed),
               req.round, res.spent, res.budget);
    r.seq = q->seq;
    r.code = res.rc;
    r.message = res.msg;
    r.charged = res.charged;
    r.epsilon_round = res.eps_round;
    r.epsilon_total = res.eps_total;
    r.epsilon_spent = res.spent;
    r.budget_epsilon = res.budget;
    r.delta = res.delta;
    r.rounds = res.rounds;
    if (res.have_last) {
        last.round = res.last.round;
        last.version = res.last.version;
        last.digest.data = res.last.digest;
        last.digest.len = 32;
        fa_agent_link_spend_to_wire(&res.last.spend, &last_spend);
        last.spend = &last_spend;
        last.epsilon_round = res.last.epsilon_round;
        last.epsilon_total = res.last.epsilon_total;
        r.last = &last;
    }
    if (res.rc == 0 && res.st.mechanism)
        r.statement = &res.st;
    if (res.ds >= 0)
        r.dataset = a->cfg->policy->datasets[res.ds]->name;
    reply(a, c, &r);
}

/* One request on connection i; 0, or -1 when the connection is to go. */
static int on_request(agent *a, size_t i)
{
    conn *c = &a->conns[i];
    ProtobufCMessage *m = NULL;
    Fedagg__AgentRequest *q;
    fa_error e;

    if (fa_agent_link_recv(c->fd, &fedagg__agent_request__descriptor, 0, &m, &e) != 0)
        return -1;
    q = (Fedagg__AgentRequest *)m;
    if (q->kind == FEDAGG__AGENT_REQUEST__KIND__HELLO) {
        on_hello(a, c, q);
    } else if (c->fed < 0) {
        reply_code(a, c, q->seq, FA_ERR_STATE, "say hello first");
    } else if (q->kind == FEDAGG__AGENT_REQUEST__KIND__ACQUIRE) {
        on_acquire(a, c, q);
    } else if (q->kind == FEDAGG__AGENT_REQUEST__KIND__RELEASE) {
        if (q->trained)
            fa_agent_core_device_release(a->core, now_ms(), c->fed);
        else
            fa_agent_core_detached(a->core, now_ms(), c->fed);
        c->waiting = 0;
        reply_code(a, c, q->seq, 0, NULL);
    } else if (q->kind == FEDAGG__AGENT_REQUEST__KIND__PRIVACY) {
        on_privacy(a, c, q);
    } else {
        reply_code(a, c, q->seq, FA_ERR_INVAL, "unknown request");
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Actions                                                                  */
/* ---------------------------------------------------------------------- */

static const Fedagg__FederationOffer *offer_of(const agent *a, int s, const char *id)
{
    const Fedagg__FederationList *l = a->lists[s];
    for (size_t i = 0; l && i < l->n_federations; i++)
        if (l->federations[i]->info && l->federations[i]->info->federation_id &&
            !strcmp(l->federations[i]->info->federation_id, id))
            return l->federations[i];
    return NULL;
}

static void do_list(agent *a, int s)
{
    Fedagg__FederationList *l = NULL;
    size_t ignored = 0;
    fa_error e;
    int rc = fa_service_client_list(a->svc[s], LIST_TIMEOUT_MS, &l, &e);

    if (rc != 0) {
        log_err(FA_LOG_WARN, "cannot list the service's federations; trying again later", rc, &e);
        fa_agent_core_list_failed(a->core, now_ms(), s);
        return;
    }
    if (a->lists[s])
        fedagg__federation_list__free_unpacked(a->lists[s], NULL);
    a->lists[s] = l;
    fa_agent_core_listed(a->core, now_ms(), s, l->federations, l->n_federations, &ignored);
    if (ignored && ignored != a->ignored[s]) /* said when it changes, not every listing */
        fa_log(FA_LOG_WARN, "offers without a usable federation id ignored", "service=%s count=%zu",
               svc_name(a, s), ignored);
    a->ignored[s] = ignored;
}

static void do_decision(agent *a, const fa_agent_action *x)
{
    const char *id = fed_id(a, x->fed);
    const Fedagg__FederationOffer *o = offer_of(a, x->service, id);
    const ProtobufCBinaryData *dg = o && o->info ? &o->info->config_digest : NULL;
    char q[FA_AGENT_REASON_MAX + 64];
    fa_error e;
    int rc;

    if (x->accept)
        fa_log(FA_LOG_INFO, "federation accepted", "service=%s federation=%s team=%s",
               svc_name(a, x->service), id, o && o->team ? o->team : "");
    else
        fa_log(FA_LOG_INFO, "federation refused", "service=%s federation=%s reason=%s",
               svc_name(a, x->service), id, fa_log_quote(q, sizeof(q), x->reason));
    rc =
        fa_service_client_decide(a->svc[x->service], id, x->accept, x->reason, dg ? dg->data : NULL,
                                 dg ? dg->len : 0, now_ms(), DECIDE_TIMEOUT_MS, &e);
    if (rc != 0) {
        log_err(FA_LOG_WARN, "decision not taken by the service; posted again later", rc, &e);
        fa_agent_core_decision_failed(a->core, x->fed);
    }
}

static void do_action(agent *a, const fa_agent_action *x)
{
    Fedagg__AgentReply r = FEDAGG__AGENT_REPLY__INIT;
    char q[FA_AGENT_REASON_MAX + 64];
    fa_error e;
    conn *c;
    child *ch;
    int rc;

    switch (x->kind) {
    case FA_AGENT_LIST: do_list(a, x->service); break;
    case FA_AGENT_POST_DECISION: do_decision(a, x); break;
    case FA_AGENT_START:
        fa_error_clear(&e);
        rc = start_worker(a, x->fed, now_ms(), &e);
        if (rc != 0)
            log_err(FA_LOG_ERROR, "cannot start a federation worker", rc, &e);
        fa_agent_core_started(a->core, now_ms(), x->fed, rc == 0);
        break;
    case FA_AGENT_STOP:
        if ((ch = child_of(a, x->fed)) != NULL && !ch->kill_at) {
            fa_log(FA_LOG_INFO, "federation worker stopped", "federation=%s pid=%d reason=%s",
                   fed_id(a, x->fed), (int)ch->pid, fa_log_quote(q, sizeof(q), x->reason));
            kill(-ch->pid, SIGTERM);
            ch->kill_at = now_ms() + a->stop_grace_ms;
        }
        break;
    case FA_AGENT_GRANT:
    case FA_AGENT_SKIP:
        c = conn_of(a, x->fed);
        if (!c || !c->waiting)
            break; /* gone meanwhile: the core knows (detached) */
        c->waiting = 0;
        r.seq = c->seq;
        r.granted = x->kind == FA_AGENT_GRANT;
        r.message = (char *)x->reason;
        if (x->kind == FA_AGENT_SKIP)
            fa_log(FA_LOG_INFO, "round skipped: the device would make it late", "federation=%s %s",
                   fed_id(a, x->fed), x->reason);
        reply(a, c, &r);
        break;
    }
}

/* ---------------------------------------------------------------------- */
/* The loop                                                                 */
/* ---------------------------------------------------------------------- */

static void on_sigchld(int sig)
{
    (void)sig; /* only to interrupt poll */
}

static void agent_free(agent *a)
{
    for (size_t i = 0; i < a->n_conns; i++)
        close(a->conns[i].fd);
    if (a->listen_fd >= 0) {
        close(a->listen_fd);
        unlink(a->sock_path);
    }
    for (size_t i = 0; a->svc && i < a->cfg->n_services; i++) {
        fa_service_client_del(a->svc[i]);
        if (a->lists[i])
            fedagg__federation_list__free_unpacked(a->lists[i], NULL);
    }
    for (size_t i = 0; a->ds && i < a->cfg->policy->n_datasets; i++)
        fa_privacy_state_del(a->ds[i]);
    fa_agent_core_del(a->core);
    free(a->svc);
    free(a->lists);
    free(a->ignored);
    free(a->ds);
    free(a->children);
    if (a->lock_fd >= 0)
        close(a->lock_fd);
}

static int agent_start(agent *a, const Fedagg__WorkerConfig *cfg, fa_error *err)
{
    char dir[4200];
    ssize_t n;
    int rc;

    a->cfg = cfg;
    a->listen_fd = a->lock_fd = -1;
    a->stop_grace_ms = (cfg->preempt_grace_s + 5u) * 1000u;
    n = readlink("/proc/self/exe", a->exe, sizeof(a->exe) - 1);
    if (n <= 0)
        return fa_errorf(err, FA_ERR_IO, "/proc/self/exe: %s", strerror(errno));
    a->exe[n] = '\0';
    a->svc = calloc(cfg->n_services, sizeof(*a->svc));
    a->lists = calloc(cfg->n_services, sizeof(*a->lists));
    a->ignored = calloc(cfg->n_services, sizeof(*a->ignored));
    a->ds = calloc(cfg->policy->n_datasets + 1, sizeof(*a->ds));
    if (!a->svc || !a->lists || !a->ignored || !a->ds)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    snprintf(dir, sizeof(dir), "%s/datasets", cfg->state_dir);
    if ((rc = fa_file_mkdirs(dir, 0700, err)) != 0)
        return rc;
    snprintf(dir, sizeof(dir), "%s/federations", cfg->state_dir);
    if ((rc = fa_file_mkdirs(dir, 0700, err)) != 0 || (rc = take_lock(a, err)) != 0 ||
        (rc = fa_agent_core_new(&a->core, cfg, now_ms(), err)) != 0)
        return rc;
    for (size_t i = 0; i < cfg->policy->n_datasets; i++)
        if (cfg->policy->datasets[i]->privacy->target_epsilon > 0 &&
            (rc = open_dataset(a, i, err)) != 0)
            return rc;
    for (size_t i = 0; i < cfg->n_services; i++)
        if ((rc = fa_service_client_new(&a->svc[i], cfg, (int)i, err)) != 0)
            return rc;
    return open_socket(a, err);
}

int fa_agent_run(const Fedagg__WorkerConfig *cfg, volatile sig_atomic_t *stop, fa_error *err)
{
    static agent a; /* one per process; its conns are large */
    struct sigaction sa;
    uint64_t give_up = 0;
    int rc;

    memset(&a, 0, sizeof(a));
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigchld;
    sigaction(SIGCHLD, &sa, NULL);
    if ((rc = agent_start(&a, cfg, err)) != 0) {
        agent_free(&a);
        return rc;
    }
    fa_log(FA_LOG_INFO, "region agent started",
           "services=%zu datasets=%zu trainers=%zu devices=%zu max_federations=%u socket=%s",
           cfg->n_services, cfg->policy->n_datasets, cfg->policy->n_trainers,
           fa_agent_core_devices(a.core), cfg->policy->max_federations, a.sock_path);
    for (;;) {
        struct pollfd p[MAX_CONNS + 1];
        fa_agent_action x;
        uint64_t now = now_ms(), next;
        int timeout;

        if (*stop && !give_up) {
            fa_log(FA_LOG_INFO, "region agent stopping: its federation workers are stopped",
                   "workers=%zu", fa_agent_core_running(a.core));
            fa_agent_core_shutdown(a.core);
            give_up = now + a.stop_grace_ms + 1000;
        }
        if (give_up && fa_agent_core_running(a.core) == 0)
            break;
        fa_agent_core_tick(a.core, now);
        while (fa_agent_core_pop(a.core, &x))
            do_action(&a, &x);
        reap(&a);
        kill_overdue(&a, now_ms());
        if (give_up && now_ms() > give_up)
            break;
        next = fa_agent_core_next_timer(a.core);
        now = now_ms();
        timeout = next <= now ? 0 : next - now < TICK_MS ? (int)(next - now) : TICK_MS;
        p[0].fd = a.listen_fd;
        p[0].events = POLLIN;
        for (size_t i = 0; i < a.n_conns; i++) {
            p[i + 1].fd = a.conns[i].fd;
            p[i + 1].events = POLLIN;
            p[i + 1].revents = 0;
        }
        if (poll(p, a.n_conns + 1, timeout) <= 0)
            continue;
        for (size_t i = a.n_conns; i-- > 0;)
            if (p[i + 1].revents &&
                (p[i + 1].revents & (POLLERR | POLLHUP | POLLNVAL) || on_request(&a, i) != 0))
                drop_conn(&a, i);
        if (p[0].revents & POLLIN) {
            int fd = accept4(a.listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0 && a.n_conns < MAX_CONNS) {
                a.conns[a.n_conns++] = (conn){fd, -1, 0, 0};
            } else if (fd >= 0) {
                close(fd);
            }
        }
    }
    for (size_t i = 0; i < a.n_children; i++)
        kill(-a.children[i].pid, SIGKILL);
    while (a.n_children) {
        reap(&a);
        if (a.n_children)
            usleep(10000);
    }
    fa_log(FA_LOG_INFO, "region agent stopped", NULL);
    agent_free(&a);
    return 0;
}
