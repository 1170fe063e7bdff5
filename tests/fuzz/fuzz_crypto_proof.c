/* libFuzzer target: the parsers a region runs on what the aggregator sends
 * it (crypto/checkpoint.h, crypto/merkle.h) - proof bundles, C2SP checkpoint
 * notes, key texts - and proof verification on arbitrary hashes.
 *
 * The first byte picks the parser; the rest is its input:
 *   0  proof bundle: parse, verify (fa-audit-mklog's key); an accepted bundle
 *      formats back to the same bytes
 *   1  checkpoint note: parse and open; a parsed body re-signed opens
 *   2  signed note: fa_note_open with a named and an unnamed verifier
 *   3  key texts: fa_note_verifier_parse, fa_note_signer_parse
 *   4  inclusion proof: index u64, size u64, leaf, root, then hashes
 *   5  consistency proof: old u64, size u64, old root, root, then hashes */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypto/checkpoint.h"
#include "crypto/merkle.h"

static fa_note_signer *signer;
static fa_note_verifier named, unnamed;

static void init(void)
{
    uint8_t seed[32];
    const char *what = "fa-audit-mklog/1/aggregator";
    fa_error err;
    if (sodium_init() < 0)
        abort();
    crypto_hash_sha256(seed, (const uint8_t *)what, strlen(what));
    if (fa_note_signer_new(&signer, "fedagg.test/audit-it", seed, 32, &err) != 0)
        abort();
    memset(&named, 0, sizeof(named));
    memset(&unnamed, 0, sizeof(unnamed));
    strcpy(named.name, "fedagg.test/audit-it");
    memcpy(named.pk, fa_note_signer_public_key(signer), 32);
    memcpy(unnamed.pk, named.pk, 32);
}

static uint64_t u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fa_error err;
    fa_checkpoint cp;

    if (!signer)
        init();
    if (size < 1)
        return 0;
    switch (data[0] % 6) {
    case 0: {
        fa_proof_bundle b;
        char *text = NULL;
        size_t tlen;
        if (fa_proof_bundle_parse((const char *)data + 1, size - 1, &b, &err) == 0) {
            fa_proof_bundle_verify(&b, &named, &cp, &err);
            fa_proof_bundle_verify(&b, &unnamed, &cp, &err);
            if (fa_proof_bundle_format(&b, &text, &tlen, &err) == 0 &&
                (tlen != size - 1 || memcmp(text, data + 1, tlen) != 0)) {
                /* the only freedom the parser allows is in base64 padding
                 * bits; a re-parse must give the same bundle */
                fa_proof_bundle b2;
                if (fa_proof_bundle_parse(text, tlen, &b2, &err) != 0 || b2.index != b.index ||
                    b2.record_len != b.record_len ||
                    memcmp(b2.record, b.record, b.record_len) != 0 || b2.proof_len != b.proof_len ||
                    memcmp(b2.proof, b.proof, b.proof_len * FA_MERKLE_HASH_LEN) != 0)
                    abort();
                fa_proof_bundle_free(&b2);
            }
            free(text);
        }
        fa_proof_bundle_free(&b);
        break;
    }
    case 1: {
        char *note;
        size_t n;
        fa_checkpoint again;
        fa_checkpoint_open((const char *)data + 1, size - 1, &unnamed, &cp, &err);
        if (fa_checkpoint_parse((const char *)data + 1, size - 1, &cp, &err) == 0 &&
            strcmp(cp.origin, "fedagg.test/audit-it") == 0) {
            if (fa_checkpoint_sign(signer, &cp, &note, &n, &err) != 0 ||
                fa_checkpoint_open(note, n, &named, &again, &err) != 0 || again.size != cp.size ||
                memcmp(again.root, cp.root, 32) != 0)
                abort();
            free(note);
        }
        break;
    }
    case 2: {
        size_t tlen;
        if (fa_note_open((const char *)data + 1, size - 1, &named, &tlen, &err) == 0 &&
            tlen >= size - 1)
            abort();
        fa_note_open((const char *)data + 1, size - 1, &unnamed, &tlen, &err);
        break;
    }
    case 3: {
        fa_note_verifier v;
        fa_note_signer *s = NULL;
        fa_note_verifier_parse(&v, data + 1, size - 1, &err);
        if (fa_note_signer_parse(&s, "o", data + 1, size - 1, &err) == 0)
            fa_note_signer_del(s);
        break;
    }
    case 4:
    case 5: {
        const uint8_t *p = data + 1;
        size_t n = size - 1, len;
        uint8_t r[32];
        if (n < 80)
            break;
        len = (n - 80) / 32;
        if (len > FA_MERKLE_MAX_PROOF + 2)
            len = FA_MERKLE_MAX_PROOF + 2;
        if (data[0] % 6 == 4) {
            fa_merkle_verify_inclusion(p + 16, u64(p), u64(p + 8), p + 80, len, p + 48);
            fa_merkle_root_from_inclusion(p + 16, u64(p), u64(p + 8), p + 80, len, r);
        } else {
            fa_merkle_verify_consistency(u64(p), u64(p + 8), p + 16, p + 48, p + 80, len);
        }
        break;
    }
    }
    return 0;
}
