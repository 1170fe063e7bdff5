/* privacy_state.h - the region's privacy accountant on disk: the file edge
 * of worker/privacy_budget.h, used by the worker's leader (rank 0).
 *
 * The state is state_dir/privacy-accountant (FA_PRIVACY_BUDGET_FILE),
 * sealed under a key derived from the region's identity key
 * (identity_key_file), replaced atomically and fsync'ed on every change:
 * a charge is on disk before the update it pays for leaves the region.
 *
 * Opening, the rules that keep the budget from being reset:
 *   - the file exists: it must open (the same identity key, region and
 *     federation, not altered) or the worker refuses to start, saying
 *     what is wrong; it is never replaced by an empty one;
 *   - it is missing in a state directory the worker has used before (a
 *     global model or a saved local round or attempt is there): the worker
 *     refuses to start, since a deleted accountant cannot be told from one
 *     never written, unless privacy.new_accountant says the directory was
 *     used without differential privacy;
 *   - it is missing in a fresh directory: an empty accountant is written
 *     at once, so that from the first start on the file exists.
 */
#ifndef FA_WORKER_PRIVACY_STATE_H
#define FA_WORKER_PRIVACY_STATE_H

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "worker/privacy_budget.h"

typedef struct fa_privacy_state fa_privacy_state;

/* Opens (or, by the rules above, creates) the accountant of the worker of
 * cfg, whose privacy.target_epsilon must be > 0.  *created (may be NULL)
 * says whether a new one was written.  Returns 0, FA_ERR_INVAL (a bad
 * budget; another region's or federation's file), FA_ERR_VERIFY (the file
 * does not open with this identity key), FA_ERR_CORRUPT, FA_ERR_STATE
 * (missing in a used state directory), FA_ERR_AUTH / FA_ERR_IO /
 * FA_ERR_PARSE (the identity key file), FA_ERR_NOMEM; every message names
 * the file and what to do. */
int fa_privacy_state_open(fa_privacy_state **out, const Fedagg__WorkerConfig *cfg, int *created,
                          fa_error *err);

/* The same for the accountant of `owner` (a federation id, or a region
 * agent's "dataset:<name>", worker/agent_core.h) in dir, with the budget
 * p, sealed under the key of identity_key_file.  When the file is missing,
 * `used` (NULL: the directory is fresh) says why the directory must have
 * held one, and the open is refused with it unless p->new_accountant. */
int fa_privacy_state_open_dir(fa_privacy_state **out, const char *dir, const char *owner,
                              const char *region, const char *identity_key_file,
                              const Fedagg__WorkerPrivacy *p, const char *used, int *created,
                              fa_error *err);

/* Wipes the key and frees.  NULL is a no-op. */
void fa_privacy_state_del(fa_privacy_state *s);

/* The budget (owned by s). */
fa_privacy_budget *fa_privacy_state_budget(fa_privacy_state *s);

/* The file's path. */
const char *fa_privacy_state_path(const fa_privacy_state *s);

/* Seals the budget and replaces the file (atomic, fsync'ed).  Returns 0 or
 * FA_ERR_IO / FA_ERR_NOMEM / FA_ERR_CRYPTO; on failure the file keeps the
 * previous state. */
int fa_privacy_state_save(fa_privacy_state *s, fa_error *err);

#endif
