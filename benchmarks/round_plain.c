/* round_plain.c - the plaintext anchor of `fedagg-bench round`: federated
 * averaging of the same quantised, bit-packed updates over the same HTTP/3
 * transport, without secure aggregation.  See round_bench.h.
 *
 * It mirrors what the real stack does per round minus the masking protocol:
 * the client runs the same codec as fa_secagg_client_set_input_f32 /
 * masked stream (finite check, L2 clip, stochastic rounding from AES-128-CTR,
 * the weight coordinate, k-bit packing in 4096-coordinate blocks), and the
 * server sums the stream group by group as fa_secagg_server_masked_chunk
 * does, and then does what aggregator/federation.c's finish_round does,
 * through the same code: the global model's streaming step and commit
 * (fa_global_model_step: the mean decoded chunk by chunk as
 * fa_secagg_server_result_f32_range decodes it, the optimizer stepping from
 * the current version's weights and state files, the new version written to
 * a model store as it is computed).  What it leaves out is exactly the
 * secure-aggregation work: key
 * agreement, Shamir shares, masks and unmasking, upload journals and
 * SHA-256 commitments, the round-state saves, the signed audit record.
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/global_model.h"
#include "aggregator/model_store.h"
#include "aggregator/server_opt.h"
#include "benchmarks/round_bench.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "crypto/mask_prg_internal.h"
#include "crypto/codec_internal.h"
#include "crypto/ring_internal.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"
#include "proto/config_check.h"
#include "transport/h3.h"

#define UPLOAD_PREFIX "/plain/upload/"

/* ---- server ------------------------------------------------------------------ */

struct plain_srv;

struct plain_up {
    struct plain_srv *s;
    fa_h3_request *req;
    char region[64];
    uint64_t bytes, coords; /* received; summed */
    uint8_t carry[32];      /* a group begun by an earlier chunk (k <= 32 bytes) */
    size_t carry_len;
    int refused, held;
    struct plain_up *next;
};

struct plain_srv {
    fa_h3_server *srv;
    const char *federation_id;
    size_t n_regions;
    uint64_t d; /* federated coordinates */
    uint64_t n; /* ring coordinates: d + 1 (the weight) */
    unsigned k; /* ring bits */
    uint64_t masked_bytes;
    fa_secagg_quant quant;
    uint32_t *sum; /* (n) */
    double inv;    /* the decode's factor: 1 / (scale x the weight sum) */
    fa_global_model *model;
    fa_server_opt *opt;
    uint64_t opt_steps;
    fa_model_store *store;
    uint64_t version, round;
    struct plain_up *held;
    size_t n_held;
    double first_byte;
};

static void respond_text(fa_h3_request *req, int status, const char *text)
{
    fa_h3_header h[] = {{"content-type", "text/plain"}};
    fa_h3_respond(req, status, h, 1, text, strlen(text));
}

static int on_hello(fa_h3_request *req, void *arg)
{
    (void)arg;
    respond_text(req, 200, "ok\n");
    return 0;
}

/* As fa_secagg_server_decode_in_place: the mean decoded once, into the
 * sum's memory (the same arithmetic, in blocks that vectorise). */
static void decode_in_place(struct plain_srv *s)
{
    enum { CHUNK = 4096, B = 16 };
    const unsigned sh = 32 - s->k;
    float buf[CHUNK];

    for (uint64_t i = 0; i < s->d; i += CHUNK) {
        size_t m = s->d - i < CHUNK ? (size_t)(s->d - i) : CHUNK, j = 0;
        const uint32_t *restrict w = s->sum + i;
        for (; j + B <= m; j += B)
            for (size_t t = j; t < j + B; t++)
                buf[t] = (float)((double)((int32_t)(w[t] << sh) >> sh) * s->inv);
        for (; j < m; j++)
            buf[j] = (float)((double)fa_ring_signed(w[j], s->k) * s->inv);
        memcpy(s->sum + i, buf, m * sizeof(float));
    }
}

/* The mean, coordinates [off, off + n), as fa_secagg_server_result_f32_range
 * reads it after the decode. */
static int plain_delta(void *ctx, uint64_t off, float *out, size_t n, fa_error *err)
{
    const struct plain_srv *s = ctx;
    (void)err;
    memcpy(out, s->sum + off, n * sizeof(float));
    return 0;
}

/* As aggregator/federation.c commit_version: the streaming step and commit,
 * with the same metadata. */
static int commit(struct plain_srv *s, uint64_t version, fa_error *err)
{
    char round_s[32], version_s[32], steps_s[32], optdesc[256];

    snprintf(round_s, sizeof(round_s), "%" PRIu64, s->round);
    snprintf(version_s, sizeof(version_s), "%" PRIu64, version);
    snprintf(steps_s, sizeof(steps_s), "%" PRIu64, s->opt_steps + 1);
    fa_server_opt_describe(s->opt, optdesc, sizeof(optdesc));
    const char *meta[] = {"format",       "pt",    "fedagg.version",    version_s,
                          "fedagg.round", round_s, "fedagg.federation", s->federation_id};
    const char *smeta[] = {"fedagg.optimizer", optdesc,  "fedagg.steps", steps_s,
                           "fedagg.version",   version_s};
    return fa_global_model_step(s->model, s->store, version, s->round, s->opt, plain_delta, s, meta,
                                sizeof(meta) / sizeof(meta[0]) / 2, smeta,
                                sizeof(smeta) / sizeof(smeta[0]) / 2, err);
}

/* Every region is in: decode, step, commit (one streaming pass), answer. */
static void finish(struct plain_srv *s)
{
    const double qmax = (double)((1u << (s->quant.bits - 1)) - 1);
    const double scale = qmax / s->quant.clip_value;
    double t0 = fa_time_mono_s(), t1, wsum;
    char body[128];
    fa_error err;
    int status = 200, rc = 0;

    fa_error_clear(&err);
    wsum = (double)fa_ring_signed(s->sum[s->d], s->k) / qmax;
    if (!(wsum > 0)) {
        rc = fa_errorf(&err, FA_ERR_RANGE, "weights sum to %g", wsum);
        goto answer;
    }
    s->inv = 1.0 / (scale * wsum);
    decode_in_place(s);
    rc = commit(s, s->version + 1, &err);
    if (rc != 0)
        goto answer;
    s->version++;
    s->opt_steps++;
    t1 = fa_time_mono_s();
    fa_log(FA_LOG_INFO, "plain round committed",
           "round=%" PRIu64 " version=%" PRIu64 " regions=%zu weight_sum=%.4f upload_s=%.3f "
           "step_commit_s=%.3f",
           s->round, s->version, s->n_held, wsum, t0 - s->first_byte, t1 - t0);
answer:
    if (rc != 0) {
        status = 500;
        fa_log(FA_LOG_ERROR, "plain round failed", "round=%" PRIu64 " error=\"%s\"", s->round,
               fa_error_msg(&err, rc));
    }
    snprintf(body, sizeof(body), "round=%" PRIu64 " version=%" PRIu64 "\n", s->round, s->version);
    while (s->held) {
        struct plain_up *u = s->held;
        s->held = u->next;
        u->held = 0;
        respond_text(u->req, status, body);
    }
    s->n_held = 0;
    memset(s->sum, 0, s->n * sizeof(uint32_t));
    s->round++;
    s->first_byte = 0;
}

static int on_upload(fa_h3_request *req, void *arg)
{
    struct plain_srv *s = arg;
    struct plain_up *u = calloc(1, sizeof(*u));
    const char *p = fa_h3_request_path(req) + strlen(UPLOAD_PREFIX);
    char *end, msg[256];
    uint64_t round;

    if (!u) {
        respond_text(req, 500, "out of memory\n");
        return 0;
    }
    u->s = s;
    u->req = req;
    snprintf(u->region, sizeof(u->region), "%s",
             fa_h3_request_peer(req) ? fa_h3_request_peer(req) : "");
    fa_h3_request_set_data(req, u);
    round = strtoull(p, &end, 10);
    if (*end || end == p || round != s->round) {
        snprintf(msg, sizeof(msg), "upload for round '%s'; the current round is %" PRIu64 "\n", p,
                 s->round);
        u->refused = 1;
        respond_text(req, 409, msg);
        return 0;
    }
    if (fa_h3_request_content_length(req) != (int64_t)s->masked_bytes) {
        snprintf(msg, sizeof(msg), "upload needs content-length %" PRIu64 "\n", s->masked_bytes);
        u->refused = 1;
        respond_text(req, 400, msg);
        return 0;
    }
    fa_h3_request_set_max_body(req, s->masked_bytes);
    if (s->first_byte == 0)
        s->first_byte = fa_time_mono_s();
    return 0;
}

/* The group-by-group streaming sum of fa_secagg_server_masked_chunk. */
static int on_upload_body(fa_h3_request *req, const uint8_t *data, size_t len, void *arg)
{
    struct plain_up *u = fa_h3_request_get_data(req);
    struct plain_srv *s = arg;
    const unsigned k = s->k;
    const uint64_t full_groups = s->n / 8;

    if (!u || u->refused)
        return 0;
    if (len > s->masked_bytes - u->bytes) {
        u->refused = 1;
        respond_text(req, 413, "upload longer than announced\n");
        return 0;
    }
    u->bytes += len;
    if (u->carry_len > 0 && u->coords / 8 < full_groups) {
        size_t need = k - u->carry_len, take = len < need ? len : need;
        memcpy(u->carry + u->carry_len, data, take);
        u->carry_len += take;
        data += take;
        len -= take;
        if (u->carry_len == k) {
            fa_ring_unpack_add(s->sum + u->coords, u->carry, 8, k, 1);
            u->coords += 8;
            u->carry_len = 0;
        }
    }
    if (u->carry_len == 0 && u->coords / 8 < full_groups) {
        uint64_t groups = len / k, left = full_groups - u->coords / 8;
        if (groups > left)
            groups = left;
        fa_ring_unpack_add(s->sum + u->coords, data, (size_t)groups * 8, k, 1);
        u->coords += groups * 8;
        data += groups * k;
        len -= (size_t)groups * k;
    }
    memcpy(u->carry + u->carry_len, data, len);
    u->carry_len += len;
    return 0;
}

static void on_upload_end(fa_h3_request *req, void *arg)
{
    struct plain_up *u = fa_h3_request_get_data(req);
    struct plain_srv *s = arg;

    if (!u || u->refused)
        return;
    if (u->bytes != s->masked_bytes) {
        u->refused = 1;
        respond_text(req, 400, "upload shorter than announced\n");
        return;
    }
    if (s->n % 8)
        fa_ring_unpack_add(s->sum + u->coords, u->carry, (size_t)(s->n % 8), s->k, 1);
    u->held = 1;
    u->next = s->held;
    s->held = u;
    if (++s->n_held == s->n_regions)
        finish(s);
}

static void on_upload_close(fa_h3_request *req, int e, void *arg)
{
    struct plain_up *u = fa_h3_request_get_data(req);
    struct plain_srv *s = arg;

    if (!u)
        return;
    if (u->held) {
        /* A benchmark anchor, not a product: a region lost after its upload
         * breaks the round, which the bench reports as an error. */
        struct plain_up **p;
        for (p = &s->held; *p; p = &(*p)->next)
            if (*p == u) {
                *p = u->next;
                break;
            }
        s->n_held--;
        fa_log(FA_LOG_ERROR, "plain upload lost after it was summed", "region=%s error=%s",
               u->region, fa_strerror(e));
    } else if (!u->refused && u->bytes > 0 && e != 0) {
        fa_log(FA_LOG_ERROR, "plain upload broke off", "region=%s bytes=%" PRIu64 " error=%s",
               u->region, u->bytes, fa_strerror(e));
    }
    fa_h3_request_set_data(req, NULL);
    free(u);
}

int fa_rbench_plain_serve(const char *config_path)
{
    static const fa_h3_handler hello = {on_hello, NULL, NULL, NULL};
    static const fa_h3_handler upload = {on_upload, on_upload_body, on_upload_end, on_upload_close};
    Fedagg__AggregatorConfig *cfg = NULL;
    struct fa_server_opt_params op;
    struct plain_srv s;
    fa_h3_server_config sc;
    fa_error err;
    sigset_t set;
    int rc, status = 1;

    memset(&s, 0, sizeof(s));
    fa_error_clear(&err);
    fa_log_set_context("proc=plain-server");
    rc = fa_config_load_aggregator(config_path, &cfg, NULL, &err);
    if (rc != 0)
        goto fail;
    s.federation_id = cfg->federation_id;
    s.n_regions = cfg->n_regions;
    /* The codec as fa_fed_open sets it: per-tensor ranges scale into [-1, 1]. */
    s.quant.bits = cfg->quantization->bits;
    s.quant.clip_mode = (int)cfg->quantization->clip;
    s.quant.clip_l2_norm = cfg->quantization->clip_l2_norm;
    s.quant.clip_value = cfg->quantization->range == FEDAGG__QUANT_RANGE__RANGE_ADAPTIVE
                             ? 1.0
                             : cfg->quantization->clip_value;
    s.k = fa_secagg_ring_bits_for(s.quant.bits, (uint32_t)s.n_regions);
    op.kind = (int)cfg->optimizer->kind;
    op.learning_rate = cfg->optimizer->learning_rate;
    op.momentum = cfg->optimizer->momentum;
    op.beta1 = cfg->optimizer->beta1;
    op.beta2 = cfg->optimizer->beta2;
    op.tau = cfg->optimizer->tau;
    rc = fa_server_opt_new(&s.opt, &op, &err);
    if (rc == 0)
        rc = fa_model_store_open(&s.store, cfg->storage->dir, cfg->storage->keep_versions, &err);
    if (rc != 0)
        goto fail;
    {
        /* Version 0, as the aggregator writes it (the same code). */
        const char *meta0[] = {"format",       "pt", "fedagg.version", "0", "fedagg.federation",
                               s.federation_id};
        rc = fa_global_model_open(&s.model, cfg, s.store, meta0, 3, &err);
        if (rc != 0)
            goto fail;
    }
    s.d = fa_global_model_d(s.model);
    s.n = s.d + 1;
    s.masked_bytes = fa_secagg_masked_bytes(s.n, s.k);
    s.sum = calloc(s.n, sizeof(uint32_t));
    if (!s.sum) {
        rc = fa_errorf(&err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    s.round = 1;

    /* The transport, configured as fedagg-aggregator configures it. */
    fa_h3_server_config_default(&sc);
    sc.listen = cfg->listen;
    sc.cert_file = cfg->tls->cert_file;
    sc.key_file = cfg->tls->key_file;
    sc.ca_file = cfg->tls->ca_file;
    fa_h3_quic_default(&sc.quic);
    sc.quic.max_stream_window = cfg->quic->max_stream_window;
    sc.quic.max_connection_window = cfg->quic->max_connection_window;
    sc.quic.cc = (int)cfg->quic->congestion_control;
    sc.quic.idle_timeout_ms = cfg->quic->idle_timeout_ms;
    sc.quic.max_streams = cfg->quic->max_streams_per_connection;
    sc.quic.gso = cfg->quic->gso;
    sc.max_connections = cfg->quic->max_connections;
    sc.max_body_bytes = cfg->quic->max_body_bytes;
    sc.retry = (int)cfg->quic->retry;
    sc.retry_load_threshold = cfg->quic->retry_load_threshold;
    sc.drain_on_signal = 1;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    rc = fa_h3_server_new(&s.srv, &sc, &err);
    if (rc == 0)
        rc = fa_h3_server_route(s.srv, "GET", "/plain/hello", &hello, &s);
    if (rc == 0)
        rc = fa_h3_server_route(s.srv, "POST", UPLOAD_PREFIX, &upload, &s);
    if (rc != 0)
        goto fail;
    fa_log(FA_LOG_INFO, "plain server serving",
           "listen=%s regions=%zu params=%" PRIu64 " ring_bits=%u upload_bytes=%" PRIu64,
           cfg->listen, s.n_regions, s.d, s.k, s.masked_bytes);
    rc = fa_h3_server_run(s.srv, &err);
    if (rc != 0)
        goto fail;
    status = 0;
    goto out;
fail:
    fa_log(FA_LOG_ERROR, "plain server failed", "error=\"%s\"", fa_error_msg(&err, rc));
out:
    fa_h3_server_del(s.srv);
    fa_global_model_del(s.model);
    fa_model_store_del(s.store);
    fa_server_opt_del(s.opt);
    free(s.sum);
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    return status;
}

/* ---- client ---------------------------------------------------------------------- */

struct fa_rbench_plain_client {
    fa_h3_client *h3;
};

int fa_rbench_plain_client_new(fa_rbench_plain_client **out, const Fedagg__WorkerConfig *cfg,
                               const char *server, fa_error *err)
{
    fa_rbench_plain_client *c = calloc(1, sizeof(*c));
    fa_h3_client_config hc;
    int rc;

    *out = NULL;
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    /* As worker/round_client.c configures its transport. */
    fa_h3_client_config_default(&hc);
    hc.server = server;
    hc.server_name =
        cfg->tls->server_name && cfg->tls->server_name[0] ? cfg->tls->server_name : NULL;
    hc.ca_file = cfg->tls->ca_file;
    hc.cert_file = cfg->tls->cert_file;
    hc.key_file = cfg->tls->key_file;
    hc.quic.max_stream_window = cfg->quic->max_stream_window;
    hc.quic.max_connection_window = cfg->quic->max_connection_window;
    hc.quic.cc = (int)cfg->quic->congestion_control;
    hc.quic.idle_timeout_ms = cfg->quic->idle_timeout_ms;
    hc.quic.gso = cfg->quic->gso;
    hc.reconnect_initial_ms = cfg->quic->reconnect_initial_ms;
    hc.reconnect_max_ms = cfg->quic->reconnect_max_ms;
    rc = fa_h3_client_new(&c->h3, &hc, err);
    if (rc != 0) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void fa_rbench_plain_client_del(fa_rbench_plain_client *c)
{
    if (!c)
        return;
    fa_h3_client_del(c->h3);
    free(c);
}

int fa_rbench_plain_hello(fa_rbench_plain_client *c, fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    int rc;

    memset(&resp, 0, sizeof(resp));
    req.method = "GET";
    req.path = "/plain/hello";
    req.timeout_ms = 30000;
    req.idempotent = 1;
    rc = fa_h3_client_request(c->h3, &req, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = fa_errorf(err, FA_ERR_HTTP, "GET /plain/hello: status %d", resp.status);
    fa_h3_response_free(&resp);
    return rc;
}

/* The quantised update, produced block by block as the network takes it
 * (the secure client's stream_block without the masks and the SHA-256). */
struct plain_src {
    const float *x;
    uint64_t d, n, pos;
    unsigned k;
    double weight;
    fa_codec codec;
    fa_mask_prg prg;
    uint32_t *rnd, *acc;
    uint8_t *pending;
    size_t pend_off, pend_len;
};

static ssize_t plain_read(void *arg, uint8_t *buf, size_t cap)
{
    struct plain_src *p = arg;
    size_t done = 0;

    while (done < cap) {
        if (p->pend_off < p->pend_len) {
            size_t k = p->pend_len - p->pend_off;
            if (k > cap - done)
                k = cap - done;
            memcpy(buf + done, p->pending + p->pend_off, k);
            p->pend_off += k;
            done += k;
            continue;
        }
        if (p->pos == p->n)
            break;
        size_t m = p->n - p->pos < FA_MASK_PRG_BLOCK_WORDS ? (size_t)(p->n - p->pos)
                                                           : FA_MASK_PRG_BLOCK_WORDS;
        size_t mf = p->pos < p->d ? (size_t)(p->d - p->pos < m ? p->d - p->pos : m) : 0;
        int rc = fa_mask_prg_words(&p->prg, p->rnd, m);
        if (rc != 0)
            return rc;
        fa_codec_encode(&p->codec, p->x + p->pos, mf, p->rnd, p->acc);
        if (p->pos + m > p->d)
            p->acc[p->d - p->pos] = (uint32_t)fa_codec_round(p->weight * p->codec.qmax,
                                                             p->rnd[p->d - p->pos], p->codec.qmax);
        fa_ring_pack(p->pending, p->acc, m, p->k);
        p->pend_off = 0;
        p->pend_len = (size_t)fa_ring_packed_bytes(m, p->k);
        p->pos += m;
    }
    return (ssize_t)done;
}

int fa_rbench_plain_round(fa_rbench_plain_client *c, uint64_t round, const float *x, size_t d,
                          double weight, const Fedagg__QuantParams *q, uint64_t *bytes_up,
                          uint64_t *bytes_down, fa_error *err)
{
    struct plain_src p;
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    fa_h3_client_stats s0, s1;
    fa_h3_header h[] = {{"content-type", "application/octet-stream"}};
    uint8_t key[16];
    char path[64];
    double norm;
    int rc;

    memset(&p, 0, sizeof(p));
    memset(&resp, 0, sizeof(resp));
    fa_h3_client_get_stats(c->h3, &s0);
    /* The checks and codec of fa_secagg_client_set_input_f32. */
    for (size_t i = 0; i < d; i++)
        if (!isfinite(x[i]))
            return fa_errorf(err, FA_ERR_INVAL, "plain input: value %zu is %g", i, (double)x[i]);
    norm = fa_codec_l2_norm(x, d);
    p.codec.pre = 1.0;
    if (q->clip_mode != FA_SECAGG_CLIP_COORDINATE && norm > q->clip_l2_norm)
        p.codec.pre = q->clip_l2_norm / norm;
    p.codec.qmax = (int32_t)((1u << (q->bits - 1)) - 1);
    p.codec.limit = q->clip_value;
    p.codec.mul = weight * (double)p.codec.qmax / q->clip_value;
    p.x = x;
    p.d = d;
    p.n = (uint64_t)d + 1;
    p.k = q->ring_bits;
    p.weight = weight;
    p.rnd = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    p.acc = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    p.pending = malloc(FA_MASK_PRG_BLOCK_WORDS * sizeof(uint32_t));
    randombytes_buf(key, sizeof(key));
    if (!p.rnd || !p.acc || !p.pending) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((rc = fa_mask_prg_init(&p.prg, key, 0)) != 0) {
        fa_errorf(err, rc, "rounding generator: %s", fa_strerror(rc));
        goto out;
    }
    snprintf(path, sizeof(path), UPLOAD_PREFIX "%" PRIu64, round);
    req.method = "POST";
    req.path = path;
    req.headers = h;
    req.nheaders = 1;
    req.body_read = plain_read;
    req.body_arg = &p;
    req.body_length = (int64_t)fa_secagg_masked_bytes(p.n, p.k);
    req.timeout_ms = 10u * 60u * 1000u;
    rc = fa_h3_client_request(c->h3, &req, &resp, err);
    if (rc == 0 && resp.status != 200)
        rc = fa_errorf(err, FA_ERR_HTTP, "plain upload of round %" PRIu64 ": status %d: %s", round,
                       resp.status, resp.body ? (const char *)resp.body : "");
out:
    fa_h3_client_get_stats(c->h3, &s1);
    *bytes_up = s1.bytes_sent - s0.bytes_sent;
    *bytes_down = s1.bytes_received - s0.bytes_received;
    fa_h3_response_free(&resp);
    fa_mask_prg_free(&p.prg);
    free(p.rnd);
    free(p.acc);
    free(p.pending);
    sodium_memzero(key, sizeof(key));
    return rc;
}
