/* model_store.h - the aggregator's durable store of global model versions.
 *
 * Layout of the storage directory:
 *   model-<version>.safetensors   the global model, every tensor in its own
 *                                 dtype: what workers download
 *   master-<version>.safetensors  the float32 master weights, when the model's
 *                                 dtypes cannot hold them (a BF16 model): the
 *                                 federated tensors in float32, the others as
 *                                 the model has them widened; absent otherwise
 *   delta-<version>.safetensors   version <version> as a quantised delta against
 *                                 version <version>-1 (model/delta.h), when
 *                                 config model_delta is on: what a region
 *                                 that holds <version>-1 downloads instead
 *   state-<version>.safetensors   the server optimizer's state after producing
 *                                 that version (empty for FedAvg)
 *   MANIFEST                      names the latest committed version and the
 *                                 SHA-256 of its files
 *   state.spare                   the state file of a retired version, kept to
 *                                 be written over by the next commit
 *
 * A commit writes the files atomically (temporary file, fsync, rename,
 * directory fsync), then replaces MANIFEST atomically: the MANIFEST rename is
 * the commit point.  A crash before it leaves the previous version current;
 * files of versions newer than MANIFEST and temporary files are removed on
 * open.  Open verifies the SHA-256 of the current files, so a damaged model
 * is never served or trained on.  The last `keep` versions are retained.
 *
 * The optimizer state, the largest file (8 bytes a parameter with FedAdam),
 * is written over state.spare rather than into a new file: into pages the
 * page cache still holds, a copy, where a new file's pages must be found
 * first (on a virtual machine that hands free memory back to its host,
 * every first touch of a page is a fault in the host: 80 MB in 100-220 ms
 * against 10 ms over a spare, a small program on such a machine).  Until
 * its rename the spare is not the state file, so a crash leaves the store
 * as before.  Model and master files are not reused: a download, or the
 * central evaluator, may still be reading a retired one.
 */
#ifndef FA_MODEL_STORE_H
#define FA_MODEL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"

typedef struct fa_model_store fa_model_store;

/* The current version, as MANIFEST records it. */
struct fa_model_version {
    uint64_t version; /* 0 is the initial model */
    uint64_t round;   /* the round that produced it (0 for the initial model) */
    uint8_t model_sha256[32];
    /* The optimizer state's digest, only ever checked here (against a
     * damaged file): its CRC-32C (state_crc set), or for versions that
     * older aggregators committed, its SHA-256. */
    int state_crc;
    uint32_t state_crc32c;
    uint8_t state_sha256[32];
    uint64_t model_size; /* bytes */
    int has_master;      /* a master-<version> file exists */
    uint8_t master_sha256[32];
    uint64_t master_size;
    int has_delta; /* a delta-<version> file exists (against version - 1) */
    uint8_t delta_sha256[32];
    uint64_t delta_size;
};

/* Opens (creating when missing) the store in dir, keeping `keep` >= 1
 * versions.  Removes leftovers of an interrupted commit and verifies the
 * current files.  Returns 0, FA_ERR_IO, FA_ERR_CORRUPT (MANIFEST malformed,
 * or a file missing or not matching its SHA-256: the message names it) or
 * FA_ERR_NOMEM. */
int fa_model_store_open(fa_model_store **out, const char *dir, unsigned keep, fa_error *err);
void fa_model_store_del(fa_model_store *s);

/* The current version; FA_ERR_NOTFOUND when nothing was ever committed. */
int fa_model_store_current(const fa_model_store *s, struct fa_model_version *out);

/* The files of one version.  Views may carry their bytes or produce them
 * on demand (fa_st_view.fill), so that a large model is never copied whole. */
typedef struct fa_model_files {
    const fa_st_view *model; /* the model tensors, with metadata pairs meta[2i], meta[2i+1] */
    size_t n_model;
    const char *const *meta;
    size_t n_meta;
    const fa_st_view *master; /* the float32 master weights; n_master 0 = no master file */
    size_t n_master;
    const char *const *master_meta;
    size_t n_master_meta;
    const fa_st_view *delta; /* the delta against the current version; n_delta 0 = none */
    size_t n_delta;
    const char *const *delta_meta;
    size_t n_delta_meta;
    const fa_st_view *state; /* the optimizer state (n_state may be 0) */
    size_t n_state;
    const char *const *state_meta;
    size_t n_state_meta;
} fa_model_files;

/* Commits a new version from files (the files written in the order model,
 * master, delta, state; each atomically, MANIFEST last).  version must be greater than the
 * current one.  Returns 0, FA_ERR_INVAL (version not increasing), FA_ERR_IO,
 * or a view's fill error; on failure the current version is unchanged and
 * no file of the new version is left behind. */
int fa_model_store_commit(fa_model_store *s, uint64_t version, uint64_t round,
                          const fa_model_files *files, fa_error *err);

/* A commit written a chunk at a time, for a producer that makes several
 * files of the new version together (fa_global_model_step: one pass of the
 * optimizer writes the model, master, delta and state files):
 *
 *   fa_model_store_begin(s, version, round, &files, &c, err);  // files open
 *   fa_model_commit_put(c, FA_MODEL_FILE_STATE, 1, off, v, len, err);  // any
 *   ...                                  // file, any view, each in order
 *   fa_model_store_finish(c, err);       // as fa_model_store_commit
 *
 * begin takes the files' views for their names, dtypes, shapes and
 * metadata (their data and fill are not used: every byte of every view
 * comes from fa_model_commit_put), opens the files the commit writes (the
 * model and state always, master and delta when they have views) and
 * writes their headers; each file is hashed as it is written (bytes
 * written ahead of a file's order are read back once: fa_st_writer_put).
 * finish checks that every view is whole, then commits as
 * fa_model_store_commit does, and frees c; fa_model_commit_abort (NULL: a
 * no-op) removes what was written and frees c.  On any failure the current
 * version is unchanged and no file of the new version is left behind.
 * Returns as fa_model_store_commit; put also FA_ERR_INVAL for a view out of
 * order (the message names it) or a file the commit does not write. */
enum { FA_MODEL_FILE_MODEL, FA_MODEL_FILE_MASTER, FA_MODEL_FILE_DELTA, FA_MODEL_FILE_STATE,
       FA_MODEL_FILES };
typedef struct fa_model_commit fa_model_commit;
int fa_model_store_begin(fa_model_store *s, uint64_t version, uint64_t round,
                         const fa_model_files *files, fa_model_commit **c, fa_error *err);
int fa_model_commit_put(fa_model_commit *c, int file, size_t view, uint64_t off, const void *data,
                        size_t len, fa_error *err);
int fa_model_store_finish(fa_model_commit *c, fa_error *err);
void fa_model_commit_abort(fa_model_commit *c);

/* Path of a version's model or state file (it may have been retired).
 * Writes into buf (n bytes); returns buf. */
char *fa_model_store_model_path(const fa_model_store *s, uint64_t version, char *buf, size_t n);
char *fa_model_store_state_path(const fa_model_store *s, uint64_t version, char *buf, size_t n);
char *fa_model_store_master_path(const fa_model_store *s, uint64_t version, char *buf, size_t n);
char *fa_model_store_delta_path(const fa_model_store *s, uint64_t version, char *buf, size_t n);
/* state.spare (see the top): never read, never served, not in the MANIFEST. */
char *fa_model_store_spare_state_path(const fa_model_store *s, char *buf, size_t n);

/* The file holding a retained version's float32 master weights: its master
 * file when it has one, else its model file.  Returns buf, or NULL when the
 * version is not retained. */
char *fa_model_store_weights_path(const fa_model_store *s, uint64_t version, char *buf, size_t n);

/* The MANIFEST entry of a retained version; FA_ERR_NOTFOUND when it is not. */
int fa_model_store_version(const fa_model_store *s, uint64_t version, struct fa_model_version *out);

/* Whether a version's model file is still retained. */
int fa_model_store_has(const fa_model_store *s, uint64_t version);

/* SHA-256 of a retained version's model file (from MANIFEST history or by
 * hashing it).  Returns 0, FA_ERR_NOTFOUND or FA_ERR_IO. */
int fa_model_store_sha256(fa_model_store *s, uint64_t version, uint8_t out[32], fa_error *err);

/* Keeps a version beyond the window of `keep` (pin 1) or lets it retire
 * again at the next commit (pin 0): what the governance of released models
 * holds on to (aggregator/fed_gov.c: the last promoted version, which a
 * rollback restores with its optimizer state; every version a release
 * channel points at; rejected versions, kept for forensics).  In memory
 * only: the owner pins again after a restart, before the next commit.
 * Returns 0 or FA_ERR_NOMEM. */
int fa_model_store_pin(fa_model_store *s, uint64_t version, int pin);

/* Commits `version` (made in `round`) as a copy of the retained version
 * `from`: its model, master weights and optimizer state byte for byte (so
 * the same digests), no delta file.  Each source file is checked against
 * its MANIFEST digest while it is copied.  A rollback.  Returns 0,
 * FA_ERR_INVAL (version not increasing; a version older aggregators
 * committed), FA_ERR_NOTFOUND (from not retained), FA_ERR_CORRUPT (a source
 * file damaged), FA_ERR_IO; on failure the store is unchanged. */
int fa_model_store_restore(fa_model_store *s, uint64_t version, uint64_t round, uint64_t from,
                           fa_error *err);

/* Makes a retained version current again, for a store ahead of its audit
 * log after `fedagg audit repair` (a version whose record was lost must not
 * be served): the files of every newer version are moved into the
 * directory `aside` (created), with the old MANIFEST, never deleted, and
 * MANIFEST lists the retained versions up to `version`, whose files are
 * verified first.  *was receives the version that was current.  With
 * dry_run only the checks are made.  Not while an aggregator has the store
 * open.  Returns 0 (also when version is already current), FA_ERR_NOTFOUND
 * (version not retained: the message lists those that are),
 * FA_ERR_CORRUPT (MANIFEST malformed, or the version's files damaged),
 * FA_ERR_IO, FA_ERR_NOMEM. */
int fa_model_store_rollback(const char *dir, uint64_t version, const char *aside, int dry_run,
                            uint64_t *was, fa_error *err);

#endif
