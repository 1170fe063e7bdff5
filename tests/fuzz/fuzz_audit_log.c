/* libFuzzer target: the audit log reader (audit/audit_log.h) on
 * untrusted files - a log and its checkpoints as found on a disk that may
 * have been damaged or tampered with.
 *
 * Input: u32 big-endian length L, then L bytes of LOG.checkpoints, then the
 * bytes of LOG (no LOG.tree: it is rebuilt).  The key is fa-audit-mklog's
 * (key seed 1), so seeds made with that tool reach the deep paths.
 *
 * Checked: fa_audit_verify's result agrees with its return code; when the
 * read-only open accepts the log, every record reads back and its inclusion
 * proof, and every consistency proof, verifies against the latest signed
 * checkpoint; when the writer's open accepts (after cutting torn tails and
 * signing), a read-only open then finds nothing left to repair. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "audit/audit_log.h"
#include "common/fa_log.h"

static char dir[64], log_path[128], ckpt_path[160], tree_path[160];
static fa_note_signer *signer;
static fa_note_verifier key;

static void cleanup(void)
{
    unlink(log_path);
    unlink(ckpt_path);
    unlink(tree_path);
    rmdir(dir);
}

static void init(void)
{
    uint8_t seed[32];
    const char *what = "fa-audit-mklog/1/aggregator";
    fa_error err;

    if (sodium_init() < 0)
        abort();
    fa_log_set_level(FA_LOG_ERROR + 1); /* recoveries warn by design */
    snprintf(dir, sizeof(dir), "/dev/shm/fa_fuzz_auditlog.XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof(dir), "/tmp/fa_fuzz_auditlog.XXXXXX");
        if (!mkdtemp(dir))
            abort();
    }
    snprintf(log_path, sizeof(log_path), "%s/audit.log", dir);
    snprintf(ckpt_path, sizeof(ckpt_path), "%s.checkpoints", log_path);
    snprintf(tree_path, sizeof(tree_path), "%s.tree", log_path);
    atexit(cleanup);
    crypto_hash_sha256(seed, (const uint8_t *)what, strlen(what));
    if (fa_note_signer_new(&signer, "fedagg.test/audit-it", seed, 32, &err) != 0)
        abort();
    memset(&key, 0, sizeof(key));
    memcpy(key.pk, fa_note_signer_public_key(signer), 32);
}

static void put(const char *path, const uint8_t *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n))
        abort();
    close(fd);
}

static void check_proofs(fa_audit_log *log)
{
    uint64_t n = fa_audit_log_signed_size(log), lim = n < 40 ? n : 40;
    uint8_t root[32], r[32], proof[FA_MERKLE_MAX_PROOF * 32], leaf[32];
    size_t plen;
    fa_error err;

    if (fa_audit_log_root(log, n, root, &err) != 0)
        abort();
    for (uint64_t i = 0; i < lim; i++) {
        uint8_t *rec;
        size_t len;
        if (fa_audit_log_read(log, i, &rec, &len, &err) != 0)
            abort();
        fa_merkle_leaf_hash(rec, len, leaf);
        free(rec);
        if (fa_audit_log_inclusion_proof(log, i, n, proof, &plen, &err) != 0 ||
            fa_merkle_verify_inclusion(leaf, i, n, proof, plen, root) != 0)
            abort();
        if (fa_audit_log_root(log, i, r, &err) != 0 ||
            fa_audit_log_consistency_proof(log, i, n, proof, &plen, &err) != 0 ||
            fa_merkle_verify_consistency(i, n, r, root, proof, plen) != 0)
            abort();
    }
    for (uint64_t round = 0; round < 4; round++) {
        uint64_t idx;
        fa_audit_log_find(log, round, "eu-west", &idx, &err);
    }
    if (n > 0) {
        char *bundle;
        size_t blen;
        fa_proof_bundle b;
        fa_checkpoint cp;
        if (fa_audit_log_prove(log, n - 1, &bundle, &blen, &err) != 0 ||
            fa_proof_bundle_parse(bundle, blen, &b, &err) != 0 ||
            fa_proof_bundle_verify(&b, &key, &cp, &err) != 0)
            abort();
        fa_proof_bundle_free(&b);
        free(bundle);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_audit_verify_opts o;
    fa_audit_verify_result res;
    fa_audit_open_report rep;
    fa_audit_log *log = NULL;
    fa_error err;
    uint32_t clen = 0;
    int rc;

    if (!signer)
        init();
    if (size >= 4) {
        clen = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
        data += 4;
        size -= 4;
        if (clen > size)
            clen = (uint32_t)size;
    }
    put(ckpt_path, data, clen);
    put(log_path, data + clen, size - clen);
    unlink(tree_path);

    memset(&o, 0, sizeof(o));
    o.key = &key;
    rc = fa_audit_verify(log_path, &o, &res, &err);
    if ((rc == 0) != (res.problems == 0) || (rc == 0 && res.first_bad != INT64_MAX) ||
        (rc == FA_ERR_VERIFY && res.first_bad == INT64_MAX))
        abort();

    if (fa_audit_log_open_readonly(&log, log_path, &key, &rep, &err) == 0) {
        check_proofs(log);
        fa_audit_log_close(log);
    }
    if (fa_audit_log_open(&log, log_path, signer, NULL, FA_AUDIT_LOG_NOSYNC, &rep, &err) == 0) {
        fa_audit_log_close(log);
        if (fa_audit_log_open_readonly(&log, log_path, &key, &rep, &err) != 0 ||
            rep.torn_log_bytes || rep.torn_checkpoint_bytes || rep.unsigned_records ||
            rep.tree_rebuilt)
            abort();
        check_proofs(log);
        fa_audit_log_close(log);
    }
    return 0;
}
