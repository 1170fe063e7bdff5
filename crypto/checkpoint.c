/* checkpoint.c - C2SP checkpoints: the signed size and root of the audit
 * log's tree, and the text of a consistency proof between two of them (see
 * checkpoint.h). */
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

/* ---------------------------------------------------------------------------
 * Consistency proofs as text
 * ------------------------------------------------------------------------- */

static const char consistency_magic[] = "fedagg-audit-consistency v1";

int fa_checkpoint_consistency_format(uint64_t old_size, uint64_t size, const uint8_t *proof,
                                     size_t n, char **text, size_t *len, fa_error *err)
{
    size_t cap, off;
    char *out;

    *text = NULL;
    *len = 0;
    if (n > FA_MERKLE_MAX_PROOF)
        return fa_errorf(err, FA_ERR_INVAL, "consistency proof of %zu hashes (at most %d)", n,
                         FA_MERKLE_MAX_PROOF);
    cap = 96 +
          n * (6 + sodium_base64_ENCODED_LEN(FA_MERKLE_HASH_LEN, sodium_base64_VARIANT_ORIGINAL));
    out = malloc(cap);
    if (!out)
        return fa_errorf(err, FA_ERR_NOMEM, "consistency proof: out of memory");
    off = (size_t)snprintf(out, cap, "%s\nold %" PRIu64 "\nsize %" PRIu64 "\n", consistency_magic,
                           old_size, size);
    for (size_t i = 0; i < n; i++) {
        memcpy(out + off, "hash ", 5);
        off += 5;
        sodium_bin2base64(out + off, cap - off, proof + i * FA_MERKLE_HASH_LEN, FA_MERKLE_HASH_LEN,
                          sodium_base64_VARIANT_ORIGINAL);
        off += strlen(out + off);
        out[off++] = '\n';
    }
    out[off] = '\0';
    *text = out;
    *len = off;
    return 0;
}

/* One line at *p (before end) into buf, NUL-terminated, without its
 * newline.  Returns its length, -1 at the end of the text, -2 for a line
 * longer than cap - 1 or holding a NUL (malformed). */
static int consistency_line(const char **p, const char *end, char *buf, size_t cap)
{
    const char *nl;
    size_t n;

    if (*p >= end)
        return -1;
    nl = memchr(*p, '\n', (size_t)(end - *p));
    n = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
    if (n >= cap || memchr(*p, '\0', n))
        return -2;
    memcpy(buf, *p, n);
    buf[n] = '\0';
    *p += n + (nl != NULL);
    return (int)n;
}

/* "<key> <decimal>" exactly: no sign, no spaces, no leading zero. */
static int consistency_number(const char *line, const char *key, uint64_t *out)
{
    size_t k = strlen(key);
    const char *q = line + k + 1;
    uint64_t v = 0;

    if (strncmp(line, key, k) != 0 || line[k] != ' ' || !*q || (q[0] == '0' && q[1]))
        return -1;
    for (; *q; q++) {
        if (*q < '0' || *q > '9' || v > (UINT64_MAX - (uint64_t)(*q - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*q - '0');
    }
    *out = v;
    return 0;
}

int fa_checkpoint_consistency_parse(const char *text, size_t len, uint64_t old_size, uint64_t size,
                                    uint8_t *proof, size_t *n, fa_error *err)
{
    const char *p = text, *end = text + len;
    char line[128];
    uint64_t o = 0, s = 0;
    int l;

    *n = 0;
    if (consistency_line(&p, end, line, sizeof(line)) < 0 || strcmp(line, consistency_magic) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "malformed header: line 1 must be \"%s\"",
                         consistency_magic);
    if (consistency_line(&p, end, line, sizeof(line)) < 0 ||
        consistency_number(line, "old", &o) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "malformed header: line 2 must be \"old <size>\"");
    if (consistency_line(&p, end, line, sizeof(line)) < 0 ||
        consistency_number(line, "size", &s) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "malformed header: line 3 must be \"size <size>\"");
    if (o != old_size || s != size)
        return fa_errorf(err, FA_ERR_RANGE,
                         "from %" PRIu64 " to %" PRIu64 " records, %" PRIu64 " to %" PRIu64
                         " asked",
                         o, s, old_size, size);
    while ((l = consistency_line(&p, end, line, sizeof(line))) != -1) {
        size_t got = 0;
        if (l == 0 && p >= end)
            break; /* the final newline's empty line */
        if (l < 0 || *n >= FA_MERKLE_MAX_PROOF || strncmp(line, "hash ", 5) != 0 ||
            fa_note_b64_decode(line + 5, strlen(line + 5), proof + *n * FA_MERKLE_HASH_LEN,
                               FA_MERKLE_HASH_LEN, &got) != 0 ||
            got != FA_MERKLE_HASH_LEN)
            return fa_errorf(err, FA_ERR_PARSE, "malformed hash line %zu (line %zu)", *n + 1,
                             *n + 4);
        (*n)++;
    }
    return 0;
}
