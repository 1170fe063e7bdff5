/* service_internal.h - what the files of the service share: struct
 * fa_service, its federations' entries and the service log.  Nothing
 * outside aggregator/ includes it; the public face is service.h. */
#ifndef FA_SERVICE_INTERNAL_H
#define FA_SERVICE_INTERNAL_H

#include "aggregator/service.h"

#include "audit.pb-c.h"
#include "audit/audit_log.h"
#include "crypto/checkpoint.h"

/* One federation of the service. */
struct svc_fed {
    char *id;
    char team[64];
    int is_default;
    fa_fed *fed; /* NULL while it could not be opened (fault says why) */
    /* What it opens with: the service's config (the default federation),
     * or `own`, built from its federation file (fc) around the service's
     * key and memory limit, with its store under service.dir. */
    const Fedagg__AggregatorConfig *cfg;
    Fedagg__FederationConfig *fc;
    Fedagg__AggregatorConfig own;
    Fedagg__Storage storage;
    Fedagg__AuditConfig audit;
    Fedagg__Evaluation eval;
    char *dir, *log_file, *origin;
    /* The file it was created from, as recorded. */
    char *text;
    size_t text_len;
    char *config_name;
    char created_by[64];
    uint64_t created_unix_ms;
    /* The service log's view: its last pause (1) or resume (0) of it, -1
     * none; an abort; an archive. */
    int logged_pause;
    char logged_pause_by[64];
    int aborted, archived;
    char aborted_by[64];
    /* A fault that stopped it ("" none). */
    char fault[512];
};

struct fa_service {
    const Fedagg__AggregatorConfig *cfg;
    struct fa_metrics *metrics;
    int many; /* service.dir is set */
    char *dir;
    fa_note_signer *signer;
    fa_audit_log *log; /* the service log; NULL without service.dir */
    struct svc_fed **feds;
    size_t n, cap;
    void (*close_hook)(fa_fed *fed, void *arg);
    void *close_arg;
    uint64_t states_at; /* when the state gauges were last set */
};

/* service.c */
struct svc_fed *fa_svc_find(const fa_service *s, const char *id);
int fa_svc_can_run(const struct svc_fed *e);
/* fa_service_log_scope for an entry (open or not). */
void fa_svc_scope(const fa_service *s, const struct svc_fed *e);
int fa_svc_state(const struct svc_fed *e, uint64_t now_ms, char *why, size_t n);
/* Opens e's fa_fed beside the federations that can run; on failure e->fault
 * says why and the code is returned. */
int fa_svc_open_fed(fa_service *s, struct svc_fed *e, uint64_t now_ms, fa_error *err);
/* A created federation's entry from its loaded file (taken) and the text
 * it was loaded from (copied). */
int fa_svc_entry_from_file(fa_service *s, Fedagg__FederationConfig *fc, const char *text,
                           size_t len, const char *name, struct svc_fed **out, fa_error *err);
void fa_svc_entry_free(struct svc_fed *e);
int fa_svc_add(fa_service *s, struct svc_fed *e, fa_error *err);
/* Loads a federation file as `fedagg config check --type federation` does
 * (flags: FA_CONFIG_NO_FILES at replay), paths relative to service.dir, and
 * names the service's evaluator it asks for. */
int fa_svc_load_file(fa_service *s, const char *text, size_t len, const char *name, unsigned flags,
                     Fedagg__FederationConfig **out, fa_diags *diags, fa_error *err);

/* service_log.c: the signed log of lifecycle actions. */
int fa_svc_log_open(fa_service *s, fa_error *err);
int fa_svc_log_append(fa_service *s, const char *fed_id, const char *action, const char *op,
                      const char *team, const struct svc_fed *created, const char *reason,
                      fa_error *err);
int fa_svc_log_replay(fa_service *s, fa_error *err);

#endif
