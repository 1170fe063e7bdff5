/* federation_internal.h - what the files of the round orchestration share:
 * struct fa_fed and the functions one file defines for the others (as
 * SQLite keeps btreeInt.h next to btree.h).  Nothing outside aggregator/
 * includes it; the public face is federation.h. */
#ifndef FA_FEDERATION_INTERNAL_H
#define FA_FEDERATION_INTERNAL_H

#include "aggregator/federation.h"

#include <stddef.h>
#include <stdint.h>

#include "audit/audit_log.h"
#include "aggregator/evaluator.h"
#include "aggregator/eval_reports.h"
#include "aggregator/round_history.h"
#include "aggregator/global_model.h"
#include "aggregator/model_store.h"
#include "aggregator/privacy_ledger.h"
#include "aggregator/server_opt.h"
#include "aggregator/storage_gate.h"
#include "aggregator/upload_journal.h"
#include "crypto/identity.h"
#include "crypto/secagg.h"
#include "fedagg.pb-c.h"
#include "model/data.h"
#include "model/mlp.h"
#include "privacy/accountant.h"
#include "privacy/ddg.h"

#define FA_FED_MAX_MSG_BYTES (64u << 20)

struct fa_fed_region {
    char id[FA_SECAGG_MAX_ID_LEN + 1];
    uint8_t pk[32];
    /* This attempt: SHA-256 of each accepted message, for idempotent retries. */
    uint8_t msg_sha[FA_SECAGG_N_PHASES][32];
    uint8_t have_msg[FA_SECAGG_N_PHASES];
    int uploading;      /* a masked upload is in flight */
    uint64_t upload_id; /* which stream it is (fa_fed.next_upload_id) */
    int uploaded;       /* its masked upload completed */
    /* Totals for status and metrics. */
    uint64_t bytes_received, rounds_participated, dropouts;
    uint64_t last_seen_ms;
    /* An operator drained it: it sits out from the next attempt on. */
    int drained;
    char drained_by[64];
    /* Its latest signed decision on the federation's offer (fed_decision.c):
     * 0 none, 1 accepted, -1 refused (it sits out, as a drained region). */
    int decision;
    char decision_reason[256];
    uint64_t decision_unix_ms;
};

struct fa_fed {
    /* Settings (copied out of the config). */
    char *federation_id;
    char *storage_dir;
    char *state_path;
    /* The secure-aggregation sum last written next to round.state (see
     * write_sum): its round, attempt and generation; have_sum = 0: none. */
    int have_sum;
    uint64_t sum_round, sum_gen;
    uint32_t sum_attempt;
    uint64_t opt_steps;         /* server optimizer steps so far (the state file's fedagg.steps) */
    fa_upload_journal *journal; /* the masked uploads' journals, in files (upload_journal.h) */
    uint32_t min_regions, threshold, neighbours, max_attempts, rounds_limit;
    uint64_t deadline_ms[FA_SECAGG_N_PHASES];
    uint64_t advertise_grace_ms;
    fa_secagg_quant quant; /* the secure-aggregation codec's */
    int clip_cfg;          /* config ClipMode (the record; the regions' L2 bound when per tensor) */
    uint64_t max_examples;
    uint8_t config_digest[32];
    Fedagg__ServerOptimizer opt_cfg;

    struct fa_fed_region *regions; /* sorted by id */
    size_t n_regions;
    fa_secagg_member *members;

    /* The model: a tensor table and the master weights of its federated
     * tensors (global_model.h). */
    fa_global_model *model;
    size_t d; /* federated coordinates */
    fa_model_store *store;
    struct fa_model_version cur;
    fa_server_opt *opt;
    uint8_t round_ranges_sha[32]; /* the ranges of the round in flight (its base version's) */

    /* The audit log. */
    fa_audit_log *audit;
    fa_note_signer *signer;

    /* Evaluation of the built-in MLP on a public test set (optional). */
    fa_data eval_data;
    fa_mlp *eval_net;
    fa_mlp_layout eval_layout;
    float *eval_params;
    uint32_t eval_every;
    double eval_accuracy, eval_loss;
    int have_eval;
    uint64_t eval_version; /* the version eval_accuracy is of */
    /* Federated evaluation (the regions' signed reports), and the
     * evaluator command's result on any model. */
    fa_eval_reports *feval;
    fa_evaluator *evaluator;
    fa_eval_summary central;
    /* The regions' signed privacy statements of the attempt in flight. */
    fa_privacy_ledger *privacy;
    /* Distributed DP on the secure sum (fed_ddp.c); ddp_on = 0: off. */
    int ddp_on;
    fa_ddg_params ddp;
    uint8_t ddp_seed[FA_ROTATION_SEED_BYTES]; /* the public rotation seed */
    double ddp_delta;
    fa_rdp_accountant *ddp_acc; /* region-level, the rounds of the log */
    uint64_t ddp_rounds;
    double ddp_eps_total; /* the last recorded round's epsilon_total (metrics) */
    uint32_t ddp_noisy;   /* and its noisy contributions */
    float *ddp_mean;      /* (padded) the decoded mean of the round being committed */

    /* The round in flight. */
    uint64_t round;
    uint32_t attempt;
    int phase; /* Fedagg__Phase */
    uint64_t phase_opened_ms;
    uint64_t last_advertise_ms;
    uint64_t attempt_start_unix_ms;
    /* now_ms when this attempt opened (in this process; a restored attempt
     * counts from the restart): its duration, on the caller's monotonic
     * clock. */
    uint64_t attempt_opened_ms;
    fa_secagg_config sa_cfg;
    fa_secagg_server *sa;
    uint64_t rounds_completed, rounds_aborted;

    /* The last completed round's RoundResult, for late long-polls. */
    uint64_t last_round;
    uint32_t last_attempt;
    uint8_t *last_result;
    size_t last_result_len;
    char **last_participants;
    size_t n_last_participants;

    struct fa_metrics *metrics;
    char mlabels[160];    /* federation="<id>" on every series (a service's), or "" */
    uint64_t memory_need; /* a round's peak, bytes (memory_budget.h) */
    int fatal; /* a committed round could not be recorded: restart to repair */
    /* The audit log's files were damaged while running (audit_log.h
     * fa_audit_log_check): no attempt opens, /readyz says why. */
    int audit_damaged;
    char audit_damage[512];
    uint64_t audit_checked_ms;
    /* Closed while the storage cannot take a round (storage_gate.h): no
     * attempt opens, /readyz says why. */
    fa_storage_gate gate;
    uint64_t storage_free;              /* bytes free at the last check */
    uint64_t storage_failures_exported; /* gate.total already added to the metric */
    /* Operators: paused (no attempt opens), and what they look back on. */
    int paused;
    char paused_by[64];
    fa_round_history hist;
    fa_round_history_attempt cur_att; /* the attempt in flight: start, phase durations */
    uint64_t next_upload_id;
    /* Governance of released models (fed_gov.c, fed_gov.h). */
    struct fa_fed_gov *gov;
};

/* federation.c */
struct fa_fed_region *fa_fed_find_region(const fa_fed *f, const char *id);
int fa_fed_cmp_region(const void *a, const void *b);
void fa_fed_reset_region_attempt(fa_fed *f);
uint64_t fa_fed_journal_memory(void);
int fa_fed_use_journal_files(fa_fed *f, fa_error *err);
void fa_fed_open_gated(fa_fed *f, uint64_t round, uint32_t attempt, uint64_t now_ms);
int fa_fed_open_next_round(fa_fed *f, uint64_t now_ms, fa_error *err);
void fa_fed_abort_attempt(fa_fed *f, uint64_t now_ms, const char *why);
void fa_fed_evaluate(fa_fed *f);
void fa_fed_version_changed(fa_fed *f, uint64_t now_ms);
int fa_fed_finish_round(fa_fed *f, uint64_t now_ms, int *committed, fa_error *err);
double fa_fed_attempt_seconds(const fa_fed *f, uint64_t now_ms);
int fa_fed_in_list(const char *region, const char *const *ids, size_t n);

/* fed_metrics.c */
void fa_fed_metric_region(fa_fed *f, const char *name, const char *region, double v, int set);
void fa_fed_define_metrics(fa_fed *f);
void fa_fed_update_gauges(fa_fed *f);
void fa_fed_count_outcome(fa_fed *f, const char *outcome);
int fa_fed_region_connected(const struct fa_fed_region *r, uint64_t now_ms);

/* fed_round_state.c */
void fa_fed_sum_on_disk(fa_fed *f, uint64_t gen);
/* The spare sum file the next sum is written over (fed_round_state.c). */
void fa_fed_spare_sum_path(const fa_fed *f, char *out, size_t n);
/* The secure-aggregation server of round.state st into f->sa, its sum read
 * from the file the state names (or from inside the state, as older versions
 * saved it). */
int fa_fed_restore_secagg(fa_fed *f, const Fedagg__RoundState *st, fa_error *err);
int fa_fed_save_state(fa_fed *f, fa_error *err);

/* fed_record.c */
/* fed_ddp.c: distributed DP on the secure sum.  open derives the
 * parameters (config errors name the field); replay composes a record's
 * round into the account; decode turns the unmasked ring sum into
 * f->ddp_mean (count_out: the regions in it); round fills the audit
 * record's DdpRound (params: its storage) for the attempt in f->sa, and
 * recorded composes it once the record is in the log. */
int fa_fed_ddp_open(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err);
void fa_fed_ddp_free(fa_fed *f);
void fa_fed_ddp_params_pb(const fa_fed *f, Fedagg__DdpParams *out);
int fa_fed_ddp_replay(fa_fed *f, const Fedagg__AuditRecord *r, fa_error *err);
int fa_fed_ddp_decode(fa_fed *f, double *count_out, fa_error *err);
int fa_fed_ddp_round(fa_fed *f, Fedagg__DdpRound *out, Fedagg__DdpParams *params, fa_error *err);
int fa_fed_ddp_recorded(fa_fed *f, const Fedagg__DdpRound *r, fa_error *err);

int fa_fed_append_record(fa_fed *f, uint64_t prev_version, const uint8_t prev_sha[32],
                         uint64_t commit_ms, fa_error *err);
int fa_fed_append_admin_record(fa_fed *f, const char *op, const char *action, const char *region,
                               const char *reason, fa_error *err);
/* The fields of a record of an action that changes no model (an
 * operator's, a region's decision, governance): the round in flight, the
 * current model as both previous and new, the config and software; rec is
 * initialised first.  The pointers are f's. */
void fa_fed_action_record_init(fa_fed *f, Fedagg__AuditRecord *rec, uint64_t now);

/* fed_status.c */
const char *fa_fed_phase_name(int phase);

/* fed_decision.c: regions' signed decisions on the federation's offer.
 * submit checks and records one (fa_fed_submit_decision); replay restores
 * the state of a decision record of the log; sits_out is 1 for a region
 * that is not expected in an attempt (drained, or it refused). */
int fa_fed_decision_submit(fa_fed *f, const char *region, const uint8_t *body, size_t len,
                           int *changed, fa_error *err);
void fa_fed_decision_replay(fa_fed *f, const Fedagg__AuditRecord *r);
int fa_fed_region_sits_out(const struct fa_fed_region *r);

/* fed_metrics.c: labels for a series of f: its own (f->mlabels) and
 * key="value" when key is not NULL. */
void fa_fed_labels(const fa_fed *f, char *buf, size_t n, const char *key, const char *value);
/* fed_gov.c: governance of released models (aggregator/fed_gov.h).
 * gov_open: after the audit log opened and before the round is restored
 * (it completes a rollback the store committed and the log did not
 * record); gov_close frees.  gov_decide: the gate at the advertise close
 * (final 0) and the unmask close (final 1) of a round; 1 when it abandoned
 * the attempt (a rollback or a pause: the caller stops closing the phase).
 * gov_data_statements: the data statements of the attempt in flight,
 * trained from version/sha, of the regions in only[] (all when NULL), as
 * malloc'ed arrays for a record or the round state (free both);
 * gov_restore_data: those a round state saved. */
int fa_fed_gov_open(fa_fed *f, const Fedagg__AggregatorConfig *cfg, fa_error *err);
void fa_fed_gov_close(fa_fed *f);
int fa_fed_gov_decide(fa_fed *f, int final, uint64_t now_ms);
size_t fa_fed_gov_data_statements(fa_fed *f, uint64_t version, const uint8_t sha[32],
                                  char *const *only, size_t n_only,
                                  Fedagg__SignedDataStatement **items,
                                  Fedagg__SignedDataStatement ***ptrs);
void fa_fed_gov_restore_data(fa_fed *f, const Fedagg__RoundState *st);

#endif
