/* Known-answer tests of the primitives secure aggregation is built on,
 * compared byte for byte: RFC 7748 (X25519), RFC 8032 (Ed25519, through
 * crypto/identity.h), NIST SP 800-38A F.5.1 (AES-128-CTR, through the mask
 * PRG), RFC 5869 (HKDF-SHA256, crypto/kdf_internal.h); plus the properties of the
 * derived keys (domain separation) and of the mask PRG (seeking, blocks). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/fa_hex.h"
#include "crypto/identity.h"
#include "crypto/kdf_internal.h"
#include "crypto/mask_prg_internal.h"

static size_t unhex(const char *hex, uint8_t *out)
{
    size_t n = strlen(hex) / 2;
    assert_int_equal(fa_hex_decode(out, n, hex, strlen(hex)), 0);
    return n;
}

static void assert_hex(const uint8_t *got, const char *hex)
{
    uint8_t want[512];
    size_t n = unhex(hex, want);
    if (memcmp(got, want, n) != 0) {
        char buf[FA_HEX_LEN(512)];
        fa_hex_encode(buf, sizeof(buf), got, n);
        fail_msg("got  %s\nwant %s", buf, hex);
    }
}

/* RFC 7748 5.2: scalar multiplication, including 1000 iterations. */
static void test_x25519_rfc7748_5_2(void **state)
{
    uint8_t k[32], u[32], out[32];
    unhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4", k);
    unhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c", u);
    assert_int_equal(crypto_scalarmult(out, k, u), 0);
    assert_hex(out, "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552");
    unhex("4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d", k);
    unhex("e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493", u);
    assert_int_equal(crypto_scalarmult(out, k, u), 0);
    assert_hex(out, "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957");
    /* k = u = 9; k, u = X25519(k, u), k */
    memset(k, 0, 32);
    k[0] = 9;
    memcpy(u, k, 32);
    for (int i = 1; i <= 1000; i++) {
        assert_int_equal(crypto_scalarmult(out, k, u), 0);
        memcpy(u, k, 32);
        memcpy(k, out, 32);
        if (i == 1)
            assert_hex(k, "422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079");
    }
    assert_hex(k, "684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51");
}

/* RFC 7748 6.1: Diffie-Hellman. */
static void test_x25519_rfc7748_6_1(void **state)
{
    uint8_t a[32], b[32], apk[32], bpk[32], k1[32], k2[32];
    unhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", a);
    unhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb", b);
    assert_int_equal(crypto_scalarmult_base(apk, a), 0);
    assert_int_equal(crypto_scalarmult_base(bpk, b), 0);
    assert_hex(apk, "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
    assert_hex(bpk, "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
    assert_int_equal(crypto_scalarmult(k1, a, bpk), 0);
    assert_int_equal(crypto_scalarmult(k2, b, apk), 0);
    assert_hex(k1, "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
    assert_memory_equal(k1, k2, 32);
}

/* A low-order point gives the all-zero agreement, which the library
 * refuses (crypto_scalarmult fails and fa_secagg_agree returns FA_ERR_VERIFY). */
static void test_x25519_low_order_refused(void **state)
{
    uint8_t k[32] = {1}, zero[32] = {0}, out[32];
    assert_int_not_equal(crypto_scalarmult(out, k, zero), 0);
}

/* RFC 8032 7.1, tests 1-3: public key from the seed, signature, verify. */
static void test_ed25519_rfc8032(void **state)
{
    static const struct {
        const char *sk, *pk, *msg, *sig;
    } v[] = {
        {"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
         "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
         "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e397"
         "01cf9b46bd25bf5f0595bbe24655141438e7a100b"},
        {"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
         "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
         "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f361"
         "3d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
        {"c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
         "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
         "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f76"
         "0984dc6594a7c15e9716ed28dc027beceea1ec40a"},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t seed[32], pk[32], msg[8], sig[64];
        size_t mlen = unhex(v[i].msg, msg);
        unhex(v[i].sk, seed);
        assert_int_equal(fa_identity_public_key(seed, pk), 0);
        assert_hex(pk, v[i].pk);
        assert_int_equal(fa_identity_sign(seed, msg, mlen, sig), 0);
        assert_hex(sig, v[i].sig);
        assert_int_equal(fa_identity_verify(pk, msg, mlen, sig), 0);
        sig[7] ^= 1;
        assert_int_equal(fa_identity_verify(pk, msg, mlen, sig), FA_ERR_VERIFY);
    }
}

/* NIST SP 800-38A F.5.1 CTR-AES128.Encrypt, through the mask PRG: the
 * keystream XOR the plaintext is the ciphertext. */
static void test_aes128ctr_sp800_38a_f51(void **state)
{
    uint8_t key[16], iv[16], pt[64], ct[64];
    uint32_t ks[16];
    fa_mask_prg g;
    unhex("2b7e151628aed2a6abf7158809cf4f3c", key);
    unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff", iv);
    unhex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
          "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710",
          pt);
    assert_int_equal(fa_mask_prg_init_iv(&g, key, iv), 0);
    assert_int_equal(fa_mask_prg_words(&g, ks, 16), 0);
    for (int i = 0; i < 16; i++) {
        uint8_t b[4] = {(uint8_t)ks[i], (uint8_t)(ks[i] >> 8), (uint8_t)(ks[i] >> 16),
                        (uint8_t)(ks[i] >> 24)};
        for (int j = 0; j < 4; j++)
            ct[4 * i + j] = pt[4 * i + j] ^ b[j];
    }
    assert_hex(ct, "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff"
                   "5ae4df3edbd5d35e5b4f09020db03eab1e031dda2fbe03d1792170a0f3009cee");
    fa_mask_prg_free(&g);
}

/* The mask PRG: word i is the same whether reached in one block, in odd
 * pieces, or by seeking; apply adds and subtracts exactly those words. */
static void test_prg_blocks_and_seek(void **state)
{
    uint8_t key[16];
    enum { N = 3 * FA_MASK_PRG_BLOCK_WORDS + 20 };
    uint32_t *all = malloc(N * 4), *piece = malloc(N * 4), *acc = calloc(N, 4),
             *scratch = malloc(FA_MASK_PRG_BLOCK_WORDS * 4);
    fa_mask_prg g;
    size_t off = 0, step = 1;
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(i * 7 + 1);
    assert_int_equal(fa_mask_prg_init(&g, key, 0), 0);
    for (size_t o = 0; o < N; o += FA_MASK_PRG_BLOCK_WORDS)
        assert_int_equal(
            fa_mask_prg_words(&g, all + o,
                              N - o < FA_MASK_PRG_BLOCK_WORDS ? N - o : FA_MASK_PRG_BLOCK_WORDS),
            0);
    fa_mask_prg_free(&g);
    assert_int_equal(fa_mask_prg_init(&g, key, 0), 0);
    while (off < N) { /* pieces of 1, 2, 3, ... words: CTR keeps partial blocks */
        size_t m = N - off < step ? N - off : step;
        assert_int_equal(fa_mask_prg_words(&g, piece + off, m), 0);
        off += m;
        step = step % 997 + 1;
    }
    assert_memory_equal(all, piece, N * 4);
    for (uint64_t w = 0; w < N - 8; w += 4 * 1001) {
        uint32_t two[8];
        assert_int_equal(fa_mask_prg_seek(&g, w), 0);
        assert_int_equal(fa_mask_prg_words(&g, two, 8), 0);
        assert_memory_equal(two, all + w, sizeof(two));
    }
    assert_int_equal(fa_mask_prg_seek(&g, 3), FA_ERR_INVAL);
    assert_int_equal(fa_mask_prg_seek(&g, 0), 0);
    for (size_t o = 0; o < N; o += FA_MASK_PRG_BLOCK_WORDS) {
        size_t m = N - o < FA_MASK_PRG_BLOCK_WORDS ? N - o : FA_MASK_PRG_BLOCK_WORDS;
        assert_int_equal(fa_mask_prg_apply(&g, acc + o, m, 1, scratch), 0);
    }
    assert_memory_equal(acc, all, N * 4);
    assert_int_equal(fa_mask_prg_seek(&g, 0), 0);
    for (size_t o = 0; o < N; o += FA_MASK_PRG_BLOCK_WORDS) {
        size_t m = N - o < FA_MASK_PRG_BLOCK_WORDS ? N - o : FA_MASK_PRG_BLOCK_WORDS;
        assert_int_equal(fa_mask_prg_apply(&g, acc + o, m, -1, scratch), 0);
    }
    for (size_t i = 0; i < N; i++)
        assert_int_equal(acc[i], 0);
    /* IV 0 is counter block 0: word 4 starts AES block 1 */
    {
        uint8_t iv[16] = {0};
        uint32_t w[4];
        fa_mask_prg h;
        iv[15] = 1;
        assert_int_equal(fa_mask_prg_init_iv(&h, key, iv), 0);
        assert_int_equal(fa_mask_prg_words(&h, w, 4), 0);
        assert_memory_equal(w, all + 4, sizeof(w));
        fa_mask_prg_free(&h);
    }
    fa_mask_prg_free(&g);
    fa_mask_prg_free(&g); /* twice is harmless */
    free(all);
    free(piece);
    free(acc);
    free(scratch);
}

/* RFC 5869 A.1-A.3: HKDF-SHA256. */
static void test_hkdf_rfc5869(void **state)
{
    uint8_t ikm[80], salt[80], info[80], okm[82];
    memset(ikm, 0x0b, 22);
    unhex("000102030405060708090a0b0c", salt);
    unhex("f0f1f2f3f4f5f6f7f8f9", info);
    assert_int_equal(fa_hkdf_sha256(okm, 42, salt, 13, ikm, 22, info, 10), 0);
    assert_hex(okm, "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b8"
                    "87185865");
    for (int i = 0; i < 80; i++) {
        ikm[i] = (uint8_t)i;
        salt[i] = (uint8_t)(0x60 + i);
        info[i] = (uint8_t)(0xb0 + i);
    }
    assert_int_equal(fa_hkdf_sha256(okm, 82, salt, 80, ikm, 80, info, 80), 0);
    assert_hex(okm, "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7"
                    "827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5c1"
                    "f3434f1d87");
    memset(ikm, 0x0b, 22);
    assert_int_equal(fa_hkdf_sha256(okm, 42, NULL, 0, ikm, 22, NULL, 0), 0);
    assert_hex(okm, "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4"
                    "b61a96c8");
    assert_int_equal(fa_hkdf_sha256(okm, 255 * 32 + 1, NULL, 0, ikm, 22, NULL, 0), FA_ERR_INVAL);
}

/* Domain separation: every input of the derivation changes the key; the two
 * ids are taken in canonical order. */
static void test_kdf_domain_separation(void **state)
{
    uint8_t ikm[32], base[16], k[16];
    memset(ikm, 3, sizeof(ikm));
    assert_int_equal(
        fa_kdf_derive(base, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed", 5, 1, "eu-west", "us-east"), 0);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed", 5, 1, "us-east", "eu-west"), 0);
    assert_memory_equal(k, base, 16);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_SHARE_ENC, "fed", 5, 1, "eu-west", "us-east"), 0);
    assert_memory_not_equal(k, base, 16);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed2", 5, 1, "eu-west", "us-east"), 0);
    assert_memory_not_equal(k, base, 16);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed", 6, 1, "eu-west", "us-east"), 0);
    assert_memory_not_equal(k, base, 16);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed", 5, 2, "eu-west", "us-east"), 0);
    assert_memory_not_equal(k, base, 16);
    assert_int_equal(
        fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "fed", 5, 1, "eu-west", "us-eas"), 0);
    assert_memory_not_equal(k, base, 16);
    /* length prefixes: ("ab", "c") and ("a", "bc") differ */
    assert_int_equal(fa_kdf_derive(base, 16, ikm, 32, FA_KDF_PAIR_MASK, "f", 1, 1, "ab", "c"), 0);
    assert_int_equal(fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "f", 1, 1, "a", "bc"), 0);
    assert_memory_not_equal(k, base, 16);
    ikm[31] ^= 1;
    assert_int_equal(fa_kdf_derive(k, 16, ikm, 32, FA_KDF_PAIR_MASK, "f", 1, 1, "ab", "c"), 0);
    assert_memory_not_equal(k, base, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_x25519_rfc7748_5_2),
        cmocka_unit_test(test_x25519_rfc7748_6_1),
        cmocka_unit_test(test_x25519_low_order_refused),
        cmocka_unit_test(test_ed25519_rfc8032),
        cmocka_unit_test(test_aes128ctr_sp800_38a_f51),
        cmocka_unit_test(test_prg_blocks_and_seek),
        cmocka_unit_test(test_hkdf_rfc5869),
        cmocka_unit_test(test_kdf_domain_separation),
    };
    if (sodium_init() < 0)
        return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
