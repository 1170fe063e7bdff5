/* agent_link.h - a federation worker's link to the region agent that
 * started it (proto/agent.proto; docs/architecture.md "The region agent").
 *
 * The agent listens on state_dir/agent.sock (SOCK_SEQPACKET, in a
 * directory only the region's user reaches); the leader (rank 0) of each
 * federation worker connects at start, says which federation it runs, and
 * asks, in turn, for
 *   - the device before it trains a round: granted now, later (it waits
 *     in the agent's first-come, first-served queue), or refused because
 *     the queue would make the round miss its deadline (skip it);
 *   - the dataset's privacy accountant, which the agent keeps for every
 *     federation that trains on the dataset (preview, charge, statement).
 * The connection is also the worker's tie to the agent: when it closes
 * (the agent died), the worker ends, and the restarted agent starts it
 * again (it resumes its round from its state directory).
 *
 * Both ends' message framing is here too (fa_agent_link_send/_recv).
 */
#ifndef FA_WORKER_AGENT_LINK_H
#define FA_WORKER_AGENT_LINK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "agent.pb-c.h"
#include "common/fa_err.h"
#include "worker/agent_core.h"

/* The agent's socket in its state directory. */
#define FA_AGENT_SOCKET_FILE "agent.sock"
/* The largest message either end sends or takes. */
#define FA_AGENT_MSG_MAX 65536

typedef struct fa_agent_link fa_agent_link;

/* Connects to the agent at socket_path and says hello for federation of
 * service.  Returns 0, FA_ERR_IO (no agent listening there: the message
 * says so), FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_agent_link_open(fa_agent_link **out, const char *socket_path, const char *service,
                       const char *federation, fa_error *err);

/* Closes the link (the agent gives up what this worker held).  NULL is a
 * no-op. */
void fa_agent_link_del(fa_agent_link *l);

/* The connection's descriptor (a watchdog polls it for the agent's end). */
int fa_agent_link_fd(const fa_agent_link *l);

/* Ties this process to the agent: one worker per state directory (a lock
 * on state_dir/worker.lock, held until the process ends), and a watchdog
 * thread that, when the agent's end of the link closes (it died), kills
 * the process group *trainer_pgid (when > 0) and ends this process
 * (exit 1: what it saved stays for the restarted agent's new worker).  The
 * thread takes no signal.  Returns 0, FA_ERR_STATE (another worker holds
 * the directory), FA_ERR_IO or FA_ERR_NOMEM. */
int fa_agent_link_guard(fa_agent_link *l, const char *state_dir,
                        volatile sig_atomic_t *trainer_pgid, fa_error *err);

/* Asks for the device to train a round due at deadline_unix_ms (0: no
 * deadline) and waits for the answer.  Returns 0 (train now: release it
 * after), FA_ERR_RANGE (skip this round: why, n bytes, says why),
 * FA_ERR_CANCELLED (*cancel became nonzero: the place is given up) or
 * FA_ERR_IO (the agent is gone). */
int fa_agent_link_acquire(fa_agent_link *l, uint64_t deadline_unix_ms,
                          volatile sig_atomic_t *cancel, char *why, size_t n, fa_error *err);

/* Done with the device: trained (its time is the estimate of the next
 * training) or given up unused.  Returns 0 or FA_ERR_IO. */
int fa_agent_link_release(fa_agent_link *l, int trained, fa_error *err);

/* A request on the dataset's accountant (worker/agent_core.h).  res->st's
 * strings stay valid until the next call.  Returns res->rc (the agent's
 * answer), or FA_ERR_IO / FA_ERR_PROTOCOL when there was none. */
int fa_agent_link_privacy(fa_agent_link *l, const fa_agent_privacy_req *req,
                          fa_agent_privacy_res *res, fa_error *err);

/* ---- the framing, for both ends ---- */

/* The address of a socket path, also one longer than sun_path allows: its
 * directory is then opened (*dirfd, which the caller closes after
 * connect/bind; else -1) and named through /proc/self/fd. */
int fa_agent_link_addr(const char *path, struct sockaddr_un *sa, socklen_t *len, int *dirfd,
                       fa_error *err);

/* Sends one message.  Returns 0 or FA_ERR_IO. */
int fa_agent_link_send(int fd, const ProtobufCMessage *m, fa_error *err);

/* Receives one message of type d, waiting at most timeout_ms (-1: no
 * limit).  Returns 0 with *m (free with protobuf_c_message_free_unpacked),
 * FA_ERR_TIMEOUT, FA_ERR_IO (closed or broken: the message says which) or
 * FA_ERR_PROTOCOL (undecodable). */
int fa_agent_link_recv(int fd, const ProtobufCMessageDescriptor *d, int timeout_ms,
                       ProtobufCMessage **m, fa_error *err);

/* Spends and releases between their C and wire forms. */
void fa_agent_link_spend_to_wire(const fa_privacy_spend *sp, Fedagg__AgentSpend *w);
void fa_agent_link_spend_from_wire(const Fedagg__AgentSpend *w, fa_privacy_spend *sp);

#endif
