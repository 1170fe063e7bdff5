/* Allocation failures under the parsers a region runs on what the
 * aggregator sends it (crypto/checkpoint.h: proof bundles and consistency
 * proofs; checkpoints, notes and key texts allocate nothing) and under a
 * secure-aggregation decoder of a peer's protobuf message
 * (fa_secagg_advertise_model): every allocation failing in turn
 * (support/fail_alloc.h) must give an error with a message, free
 * everything, and never crash.  The texts are the seeds of
 * fuzz_crypto_proof and fuzz_crypto_consistency, made with the test key of
 * fa-audit-mklog. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "crypto/checkpoint.h"
#include "crypto/secagg.h"
#include "secagg.pb-c.h"
#include "tests/unit/support/fail_alloc.h"

struct input {
    uint8_t *data;
    size_t len;
    fa_note_verifier key; /* fa-audit-mklog's */
    fa_failalloc_ref ref;
};

/* A seed of tests/fuzz/corpus/<dir>/, without its first byte when
 * skip_first (the fuzzer's choice of parser). */
static void load(struct input *in, const char *dir, const char *seed, int skip_first)
{
    static const char what[] = "fa-audit-mklog/1/aggregator";
    uint8_t sk[64], pk[32], s[32];
    char path[4096];
    fa_error err;
    const char *src = getenv("FA_SRC");

    memset(in, 0, sizeof(*in));
    snprintf(path, sizeof(path), "%s/tests/fuzz/corpus/%s/%s", src ? src : "..", dir, seed);
    if (fa_file_read_all(path, &in->data, &in->len, 1 << 20, &err) != 0)
        fail_msg("%s", err.msg);
    if (skip_first) {
        memmove(in->data, in->data + 1, in->len - 1);
        in->len--;
    }
    crypto_hash_sha256(s, (const uint8_t *)what, strlen(what));
    crypto_sign_seed_keypair(pk, sk, s);
    snprintf(in->key.name, sizeof(in->key.name), "fedagg.test/audit-it");
    memcpy(in->key.pk, pk, 32);
}

static int bundle(void *arg, fa_error *err)
{
    struct input *in = arg;
    fa_proof_bundle b;
    fa_checkpoint cp;
    char *text = NULL;
    size_t len;
    int rc = fa_proof_bundle_parse((const char *)in->data, in->len, &b, err);

    if (rc == 0)
        rc = fa_proof_bundle_verify(&b, &in->key, &cp, err);
    if (rc == 0)
        rc = fa_proof_bundle_format(&b, &text, &len, err);
    free(text);
    fa_proof_bundle_free(&b);
    return rc;
}

static int consistency(void *arg, fa_error *err)
{
    struct input *in = arg;
    uint8_t proof[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    char *text = NULL;
    size_t n = 0, len;
    int rc = fa_checkpoint_consistency_parse((const char *)in->data, in->len, 3, 5, proof, &n, err);
    if (rc == 0)
        rc = fa_checkpoint_consistency_format(3, 5, proof, n, &text, &len, err);
    free(text);
    return rc;
}

static int refused_bundle(void *arg, fa_error *err)
{
    struct input *in = arg;
    return fa_failalloc_same(&in->ref, bundle(in, err), err);
}

static void test_audit_texts(void **state)
{
    struct input in;
    (void)state;

    load(&in, "crypto_proof", "bundle_1", 1);
    fa_failalloc_check("proof bundle", bundle, &in, 0);
    /* the same bundle without its checkpoint: refused once its record and
     * proof are decoded */
    {
        const char *blank = strstr((const char *)in.data, "\n\n");
        assert_non_null(blank);
        in.len = (size_t)(blank - (const char *)in.data) + 1;
    }
    fa_failalloc_check("proof bundle without its checkpoint", refused_bundle, &in, 0);
    free(in.data);

    /* Checkpoints, signed notes and verifier keys are parsed into the
     * caller's structures without allocating: nothing to inject there. */
    load(&in, "crypto_consistency", "two_hashes", 0);
    fa_failalloc_check("consistency proof", consistency, &in, 0);
    free(in.data);
}

/* An AdvertiseKeys from a peer, as the aggregator reads its model digest. */
static int advertise(void *arg, fa_error *err)
{
    struct input *in = arg;
    uint8_t sha[FA_SECAGG_SHA256_BYTES];
    int rc = fa_secagg_advertise_model(in->data, in->len, sha);
    return rc == 0 ? 0 : fa_errorf(err, rc, "AdvertiseKeys: %s", fa_strerror(rc));
}

static void test_peer_message(void **state)
{
    Fedagg__AdvertiseKeys m = FEDAGG__ADVERTISE_KEYS__INIT;
    uint8_t key[32] = {1}, sig[64] = {2}, sha[32] = {3};
    struct input in;
    (void)state;

    memset(&in, 0, sizeof(in));
    m.round = 4;
    m.client_id = "eu-west";
    m.c_pk.data = key;
    m.c_pk.len = 32;
    m.s_pk.data = key;
    m.s_pk.len = 32;
    m.signature.data = sig;
    m.signature.len = 64;
    m.self_mask_commitment.data = sha;
    m.self_mask_commitment.len = 32;
    m.model_sha256.data = sha;
    m.model_sha256.len = 32;
    in.len = fedagg__advertise_keys__get_packed_size(&m);
    in.data = malloc(in.len);
    assert_non_null(in.data);
    fedagg__advertise_keys__pack(&m, in.data);
    /* protobuf-c reports a failed allocation as an undecodable message */
    fa_failalloc_check("AdvertiseKeys", advertise, &in, FA_ERR_PARSE);
    free(in.data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_audit_texts),
                                       cmocka_unit_test(test_peer_message)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
