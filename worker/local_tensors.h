/* local_tensors.h - a region's own values of the tensors the federation
 * does not federate (WorkerConfig local_tensors LOCAL_KEEP, the default):
 * FedBN (Li et al. 2021) keeps each region's BatchNorm statistics local, so
 * the region's next round starts from its own values of them rather than
 * the published ones.  They live in <state_dir>/local-tensors.safetensors
 * (FA_LOCAL_TENSORS_FILE), written atomically after each successful local
 * round (external_trainer.c from the trainer's output, builtin_model.c from
 * the trained network) and read at the start of the next.
 */
#ifndef FA_WORKER_LOCAL_TENSORS_H
#define FA_WORKER_LOCAL_TENSORS_H

#include "common/fa_err.h"
#include "common/fa_safetensors.h"
#include "model/tensors.h"

/* In the worker's state directory. */
#define FA_LOCAL_TENSORS_FILE "local-tensors.safetensors"

/* The table of t's tensors that are not federated (none federated in it,
 * table order); *out NULL when every tensor of t is federated.  Returns 0,
 * FA_ERR_NOMEM or FA_ERR_INVAL (as fa_tensors_add). */
int fa_local_tensors_table(fa_tensors **out, const fa_tensors *t, fa_error *err);

/* Opens path when it exists and holds exactly the tensors of lt (the
 * table above); otherwise *out is NULL: no file yet, or one that no longer
 * matches the model (a new architecture, another selection: logged as a
 * warning), and the published values are used.  lt NULL: *out NULL. */
void fa_local_tensors_open(fa_safetensors **out, const char *path, const fa_tensors *lt);

#endif
