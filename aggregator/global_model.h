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
 */
#ifndef FA_AGGREGATOR_GLOBAL_MODEL_H
#define FA_AGGREGATOR_GLOBAL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/model_store.h"
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

/* The table of the current version (federated flags and the ranges of the
 * round that trains from it). */
const fa_tensors *fa_global_model_table(const fa_global_model *g);
/* The master weights of the federated tensors: d floats. */
const float *fa_global_model_params(const fa_global_model *g);
uint64_t fa_global_model_d(const fa_global_model *g);
/* SHA-256 of the table (fa_tensors_digest), fixed for the federation. */
const uint8_t *fa_global_model_digest(const fa_global_model *g);
/* SHA-256 of the current ranges (fa_tensors_ranges_digest). */
int fa_global_model_ranges_digest(const fa_global_model *g, uint8_t out[32], fa_error *err);
/* 1 with RANGE_ADAPTIVE (regions scale each tensor by its range). */
int fa_global_model_per_tensor(const fa_global_model *g);
/* 1 when the model is the built-in MLP's layout (*c filled), else 0. */
int fa_global_model_mlp(const fa_global_model *g, fa_mlp_config *c);

/* The decoded mean of the regions' scaled updates (d floats, in units of
 * each tensor's range with RANGE_ADAPTIVE) to the model's units, in place. */
void fa_global_model_unscale(const fa_global_model *g, float *delta);

/* Commits version `version` (round, attempt name it in the metadata):
 * new_params (d floats) as the federated tensors, the others copied from
 * the current version, ranges for the next round from mean_delta (d floats,
 * the model's units) and new_params; metadata pairs meta[2i], meta[2i+1];
 * the optimizer's state views.  On success the object holds the new weights
 * and ranges; on failure it is unchanged.  Returns 0 or the store's errors. */
int fa_global_model_commit(fa_global_model *g, fa_model_store *store, uint64_t version,
                           uint64_t round, const float *new_params, const float *mean_delta,
                           const char *const *meta, size_t n_meta, const fa_st_view *state,
                           size_t n_state, const char *const *state_meta, size_t n_state_meta,
                           fa_error *err);

/* Reads the built-in MLP's parameter block (fa_mlp_layout order) of a
 * retained version from its weights file, for evaluation.  Returns 0,
 * FA_ERR_INVAL (not an MLP), FA_ERR_NOTFOUND (not retained) or read errors. */
int fa_global_model_read_mlp(const fa_global_model *g, const fa_model_store *store,
                             uint64_t version, const fa_mlp_layout *l, float *params,
                             fa_error *err);

#endif
