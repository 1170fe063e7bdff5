/* builtin_model.h - the built-in trainer's network (model/mlp.h) on a model
 * that comes as a tensor table (model/tensors.h).
 *
 * The built-in trainer trains the built-in MLP only: a published model
 * whose tensors are exactly fc1.weight, fc1.bias, ..., fcL.weight, fcL.bias
 * with chained shapes, in any floating dtype (F16, BF16 and F64 are widened
 * to float32 for training and the delta is float32, as for every model).
 * The MLP's parameter block and the table's federated vector are matched
 * tensor by tensor by NAME, never by position: the table is in file order,
 * the block in layer order.  Tensors the federation does not federate are
 * trained too, and never uploaded; with LOCAL_KEEP their trained values are
 * kept for the region's next round (fa_builtin_save_local).
 *
 * This is the only part of the worker's round path that knows the MLP's
 * tensor names (through fa_mlp_layout_init).
 */
#ifndef FA_WORKER_BUILTIN_MODEL_H
#define FA_WORKER_BUILTIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"
#include "model/mlp.h"
#include "model/tensors.h"

/* The MLP's tensors in the table. */
typedef struct fa_builtin_map {
    fa_mlp_layout layout;
    long index[2 * FA_MLP_MAX_LAYERS];          /* layout tensor k is table tensor index[k] */
    int federated[2 * FA_MLP_MAX_LAYERS];       /* ... and is federated */
    uint64_t fed_offset[2 * FA_MLP_MAX_LAYERS]; /* ... at this offset of the federated vector */
    size_t d;                                   /* the table's federated coordinates */
} fa_builtin_map;

/* The architecture of the MLP that st holds (fa_mlp_config_from_st, with
 * every floating tensor taken as float32).  Returns 0 or FA_ERR_UNSUPPORTED
 * when st is not the built-in MLP: the message says which tensor is in the
 * way and that such a model needs an external trainer; FA_ERR_NOMEM. */
int fa_builtin_config(const fa_safetensors *st, fa_mlp_config *mc, fa_error *err);

/* Maps layout l onto table t by name.  Returns 0 or FA_ERR_UNSUPPORTED (t
 * has a tensor l does not, or lacks one, or a shape differs, or an MLP
 * tensor is not floating: the message names it). */
int fa_builtin_map_init(fa_builtin_map *m, const fa_mlp_layout *l, const fa_tensors *t,
                        fa_error *err);

/* The parameter block (m->layout.n_params floats) of the model: federated
 * tensors from fed (m->d floats), the others from local when it has them
 * (the region's kept values, already checked against the table), else
 * from st (the downloaded file).  Returns 0, FA_ERR_NOMEM or fa_st_read's
 * errors. */
int fa_builtin_load(const fa_builtin_map *m, const fa_tensors *t, const float *fed,
                    const fa_safetensors *st, const fa_safetensors *local, float *params,
                    fa_error *err);

/* The federated part of a parameter-block delta: fed_delta[0 .. m->d)
 * gets pdelta's federated tensors at their offsets. */
void fa_builtin_fed_delta(const fa_builtin_map *m, const float *pdelta, float *fed_delta);

/* Writes the non-federated tensors of the parameter block params (in the
 * table's dtypes) to path, atomically, mode 0600; nothing to do (0) when
 * every tensor is federated.  Returns 0 or the writer's errors. */
int fa_builtin_save_local(const fa_builtin_map *m, const fa_tensors *t, const float *params,
                          const char *path, fa_error *err);

#endif
