/* data_statement.h - what a region states it trained an update on
 * (fedagg.proto DataStatement inside a SignedDataStatement;
 * docs/governance.md, lineage): its dataset and trainer by name and
 * digest, the example count, the model it trained from.  Never the data.
 *
 * The data manifest.  The files a round trains on, each as one line
 *
 *   <role> <size in bytes> <SHA-256 hex>\n
 *
 * after the line "fedagg-data-manifest v1\n", in the config's order; the
 * statement carries the manifest's SHA-256.  The files are the worker's
 * data.train_images, train_labels, test_images, test_labels for the
 * built-in trainer, and for an external trainer those its environment names
 * in FEDAGG_DATA_TRAIN_IMAGES ... (the Python kit's convention,
 * python/fedagg/data.py); an external trainer that names none states no
 * manifest.  A region that shows its auditor the files can prove the
 * digest; the aggregator never sees them.
 *
 * The trainer.  "builtin" with the SHA-256 of its settings (the packed
 * BuiltinTrainer) and the fedagg version; "external" with the SHA-256 of
 * its command line (argv, each NUL-terminated) and mode.
 *
 * The dataset name is "default" for a worker config (a region's only
 * dataset), the trainer's "builtin" or "external"; a region agent's
 * worker states the names its policy gives them (WorkerConfig.agent's
 * dataset and trainer, docs/region-policy.md).
 */
#ifndef FA_WORKER_DATA_STATEMENT_H
#define FA_WORKER_DATA_STATEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"

typedef struct fa_data_source {
    char dataset[64];
    int have_manifest;
    uint8_t manifest_sha256[32];
    size_t n_files;
    char trainer[64];
    char trainer_kind[32]; /* "builtin", "external:one-shot", "external:long-lived" */
    uint8_t trainer_sha256[32];
} fa_data_source;

/* The manifest digest of n files (roles[i], paths[i]), reading each once.
 * Returns 0, FA_ERR_NOTFOUND / FA_ERR_IO (the message names the file). */
int fa_data_manifest_digest(const char *const *roles, const char *const *paths, size_t n,
                            uint8_t out[32], fa_error *err);

/* The trainer digests. */
int fa_data_trainer_builtin_digest(const Fedagg__BuiltinTrainer *b, uint8_t out[32]);
int fa_data_trainer_command_digest(const char *const *argv, size_t n, const char *mode,
                                   uint8_t out[32]);

/* The source of a worker config: dataset "default", its manifest (see
 * above; hashing the files), its trainer.  Returns 0, or the files'
 * errors. */
int fa_data_source_from_config(fa_data_source *out, const Fedagg__WorkerConfig *cfg, fa_error *err);

/* The statement of one attempt, packed (malloc'ed into *out, *len bytes),
 * to be signed under FA_IDENTITY_DOMAIN_DATA (worker/round_client.h
 * fa_round_client_post_signed).  Returns 0, FA_ERR_INVAL (num_examples 0,
 * an empty id) or FA_ERR_NOMEM. */
int fa_data_statement_pack(const fa_data_source *src, const char *federation_id, const char *region,
                           uint64_t round, uint32_t attempt, uint64_t version,
                           const uint8_t model_sha256[32], uint64_t num_examples, uint64_t unix_ms,
                           uint8_t **out, size_t *len, fa_error *err);

struct fa_round_client;

/* Packs, signs and POSTs (/v1/data-statements) the statement of one
 * attempt trained from version (its model file's SHA-256) on num_examples,
 * through rc (the round client signs with the region's key).  Returns 0 or
 * the codes of fa_data_statement_pack and fa_round_client_post_signed; a
 * statement not taken never stops the worker (the round goes on without
 * it, and the model card says so). */
int fa_data_statement_post(struct fa_round_client *rc, const fa_data_source *src, uint64_t round,
                           uint32_t attempt, uint64_t version, const uint8_t model_sha256[32],
                           uint64_t num_examples, fa_error *err);

#endif
