/* fedagg-worker: a region's worker.
 *
 *   fedagg-worker --config worker.textproto                 (one process)
 *   mpirun -np G fedagg-worker --config worker.textproto    (G local ranks)
 *
 * Rank 0 leads: it follows the federation over HTTP/3, downloads each new
 * global model (any safetensors state_dict, described by its tensor table,
 * model/tensors.h, whose digest must be the one the federation announces),
 * has the region's trainer train one local round, and takes part in the
 * secure-aggregation round with the resulting delta of the federated
 * tensors (float32, bounded and scaled by the per-tensor ranges,
 * worker/quantize.h).  The trainer is the built-in MLP, on every rank
 * (data-parallel, gradients all-reduced through the configured compressor;
 * the other ranks only train), or the user's command
 * (worker/external_trainer.h: one-shot, long-lived, torchrun).  With
 * federated_evaluation each new global model is evaluated on the region's
 * held-out data and a signed report sent (worker/eval_report.h); the
 * metrics_file is rewritten after every round (worker/worker_metrics.h).
 * The region's data never leaves this process or its trainer.
 *
 * Differential privacy (privacy.target_epsilon > 0, docs/privacy.md): the
 * built-in trainer runs DP-SGD (a fresh secret key every round, drawn by
 * rank 0), an external trainer reports what it spent; rank 0 keeps the
 * region's accountant (worker/privacy_state.h), does not train a round
 * that would exceed the budget, charges every update before it leaves
 * (once per distinct update: a new attempt with the same update costs
 * nothing), and sends a signed privacy statement before every masked
 * upload.
 *
 * Progress goes to stderr as one logfmt line per event.  The worker exits 0
 * when the federation has finished (or after `rounds` rounds), 1 on a fatal
 * error (bad config, refused certificate, mismatched model, an audit-log
 * ALARM: worker/round_client.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <sodium.h>

#include "common/fa_daemon.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/secagg.h"
#include "model/mlp.h"
#include "model/tensors.h"
#include "model/train.h"
#include "proto/config_check.h"
#include "worker/comm.h"
#include "worker/compress.h"
#include "worker/data.h"
#include "worker/data_statement.h"
#include "worker/builtin_model.h"
#include "worker/external_trainer.h"
#include "worker/local_checkpoint.h"
#include "worker/local_round.h"
#include "worker/local_tensors.h"
#include "worker/ddp.h"
#include "worker/agent.h"
#include "worker/agent_link.h"
#include "worker/leader_core.h"
#include "worker/quantize.h"
#include "worker/round_client.h"
#include "worker/round_privacy.h"
#include "worker/worker_metrics.h"

enum { CMD_STOP = 0, CMD_TRAIN = 1 };

/* Model downloads: during the federation (a long-poll: the model may be
 * large and the path slow), and of the final model, while the aggregator
 * drains for a few seconds. */
#define FETCH_MS (45u * 60u * 1000u)
#define FINAL_FETCH_MS 15000u

static volatile sig_atomic_t stop_requested;
/* Set while rank 0 blocks on the network (a long-poll can last minutes). */
static volatile sig_atomic_t in_network_wait;
/* The process group of a running long-lived trainer, 0 when none. */
static volatile sig_atomic_t trainer_pgid;
/* The built-in trainer: the grace (preempt_grace_s) is armed by the first
 * signal that does not end the process at once. */
static volatile sig_atomic_t grace_s, grace_armed;
static char grace_msg[256];
static size_t grace_msg_len;

/* Ends the process in a network wait.  Safe: an attempt's state is saved
 * (atomically) before its first masked byte, and a local round when it was
 * stopped or finished (worker/local_round.h), so a restarted worker resumes
 * them.  A long-lived trainer (idle then) gets SIGTERM on the way out
 * rather than outlive us.  Async-signal-safe. */
static void exit_in_network_wait(void)
{
    static const char msg[] =
        "level=info msg=\"stopped by signal during a network wait; the attempt's state is on "
        "disk\" proc=worker\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    if (trainer_pgid > 0)
        kill(-(pid_t)trainer_pgid, SIGTERM);
    _exit(0);
}

/* The grace is over and the process still runs (a step, or the save, took
 * longer): it goes now.  What was saved before stays; the round restarts
 * from it or afresh. */
static void on_grace_over(int sig)
{
    ssize_t w = write(STDERR_FILENO, grace_msg, grace_msg_len);
    (void)w;
    (void)sig;
    _exit(1);
}

/* SIGTERM/SIGINT: in a network wait, exit at once; otherwise stop at the
 * next step: the built-in trainer saves its local round at the next step
 * boundary (within preempt_grace_s, else on_grace_over), an external trainer
 * gets the SIGTERM forwarded by its own wait loop, which watches
 * stop_requested, and preempt_grace_s before SIGKILL. */
static void on_signal(int sig)
{
    stop_requested = sig;
    if (in_network_wait)
        exit_in_network_wait();
    if (grace_s > 0 && !grace_armed) {
        grace_armed = 1;
        alarm((unsigned)grace_s);
    }
}

/* A wait that a signal may end at once; a signal that came just before it
 * (stop_requested already set) ends it too, rather than be missed for the
 * minutes a long-poll or a round may last. */
#define NETWORK_WAIT(expr)                                                                         \
    do {                                                                                           \
        in_network_wait = 1;                                                                       \
        if (stop_requested)                                                                        \
            exit_in_network_wait();                                                                \
        rc = (expr);                                                                               \
        in_network_wait = 0;                                                                       \
    } while (0)

static const char usage[] =
    "usage: fedagg-worker --config FILE [--log-level debug|info|warn|error]\n"
    "       mpirun -np G fedagg-worker --config FILE\n"
    "\n"
    "Runs a region's worker of a fedagg federation: trains on the region's own data\n"
    "and takes part in secure aggregation rounds over HTTP/3.  FILE is a WorkerConfig\n"
    "in protobuf text format (`fedagg config print --type worker --defaults`).\n"
    "\n"
    "  --config FILE      the configuration (required)\n"
    "  --log-level LEVEL  overrides the config's log_level\n"
    "  --version          prints the version\n";

struct worker {
    const Fedagg__WorkerConfig *cfg;
    fa_comm *comm;
    int rank, world;
    fa_data shard, test;
    int have_test;
    int local_keep; /* LOCAL_KEEP: the region's own non-federated tensors carry over */
    char model_path[4096], local_path[4096];

    /* The global model (rank 0): the file, its table and federated vector. */
    fa_safetensors *global_st;
    fa_tensors *table;
    float *global_fed; /* (d) */
    float *delta;      /* (d) the update as handed to the round client (scaled when per_tensor) */
    int delta_mapped;  /* delta is the round client's update buffer (not ours to free) */
    size_t d;
    uint8_t global_sha[32];
    uint64_t have_version;  /* version of the global model; UINT64_MAX: none */
    uint64_t delta_version; /* version `delta` was trained from; UINT64_MAX: none */
    unsigned mismatches;    /* downloads in a row whose table the federation did not announce */
    int load_fatal;         /* load_global's error is one no retry fixes */
    uint64_t n_examples;
    double local_loss;

    /* The built-in trainer: the MLP, matched to the table by name. */
    fa_mlp *net;
    fa_mlp_layout layout;
    fa_builtin_map map; /* rank 0 */
    float *params;      /* (n_params) rank 0: the global model as the network's block */
    float *pdelta;      /* (n_params) rank 0: the trained change of it */
    fa_local_round *lr;
    fa_train_opts topts;
    uint64_t base_seed;   /* the config's seed; each round shuffles with base_seed + version */
    char ckpt_path[4200]; /* this rank's saved local round (preemption) */
    uint8_t shard_digest[32];
    uint64_t test_sigterm_step; /* FEDAGG_TEST_SIGTERM_AT_STEP; UINT64_MAX: none */

    /* An external trainer. */
    int external;
    fa_external_opts xopts;
    fa_external_trainer *xt;

    fa_round_client *rc;
    uint64_t
        evaluated_version; /* last version evaluated (federated evaluation); UINT64_MAX: none */
    struct {               /* an evaluation waiting to be reported */
        int present;
        uint64_t version, n;
        double loss, accuracy;
        fa_trainer_metrics metrics;
    } pending;
    fa_worker_metrics metrics;
    int metrics_warned;
    int noted_no_test; /* "no test set" said once */

    /* Differential privacy (privacy.target_epsilon > 0). */
    int dp;                   /* on (every rank) */
    int ddg_budget;           /* privacy.mechanism "ddg": the budget accounts the federation's
                               * distributed DP; no DP-SGD in training */
    fa_train_dp dpo;          /* built-in: DP-SGD's parameters; rank 0 draws the key per round */
    fa_round_privacy *priv;   /* rank 0: the region's budget */
    fa_trainer_privacy xpriv; /* external: what its last round reported */

    /* What the region states it trains on (worker/data_statement.h);
     * data_src_state 0 not read yet, 1 read, -1 unavailable. */
    fa_data_source data_src;
    int data_src_state;

    /* Started by a region agent (cfg->agent->socket): rank 0's link to it. */
    fa_agent_link *link;
    int holding_device;
};

static int log_err(const char *msg, int rc, const fa_error *err)
{
    char q[600];
    fa_log(FA_LOG_ERROR, msg, "error=%s", fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
    return rc;
}

static void log_warn(const char *msg, int rc, const fa_error *err)
{
    char q[600];
    fa_log(FA_LOG_WARN, msg, "error=%s", fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
}

/* The metrics file, after every round (and at the start). */
static void write_metrics(struct worker *w)
{
    fa_error e;
    int rc;
    if (!w->cfg->metrics_file || !w->cfg->metrics_file[0])
        return;
    fa_error_clear(&e);
    w->metrics.model_version = w->have_version == UINT64_MAX ? NAN : (double)w->have_version;
    rc = fa_worker_metrics_write(w->cfg->metrics_file, &w->metrics, w->cfg->region_id, &e);
    if (rc != 0 && !w->metrics_warned) {
        log_warn("cannot write the metrics file (warned once)", rc, &e);
        w->metrics_warned = 1;
    }
}

/* Rank 0: checks that the downloaded model is the federation's (its tensor
 * table has the announced digest), then makes it the global model: the
 * table, the federated vector and, for the built-in trainer, the network's
 * parameter block (the first model also fixes the architecture, which is
 * broadcast so every rank can build the same network). */
/* w->delta for d coordinates.  Rank 0's is the round client's update
 * buffer, so that saving an attempt before its masked upload copies nothing
 * (round_client.h); other ranks', or rank 0's when the state directory has
 * no room for the buffer's file, an ordinary allocation.  NULL: no memory. */
static float *delta_buffer(struct worker *w, size_t d)
{
    float *p = NULL;
    fa_error e;

    if (w->rc) {
        int rc = fa_round_client_update_buffer(w->rc, d, &p, &e);
        if (rc == 0) {
            if (!w->delta_mapped)
                free(w->delta);
            w->delta_mapped = 1;
            return p;
        }
        log_warn("no update buffer in the state directory; each attempt's save copies the update",
                 rc, &e);
    }
    p = realloc(w->delta_mapped ? NULL : w->delta, (d ? d : 1) * sizeof(float));
    if (p)
        w->delta_mapped = 0;
    return p;
}

static int load_global(struct worker *w, const char *path, const Fedagg__FederationInfo *info,
                       fa_error *err)
{
    fa_safetensors *st = NULL, *local = NULL;
    fa_tensors *t = NULL, *lt = NULL;
    size_t d;
    int rc;

    w->load_fatal = 0;
    if ((rc = fa_st_open(&st, path, err)) != 0)
        return rc;
    if ((rc = fa_tensors_from_st(&t, st, err)) != 0) {
        fa_error_prefix(err, rc, "the global model");
        goto out;
    }
    d = (size_t)fa_tensors_fed_numel(t);
    if ((rc = fa_round_client_check_table(info, t, err)) != 0) {
        /* once may be a race with a restarted aggregator; twice is not */
        w->load_fatal = rc == FA_ERR_PROTOCOL && ++w->mismatches >= 2;
        goto out;
    }
    if (d != w->d || !w->global_fed) {
        float *g = realloc(w->global_fed, (d ? d : 1) * sizeof(float));
        float *dl = g ? delta_buffer(w, d) : NULL;
        if (g)
            w->global_fed = g;
        if (dl)
            w->delta = dl;
        if (!g || !dl) {
            rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory for a model of %zu coordinates", d);
            goto out;
        }
        w->d = d;
        w->delta_version = UINT64_MAX;
    }
    rc = fa_tensors_read_fed(t, st, w->global_fed, d, 1, "the global model", err);
    if (rc != 0)
        goto out;

    if (!w->external) {
        fa_mlp_config mc;
        if ((rc = fa_builtin_config(st, &mc, err)) != 0) {
            w->load_fatal = rc == FA_ERR_UNSUPPORTED;
            goto out;
        }
        if (w->net && memcmp(&mc, &fa_mlp_layout_of(w->net)->config, sizeof(mc)) != 0) {
            char a[128], b[128];
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "the global model's architecture changed from %s to %s",
                           fa_mlp_config_str(&fa_mlp_layout_of(w->net)->config, a, sizeof(a)),
                           fa_mlp_config_str(&mc, b, sizeof(b)));
            w->load_fatal = 1;
            goto out;
        }
        if (!w->params) {
            if ((rc = fa_mlp_layout_init(&w->layout, &mc, err)) != 0)
                goto out;
            w->params = malloc(w->layout.n_params * sizeof(float));
            w->pdelta = malloc(w->layout.n_params * sizeof(float));
            if (!w->params || !w->pdelta) {
                rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
                goto out;
            }
        }
        if ((rc = fa_builtin_map_init(&w->map, &w->layout, t, err)) != 0) {
            w->load_fatal = 1;
            goto out;
        }
        if (w->local_keep && (rc = fa_local_tensors_table(&lt, t, err)) != 0)
            goto out;
        fa_local_tensors_open(&local, w->local_path, lt);
        rc = fa_builtin_load(&w->map, t, w->global_fed, st, local, w->params, err);
        if (rc != 0)
            goto out;
    }
    fa_st_del(w->global_st);
    fa_tensors_del(w->table);
    w->global_st = st;
    w->table = t;
    st = NULL;
    t = NULL;
out:
    fa_st_del(local);
    fa_tensors_del(lt);
    fa_tensors_del(t);
    fa_st_del(st);
    return rc;
}

/* Collective: creates the network on every rank from rank 0's layout. */
static int build_network(struct worker *w, fa_error *err)
{
    fa_mlp_config mc;
    fa_mlp_opts o;
    fa_compress_config cc;
    int rc;

    if (w->rank == 0)
        mc = w->layout.config;
    rc = fa_comm_bcast(w->comm, &mc, sizeof(mc), 0, err);
    if (rc != 0)
        return rc;
    if (w->rank != 0) {
        rc = fa_mlp_layout_init(&w->layout, &mc, err);
        if (rc != 0)
            return rc;
    }
    if (w->shard.ds.dim != mc.dims[0])
        return fa_errorf(err, FA_ERR_INVAL,
                         "the region's data has %u features per example; the model takes %u",
                         w->shard.ds.dim, mc.dims[0]);
    fa_mlp_opts_default(&o);
    o.backend = (int)w->cfg->device;
    rc = fa_mlp_new(&w->net, &mc, &o, err);
    if (rc != 0)
        return rc;
    rc = fa_compress_config_from_proto(&cc, w->cfg->compression, w->topts.seed + 0x5eed, err);
    if (rc != 0)
        return rc;
    return fa_local_round_new(&w->lr, w->comm, w->net, &cc, err);
}

/* The global model as the external trainer sees it. */
static void external_model(const struct worker *w, uint64_t round, fa_external_model *m)
{
    memset(m, 0, sizeof(*m));
    m->table = w->table;
    m->st = w->global_st;
    m->fed = w->global_fed;
    m->version = w->have_version;
    m->round = round;
}

/* Rank 0: an evaluation of the model of `version`, to report. */
static void set_pending(struct worker *w, uint64_t version, uint64_t n, double loss,
                        double accuracy, const fa_trainer_metrics *m)
{
    w->evaluated_version = version;
    w->metrics.eval_accuracy = accuracy;
    w->metrics.eval_loss = loss;
    w->pending.present = 1;
    w->pending.version = version;
    w->pending.n = n;
    w->pending.loss = loss;
    w->pending.accuracy = accuracy;
    if (m)
        w->pending.metrics = *m;
    else
        w->pending.metrics.n = 0;
}

/* Rank 0: sends the pending federated-evaluation report (when the region
 * takes part in federated evaluation); a refusal is logged and dropped. */
static void post_pending(struct worker *w)
{
    const char *names[FA_TRAINER_MAX_METRICS];
    const fa_trainer_metrics *m = &w->pending.metrics;
    fa_error e;
    int rc;

    if (!w->pending.present)
        return;
    w->pending.present = 0;
    if (!w->cfg->federated_evaluation)
        return;
    for (size_t i = 0; i < m->n; i++)
        names[i] = m->names[i];
    fa_error_clear(&e);
    NETWORK_WAIT(fa_round_client_post_eval(w->rc, w->pending.version, w->global_sha, w->pending.n,
                                           w->pending.loss, w->pending.accuracy, names, m->values,
                                           m->n, &e));
    if (rc == 0)
        fa_log(FA_LOG_INFO, "evaluation report sent",
               "version=%" PRIu64 " examples=%" PRIu64 " accuracy=%.4f loss=%.4f",
               w->pending.version, w->pending.n, w->pending.accuracy, w->pending.loss);
    else
        log_warn("evaluation report not accepted; dropped", rc, &e);
}

/* Rank 0, built-in trainer: evaluates the global model on the local test
 * set (the report is sent later: post_pending).  Returns 0 when it was
 * evaluated. */
static int evaluate_builtin(struct worker *w, uint64_t version)
{
    fa_mlp_eval ev;
    fa_error err;
    int rc;
    if (!w->have_test) {
        if (w->cfg->federated_evaluation && !w->noted_no_test)
            fa_log(FA_LOG_INFO, "no test set (data.test_images): no federated evaluation",
                   "version=%" PRIu64, version);
        w->noted_no_test = 1;
        return FA_ERR_NOTFOUND;
    }
    if (!w->net)
        return FA_ERR_STATE;
    fa_error_clear(&err);
    if ((rc = fa_mlp_set_params(w->net, w->params, &err)) != 0 ||
        (rc = fa_mlp_evaluate(w->net, &w->test.ds, &ev, &err)) != 0) {
        log_warn("cannot evaluate the global model on the local test set", rc, &err);
        return rc;
    }
    fa_log(FA_LOG_INFO, "global model evaluated on the local test set",
           "version=%" PRIu64 " accuracy=%.4f loss=%.4f", version, ev.accuracy, ev.mean_loss);
    set_pending(w, version, ev.n, ev.mean_loss, ev.accuracy, NULL);
    return 0;
}

#ifdef FA_TEST_HOOKS
/* Tests of preemption (a test hook, common/fa_failpoint.h):
 * FEDAGG_TEST_SIGTERM_AT_STEP=k sends this process a SIGTERM when the local
 * round reaches step k (k steps done), once. */
static void sigterm_at_step(void *user, uint64_t step)
{
    struct worker *w = user;
    if (step == w->test_sigterm_step) {
        w->test_sigterm_step = UINT64_MAX;
        kill(getpid(), SIGTERM);
    }
}
#endif

/* Tests (a test hook, common/fa_failpoint.h): with FEDAGG_DEBUG_DUMP_DIR
 * set, rank 0 writes the federated delta of each local round as trained,
 * before clipping and quantisation (delta-<region>-v<version>.f32,
 * little-endian floats), so that a test can compare a preempted and resumed
 * round with an uninterrupted one.  Not in a release build. */
static void debug_dump_delta(const struct worker *w)
{
#ifdef FA_TEST_HOOKS
    const char *dir = getenv("FEDAGG_DEBUG_DUMP_DIR");
    char path[4096];
    fa_error e;

    if (!dir || !*dir)
        return;
    snprintf(path, sizeof(path), "%s/delta-%s-v%" PRIu64 ".f32", dir, w->cfg->region_id,
             w->have_version);
    if (fa_file_write_atomic(path, w->delta, w->d * sizeof(float), 0600, &e) == 0)
        fa_log(FA_LOG_WARN, "debug dump of the trained delta written (FEDAGG_DEBUG_DUMP_DIR)",
               "file=%s", path);
#else
    (void)w;
#endif
}

/* Collective: one local round; rank 0 gets the federated delta.  Returns
 * FA_ERR_CANCELLED when a signal stopped it (the built-in trainer's round
 * is saved: err says where). */
static int train(struct worker *w, uint64_t round, uint32_t attempt, fa_error *err)
{
    fa_local_round_result res;
    fa_local_round_ckpt ck;
    char resumed[24] = "-";
    int rc;

    if (w->external) {
        fa_external_result xr;
        fa_external_model m;
        external_model(w, round, &m);
        rc = fa_external_trainer_train(w->xt, &m, w->delta, &xr, err);
        trainer_pgid = (sig_atomic_t)fa_external_trainer_pid(w->xt);
        if (rc != 0)
            return rc;
        w->n_examples = xr.r.num_examples;
        w->local_loss = fa_trainer_metric(&xr.r.metrics, "loss");
        w->xpriv = xr.r.privacy;
        if (xr.r.eval.present)
            set_pending(w, w->have_version, xr.r.eval.num_examples, xr.r.eval.loss,
                        xr.r.eval.accuracy, &xr.r.eval.metrics);
        else if (w->cfg->federated_evaluation)
            fa_log(FA_LOG_DEBUG, "the external trainer reported no evaluation", "version=%" PRIu64,
                   w->have_version);
        return 0;
    }
    memset(&ck, 0, sizeof(ck));
    ck.path = w->ckpt_path;
    ck.stop = &stop_requested;
    ck.every_s = w->cfg->local_checkpoint_minutes * 60.0;
    ck.round = round;
    ck.attempt = attempt;
    ck.version = w->have_version;
    memcpy(ck.model_sha256, w->global_sha, 32);
    ck.shard_digest = w->shard_digest;
#ifdef FA_TEST_HOOKS
    if (w->test_sigterm_step != UINT64_MAX) {
        ck.on_boundary = sigterm_at_step;
        ck.on_boundary_user = w;
    }
#endif
    if (w->dp && !w->ddg_budget) {
        /* A fresh secret for every run, resumed ones included: the Poisson
         * samples and the noise are its streams (rank 0's reaches the
         * others inside the local round). */
        if (w->rank == 0)
            randombytes_buf(w->dpo.key, sizeof(w->dpo.key));
        w->topts.dp = &w->dpo;
    }
    rc = fa_local_round_run_resumable(w->lr, w->rank == 0 ? w->params : NULL, &w->shard.ds,
                                      &w->topts, &ck, w->rank == 0 ? w->pdelta : NULL, &res, err);
    sodium_memzero(w->dpo.key, sizeof(w->dpo.key));
    if (rc != 0)
        return rc;
    w->n_examples = res.num_examples;
    w->local_loss = res.mean_loss;
    if (w->rank != 0)
        return 0;
    fa_builtin_fed_delta(&w->map, w->pdelta, w->delta);
    if (w->local_keep && fa_tensors_fed_count(w->table) < fa_tensors_count(w->table)) {
        /* the trained values of the tensors that are not federated stay
         * with the region (written into pdelta: it is not needed again) */
        fa_error e;
        fa_error_clear(&e);
        for (size_t i = 0; i < w->layout.n_params; i++)
            w->pdelta[i] += w->params[i];
        rc = fa_builtin_save_local(&w->map, w->table, w->pdelta, w->local_path, &e);
        if (rc != 0)
            log_warn("cannot keep the region's local tensors; the next round gets the published "
                     "ones",
                     rc, &e);
    }
    if (res.resumed)
        snprintf(resumed, sizeof(resumed), "%" PRIu64, res.resumed_step);
    fa_log(FA_LOG_INFO, "local round trained",
           "ranks=%d steps=%" PRIu64 " examples=%" PRIu64 " loss=%.4f allreduce_bytes=%" PRIu64
           " seconds=%.2f resumed_at_step=%s",
           w->world, res.steps, res.num_examples, res.mean_loss, res.wire_bytes, res.seconds,
           resumed);
    if (w->dp && !w->ddg_budget)
        fa_log(FA_LOG_INFO, "DP-SGD round",
               "steps=%" PRIu64 " mean_batch=%.1f clipped_fraction=%.4f noise_multiplier=%g "
               "clip=%g sampling_rate=%g",
               res.steps, res.steps ? (double)res.samples / (double)res.steps : 0.0,
               res.samples ? (double)res.clipped / (double)res.samples : 0.0,
               w->dpo.noise_multiplier, w->dpo.clip, w->dpo.sampling_rate);
    debug_dump_delta(w);
    return 0;
}

/* Non-leader ranks: train whenever rank 0 says so. */
static int follower_loop(struct worker *w, fa_error *err)
{
    for (;;) {
        uint64_t cmd[2]; /* the command, and the round's shuffling seed */
        int rc = fa_comm_bcast(w->comm, cmd, sizeof(cmd), 0, err);
        if (rc != 0)
            return rc;
        w->topts.seed = cmd[1];
        if (cmd[0] == CMD_STOP)
            return 0;
        if (!w->net && (rc = build_network(w, err)) != 0)
            return rc;
        rc = train(w, 0, 0, err);
        if (rc == FA_ERR_CANCELLED)
            continue; /* saved; rank 0 stopped too and says CMD_STOP next */
        if (rc != 0)
            return rc;
    }
}

/* Rank 0 tells the other ranks what to do next, with the shuffling seed
 * (every rank must train with the same options). */
static int command(struct worker *w, uint64_t cmd, fa_error *err)
{
    uint64_t msg[2] = {cmd, w->topts.seed};
    if (w->world == 1)
        return 0;
    return fa_comm_bcast(w->comm, msg, sizeof(msg), 0, err);
}

/* Rank 0: downloads the current global model when it is not the one held
 * (within timeout_ms). */
/* Rank 0: after an audit-log ALARM the round client refuses everything
 * (round_client.h) and the region stops with it, the alarm exported in the
 * metrics file.  Returns FA_ERR_VERIFY with the alarm in err, or 0. */
static int stop_on_alarm(struct worker *w, fa_error *err)
{
    const char *why;
    if (!fa_round_client_alarmed(w->rc, &why))
        return 0;
    w->metrics.model_alarm = 1;
    write_metrics(w);
    return fa_errorf(err, FA_ERR_VERIFY, "%s", why);
}

static int get_global(struct worker *w, const Fedagg__FederationInfo *info, uint32_t timeout_ms,
                      fa_error *err)
{
    uint64_t v;
    uint8_t sha[32];
    int rc;

    if (info->model_version == w->have_version)
        return 0;
    NETWORK_WAIT(
        fa_round_client_fetch_model_within(w->rc, w->model_path, timeout_ms, &v, sha, err));
    if (rc != 0 && stop_on_alarm(w, err) != 0)
        w->load_fatal = 1;
    if (w->rc) {
        fa_round_client_dl_stats ds;
        fa_round_client_download_stats(w->rc, &ds);
        w->metrics.model_downloads_full_total = ds.full;
        w->metrics.model_downloads_delta_total = ds.delta;
        w->metrics.model_delta_fallbacks_total = ds.fallbacks;
        w->metrics.model_download_bytes_total = ds.bytes_full + ds.bytes_delta;
    }
    if (rc == 0)
        rc = load_global(w, w->model_path, info, err);
    if (rc != 0)
        return rc;
    w->have_version = v;
    memcpy(w->global_sha, sha, 32);
    w->mismatches = 0;
    return 0;
}

/* Rank 0, at the end: the final model is evaluated too, when it was not
 * yet and the aggregator still answers (it drains for a few seconds).
 * Best effort: nothing here stops the worker with an error. */
static void final_evaluation(struct worker *w, const Fedagg__FederationInfo *info)
{
    fa_error err;
    int rc;

    if (!w->cfg->federated_evaluation || w->evaluated_version == info->model_version ||
        stop_requested)
        return;
    if (!w->external && (!w->have_test || !w->net))
        return;
    fa_error_clear(&err);
    if ((rc = get_global(w, info, FINAL_FETCH_MS, &err)) != 0) {
        log_warn("cannot get the final model to evaluate it", rc, &err);
        return;
    }
    if (!w->external) {
        evaluate_builtin(w, w->have_version);
        post_pending(w);
        return;
    }
    {
        fa_external_result xr;
        fa_external_model m;
        external_model(w, info->round, &m);
        rc = fa_external_trainer_evaluate(w->xt, &m, &xr, &err);
        trainer_pgid = (sig_atomic_t)fa_external_trainer_pid(w->xt);
        if (rc != 0) {
            log_warn("the external trainer could not evaluate the final model", rc, &err);
            return;
        }
        fa_log(FA_LOG_INFO, "final model evaluated by the external trainer",
               "version=%" PRIu64 " examples=%" PRIu64 " accuracy=%.4f loss=%.4f", w->have_version,
               xr.r.eval.num_examples, xr.r.eval.accuracy, xr.r.eval.loss);
        set_pending(w, w->have_version, xr.r.eval.num_examples, xr.r.eval.loss, xr.r.eval.accuracy,
                    &xr.r.eval.metrics);
        post_pending(w);
    }
}

/* Rank 0: the trained delta made ready for the codec (quantize.h), logged
 * and counted.  Returns 0 or the error that makes the region skip. */
static int quantise(struct worker *w, const Fedagg__FederationInfo *info, fa_error *err)
{
    fa_quantize_params qp;
    fa_quantize_stats qs;
    char q[FA_ST_MAX_NAME + 8];
    int rc;
    if (info->ddp)
        return 0; /* distributed DP clips, rotates and rounds it itself (worker/ddp.h) */
    rc = fa_quantize_params_from_proto(&qp, info->quant, err);
    if (rc == 0)
        rc = fa_quantize_prepare(w->delta, w->d, w->table, &qp, &qs, err);
    if (rc != 0)
        return rc;
    fa_log(FA_LOG_INFO, "update quantised",
           "version=%" PRIu64 " per_tensor=%d coordinates=%zu l2_norm=%.6g l2_scale=%.6g "
           "clipped_coords=%" PRIu64 " clipped_fraction=%.6f worst_tensor=%s "
           "worst_tensor_clipped=%" PRIu64 "/%" PRIu64,
           w->delta_version, qp.per_tensor, w->d, qs.l2_norm, qs.l2_scale, qs.clipped_coords,
           qs.clipped_fraction, fa_log_quote(q, sizeof(q), qs.worst_tensor ? qs.worst_tensor : "-"),
           qs.worst_clipped, qs.worst_numel);
    w->metrics.clipped_fraction = qs.clipped_fraction;
    w->metrics.clipped_coordinates = (double)qs.clipped_coords;
    w->metrics.update_l2_norm = qs.l2_norm;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* A federation worker of a region agent (worker/agent.h)                   */
/* ---------------------------------------------------------------------- */

/* Rank 0 of a federation worker its region agent started: the link, and
 * the worker's tie to the agent (worker/agent_link.h). */
static int agent_link_setup(struct worker *w, fa_error *err)
{
    const Fedagg__AgentLink *l = w->cfg->agent;
    int rc;

    if ((rc = fa_agent_link_open(&w->link, l->socket, l->service, w->cfg->federation_id, err)) !=
            0 ||
        (rc = fa_agent_link_guard(w->link, w->cfg->state_dir, &trainer_pgid, err)) != 0)
        return rc;
    fa_log(FA_LOG_INFO, "joined through the region agent",
           "service=%s dataset=%s device=%s socket=%s", l->service, l->dataset, l->device,
           l->socket);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Differential privacy                                                     */
/* ---------------------------------------------------------------------- */

/* Every rank: DP-SGD's parameters from the config and the shard (the
 * built-in trainer); rank 0 also opens the region's budget (its own, or
 * its agent's: worker/round_privacy.h).  Returns 0 or the error that stops
 * the worker. */
static int privacy_setup(struct worker *w, fa_error *err)
{
    const Fedagg__WorkerPrivacy *p = w->cfg->privacy;
    fa_round_privacy_opts o;
    fa_privacy_spend spend;

    memset(&spend, 0, sizeof(spend));
    if (!w->external && !w->ddg_budget) {
        int rc = fa_round_privacy_dpsgd(p, &w->topts, w->shard.ds.n, w->world,
                                        w->cfg->compression->kind != FEDAGG__COMPRESSION_KIND__NONE,
                                        &w->dpo, &spend, err);
        if (rc != 0)
            return rc;
    }
    if (w->rank != 0)
        return 0;
    memset(&o, 0, sizeof(o));
    o.cfg = w->cfg;
    o.external = w->external;
    o.builtin = !w->external && !w->ddg_budget ? &spend : NULL;
    o.link = w->link;
    o.metrics = &w->metrics;
    return fa_round_privacy_new(&w->priv, &o, err);
}

/* ---------------------------------------------------------------------- */
/* The leader's steps (rank 0): worker/leader_core.h decides their order    */
/* ---------------------------------------------------------------------- */

/* Sends an attempt's privacy statement: OK, SKIP (not taken: this attempt
 * goes without us) or REPLAY (the federation moved on). */
static fa_leader_outcome post_statement(struct worker *w, Fedagg__PrivacyStatement *st)
{
    fa_error e;
    int rc;

    fa_error_clear(&e);
    NETWORK_WAIT(fa_round_client_post_privacy(w->rc, st, &e));
    if (rc == FA_ERR_REPLAY)
        return FA_LEADER_REPLAY;
    if (rc != 0) {
        log_err("privacy statement not accepted; the region does not upload in this attempt", rc,
                &e);
        return FA_LEADER_SKIP;
    }
    fa_log(FA_LOG_INFO, "privacy statement sent",
           "round=%" PRIu64 " attempt=%u epsilon_round=%.4f epsilon_total=%.4f budget=%g "
           "delta=%g rounds_accounted=%" PRIu64,
           st->round, st->attempt, st->epsilon_round, st->epsilon_total, st->budget_epsilon,
           st->delta, st->rounds_accounted);
    return FA_LEADER_OK;
}

static fa_leader_outcome from_verdict(fa_round_privacy_verdict v)
{
    return v == FA_PRIV_GO ? FA_LEADER_OK : v == FA_PRIV_STOP ? FA_LEADER_STOPPED : FA_LEADER_SKIP;
}

/* A saved attempt (a restarted worker): its update was charged before it
 * was saved; the statement again. */
static fa_leader_outcome step_statement(struct worker *w, const Fedagg__FederationInfo *info)
{
    Fedagg__PrivacyStatement st;
    fa_round_privacy_verdict v =
        fa_round_privacy_statement(w->priv, info->round, info->attempt, &st);
    return v == FA_PRIV_GO ? post_statement(w, &st) : from_verdict(v);
}

/* A round that the budget cannot pay for is neither downloaded nor trained. */
static fa_leader_outcome step_gate(struct worker *w, const Fedagg__FederationInfo *info)
{
    fa_round_privacy_verdict v = fa_round_privacy_gate(w->priv, info);
    write_metrics(w);
    return from_verdict(v);
}

/* Charged (once per update) and stated before the masked upload. */
static fa_leader_outcome step_charge(struct worker *w, const Fedagg__FederationInfo *info)
{
    Fedagg__PrivacyStatement st;
    fa_round_privacy_verdict v =
        fa_round_privacy_charge(w->priv, info, w->delta, w->d, &w->delta_version, &w->xpriv, &st);
    write_metrics(w);
    return v == FA_PRIV_GO ? post_statement(w, &st) : from_verdict(v);
}

/* Rank 0, before the masked upload of an attempt: the signed statement of
 * what its update was trained on.  Best effort: the round goes on without
 * it (its model card then shows none). */
static void send_data_statement(struct worker *w, const Fedagg__FederationInfo *info)
{
    fa_error e;
    int rc;

    fa_error_clear(&e);
    if (w->data_src_state == 0) {
        rc = fa_data_source_from_config(&w->data_src, w->cfg, &e);
        w->data_src_state = rc == 0 ? 1 : -1;
        if (rc != 0)
            log_warn("no data statements: the data manifest cannot be made", rc, &e);
    }
    if (w->data_src_state < 0)
        return;
    NETWORK_WAIT(fa_data_statement_post(w->rc, &w->data_src, info->round, info->attempt,
                                        w->delta_version, w->global_sha, w->n_examples, &e));
    if (rc != 0)
        log_warn("data statement not accepted; the round goes on without it", rc, &e);
}

/* Room in the state directory for an attempt's saved state (the update, 4
 * bytes a coordinate unless it is in the update buffer, and the sealed
 * client) before joining one: a worker that cannot save it before its
 * first masked byte must not start the attempt.  Without room it joins no
 * attempt (the core backs the check off, 1 s doubling to 60 s), says so
 * and exports it, and goes on by itself when room returns. */
static fa_leader_outcome step_room(struct worker *w, const Fedagg__FederationInfo *info)
{
    /* the model (about 4 bytes a coordinate), the update (unless it lies in
     * the update buffer, whose blocks are reserved) and room to spare */
    uint64_t need = (w->delta_mapped ? 4 : 8) * info->num_params + (16u << 20);
    struct statvfs vfs;
    uint64_t free_b;

    if (statvfs(w->cfg->state_dir, &vfs) != 0)
        return FA_LEADER_OK; /* cannot tell: the save itself will say */
    free_b = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    w->metrics.storage_free_bytes = (double)free_b;
    if (free_b >= need) {
        if (w->metrics.storage_blocked)
            fa_log(FA_LOG_INFO, "state directory has room again; joining attempts",
                   "dir=%s free_mib=%.1f", w->cfg->state_dir, (double)free_b / 1048576.0);
        w->metrics.storage_blocked = 0;
        return FA_LEADER_OK;
    }
    fa_log(FA_LOG_WARN, "state directory full: this region joins no attempt until it has room",
           "dir=%s free_mib=%.1f need_mib=%.1f", w->cfg->state_dir, (double)free_b / 1048576.0,
           (double)need / 1048576.0);
    w->metrics.storage_blocked = 1;
    write_metrics(w);
    return FA_LEADER_SKIP;
}

static fa_leader_outcome step_fetch(struct worker *w, const Fedagg__FederationInfo *info,
                                    fa_error *err)
{
    int rc = get_global(w, info, FETCH_MS, err);
    if (rc != 0 && w->load_fatal)
        /* the built-in trainer cannot train this model, or the federation
         * keeps serving a model it did not announce: never trained on */
        return FA_LEADER_FATAL;
    if (rc != 0) {
        log_err("cannot get the global model; retrying", rc, err);
        return FA_LEADER_AGAIN;
    }
    w->metrics.model_version = (double)w->have_version;
    return FA_LEADER_OK;
}

/* Under a region agent: one training at a time on the device; a round the
 * queue would make late is skipped. */
static fa_leader_outcome step_device(struct worker *w, const Fedagg__FederationInfo *info,
                                     fa_error *err)
{
    char why[FA_AGENT_REASON_MAX], q[FA_AGENT_REASON_MAX + 64];
    double t0 = fa_time_mono_s();
    int rc = fa_agent_link_acquire(w->link, info->phase_deadline_unix_ms, &stop_requested, why,
                                   sizeof(why), err);
    if (rc == 0) {
        w->holding_device = 1;
        fa_log(FA_LOG_INFO, "device granted by the region agent", "round=%" PRIu64 " waited_s=%.2f",
               info->round, fa_time_mono_s() - t0);
        return FA_LEADER_OK;
    }
    if (rc == FA_ERR_RANGE) {
        fa_log(FA_LOG_INFO, "this region skips the round: the device would make it late",
               "round=%" PRIu64 " attempt=%u reason=%s", info->round, info->attempt,
               fa_log_quote(q, sizeof(q), why));
        return FA_LEADER_SKIP;
    }
    return rc == FA_ERR_CANCELLED ? FA_LEADER_STOPPED : FA_LEADER_FATAL;
}

/* Every rank trains (the first time they also build the network from the
 * downloaded model's architecture); rank 0 quantises the update. */
static fa_leader_outcome step_train(struct worker *w, const Fedagg__FederationInfo *info,
                                    fa_error *err)
{
    int rc;

    w->topts.seed = w->base_seed + w->have_version; /* a new shuffle every round */
    rc = command(w, CMD_TRAIN, err);
    if (rc == 0 && !w->external && !w->net)
        rc = build_network(w, err);
    if (rc != 0)
        return FA_LEADER_FATAL;
    if (!w->external && w->evaluated_version != w->have_version)
        evaluate_builtin(w, w->have_version);
    rc = train(w, info->round, info->attempt, err);
    if (w->holding_device) {
        fa_error e2;
        w->holding_device = 0;
        fa_agent_link_release(w->link, rc == 0, &e2);
    }
    if (rc == FA_ERR_CANCELLED) {
        /* a signal: the local round is saved (or says why not) */
        char q[600];
        fa_log(FA_LOG_INFO, "local round stopped by signal",
               "round=%" PRIu64 " version=%" PRIu64 " detail=%s", info->round, w->have_version,
               fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
        return FA_LEADER_STOPPED;
    }
    /* the evaluation of the global model (made before training) is
     * reported now, while its version is current: not during the
     * collective, where the other ranks wait */
    post_pending(w);
    if (rc == 0) {
        w->metrics.local_loss = w->local_loss;
        w->delta_version = w->have_version;
        if ((rc = quantise(w, info, err)) != 0)
            w->delta_version = UINT64_MAX;
    }
    if (rc == FA_ERR_MPI || rc == FA_ERR_NCCL)
        return FA_LEADER_FATAL;
    if (rc == FA_ERR_CANCELLED)
        return FA_LEADER_STOPPED;
    if (rc != 0) {
        /* a failed round (external trainer error, diverged delta) */
        log_err("local round failed; this region skips the round", rc, err);
        w->metrics.round_failures_total++;
        write_metrics(w);
        return FA_LEADER_SKIP;
    }
    return FA_LEADER_OK;
}

/* The attempt's outcome (the update's, or a saved attempt's). */
static fa_leader_outcome ran(struct worker *w, int rc, const fa_round_outcome *out,
                             const Fedagg__FederationInfo *info, fa_error *err)
{
    w->metrics.bytes_up_total += out->bytes_up;
    w->metrics.bytes_down_total += out->bytes_down;
    if (rc == 0) {
        w->metrics.rounds_total++;
        write_metrics(w);
        fa_log(FA_LOG_INFO, "round done",
               "round=%" PRIu64 " attempt=%u new_version=%" PRIu64 " survivors=%u "
               "proof=%s bytes_up=%" PRIu64 " bytes_down=%" PRIu64
               " advertise_s=%.2f shares_s=%.2f masked_s=%.2f consistency_s=%.2f "
               "unmask_s=%.2f",
               out->round, out->attempt, out->new_version, out->survivors,
               out->proof_verified ? "verified" : "unverified", out->bytes_up, out->bytes_down,
               out->phase_seconds[0], out->phase_seconds[1], out->phase_seconds[2],
               out->phase_seconds[3], out->phase_seconds[4]);
        return FA_LEADER_OK;
    }
    if (rc == FA_ERR_REPLAY) {
        char q[600];
        write_metrics(w);
        fa_log(FA_LOG_INFO, "the federation moved on; resynchronising",
               "round=%" PRIu64 " attempt=%u reason=%s", info->round, info->attempt,
               fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
        if (out->model_stale) /* trained from another model: get it again */
            w->have_version = w->delta_version = UINT64_MAX;
        return FA_LEADER_REPLAY;
    }
    if (rc == FA_ERR_TLS || rc == FA_ERR_AUTH || stop_on_alarm(w, err) != 0)
        return FA_LEADER_FATAL;
    w->metrics.round_failures_total++;
    write_metrics(w);
    log_err("round attempt failed; retrying", rc, err);
    return FA_LEADER_FAILED;
}

static fa_leader_outcome step_upload(struct worker *w, const Fedagg__FederationInfo *info,
                                     int saved, fa_error *err)
{
    uint64_t cap = info->quant->max_examples ? info->quant->max_examples : 1;
    double weight = (double)(w->n_examples < cap ? w->n_examples : cap) / (double)cap;
    fa_round_outcome out;
    int rc;

    memset(&out, 0, sizeof(out));
    if (saved) {
        NETWORK_WAIT(fa_round_client_run(w->rc, info, NULL, 0, 0.0, &out, err));
    } else {
        send_data_statement(w, info);
        NETWORK_WAIT(fa_round_client_run(w->rc, info, w->delta, w->d, weight, &out, err));
    }
    return ran(w, rc, &out, info, err);
}

/* Where the federation is, checked to be the one this worker joins. */
static int get_info(struct worker *w, Fedagg__FederationInfo **info, fa_error *err)
{
    int rc;

    NETWORK_WAIT(fa_round_client_info(w->rc, 10u * 60u * 1000u, info, err));
    if (rc == 0 && w->cfg->federation_id && strcmp((*info)->federation_id, w->cfg->federation_id))
        rc = fa_errorf(err, FA_ERR_INVAL,
                       "the aggregator serves federation '%s', this worker is configured for "
                       "'%s'",
                       (*info)->federation_id, w->cfg->federation_id);
    return rc;
}

static fa_leader_view leader_view(const struct worker *w, const Fedagg__FederationInfo *info)
{
    fa_leader_view v;

    memset(&v, 0, sizeof(v));
    v.round = info->round;
    v.attempt = info->attempt;
    v.model_version = info->model_version;
    v.advertising = info->phase == FEDAGG__PHASE__PHASE_ADVERTISE;
    v.finished = info->finished;
    v.has_saved = fa_round_client_has_saved(w->rc, info->round, info->attempt);
    v.dp = w->priv != NULL;
    v.device = w->link != NULL;
    v.have_version = w->have_version;
    v.delta_version = w->delta_version;
    return v;
}

/* Rank 0: follows the federation until it finishes (or the configured
 * number of rounds is done, or the budget stops it), one step at a time
 * as worker/leader_core.h orders them. */
static int leader_loop(struct worker *w, fa_error *err)
{
    Fedagg__FederationInfo *info = NULL;
    fa_leader_core lc;
    int rc = 0, end = 0;

    write_metrics(w);
    if (w->priv && fa_round_privacy_stop_at_start(w->priv)) {
        write_metrics(w);
        return 0;
    }
    fa_leader_core_init(&lc, w->cfg->rounds);
    while (!stop_requested && !end) {
        uint32_t wait_ms;
        fa_leader_step step = fa_leader_core_next(&lc, &wait_ms);
        fa_leader_outcome o = FA_LEADER_OK;
        fa_leader_view v;

        switch (step) {
        case FA_LEADER_REFRESH:
            fa_time_sleep_ms(wait_ms, &stop_requested);
            if (info)
                fedagg__federation_info__free_unpacked(info, NULL);
            info = NULL;
            if ((rc = get_info(w, &info, err)) != 0) {
                end = 1;
                break;
            }
            v = leader_view(w, info);
            fa_leader_core_info(&lc, fa_time_mono_ns() / 1000000u, &v);
            continue;
        case FA_LEADER_FINISH:
            fa_log(FA_LOG_INFO, "the federation has finished", "version=%" PRIu64,
                   info->model_version);
            final_evaluation(w, info);
            write_metrics(w);
            rc = stop_on_alarm(w, err);
            end = 1;
            break;
        case FA_LEADER_STOP:
            if (w->cfg->rounds && fa_leader_core_rounds(&lc) >= w->cfg->rounds)
                fa_log(FA_LOG_INFO, "configured number of rounds done", "rounds=%" PRIu64,
                       fa_leader_core_rounds(&lc));
            rc = stop_on_alarm(w, err);
            end = 1;
            break;
        case FA_LEADER_FAIL:
            end = 1; /* rc is the failed step's */
            break;
        case FA_LEADER_STATEMENT: o = step_statement(w, info); break;
        case FA_LEADER_RESUME:
        case FA_LEADER_UPLOAD: o = step_upload(w, info, step == FA_LEADER_RESUME, err); break;
        case FA_LEADER_GATE: o = step_gate(w, info); break;
        case FA_LEADER_ROOM: o = step_room(w, info); break;
        case FA_LEADER_FETCH: o = step_fetch(w, info, err); break;
        case FA_LEADER_DEVICE: o = step_device(w, info, err); break;
        case FA_LEADER_TRAIN: o = step_train(w, info, err); break;
        case FA_LEADER_CHARGE: o = step_charge(w, info); break;
        }
        if (end)
            break;
        if (o == FA_LEADER_FATAL)
            rc = err->code ? err->code : FA_ERR_STATE;
        v = leader_view(w, info);
        fa_leader_core_done(&lc, fa_time_mono_ns() / 1000000u, o, &v);
    }
    if (info)
        fedagg__federation_info__free_unpacked(info, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *level = NULL;
    Fedagg__WorkerConfig *cfg = NULL;
    struct worker w;
    fa_error err;
    char ctx[256];
    int rc = 0, lvl;

    memset(&w, 0, sizeof(w));
    w.have_version = w.delta_version = UINT64_MAX;
    rc = fa_daemon_args(argc, argv, "fedagg-worker", usage, &config, &level);
    if (rc >= 0)
        return rc;
    fa_mlp_blas_reexec(argv);
    fa_error_clear(&err);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    signal(SIGALRM, on_grace_over);

    if (fa_config_load_report(FA_CONFIG_WORKER, config, "fedagg-worker",
                              (ProtobufCMessage **)&cfg) != 0)
        return 1;
    w.cfg = cfg;
    lvl = fa_log_level_parse(level ? level : cfg->log_level);
    fa_log_set_level(lvl >= 0 ? lvl : FA_LOG_INFO);
    if (cfg->n_services) {
        /* the region agent: it runs each federation in a worker of its own */
        snprintf(ctx, sizeof(ctx), "proc=agent region=%s", cfg->region_id);
        fa_log_set_context(ctx);
        if ((rc = fa_agent_run(cfg, &stop_requested, &err)) != 0)
            log_err("region agent stopped", rc, &err);
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
        return rc == 0 ? 0 : 1;
    }
    if ((rc = fa_secagg_mask_prg_from_env(&err)) != 0) {
        fprintf(stderr, "fedagg-worker: %s\n", fa_error_msg(&err, rc));
        goto out;
    }

    /* The communicator comes first: the NCCL backend picks each rank's GPU. */
    rc = fa_comm_new(&w.comm, (int)cfg->device, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg-worker: %s\n", fa_error_msg(&err, rc));
        goto out;
    }
    w.rank = fa_comm_rank(w.comm);
    w.world = fa_comm_size(w.comm);
    if (cfg->agent->socket && *cfg->agent->socket)
        snprintf(ctx, sizeof(ctx), "proc=worker region=%s federation=%.128s rank=%d",
                 cfg->region_id, cfg->federation_id, w.rank);
    else
        snprintf(ctx, sizeof(ctx), "proc=worker region=%s rank=%d", cfg->region_id, w.rank);
    fa_log_set_context(ctx);
    if (rc == 0)
        rc = fa_file_mkdirs(cfg->state_dir, 0700, &err);
    if (rc == 0 && w.rank == 0 && cfg->agent->socket && *cfg->agent->socket)
        rc = agent_link_setup(&w, &err);
    w.external = cfg->trainer && cfg->trainer->kind_case == FEDAGG__TRAINER__KIND_EXTERNAL;
    w.local_keep = cfg->local_tensors == FEDAGG__LOCAL_TENSORS__LOCAL_KEEP;
    snprintf(w.model_path, sizeof(w.model_path), "%s/global.safetensors", cfg->state_dir);
    snprintf(w.local_path, sizeof(w.local_path), "%s/" FA_LOCAL_TENSORS_FILE, cfg->state_dir);
    fa_worker_metrics_init(&w.metrics);
    w.evaluated_version = UINT64_MAX;
    if (w.external) {
        /* an external trainer reads its own data: data.* is not needed */
        if (rc == 0 && w.world > 1)
            rc = fa_errorf(&err, FA_ERR_INVAL,
                           "an external trainer runs in one process: start the worker without "
                           "mpirun (or with -np 1); the trainer's command may be torchrun");
        if (rc == 0)
            rc = fa_external_opts_from_proto(&w.xopts, cfg->trainer->external, cfg->state_dir,
                                             w.local_keep, &err);
        w.xopts.region = cfg->region_id;
        w.xopts.cancel = &stop_requested;
        w.xopts.preempt_grace_ms = cfg->preempt_grace_s * 1000u;
        if (rc == 0)
            rc = fa_external_trainer_new(&w.xt, &w.xopts, &err);
    } else {
        if (rc == 0 && (!cfg->data || !cfg->data->train_images || !cfg->data->train_images[0]))
            rc = fa_errorf(&err, FA_ERR_INVAL,
                           "the built-in trainer needs the region's data: set data.train_images "
                           "and data.train_labels");
        if (rc == 0)
            rc = fa_data_load(&w.shard, cfg->data->train_images, cfg->data->train_labels, &err);
        if (rc == 0 && w.rank == 0 && cfg->data->test_images && cfg->data->test_images[0]) {
            rc = fa_data_load(&w.test, cfg->data->test_images, cfg->data->test_labels, &err);
            w.have_test = rc == 0;
        }
        if (rc == 0)
            rc = fa_local_round_train_opts_from_proto(
                &w.topts, cfg->trainer ? cfg->trainer->builtin : NULL, &err);
        w.base_seed = w.topts.seed;
        /* What a saved local round is bound to, besides the model: the data
         * this worker trains on (hashed once: it does not change). */
        if (rc == 0 && fa_local_ckpt_digest_shard(&w.shard.ds, w.shard_digest) != 0)
            rc = fa_errorf(&err, FA_ERR_CRYPTO, "cannot hash the region's data");
        if (rc == 0 &&
            !(cfg->local_checkpoint_minutes >= 0.0 && cfg->local_checkpoint_minutes <= 1e6))
            rc = fa_errorf(&err, FA_ERR_INVAL,
                           "local_checkpoint_minutes must be a number of minutes >= 0 (0: save "
                           "only on SIGTERM), not %g",
                           cfg->local_checkpoint_minutes);
        snprintf(w.ckpt_path, sizeof(w.ckpt_path), "%s/local-round.%d", cfg->state_dir, w.rank);
        grace_s = (sig_atomic_t)cfg->preempt_grace_s;
    }
    w.dp = cfg->privacy && cfg->privacy->target_epsilon > 0;
    w.ddg_budget = w.dp && cfg->privacy->mechanism &&
                   !strcmp(cfg->privacy->mechanism, FA_PRIVACY_MECHANISM_DDG);
    if (rc == 0 && w.dp)
        rc = privacy_setup(&w, &err);
    if (rc == 0 && (cfg->preempt_grace_s < 1 || cfg->preempt_grace_s > 3600))
        rc = fa_errorf(&err, FA_ERR_INVAL,
                       "preempt_grace_s must be 1..3600 seconds (the time a SIGTERM leaves to "
                       "save the local round), not %u",
                       cfg->preempt_grace_s);
    snprintf(grace_msg, sizeof(grace_msg),
             "level=error msg=\"the worker did not stop within preempt_grace_s=%u after the "
             "signal; stopping now (what was saved stays: a restart resumes the last saved local "
             "round, or trains it afresh)\" proc=worker region=%.64s rank=%d\n",
             cfg->preempt_grace_s, cfg->region_id ? cfg->region_id : "", w.rank);
    grace_msg_len = strlen(grace_msg);
    w.test_sigterm_step = UINT64_MAX;
#ifdef FA_TEST_HOOKS
    {
        const char *k = getenv("FEDAGG_TEST_SIGTERM_AT_STEP");
        char *end = NULL;
        if (k && *k) {
            unsigned long long v = strtoull(k, &end, 10);
            if (end && !*end)
                w.test_sigterm_step = v;
        }
    }
#endif
    if (rc != 0) {
        log_err("cannot start", rc, &err);
        goto out;
    }
    fa_log(FA_LOG_INFO, "worker started",
           "ranks=%d backend=%s examples=%u aggregator=%s trainer=%s mask_prg=%s", w.world,
           fa_comm_backend_name(w.comm), w.shard.ds.n, cfg->aggregator,
           w.external ? (w.xopts.long_lived ? "external-long-lived" : "external") : "builtin",
           fa_secagg_mask_prg());

    if (w.rank == 0) {
        rc = fa_round_client_new(&w.rc, cfg, &err);
        if (rc == 0)
            rc = leader_loop(&w, &err);
        if (rc != 0)
            log_err("worker stopped", rc, &err);
        {
            fa_error e2;
            command(&w, CMD_STOP, &e2);
        }
    } else {
        rc = follower_loop(&w, &err);
        if (rc != 0)
            log_err("worker rank stopped", rc, &err);
    }
    if (stop_requested)
        fa_log(FA_LOG_INFO, "stopped by signal", "signal=%d", (int)stop_requested);
out:
    trainer_pgid = 0;
    fa_external_trainer_del(w.xt); /* a long-lived trainer is shut down */
    fa_round_client_del(w.rc);
    fa_round_privacy_del(w.priv);
    fa_agent_link_del(w.link);
    fa_local_round_del(w.lr);
    fa_mlp_del(w.net);
    fa_data_free(&w.shard);
    fa_data_free(&w.test);
    fa_st_del(w.global_st);
    fa_tensors_del(w.table);
    free(w.global_fed);
    if (!w.delta_mapped)
        free(w.delta);
    free(w.params);
    free(w.pdelta);
    fa_comm_del(w.comm);
    fa_comm_finalize();
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return rc == 0 ? 0 : 1;
}
