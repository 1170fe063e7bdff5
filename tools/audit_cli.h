/* audit_cli.h - helpers of `fedagg audit` (tools/cmd_audit.c): how records
 * are shown (a table for people, JSON lines for a SIEM) and how keys are
 * given on the command line. */
#ifndef FA_AUDIT_CLI_H
#define FA_AUDIT_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "audit/audit_log.h"
#include "common/fa_err.h"
#include "crypto/checkpoint.h"

/* One record as a JSON object: every field, digests in hex, signatures in
 * base64, times as RFC 3339 UTC; plus "index", "leaf_hash" and "signed"
 * (covered by the latest checkpoint).  NULL on out of memory. */
json_t *fa_audit_cli_record_json(const Fedagg__AuditRecord *r, uint64_t index,
                                 const uint8_t leaf_hash[FA_MERKLE_HASH_LEN], int is_signed);

/* The table header and one line per record. */
void fa_audit_cli_table_header(FILE *out);
void fa_audit_cli_table_row(FILE *out, const Fedagg__AuditRecord *r, uint64_t index, int is_signed);

/* A short description of a record for messages: "round R attempt A, regions
 * a, b (dropped: c), model vP -> vN". */
void fa_audit_cli_describe(const Fedagg__AuditRecord *r, char *buf, size_t cap);

/* Writes Unix milliseconds as "2026-11-30T03:45:54.123Z". */
void fa_audit_cli_time(uint64_t unix_ms, char buf[32]);

/* Reads a public key given as a file path or as the key text itself (base64,
 * hex, or a Go note verifier key).  Returns 0 or an error with a message. */
int fa_audit_cli_pubkey(const char *arg, fa_note_verifier *v, fa_error *err);

/* Region keys from `--region-key ID=KEY` (KEY a file or the key text) and
 * from `--config AGGREGATOR.textproto` (its regions).  Appends to *keys
 * (malloc'ed; region names strdup'ed).  Returns 0 or an error. */
int fa_audit_cli_region_key(const char *arg, fa_audit_region_key **keys, size_t *n, fa_error *err);
int fa_audit_cli_config_keys(const char *path, fa_audit_region_key **keys, size_t *n,
                             fa_error *err);
void fa_audit_cli_free_keys(fa_audit_region_key *keys, size_t n);

#endif
