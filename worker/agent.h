/* agent.h - the region agent: fedagg-worker with `services` in its config
 * (docs/region-policy.md; docs/architecture.md "The region agent").
 *
 * One long-lived process per region.  It lists the federations each
 * aggregation service invites the region to, decides on each under the
 * region's policy (worker/agent_core.h: every decision is there; this is
 * the I/O around it), posts its signed decisions, and runs each accepted
 * federation in a federation worker of its own: today's single-federation
 * worker, started with a config it writes under
 * state_dir/federations/<service>/<federation>/ (its trainer's launch
 * prefix before it, e.g. mpirun), in its own process group, killed by the
 * kernel if the agent dies (PR_SET_PDEATHSIG).  A crash of one federation's
 * worker or trainer touches no other; a restarted agent starts them again
 * and each resumes its round from its state directory.
 *
 * The workers reach the agent on state_dir/agent.sock (worker/agent_link.h)
 * for the device queue and for the accountants of the policy's datasets,
 * which the agent keeps in state_dir/datasets/<name>/privacy-accountant
 * (sealed as a worker's, worker/privacy_state.h; a charge is on disk before
 * its answer leaves).
 *
 * SIGTERM/SIGINT (*stop): every worker is asked to stop (SIGTERM, so that
 * a local round is saved) and the agent exits 0 once they have, or after
 * preempt_grace_s plus 5 s, when the rest are killed.
 */
#ifndef FA_WORKER_AGENT_H
#define FA_WORKER_AGENT_H

#include <signal.h>

#include "common/fa_err.h"
#include "config.pb-c.h"

/* Runs the agent of cfg (a WorkerConfig with `services`) until *stop.
 * Returns 0, or the error that keeps it from starting (its state
 * directory in use by another agent, an accountant that does not open, a
 * socket that cannot be bound, a service client that cannot be made). */
int fa_agent_run(const Fedagg__WorkerConfig *cfg, volatile sig_atomic_t *stop, fa_error *err);

#endif
