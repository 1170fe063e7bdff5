/* fedagg-worker: a region's worker.
 *
 *   fedagg-worker --config worker.textproto                 (one process)
 *   mpirun -np G fedagg-worker --config worker.textproto    (G local ranks)
 *
 * Rank 0 leads: it follows the federation over HTTP/3, downloads each new
 * global model, has every rank train one local round on the region's shard
 * (data-parallel, gradients all-reduced through the configured compressor),
 * and takes part in the secure-aggregation round with the resulting delta.
 * The other ranks only train.  The region's data never leaves this process.
 *
 * Progress goes to stderr as one logfmt line per event.  The worker exits 0
 * when the federation has finished (or after `rounds` rounds), 1 on a fatal
 * error (bad config, refused certificate, mismatched model).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/fa_daemon.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "model/mlp.h"
#include "model/train.h"
#include "proto/config_check.h"
#include "worker/comm.h"
#include "worker/compress.h"
#include "worker/data.h"
#include "worker/external_trainer.h"
#include "worker/local_round.h"
#include "worker/round_client.h"

enum { CMD_STOP = 0, CMD_TRAIN = 1 };

static volatile sig_atomic_t stop_requested;
/* Set while rank 0 blocks on the network (a long-poll can last minutes). */
static volatile sig_atomic_t in_network_wait;

/* SIGTERM/SIGINT: stop at the next step; or, in a network wait, at once.
 * Exiting there is safe: an attempt's state is saved (atomically) before
 * its first masked byte, so a restarted worker resumes it. */
static void on_signal(int sig)
{
    static const char msg[] =
        "level=info msg=\"stopped by signal during a network wait; the attempt's state is on "
        "disk\" proc=worker\n";
    stop_requested = sig;
    if (in_network_wait) {
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(0);
    }
}

#define NETWORK_WAIT(expr)                                                                         \
    do {                                                                                           \
        in_network_wait = 1;                                                                       \
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

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop_requested)
        ;
}

struct worker {
    const Fedagg__WorkerConfig *cfg;
    fa_comm *comm;
    int rank, world;
    fa_data shard, test;
    int have_test;
    fa_mlp *net;
    fa_mlp_layout layout;
    fa_local_round *lr;
    fa_train_opts topts;
    uint64_t base_seed; /* the config's seed; each round shuffles with base_seed + version */
    int external;
    fa_external_opts xopts;
    fa_round_client *rc;
    float *global, *delta;
    uint64_t have_version;  /* version of `global`; UINT64_MAX: none */
    uint64_t delta_version; /* version `delta` was trained from; UINT64_MAX: none */
    uint64_t n_examples;
    double local_loss;
};

static int log_err(const char *msg, int rc, const fa_error *err)
{
    char q[600];
    fa_log(FA_LOG_ERROR, msg, "error=%s", fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
    return rc;
}

/* Rank 0: loads the downloaded model; the first one fixes the architecture,
 * which is broadcast so every rank can build the same network. */
static int load_global(struct worker *w, const char *path, fa_error *err)
{
    fa_safetensors *st = NULL;
    fa_mlp_config mc;
    int rc = fa_st_open(&st, path, err);
    if (rc != 0)
        return rc;
    rc = fa_mlp_config_from_st(st, &mc, err);
    if (rc == 0 && w->net && memcmp(&mc, &fa_mlp_layout_of(w->net)->config, sizeof(mc)) != 0)
        rc = fa_errorf(err, FA_ERR_INVAL, "the global model's architecture changed");
    if (rc == 0 && !w->global) {
        rc = fa_mlp_layout_init(&w->layout, &mc, err);
        if (rc == 0) {
            w->global = malloc(w->layout.n_params * sizeof(float));
            w->delta = malloc(w->layout.n_params * sizeof(float));
            if (!w->global || !w->delta)
                rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        }
    }
    if (rc == 0)
        rc = fa_mlp_load_st(st, &w->layout, w->global, err);
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

/* Collective: one local round; rank 0 gets the delta. */
static int train(struct worker *w, fa_error *err)
{
    fa_local_round_result res;
    int rc;

    if (w->external) {
        fa_external_result xr;
        rc = fa_external_round(&w->xopts, &w->layout, w->global, w->delta, &xr, err);
        if (rc == 0) {
            w->n_examples = xr.num_examples;
            w->local_loss = NAN;
            fa_log(FA_LOG_INFO, "external trainer finished", "examples=%" PRIu64 " seconds=%.2f",
                   xr.num_examples, xr.seconds);
        }
        return rc;
    }
    rc = fa_local_round_run(w->lr, w->rank == 0 ? w->global : NULL, &w->shard.ds, &w->topts,
                            w->rank == 0 ? w->delta : NULL, &res, err);
    if (rc != 0)
        return rc;
    w->n_examples = res.num_examples;
    w->local_loss = res.mean_loss;
    if (w->rank == 0)
        fa_log(FA_LOG_INFO, "local round trained",
               "ranks=%d steps=%" PRIu64 " examples=%" PRIu64 " loss=%.4f allreduce_bytes=%" PRIu64
               " seconds=%.2f",
               w->world, res.steps, res.num_examples, res.mean_loss, res.wire_bytes, res.seconds);
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
        rc = train(w, err);
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

static void evaluate_local(struct worker *w, uint64_t version)
{
    fa_mlp_eval ev;
    fa_error err;
    if (!w->have_test || !w->net)
        return;
    fa_error_clear(&err);
    if (fa_mlp_set_params(w->net, w->global, &err) == 0 &&
        fa_mlp_evaluate(w->net, &w->test.ds, &ev, &err) == 0)
        fa_log(FA_LOG_INFO, "global model evaluated on the local test set",
               "version=%" PRIu64 " accuracy=%.4f loss=%.4f", version, ev.accuracy, ev.mean_loss);
}

/* Rank 0: follows the federation until it finishes. */
static int leader_loop(struct worker *w, fa_error *err)
{
    char model_path[4096];
    uint64_t rounds_done = 0, last_round = UINT64_MAX;
    uint32_t last_attempt = UINT32_MAX;
    unsigned failures = 0;
    int rc;

    snprintf(model_path, sizeof(model_path), "%s/global.safetensors", w->cfg->state_dir);
    while (!stop_requested) {
        Fedagg__FederationInfo *info = NULL;
        fa_round_outcome out;
        double weight;
        uint8_t sha[32];

        NETWORK_WAIT(fa_round_client_info(w->rc, 10u * 60u * 1000u, &info, err));
        if (rc != 0)
            return rc;
        if (info->finished) {
            fa_log(FA_LOG_INFO, "the federation has finished", "version=%" PRIu64,
                   info->model_version);
            fedagg__federation_info__free_unpacked(info, NULL);
            return 0;
        }
        if (w->cfg->federation_id && strcmp(info->federation_id, w->cfg->federation_id) != 0) {
            rc = fa_errorf(err, FA_ERR_INVAL,
                           "the aggregator serves federation '%s', this worker is configured "
                           "for '%s'",
                           info->federation_id, w->cfg->federation_id);
            fedagg__federation_info__free_unpacked(info, NULL);
            return rc;
        }
        /* A resumable attempt (this worker restarted mid-round). */
        if (fa_round_client_has_saved(w->rc, info->round, info->attempt)) {
            NETWORK_WAIT(fa_round_client_run(w->rc, info, NULL, 0, 0.0, &out, err));
            goto ran;
        }
        if (info->phase != FEDAGG__PHASE__PHASE_ADVERTISE ||
            (info->round == last_round && info->attempt == last_attempt)) {
            /* Mid-round, or this attempt is done for us: wait for the next. */
            fedagg__federation_info__free_unpacked(info, NULL);
            sleep_ms(500);
            continue;
        }
        if (info->model_version != w->have_version) {
            uint64_t v;
            NETWORK_WAIT(fa_round_client_fetch_model(w->rc, model_path, &v, sha, err));
            if (rc == 0)
                rc = load_global(w, model_path, err);
            if (rc != 0) {
                fedagg__federation_info__free_unpacked(info, NULL);
                log_err("cannot get the global model; retrying", rc, err);
                sleep_ms(2000);
                continue;
            }
            w->have_version = v;
        }
        if (w->delta_version != w->have_version) {
            /* Every rank trains: the first time they also build the network
             * from the architecture of the downloaded model. */
            /* A new shuffle every round, the same on every rank. */
            w->topts.seed = w->base_seed + w->have_version;
            rc = command(w, CMD_TRAIN, err);
            if (rc == 0 && !w->net)
                rc = build_network(w, err);
            if (rc != 0) {
                fedagg__federation_info__free_unpacked(info, NULL);
                return rc;
            }
            evaluate_local(w, w->have_version);
            rc = train(w, err);
            if (rc != 0) {
                fedagg__federation_info__free_unpacked(info, NULL);
                if (rc == FA_ERR_MPI || rc == FA_ERR_NCCL)
                    return rc;
                /* A failed round (external trainer error, diverged delta):
                 * skip it for this region rather than send garbage. */
                log_err("local round failed; this region skips the round", rc, err);
                last_round = info->round;
                last_attempt = info->attempt;
                continue;
            }
            w->delta_version = w->have_version;
        }
        if (info->model_version != w->delta_version) {
            fedagg__federation_info__free_unpacked(info, NULL);
            continue; /* the model moved while we trained */
        }
        weight = (double)(w->n_examples < info->quant->max_examples ? w->n_examples
                                                                    : info->quant->max_examples) /
                 (double)(info->quant->max_examples ? info->quant->max_examples : 1);
        NETWORK_WAIT(
            fa_round_client_run(w->rc, info, w->delta, w->layout.n_params, weight, &out, err));
    ran:
        last_round = info->round;
        last_attempt = info->attempt;
        if (rc == 0) {
            rounds_done++;
            failures = 0;
            fa_log(FA_LOG_INFO, "round done",
                   "round=%" PRIu64 " attempt=%u new_version=%" PRIu64 " survivors=%u "
                   "proof=%s bytes_up=%" PRIu64 " bytes_down=%" PRIu64
                   " advertise_s=%.2f shares_s=%.2f masked_s=%.2f consistency_s=%.2f "
                   "unmask_s=%.2f",
                   out.round, out.attempt, out.new_version, out.survivors,
                   out.proof_verified ? "verified" : "unverified", out.bytes_up, out.bytes_down,
                   out.phase_seconds[0], out.phase_seconds[1], out.phase_seconds[2],
                   out.phase_seconds[3], out.phase_seconds[4]);
            if (w->cfg->rounds && rounds_done >= w->cfg->rounds) {
                fedagg__federation_info__free_unpacked(info, NULL);
                fa_log(FA_LOG_INFO, "configured number of rounds done", "rounds=%" PRIu64,
                       rounds_done);
                return 0;
            }
        } else if (rc == FA_ERR_REPLAY) {
            char q[600];
            fa_log(FA_LOG_INFO, "the federation moved on; resynchronising",
                   "round=%" PRIu64 " attempt=%u reason=%s", info->round, info->attempt,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, rc)));
            /* A new attempt of the same round may take this region again.
             * Not at once: whatever refused us may still hold (never spin). */
            last_attempt = UINT32_MAX;
            sleep_ms(250);
        } else if (rc == FA_ERR_TLS || rc == FA_ERR_AUTH) {
            fedagg__federation_info__free_unpacked(info, NULL);
            return rc;
        } else {
            log_err("round attempt failed; retrying", rc, err);
            sleep_ms(1000u << (failures < 4 ? failures : 4));
            failures++;
        }
        fedagg__federation_info__free_unpacked(info, NULL);
    }
    return 0;
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

    if (fa_config_load_report(FA_CONFIG_WORKER, config, "fedagg-worker",
                              (ProtobufCMessage **)&cfg) != 0)
        return 1;
    w.cfg = cfg;
    lvl = fa_log_level_parse(level ? level : cfg->log_level);
    fa_log_set_level(lvl >= 0 ? lvl : FA_LOG_INFO);

    /* The communicator comes first: the NCCL backend picks each rank's GPU. */
    rc = fa_comm_new(&w.comm, (int)cfg->device, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg-worker: %s\n", fa_error_msg(&err, rc));
        goto out;
    }
    w.rank = fa_comm_rank(w.comm);
    w.world = fa_comm_size(w.comm);
    snprintf(ctx, sizeof(ctx), "proc=worker region=%s rank=%d", cfg->region_id, w.rank);
    fa_log_set_context(ctx);
    if (rc == 0)
        rc = fa_file_mkdirs(cfg->state_dir, 0700, &err);
    if (rc == 0)
        rc = fa_data_load(&w.shard, cfg->data->train_images, cfg->data->train_labels, &err);
    if (rc == 0 && w.rank == 0 && cfg->data->test_images && cfg->data->test_images[0]) {
        rc = fa_data_load(&w.test, cfg->data->test_images, cfg->data->test_labels, &err);
        w.have_test = rc == 0;
    }
    if (rc == 0 && cfg->trainer && cfg->trainer->kind_case == FEDAGG__TRAINER__KIND_EXTERNAL) {
        w.external = 1;
        if (w.world > 1)
            rc = fa_errorf(&err, FA_ERR_INVAL,
                           "an external trainer runs in one process: start the worker without "
                           "mpirun (or with -np 1)");
        else
            rc =
                fa_external_opts_from_proto(&w.xopts, cfg->trainer->external, cfg->state_dir, &err);
        w.xopts.region = cfg->region_id;
    } else if (rc == 0) {
        rc = fa_local_round_train_opts_from_proto(
            &w.topts, cfg->trainer ? cfg->trainer->builtin : NULL, &err);
        w.base_seed = w.topts.seed;
    }
    if (rc != 0) {
        log_err("cannot start", rc, &err);
        goto out;
    }
    fa_log(FA_LOG_INFO, "worker started",
           "ranks=%d backend=%s examples=%u aggregator=%s trainer=%s", w.world,
           fa_comm_backend_name(w.comm), w.shard.ds.n, cfg->aggregator,
           w.external ? "external" : "builtin");

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
    fa_round_client_del(w.rc);
    fa_local_round_del(w.lr);
    fa_mlp_del(w.net);
    fa_data_free(&w.shard);
    fa_data_free(&w.test);
    free(w.global);
    free(w.delta);
    fa_comm_del(w.comm);
    fa_comm_finalize();
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return rc == 0 ? 0 : 1;
}
