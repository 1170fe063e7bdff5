/* proof_bundle.c - an audit record with its inclusion proof and the
 * checkpoint it is proven against, as one text file (see checkpoint.h). */
#include "crypto/note_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

/* ---------------------------------------------------------------------------
 * Proof bundles
 * ------------------------------------------------------------------------- */

static const char bundle_magic[] = "fedagg-audit-proof v1";

int fa_proof_bundle_format(const fa_proof_bundle *b, char **out, size_t *out_len, fa_error *err)
{
    size_t rec64 = sodium_base64_ENCODED_LEN(b->record_len, sodium_base64_VARIANT_ORIGINAL);
    size_t cap, n;
    char *buf;
    int w;

    *out = NULL;
    if (b->proof_len > FA_MERKLE_MAX_PROOF || b->record_len == 0 ||
        b->record_len > FA_PROOF_BUNDLE_MAX_RECORD || !b->checkpoint || b->checkpoint_len == 0 ||
        b->checkpoint[b->checkpoint_len - 1] != '\n')
        return fa_errorf(err, FA_ERR_INVAL, "incomplete proof bundle");
    cap = sizeof(bundle_magic) + 32 + 8 + rec64 + b->proof_len * 52 + 2 + b->checkpoint_len + 1;
    buf = malloc(cap);
    if (!buf)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    w = snprintf(buf, cap, "%s\nindex %" PRIu64 "\nrecord ", bundle_magic, b->index);
    n = (size_t)w;
    sodium_bin2base64(buf + n, cap - n, b->record, b->record_len, sodium_base64_VARIANT_ORIGINAL);
    n += strlen(buf + n);
    buf[n++] = '\n';
    for (size_t i = 0; i < b->proof_len; i++) {
        memcpy(buf + n, "hash ", 5);
        n += 5;
        sodium_bin2base64(buf + n, cap - n, b->proof + i * FA_MERKLE_HASH_LEN, FA_MERKLE_HASH_LEN,
                          sodium_base64_VARIANT_ORIGINAL);
        n += strlen(buf + n);
        buf[n++] = '\n';
    }
    buf[n++] = '\n';
    memcpy(buf + n, b->checkpoint, b->checkpoint_len);
    n += b->checkpoint_len;
    buf[n] = 0;
    *out = buf;
    if (out_len)
        *out_len = n;
    return 0;
}

/* Returns the line starting at *p (without its newline) and advances *p past
 * it, or NULL at the end / an unterminated line. */
static const char *next_line(const char **p, const char *end, size_t *len)
{
    const char *s = *p, *nl;
    if (s >= end)
        return NULL;
    nl = memchr(s, '\n', (size_t)(end - s));
    if (!nl)
        return NULL;
    *len = (size_t)(nl - s);
    *p = nl + 1;
    return s;
}

int fa_proof_bundle_parse(const char *data, size_t len, fa_proof_bundle *b, fa_error *err)
{
    const char *p = data, *end = data + len, *line;
    size_t ll, n;
    unsigned lineno = 1;
    uint64_t idx = 0;

    memset(b, 0, sizeof(*b));
    if (len > 2 * FA_PROOF_BUNDLE_MAX_RECORD + FA_NOTE_MAX_LEN)
        return fa_errorf(err, FA_ERR_TOOBIG, "proof bundle too large (%zu bytes)", len);
    line = next_line(&p, end, &ll);
    if (!line || ll != strlen(bundle_magic) || memcmp(line, bundle_magic, ll) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "line 1: not a fedagg audit proof (expected \"%s\")",
                         bundle_magic);

    lineno++;
    line = next_line(&p, end, &ll);
    if (!line || ll < 7 || ll > 26 || memcmp(line, "index ", 6) != 0 || (ll > 7 && line[6] == '0'))
        return fa_errorf(err, FA_ERR_PARSE, "line 2: expected \"index <leaf index>\"");
    for (size_t i = 6; i < ll; i++) {
        if (line[i] < '0' || line[i] > '9' || idx > (UINT64_MAX - (uint64_t)(line[i] - '0')) / 10)
            return fa_errorf(err, FA_ERR_PARSE, "line 2: expected \"index <leaf index>\"");
        idx = idx * 10 + (uint64_t)(line[i] - '0');
    }
    b->index = idx;

    lineno++;
    line = next_line(&p, end, &ll);
    if (!line || ll < 8 || memcmp(line, "record ", 7) != 0)
        return fa_errorf(err, FA_ERR_PARSE, "line 3: expected \"record <base64>\"");
    if ((ll - 7) / 4 * 3 > FA_PROOF_BUNDLE_MAX_RECORD + 3)
        return fa_errorf(err, FA_ERR_TOOBIG, "line 3: record larger than %u bytes",
                         FA_PROOF_BUNDLE_MAX_RECORD);
    b->record = malloc((ll - 7) / 4 * 3 + 3);
    if (!b->record)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    if (fa_note_b64_decode(line + 7, ll - 7, b->record, (ll - 7) / 4 * 3 + 3, &n) != 0 || n == 0 ||
        n > FA_PROOF_BUNDLE_MAX_RECORD)
        return fa_errorf(err, FA_ERR_PARSE, "line 3: the record is not valid base64");
    b->record_len = n;

    for (;;) {
        lineno++;
        line = next_line(&p, end, &ll);
        if (!line)
            return fa_errorf(err, FA_ERR_PARSE,
                             "line %u: expected \"hash <base64>\" or the blank line before the "
                             "checkpoint",
                             lineno);
        if (ll == 0)
            break;
        if (b->proof_len == FA_MERKLE_MAX_PROOF)
            return fa_errorf(err, FA_ERR_PARSE, "line %u: more than %d proof hashes", lineno,
                             FA_MERKLE_MAX_PROOF);
        if (ll < 6 || memcmp(line, "hash ", 5) != 0 ||
            fa_note_b64_decode(line + 5, ll - 5, b->proof + b->proof_len * FA_MERKLE_HASH_LEN,
                               FA_MERKLE_HASH_LEN, &n) != 0 ||
            n != FA_MERKLE_HASH_LEN)
            return fa_errorf(err, FA_ERR_PARSE, "line %u: expected \"hash <base64 of 32 bytes>\"",
                             lineno);
        b->proof_len++;
    }

    n = (size_t)(end - p);
    if (n == 0 || memchr(p, 0, n))
        return fa_errorf(err, FA_ERR_PARSE, "line %u: expected the checkpoint note", lineno + 1);
    if (n > FA_NOTE_MAX_LEN)
        return fa_errorf(err, FA_ERR_TOOBIG, "checkpoint too large (%zu bytes)", n);
    b->checkpoint = malloc(n + 1);
    if (!b->checkpoint)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    memcpy(b->checkpoint, p, n);
    b->checkpoint[n] = 0;
    b->checkpoint_len = n;
    return 0;
}

int fa_proof_bundle_verify(const fa_proof_bundle *b, const fa_note_verifier *v, fa_checkpoint *cp,
                           fa_error *err)
{
    uint8_t leaf[FA_MERKLE_HASH_LEN];
    int rc;

    rc = fa_checkpoint_open(b->checkpoint, b->checkpoint_len, v, cp, err);
    if (rc < 0)
        return fa_error_prefix(err, rc, "checkpoint");
    if (b->index >= cp->size)
        return fa_errorf(err, FA_ERR_VERIFY,
                         "record index %" PRIu64
                         " is outside the checkpoint's tree of size %" PRIu64,
                         b->index, cp->size);
    fa_merkle_leaf_hash(b->record, b->record_len, leaf);
    if (fa_merkle_verify_inclusion(leaf, b->index, cp->size, b->proof, b->proof_len, cp->root) != 0)
        return fa_errorf(err, FA_ERR_VERIFY,
                         "inclusion proof does not verify: record %" PRIu64
                         " is not in the tree of size %" PRIu64 " signed by the checkpoint",
                         b->index, cp->size);
    return 0;
}

void fa_proof_bundle_free(fa_proof_bundle *b)
{
    if (!b)
        return;
    free(b->record);
    free(b->checkpoint);
    memset(b, 0, sizeof(*b));
}
