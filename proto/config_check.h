/* config_check.h - loading and validating fedagg configuration files.
 *
 * The aggregator and the worker call fa_config_load_aggregator() /
 * fa_config_load_worker() at start; `fedagg config check` calls the same
 * code.  Loading is, in order:
 *
 *   1. parse the text format (proto/textformat.h), every syntax error kept;
 *   2. resolve relative paths against the directory of the config file;
 *   3. fill in the defaults that config.proto cannot express (below);
 *   4. check meaning: required fields, ranges, region ids, identity keys,
 *      files that must exist and key files that must be private.
 *
 * Every problem goes to `diags` as "file:line:column: message" at the
 * offending field (or where its message opened, when a required field is
 * missing), and `err` gets the first with a count of the others.
 *
 * Defaults applied on load (the one place they live; config.proto documents
 * them in its comments):
 *   - every optional sub-message is present, in the elements of repeated
 *     messages too (so daemons need no NULL checks);
 *   - ModelSpec.hidden empty            -> [256, 128]
 *   - RoundPolicy.threshold 0           -> majority of the regions, n/2 + 1
 *   - AuditConfig.log_file empty        -> <storage.dir>/audit.log
 *   - AuditConfig.origin empty          -> "fedagg/<federation_id>"
 *   - QuicConfig.static_secret_file empty (aggregator) -> <storage.dir>/quic.secret
 *   - TlsConfig.server_name empty (worker) -> host part of `aggregator`
 *   - ExternalTrainer.workdir empty     -> the worker's state_dir
 *
 * An aggregator config with `service { dir }` may name no regions: then it
 * describes no default federation (docs/service.md), and storage.dir is
 * not needed (the quic secret defaults into service.dir).  A federation
 * file (FederationConfig) is checked as the federation parts of an
 * aggregator config are, and may not carry an evaluator command.
 * A loaded config is "effective": printing it shows what the daemon runs with.
 */
#ifndef FA_CONFIG_CHECK_H
#define FA_CONFIG_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "proto/diags.h"
#include "proto/textformat.h"

typedef enum fa_config_kind {
    FA_CONFIG_UNKNOWN = 0,
    FA_CONFIG_AGGREGATOR = 1, /* fedagg.AggregatorConfig */
    FA_CONFIG_WORKER = 2,     /* fedagg.WorkerConfig */
    FA_CONFIG_FEDERATION = 3, /* fedagg.FederationConfig (a service's federation) */
} fa_config_kind;

/* Flags of fa_config_load / fa_config_load_text. */
#define FA_CONFIG_SYNTAX_ONLY 0x1u /* parse only: no paths, defaults or meaning checks */
#define FA_CONFIG_NO_FILES                                                                         \
    0x2u /* check meaning but not the file system (a config                                        \
            written for another machine) */

/* Largest config file read, bytes. */
#define FA_CONFIG_MAX_BYTES (16u << 20)

/* The descriptor of a kind, or NULL for FA_CONFIG_UNKNOWN. */
const ProtobufCMessageDescriptor *fa_config_descriptor(fa_config_kind kind);

/* "aggregator" / "worker" / "federation" -> kind; FA_CONFIG_UNKNOWN otherwise. */
fa_config_kind fa_config_kind_from_name(const char *name);

/* "aggregator" / "worker" / "federation" / "unknown". */
const char *fa_config_kind_name(fa_config_kind kind);

/* Guesses the kind of a config text from the names of its top-level fields
 * (`regions`, `storage`... vs `region_id`, `trainer`...).  A text of
 * aggregator fields naming none of the process (`listen`, `tls`, `storage`,
 * `audit`...) but a `team` or a field only a federation file has is a
 * federation file.  Returns the kind, or FA_CONFIG_UNKNOWN when the text
 * names no field specific to either or names fields of both. */
fa_config_kind fa_config_guess_kind(const char *text, size_t len);

/* Loads, resolves, fills defaults and checks the config file at path.
 * kind FA_CONFIG_UNKNOWN guesses it from the content.  On success *out is
 * the effective config (free with protobuf_c_message_free_unpacked(*out,
 * NULL)); on failure *out is NULL and every problem is in diags (when not
 * NULL).  Returns 0, FA_ERR_NOTFOUND / FA_ERR_IO (cannot read the file),
 * FA_ERR_PARSE (syntax), FA_ERR_INVAL (meaning), FA_ERR_TOOBIG or
 * FA_ERR_NOMEM. */
int fa_config_load(fa_config_kind kind, const char *path, unsigned flags, ProtobufCMessage **out,
                   fa_diags *diags, fa_error *err);

/* The same for a text in memory; `filename` names it in messages and
 * `basedir` is the directory relative paths are resolved against (NULL:
 * the current directory). */
int fa_config_load_text(fa_config_kind kind, const char *text, size_t len, const char *filename,
                        const char *basedir, unsigned flags, ProtobufCMessage **out,
                        fa_diags *diags, fa_error *err);

/* Typed conveniences for the daemons. */
int fa_config_load_aggregator(const char *path, Fedagg__AggregatorConfig **out, fa_diags *diags,
                              fa_error *err);
int fa_config_load_worker(const char *path, Fedagg__WorkerConfig **out, fa_diags *diags,
                          fa_error *err);

/* For the daemons' main: loads a config of `kind` like fa_config_load
 * (defaults, meaning checks) and on failure prints every problem to stderr
 * as file:line:column lines, prefixed by prog when no position is known.
 * Returns 0 or the error code. */
int fa_config_load_report(fa_config_kind kind, const char *path, const char *prog,
                          ProtobufCMessage **out);

/* The secure-aggregation threshold for `threshold` as configured and n
 * regions: threshold itself when non-zero, else the majority n/2 + 1. */
uint32_t fa_config_effective_threshold(uint32_t threshold, size_t n_regions);

/* The number of regions that must advertise before a round starts: the
 * larger of min_regions and the effective threshold (a round with fewer
 * than t regions could never be unmasked). */
uint32_t fa_config_effective_min_regions(const Fedagg__RoundPolicy *round, size_t n_regions);

/* Decodes a 32-byte public key written as base64 (standard alphabet,
 * padding optional, surrounding whitespace ignored) or, when raw_ok, given
 * as exactly 32 raw bytes.  Returns 0 or FA_ERR_INVAL with a message. */
int fa_config_decode_key32(const uint8_t *data, size_t len, int raw_ok, uint8_t key[32],
                           fa_error *err);

/* Reads a key file written that way.  Returns 0, FA_ERR_NOTFOUND, FA_ERR_IO
 * or FA_ERR_INVAL. */
int fa_config_read_key32_file(const char *path, uint8_t key[32], fa_error *err);

/* Checks an address "host:port" (host a name, an IPv4 address or an IPv6
 * address in brackets; port 1-65535).  Returns 0 or FA_ERR_INVAL. */
int fa_config_check_hostport(const char *s, fa_error *err);

/* A complete, commented example config of the kind: every field of
 * config.proto with its comment (generated from config.proto at build time,
 * proto/config_doc.h), its default, or an example value where it has none;
 * alternatives of a oneof and optional fields without a default are shown
 * commented out.  Relative paths name files next to the config
 * (tls/aggregator.crt, keys/...); with those files in place it passes
 * fa_config_load.  *out is malloc'ed and NUL-terminated.  Returns 0,
 * FA_ERR_INVAL (unknown kind) or FA_ERR_NOMEM. */
int fa_config_example(fa_config_kind kind, char **out, size_t *len, fa_error *err);

/* ---- Internals shared by config_load.c and config_check.c ---- */

/* Whether field f of message type d names a file or directory (resolved
 * against the config file's directory on load). */
int fa_config_is_path_field(const ProtobufCMessageDescriptor *d, const ProtobufCFieldDescriptor *f);

/* Meaning checks of an already parsed, resolved and defaulted config.
 * Appends to diags; returns the number of problems found. */
unsigned fa_config_check_meaning(fa_config_kind kind, const ProtobufCMessage *cfg,
                                 const fa_textformat_positions *pos, const char *filename,
                                 unsigned flags, fa_diags *diags);

#endif
