/* checkpoint.c - C2SP checkpoints: the signed size and root of the audit
 * log's tree (see checkpoint.h). */
#include "crypto/note_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* ---------------------------------------------------------------------------
 * Checkpoints
 * ------------------------------------------------------------------------- */

int fa_checkpoint_sign(const fa_note_signer *s, const fa_checkpoint *cp, char **out,
                       size_t *out_len, fa_error *err)
{
    char body[FA_NOTE_NAME_MAX + 128], b64[64];
    int n;

    *out = NULL;
    if (!fa_note_name_valid(cp->origin))
        return fa_errorf(err, FA_ERR_INVAL, "invalid checkpoint origin \"%s\"", cp->origin);
    sodium_bin2base64(b64, sizeof(b64), cp->root, FA_MERKLE_HASH_LEN,
                      sodium_base64_VARIANT_ORIGINAL);
    n = snprintf(body, sizeof(body), "%s\n%" PRIu64 "\n%s\n", cp->origin, cp->size, b64);
    if (n < 0 || (size_t)n >= sizeof(body))
        return fa_errorf(err, FA_ERR_INVAL, "checkpoint origin too long");
    return fa_note_sign(s, body, (size_t)n, out, out_len, err);
}

int fa_checkpoint_parse(const char *note, size_t len, fa_checkpoint *out, fa_error *err)
{
    const char *p = note, *end, *nl;
    long split;
    uint64_t size = 0;
    uint8_t root[FA_MERKLE_HASH_LEN + 4];
    size_t rlen = 0, bad;

    memset(out, 0, sizeof(*out));
    if (len > FA_NOTE_MAX_LEN)
        return fa_errorf(err, FA_ERR_PARSE, "checkpoint too large (%zu bytes)", len);
    split = fa_note_last_blank(note, len);
    end = split >= 0 ? note + split + 1 : note + len;
    bad = fa_note_text_check((const uint8_t *)note, (size_t)(end - note));
    if (bad != (size_t)(end - note))
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed checkpoint: invalid UTF-8 or a control character at byte %zu",
                         bad);

    /* Line 1: origin. */
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || nl == p || (size_t)(nl - p) > FA_NOTE_NAME_MAX)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed checkpoint: line 1 must be a non-empty origin of at most %d "
                         "bytes",
                         FA_NOTE_NAME_MAX);
    memcpy(out->origin, p, (size_t)(nl - p));
    out->origin[nl - p] = 0;
    p = nl + 1;

    /* Line 2: tree size, decimal, no leading zero. */
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || nl == p || (nl - p > 1 && *p == '0') || nl - p > 20)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed checkpoint: line 2 must be the tree size in decimal");
    for (const char *q = p; q < nl; q++) {
        if (*q < '0' || *q > '9' || size > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
            return fa_errorf(err, FA_ERR_PARSE,
                             "malformed checkpoint: line 2 must be the tree size in decimal");
        size = size * 10 + (uint64_t)(*q - '0');
    }
    out->size = size;
    p = nl + 1;

    /* Line 3: base64 root hash. */
    nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl || fa_note_b64_decode(p, (size_t)(nl - p), root, sizeof(root), &rlen) != 0 ||
        rlen != FA_MERKLE_HASH_LEN)
        return fa_errorf(err, FA_ERR_PARSE,
                         "malformed checkpoint: line 3 must be the base64 of a 32-byte root hash");
    memcpy(out->root, root, FA_MERKLE_HASH_LEN);
    p = nl + 1;

    /* Extension lines: non-empty, ignored. */
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || nl == p)
            return fa_errorf(err, FA_ERR_PARSE,
                             "malformed checkpoint: empty or unterminated "
                             "extension line");
        p = nl + 1;
    }
    return 0;
}

int fa_checkpoint_open(const char *note, size_t len, const fa_note_verifier *v, fa_checkpoint *out,
                       fa_error *err)
{
    fa_note_verifier vv;
    size_t tlen;
    int rc;

    rc = fa_checkpoint_parse(note, len, out, err);
    if (rc < 0)
        return rc;
    vv = *v;
    if (!vv.name[0]) {
        if (!fa_note_name_valid(out->origin))
            return fa_errorf(err, FA_ERR_PARSE, "checkpoint origin \"%s\" is not a valid key name",
                             out->origin);
        snprintf(vv.name, sizeof(vv.name), "%s", out->origin);
    }
    rc = fa_note_open(note, len, &vv, &tlen, err);
    sodium_memzero(&vv, sizeof(vv));
    return rc;
}
