/* global_model.h - the aggregator's global model: a tensor table
 * (model/tensors.h), the float32 master weights of its federated tensors,
 * and the quantiser range of each federated tensor.
 *
 * Where it comes from.  The model is any safetensors state_dict given as
 * `model { init_file: ... }`, or else the built-in MLP of the model spec
 * (He-initialised): one producer of a table among others.  Which tensors
 * are federated is `model.federated` (default: every floating tensor).
 *
 * What it publishes.  Version v is model-<v>.safetensors in the model
 * store: every tensor in its own dtype (a BF16 model downloads as BF16),
 * federated tensors converted from the master weights, the others copied
 * byte for byte from version v-1 (they never change), and the metadata
 * "fedagg.federated" = {name: range} of the round that trains from v.  When
 * a federated tensor's dtype cannot hold the master weights (anything but
 * F32) the store also keeps master-<v>.safetensors (float32), the weights a
 * restart resumes from and what `GET /v1/models/<v>?dtype=f32` serves.
 *
 * As deltas (config model_delta.enabled).  The federated floating tensors
 * of model-<v> are then what the delta against v-1 rebuilds
 * (model/delta.h: 8- or 4-bit steps of new master - published v-1, one scale per
 * block), written beside it as delta-<v>.safetensors in the same commit;
 * the master weights are always kept (master-<v>), and the published
 * model, not the master, is what fa_global_model_read_mlp evaluates.
 *
 * Ranges (config Quantization.range).  RANGE_ADAPTIVE: tensor t of round 1
 * is quantised over [-r, r], r = max(range_initial * max|w_t|, range_min);
 * after each round r = max(range_headroom * max|mean delta_t|,
 * range_floor * max|w_t|, range_min), from the aggregate just decoded and
 * the new weights: public values every region shares, so no region's
 * update is looked at.  RANGE_FIXED: r = clip_value for every tensor (the
 * codec then clips in the model's units, as before ranges existed).
 *
 * A restarted aggregator checks that the configured model (init file or MLP
 * spec, and the selection) is the one in the store, tensor by tensor, and
 * refuses to start on any difference (the message names the first).
 *
 * Memory.  The object holds the table alone: the master weights stay in the
 * current version's file and the optimizer state in its state file.  A round
 * is applied in one streaming commit (fa_global_model_step): the new
 * version's files are written together (fa_model_store_begin), chunk by
 * chunk of the federated vector, each chunk stepped once from the decoded
 * mean (the caller's, chunk by chunk), the previous version's weights and
 * state read back with fa_st_read_range, and the server optimizer's
 * element-wise step, then written to the model, master, delta and state
 * files at once, so that a round needs a few MiB of scratch beyond the
 * caller's running sum, whatever d.  (With adaptive ranges a first pass
 * computes the new weights once more for the next round's ranges, which
 * the model file's header carries before any tensor.)  Creating version 0
 * holds the initial weights once (4 d bytes), before any round's memory is
 * allocated.
 */
#ifndef FA_AGGREGATOR_GLOBAL_MODEL_H
#define FA_AGGREGATOR_GLOBAL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/model_store.h"
#include "aggregator/server_opt.h"
#include "common/fa_err.h"
#include "config.pb-c.h"
#include "model/mlp.h"
#include "model/tensors.h"

typedef struct fa_global_model fa_global_model;

/* Opens the model of cfg over store: the current version's table and master
 * weights when the store has one (after checking it is the configured
 * model), else version 0 created from init_file or the MLP spec and
 * committed (metadata pairs meta[2i], meta[2i+1] added to it).  Returns 0,
 * FA_ERR_INVAL (bad spec or selection, the store holds another model: the
 * message says which tensor differs), FA_ERR_NOMEM, or the store's and
 * safetensors' errors. */
int fa_global_model_open(fa_global_model **out, const Fedagg__AggregatorConfig *cfg,
                         fa_model_store *store, const char *const *meta, size_t n_meta,
                         fa_error *err);
void fa_global_model_del(fa_global_model *g);

/* Takes the table (ranges, metadata) of the store's current version again,
 * after a version was committed beside fa_global_model_step (a rollback:
 * fa_model_store_restore), checking that it is the same model.  Returns 0
 * or open's errors; on failure the object is unchanged. */
int fa_global_model_reload(fa_global_model *g, fa_model_store *store, fa_error *err);

/* The table of the current version (federated flags and the ranges of the
 * round that trains from it). */
const fa_tensors *fa_global_model_table(const fa_global_model *g);
/* Federated coordinates d. */
uint64_t fa_global_model_d(const fa_global_model *g);
/* SHA-256 of the table (fa_tensors_digest), fixed for the federation. */
const uint8_t *fa_global_model_digest(const fa_global_model *g);
/* SHA-256 of the current ranges (fa_tensors_ranges_digest). */
int fa_global_model_ranges_digest(const fa_global_model *g, uint8_t out[32], fa_error *err);
/* 1 with RANGE_ADAPTIVE (regions scale each tensor by its range). */
int fa_global_model_per_tensor(const fa_global_model *g);
/* 1 when the model is the built-in MLP's layout (*c filled), else 0. */
int fa_global_model_mlp(const fa_global_model *g, fa_mlp_config *c);

/* The decoded mean of the regions' scaled updates, coordinates
 * [off, off + n) of the federated vector (in units of each tensor's range
 * with RANGE_ADAPTIVE, else the model's), into out.  Called in any order,
 * several times for the same coordinates: it must give the same values
 * every time.  Returns 0 or a negative FA_ERR_* code with err filled. */
typedef int (*fa_global_model_delta_fn)(void *ctx, uint64_t off, float *out, size_t n,
                                        fa_error *err);

/* Applies a round and commits version `version` (round names it in the
 * metadata) in one streaming pass: the mean delta (delta, to the model's
 * units by each tensor's range), opt's step from the current version's
 * master weights and optimizer state (its state file; fresh state for a
 * version without one, e.g. version 0, or without the kind's tensors, as
 * when the optimizer kind changed: logged), the new weights as the
 * federated tensors, the others copied from the current version, the
 * ranges of the next round from the mean delta and the new weights, the
 * optimizer's new state as the state file (metadata pairs state_meta[2i],
 * state_meta[2i+1]), metadata pairs meta[2i], meta[2i+1] in the model.
 * On success the object holds the new table; on
 * failure it is unchanged and so is the store.  Returns 0, FA_ERR_CORRUPT
 * (the current version's weights or state do not fit the table: the
 * message names the file and tensor), delta's errors or the store's. */
int fa_global_model_step(fa_global_model *g, fa_model_store *store, uint64_t version,
                         uint64_t round, const fa_server_opt *opt, fa_global_model_delta_fn delta,
                         void *ctx, const char *const *meta, size_t n_meta,
                         const char *const *state_meta, size_t n_state_meta, fa_error *err);

/* Checks that the current version's optimizer state file fits opt and the
 * table (each of the kind's state tensors F32 of d floats, or absent: the
 * next step starts it fresh) and reads its "fedagg.steps" into *steps (0
 * when absent).  Returns 0, FA_ERR_CORRUPT or the file's errors. */
int fa_global_model_check_state(const fa_global_model *g, const fa_model_store *store,
                                const fa_server_opt *opt, uint64_t *steps, fa_error *err);

/* Reads the built-in MLP's parameter block (fa_mlp_layout order) of a
 * retained version from its weights file, for evaluation.  Returns 0,
 * FA_ERR_INVAL (not an MLP), FA_ERR_NOTFOUND (not retained) or read errors. */
int fa_global_model_read_mlp(const fa_global_model *g, const fa_model_store *store,
                             uint64_t version, const fa_mlp_layout *l, float *params,
                             fa_error *err);

#endif
