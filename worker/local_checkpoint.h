/* local_checkpoint.h - a saved local round of the built-in trainer: what a
 * preempted worker (SIGTERM on a spot instance) or a periodic checkpoint
 * leaves on disk so that a restarted one resumes the round where it
 * stopped and sends the same update, bit for bit, as if it never had.
 *
 * A local round is made of the network's parameters and momentum, the
 * loop's position (model/train.h fa_train_pos: the step, which fixes the
 * data position and the shuffle, and the exact loss sums) and the gradient
 * compressor's state (worker/compress.h fa_compress_state_parts: step
 * count, random streams, error memory, PowerSGD's warm-start Q).  Nothing
 * else goes in: no key, seed or share of secure aggregation (those are the
 * round client's attempt state, saved later, before the first masked byte).
 * Every rank of a region saves its own file (its error memory and random
 * stream are its own; parameters and momentum are identical on every rank).
 *
 * A file is bound to what it belongs to (fa_local_ckpt_key): the round, the
 * version and SHA-256 of the global model, a digest of the parameter block
 * the round started from, and a digest of everything else the update
 * depends on (options, compression, the shard, ranks, backend).  It is
 * resumed only against that same key (the attempt may differ: an update does
 * not depend on it, and an uninterrupted worker reuses its update in a later
 * attempt of the same version), never against another global model.
 *
 * Layout (host byte order, with a byte-order mark):
 *
 *   "FALOCRND"  u32 format (1)  u32 0x01020304
 *   key: round u64, attempt u32, version u64, model_sha256[32],
 *        start_digest[32], setup_digest[32], rank u32, world u32, n_params u64
 *   position: step u64, total u64, samples u64, pass_loss f64, pass_count u64
 *   u32 sections, each: u32 name length, name, u64 length, bytes
 *        ("params", "momentum", "compress.<part>" in the compressor's order)
 *   BLAKE2b-256 of everything before it
 *
 * Written atomically (common/fa_file.h, fsync'ed: a spot machine may be
 * switched off once the grace is over), mode 0600.  A torn, truncated or
 * altered file fails the digest and is refused as damaged.
 */
#ifndef FA_WORKER_LOCAL_CHECKPOINT_H
#define FA_WORKER_LOCAL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "model/mlp.h"
#include "model/train.h"
#include "worker/compress.h"

#define FA_LOCAL_CKPT_DIGEST 32

/* What a saved local round belongs to. */
typedef struct fa_local_ckpt_key {
    uint64_t round;
    uint32_t attempt; /* where it was saved; not compared */
    uint64_t version; /* the global model's */
    uint8_t model_sha256[32];
    uint8_t start_digest[FA_LOCAL_CKPT_DIGEST]; /* fa_local_ckpt_digest_floats of the start block */
    uint8_t setup_digest[FA_LOCAL_CKPT_DIGEST]; /* options, compression, shard, ranks, backend */
    uint32_t rank, world;
    uint64_t n_params;
} fa_local_ckpt_key;

/* BLAKE2b-256 of n floats (their bytes in host order).  Returns 0 or
 * FA_ERR_CRYPTO. */
int fa_local_ckpt_digest_floats(const float *v, size_t n, uint8_t out[FA_LOCAL_CKPT_DIGEST]);

/* BLAKE2b-256 of a shard: n, dim, then x (n * dim floats) and y (n bytes).
 * Returns 0 or FA_ERR_CRYPTO. */
int fa_local_ckpt_digest_shard(const fa_dataset *d, uint8_t out[FA_LOCAL_CKPT_DIGEST]);

/* Saves the local round of m at pos (of a run of `total` steps) with cz's
 * state to path, atomically, for key.  Reads the network's parameters and
 * momentum (a copy from the GPU on a GPU network).  Returns 0, FA_ERR_INVAL
 * (a network or compressor of another size than the key's), FA_ERR_NOMEM,
 * FA_ERR_IO (the message names the file), FA_ERR_CUDA, FA_ERR_CRYPTO; on
 * failure the previous file (if any) is left as it was. */
int fa_local_ckpt_save(const char *path, const fa_local_ckpt_key *key, const fa_train_pos *pos,
                       uint64_t total, fa_mlp *m, fa_compress *cz, fa_error *err);

/* A loaded saved round, checked and not yet applied.  Opaque. */
typedef struct fa_local_ckpt fa_local_ckpt;

/* Reads path and checks it against want (every field but the attempt) and
 * against cz's state parts (names and lengths).  Nothing is applied yet.
 * found (may be NULL) gets the file's key once its digest has checked out
 * (so also with FA_ERR_REPLAY).  Returns 0, or
 *   FA_ERR_NOTFOUND  no such file (err untouched)
 *   FA_ERR_CORRUPT   damaged: truncated, not a saved local round, another
 *                    format or byte order, a digest that does not match
 *   FA_ERR_REPLAY    saved for another round, model version, model,
 *                    starting point, rank or setup (the message says which,
 *                    with both sides)
 *   FA_ERR_IO, FA_ERR_NOMEM, FA_ERR_CRYPTO
 * Every message names the file. */
int fa_local_ckpt_load(fa_local_ckpt **out, const char *path, const fa_local_ckpt_key *want,
                       fa_compress *cz, fa_local_ckpt_key *found, fa_error *err);

/* NULL is a no-op. */
void fa_local_ckpt_del(fa_local_ckpt *c);

/* Its position, the run's step count and the attempt it was saved in. */
const fa_train_pos *fa_local_ckpt_pos(const fa_local_ckpt *c);
uint64_t fa_local_ckpt_total(const fa_local_ckpt *c);
uint32_t fa_local_ckpt_attempt(const fa_local_ckpt *c);

/* Puts the saved parameters and momentum into m and the compressor's state
 * into cz (the ones it was loaded against).  Returns 0 or the network's
 * error (FA_ERR_CUDA). */
int fa_local_ckpt_apply(const fa_local_ckpt *c, fa_mlp *m, fa_compress *cz, fa_error *err);

#endif
