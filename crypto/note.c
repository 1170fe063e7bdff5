/* note.c - C2SP signed notes with Ed25519 keys: key names and ids, signer
 * and verifier keys, signing and opening (see checkpoint.h). */
#include "crypto/note_internal.h"

#include "common/fa_hex.h"
#include "crypto/identity.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#define EM_DASH_SP "\xe2\x80\x94 " /* U+2014 EM DASH, then a space */
#define EM_DASH_SP_LEN 4
#define ALG_ED25519 0x01

struct fa_note_signer {
    char name[FA_NOTE_NAME_MAX + 1];
    uint8_t *sk; /* sodium_malloc'ed, FA_ED25519_SK_LEN */
    uint8_t pk[FA_ED25519_PK_LEN];
    uint32_t key_id;
};

/* ---------------------------------------------------------------------------
 * Text helpers
 * ------------------------------------------------------------------------- */

/* Decodes one UTF-8 code point at s (n bytes left); returns its length, or 0
 * when malformed (overlong, surrogate, above U+10FFFF, truncated). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint32_t c;
    size_t len, i;

    if (n == 0)
        return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xe0) == 0xc0) {
        len = 2;
        c = s[0] & 0x1f;
    } else if ((s[0] & 0xf0) == 0xe0) {
        len = 3;
        c = s[0] & 0x0f;
    } else if ((s[0] & 0xf8) == 0xf0) {
        len = 4;
        c = s[0] & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if ((len == 2 && c < 0x80) || (len == 3 && c < 0x800) || (len == 4 && c < 0x10000) ||
        c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return len;
}

/* Valid UTF-8 with no ASCII control character other than '\n' (signed-note
 * rule).  Returns the offset of the first bad byte, or len when all is well. */
size_t fa_note_text_check(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (k == 0 || (cp < 0x20 && cp != '\n') || cp == 0x7f)
            return i;
        i += k;
    }
    return len;
}

/* Unicode White_Space, as Go's unicode.IsSpace. */
static int is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static int name_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    if (len == 0 || len > FA_NOTE_NAME_MAX)
        return 0;
    while (i < len) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, len - i, &cp);
        if (k == 0 || cp < 0x20 || cp == 0x7f || cp == '+' || is_space(cp))
            return 0;
        i += k;
    }
    return 1;
}

int fa_note_name_valid(const char *name)
{
    return name && name_valid((const uint8_t *)name, strlen(name));
}

/* Standard base64 with padding (RFC 4648 section 4).  Returns 0 when the
 * whole of s decodes into at most cap bytes. */
int fa_note_b64_decode(const char *s, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    const char *end = NULL;
    size_t n = 0;
    if (len == 0 || len % 4 != 0)
        return -1;
    if (sodium_base642bin(out, cap, s, len, NULL, &n, &end, sodium_base64_VARIANT_ORIGINAL) != 0 ||
        end != s + len)
        return -1;
    *out_len = n;
    return 0;
}

static int parse_hex32(const char *s, size_t len, uint32_t *out)
{
    uint32_t v = 0;
    if (len != 8)
        return -1;
    for (size_t i = 0; i < 8; i++) {
        int h = fa_hex_digit((unsigned char)s[i]);
        if (h < 0)
            return -1;
        v = v << 4 | (uint32_t)h;
    }
    *out = v;
    return 0;
}

static int is_ws(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Whether data looks like text (printable ASCII); then trims whitespace. */
static int as_text(const uint8_t *data, size_t len, const uint8_t **s, size_t *n)
{
    size_t a = 0, b = len;
    for (size_t i = 0; i < len; i++)
        if (!(data[i] >= 0x21 && data[i] <= 0x7e) && !is_ws(data[i]))
            return 0;
    while (a < b && is_ws(data[a]))
        a++;
    while (b > a && is_ws(data[b - 1]))
        b--;
    *s = data + a;
    *n = b - a;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Keys
 * ------------------------------------------------------------------------- */

static uint32_t key_id_raw(const uint8_t *name, size_t name_len, const uint8_t pk[32])
{
    crypto_hash_sha256_state st;
    uint8_t h[32];
    static const uint8_t sep[2] = {0x0a, ALG_ED25519};

    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, name, name_len);
    crypto_hash_sha256_update(&st, sep, 2);
    crypto_hash_sha256_update(&st, pk, 32);
    crypto_hash_sha256_final(&st, h);
    return (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
}

uint32_t fa_note_key_id(const char *name, const uint8_t pk[FA_ED25519_PK_LEN])
{
    return key_id_raw((const uint8_t *)name, strlen(name), pk);
}

int fa_note_signer_new(fa_note_signer **out, const char *name, const uint8_t *key, size_t key_len,
                       fa_error *err)
{
    fa_note_signer *s;
    uint8_t pk[FA_ED25519_PK_LEN];

    *out = NULL;
    if (!fa_note_name_valid(name))
        return fa_errorf(err, FA_ERR_INVAL,
                         "invalid key name (origin) \"%s\": it must be 1-%d bytes of UTF-8 "
                         "without spaces or '+'",
                         name ? name : "", FA_NOTE_NAME_MAX);
    if (key_len != FA_ED25519_SEED_LEN && key_len != FA_ED25519_SK_LEN)
        return fa_errorf(err, FA_ERR_INVAL,
                         "Ed25519 secret key has %zu bytes; expected a 32-byte seed or a "
                         "64-byte libsodium secret key",
                         key_len);
    s = calloc(1, sizeof(*s));
    if (!s)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    s->sk = sodium_malloc(FA_ED25519_SK_LEN);
    if (!s->sk) {
        free(s);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory (secure memory for the signing key)");
    }
    if (crypto_sign_seed_keypair(pk, s->sk, key) != 0) {
        fa_note_signer_del(s);
        return fa_errorf(err, FA_ERR_CRYPTO, "Ed25519 key derivation failed");
    }
    if (key_len == FA_ED25519_SK_LEN && sodium_memcmp(pk, key + 32, 32) != 0) {
        fa_note_signer_del(s);
        return fa_errorf(err, FA_ERR_INVAL,
                         "Ed25519 secret key is inconsistent: its public half does not match "
                         "its seed");
    }
    memcpy(s->pk, pk, sizeof(pk));
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->key_id = fa_note_key_id(s->name, s->pk);
    *out = s;
    return 0;
}

void fa_note_signer_del(fa_note_signer *s)
{
    if (!s)
        return;
    sodium_free(s->sk); /* wipes */
    sodium_memzero(s, sizeof(*s));
    free(s);
}

const char *fa_note_signer_name(const fa_note_signer *s)
{
    return s->name;
}

const uint8_t *fa_note_signer_public_key(const fa_note_signer *s)
{
    return s->pk;
}

uint32_t fa_note_signer_key_id(const fa_note_signer *s)
{
    return s->key_id;
}

/* "PRIVATE+KEY+<name>+<hex id>+<base64(0x01 || seed)>" */
static int parse_go_skey(fa_note_signer **out, const char *want_name, const uint8_t *s, size_t n,
                         fa_error *err)
{
    const char *p = (const char *)s + 12, *end = (const char *)s + n;
    const char *plus1, *plus2;
    char name[FA_NOTE_NAME_MAX + 1];
    uint8_t key[1 + 32 + 1];
    size_t klen = 0;
    uint32_t id;
    int rc;

    plus1 = memchr(p, '+', (size_t)(end - p));
    if (!plus1 || (size_t)(plus1 - p) > FA_NOTE_NAME_MAX)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed signer key: expected "
                         "PRIVATE+KEY+<name>+<key id>+<base64 key>");
    plus2 = memchr(plus1 + 1, '+', (size_t)(end - plus1 - 1));
    memcpy(name, p, (size_t)(plus1 - p));
    name[plus1 - p] = 0;
    if (!plus2 || parse_hex32(plus1 + 1, (size_t)(plus2 - plus1 - 1), &id) != 0 ||
        fa_note_b64_decode(plus2 + 1, (size_t)(end - plus2 - 1), key, sizeof(key), &klen) != 0 ||
        klen != 33 || key[0] != ALG_ED25519 || !fa_note_name_valid(name)) {
        sodium_memzero(key, sizeof(key));
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed signer key: expected "
                         "PRIVATE+KEY+<name>+<key id>+<base64(0x01 || seed)>");
    }
    if (want_name && want_name[0] && strcmp(want_name, name) != 0) {
        sodium_memzero(key, sizeof(key));
        return fa_errorf(err, FA_ERR_INVAL, "signer key is named \"%s\" but the origin is \"%s\"",
                         name, want_name);
    }
    rc = fa_note_signer_new(out, name, key + 1, 32, err);
    sodium_memzero(key, sizeof(key));
    if (rc == 0 && (*out)->key_id != id) {
        uint32_t want = (*out)->key_id;
        fa_note_signer_del(*out);
        *out = NULL;
        return fa_errorf(err, FA_ERR_INVAL,
                         "signer key id %08" PRIx32 " does not match its key (expected %08" PRIx32
                         ")",
                         id, want);
    }
    return rc;
}

int fa_note_signer_parse(fa_note_signer **out, const char *name, const uint8_t *data, size_t len,
                         fa_error *err)
{
    const uint8_t *s;
    size_t n;
    uint8_t *key;
    size_t klen = 0;
    int rc;

    *out = NULL;
    if (memmem(data, len, "fedagg-ed25519-secret-v1", 24)) {
        /* `fedagg keygen` (crypto/identity.h) */
        uint8_t seed[FA_ED25519_SEED_LEN];
        rc = fa_identity_parse_secret(data, len, seed, err);
        if (rc == 0)
            rc = fa_note_signer_new(out, name, seed, sizeof(seed), err);
        sodium_memzero(seed, sizeof(seed));
        return rc;
    }
    if (as_text(data, len, &s, &n)) {
        if (n > 12 && memcmp(s, "PRIVATE+KEY+", 12) == 0)
            return parse_go_skey(out, name, s, n, err);
        key = sodium_malloc(64);
        if (!key)
            return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
        if ((n == 64 || n == 128) && fa_hex_decode(key, n / 2, (const char *)s, n) == 0) {
            klen = n / 2;
        } else if (fa_note_b64_decode((const char *)s, n, key, 64, &klen) != 0 ||
                   (klen != 32 && klen != 64)) {
            klen = 0;
        }
        if (klen) {
            rc = fa_note_signer_new(out, name, key, klen, err);
            sodium_free(key);
            return rc;
        }
        sodium_free(key);
    }
    if (len == FA_ED25519_SEED_LEN || len == FA_ED25519_SK_LEN)
        return fa_note_signer_new(out, name, data, len, err);
    return fa_errorf(err, FA_ERR_PARSE,
                     "unrecognised Ed25519 secret key (%zu bytes): expected a 32-byte seed or a "
                     "64-byte libsodium secret key, raw or as base64 or hex text, or a Go "
                     "note signer key PRIVATE+KEY+<name>+<id>+<key>",
                     len);
}

int fa_note_verifier_parse(fa_note_verifier *out, const uint8_t *data, size_t len, fa_error *err)
{
    const uint8_t *s;
    size_t n, klen = 0;
    uint8_t key[64];

    memset(out, 0, sizeof(*out));
    if (as_text(data, len, &s, &n)) {
        const char *p = (const char *)s, *end = p + n;
        const char *plus1 = memchr(p, '+', n);
        /* base64 and hex first: base64 may contain '+' too */
        if (n == 64 && fa_hex_decode(out->pk, 32, p, n) == 0)
            return 0;
        if (fa_note_b64_decode(p, n, key, sizeof(key), &klen) == 0 && klen == 32) {
            memcpy(out->pk, key, 32);
            return 0;
        }
        if (plus1) {
            /* Go verifier key <name>+<hex id>+<base64(0x01 || pk)> */
            const char *plus2 = memchr(plus1 + 1, '+', (size_t)(end - plus1 - 1));
            uint32_t id;
            if ((size_t)(plus1 - p) > FA_NOTE_NAME_MAX || !plus2 ||
                parse_hex32(plus1 + 1, (size_t)(plus2 - plus1 - 1), &id) != 0 ||
                fa_note_b64_decode(plus2 + 1, (size_t)(end - plus2 - 1), key, sizeof(key), &klen) !=
                    0 ||
                klen != 33 || key[0] != ALG_ED25519)
                return fa_errorf(err, FA_ERR_PARSE,
                                 "malformed verifier key: expected <name>+<key id>+<base64(0x01 "
                                 "|| Ed25519 public key)>");
            memcpy(out->name, p, (size_t)(plus1 - p));
            out->name[plus1 - p] = 0;
            memcpy(out->pk, key + 1, 32);
            if (!fa_note_name_valid(out->name))
                return fa_errorf(err, FA_ERR_PARSE, "verifier key has an invalid name");
            if (fa_note_key_id(out->name, out->pk) != id)
                return fa_errorf(err, FA_ERR_PARSE,
                                 "verifier key id %08" PRIx32 " does not match its key", id);
            return 0;
        }
    }
    if (len == FA_ED25519_PK_LEN) {
        memcpy(out->pk, data, 32);
        return 0;
    }
    return fa_errorf(err, FA_ERR_PARSE,
                     "unrecognised Ed25519 public key (%zu bytes): expected 32 raw bytes, their "
                     "base64 or hex, or a Go note verifier key <name>+<id>+<key>",
                     len);
}

int fa_note_vkey_format(const char *name, const uint8_t pk[FA_ED25519_PK_LEN], char *buf,
                        size_t cap, fa_error *err)
{
    uint8_t key[33];
    char b64[64];
    int n;

    if (!fa_note_name_valid(name))
        return fa_errorf(err, FA_ERR_INVAL, "invalid key name \"%s\"", name ? name : "");
    key[0] = ALG_ED25519;
    memcpy(key + 1, pk, 32);
    sodium_bin2base64(b64, sizeof(b64), key, sizeof(key), sodium_base64_VARIANT_ORIGINAL);
    n = snprintf(buf, cap, "%s+%08" PRIx32 "+%s", name, fa_note_key_id(name, pk), b64);
    if (n < 0 || (size_t)n >= cap)
        return fa_errorf(err, FA_ERR_TOOBIG, "verifier key does not fit in %zu bytes", cap);
    return 0;
}

/* ---------------------------------------------------------------------------
 * Signed notes
 * ------------------------------------------------------------------------- */

int fa_note_sign(const fa_note_signer *s, const char *text, size_t text_len, char **out,
                 size_t *out_len, fa_error *err)
{
    uint8_t sig[4 + FA_ED25519_SIG_LEN];
    char b64[sodium_base64_ENCODED_LEN(sizeof(sig), sodium_base64_VARIANT_ORIGINAL)];
    size_t name_len = strlen(s->name), n, bad;
    char *buf;

    *out = NULL;
    if (text_len == 0 || text[text_len - 1] != '\n' || text_len > FA_NOTE_MAX_LEN / 2)
        return fa_errorf(err, FA_ERR_INVAL, "note text must be non-empty and end in a newline");
    bad = fa_note_text_check((const uint8_t *)text, text_len);
    if (bad != text_len)
        return fa_errorf(err, FA_ERR_INVAL,
                         "note text has invalid UTF-8 or a control character at byte %zu", bad);
    if (text[0] == '\n' || memmem(text, text_len, "\n\n", 2))
        return fa_errorf(err, FA_ERR_INVAL, "note text must not contain a blank line");

    sig[0] = (uint8_t)(s->key_id >> 24);
    sig[1] = (uint8_t)(s->key_id >> 16);
    sig[2] = (uint8_t)(s->key_id >> 8);
    sig[3] = (uint8_t)s->key_id;
    if (crypto_sign_detached(sig + 4, NULL, (const uint8_t *)text, text_len, s->sk) != 0)
        return fa_errorf(err, FA_ERR_CRYPTO, "Ed25519 signing failed");
    sodium_bin2base64(b64, sizeof(b64), sig, sizeof(sig), sodium_base64_VARIANT_ORIGINAL);

    n = text_len + 1 + EM_DASH_SP_LEN + name_len + 1 + strlen(b64) + 1;
    buf = malloc(n + 1);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    memcpy(buf, text, text_len);
    snprintf(buf + text_len, n + 1 - text_len, "\n" EM_DASH_SP "%s %s\n", s->name, b64);
    *out = buf;
    if (out_len)
        *out_len = n;
    return 0;
}

/* Finds the last "\n\n" in msg; returns its offset or -1. */
long fa_note_last_blank(const char *msg, size_t len)
{
    for (size_t i = len; i >= 2; i--)
        if (msg[i - 2] == '\n' && msg[i - 1] == '\n')
            return (long)(i - 2);
    return -1;
}

int fa_note_open(const char *msg, size_t len, const fa_note_verifier *v, size_t *text_len,
                 fa_error *err)
{
    const char *sigs, *end = msg + len;
    size_t tlen, bad;
    long split;
    unsigned nsig = 0;
    int found = 0;

    if (len > FA_NOTE_MAX_LEN)
        return fa_errorf(err, FA_ERR_PARSE, "note is %zu bytes, more than the %u accepted", len,
                         FA_NOTE_MAX_LEN);
    bad = fa_note_text_check((const uint8_t *)msg, len);
    if (bad != len)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed note: invalid UTF-8 or a control character at byte %zu", bad);
    split = fa_note_last_blank(msg, len);
    if (split < 0)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed note: no blank line before the signature lines");
    tlen = (size_t)split + 1;
    sigs = msg + split + 2;
    if (sigs == end || end[-1] != '\n')
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed note: the signature lines must end in a newline");

    while (sigs < end) {
        const char *nl = memchr(sigs, '\n', (size_t)(end - sigs));
        const char *p = sigs, *sp;
        uint8_t raw[4 + 256];
        size_t rawlen = 0, name_len;
        uint32_t id, want;

        sigs = nl + 1;
        if (++nsig > FA_NOTE_MAX_SIGNATURES)
            return fa_errorf(err, FA_ERR_PARSE, "malformed note: more than %d signatures",
                             FA_NOTE_MAX_SIGNATURES);
        if ((size_t)(nl - p) < EM_DASH_SP_LEN || memcmp(p, EM_DASH_SP, EM_DASH_SP_LEN) != 0)
            return fa_errorf(err, FA_ERR_PARSE,
                             "malformed note: signature line %u does not start with an em dash "
                             "(U+2014) and a space",
                             nsig);
        p += EM_DASH_SP_LEN;
        sp = memchr(p, ' ', (size_t)(nl - p));
        if (!sp || !name_valid((const uint8_t *)p, (size_t)(sp - p)) ||
            fa_note_b64_decode(sp + 1, (size_t)(nl - sp - 1), raw, sizeof(raw), &rawlen) != 0 ||
            rawlen < 5)
            return fa_errorf(err, FA_ERR_PARSE,
                             "malformed note: signature line %u is not \"— <name> <base64>\"",
                             nsig);
        name_len = (size_t)(sp - p);
        id = (uint32_t)raw[0] << 24 | (uint32_t)raw[1] << 16 | (uint32_t)raw[2] << 8 | raw[3];
        if (v->name[0]) {
            if (name_len != strlen(v->name) || memcmp(p, v->name, name_len) != 0)
                continue;
            want = fa_note_key_id(v->name, v->pk);
        } else {
            want = key_id_raw((const uint8_t *)p, name_len, v->pk);
        }
        if (id != want || found)
            continue; /* another key's, or a repeat of ours: ignored as Go does */
        found = 1;
        if (rawlen != 4 + FA_ED25519_SIG_LEN ||
            crypto_sign_verify_detached(raw + 4, (const uint8_t *)msg, tlen, v->pk) != 0)
            return fa_errorf(err, FA_ERR_VERIFY,
                             "invalid signature for key %.*s+%08" PRIx32 " (signature line %u)",
                             (int)name_len, p, id, nsig);
    }
    if (!found) {
        if (v->name[0])
            return fa_errorf(err, FA_ERR_NOTFOUND,
                             "note has no signature by key %s+%08" PRIx32
                             " (signed by another key?)",
                             v->name, fa_note_key_id(v->name, v->pk));
        return fa_errorf(err, FA_ERR_NOTFOUND,
                         "note has no signature by the given public key (signed by another key?)");
    }
    if (text_len)
        *text_len = tlen;
    return 0;
}
