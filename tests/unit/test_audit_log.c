/* Unit tests of aggregator/audit_log: append, reopen, proofs, record rules,
 * tampering (every single bit of a small log and of its checkpoints;
 * deleted, reordered, duplicated and truncated records; forged and foreign
 * checkpoints) each reported with the right record index, crash recovery at
 * every byte offset of the last record and of the last checkpoint, and the
 * tree file rebuilt when stale. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>
#include <zlib.h>

#include "audit/audit_log.h"
#include "common/fa_log.h"
#include "crypto/secagg.h"

#define NREG 3
static const char *const region_ids[NREG] = {"ap-south", "eu-west", "us-east"};

struct fix {
    char dir[256];
    char path[300];
    fa_note_signer *signer;
    fa_note_verifier v;
    uint8_t rseed[NREG][32], rpk[NREG][32];
    fa_audit_region_key rkeys[NREG];
    /* model chain */
    uint64_t version;
    uint8_t model[32];
    uint64_t round;
};

struct rec_buf {
    Fedagg__AuditRecord r;
    Fedagg__RegionCommitment c[NREG], *cp[NREG];
    Fedagg__OptimizerSettings opt;
    Fedagg__QuantizationSettings q;
    char *parts[NREG], *dropped[NREG];
    uint8_t cfg[32], prev[32], next[32], up[NREG][32], sig[NREG][64];
};

/* A record of the next round: the first nparts regions take part, the next
 * ndropped dropped.  Advances the fixture's model chain. */
static void rec_fill(struct fix *f, struct rec_buf *b, uint32_t attempt, int nparts, int ndropped)
{
    Fedagg__AuditRecord init = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__OptimizerSettings oi = FEDAGG__OPTIMIZER_SETTINGS__INIT;
    Fedagg__QuantizationSettings qi = FEDAGG__QUANTIZATION_SETTINGS__INIT;
    uint8_t seedmat[40];

    memset(b, 0, sizeof(*b));
    b->r = init;
    b->opt = oi;
    b->q = qi;
    b->r.version = 1;
    b->r.federation_id = "fed-a";
    b->r.round = ++f->round;
    b->r.attempt = attempt;
    b->r.start_unix_ms = 1700000000000ull + f->round * 1000;
    b->r.commit_unix_ms = b->r.start_unix_ms + 500;
    memset(b->cfg, 0x11, 32);
    b->r.config_digest.data = b->cfg;
    b->r.config_digest.len = 32;
    memcpy(b->prev, f->model, 32);
    memcpy(seedmat, f->model, 32);
    memcpy(seedmat + 32, &f->round, 8);
    crypto_hash_sha256(b->next, seedmat, sizeof(seedmat));
    b->r.prev_model_sha256.data = b->prev;
    b->r.prev_model_sha256.len = 32;
    b->r.new_model_sha256.data = b->next;
    b->r.new_model_sha256.len = 32;
    b->r.prev_version = f->version;
    b->r.new_version = f->version + 1;
    for (int i = 0; i < nparts; i++) {
        Fedagg__RegionCommitment ci = FEDAGG__REGION_COMMITMENT__INIT;
        b->c[i] = ci;
        b->parts[i] = (char *)region_ids[i];
        b->c[i].region = (char *)region_ids[i];
        memset(b->up[i], (int)(f->round * 7 + (uint64_t)i), 32);
        b->c[i].upload_digest.data = b->up[i];
        b->c[i].upload_digest.len = 32;
        b->c[i].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3;
        assert_int_equal(fa_secagg_commitment_sign(f->rseed[i], "fed-a", b->r.round, attempt,
                                                   region_ids[i], FA_SECAGG_UPLOAD_BLAKE3, b->up[i],
                                                   b->sig[i]),
                         0);
        b->c[i].signature.data = b->sig[i];
        b->c[i].signature.len = 64;
        b->c[i].upload_bytes = 1000;
        b->cp[i] = &b->c[i];
    }
    for (int i = 0; i < ndropped; i++)
        b->dropped[i] = (char *)region_ids[nparts + i];
    b->r.n_participants = (size_t)nparts;
    b->r.participants = b->parts;
    b->r.n_dropped = (size_t)ndropped;
    b->r.dropped = b->dropped;
    b->r.n_commitments = (size_t)nparts;
    b->r.commitments = b->cp;
    b->opt.kind = "fedavg";
    b->opt.learning_rate = 1.0;
    b->r.optimizer = &b->opt;
    b->q.bits = 16;
    b->q.ring_bits = 18;
    b->q.clip_mode = "l2";
    b->r.quantization = &b->q;
    b->r.threshold = 1;
    b->r.software_version = "0.1.0";
}

static void chain_advance(struct fix *f, const struct rec_buf *b)
{
    f->version++;
    memcpy(f->model, b->next, 32);
}

static void append_n(struct fix *f, fa_audit_log *log, int n, int nparts)
{
    for (int i = 0; i < n; i++) {
        struct rec_buf b;
        fa_audit_append_result res;
        fa_error err;
        rec_fill(f, &b, 0, nparts, 0);
        assert_int_equal(fa_audit_log_append(log, &b.r, &res, &err), 0);
        chain_advance(f, &b);
        fa_audit_append_result_free(&res);
    }
}

static int setup(void **state)
{
    struct fix *f = calloc(1, sizeof(*f));
    uint8_t seed[32];
    fa_error err;

    snprintf(f->dir, sizeof(f->dir), "/tmp/fa_test_auditlog.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/audit.log", f->dir);
    memset(seed, 0x42, sizeof(seed));
    if (fa_note_signer_new(&f->signer, "fedagg.test/fed-a", seed, 32, &err) != 0)
        return -1;
    snprintf(f->v.name, sizeof(f->v.name), "fedagg.test/fed-a");
    memcpy(f->v.pk, fa_note_signer_public_key(f->signer), 32);
    for (int i = 0; i < NREG; i++) {
        uint8_t sk[64];
        memset(f->rseed[i], 0x60 + i, 32);
        crypto_sign_seed_keypair(f->rpk[i], sk, f->rseed[i]);
        f->rkeys[i].region = region_ids[i];
        memcpy(f->rkeys[i].pk, f->rpk[i], 32);
    }
    memset(f->model, 0xee, 32);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fix *f = *state;
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
    fa_note_signer_del(f->signer);
    free(f);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- files ---- */
static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf;
    long n;
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    fclose(fp);
}

static void companion(const struct fix *f, const char *suffix, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s", f->path, suffix);
}

/* The three files of a log, in memory. */
struct snap {
    uint8_t *log, *ckpt, *tree;
    size_t log_len, ckpt_len, tree_len;
};

static void snap_take(const struct fix *f, struct snap *s)
{
    char p[400];
    s->log = slurp(f->path, &s->log_len);
    companion(f, ".checkpoints", p, sizeof(p));
    s->ckpt = slurp(p, &s->ckpt_len);
    companion(f, ".tree", p, sizeof(p));
    s->tree = slurp(p, &s->tree_len);
}

static void snap_put(const struct fix *f, const struct snap *s)
{
    char p[400];
    spit(f->path, s->log, s->log_len);
    companion(f, ".checkpoints", p, sizeof(p));
    spit(p, s->ckpt, s->ckpt_len);
    companion(f, ".tree", p, sizeof(p));
    spit(p, s->tree, s->tree_len);
}

static void snap_free(struct snap *s)
{
    free(s->log);
    free(s->ckpt);
    free(s->tree);
}

/* Frame boundaries of a log or checkpoints file image: off[0..n], off[n] = end. */
static size_t frames(const uint8_t *buf, size_t len, size_t *off, size_t max)
{
    size_t p = 16, n = 0;
    while (p + 8 <= len && n < max) {
        uint32_t l = (uint32_t)buf[p] << 24 | (uint32_t)buf[p + 1] << 16 |
                     (uint32_t)buf[p + 2] << 8 | buf[p + 3];
        off[n++] = p;
        p += 8 + l;
    }
    off[n] = p;
    return n;
}

/* ---- verify helpers ---- */
struct findings {
    int problems, notes;
    char first[512];
};

static void collect(void *ctx, int severity, int64_t index, const char *msg)
{
    struct findings *fd = ctx;
    if (severity == FA_AUDIT_PROBLEM) {
        if (fd->problems++ == 0)
            snprintf(fd->first, sizeof(fd->first), "[%" PRId64 "] %s", index, msg);
    } else {
        fd->notes++;
    }
}

static int verify(struct fix *f, int with_regions, fa_audit_verify_result *res, struct findings *fd)
{
    fa_audit_verify_opts o;
    fa_error err;
    memset(&o, 0, sizeof(o));
    memset(fd, 0, sizeof(*fd));
    o.key = &f->v;
    if (with_regions) {
        o.region_keys = f->rkeys;
        o.nregion_keys = NREG;
    }
    o.report = collect;
    o.report_ctx = fd;
    return fa_audit_verify(f->path, &o, res, &err);
}

static void assert_verifies(struct fix *f, uint64_t records)
{
    fa_audit_verify_result res;
    struct findings fd;
    int rc = verify(f, 1, &res, &fd);
    if (rc != 0)
        print_error("unexpected problem: %s\n", fd.first);
    assert_int_equal(rc, 0);
    assert_int_equal(res.records, records);
    assert_int_equal(res.signed_size, records);
    assert_int_equal(res.first_bad, INT64_MAX);
}

static int with_region_keys = 1;

static void assert_bad_at(struct fix *f, int64_t index, const char *what)
{
    fa_audit_verify_result res;
    struct findings fd;
    int rc = verify(f, with_region_keys, &res, &fd);
    if (rc != FA_ERR_VERIFY || res.first_bad != index)
        print_error("%s: expected a problem at record %" PRId64 ", got rc %d first_bad %" PRId64
                    " (%s)\n",
                    what, index, rc, res.first_bad, fd.first);
    assert_int_equal(rc, FA_ERR_VERIFY);
    assert_true(res.first_bad == index);
    assert_true(fd.problems > 0);
}

static fa_audit_log *open_w(struct fix *f, fa_audit_open_report *rep)
{
    fa_audit_log *log = NULL;
    fa_error err;
    int rc = fa_audit_log_open(&log, f->path, f->signer, "fedagg.test/fed-a", FA_AUDIT_LOG_NOSYNC,
                               rep, &err);
    if (rc != 0)
        print_error("open: %s\n", err.msg);
    assert_int_equal(rc, 0);
    return log;
}

/* ------------------------------------------------------------------------- */

static void test_append_reopen_prove(void **state)
{
    struct fix *f = *state;
    fa_audit_open_report rep;
    fa_audit_log *log;
    fa_error err;
    uint8_t proof[FA_MERKLE_MAX_PROOF * 32], r3[32], r6[32];
    size_t plen;

    /* a new log starts with a signed checkpoint of the empty tree */
    log = open_w(f, &rep);
    assert_int_equal(rep.created, 1);
    assert_int_equal(fa_audit_log_size(log), 0);
    {
        char *note;
        size_t n;
        fa_checkpoint cp;
        assert_int_equal(fa_audit_log_checkpoint(log, &note, &n, &err), 0);
        assert_int_equal(fa_checkpoint_open(note, n, &f->v, &cp, &err), 0);
        assert_int_equal(cp.size, 0);
        free(note);
    }
    /* each append returns its index, the signed checkpoint and a proof */
    for (int i = 0; i < 5; i++) {
        struct rec_buf b;
        fa_audit_append_result res;
        fa_checkpoint cp;
        uint8_t leaf[32], *enc;
        size_t len;
        rec_fill(f, &b, (uint32_t)(i % 2), 3, 0);
        assert_int_equal(fa_audit_log_append(log, &b.r, &res, &err), 0);
        chain_advance(f, &b);
        assert_int_equal(res.index, (uint64_t)i);
        assert_int_equal(res.tree_size, (uint64_t)i + 1);
        assert_int_equal(fa_checkpoint_open(res.checkpoint, res.checkpoint_len, &f->v, &cp, &err),
                         0);
        assert_int_equal(cp.size, (uint64_t)i + 1);
        assert_memory_equal(cp.root, res.root, 32);
        len = fedagg__audit_record__get_packed_size(&b.r);
        enc = malloc(len);
        fedagg__audit_record__pack(&b.r, enc);
        fa_merkle_leaf_hash(enc, len, leaf);
        free(enc);
        assert_int_equal(fa_merkle_verify_inclusion(leaf, res.index, res.tree_size, res.proof,
                                                    res.proof_len, cp.root),
                         0);
        fa_audit_append_result_free(&res);
    }
    assert_int_equal(fa_audit_log_root(log, 3, r3, &err), 0);
    fa_audit_log_close(log);

    /* reopen: clean, nothing repaired */
    log = open_w(f, &rep);
    assert_int_equal(rep.records, 5);
    assert_int_equal(rep.torn_log_bytes + rep.torn_checkpoint_bytes + rep.unsigned_records, 0);
    assert_int_equal(rep.tree_rebuilt, 0);
    assert_int_equal(rep.created, 0);
    append_n(f, log, 1, 2);
    assert_int_equal(fa_audit_log_size(log), 6);
    assert_int_equal(fa_audit_log_root(log, 6, r6, &err), 0);
    /* consistency 3 -> 6 */
    assert_int_equal(fa_audit_log_consistency_proof(log, 3, 6, proof, &plen, &err), 0);
    assert_int_equal(fa_merkle_verify_consistency(3, 6, r3, r6, proof, plen), 0);
    assert_int_equal(fa_audit_log_consistency_proof(log, 3, 7, proof, &plen, &err), FA_ERR_RANGE);
    fa_audit_log_close(log);
    assert_verifies(f, 6);

    /* read-only: find and prove */
    assert_int_equal(fa_audit_log_open_readonly(&log, f->path, &f->v, &rep, &err), 0);
    {
        uint64_t idx;
        char *bundle;
        size_t blen;
        fa_proof_bundle b;
        fa_checkpoint cp;
        Fedagg__AuditRecord *rec;
        assert_int_equal(fa_audit_log_find(log, 4, "eu-west", &idx, &err), 0);
        assert_int_equal(idx, 3);
        assert_int_equal(fa_audit_log_find(log, 6, "us-east", &idx, &err), FA_ERR_NOTFOUND);
        assert_int_equal(fa_audit_log_find(log, 6, "eu-west", &idx, &err), 0);
        assert_int_equal(idx, 5);
        assert_int_equal(fa_audit_log_find(log, 99, "eu-west", &idx, &err), FA_ERR_NOTFOUND);
        assert_int_equal(fa_audit_log_find(log, 0, "eu-west", &idx, &err), FA_ERR_NOTFOUND);
        assert_int_equal(fa_audit_log_prove(log, 3, &bundle, &blen, &err), 0);
        assert_int_equal(fa_proof_bundle_parse(bundle, blen, &b, &err), 0);
        assert_int_equal(fa_proof_bundle_verify(&b, &f->v, &cp, &err), 0);
        assert_int_equal(cp.size, 6);
        rec = fedagg__audit_record__unpack(NULL, b.record_len, b.record);
        assert_non_null(rec);
        assert_int_equal(rec->round, 4);
        fedagg__audit_record__free_unpacked(rec, NULL);
        fa_proof_bundle_free(&b);
        free(bundle);
        /* read-only logs refuse appends */
        {
            struct rec_buf rb;
            struct fix g = *f;
            rec_fill(&g, &rb, 0, 1, 0);
            assert_int_equal(fa_audit_log_append(log, &rb.r, NULL, &err), FA_ERR_STATE);
        }
    }
    fa_audit_log_close(log);
}

/* What a region proves a downloaded model against: the last signed record
 * of a version, and a consistency proof from a checkpoint it holds, as the
 * text GET /v1/audit/consistency serves. */
static void test_find_version_and_consistency_text(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    uint8_t r2[32], r5[32], proof[FA_MERKLE_MAX_PROOF * 32];
    uint64_t idx;
    char *text = NULL;
    size_t len = 0, n = 0;
    fa_error err;

    assert_int_equal(fa_audit_log_find_version(log, 0, &idx, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "no signed record makes or keeps model version 0"));
    append_n(f, log, 5, 2); /* versions 1..5 */
    assert_int_equal(fa_audit_log_find_version(log, 0, &idx, &err), FA_ERR_NOTFOUND);
    for (uint64_t v = 1; v <= 5; v++) {
        assert_int_equal(fa_audit_log_find_version(log, v, &idx, &err), 0);
        assert_int_equal(idx, v - 1);
    }
    assert_int_equal(fa_audit_log_find_version(log, 6, &idx, &err), FA_ERR_NOTFOUND);

    assert_int_equal(fa_audit_log_root(log, 2, r2, &err), 0);
    assert_int_equal(fa_audit_log_root(log, 5, r5, &err), 0);
    assert_int_equal(fa_audit_log_prove_consistency(log, 2, UINT64_MAX, &text, &len, &err), 0);
    assert_int_equal(strlen(text), len);
    assert_int_equal(strncmp(text, "fedagg-audit-consistency v1\nold 2\nsize 5\n", 41), 0);
    for (const char *p = strstr(text, "hash "); p; p = strstr(p + 1, "\nhash ")) {
        const char *b64 = p[0] == '\n' ? p + 6 : p + 5;
        size_t got = 0;
        assert_int_equal(sodium_base642bin(proof + n * 32, 32, b64, 44, NULL, &got, NULL,
                                           sodium_base64_VARIANT_ORIGINAL),
                         0);
        assert_int_equal(got, 32);
        n++;
    }
    assert_true(n > 0);
    assert_int_equal(fa_merkle_verify_consistency(2, 5, r2, r5, proof, n), 0);
    r2[0] ^= 1;
    assert_int_equal(fa_merkle_verify_consistency(2, 5, r2, r5, proof, n), FA_ERR_VERIFY);
    free(text);
    /* equal sizes: no hash lines; beyond the checkpoint or backwards: refused */
    assert_int_equal(fa_audit_log_prove_consistency(log, 5, 5, &text, &len, &err), 0);
    assert_string_equal(text, "fedagg-audit-consistency v1\nold 5\nsize 5\n");
    free(text);
    assert_int_equal(fa_audit_log_prove_consistency(log, 2, 6, &text, &len, &err), FA_ERR_RANGE);
    assert_null(text);
    assert_int_equal(fa_audit_log_prove_consistency(log, 4, 3, &text, &len, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "the latest checkpoint signs 5"));
    fa_audit_log_close(log);
}

static void test_record_rules(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    struct rec_buf b;
    fa_error err;
    struct fix saved;

    append_n(f, log, 2, 2);
    saved = *f;

    /* the same round and attempt again: refused */
    f->round--;
    rec_fill(f, &b, 0, 2, 0);
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "does not come after"));
    *f = saved;
    /* a model that does not follow the last one */
    rec_fill(f, &b, 0, 2, 0);
    b.prev[0] ^= 1;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "previous model"));
    *f = saved;
    /* malformed records */
    rec_fill(f, &b, 0, 2, 0);
    b.r.new_model_sha256.len = 31;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    *f = saved;
    rec_fill(f, &b, 0, 2, 0);
    b.parts[0] = (char *)"zz-last";
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    *f = saved;
    rec_fill(f, &b, 0, 2, 1);
    b.dropped[0] = (char *)region_ids[1];
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "both a participant and dropped"));
    *f = saved;
    rec_fill(f, &b, 0, 2, 0);
    b.r.n_commitments = 1;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    *f = saved;
    rec_fill(f, &b, 0, 2, 0);
    b.c[1].signature.len = 10;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    *f = saved;
    rec_fill(f, &b, 0, 2, 0);
    b.r.version = 2;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
    *f = saved;
    /* share faults: a participant, sorted, a known secret, an owner of the
     * right set */
    {
        static const struct {
            const char *region, *owner, *secret, *why;
        } bad[] = {
            {"nobody", NULL, "self_mask", "not a participant"},
            {NULL, NULL, "key", "is not self_mask or mask_key"},
            {NULL, "nobody", "self_mask", "is not a participant"},
            {NULL, NULL, "mask_key", "is not a dropped region"},
        };
        Fedagg__ShareFault sf = FEDAGG__SHARE_FAULT__INIT, sf2 = FEDAGG__SHARE_FAULT__INIT;
        Fedagg__ShareFault *sfp[2] = {&sf, &sf2};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            rec_fill(f, &b, 0, 2, 1);
            sf.region = (char *)(bad[i].region ? bad[i].region : b.parts[1]);
            sf.owner = (char *)(bad[i].owner ? bad[i].owner : b.parts[0]);
            sf.secret = (char *)bad[i].secret;
            b.r.n_share_faults = 1;
            b.r.share_faults = sfp;
            assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
            assert_non_null(strstr(err.msg, bad[i].why));
            *f = saved;
        }
        rec_fill(f, &b, 0, 2, 1); /* not sorted */
        sf.region = b.parts[1];
        sf2.region = b.parts[0];
        sf.owner = sf2.owner = b.parts[0];
        sf.secret = sf2.secret = "self_mask";
        b.r.n_share_faults = 2;
        b.r.share_faults = sfp;
        assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_INVAL);
        assert_non_null(strstr(err.msg, "not sorted"));
        *f = saved;
        rec_fill(f, &b, 0, 2, 1); /* and a good one is taken */
        sf.region = b.parts[0];
        sf.owner = b.dropped[0];
        sf.secret = "mask_key";
        b.r.n_share_faults = 1;
        b.r.share_faults = sfp;
        assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), 0);
        chain_advance(f, &b);
        saved = *f;
    }
    /* a batch with one bad record writes nothing */
    {
        struct rec_buf b1, b2;
        uint8_t *e[2];
        size_t l[2];
        rec_fill(f, &b1, 0, 2, 0);
        chain_advance(f, &b1);
        rec_fill(f, &b2, 0, 2, 0);
        b2.r.federation_id = "";
        l[0] = fedagg__audit_record__get_packed_size(&b1.r);
        l[1] = fedagg__audit_record__get_packed_size(&b2.r);
        e[0] = malloc(l[0]);
        e[1] = malloc(l[1]);
        fedagg__audit_record__pack(&b1.r, e[0]);
        fedagg__audit_record__pack(&b2.r, e[1]);
        assert_int_equal(
            fa_audit_log_append_encoded(log, (const uint8_t *const *)e, l, 2, NULL, &err),
            FA_ERR_INVAL);
        free(e[0]);
        free(e[1]);
    }
    *f = saved;
    assert_int_equal(fa_audit_log_size(log), 3);
    /* and the log still takes a good one */
    append_n(f, log, 1, 3);
    fa_audit_log_close(log);
    assert_verifies(f, 4);
}

/* A region's decision between aggregations, and a service log of lifecycle
 * records (each about its own federation, no round, no model): both are
 * actions, appended at the (round, attempt) in flight and verified; the
 * rules of each are held. */
static void test_decision_and_lifecycle(void **state)
{
    static const char cfg_text[] = "federation_id: \"x\"\n";
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    Fedagg__AuditRecord r = FEDAGG__AUDIT_RECORD__INIT;
    Fedagg__SignedDecision sd = FEDAGG__SIGNED_DECISION__INIT;
    Fedagg__FederationLifecycle lc = FEDAGG__FEDERATION_LIFECYCLE__INIT;
    uint8_t stmt[8] = {1, 2, 3}, sig[64] = {0}, model[32], zero[32] = {0}, sha[32];
    char side[400];
    struct rec_buf b;
    fa_error err;

    append_n(f, log, 1, 2);
    memcpy(model, f->model, 32);
    r.version = 1;
    r.federation_id = "fed-a";
    r.round = f->round + 1; /* the round in flight */
    r.prev_version = r.new_version = f->version;
    r.prev_model_sha256.data = r.new_model_sha256.data = model;
    r.prev_model_sha256.len = r.new_model_sha256.len = 32;
    sd.statement.data = stmt;
    sd.statement.len = sizeof(stmt);
    sd.signature.data = sig;
    sd.signature.len = 64;
    r.decision = &sd;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), 0);
    /* twice in one attempt, as operators' actions may be */
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), 0);
    sd.signature.len = 63;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "not 64"));
    sd.signature.len = 64;
    r.admin = &(Fedagg__AdminAction)FEDAGG__ADMIN_ACTION__INIT;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "not several"));
    r.admin = NULL;
    /* the aggregation of the round in flight comes after them */
    rec_fill(f, &b, 0, 3, 0);
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), 0);
    chain_advance(f, &b);
    fa_audit_log_close(log);
    assert_verifies(f, 4);

    /* A service log: lifecycle records of two federations. */
    remove(f->path);
    snprintf(side, sizeof(side), "%s.checkpoints", f->path);
    remove(side);
    snprintf(side, sizeof(side), "%s.tree", f->path);
    remove(side);
    log = open_w(f, NULL);
    memset(&r, 0, sizeof(r));
    r = (Fedagg__AuditRecord)FEDAGG__AUDIT_RECORD__INIT;
    r.version = 1;
    r.prev_model_sha256.data = r.new_model_sha256.data = zero;
    r.prev_model_sha256.len = r.new_model_sha256.len = 32;
    r.lifecycle = &lc;
    lc.operator_ = "alice";
    lc.team = "vision";
    lc.action = "create";
    lc.config.data = (uint8_t *)cfg_text;
    lc.config.len = strlen(cfg_text);
    crypto_hash_sha256(sha, lc.config.data, lc.config.len);
    lc.config_sha256.data = sha;
    lc.config_sha256.len = 32;
    r.federation_id = "vision-a";
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), 0);
    r.federation_id = "vision-b";
    sha[0] ^= 1;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "not the SHA-256 of its federation file"));
    sha[0] ^= 1;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), 0);
    lc.action = "pause";
    lc.config.len = lc.config_sha256.len = 0;
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), 0);
    lc.action = "delete";
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), FA_ERR_INVAL);
    lc.action = "archive";
    lc.operator_ = "";
    assert_int_equal(fa_audit_log_append(log, &r, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "names no operator"));
    fa_audit_log_close(log);
    assert_verifies(f, 3);
}

static void test_region_signatures(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    fa_audit_verify_result res;
    struct findings fd;
    struct rec_buf b;
    fa_error err;

    append_n(f, log, 2, 3);
    /* a commitment signed by the wrong key is logged (the aggregator checks
     * them when it receives them; the log only records) but verify finds it */
    rec_fill(f, &b, 0, 3, 0);
    {
        uint8_t sk[64], pk[32], other[32];
        memset(other, 0x99, 32);
        crypto_sign_seed_keypair(pk, sk, other);
        assert_int_equal(fa_secagg_commitment_sign(other, "fed-a", b.r.round, 0, region_ids[1],
                                                   FA_SECAGG_UPLOAD_BLAKE3, b.up[1], b.sig[1]),
                         0);
    }
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), 0);
    chain_advance(f, &b);
    /* a region that uploaded and dropped out before signing: recorded
     * unsigned, which verify notes but does not count as a problem */
    rec_fill(f, &b, 0, 3, 0);
    b.c[2].signature.len = 0;
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), 0);
    chain_advance(f, &b);
    fa_audit_log_close(log);

    assert_int_equal(verify(f, 1, &res, &fd), FA_ERR_VERIFY);
    assert_true(res.first_bad == 2);
    assert_non_null(strstr(fd.first, "region eu-west"));
    assert_int_equal(res.region_signatures, 10);
    assert_int_equal(fd.notes, 1);
    /* without region keys, commitments are only counted */
    assert_int_equal(verify(f, 0, &res, &fd), 0);
    assert_int_equal(res.region_unknown, 12);
    assert_int_equal(fd.notes, 1);
}

/* The one commitment check (fedagg audit verify and audit check-proof):
 * a good signature, an unsigned commitment, another region's key, a flipped
 * hash, wrong lengths, the key lookup; a record made before BLAKE3 (its
 * commitment a SHA-256, upload_digest_alg unset) verifies, and neither
 * passes for the other. */
static void test_commitment_check(void **state)
{
    struct fix *f = *state;
    struct rec_buf b;

    rec_fill(f, &b, 0, 3, 0);
    assert_ptr_equal(fa_audit_region_key_find(f->rkeys, NREG, region_ids[1]), f->rkeys[1].pk);
    assert_null(fa_audit_region_key_find(f->rkeys, NREG, "nowhere"));
    assert_null(fa_audit_region_key_find(f->rkeys, NREG, NULL));
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[0], f->rpk[0]), 0);
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[0], f->rpk[1]), FA_ERR_VERIFY);
    b.r.attempt = 1; /* signed for attempt 0 */
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[0], f->rpk[0]), FA_ERR_VERIFY);
    b.r.attempt = 0;
    b.up[1][5] ^= 1;
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[1], f->rpk[1]), FA_ERR_VERIFY);
    b.c[2].upload_digest.len = 31;
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_VERIFY);
    b.c[2].upload_digest.len = 32;
    b.c[2].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_SHA256;
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_VERIFY);
    assert_string_equal(fa_audit_upload_alg_name(&b.c[2]), "sha256");
    assert_int_equal(fa_secagg_commitment_sign(f->rseed[2], "fed-a", b.r.round, 0, region_ids[2],
                                               FA_SECAGG_UPLOAD_SHA256, b.up[2], b.sig[2]),
                     0);
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), 0);
    b.c[2].upload_digest_alg = FEDAGG__UPLOAD_DIGEST__UPLOAD_DIGEST_BLAKE3;
    assert_string_equal(fa_audit_upload_alg_name(&b.c[2]), "blake3");
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_VERIFY);
    b.c[2].upload_digest_alg = (Fedagg__UploadDigest)9;
    assert_int_equal(fa_audit_upload_alg(&b.c[2]), -1);
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_VERIFY);
    b.c[2].signature.len = 63;
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_VERIFY);
    b.c[2].signature.len = 0;
    assert_int_equal(fa_audit_commitment_check(&b.r, &b.c[2], f->rpk[2]), FA_ERR_NOTFOUND);
}

/* Every single bit of a small log, and of its checkpoints file, flipped in
 * turn: verify reports a problem at the record that holds the bit (the file
 * header: -1), and opening the log refuses it (or, for the last record,
 * which a checkpoint covers, too). */
static void test_every_bit_flip(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    struct snap s;
    size_t off[16], n, k, cn, coff[16];
    int fdsc;
    char cpath[400];

    append_n(f, log, 3, 1);
    fa_audit_log_close(log);
    assert_verifies(f, 3);
    snap_take(f, &s);
    n = frames(s.log, s.log_len, off, 15);
    assert_int_equal(n, 3);
    assert_int_equal(off[n], s.log_len);

    /* (region signatures are covered by test_region_signatures; leaving
     * them out keeps the ~11000 verifications here fast) */
    with_region_keys = 0;
    fdsc = open(f->path, O_RDWR);
    assert_true(fdsc >= 0);
    for (size_t byte = 0; byte < s.log_len; byte++) {
        int64_t want = -1;
        for (k = 0; k < n; k++)
            if (byte >= off[k] && byte < off[k + 1])
                want = (int64_t)k;
        for (int bit = 0; bit < 8; bit++) {
            uint8_t c = (uint8_t)(s.log[byte] ^ (1u << bit));
            fa_audit_log *ro = NULL;
            fa_error err;
            assert_int_equal(pwrite(fdsc, &c, 1, (off_t)byte), 1);
            assert_bad_at(f, want, "log bit flip");
            /* opening (read-only, so that nothing is repaired) refuses it too
             * (one bit per byte is enough here: open reads what verify reads) */
            if (bit == (int)(byte % 8)) {
                assert_true(fa_audit_log_open_readonly(&ro, f->path, &f->v, NULL, &err) < 0);
                assert_null(ro);
            }
        }
        assert_int_equal(pwrite(fdsc, &s.log[byte], 1, (off_t)byte), 1);
    }
    close(fdsc);
    assert_verifies(f, 3);

    /* the checkpoints: 0 (empty tree) .. 3 */
    companion(f, ".checkpoints", cpath, sizeof(cpath));
    cn = frames(s.ckpt, s.ckpt_len, coff, 15);
    assert_int_equal(cn, 4);
    fdsc = open(cpath, O_RDWR);
    for (size_t byte = 0; byte < s.ckpt_len; byte++) {
        int64_t want = -1;
        for (k = 0; k < cn; k++)
            if (byte >= coff[k] && byte < coff[k + 1])
                want = (int64_t)k - 1; /* checkpoint k signs tree size k */
        for (int bit = 0; bit < 8; bit++) {
            uint8_t c = (uint8_t)(s.ckpt[byte] ^ (1u << bit));
            assert_int_equal(pwrite(fdsc, &c, 1, (off_t)byte), 1);
            assert_bad_at(f, want, "checkpoint bit flip");
        }
        assert_int_equal(pwrite(fdsc, &s.ckpt[byte], 1, (off_t)byte), 1);
    }
    close(fdsc);
    with_region_keys = 1;
    assert_verifies(f, 3);
    snap_free(&s);
}

/* Deleting, reordering, duplicating and truncating whole records. */
static void test_record_surgery(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    struct snap s;
    size_t off[16], n;
    uint8_t *buf;

    append_n(f, log, 8, 2);
    fa_audit_log_close(log);
    snap_take(f, &s);
    n = frames(s.log, s.log_len, off, 15);
    assert_int_equal(n, 8);
    buf = malloc(2 * s.log_len);

#define REC(i) (s.log + off[i]), (off[(i) + 1] - off[i])
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        /* delete record i */
        memcpy(buf, s.log, off[i]);
        len = off[i];
        memcpy(buf + len, s.log + off[i + 1], s.log_len - off[i + 1]);
        len += s.log_len - off[i + 1];
        spit(f->path, buf, len);
        assert_bad_at(f, (int64_t)i, "deleted record");

        /* duplicate record i */
        memcpy(buf, s.log, off[i + 1]);
        len = off[i + 1];
        memcpy(buf + len, REC(i));
        len += off[i + 1] - off[i];
        memcpy(buf + len, s.log + off[i + 1], s.log_len - off[i + 1]);
        len += s.log_len - off[i + 1];
        spit(f->path, buf, len);
        assert_bad_at(f, (int64_t)i + 1, "duplicated record");

        /* swap records i and j > i */
        for (size_t j = i + 1; j < n; j++) {
            memcpy(buf, s.log, off[0]); /* the file header */
            len = off[0];
            for (size_t k = 0; k < n; k++) {
                size_t src = k == i ? j : k == j ? i : k;
                memcpy(buf + len, REC(src));
                len += off[src + 1] - off[src];
            }
            spit(f->path, buf, len);
            assert_bad_at(f, (int64_t)i, "reordered records");
        }

        /* truncate after record i (whole records gone) and inside record i */
        spit(f->path, s.log, off[i]);
        assert_bad_at(f, (int64_t)i, "truncated log");
        spit(f->path, s.log, off[i] + 5);
        assert_bad_at(f, (int64_t)i, "truncated inside a record");
    }
#undef REC
    spit(f->path, s.log, s.log_len);
    assert_verifies(f, 8);

    /* the checkpoints file cut after checkpoint k: records k.. unsigned */
    {
        size_t coff[16], cn;
        char cpath[400];
        companion(f, ".checkpoints", cpath, sizeof(cpath));
        cn = frames(s.ckpt, s.ckpt_len, coff, 15);
        assert_int_equal(cn, 9);
        for (size_t k = 1; k < cn; k++) {
            spit(cpath, s.ckpt, coff[k]);
            assert_bad_at(f, (int64_t)k - 1, "checkpoints truncated");
        }
        spit(cpath, s.ckpt, s.ckpt_len);
    }
    assert_verifies(f, 8);
    free(buf);
    snap_free(&s);
}

/* Checkpoints by another key, with a changed root, or for a rewritten log. */
static void test_forged_checkpoints(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    struct snap s;
    char cpath[400];
    size_t coff[16], cn;
    fa_note_signer *mallory;
    uint8_t seed[32];
    fa_error err;

    append_n(f, log, 4, 1);
    fa_audit_log_close(log);
    snap_take(f, &s);
    companion(f, ".checkpoints", cpath, sizeof(cpath));
    cn = frames(s.ckpt, s.ckpt_len, coff, 15);
    assert_int_equal(cn, 5);
    memset(seed, 0x13, 32);
    assert_int_equal(fa_note_signer_new(&mallory, "fedagg.test/fed-a", seed, 32, &err), 0);

    for (size_t k = 1; k < cn; k++) {
        uint8_t *buf = malloc(s.ckpt_len + 4096), *frame;
        size_t len, nlen;
        char *note;
        fa_checkpoint cp;
        uLong crc;

        /* checkpoint k replaced by one with the same tree, signed by another key */
        assert_int_equal(
            fa_checkpoint_parse((char *)s.ckpt + coff[k] + 4, coff[k + 1] - coff[k] - 8, &cp, &err),
            0);
        assert_int_equal(fa_checkpoint_sign(mallory, &cp, &note, &nlen, &err), 0);
        memcpy(buf, s.ckpt, coff[k]);
        len = coff[k];
        frame = buf + len;
        frame[0] = (uint8_t)(nlen >> 24);
        frame[1] = (uint8_t)(nlen >> 16);
        frame[2] = (uint8_t)(nlen >> 8);
        frame[3] = (uint8_t)nlen;
        memcpy(frame + 4, note, nlen);
        crc = crc32(crc32(0L, Z_NULL, 0), frame, (uInt)(4 + nlen));
        frame[4 + nlen] = (uint8_t)(crc >> 24);
        frame[5 + nlen] = (uint8_t)(crc >> 16);
        frame[6 + nlen] = (uint8_t)(crc >> 8);
        frame[7 + nlen] = (uint8_t)crc;
        len += nlen + 8;
        memcpy(buf + len, s.ckpt + coff[k + 1], s.ckpt_len - coff[k + 1]);
        len += s.ckpt_len - coff[k + 1];
        spit(cpath, buf, len);
        assert_bad_at(f, (int64_t)k - 1, "checkpoint signed by another key");

        /* the same with a changed root and a valid checksum (a forgery) */
        cp.root[5] ^= 0x20;
        free(note);
        assert_int_equal(fa_checkpoint_sign(mallory, &cp, &note, &nlen, &err), 0);
        {
            /* keep our key's signature line: a body change breaks it */
            char *orig = strndup((char *)s.ckpt + coff[k] + 4, coff[k + 1] - coff[k] - 8);
            char *sig = strstr(orig, "\n\n");
            char *body_end = strstr(note, "\n\n");
            size_t bl = (size_t)(body_end - note);
            char forged[1024];
            snprintf(forged, sizeof(forged), "%.*s%s", (int)bl, note, sig);
            nlen = strlen(forged);
            memcpy(frame + 4, forged, nlen);
            frame[0] = (uint8_t)(nlen >> 24);
            frame[1] = (uint8_t)(nlen >> 16);
            frame[2] = (uint8_t)(nlen >> 8);
            frame[3] = (uint8_t)nlen;
            crc = crc32(crc32(0L, Z_NULL, 0), frame, (uInt)(4 + nlen));
            frame[4 + nlen] = (uint8_t)(crc >> 24);
            frame[5 + nlen] = (uint8_t)(crc >> 16);
            frame[6 + nlen] = (uint8_t)(crc >> 8);
            frame[7 + nlen] = (uint8_t)crc;
            len = coff[k] + nlen + 8;
            memcpy(buf + len, s.ckpt + coff[k + 1], s.ckpt_len - coff[k + 1]);
            len += s.ckpt_len - coff[k + 1];
            spit(cpath, buf, len);
            assert_bad_at(f, (int64_t)k - 1, "forged checkpoint root");
            free(orig);
        }
        free(note);
        free(buf);
    }
    spit(cpath, s.ckpt, s.ckpt_len);
    assert_verifies(f, 4);

    /* the whole log rewritten and re-signed by another key: verify with our
     * key finds no valid checkpoint; opening with our key refuses it */
    {
        fa_audit_log *m;
        fa_audit_open_report rep;
        struct fix g = *f;
        char mpath[400];
        snprintf(mpath, sizeof(mpath), "%s/mallory.log", f->dir);
        assert_int_equal(
            fa_audit_log_open(&m, mpath, mallory, NULL, FA_AUDIT_LOG_NOSYNC, &rep, &err), 0);
        memset(g.model, 0xee, 32);
        g.version = 0;
        g.round = 0;
        append_n(&g, m, 4, 1);
        fa_audit_log_close(m);
        snprintf(g.path, sizeof(g.path), "%s", mpath);
        assert_bad_at(&g, -1, "log signed by another key");
        assert_int_equal(
            fa_audit_log_open(&m, mpath, f->signer, NULL, FA_AUDIT_LOG_NOSYNC, &rep, &err),
            FA_ERR_NOTFOUND);
        assert_non_null(strstr(err.msg, "no signature"));
    }
    fa_note_signer_del(mallory);
    snap_free(&s);
}

/* A crash while the last record was written, at every byte offset; while the
 * last checkpoint was written, at every byte offset; between the two. */
static void test_crash_recovery(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    fa_audit_open_report rep;
    struct snap before, after, cut;
    size_t off[16], n, coff[16], cn, flen, clen;
    struct rec_buf last;
    fa_error err;
    struct fix saved;

    append_n(f, log, 3, 2);
    fa_audit_log_close(log);
    snap_take(f, &before);
    saved = *f;
    log = open_w(f, NULL);
    rec_fill(f, &last, 0, 2, 1);
    assert_int_equal(fa_audit_log_append(log, &last.r, NULL, &err), 0);
    fa_audit_log_close(log);
    snap_take(f, &after);
    n = frames(after.log, after.log_len, off, 15);
    assert_int_equal(n, 4);
    flen = off[4] - off[3];
    cn = frames(after.ckpt, after.ckpt_len, coff, 15);
    assert_int_equal(cn, 5);
    clen = coff[5] - coff[4];

    /* the record cut at every byte: recovered to the 3 records before it */
    for (size_t k = 0; k < flen; k++) {
        cut = before;
        cut.log = after.log;
        cut.log_len = off[3] + k;
        snap_put(f, &cut);
        log = open_w(f, &rep);
        assert_int_equal(rep.records, 3);
        assert_int_equal(rep.torn_log_bytes, k);
        assert_int_equal(rep.unsigned_records, 0);
        fa_audit_log_close(log);
        assert_verifies(f, 3);
        {
            struct stat st;
            assert_int_equal(stat(f->path, &st), 0);
            assert_int_equal((size_t)st.st_size, off[3]);
        }
    }
    /* appending the same record again gives exactly the files of the run
     * that did not crash (Ed25519 signatures are deterministic) */
    {
        struct snap again;
        *f = saved;
        log = open_w(f, NULL);
        rec_fill(f, &last, 0, 2, 1);
        assert_int_equal(fa_audit_log_append(log, &last.r, NULL, &err), 0);
        fa_audit_log_close(log);
        snap_take(f, &again);
        assert_int_equal(again.log_len, after.log_len);
        assert_memory_equal(again.log, after.log, after.log_len);
        assert_int_equal(again.ckpt_len, after.ckpt_len);
        assert_memory_equal(again.ckpt, after.ckpt, after.ckpt_len);
        assert_memory_equal(again.tree, after.tree, after.tree_len);
        snap_free(&again);
    }
    /* the whole record written, its checkpoint not (with and without its
     * tree nodes): the record is kept and signed on open */
    for (int with_nodes = 0; with_nodes < 2; with_nodes++) {
        struct snap got;
        cut = before;
        cut.log = after.log;
        cut.log_len = after.log_len;
        if (with_nodes) {
            cut.tree = after.tree;
            cut.tree_len = after.tree_len;
        }
        snap_put(f, &cut);
        log = open_w(f, &rep);
        assert_int_equal(rep.records, 4);
        assert_int_equal(rep.unsigned_records, 1);
        assert_int_equal(rep.tree_rebuilt, !with_nodes);
        fa_audit_log_close(log);
        snap_take(f, &got);
        assert_int_equal(got.ckpt_len, after.ckpt_len);
        assert_memory_equal(got.ckpt, after.ckpt, after.ckpt_len);
        assert_memory_equal(got.tree, after.tree, after.tree_len);
        snap_free(&got);
        assert_verifies(f, 4);
    }
    /* two records without a checkpoint cannot come from one crashed append:
     * refused, unless a bulk import is being resumed on purpose */
    {
        size_t c3 = coff[3];
        cut = after;
        cut.ckpt_len = c3;
        snap_put(f, &cut);
        assert_int_equal(
            fa_audit_log_open(&log, f->path, f->signer, NULL, FA_AUDIT_LOG_NOSYNC, &rep, &err),
            FA_ERR_CORRUPT);
        assert_non_null(strstr(err.msg, "records 2..3 are not covered"));
        assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL,
                                           FA_AUDIT_LOG_NOSYNC | FA_AUDIT_LOG_RESIGN_TAIL, &rep,
                                           &err),
                         0);
        assert_int_equal(rep.unsigned_records, 2);
        fa_audit_log_close(log);
    }
    /* the checkpoint cut at every byte: cut off, then signed again */
    for (size_t k = 1; k < clen; k++) {
        struct snap got;
        cut = after;
        cut.ckpt_len = coff[4] + k;
        snap_put(f, &cut);
        /* read-only open only reports */
        assert_int_equal(fa_audit_log_open_readonly(&log, f->path, &f->v, &rep, &err), 0);
        assert_int_equal(rep.torn_checkpoint_bytes, k);
        assert_int_equal(rep.unsigned_records, 1);
        assert_int_equal(fa_audit_log_signed_size(log), 3);
        fa_audit_log_close(log);
        log = open_w(f, &rep);
        assert_int_equal(rep.torn_checkpoint_bytes, k);
        assert_int_equal(rep.unsigned_records, 1);
        fa_audit_log_close(log);
        snap_take(f, &got);
        assert_int_equal(got.ckpt_len, after.ckpt_len);
        assert_memory_equal(got.ckpt, after.ckpt, after.ckpt_len);
        snap_free(&got);
    }
    assert_verifies(f, 4);
    snap_free(&before);
    snap_free(&after);
}

/* Damage while open: the log cut short under a writer.  A read of the cut
 * record is FA_ERR_CORRUPT (it was FA_ERR_IO "read: Success"), the check
 * finds it, every append is refused from then on, and the damage is
 * remembered; a header overwritten is found the same way. */
static void test_damage_while_open(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    struct rec_buf b;
    uint8_t *rec = NULL;
    size_t len, sz;
    char why[512];
    fa_error err;
    uint8_t *raw;

    append_n(f, log, 3, 2);
    assert_int_equal(fa_audit_log_check(log, &err), 0);
    assert_int_equal(fa_audit_log_damaged(log, why, sizeof(why)), 0);
    raw = slurp(f->path, &sz);
    assert_int_equal(truncate(f->path, (off_t)(sz - 5)), 0);
    assert_int_equal(fa_audit_log_read(log, 2, &rec, &len, &err), FA_ERR_CORRUPT);
    assert_null(rec);
    assert_null(strstr(err.msg, "Success"));
    assert_non_null(strstr(err.msg, "the file ends before what was written to it"));
    assert_int_equal(fa_audit_log_damaged(log, why, sizeof(why)), 1);
    assert_int_equal(fa_audit_log_check(log, &err), FA_ERR_CORRUPT);
    /* the record before it still reads */
    assert_int_equal(fa_audit_log_read(log, 1, &rec, &len, &err), 0);
    free(rec);
    rec_fill(f, &b, 0, 2, 0);
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_CORRUPT);
    fa_audit_log_close(log);
    spit(f->path, raw, sz); /* as it was */

    /* found by the check alone, before any read: cut, then overwritten */
    log = open_w(f, NULL);
    assert_int_equal(truncate(f->path, (off_t)(sz - 1)), 0);
    assert_int_equal(fa_audit_log_check(log, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "cut short"));
    fa_audit_log_close(log);
    spit(f->path, raw, sz);
    log = open_w(f, NULL);
    {
        FILE *fp = fopen(f->path, "r+b");
        assert_non_null(fp);
        fputc('X', fp);
        fclose(fp);
    }
    assert_int_equal(fa_audit_log_check(log, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "header was overwritten"));
    rec_fill(f, &b, 0, 2, 0);
    assert_int_equal(fa_audit_log_append(log, &b.r, NULL, &err), FA_ERR_CORRUPT);
    fa_audit_log_close(log);
    free(raw);
}

/* fedagg audit repair: a log cut inside its last record goes back to the
 * checkpoint before it; a record damaged in the middle, to the last
 * checkpoint before that; the damaged files are kept byte for byte under
 * .damaged names; the repaired log opens for writing, takes appends and
 * verifies; an intact log is left alone; a wrong key keeps nothing. */
static void test_repair(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    fa_audit_repair_report rep;
    fa_audit_open_report orep;
    fa_note_verifier wrong;
    struct snap s;
    size_t off[16], klen;
    char kept[700], cmd[1400];
    uint8_t *k;
    fa_error err;

    append_n(f, log, 5, 2);
    fa_audit_log_close(log);
    assert_int_equal(fa_audit_log_repair(f->path, &f->v, 0, &rep, &err), 0);
    assert_int_equal(rep.intact, 1);
    assert_int_equal(rep.records_kept, 5);
    assert_int_equal(fa_audit_log_repair(f->path, NULL, 0, &rep, &err), FA_ERR_INVAL);

    snap_take(f, &s);
    frames(s.log, s.log_len, off, 15);
    /* cut inside record 4: records 0..3 and their checkpoints stay */
    spit(f->path, s.log, off[4] + 6);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &orep, &err),
                     FA_ERR_CORRUPT);
    /* a dry run writes nothing */
    assert_int_equal(fa_audit_log_repair(f->path, &f->v, 1, &rep, &err), 0);
    assert_int_equal(rep.intact, 0);
    assert_int_equal(rep.records_found, 4);
    assert_int_equal(rep.records_kept, 4);
    assert_int_equal(rep.checkpoints_found, 6); /* the empty tree's, then one a record */
    assert_int_equal(rep.checkpoints_kept, 5);
    assert_int_equal(rep.moved, 0);
    /* a key that signed nothing here: nothing can be kept */
    memset(&wrong, 0, sizeof(wrong));
    wrong = f->v;
    wrong.pk[0] ^= 1;
    assert_int_equal(fa_audit_log_repair(f->path, &wrong, 0, &rep, &err), FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "no checkpoint signed by this key"));
    assert_int_equal(fa_audit_log_repair(f->path, &f->v, 0, &rep, &err), 0);
    assert_int_equal(rep.records_kept, 4);
    assert_int_equal(rep.moved, 3);
    snprintf(kept, sizeof(kept), "%s%s", f->path, rep.suffix);
    k = slurp(kept, &klen);
    assert_int_equal(klen, off[4] + 6);
    assert_memory_equal(k, s.log, klen); /* the evidence, as it was */
    free(k);
    snprintf(kept, sizeof(kept), "%s.checkpoints%s", f->path, rep.suffix);
    k = slurp(kept, &klen);
    assert_int_equal(klen, s.ckpt_len);
    assert_memory_equal(k, s.ckpt, klen);
    free(k);
    /* the repaired log: 4 records, verifies, takes the next one */
    f->version = 4;
    {
        /* the model chain of record 3 */
        uint8_t *rec;
        size_t len;
        Fedagg__AuditRecord *r;
        assert_int_equal(fa_audit_log_open_readonly(&log, f->path, &f->v, NULL, &err), 0);
        assert_int_equal(fa_audit_log_size(log), 4);
        assert_int_equal(fa_audit_log_read(log, 3, &rec, &len, &err), 0);
        r = fedagg__audit_record__unpack(NULL, len, rec);
        assert_non_null(r);
        f->version = r->new_version;
        memcpy(f->model, r->new_model_sha256.data, 32);
        fedagg__audit_record__free_unpacked(r, NULL);
        free(rec);
        fa_audit_log_close(log);
    }
    assert_verifies(f, 4);
    log = open_w(f, NULL);
    append_n(f, log, 1, 2);
    fa_audit_log_close(log);
    assert_verifies(f, 5);

    /* record 1 damaged in the middle: back to the checkpoint of 1 record */
    snap_free(&s);
    snap_take(f, &s);
    frames(s.log, s.log_len, off, 15);
    s.log[off[1] + 9] ^= 0x10;
    spit(f->path, s.log, s.log_len);
    assert_int_equal(fa_audit_log_repair(f->path, &f->v, 0, &rep, &err), 0);
    assert_int_equal(rep.records_found, 1);
    assert_int_equal(rep.records_kept, 1);
    assert_int_equal(fa_audit_log_open_readonly(&log, f->path, &f->v, NULL, &err), 0);
    assert_int_equal(fa_audit_log_size(log), 1);
    fa_audit_log_close(log);
    snprintf(cmd, sizeof(cmd), "ls %s*.damaged-* | wc -l | grep -qx 6", f->path);
    assert_int_equal(system(cmd), 0); /* two repairs, three files each, none lost */
    snap_free(&s);
}

static void test_open_refuses(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL), *log2;
    fa_audit_open_report rep;
    fa_error err;
    struct snap s;
    char p[400];
    size_t off[16];

    append_n(f, log, 4, 1);
    /* one writer at a time */
    assert_int_equal(fa_audit_log_open(&log2, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_STATE);
    fa_audit_log_close(log);
    snap_take(f, &s);
    frames(s.log, s.log_len, off, 15);

    /* a committed record changed */
    s.log[off[2] + 20] ^= 0x40;
    spit(f->path, s.log, s.log_len);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "record 2 "));
    s.log[off[2] + 20] ^= 0x40;
    /* the last, committed, record cut short: not a torn write */
    spit(f->path, s.log, s.log_len - 3);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "record 3 "));
    /* whole committed records gone */
    spit(f->path, s.log, off[3]);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "missing"));
    spit(f->path, s.log, s.log_len);
    /* no checkpoints file */
    companion(f, ".checkpoints", p, sizeof(p));
    unlink(p);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_CORRUPT);
    spit(p, s.ckpt, s.ckpt_len);
    /* another origin */
    {
        fa_note_signer *other;
        uint8_t seed[32];
        memset(seed, 0x42, 32);
        assert_int_equal(fa_note_signer_new(&other, "fedagg.test/fed-b", seed, 32, &err), 0);
        assert_int_equal(fa_audit_log_open(&log, f->path, other, NULL, 0, &rep, &err),
                         FA_ERR_INVAL);
        assert_non_null(strstr(err.msg, "origin"));
        fa_note_signer_del(other);
    }
    /* not a log */
    spit(f->path, "hello, world, this is not a log", 31);
    assert_int_equal(fa_audit_log_open(&log, f->path, f->signer, NULL, 0, &rep, &err),
                     FA_ERR_CORRUPT);
    spit(f->path, s.log, s.log_len);
    log = open_w(f, &rep);
    assert_int_equal(rep.records, 4);
    fa_audit_log_close(log);
    snap_free(&s);
}

/* The tree file is derived: damaged, short or missing, it is rebuilt (the
 * writer) or held in memory (read-only), and proofs stay right. */
static void test_tree_rebuild(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    fa_audit_open_report rep;
    fa_audit_verify_result res;
    struct findings fd;
    struct snap s;
    char tpath[400];
    fa_error err;
    uint8_t root[32], proof[FA_MERKLE_MAX_PROOF * 32], leaf[32];
    size_t plen;

    append_n(f, log, 13, 1);
    assert_int_equal(fa_audit_log_root(log, 13, root, &err), 0);
    fa_audit_log_close(log);
    snap_take(f, &s);
    companion(f, ".tree", tpath, sizeof(tpath));

    for (int mode = 0; mode < 3; mode++) {
        for (int ro = 0; ro < 2; ro++) {
            if (mode == 0) { /* a node flipped */
                s.tree[16 + 32 * 9 + 3] ^= 1;
                spit(tpath, s.tree, s.tree_len);
                s.tree[16 + 32 * 9 + 3] ^= 1;
            } else if (mode == 1) { /* short */
                spit(tpath, s.tree, s.tree_len - 32 * 5);
            } else {
                unlink(tpath);
            }
            /* verify: a note, not a problem */
            assert_int_equal(verify(f, 1, &res, &fd), 0);
            assert_int_equal(fd.notes, mode == 2 ? 0 : 1);
            if (ro)
                assert_int_equal(fa_audit_log_open_readonly(&log, f->path, &f->v, &rep, &err), 0);
            else
                log = open_w(f, &rep);
            assert_int_equal(rep.tree_rebuilt, 1);
            for (uint64_t i = 0; i < 13; i++) {
                uint8_t *rec;
                size_t len;
                assert_int_equal(fa_audit_log_read(log, i, &rec, &len, &err), 0);
                fa_merkle_leaf_hash(rec, len, leaf);
                free(rec);
                assert_int_equal(fa_audit_log_inclusion_proof(log, i, 13, proof, &plen, &err), 0);
                assert_int_equal(fa_merkle_verify_inclusion(leaf, i, 13, proof, plen, root), 0);
            }
            fa_audit_log_close(log);
            if (!ro) {
                struct snap t;
                snap_take(f, &t);
                assert_int_equal(t.tree_len, s.tree_len);
                assert_memory_equal(t.tree, s.tree, s.tree_len);
                snap_free(&t);
            }
        }
    }
    assert_verifies(f, 13);
    snap_free(&s);
}

static void test_batch_and_attempts(void **state)
{
    struct fix *f = *state;
    fa_audit_log *log = open_w(f, NULL);
    fa_audit_append_result res;
    fa_error err;
    uint8_t *enc[20];
    size_t len[20];
    uint64_t idx;

    /* rounds 1..20 in one commit, attempts 0 and 1 alternating, 2 of 3 take part */
    for (int i = 0; i < 20; i++) {
        struct rec_buf b;
        rec_fill(f, &b, (uint32_t)(i % 2), 2, 1);
        len[i] = fedagg__audit_record__get_packed_size(&b.r);
        enc[i] = malloc(len[i]);
        fedagg__audit_record__pack(&b.r, enc[i]);
        chain_advance(f, &b);
    }
    assert_int_equal(
        fa_audit_log_append_encoded(log, (const uint8_t *const *)enc, len, 20, &res, &err), 0);
    assert_int_equal(res.index, 19);
    assert_int_equal(res.tree_size, 20);
    fa_audit_append_result_free(&res);
    assert_int_equal(fa_audit_log_find(log, 7, "us-east", &idx, &err), 0); /* dropped */
    assert_int_equal(idx, 6);
    assert_int_equal(fa_audit_log_find(log, 7, "ap-south", &idx, &err), 0);
    assert_int_equal(idx, 6);
    for (int i = 0; i < 20; i++)
        free(enc[i]);
    fa_audit_log_close(log);
    /* one checkpoint covers the batch: 0 and 20 */
    {
        fa_audit_verify_result vr;
        struct findings fd;
        assert_int_equal(verify(f, 1, &vr, &fd), 0);
        assert_int_equal(vr.checkpoints, 2);
        assert_int_equal(vr.region_signatures, 40);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_append_reopen_prove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_find_version_and_consistency_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decision_and_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_region_signatures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commitment_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_bit_flip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_surgery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forged_checkpoints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_refuses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_while_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repair, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tree_rebuild, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_and_attempts, setup, teardown),
    };
    if (sodium_init() < 0)
        return 1;
    fa_log_set_level(FA_LOG_ERROR); /* recoveries log warnings by design */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
