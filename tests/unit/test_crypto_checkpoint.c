/* Unit tests of crypto/checkpoint: C2SP signed notes against the known
 * answers of golang.org/x/mod/sumdb/note (note_test.go), checkpoints, key
 * file forms, region upload commitments, proof bundles and the text of
 * consistency proofs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/checkpoint.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"

/* golang.org/x/mod/sumdb/note test keys and note. */
static const char peter_skey[] =
    "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
static const char peter_vkey[] =
    "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
static const char enoch_vkey[] = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop";
static const char go_text[] = "If you think cryptography is the answer to your problem,\n"
                              "then you don't know what your problem is.\n";
static const char peter_sig[] =
    "\xe2\x80\x94 PeterNeumann "
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvq"
    "fqdngotpRZb6KE6RyyBwJnAM=\n";
static const char enoch_sig[] = "\xe2\x80\x94 EnochRoot "
                                "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG"
                                "01oOTGwnWLox33WWd1RvMc+QQ=\n";

static char *cat(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

static fa_note_signer *peter_signer(void)
{
    fa_note_signer *s = NULL;
    fa_error err;
    assert_int_equal(
        fa_note_signer_parse(&s, NULL, (const uint8_t *)peter_skey, strlen(peter_skey), &err), 0);
    return s;
}

static void test_go_note_sign_kat(void **state)
{
    fa_note_signer *s = peter_signer();
    char *note, *want, vkey[128];
    size_t n;
    fa_error err;

    assert_string_equal(fa_note_signer_name(s), "PeterNeumann");
    assert_int_equal(fa_note_signer_key_id(s), 0xc74f20a3);
    assert_int_equal(fa_note_key_id("PeterNeumann", fa_note_signer_public_key(s)), 0xc74f20a3);
    assert_int_equal(
        fa_note_vkey_format("PeterNeumann", fa_note_signer_public_key(s), vkey, sizeof(vkey), &err),
        0);
    assert_string_equal(vkey, peter_vkey);

    assert_int_equal(fa_note_sign(s, go_text, strlen(go_text), &note, &n, &err), 0);
    want = cat(go_text, "\n", peter_sig);
    assert_string_equal(note, want);
    assert_int_equal(n, strlen(want));
    free(note);
    free(want);

    /* the same key as a 32-byte seed (raw, base64, hex) signs the same bytes */
    {
        uint8_t k[33];
        size_t kl;
        char b64[64], hex[65];
        fa_note_signer *s2;
        const char *k64 = peter_skey + strlen("PRIVATE+KEY+PeterNeumann+c74f20a3+");
        assert_int_equal(sodium_base642bin(k, sizeof(k), k64, strlen(k64), NULL, &kl, NULL,
                                           sodium_base64_VARIANT_ORIGINAL),
                         0);
        assert_int_equal(kl, 33);
        assert_int_equal(fa_note_signer_parse(&s2, "PeterNeumann", k + 1, 32, &err), 0);
        assert_memory_equal(fa_note_signer_public_key(s2), fa_note_signer_public_key(s), 32);
        fa_note_signer_del(s2);
        sodium_bin2base64(b64, sizeof(b64), k + 1, 32, sodium_base64_VARIANT_ORIGINAL);
        assert_int_equal(
            fa_note_signer_parse(&s2, "PeterNeumann", (uint8_t *)b64, strlen(b64), &err), 0);
        assert_memory_equal(fa_note_signer_public_key(s2), fa_note_signer_public_key(s), 32);
        fa_note_signer_del(s2);
        sodium_bin2hex(hex, sizeof(hex), k + 1, 32);
        hex[64] = 0;
        char line[80];
        snprintf(line, sizeof(line), "  %s\n", hex);
        assert_int_equal(
            fa_note_signer_parse(&s2, "PeterNeumann", (uint8_t *)line, strlen(line), &err), 0);
        assert_int_equal(fa_note_signer_key_id(s2), 0xc74f20a3);
        fa_note_signer_del(s2);
    }
    fa_note_signer_del(s);
}

static void test_go_note_open(void **state)
{
    fa_note_verifier peter, enoch, rawpk;
    fa_error err;
    size_t tlen;
    char *msg = cat(go_text, "\n", peter_sig), *two;

    assert_int_equal(
        fa_note_verifier_parse(&peter, (const uint8_t *)peter_vkey, strlen(peter_vkey), &err), 0);
    assert_string_equal(peter.name, "PeterNeumann");
    assert_int_equal(
        fa_note_verifier_parse(&enoch, (const uint8_t *)enoch_vkey, strlen(enoch_vkey), &err), 0);

    assert_int_equal(fa_note_open(msg, strlen(msg), &peter, &tlen, &err), 0);
    assert_int_equal(tlen, strlen(go_text));
    /* a bare public key (no name) matches by key id */
    memset(&rawpk, 0, sizeof(rawpk));
    memcpy(rawpk.pk, peter.pk, 32);
    assert_int_equal(fa_note_open(msg, strlen(msg), &rawpk, &tlen, &err), 0);
    /* another key's note */
    assert_int_equal(fa_note_open(msg, strlen(msg), &enoch, &tlen, &err), FA_ERR_NOTFOUND);

    /* two signatures: each key finds its own; repeats are ignored */
    two = malloc(strlen(msg) + 3 * strlen(peter_sig) + strlen(enoch_sig) + 1);
    sprintf(two, "%s\n%s%s%s", go_text, peter_sig, enoch_sig, peter_sig);
    assert_int_equal(fa_note_open(two, strlen(two), &peter, &tlen, &err), 0);
    assert_int_equal(fa_note_open(two, strlen(two), &enoch, &tlen, &err), 0);
    free(two);

    /* an invalid signature for a known key rejects the note */
    {
        char bad[512];
        snprintf(bad, sizeof(bad), "%s\n%.60sABCD%s", go_text, peter_sig, peter_sig + 60);
        assert_int_equal(fa_note_open(bad, strlen(bad), &peter, &tlen, &err), FA_ERR_VERIFY);
        snprintf(bad, sizeof(bad), "%s\n%s", go_text, peter_sig);
        bad[strlen(go_text) + 30] ^= 0x01; /* a base64 char of the signature */
        assert_true(fa_note_open(bad, strlen(bad), &peter, &tlen, &err) < 0);
        snprintf(bad, sizeof(bad), "%s\n%s", go_text, peter_sig);
        bad[3] = 'X'; /* the text */
        assert_int_equal(fa_note_open(bad, strlen(bad), &peter, &tlen, &err), FA_ERR_VERIFY);
    }

    /* malformed notes (note_test.go badMsgs) */
    {
        const char *const bad_sig_name = "\xe2\x80\x94 Bad Name x08go/ZJkuBS9UG/"
                                         "SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdng"
                                         "otpRZb6KE6RyyBwJnAM=";
        char *bads[8];
        int nb = 0;
        bads[nb++] = cat(go_text, "", "");
        bads[nb++] = cat(go_text, "\n", "");
        bads[nb] = cat(go_text, "\n", peter_sig);
        bads[nb][strlen(bads[nb]) - 1] = 0;
        nb++;
        bads[nb++] = cat("\x01", go_text, peter_sig);
        bads[nb++] = cat("\xff", go_text, peter_sig);
        bads[nb++] = cat(go_text, "\n", bad_sig_name);
        two = cat(go_text, "\n", peter_sig);
        bads[nb++] = cat(two, "Unexpected line.\n", "");
        free(two);
        bads[nb++] = cat(go_text, "\n-- PeterNeumann ", "x08go/ZJkuBS9UG/SffcvIAQxVBtiFu=\n");
        for (int i = 0; i < nb; i++) {
            assert_int_equal(fa_note_open(bads[i], strlen(bads[i]), &peter, &tlen, &err),
                             FA_ERR_PARSE);
            free(bads[i]);
        }
    }
    /* more than 100 signatures */
    {
        size_t n = strlen(go_text) + 1 + 101 * strlen(peter_sig) + 1;
        char *many = malloc(n), *p = many;
        p += sprintf(p, "%s\n", go_text);
        for (int i = 0; i < 101; i++)
            p += sprintf(p, "%s", peter_sig);
        assert_int_equal(fa_note_open(many, strlen(many), &peter, &tlen, &err), FA_ERR_PARSE);
        free(many);
    }
    free(msg);
}

static void test_signer_forms(void **state)
{
    uint8_t seed[32], pk[32], sk[64];
    fa_note_signer *s = NULL;
    fa_note_verifier v;
    fa_error err;
    char txt[200];

    for (int i = 0; i < 32; i++)
        seed[i] = (uint8_t)(i * 3 + 1);
    crypto_sign_seed_keypair(pk, sk, seed);

    assert_int_equal(fa_note_signer_parse(&s, "fedagg/test", sk, 64, &err), 0);
    assert_memory_equal(fa_note_signer_public_key(s), pk, 32);
    fa_note_signer_del(s);
    /* 64 bytes whose public half does not match the seed */
    sk[40] ^= 1;
    assert_int_equal(fa_note_signer_parse(&s, "fedagg/test", sk, 64, &err), FA_ERR_INVAL);
    assert_null(s);
    assert_non_null(strstr(err.msg, "public half"));
    sk[40] ^= 1;
    /* wrong lengths, bad names */
    assert_int_equal(fa_note_signer_parse(&s, "fedagg/test", sk, 31, &err), FA_ERR_PARSE);
    assert_int_equal(fa_note_signer_parse(&s, "has space", sk, 64, &err), FA_ERR_INVAL);
    assert_int_equal(fa_note_signer_parse(&s, "a+b", sk, 64, &err), FA_ERR_INVAL);
    assert_int_equal(fa_note_signer_parse(&s, "", seed, 32, &err), FA_ERR_INVAL);
    assert_int_equal(fa_note_signer_parse(&s, NULL, seed, 32, &err), FA_ERR_INVAL);
    /* Go signer key: wrong id, name mismatch, algorithm byte */
    snprintf(txt, sizeof(txt), "%s", peter_skey);
    memcpy(strstr(txt, "c74f20a3"), "c74f20a4", 8);
    assert_int_equal(fa_note_signer_parse(&s, NULL, (uint8_t *)txt, strlen(txt), &err),
                     FA_ERR_INVAL);
    assert_int_equal(fa_note_signer_parse(&s, "SomeoneElse", (const uint8_t *)peter_skey,
                                          strlen(peter_skey), &err),
                     FA_ERR_INVAL);
    snprintf(txt, sizeof(txt), "PRIVATE+KEY+PeterNeumann+c74f20a3+A");
    assert_int_equal(fa_note_signer_parse(&s, NULL, (uint8_t *)txt, strlen(txt), &err),
                     FA_ERR_PARSE);

    /* a `fedagg keygen` key file */
    {
        char text[FA_IDENTITY_SECRET_TEXT_MAX];
        size_t tl;
        assert_int_equal(fa_identity_format_secret(seed, text, &tl), 0);
        assert_int_equal(fa_note_signer_parse(&s, "fedagg/test", (uint8_t *)text, tl, &err), 0);
        assert_memory_equal(fa_note_signer_public_key(s), pk, 32);
        fa_note_signer_del(s);
        text[tl - 3] = '!';
        assert_int_equal(fa_note_signer_parse(&s, "fedagg/test", (uint8_t *)text, tl, &err),
                         FA_ERR_PARSE);
        assert_null(s);
    }
    /* public keys: raw, base64, hex, vkey; the vkey's id is checked */
    assert_int_equal(fa_note_verifier_parse(&v, pk, 32, &err), 0);
    assert_memory_equal(v.pk, pk, 32);
    assert_string_equal(v.name, "");
    sodium_bin2base64(txt, sizeof(txt), pk, 32, sodium_base64_VARIANT_ORIGINAL);
    strcat(txt, "\n");
    assert_int_equal(fa_note_verifier_parse(&v, (uint8_t *)txt, strlen(txt), &err), 0);
    assert_memory_equal(v.pk, pk, 32);
    sodium_bin2hex(txt, sizeof(txt), pk, 32);
    assert_int_equal(fa_note_verifier_parse(&v, (uint8_t *)txt, strlen(txt), &err), 0);
    assert_memory_equal(v.pk, pk, 32);
    snprintf(txt, sizeof(txt), "%s", peter_vkey);
    txt[13] = 'd'; /* id c74f20a3 -> d74f20a3 */
    assert_int_equal(fa_note_verifier_parse(&v, (uint8_t *)txt, strlen(txt), &err), FA_ERR_PARSE);
    assert_int_equal(fa_note_verifier_parse(&v, (const uint8_t *)"short", 5, &err), FA_ERR_PARSE);
}

static void test_checkpoint_roundtrip(void **state)
{
    uint8_t seed[32] = {7};
    fa_note_signer *s;
    fa_note_verifier v, other;
    fa_checkpoint cp, got;
    fa_error err;
    char *note;
    size_t n;

    assert_int_equal(fa_note_signer_new(&s, "fedagg.example.org/fed-a", seed, 32, &err), 0);
    memset(&v, 0, sizeof(v));
    memcpy(v.pk, fa_note_signer_public_key(s), 32);
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.origin, sizeof(cp.origin), "fedagg.example.org/fed-a");
    cp.size = 20852163;
    for (int i = 0; i < 32; i++)
        cp.root[i] = (uint8_t)i;
    assert_int_equal(fa_checkpoint_sign(s, &cp, &note, &n, &err), 0);
    /* body as tlog-checkpoint specifies; the signature line names the origin */
    {
        static const char want[] = "fedagg.example.org/fed-a\n20852163\n"
                                   "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\n"
                                   "\xe2\x80\x94 fedagg.example.org/fed-a ";
        assert_int_equal(strncmp(note, want, strlen(want)), 0);
        /* then base64 of key id (4) + signature (64) = 92 chars, newline */
        assert_int_equal(n, strlen(want) + 92 + 1);
    }
    assert_int_equal(fa_checkpoint_open(note, n, &v, &got, &err), 0);
    assert_string_equal(got.origin, cp.origin);
    assert_int_equal(got.size, cp.size);
    assert_memory_equal(got.root, cp.root, 32);

    /* every single-byte change is refused */
    for (size_t i = 0; i < n; i++) {
        char saved = note[i];
        note[i] = (char)(note[i] ^ 0x04);
        assert_true(fa_checkpoint_open(note, n, &v, &got, &err) < 0);
        note[i] = saved;
    }
    /* a checkpoint by another key */
    memset(&other, 0, sizeof(other));
    other.pk[0] = 9;
    crypto_sign_seed_keypair(other.pk, (uint8_t[64]){0}, (uint8_t[32]){9});
    assert_int_equal(fa_checkpoint_open(note, n, &other, &got, &err), FA_ERR_NOTFOUND);
    free(note);

    /* the empty tree; extension lines */
    cp.size = 0;
    assert_int_equal(fa_checkpoint_sign(s, &cp, &note, &n, &err), 0);
    assert_int_equal(fa_checkpoint_open(note, n, &v, &got, &err), 0);
    assert_int_equal(got.size, 0);
    free(note);
    {
        const char *ext = "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\nextension\n";
        assert_int_equal(fa_checkpoint_parse(ext, strlen(ext), &got, &err), 0);
        assert_int_equal(got.size, 5);
    }
    /* malformed bodies */
    {
        const char *bad[] = {
            "",
            "\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
            "o\n05\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
            "o\n-5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
            "o\n18446744073709551616\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
            "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==\n",
            "o\n5\nnot base64!\n",
            "o\n5\n",
            "o\n5\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
            assert_int_equal(fa_checkpoint_parse(bad[i], strlen(bad[i]), &got, &err), FA_ERR_PARSE);
        const char *max = "o\n18446744073709551615\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n";
        assert_int_equal(fa_checkpoint_parse(max, strlen(max), &got, &err), 0);
        assert_true(got.size == UINT64_MAX);
    }
    fa_note_signer_del(s);
}

/* Our signer and the secure-aggregation verifier agree on the message, for
 * either hash; a signature under one hash's label is not one under the
 * other's. */
static void test_commitments(void **state)
{
    const int B3 = FA_SECAGG_UPLOAD_BLAKE3, S2 = FA_SECAGG_UPLOAD_SHA256;
    uint8_t pk[32], sk[64], seed[32], h[32], sig[64], sig1[64];

    randombytes_buf(seed, sizeof(seed));
    crypto_sign_seed_keypair(pk, sk, seed);
    memset(h, 0xab, sizeof(h));
    assert_int_equal(fa_secagg_commitment_sign(seed, "fed", 12, 1, "eu-west", B3, h, sig), 0);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", B3, h, sig, pk), 0);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", S2, h, sig, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_verify("fed2", 12, 1, "eu-west", B3, h, sig, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_verify("fed", 13, 1, "eu-west", B3, h, sig, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 2, "eu-west", B3, h, sig, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-east", B3, h, sig, pk),
                     FA_ERR_VERIFY);
    /* the SHA-256 commitments of secagg.proto version 3, as old records hold them */
    assert_int_equal(fa_secagg_commitment_sign(seed, "fed", 12, 1, "eu-west", S2, h, sig1), 0);
    assert_memory_not_equal(sig, sig1, 64);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", S2, h, sig1, pk), 0);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", B3, h, sig1, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", 7, h, sig, pk),
                     FA_ERR_INVAL);
    h[31] ^= 1;
    assert_int_equal(fa_secagg_commitment_verify("fed", 12, 1, "eu-west", B3, h, sig, pk),
                     FA_ERR_VERIFY);
    assert_int_equal(fa_secagg_commitment_sign(seed, "", 1, 1, "r", B3, h, sig), FA_ERR_INVAL);
    assert_int_equal(fa_secagg_commitment_sign(seed, "f", 1, 1, NULL, B3, h, sig), FA_ERR_INVAL);
    assert_int_equal(fa_secagg_commitment_sign(seed, "f", 1, 1, "r", 7, h, sig), FA_ERR_INVAL);
}

static void test_proof_bundle(void **state)
{
    uint8_t seed[32] = {3}, leaves[5][32];
    fa_note_signer *s;
    fa_note_verifier v;
    fa_checkpoint cp, got;
    fa_proof_bundle b, p;
    fa_merkle_frontier f;
    fa_error err;
    char *text, *note;
    size_t tn, nn;
    const char rec[] = "record number two";

    assert_int_equal(fa_note_signer_new(&s, "fedagg/test", seed, 32, &err), 0);
    memset(&v, 0, sizeof(v));
    memcpy(v.pk, fa_note_signer_public_key(s), 32);

    /* a 5-leaf tree; leaf 2 is rec; its proof is [l3, H(l0,l1), l4] */
    fa_merkle_frontier_init(&f);
    for (int i = 0; i < 5; i++) {
        if (i == 2)
            fa_merkle_leaf_hash(rec, strlen(rec), leaves[i]);
        else
            fa_merkle_leaf_hash(&i, sizeof(i), leaves[i]);
        fa_merkle_frontier_push(&f, leaves[i], NULL, NULL);
    }
    memset(&cp, 0, sizeof(cp));
    snprintf(cp.origin, sizeof(cp.origin), "fedagg/test");
    cp.size = 5;
    fa_merkle_frontier_root(&f, cp.root);
    assert_int_equal(fa_checkpoint_sign(s, &cp, &note, &nn, &err), 0);

    memset(&b, 0, sizeof(b));
    b.index = 2;
    b.record = (uint8_t *)rec;
    b.record_len = strlen(rec);
    memcpy(b.proof, leaves[3], 32);
    fa_merkle_node_hash(leaves[0], leaves[1], b.proof + 32);
    memcpy(b.proof + 64, leaves[4], 32);
    b.proof_len = 3;
    b.checkpoint = note;
    b.checkpoint_len = nn;
    assert_int_equal(fa_proof_bundle_format(&b, &text, &tn, &err), 0);
    assert_int_equal(strncmp(text, "fedagg-audit-proof v1\nindex 2\nrecord ", 37), 0);

    assert_int_equal(fa_proof_bundle_parse(text, tn, &p, &err), 0);
    assert_int_equal(p.index, 2);
    assert_int_equal(p.record_len, strlen(rec));
    assert_memory_equal(p.record, rec, strlen(rec));
    assert_int_equal(p.proof_len, 3);
    assert_string_equal(p.checkpoint, note);
    assert_int_equal(fa_proof_bundle_verify(&p, &v, &got, &err), 0);
    assert_int_equal(got.size, 5);
    /* wrong index, record, proof */
    p.index = 1;
    assert_int_equal(fa_proof_bundle_verify(&p, &v, &got, &err), FA_ERR_VERIFY);
    p.index = 5;
    assert_int_equal(fa_proof_bundle_verify(&p, &v, &got, &err), FA_ERR_VERIFY);
    assert_non_null(strstr(err.msg, "outside"));
    p.index = 2;
    p.record[0] ^= 1;
    assert_int_equal(fa_proof_bundle_verify(&p, &v, &got, &err), FA_ERR_VERIFY);
    p.record[0] ^= 1;
    p.proof[70] ^= 1;
    assert_int_equal(fa_proof_bundle_verify(&p, &v, &got, &err), FA_ERR_VERIFY);
    fa_proof_bundle_free(&p);

    /* every single-byte change of the bundle text is refused by parse or verify */
    for (size_t i = 0; i < tn; i++) {
        char saved = text[i];
        int rc;
        text[i] = (char)(text[i] ^ 0x10);
        rc = fa_proof_bundle_parse(text, tn, &p, &err);
        if (rc == 0)
            rc = fa_proof_bundle_verify(&p, &v, &got, &err);
        assert_true(rc < 0);
        fa_proof_bundle_free(&p);
        text[i] = saved;
    }
    /* truncations */
    for (size_t i = 0; i < tn; i++) {
        int rc = fa_proof_bundle_parse(text, i, &p, &err);
        if (rc == 0)
            rc = fa_proof_bundle_verify(&p, &v, &got, &err);
        assert_true(rc < 0);
        fa_proof_bundle_free(&p);
    }
    assert_int_equal(fa_proof_bundle_parse("hello\n", 6, &p, &err), FA_ERR_PARSE);
    fa_proof_bundle_free(&p);
    free(text);
    free(note);
    fa_note_signer_del(s);
}

/* The text of a consistency proof: written by the audit log's endpoint,
 * read by a region from an aggregator it must not trust. */
static void test_consistency_text(void **state)
{
    uint8_t proof[3 * FA_MERKLE_HASH_LEN], got[FA_MERKLE_MAX_PROOF * FA_MERKLE_HASH_LEN];
    char *text = NULL, bad[512];
    size_t len = 0, n = 99;
    fa_error err;
    (void)state;

    for (size_t i = 0; i < sizeof(proof); i++)
        proof[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(fa_checkpoint_consistency_format(3, 9, proof, 3, &text, &len, &err), 0);
    assert_int_equal(len, strlen(text));
    {
        static const char head[] = "fedagg-audit-consistency v1\nold 3\nsize 9\nhash ";
        assert_memory_equal(text, head, sizeof(head) - 1);
    }
    assert_int_equal(fa_checkpoint_consistency_parse(text, len, 3, 9, got, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(got, proof, sizeof(proof));
    /* without the final newline, too */
    assert_int_equal(fa_checkpoint_consistency_parse(text, len - 1, 3, 9, got, &n, &err), 0);
    assert_int_equal(n, 3);

    /* a proof between other sizes than asked */
    assert_int_equal(fa_checkpoint_consistency_parse(text, len, 2, 9, got, &n, &err), FA_ERR_RANGE);
    assert_non_null(strstr(err.msg, "from 3 to 9 records, 2 to 9 asked"));

    /* malformed: each names what is wrong */
    static const char *const cases[] = {
        "",
        "fedagg-audit-consistency v2\nold 3\nsize 9\n",
        "fedagg-audit-consistency v1\nold 03\nsize 9\n",
        "fedagg-audit-consistency v1\nold -3\nsize 9\n",
        "fedagg-audit-consistency v1\nold 3 \nsize 9\n",
        "fedagg-audit-consistency v1\nold 3\nsize 99999999999999999999\n",
        "fedagg-audit-consistency v1\nold 3\n",
        "fedagg-audit-consistency v1\nold 3\nsize 9\nhash AAAA\n",
        "fedagg-audit-consistency v1\nold 3\nsize 9\nhush "
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
        "fedagg-audit-consistency v1\nold 3\nsize 9\n\nhash "
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(
            fa_checkpoint_consistency_parse(cases[i], strlen(cases[i]), 3, 9, got, &n, &err),
            FA_ERR_PARSE);
        assert_true(strstr(err.msg, "malformed") != NULL);
    }
    /* a line longer than any hash line is malformed, not the end */
    snprintf(bad, sizeof(bad), "%.*shash %0300d\n", (int)(len), text, 0);
    assert_int_equal(fa_checkpoint_consistency_parse(bad, strlen(bad), 3, 9, got, &n, &err),
                     FA_ERR_PARSE);
    assert_non_null(strstr(err.msg, "hash line 4"));
    /* a NUL inside the text */
    memcpy(bad, text, len);
    bad[len - 3] = '\0';
    assert_int_equal(fa_checkpoint_consistency_parse(bad, len, 3, 9, got, &n, &err), FA_ERR_PARSE);
    free(text);

    /* more hashes than any proof holds */
    assert_int_equal(
        fa_checkpoint_consistency_format(1, 2, proof, FA_MERKLE_MAX_PROOF + 1, &text, &len, &err),
        FA_ERR_INVAL);
    assert_null(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_go_note_sign_kat), cmocka_unit_test(test_go_note_open),
        cmocka_unit_test(test_signer_forms),     cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_commitments),      cmocka_unit_test(test_proof_bundle),
        cmocka_unit_test(test_consistency_text),
    };
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
