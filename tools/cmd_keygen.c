/* `fedagg keygen`: a region's long-term Ed25519 identity key.
 *
 *   fedagg keygen --out PREFIX [--force]
 *   fedagg keygen --public KEYFILE
 *
 * Writes PREFIX.key (the secret, mode 0600) and PREFIX.pub (the base64 of the
 * 32-byte public key, the format of config.proto Region.identity_public_key).
 * The formats are crypto/identity.h's; this file only does the file I/O.
 * Exit status: 0 success, 1 failure, 2 usage. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sodium.h>

#include "common/fa_file.h"
#include "crypto/identity.h"

const char fa_cmd_keygen_help[] =
    "generate a region's Ed25519 identity key (PREFIX.key, PREFIX.pub)";

static const char usage_text[] =
    "usage: fedagg keygen --out PREFIX [--force]\n"
    "       fedagg keygen --public KEYFILE\n"
    "\n"
    "--out PREFIX writes a new Ed25519 identity key: PREFIX.key, the secret\n"
    "(mode 0600; the worker's identity_key_file), and PREFIX.pub, the base64 of\n"
    "the public key (the aggregator config's Region.identity_public_key or\n"
    "identity_public_key_file).  Existing files are kept unless --force.\n"
    "\n"
    "--public KEYFILE prints the public key of an existing secret key file.\n";

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int print_public(const char *path)
{
    uint8_t *data = NULL, seed[FA_IDENTITY_SEED_BYTES], pk[FA_IDENTITY_PK_BYTES];
    char text[FA_IDENTITY_PUBLIC_TEXT_MAX];
    size_t len = 0, tlen;
    fa_error err;
    int rc;

    fa_error_clear(&err);
    if ((rc = fa_file_check_private(path, &err)) != 0 ||
        (rc = fa_file_read_all(path, &data, &len, 4096, &err)) != 0) {
        fprintf(stderr, "fedagg keygen: %s\n", fa_error_msg(&err, rc));
        return 1;
    }
    rc = fa_identity_parse_secret(data, len, seed, &err);
    sodium_memzero(data, len);
    free(data);
    if (rc != 0) {
        fprintf(stderr, "fedagg keygen: %s: %s\n", path, fa_error_msg(&err, rc));
        return 1;
    }
    rc = fa_identity_public_key(seed, pk);
    sodium_memzero(seed, sizeof(seed));
    if (rc != 0) {
        fprintf(stderr, "fedagg keygen: %s: %s\n", path, fa_strerror(rc));
        return 1;
    }
    fa_identity_format_public(pk, text, &tlen);
    fwrite(text, 1, tlen, stdout);
    return 0;
}

int fa_cmd_keygen(int argc, char **argv)
{
    const char *prefix = NULL, *public_of = NULL;
    char key_path[4096], pub_path[4096], secret[FA_IDENTITY_SECRET_TEXT_MAX];
    char pub[FA_IDENTITY_PUBLIC_TEXT_MAX];
    uint8_t seed[FA_IDENTITY_SEED_BYTES], pk[FA_IDENTITY_PK_BYTES];
    size_t slen = 0, plen = 0;
    int force = 0, rc;
    fa_error err;

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            prefix = argv[++i];
        } else if (!strcmp(argv[i], "--public") && i + 1 < argc) {
            public_of = argv[++i];
        } else if (!strcmp(argv[i], "--force")) {
            force = 1;
        } else {
            fprintf(stderr, "fedagg keygen: unknown or incomplete argument '%s'\n\n%s", argv[i],
                    usage_text);
            return 2;
        }
    }
    if (public_of && !prefix)
        return print_public(public_of);
    if (!prefix || public_of || !*prefix) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (snprintf(key_path, sizeof(key_path), "%s.key", prefix) >= (int)sizeof(key_path) ||
        snprintf(pub_path, sizeof(pub_path), "%s.pub", prefix) >= (int)sizeof(pub_path)) {
        fprintf(stderr, "fedagg keygen: --out prefix too long\n");
        return 2;
    }
    if (!force && (exists(key_path) || exists(pub_path))) {
        fprintf(stderr,
                "fedagg keygen: %s or %s exists; not overwriting an identity key (use --force "
                "to replace it)\n",
                key_path, pub_path);
        return 1;
    }
    if (sodium_init() < 0 || fa_identity_generate(seed, pk, NULL) != 0 ||
        fa_identity_format_secret(seed, secret, &slen) != 0) {
        sodium_memzero(seed, sizeof(seed));
        fprintf(stderr, "fedagg keygen: key generation failed\n");
        return 1;
    }
    sodium_memzero(seed, sizeof(seed));
    fa_identity_format_public(pk, pub, &plen);
    fa_error_clear(&err);
    rc = fa_file_write_atomic(key_path, secret, slen, 0600, &err);
    sodium_memzero(secret, sizeof(secret));
    if (rc == 0)
        rc = fa_file_write_atomic(pub_path, pub, plen, 0644, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg keygen: %s\n", fa_error_msg(&err, rc));
        return 1;
    }
    printf("wrote %s (secret, mode 0600) and %s\npublic key: %s", key_path, pub_path, pub);
    return 0;
}
