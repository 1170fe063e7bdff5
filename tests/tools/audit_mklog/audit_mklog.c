/* fa-audit-mklog: writes an audit log through audit/audit_log.h, as the
 * aggregator would, for the `fedagg audit` integration test.
 *
 *   fa-audit-mklog DIR [--records N] [--key-seed S] [--origin O] [--variant V]
 *
 * Keys are derived from S (default 1) so that runs are repeatable:
 *   DIR/aggregator.key   the checkpoint signing key (`fedagg keygen` format, 0600)
 *   DIR/aggregator.pub   its public key (base64)
 *   DIR/<region>.pub     the identity public keys of ap-south, eu-west, us-east
 *   DIR/audit.log        (+ .checkpoints, .tree) N more rounds appended each run,
 *                        continuing the rounds and the model chain of the log.
 * Round r: regions take part in turn (round 3k+2 drops us-east); each region's
 * upload SHA-256 is SHA-256("upload" || region || r), printed by --print-upload.
 * --variant V changes the recorded config digest: another history, same keys. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "audit/audit_log.h"
#include "common/fa_blake3.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "crypto/checkpoint.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"

#define NREG 3
static const char *const regions[NREG] = {"ap-south", "eu-west", "us-east"};

static void derive(uint64_t key_seed, const char *what, uint8_t out[32])
{
    char buf[128];
    int n = snprintf(buf, sizeof(buf), "fa-audit-mklog/%" PRIu64 "/%s", key_seed, what);
    crypto_hash_sha256(out, (const uint8_t *)buf, (unsigned long long)n);
}

/* A stand-in for a masked upload's BLAKE3 digest. */
static void upload_digest(const char *region, uint64_t round, uint8_t out[32])
{
    char buf[128];
    int n = snprintf(buf, sizeof(buf), "upload%s%" PRIu64, region, round);
    fa_blake3(out, buf, (size_t)n);
}

static int write_text(const char *dir, const char *name, const char *text, unsigned mode)
{
    char path[4096];
    fa_error err;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (fa_file_write_atomic(path, text, strlen(text), mode, &err) != 0) {
        fprintf(stderr, "fa-audit-mklog: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *origin = "fedagg.test/audit-it";
    uint64_t records = 5, key_seed = 1, print_round = 0, variant = 0;
    const char *print_region = NULL;
    uint8_t seed[32], pk[32], model[32];
    char text[FA_IDENTITY_SECRET_TEXT_MAX], path[4096];
    size_t tlen;
    fa_note_signer *signer = NULL;
    fa_audit_log *log = NULL;
    fa_audit_open_report rep;
    fa_error err;
    uint64_t round = 0, version = 0;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--records") && i + 1 < argc)
            records = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--key-seed") && i + 1 < argc)
            key_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--variant") && i + 1 < argc)
            variant = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--origin") && i + 1 < argc)
            origin = argv[++i];
        else if (!strcmp(argv[i], "--print-upload") && i + 2 < argc) {
            print_region = argv[++i];
            print_round = strtoull(argv[++i], NULL, 10);
        } else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr, "usage: fa-audit-mklog DIR [--records N] [--key-seed S] [--origin O]\n"
                            "       fa-audit-mklog --print-upload REGION ROUND\n");
            return 2;
        }
    }
    if (sodium_init() < 0)
        return 1;
    if (print_region) {
        uint8_t h[32];
        char hex[65];
        upload_digest(print_region, print_round, h);
        sodium_bin2hex(hex, sizeof(hex), h, 32);
        printf("%s\n", hex);
        return 0;
    }
    if (!dir) {
        fprintf(stderr, "fa-audit-mklog: DIR is required\n");
        return 2;
    }
    fa_log_set_level(FA_LOG_WARN);

    derive(key_seed, "aggregator", seed);
    if (fa_identity_format_secret(seed, text, &tlen) != 0 ||
        write_text(dir, "aggregator.key", text, 0600) != 0)
        return 1;
    fa_identity_public_key(seed, pk);
    fa_identity_format_public(pk, text, &tlen);
    text[tlen] = 0;
    if (write_text(dir, "aggregator.pub", text, 0644) != 0)
        return 1;
    if (fa_note_signer_new(&signer, origin, seed, 32, &err) != 0) {
        fprintf(stderr, "fa-audit-mklog: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < NREG; i++) {
        uint8_t rs[32], rpk[32];
        char name[64];
        derive(key_seed, regions[i], rs);
        fa_identity_public_key(rs, rpk);
        fa_identity_format_public(rpk, text, &tlen);
        text[tlen] = 0;
        snprintf(name, sizeof(name), "%s.pub", regions[i]);
        if (write_text(dir, name, text, 0644) != 0)
            return 1;
    }

    snprintf(path, sizeof(path), "%s/audit.log", dir);
    if (fa_audit_log_open(&log, path, signer, origin, 0, &rep, &err) != 0) {
        fprintf(stderr, "fa-audit-mklog: %s\n", err.msg);
        return 1;
    }
    memset(model, 0, sizeof(model));
    if (fa_audit_log_size(log) > 0) {
        uint8_t *buf;
        size_t len;
        Fedagg__AuditRecord *last;
        if (fa_audit_log_read(log, fa_audit_log_size(log) - 1, &buf, &len, &err) != 0) {
            fprintf(stderr, "fa-audit-mklog: %s\n", err.msg);
            return 1;
        }
        last = fedagg__audit_record__unpack(NULL, len, buf);
        free(buf);
        round = last->round;
        version = last->new_version;
        memcpy(model, last->new_model_sha256.data, 32);
        fedagg__audit_record__free_unpacked(last, NULL);
    }

    for (uint64_t k = 0; k < records; k++) {
        Fedagg__AuditRecord r = FEDAGG__AUDIT_RECORD__INIT;
        Fedagg__RegionCommitment c[NREG], *cp[NREG];
        Fedagg__OptimizerSettings opt = FEDAGG__OPTIMIZER_SETTINGS__INIT;
        Fedagg__QuantizationSettings q = FEDAGG__QUANTIZATION_SETTINGS__INIT;
        char *parts[NREG], *dropped[1];
        uint8_t cfg[32], next[32], up[NREG][32], sig[NREG][64];
        size_t np = 0;
        fa_audit_append_result res;

        round++;
        r.version = 1;
        r.federation_id = "audit-it";
        r.round = round;
        r.attempt = round % 4 == 0 ? 1 : 0;
        r.start_unix_ms = 1767225600000ull + round * 60000;
        r.commit_unix_ms = r.start_unix_ms + 42000;
        memset(cfg, (int)(0xc0 + variant), sizeof(cfg));
        r.config_digest.data = cfg;
        r.config_digest.len = 32;
        r.prev_model_sha256.data = model;
        r.prev_model_sha256.len = 32;
        crypto_hash_sha256(next, model, 32);
        r.new_model_sha256.data = next;
        r.new_model_sha256.len = 32;
        r.prev_version = version;
        r.new_version = version + 1;
        for (int i = 0; i < NREG; i++) {
            Fedagg__RegionCommitment ci = FEDAGG__REGION_COMMITMENT__INIT;
            uint8_t rs[32];
            if (i == 2 && round % 3 == 2)
                continue; /* us-east drops out */
            c[np] = ci;
            c[np].region = (char *)regions[i];
            upload_digest(regions[i], round, up[np]);
            derive(key_seed, regions[i], rs);
            fa_secagg_commitment_sign(rs, r.federation_id, r.round, r.attempt, regions[i],
                                      FA_SECAGG_UPLOAD_BLAKE3, up[np], sig[np]);
            sodium_memzero(rs, sizeof(rs));
            c[np].upload_digest.data = up[np];
            c[np].upload_digest.len = 32;
            c[np].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3;
            c[np].signature.data = sig[np];
            c[np].signature.len = 64;
            c[np].upload_bytes = 4096;
            cp[np] = &c[np];
            parts[np] = (char *)regions[i];
            np++;
        }
        r.n_participants = np;
        r.participants = parts;
        r.n_commitments = np;
        r.commitments = cp;
        if (np < NREG) {
            dropped[0] = (char *)regions[2];
            r.n_dropped = 1;
            r.dropped = dropped;
        }
        opt.kind = "fedadam";
        opt.learning_rate = 0.01;
        opt.beta1 = 0.9;
        opt.beta2 = 0.99;
        opt.tau = 0.001;
        r.optimizer = &opt;
        q.bits = 16;
        q.ring_bits = 18;
        q.clip_mode = "l2";
        q.clip_l2_norm = 10.0;
        q.clip_value = 1.0;
        q.max_examples = 60000;
        r.quantization = &q;
        r.threshold = 2;
        r.num_params = 235146;
        r.software_version = FA_VERSION;
        if (fa_audit_log_append(log, &r, &res, &err) != 0) {
            fprintf(stderr, "fa-audit-mklog: %s\n", err.msg);
            return 1;
        }
        fa_audit_append_result_free(&res);
        version++;
        memcpy(model, next, 32);
    }
    printf("%s: %" PRIu64 " records\n", path, fa_audit_log_size(log));
    fa_audit_log_close(log);
    fa_note_signer_del(signer);
    return 0;
}
