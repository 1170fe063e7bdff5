/* round_client_download.c - the global model into a file: whole, or as a
 * delta against the model held with the fall-back to whole, then checked
 * against the signed log (round_client_log.c) before it takes the file's
 * place; and the check of its tensor table (see round_client.h). */
#include "worker/round_client_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_failpoint.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_safetensors.h"
#include "common/fa_time.h"
#include "model/delta.h"

struct sink {
    fa_atomic_file *f;
    crypto_hash_sha256_state sha;
    fa_error *err;
};

static int sink_write(void *arg, const uint8_t *data, size_t len)
{
    struct sink *s = arg;
    crypto_hash_sha256_update(&s->sha, data, len);
    return fa_atomic_file_write(s->f, data, len, s->err);
}

/* The version of the model held at path, for a delta download against it:
 * its "fedagg.version" metadata (or, for a model without one, the version
 * this client downloaded last).  0 when nothing usable is held there; the
 * delta's base digest is checked anyway (model/delta.h). */
static int held_version(const fa_round_client *rc, const char *path, uint64_t *version)
{
    fa_safetensors *st = NULL;
    const char *v;
    char *end;
    int ok = 0;

    if (fa_st_open(&st, path, NULL) != 0)
        return 0;
    v = fa_st_metadata_get(st, "fedagg.version");
    if (v && v[0] >= '0' && v[0] <= '9') {
        errno = 0;
        *version = strtoull(v, &end, 10);
        ok = !*end && !errno;
    } else if (!v && rc->have_model) {
        *version = rc->model_version;
        ok = 1;
    }
    fa_st_del(st);
    return ok;
}

/* Test switch worker-damage-held-model=V (it_fed_delta_download): once,
 * flips a bit of the held model of version V before a delta against it is
 * asked for, so that the delta does not apply and the region must fall
 * back to the full file. */
static void damage_held(fa_round_client *rc, const char *path, uint64_t version)
{
#ifdef FA_TEST_HOOKS
    char spec[32];
    FILE *f;
    int c;

    if (rc->damaged || !fa_failpoint_value("worker-damage-held-model", spec, sizeof(spec)) ||
        strtoull(spec, NULL, 10) != version)
        return;
    rc->damaged = 1;
    if (!(f = fopen(path, "r+b")))
        return;
    if (fseek(f, -2, SEEK_END) == 0 && (c = fgetc(f)) != EOF && fseek(f, -2, SEEK_END) == 0)
        fputc(c ^ 0x40, f);
    fclose(f);
    fa_log(FA_LOG_WARN, "TEST SWITCH: damaged the held model (worker-damage-held-model)",
           "version=%" PRIu64 " file=%s", version, path);
#else
    (void)rc, (void)path, (void)version;
#endif
}

/* One GET of the current model into path (atomically).  With base (the
 * model held, of version base_version) it asks for the delta against it;
 * a delta is rebuilt with fa_delta_reconstruct and its result checked
 * against the full model's SHA-256.  *delta_failed is set when a delta
 * came but did not give that model (the caller then downloads the full
 * file). */
static int fetch_model_once(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                            const char *base, uint64_t base_version, uint64_t *version,
                            uint8_t sha256[32], int *delta_failed, fa_error *err)
{
    fa_h3_client_req req = {0};
    fa_h3_response resp;
    struct sink s;
    const char *vh, *sh, *eh;
    char dl[4300], rpath[256], q[600];
    uint8_t got[32], want[32], dwant[32];
    fa_delta_info info;
    int r, is_delta = 0;

    memset(&resp, 0, sizeof(resp));
    *delta_failed = 0;
    snprintf(dl, sizeof(dl), "%s.download", path);
    r = fa_atomic_file_open(&s.f, dl, 0600, err);
    if (r != 0)
        return r;
    fa_atomic_file_write_back_every(s.f, FA_WRITE_BACK_STEP); /* committed with its fsync */
    crypto_hash_sha256_init(&s.sha);
    s.err = err;
    if (base)
        snprintf(rpath, sizeof(rpath), "%s/models/latest?delta_from=%" PRIu64, rc->base,
                 base_version);
    else
        snprintf(rpath, sizeof(rpath), "%s/models/latest", rc->base);
    req.method = "GET";
    req.path = rpath;
    req.on_body = sink_write;
    req.on_body_arg = &s;
    req.timeout_ms = timeout_ms;
    r = fa_h3_client_request(rc->h3, &req, &resp, err);
    if (r != 0)
        goto fail;
    if (resp.status != 200) {
        char msg[512];
        fa_round_client_error_text(&resp, msg, sizeof(msg));
        r = fa_errorf(err, FA_ERR_HTTP, "GET %s: %s", rpath, msg);
        /* an aggregator from before deltas refuses the query: ask again without it */
        *delta_failed = base && resp.status == 400;
        goto fail;
    }
    vh = fa_h3_response_header(&resp, "fedagg-model-version");
    sh = fa_h3_response_header(&resp, "fedagg-model-sha256");
    eh = fa_h3_response_header(&resp, "fedagg-model-encoding");
    is_delta = base && eh && !strcmp(eh, "delta");
    crypto_hash_sha256_final(&s.sha, got);
    if (!vh || !sh || sodium_hex2bin(want, 32, sh, strlen(sh), NULL, NULL, NULL) != 0) {
        r = fa_errorf(err, FA_ERR_PROTOCOL, "model download without version or SHA-256 header");
        goto fail;
    }
    if (is_delta) {
        const char *dh = fa_h3_response_header(&resp, "fedagg-delta-sha256");
        if (!dh || sodium_hex2bin(dwant, 32, dh, strlen(dh), NULL, NULL, NULL) != 0 ||
            sodium_memcmp(got, dwant, 32) != 0) {
            *delta_failed = 1;
            r = fa_errorf(err, FA_ERR_VERIFY, "model delta download corrupted: SHA-256 %s",
                          dh ? "does not match its header" : "header missing");
            goto fail;
        }
    } else if (sodium_memcmp(got, want, 32) != 0) {
        r = fa_errorf(err, FA_ERR_VERIFY,
                      "model download corrupted: SHA-256 does not match its header");
        goto fail;
    }
    r = fa_atomic_file_commit(s.f, err);
    s.f = NULL;
    if (r != 0)
        goto out;
    *version = strtoull(vh, NULL, 10);
    if (is_delta) {
        memset(&info, 0, sizeof(info));
        r = fa_delta_reconstruct(base, dl, path, got, &info, err);
        unlink(dl);
        if (r == 0 && sodium_memcmp(got, want, 32) != 0)
            r = fa_errorf(err, FA_ERR_VERIFY,
                          "the model rebuilt from the delta of version %" PRIu64
                          " does not have the SHA-256 the aggregator announced",
                          *version);
        if (r != 0) {
            unlink(path);
            *delta_failed = 1;
            goto out;
        }
        rc->dl.delta++;
        rc->dl.bytes_delta += resp.body_received;
        rc->dl.last_bytes = resp.body_received;
        rc->dl.last_delta = 1;
        fa_hex_encode(q, sizeof(q), got, 32);
        fa_log(FA_LOG_INFO, "global model downloaded",
               "version=%" PRIu64 " encoding=delta from=%" PRIu64 " bytes=%" PRIu64
               " full_bytes=%" PRIu64 " quantised=%" PRIu64 " sha256=%s",
               *version, base_version, resp.body_received, info.size, info.quantised, q);
    } else {
        if (rename(dl, path) != 0) {
            r = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
            unlink(dl);
            goto out;
        }
        rc->dl.full++;
        rc->dl.bytes_full += resp.body_received;
        rc->dl.last_bytes = resp.body_received;
        rc->dl.last_delta = 0;
        fa_hex_encode(q, sizeof(q), got, 32);
        fa_log(FA_LOG_INFO, "global model downloaded",
               "version=%" PRIu64 " encoding=full bytes=%" PRIu64 " sha256=%s delta_asked=%d",
               *version, resp.body_received, q, base ? 1 : 0);
    }
    memcpy(sha256, got, 32);
    goto out;
fail:
    fa_atomic_file_abort(s.f);
out:
    fa_h3_response_free(&resp);
    return r;
}

void fa_round_client_download_stats(const fa_round_client *rc, fa_round_client_dl_stats *out)
{
    *out = rc->dl;
}

int fa_round_client_fetch_model_within(fa_round_client *rc, const char *path, uint32_t timeout_ms,
                                       uint64_t *version, uint8_t sha256[32], fa_error *err)
{
    uint64_t start = fa_time_mono_ms(), base_version = 0;
    char tmp[4200];
    const char *base;
    int no_delta = 0;

    if (rc->alarmed)
        return fa_errorf(err, FA_ERR_VERIFY, "%s", rc->alarm);
    /* The model is downloaded beside path and takes its place only once the
     * signed log vouches for it. */
    snprintf(tmp, sizeof(tmp), "%s.unchecked", path);
    /* A download whose connection broke off (the aggregator restarted: its
     * stateless reset arrived mid-body) starts again from byte 0 on a fresh
     * connection at once, within the same time budget; the transport cannot
     * resend it by itself once body bytes reached the file.  So does one
     * that the signed log shows superseded (a round completed meanwhile),
     * and a delta that did not rebuild the announced model (then in full). */
    for (unsigned tries = 1;; tries++) {
        uint64_t used = fa_time_mono_ms() - start;
        char q[600];
        int delta_failed = 0;
        base = !no_delta && held_version(rc, path, &base_version) ? path : NULL;
        if (base)
            damage_held(rc, path, base_version);
        int r = fetch_model_once(rc, tmp, used < timeout_ms ? (uint32_t)(timeout_ms - used) : 1,
                                 base, base_version, version, sha256, &delta_failed, err);
        if (r == 0)
            r = fa_round_client_audit_model(rc, *version, sha256, err);
        if (r == 0 && rename(tmp, path) != 0)
            r = fa_errorf(err, FA_ERR_IO, "%s: %s", path, strerror(errno));
        if (r == 0) {
            fa_file_sync_dir(path, NULL);
            rc->have_model = 1;
            rc->model_version = *version;
            memcpy(rc->model_sha, sha256, 32);
            return 0;
        }
        unlink(tmp);
        if (delta_failed && !no_delta) {
            /* Never trusted: the full file is downloaded and checked instead. */
            rc->dl.fallbacks++;
            no_delta = 1;
            fa_log(FA_LOG_WARN, "model delta refused; downloading the full model",
                   "from=%" PRIu64 " error=%s", base_version,
                   fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
            tries--;
            continue;
        }
        if ((r != FA_ERR_QUIC && r != FA_ERR_REPLAY) || tries >= 3 ||
            fa_time_mono_ms() - start >= timeout_ms)
            return r;
        fa_log(FA_LOG_INFO,
               r == FA_ERR_QUIC ? "model download broke off; downloading again"
                                : "the model moved on while it was checked; downloading again",
               "attempt=%u error=%s", tries + 1, fa_log_quote(q, sizeof(q), fa_error_msg(err, r)));
    }
}

/* "1a2b3c4d..." (the first 8 bytes) of a digest, for messages. */
static void short_hex(char out[20], const uint8_t *b)
{
    fa_hex_encode(out, FA_HEX_LEN(8), b, 8);
    memcpy(out + 16, "...", 4);
}

int fa_round_client_check_table(const Fedagg__FederationInfo *info, const fa_tensors *t,
                                fa_error *err)
{
    uint8_t dig[32];
    char a[20], b[20] = "(none)";
    uint64_t d = fa_tensors_fed_numel(t);
    int r = fa_tensors_digest(t, dig, err);

    if (r != 0)
        return r;
    if (info->tensor_table_digest.len == 32 &&
        sodium_memcmp(info->tensor_table_digest.data, dig, 32) == 0 && d == info->num_params &&
        (info->num_tensors == 0 || info->num_tensors == fa_tensors_count(t)))
        return 0;
    short_hex(a, dig);
    if (info->tensor_table_digest.len == 32)
        short_hex(b, info->tensor_table_digest.data);
    return fa_errorf(err, FA_ERR_PROTOCOL,
                     "the model's tensor table does not match the federation's: the model has "
                     "%zu tensors, %" PRIu64 " federated coordinates, table digest %s; the "
                     "federation announces %" PRIu64 " tensors, %" PRIu64 " coordinates, digest %s",
                     fa_tensors_count(t), d, a, info->num_tensors, info->num_params, b);
}
