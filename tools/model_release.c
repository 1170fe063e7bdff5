/* model_release.c - `fedagg model card|fetch|verify`: released models
 * (docs/governance.md).
 *
 *   fedagg model card VERSION [--json] (operator connection)
 *       the model card of a version as the aggregator's log gives it
 *       (GET /v1/admin/card?version=V): Markdown, or its JSON;
 *   fedagg model fetch --channel NAME --config WORKER.textproto --out FILE
 *       a region's serving pull: the proof of the record that put the
 *       channel where it is (GET /v1/models/channels/NAME), checked against
 *       the aggregator key the region pins, then that version's model file,
 *       checked against the digest the record signs; FILE and FILE.proof
 *       are written only when both check;
 *   fedagg model verify FILE --proof FILE.proof --pubkey KEY [--channel NAME]
 *       the same checks offline, from the two files and the key alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit.pb-c.h"
#include "common/fa_file.h"
#include "common/fa_hex.h"
#include "common/fa_log.h"
#include "common/fa_sha256.h"
#include "crypto/checkpoint.h"
#include "fedagg.pb-c.h"
#include "proto/config_check.h"
#include "tools/admin_client.h"
#include "tools/audit_cli.h"
#include "tools/card_render.h"
#include "transport/h3.h"

int fa_model_card_main(int argc, char **argv);
int fa_model_fetch_main(int argc, char **argv);
int fa_model_verify_main(int argc, char **argv);

#define MAX_PROOF (1u << 20)

/* ------------------------------------------------------------------ card */

static const char card_usage[] =
    "usage: fedagg model card VERSION [--json] (--config OPERATOR.textproto | --aggregator\n"
    "                         HOST:PORT --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "The model card of VERSION from the aggregator's signed audit log: how it was\n"
    "made and from which parent, the regions whose updates are in it with their\n"
    "signed data statements (dataset, manifest digest, examples, trainer digest) and\n"
    "privacy statements, the settings, the evaluations, the promotion decision, the\n"
    "channels, the ancestry.  Markdown, or the JSON with --json (the document\n"
    "`fedagg audit lineage` recomputes offline from a copy of the log).\n" FA_ADMIN_CONNECT_USAGE
    "\nExit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

int fa_model_card_main(int argc, char **argv)
{
    fa_admin_opts o = {0};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    char doc[64], *json = NULL;
    int rc = fa_admin_parse(argc, argv, card_usage, 1, 1, &o), status = 1;

    if (rc >= 0)
        return rc;
    if (o.npos != 1 || !o.pos[0][0] || strspn(o.pos[0], "0123456789") != strlen(o.pos[0]) ||
        strlen(o.pos[0]) > 20) {
        fprintf(stderr, "fedagg model card: give one VERSION (a number)\n\n%s", card_usage);
        fa_admin_opts_free(&o);
        return 2;
    }
    snprintf(doc, sizeof(doc), "card?version=%s", o.pos[0]);
    fa_log_set_level(FA_LOG_ERROR);
    if (o.from)
        rc = fa_admin_read_saved(o.from, &json, &err);
    else if ((rc = fa_admin_client_new(&c, &o, &err)) == 0)
        rc = fa_admin_get(c, doc, &json, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg model card: %s\n", fa_error_msg(&err, rc));
    } else if (o.json) {
        printf("%s\n", json);
        status = 0;
    } else {
        status = fa_card_render_markdown(stdout, json);
    }
    free(json);
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
}

/* --------------------------------------------------- the proof, checked */

/* What a verified bundle says of a model: its version and digest, and the
 * channel move it is (channel[0] == 0: a record that made the version). */
struct released {
    uint64_t version, index, tree_size;
    uint8_t sha[32];
    char federation[256], channel[64], by[64];
};

/* Parses and verifies bundle text against key, and takes the model it
 * names; with want_channel, it must be that channel's move.  Returns 0,
 * FA_ERR_PARSE, FA_ERR_VERIFY (a message saying what did not check). */
static int check_bundle(const char *text, size_t len, const fa_note_verifier *key,
                        const char *want_channel, struct released *out, fa_error *err)
{
    fa_proof_bundle b;
    fa_checkpoint cp;
    Fedagg__AuditRecord *r = NULL;
    int rc;

    memset(&b, 0, sizeof(b));
    memset(out, 0, sizeof(*out));
    if ((rc = fa_proof_bundle_parse(text, len, &b, err)) != 0) {
        rc = fa_error_prefix(err, rc, "the proof");
        goto out;
    }
    if ((rc = fa_proof_bundle_verify(&b, key, &cp, err)) != 0) {
        rc = fa_error_prefix(err, FA_ERR_VERIFY,
                             "the proof does not verify against the aggregator's key (a "
                             "tampered or foreign proof)");
        goto out;
    }
    r = fedagg__audit_record__unpack(NULL, b.record_len, b.record);
    if (!r || r->new_model_sha256.len != 32) {
        rc =
            fa_errorf(err, FA_ERR_VERIFY, "the proven record %" PRIu64 " does not decode", b.index);
        goto out;
    }
    out->index = b.index;
    out->tree_size = cp.size;
    snprintf(out->federation, sizeof(out->federation), "%s",
             r->federation_id ? r->federation_id : "");
    if (r->channel) {
        if (r->channel->model_sha256.len != 32) {
            rc = fa_errorf(err, FA_ERR_VERIFY,
                           "record %" PRIu64 ": a channel move without a "
                           "model digest",
                           b.index);
            goto out;
        }
        out->version = r->channel->version;
        memcpy(out->sha, r->channel->model_sha256.data, 32);
        snprintf(out->channel, sizeof(out->channel), "%s", r->channel->channel);
        snprintf(out->by, sizeof(out->by), "%s",
                 r->channel->operator_ && r->channel->operator_[0] ? r->channel->operator_
                                                                   : "the promotion gate");
    } else {
        out->version = r->new_version;
        memcpy(out->sha, r->new_model_sha256.data, 32);
    }
    if (want_channel && strcmp(out->channel, want_channel) != 0) {
        rc = fa_errorf(err, FA_ERR_VERIFY,
                       "the proven record %" PRIu64 " is not a move of channel %s (%s)", b.index,
                       want_channel, out->channel[0] ? out->channel : "it moves no channel");
        goto out;
    }
    rc = 0;
out:
    if (r)
        fedagg__audit_record__free_unpacked(r, NULL);
    fa_proof_bundle_free(&b);
    return rc;
}

static int hash_path(const char *path, uint8_t sha[32], fa_error *err)
{
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = fa_file_read_all(path, &data, &len, (size_t)64 << 30, err);
    if (rc == 0 && fa_sha256(sha, data, len) != 0)
        rc = fa_errorf(err, FA_ERR_CRYPTO, "%s: SHA-256 failed", path);
    free(data);
    return rc;
}

/* ----------------------------------------------------------------- fetch */

static const char fetch_usage[] =
    "usage: fedagg model fetch --channel NAME --config WORKER.textproto --out FILE\n"
    "                          [--pubkey KEY] [--timeout MS]\n"
    "\n"
    "A region's serving pull of a release channel: asks the aggregator (the address,\n"
    "TLS identity and pinned aggregator key of the region's worker config) for the\n"
    "proof of the signed record that pointed channel NAME at its version, checks\n"
    "it against the pinned key, downloads that version and checks it against the\n"
    "digest the record signs.  Writes FILE and FILE.proof only when both check;\n"
    "`fedagg model verify FILE --proof FILE.proof --pubkey KEY` checks them again\n"
    "offline.  --pubkey overrides the config's aggregator key.\n"
    "\n"
    "Exit status: 0, 1 a check failed or the aggregator refused, 2 usage.\n";

struct sink {
    fa_atomic_file *f;
    fa_sha256_ctx sha;
    fa_error *err;
};

static int sink_body(void *arg, const uint8_t *data, size_t len)
{
    struct sink *s = arg;
    (void)fa_sha256_update(&s->sha, data, len);
    return fa_atomic_file_write(s->f, data, len, s->err);
}

/* The message of an error answer (a fedagg.Error). */
static void answer_text(const fa_h3_response *resp, char *out, size_t n)
{
    Fedagg__Error *e = fedagg__error__unpack(NULL, resp->body_len, resp->body);
    snprintf(out, n, "%d %s", resp->status, e && e->message ? e->message : "");
    if (e)
        fedagg__error__free_unpacked(e, NULL);
}

static int get(fa_h3_client *h3, const char *path, uint32_t timeout_ms, struct sink *s,
               fa_h3_response *resp, fa_error *err)
{
    fa_h3_client_req req;
    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = path;
    req.timeout_ms = timeout_ms;
    req.idempotent = !s;
    req.max_response_bytes = MAX_PROOF;
    if (s) {
        req.on_body = sink_body;
        req.on_body_arg = s;
    }
    return fa_h3_client_request(h3, &req, resp, err);
}

int fa_model_fetch_main(int argc, char **argv)
{
    const char *channel = NULL, *config = NULL, *out = NULL, *pubkey = NULL;
    uint32_t timeout_ms = 60000;
    Fedagg__WorkerConfig *cfg = NULL;
    fa_h3_client *h3 = NULL;
    fa_h3_client_config hc;
    fa_h3_response resp;
    fa_note_verifier key;
    struct released rel;
    struct sink s = {0};
    char path[256], base[128], proof_path[4200], got_hex[65], want_hex[65], msg[600];
    uint8_t got[32];
    char *proof = NULL;
    size_t proof_len = 0;
    fa_error err = {0};
    int rc, status = 1;

    memset(&resp, 0, sizeof(resp));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(fetch_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--channel") && v) {
            channel = v, i++;
        } else if (!strcmp(a, "--config") && v) {
            config = v, i++;
        } else if ((!strcmp(a, "--out") || !strcmp(a, "-o")) && v) {
            out = v, i++;
        } else if (!strcmp(a, "--pubkey") && v) {
            pubkey = v, i++;
        } else if (!strcmp(a, "--timeout") && v) {
            timeout_ms = (uint32_t)strtoul(v, NULL, 10), i++;
        } else {
            fprintf(stderr, "fedagg model fetch: unexpected '%s'\n\n%s", a, fetch_usage);
            return 2;
        }
    }
    if (!channel || !config || !out || !timeout_ms ||
        strspn(channel, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(channel)) {
        fprintf(stderr, "fedagg model fetch: give --channel NAME, --config and --out\n\n%s",
                fetch_usage);
        return 2;
    }
    fa_log_set_level(FA_LOG_ERROR);
    if (fa_config_load_report(FA_CONFIG_WORKER, config, "fedagg model fetch",
                              (ProtobufCMessage **)&cfg) != 0)
        return 1;
    if (!pubkey)
        pubkey = cfg->aggregator_public_key && cfg->aggregator_public_key[0]
                     ? cfg->aggregator_public_key
                     : cfg->aggregator_public_key_file;
    if (!pubkey || !pubkey[0]) {
        fprintf(stderr,
                "fedagg model fetch: %s pins no aggregator_public_key: the proof "
                "cannot be checked (give --pubkey KEY)\n",
                config);
        goto done;
    }
    if ((rc = fa_audit_cli_pubkey(pubkey, &key, &err)) != 0)
        goto fail;
    fa_h3_client_config_default(&hc);
    hc.server = cfg->aggregator;
    hc.server_name =
        cfg->tls->server_name && cfg->tls->server_name[0] ? cfg->tls->server_name : NULL;
    hc.ca_file = cfg->tls->ca_file;
    hc.cert_file = cfg->tls->cert_file;
    hc.key_file = cfg->tls->key_file;
    hc.connect_attempts = 3;
    if ((rc = fa_h3_client_new(&h3, &hc, &err)) != 0)
        goto fail;

    /* The federation's routes: under its prefix on a service
     * (WorkerConfig.service_routes, docs/service.md). */
    if (cfg->service_routes && cfg->federation_id)
        snprintf(base, sizeof(base), "/v1/federations/%s", cfg->federation_id);
    else
        snprintf(base, sizeof(base), "/v1");
    /* The proof first: it names the version and the digest to expect. */
    snprintf(path, sizeof(path), "%s/models/channels/%s", base, channel);
    if ((rc = get(h3, path, timeout_ms, NULL, &resp, &err)) != 0)
        goto fail;
    if (resp.status != 200) {
        answer_text(&resp, msg, sizeof(msg));
        fprintf(stderr, "fedagg model fetch: channel %s: the aggregator answered %s\n", channel,
                msg);
        goto done;
    }
    proof = malloc(resp.body_len + 1);
    if (!proof) {
        rc = fa_errorf(&err, FA_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(proof, resp.body, resp.body_len);
    proof[resp.body_len] = '\0';
    proof_len = resp.body_len;
    fa_h3_response_free(&resp);
    memset(&resp, 0, sizeof(resp));
    if ((rc = check_bundle(proof, proof_len, &key, channel, &rel, &err)) != 0)
        goto fail;
    if (cfg->federation_id && strcmp(rel.federation, cfg->federation_id) != 0) {
        rc = fa_errorf(&err, FA_ERR_VERIFY, "the proof is of federation %s, not %s", rel.federation,
                       cfg->federation_id);
        goto fail;
    }

    /* The model, hashed as it arrives into a temporary file. */
    snprintf(path, sizeof(path), "%s/models/%" PRIu64, base, rel.version);
    s.err = &err;
    if ((rc = fa_atomic_file_open(&s.f, out, 0644, &err)) != 0)
        goto fail;
    if (fa_sha256_init(&s.sha) != 0) {
        rc = fa_errorf(&err, FA_ERR_CRYPTO, "SHA-256 unavailable");
        goto fail;
    }
    if ((rc = get(h3, path, timeout_ms, &s, &resp, &err)) != 0)
        goto fail;
    if (resp.status != 200) {
        rc = fa_errorf(&err, FA_ERR_HTTP, "model version %" PRIu64 ": the aggregator answered %d",
                       rel.version, resp.status);
        goto fail;
    }
    if (fa_sha256_final(&s.sha, got) != 0) {
        rc = fa_errorf(&err, FA_ERR_CRYPTO, "SHA-256 failed");
        goto fail;
    }
    fa_hex_encode(got_hex, sizeof(got_hex), got, 32);
    fa_hex_encode(want_hex, sizeof(want_hex), rel.sha, 32);
    if (memcmp(got, rel.sha, 32) != 0) {
        rc = fa_errorf(&err, FA_ERR_VERIFY,
                       "the model served as version %" PRIu64 " has SHA-256 %.16s..., the "
                       "signed record names %.16s...: not written",
                       rel.version, got_hex, want_hex);
        goto fail;
    }
    snprintf(proof_path, sizeof(proof_path), "%s.proof", out);
    if ((rc = fa_file_write_atomic(proof_path, proof, proof_len, 0644, &err)) != 0)
        goto fail;
    if ((rc = fa_atomic_file_commit(s.f, &err)) != 0) {
        s.f = NULL;
        remove(proof_path);
        goto fail;
    }
    s.f = NULL;
    printf("%s: version %" PRIu64 " of federation %s, channel %s (moved by %s, record %" PRIu64
           " of a signed tree of %" PRIu64 "), SHA-256 %s; proof in %s\n",
           out, rel.version, rel.federation, channel, rel.by, rel.index, rel.tree_size, got_hex,
           proof_path);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "fedagg model fetch: %s\n", fa_error_msg(&err, rc));
done:
    if (s.f)
        fa_atomic_file_abort(s.f); /* nothing of FILE is left */
    fa_sha256_free(&s.sha);
    fa_h3_response_free(&resp);
    free(proof);
    if (h3) {
        fa_h3_client_close(h3);
        fa_h3_client_del(h3);
    }
    if (cfg)
        fedagg__worker_config__free_unpacked(cfg, NULL);
    return status;
}

/* ---------------------------------------------------------------- verify */

static const char verify_usage[] =
    "usage: fedagg model verify FILE --proof PROOF --pubkey KEY [--channel NAME]\n"
    "\n"
    "Checks offline that FILE is the model a signed audit record names: PROOF (as\n"
    "`fedagg model fetch` writes FILE.proof, or `fedagg audit prove`) must verify\n"
    "against the aggregator's public key KEY, and FILE's SHA-256 must be the\n"
    "digest its record signs (a channel move's version, or the version the record\n"
    "made).  With --channel the record must be that channel's move.\n"
    "\n"
    "Exit status: 0 verified, 1 not, 2 usage.\n";

int fa_model_verify_main(int argc, char **argv)
{
    const char *file = NULL, *proof_path = NULL, *pubkey = NULL, *channel = NULL;
    fa_note_verifier key;
    struct released rel;
    uint8_t *proof = NULL, sha[32];
    size_t len = 0;
    char hex[65];
    fa_error err = {0};
    int rc;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(verify_usage, stdout);
            return 0;
        } else if (!strcmp(a, "--proof") && v) {
            proof_path = v, i++;
        } else if (!strcmp(a, "--pubkey") && v) {
            pubkey = v, i++;
        } else if (!strcmp(a, "--channel") && v) {
            channel = v, i++;
        } else if (a[0] != '-' && !file) {
            file = a;
        } else {
            fprintf(stderr, "fedagg model verify: unexpected '%s'\n\n%s", a, verify_usage);
            return 2;
        }
    }
    if (!file || !proof_path || !pubkey) {
        fprintf(stderr, "fedagg model verify: give FILE, --proof and --pubkey\n\n%s", verify_usage);
        return 2;
    }
    if ((rc = fa_audit_cli_pubkey(pubkey, &key, &err)) == 0 &&
        (rc = fa_file_read_all(proof_path, &proof, &len, MAX_PROOF, &err)) == 0 &&
        (rc = check_bundle((const char *)proof, len, &key, channel, &rel, &err)) == 0 &&
        (rc = hash_path(file, sha, &err)) == 0 && memcmp(sha, rel.sha, 32) != 0) {
        char want[65];
        fa_hex_encode(hex, sizeof(hex), sha, 32);
        fa_hex_encode(want, sizeof(want), rel.sha, 32);
        rc = fa_errorf(&err, FA_ERR_VERIFY,
                       "%s has SHA-256 %.16s..., the signed record %" PRIu64 " names %.16s... "
                       "for version %" PRIu64 ": not that model",
                       file, hex, rel.index, want, rel.version);
    }
    free(proof);
    if (rc != 0) {
        fprintf(stderr, "fedagg model verify: %s\n", fa_error_msg(&err, rc));
        return 1;
    }
    fa_hex_encode(hex, sizeof(hex), sha, 32);
    if (rel.channel[0])
        printf("ok: %s is version %" PRIu64 " of federation %s, released to channel %s by %s "
               "(record %" PRIu64 " of a signed tree of %" PRIu64 "); SHA-256 %s\n",
               file, rel.version, rel.federation, rel.channel, rel.by, rel.index, rel.tree_size,
               hex);
    else
        printf("ok: %s is version %" PRIu64 " of federation %s (record %" PRIu64
               " of a signed tree of %" PRIu64 "); SHA-256 %s\n",
               file, rel.version, rel.federation, rel.index, rel.tree_size, hex);
    return 0;
}
