/* Unit tests of worker/round_client without a network: the check of a
 * downloaded model's tensor table against what the federation announces
 * (FederationInfo.tensor_table_digest, num_params, num_tensors), and the
 * checks of a downloaded model against the signed audit log (the latest
 * record's model, reached from the last verified checkpoint). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "audit.pb-c.h"
#include "crypto/checkpoint.h"
#include "crypto/merkle.h"
#include "fedagg.pb-c.h"
#include "model/tensors.h"
#include "tests/worker/test_model.h"
#include "worker/round_client.h"

static void test_table_check(void **state)
{
    char dir[64], path[128];
    fa_safetensors *st = NULL;
    fa_tensors *t = NULL, *t2 = NULL;
    uint8_t dig[32];
    Fedagg__FederationInfo info = FEDAGG__FEDERATION_INFO__INIT;
    fa_error err;

    snprintf(dir, sizeof(dir), "/tmp/fa_test_rc.XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/m.safetensors", dir);
    assert_int_equal(tm_write(path, NULL, 0), 0);
    assert_int_equal(fa_st_open(&st, path, NULL), 0);
    assert_int_equal(fa_tensors_from_st(&t, st, NULL), 0);
    assert_int_equal(fa_tensors_digest(t, dig, NULL), 0);

    info.tensor_table_digest.data = dig;
    info.tensor_table_digest.len = 32;
    info.num_params = TM_D;
    info.num_tensors = 7;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), 0);
    info.num_tensors = 0; /* not announced: not checked */
    assert_int_equal(fa_round_client_check_table(&info, t, &err), 0);

    /* the same names with another selection: another table */
    assert_int_equal(fa_tensors_clone(&t2, t, NULL), 0);
    assert_int_equal(fa_tensors_set_federated(t2, 2, 1, NULL), 0); /* bn.running_mean */
    info.num_params = TM_D + 4;
    assert_int_equal(fa_round_client_check_table(&info, t2, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "the model's tensor table does not match the federation's"));
    assert_non_null(strstr(err.msg, "7 tensors, 30 federated coordinates"));
    fa_tensors_del(t2);

    /* a digest that matches with the wrong counts; counts with no digest */
    info.num_params = TM_D + 1;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    info.num_params = TM_D;
    info.num_tensors = 8;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "announces 8 tensors"));
    info.num_tensors = 7;
    info.tensor_table_digest.len = 0;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);
    assert_non_null(strstr(err.msg, "digest (none)"));
    dig[5] ^= 1;
    info.tensor_table_digest.len = 32;
    assert_int_equal(fa_round_client_check_table(&info, t, &err), FA_ERR_PROTOCOL);

    fa_tensors_del(t);
    fa_st_del(st);
    unlink(path);
    rmdir(dir);
}

/* ---- the audit checks of a downloaded model ------------------------------ */

/* A log held in memory: records of versions 1..n (record i makes version
 * i + 1 with model digest model[i]), its checkpoints, bundles and
 * consistency proofs as the aggregator's endpoints write them. */
#define TL_MAX 8
struct tlog {
    fa_note_signer *signer;
    fa_note_verifier v;
    size_t n;
    uint8_t model[TL_MAX][32];
    uint8_t *rec[TL_MAX];
    size_t rec_len[TL_MAX];
    uint8_t leaf[TL_MAX][32];
};

static void tl_init(struct tlog *t, uint8_t key_byte, size_t n)
{
    uint8_t seed[32];
    assert_true(sodium_init() >= 0);
    memset(t, 0, sizeof(*t));
    memset(seed, key_byte, sizeof(seed));
    assert_int_equal(fa_note_signer_new(&t->signer, "unit.test/log", seed, 32, NULL), 0);
    memcpy(t->v.pk, fa_note_signer_public_key(t->signer), 32);
    for (size_t i = 0; i < n; i++) {
        Fedagg__AuditRecord r = FEDAGG__AUDIT_RECORD__INIT;
        memset(t->model[i], 0x30 + (int)i, 32);
        r.version = 1;
        r.federation_id = "unit";
        r.round = i + 1;
        r.prev_version = i;
        r.new_version = i + 1;
        r.new_model_sha256.data = t->model[i];
        r.new_model_sha256.len = 32;
        t->rec_len[i] = fedagg__audit_record__get_packed_size(&r);
        t->rec[i] = malloc(t->rec_len[i]);
        fedagg__audit_record__pack(&r, t->rec[i]);
        fa_merkle_leaf_hash(t->rec[i], t->rec_len[i], t->leaf[i]);
    }
    t->n = n;
}

static void tl_free(struct tlog *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->rec[i]);
    fa_note_signer_del(t->signer);
}

static int tl_get(void *ctx, unsigned level, uint64_t index, uint8_t out[32])
{
    struct tlog *t = ctx;
    uint64_t w = (uint64_t)1 << level;
    fa_merkle_root_of(&t->leaf[0][0] + index * w * 32, w, out);
    return 0;
}

static void tl_cp(struct tlog *t, size_t size, fa_checkpoint *cp)
{
    memset(cp, 0, sizeof(*cp));
    snprintf(cp->origin, sizeof(cp->origin), "unit.test/log");
    cp->size = size;
    fa_merkle_root_of(&t->leaf[0][0], size, cp->root);
}

/* The signed checkpoint of the first `size` records (malloc'ed). */
static char *tl_note(struct tlog *t, size_t size)
{
    fa_checkpoint cp;
    char *note;
    size_t len;
    tl_cp(t, size, &cp);
    assert_int_equal(fa_checkpoint_sign(t->signer, &cp, &note, &len, NULL), 0);
    return note;
}

/* GET /v1/audit/record's answer: record index in the tree of size records. */
static char *tl_bundle(struct tlog *t, size_t index, size_t size)
{
    fa_proof_bundle b;
    char *out;
    size_t len;
    memset(&b, 0, sizeof(b));
    b.index = index;
    b.record = t->rec[index];
    b.record_len = t->rec_len[index];
    assert_int_equal(fa_merkle_inclusion_proof(tl_get, t, index, size, b.proof, &b.proof_len), 0);
    b.checkpoint = tl_note(t, size);
    b.checkpoint_len = strlen(b.checkpoint);
    assert_int_equal(fa_proof_bundle_format(&b, &out, &len, NULL), 0);
    free(b.checkpoint);
    return out;
}

/* GET /v1/audit/consistency's answer from old to size records. */
static char *tl_consistency(struct tlog *t, size_t old, size_t size)
{
    uint8_t proof[FA_MERKLE_MAX_PROOF * 32];
    size_t n = 0, off;
    char *out = malloc(4096);
    assert_int_equal(fa_merkle_consistency_proof(tl_get, t, old, size, proof, &n), 0);
    off =
        (size_t)snprintf(out, 4096, "fedagg-audit-consistency v1\nold %zu\nsize %zu\n", old, size);
    for (size_t i = 0; i < n; i++) {
        memcpy(out + off, "hash ", 5);
        off += 5;
        sodium_bin2base64(out + off, 4096 - off, proof + 32 * i, 32,
                          sodium_base64_VARIANT_ORIGINAL);
        off += strlen(out + off);
        out[off++] = '\n';
    }
    out[off] = '\0';
    return out;
}

/* Checks version (downloaded with digest sha) against the answers. */
static int check(struct tlog *t, const fa_checkpoint *trusted, const char *record,
                 const char *checkpoint, const char *consistency, uint64_t version,
                 const uint8_t *sha, fa_checkpoint *next, fa_error *err)
{
    fa_audit_answers a = {0};
    a.record = record;
    a.record_len = record ? strlen(record) : 0;
    a.checkpoint = checkpoint;
    a.checkpoint_len = checkpoint ? strlen(checkpoint) : 0;
    a.consistency = consistency;
    a.consistency_len = consistency ? strlen(consistency) : 0;
    fa_error_clear(err);
    return fa_round_client_check_model(&t->v, trusted, &a, version, sha, next, err);
}

#define EXPECT(call, code, what)                                                                   \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != (code))                                                                         \
            fail_msg("%s: rc %d, expected %d (%s)", #call, rc_, code, err.msg);                    \
        if (!strstr(err.msg, (what)))                                                              \
            fail_msg("%s: message '%s' does not say '%s'", #call, err.msg, (what));                \
    } while (0)

/* The model of the latest record, first use and growth; genesis; a model
 * that moved on; a record not yet there. */
static void test_audit_model_accepts(void **state)
{
    struct tlog t;
    fa_checkpoint trusted, next;
    fa_error err;
    char *rec, *note, *cons;

    tl_init(&t, 0x42, 5);
    /* genesis: version 0 and the signed empty tree */
    note = tl_note(&t, 0);
    EXPECT(check(&t, NULL, NULL, note, NULL, 0, t.model[0], &next, &err), 0, "");
    assert_int_equal(next.size, 0);
    assert_string_equal(next.origin, "unit.test/log");
    free(note);
    /* first use: version 3, the latest of 3 records */
    rec = tl_bundle(&t, 2, 3);
    EXPECT(check(&t, NULL, rec, NULL, NULL, 3, t.model[2], &next, &err), 0, "");
    assert_int_equal(next.size, 3);
    trusted = next;
    free(rec);
    /* the same checkpoint again: no proof needed */
    rec = tl_bundle(&t, 2, 3);
    EXPECT(check(&t, &trusted, rec, NULL, NULL, 3, t.model[2], &next, &err), 0, "");
    free(rec);
    /* the log grew to 5: version 5 through a consistency proof 3 -> 5 */
    rec = tl_bundle(&t, 4, 5);
    cons = tl_consistency(&t, 3, 5);
    EXPECT(check(&t, &trusted, rec, NULL, cons, 5, t.model[4], &next, &err), 0, "");
    assert_int_equal(next.size, 5);
    free(cons);
    free(rec);
    /* a round completed since the download: version 4 is not the latest */
    rec = tl_bundle(&t, 3, 5);
    cons = tl_consistency(&t, 3, 5);
    EXPECT(check(&t, &trusted, rec, NULL, cons, 4, t.model[3], &next, &err), FA_ERR_REPLAY,
           "version 4 is not the latest model any more");
    free(cons);
    free(rec);
    /* version 0 while the log has records: moved on too */
    note = tl_note(&t, 3);
    EXPECT(check(&t, NULL, NULL, note, NULL, 0, t.model[0], &next, &err), FA_ERR_REPLAY,
           "version 0 is not the latest model");
    /* a version the log does not hold yet: later */
    EXPECT(check(&t, &trusted, NULL, note, NULL, 4, t.model[3], &next, &err), FA_ERR_AGAIN,
           "does not record version 4 yet");
    free(note);
    tl_free(&t);
}

/* Every way the aggregator's answers can fail to check out. */
static void test_audit_model_alarms(void **state)
{
    struct tlog t, fork, other;
    fa_checkpoint trusted, big, next;
    fa_error err;
    char *rec, *cons, *note;
    uint8_t crafted[32];

    tl_init(&t, 0x42, 6);
    tl_init(&other, 0x43, 6); /* the same records signed by another key */
    tl_init(&fork, 0x42, 6);  /* the same key, record 1 rewritten */
    fork.model[1][0] ^= 1;
    {
        Fedagg__AuditRecord *r = fedagg__audit_record__unpack(NULL, fork.rec_len[1], fork.rec[1]);
        ProtobufCBinaryData own = r->new_model_sha256; /* freed with r */
        r->new_model_sha256.data = fork.model[1];
        free(fork.rec[1]);
        fork.rec_len[1] = fedagg__audit_record__get_packed_size(r);
        fork.rec[1] = malloc(fork.rec_len[1]);
        fedagg__audit_record__pack(r, fork.rec[1]);
        fa_merkle_leaf_hash(fork.rec[1], fork.rec_len[1], fork.leaf[1]);
        r->new_model_sha256 = own;
        fedagg__audit_record__free_unpacked(r, NULL);
    }
    tl_cp(&t, 3, &trusted);
    tl_cp(&t, 5, &big);

    /* the model served is not the one the log records for its version */
    memcpy(crafted, t.model[4], 32);
    crafted[31] ^= 1;
    rec = tl_bundle(&t, 4, 5);
    cons = tl_consistency(&t, 3, 5);
    EXPECT(check(&t, &trusted, rec, NULL, cons, 5, crafted, &next, &err), FA_ERR_VERIFY,
           "the signed log records version 5 as model 3434343434343434..., this region was "
           "served model 3434343434343434...");
    assert_non_null(strstr(err.msg, "model inconsistency"));
    free(cons);
    /* a consistency proof that does not verify */
    cons = tl_consistency(&t, 3, 5);
    {
        char *h = strstr(cons, "hash ") + 5;
        *h = *h == 'A' ? 'B' : 'A';
    }
    EXPECT(check(&t, &trusted, rec, NULL, cons, 5, t.model[4], &next, &err), FA_ERR_VERIFY,
           "the consistency proof from 3 to 5 records does not verify");
    free(cons);
    /* ... or is missing, or malformed */
    EXPECT(check(&t, &trusted, rec, NULL, NULL, 5, t.model[4], &next, &err), FA_ERR_PROTOCOL,
           "no consistency proof from 3 to 5 records");
    EXPECT(check(&t, &trusted, rec, NULL, "fedagg-audit-consistency v1\nold 2\nsize 5\n", 5,
                 t.model[4], &next, &err),
           FA_ERR_PROTOCOL, "from 2 to 5 records, 3 to 5 asked");
    EXPECT(check(&t, &trusted, rec, NULL, "fedagg-audit-consistency v1\nold 3\nsize 5\nhash !!\n",
                 5, t.model[4], &next, &err),
           FA_ERR_PROTOCOL, "malformed hash line 1");
    free(rec);
    /* a forked log: record 1 rewritten, signed by the same key, its own
     * consistency proof from 3 */
    rec = tl_bundle(&fork, 4, 5);
    cons = tl_consistency(&fork, 3, 5);
    EXPECT(check(&fork, &trusted, rec, NULL, cons, 5, fork.model[4], &next, &err), FA_ERR_VERIFY,
           "a forked or rewritten log");
    free(cons);
    free(rec);
    /* a fork of the same size as the trusted checkpoint */
    rec = tl_bundle(&fork, 2, 3);
    EXPECT(check(&fork, &trusted, rec, NULL, NULL, 3, fork.model[2], &next, &err), FA_ERR_VERIFY,
           "two signed checkpoints of 3 records with different roots: the log forked");
    free(rec);
    /* a log that shrank (rolled back to 3 records, this region saw 5) */
    rec = tl_bundle(&t, 2, 3);
    EXPECT(check(&t, &big, rec, NULL, NULL, 3, t.model[2], &next, &err), FA_ERR_VERIFY,
           "the log shrank: its latest checkpoint signs 3 records, this region verified one of 5");
    free(rec);
    note = tl_note(&t, 0);
    EXPECT(check(&t, &big, NULL, note, NULL, 0, t.model[0], &next, &err), FA_ERR_VERIFY,
           "the log shrank");
    free(note);
    EXPECT(check(&t, &big, NULL, NULL, NULL, 0, t.model[0], &next, &err), FA_ERR_VERIFY,
           "the aggregator shows no signed checkpoint, but this region verified one of 5");
    /* a model older than what this region verified: rolled back */
    rec = tl_bundle(&t, 1, 5);
    EXPECT(check(&t, &big, rec, NULL, NULL, 2, t.model[1], &next, &err), FA_ERR_VERIFY,
           "a rolled-back model");
    free(rec);
    /* another key */
    rec = tl_bundle(&other, 4, 5);
    EXPECT(check(&t, NULL, rec, NULL, NULL, 5, t.model[4], &next, &err), FA_ERR_VERIFY,
           "not signed by the aggregator key this region trusts");
    free(rec);
    /* a record that is not in the tree it is shown with */
    rec = tl_bundle(&t, 4, 5);
    {
        char *h = strstr(rec, "\nhash ") + 6;
        *h = *h == 'A' ? 'B' : 'A';
    }
    EXPECT(check(&t, NULL, rec, NULL, NULL, 5, t.model[4], &next, &err), FA_ERR_VERIFY,
           "the record of version 5 is not in the signed log");
    free(rec);
    /* the record of another version than asked */
    rec = tl_bundle(&t, 4, 5);
    EXPECT(check(&t, NULL, rec, NULL, NULL, 4, t.model[4], &next, &err), FA_ERR_PROTOCOL,
           "asked for the record of version 4, got one of version 5");
    free(rec);
    EXPECT(check(&t, NULL, "not a bundle", NULL, NULL, 4, t.model[4], &next, &err), FA_ERR_PROTOCOL,
           "the record of version 4");
    tl_free(&t);
    tl_free(&fork);
    tl_free(&other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_check),
        cmocka_unit_test(test_audit_model_accepts),
        cmocka_unit_test(test_audit_model_alarms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
