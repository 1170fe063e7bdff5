/* agent_core.c - the region agent's decisions (agent_core.h). */
#include "worker/agent_core.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Restarts of a failing worker: 1 s doubling to 5 min; a worker that ran
 * this long before failing starts the back-off over. */
#define RESTART_MIN_MS 1000u
#define RESTART_MAX_MS (300u * 1000u)
#define RESTART_RESET_MS (300u * 1000u)
/* A service that did not answer is listed again after 1 s, doubling to
 * its poll interval. */
#define LIST_RETRY_MIN_MS 1000u

typedef enum fed_state {
    FED_REFUSED = 0,
    FED_RUNNING,  /* accepted; its worker runs (or is being started) */
    FED_BACKOFF,  /* accepted; its worker failed and waits to be restarted */
    FED_DONE,     /* accepted; its worker ended by itself: not restarted */
    FED_STOPPING, /* its worker was told to stop */
    FED_GONE,     /* not listed any more (or stopped centrally), no worker */
} fed_state;

static const char *const state_names[] = {"refused", "running",  "restarting",
                                          "done",    "stopping", "gone"};

enum { POSTED_NONE = 0, POSTED_ACCEPT = 1, POSTED_REFUSE = 2 };

typedef struct fed {
    char id[FA_AGENT_ID_MAX];
    int service;
    fed_state state;
    int trainer, dataset, device; /* policy indexes, -1 before an acceptance */
    int worker;                   /* its worker process lives */
    uint64_t started_at, restart_at;
    unsigned failures;
    uint64_t seen; /* the listing of its service that last listed it */
    int posted;    /* the decision last posted, and its reason */
    char posted_reason[FA_AGENT_REASON_MAX];
    /* the device */
    int queued, holding;
    uint64_t deadline, hold_since, train_ms;
} fed;

typedef struct service_state {
    uint64_t next_list, poll_ms, generation;
    unsigned failures;
    int listing; /* a LIST action is out, its result not reported yet */
} service_state;

typedef struct device_state {
    int holder; /* fed, or -1 */
    int *queue; /* feds, first come first */
    size_t n_queue, cap_queue;
} device_state;

struct fa_agent_core {
    const Fedagg__WorkerConfig *cfg;
    const Fedagg__RegionPolicy *p;
    service_state *svc;
    size_t n_svc;
    fed *feds;
    size_t n_feds, cap_feds;
    device_state *dev;
    size_t n_dev;
    fa_privacy_budget **budgets; /* per policy dataset, NULL without a budget */
    int *dirty;                  /* charged in memory, not yet saved */
    fa_agent_action *actions;    /* a FIFO: head .. n */
    size_t head, n_actions, cap_actions;
    int shutting_down;
    int oom; /* an action could not be queued (out of memory) */
};

/* ---------------------------------------------------------------------- */
/* Small pieces                                                             */
/* ---------------------------------------------------------------------- */

static int str_eq(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

static int empty(const char *s)
{
    return !s || !*s;
}

static void push(fa_agent_core *c, fa_agent_action_kind kind, int f, int service, int accept,
                 const char *reason)
{
    fa_agent_action *a;

    if (c->n_actions == c->cap_actions) {
        size_t live = c->n_actions - c->head;
        if (c->head > 0) { /* reuse the consumed front */
            memmove(c->actions, c->actions + c->head, live * sizeof(*a));
            c->head = 0;
            c->n_actions = live;
        }
        if (c->n_actions == c->cap_actions) {
            size_t cap = c->cap_actions ? c->cap_actions * 2 : 16;
            fa_agent_action *na = realloc(c->actions, cap * sizeof(*na));
            if (!na) {
                c->oom = 1;
                return;
            }
            c->actions = na;
            c->cap_actions = cap;
        }
    }
    a = &c->actions[c->n_actions++];
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->fed = f;
    a->service = service;
    a->accept = accept;
    snprintf(a->reason, sizeof(a->reason), "%s", reason ? reason : "");
}

static int is_accepted(const fed *f)
{
    return f->state == FED_RUNNING || f->state == FED_BACKOFF || f->state == FED_DONE ||
           f->state == FED_STOPPING;
}

/* Federations that take a place under max_federations. */
static size_t active(const fa_agent_core *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_feds; i++)
        n += c->feds[i].state == FED_RUNNING || c->feds[i].state == FED_BACKOFF ||
             (c->feds[i].state == FED_STOPPING && c->feds[i].worker);
    return n;
}

static int policy_trainer(const fa_agent_core *c, const char *name)
{
    for (size_t i = 0; name && i < c->p->n_trainers; i++)
        if (str_eq(c->p->trainers[i]->name, name))
            return (int)i;
    return -1;
}

static int policy_dataset(const fa_agent_core *c, const char *name)
{
    for (size_t i = 0; name && i < c->p->n_datasets; i++)
        if (str_eq(c->p->datasets[i]->name, name))
            return (int)i;
    return -1;
}

static int dataset_has_budget(const fa_agent_core *c, int ds)
{
    const Fedagg__WorkerPrivacy *p = ds >= 0 ? c->p->datasets[ds]->privacy : NULL;
    return p && p->target_epsilon > 0;
}

static int trainer_device(const fa_agent_core *c, int t)
{
    const char *want = t >= 0 ? c->p->trainers[t]->device : NULL;
    if (empty(want))
        return 0;
    for (size_t i = 0; i < c->n_dev; i++)
        if (!strcmp(fa_agent_core_device_name(c, (int)i), want))
            return (int)i;
    return 0; /* the config check refuses a device not listed */
}

/* A federation id the agent can use as a directory name and in a route:
 * [A-Za-z0-9._-], not starting with '.'. */
static int usable_id(const char *id)
{
    size_t n = id ? strlen(id) : 0;
    if (n == 0 || n >= FA_AGENT_ID_MAX || id[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = id[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Lifecycle                                                                */
/* ---------------------------------------------------------------------- */

int fa_agent_core_new(fa_agent_core **out, const Fedagg__WorkerConfig *cfg, uint64_t now_ms,
                      fa_error *err)
{
    static const Fedagg__RegionPolicy no_policy = FEDAGG__REGION_POLICY__INIT;
    fa_agent_core *c;

    *out = NULL;
    if (!cfg || cfg->n_services == 0)
        return fa_errorf(err, FA_ERR_INVAL, "a region agent needs at least one service");
    c = calloc(1, sizeof(*c));
    if (!c)
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    c->cfg = cfg;
    c->p = cfg->policy ? cfg->policy : &no_policy;
    c->n_svc = cfg->n_services;
    c->n_dev = c->p->n_devices ? c->p->n_devices : 1;
    c->svc = calloc(c->n_svc, sizeof(*c->svc));
    c->dev = calloc(c->n_dev, sizeof(*c->dev));
    c->budgets = calloc(c->p->n_datasets + 1, sizeof(*c->budgets));
    c->dirty = calloc(c->p->n_datasets + 1, sizeof(*c->dirty));
    if (!c->svc || !c->dev || !c->budgets || !c->dirty) {
        fa_agent_core_del(c);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < c->n_svc; i++) {
        uint32_t poll = cfg->services[i]->poll_s ? cfg->services[i]->poll_s : 30;
        c->svc[i].poll_ms = (uint64_t)poll * 1000u;
        c->svc[i].next_list = now_ms;
    }
    for (size_t i = 0; i < c->n_dev; i++)
        c->dev[i].holder = -1;
    *out = c;
    return 0;
}

void fa_agent_core_del(fa_agent_core *c)
{
    if (!c)
        return;
    for (size_t i = 0; c->dev && i < c->n_dev; i++)
        free(c->dev[i].queue);
    free(c->dev);
    free(c->svc);
    free(c->feds);
    free(c->budgets);
    free(c->dirty);
    free(c->actions);
    free(c);
}

int fa_agent_core_pop(fa_agent_core *c, fa_agent_action *a)
{
    if (c->head == c->n_actions) {
        c->head = c->n_actions = 0;
        return 0;
    }
    *a = c->actions[c->head++];
    return 1;
}

/* ---------------------------------------------------------------------- */
/* The device queue                                                         */
/* ---------------------------------------------------------------------- */

static void dequeue(device_state *d, int f)
{
    for (size_t i = 0; i < d->n_queue; i++)
        if (d->queue[i] == f) {
            memmove(d->queue + i, d->queue + i + 1, (d->n_queue - i - 1) * sizeof(int));
            d->n_queue--;
            return;
        }
}

/* Why fed f, starting at `start`, would miss its deadline (NULL: it would
 * not, or nothing is known).  Only a measured training time predicts. */
static const char *would_miss(const fa_agent_core *c, const fed *f, uint64_t now, uint64_t start,
                              char *buf, size_t n)
{
    if (!f->deadline || !f->train_ms || start + f->train_ms <= f->deadline)
        return NULL;
    snprintf(buf, n,
             "device '%s': the round's deadline is %.1f s away, the wait for the device about "
             "%.1f s and a training about %.1f s; the round is skipped rather than trained late",
             fa_agent_core_device_name(c, f->device),
             f->deadline > now ? (double)(f->deadline - now) / 1000.0 : 0.0,
             (double)(start - now) / 1000.0, (double)f->train_ms / 1000.0);
    return buf;
}

/* When the device is expected to be free for the k-th in its queue. */
static uint64_t expected_start(const fa_agent_core *c, const device_state *d, size_t k,
                               uint64_t now)
{
    uint64_t t = now;
    if (d->holder >= 0) {
        const fed *h = &c->feds[d->holder];
        if (h->train_ms && h->hold_since + h->train_ms > now)
            t = h->hold_since + h->train_ms;
    }
    for (size_t i = 0; i < k && i < d->n_queue; i++)
        t += c->feds[d->queue[i]].train_ms;
    return t;
}

static void grant(fa_agent_core *c, device_state *d, fed *f, uint64_t now)
{
    d->holder = (int)(f - c->feds);
    f->holding = 1;
    f->queued = 0;
    f->hold_since = now;
}

/* The device is free: the first in its queue that can still make its
 * deadline gets it; those that cannot are skipped. */
static void grant_next(fa_agent_core *c, device_state *d, uint64_t now)
{
    char why[FA_AGENT_REASON_MAX];

    while (d->holder < 0 && d->n_queue > 0) {
        fed *f = &c->feds[d->queue[0]];
        dequeue(d, d->queue[0]);
        f->queued = 0;
        if (would_miss(c, f, now, now, why, sizeof(why))) {
            push(c, FA_AGENT_SKIP, (int)(f - c->feds), f->service, 0, why);
            continue;
        }
        grant(c, d, f, now);
        push(c, FA_AGENT_GRANT, (int)(f - c->feds), f->service, 0, NULL);
    }
}

fa_agent_device_answer fa_agent_core_device_acquire(fa_agent_core *c, uint64_t now_ms, int fi,
                                                    uint64_t deadline_ms, char *why, size_t n)
{
    fed *f = &c->feds[fi];
    device_state *d;
    size_t k;

    assert(fi >= 0 && (size_t)fi < c->n_feds);
    if (f->device < 0)
        f->device = 0;
    d = &c->dev[f->device];
    f->deadline = deadline_ms;
    if (f->holding)
        return FA_AGENT_DEVICE_GRANTED;
    if (!f->queued && d->holder < 0 && d->n_queue == 0) {
        if (would_miss(c, f, now_ms, now_ms, why, n))
            return FA_AGENT_DEVICE_SKIP;
        grant(c, d, f, now_ms);
        return FA_AGENT_DEVICE_GRANTED;
    }
    if (!f->queued) {
        if (d->n_queue == d->cap_queue) {
            size_t cap = d->cap_queue ? d->cap_queue * 2 : 8;
            int *q = realloc(d->queue, cap * sizeof(*q));
            if (!q) {
                snprintf(why, n, "out of memory for the device queue; the round is skipped");
                return FA_AGENT_DEVICE_SKIP;
            }
            d->queue = q;
            d->cap_queue = cap;
        }
        d->queue[d->n_queue++] = fi;
        f->queued = 1;
    }
    for (k = 0; k < d->n_queue && d->queue[k] != fi; k++)
        ;
    if (would_miss(c, f, now_ms, expected_start(c, d, k, now_ms), why, n)) {
        dequeue(d, fi);
        f->queued = 0;
        return FA_AGENT_DEVICE_SKIP;
    }
    return FA_AGENT_DEVICE_QUEUED;
}

void fa_agent_core_device_release(fa_agent_core *c, uint64_t now_ms, int fi)
{
    fed *f = &c->feds[fi];
    device_state *d;

    if (f->device < 0)
        return;
    d = &c->dev[f->device];
    if (f->holding) {
        f->train_ms = now_ms > f->hold_since ? now_ms - f->hold_since : 1;
        f->holding = 0;
        d->holder = -1;
        grant_next(c, d, now_ms);
    } else if (f->queued) {
        dequeue(d, fi);
        f->queued = 0;
    }
}

void fa_agent_core_detached(fa_agent_core *c, uint64_t now_ms, int fi)
{
    fed *f = &c->feds[fi];
    device_state *d;

    if (f->device < 0)
        return;
    d = &c->dev[f->device];
    if (f->holding) {
        f->holding = 0;
        d->holder = -1;
        grant_next(c, d, now_ms);
    } else if (f->queued) {
        dequeue(d, fi);
        f->queued = 0;
    }
}

uint64_t fa_agent_core_train_ms(const fa_agent_core *c, int fi)
{
    return c->feds[fi].train_ms;
}

/* ---------------------------------------------------------------------- */
/* Offers                                                                   */
/* ---------------------------------------------------------------------- */

const char *fa_agent_core_judge(const fa_agent_core *c, const Fedagg__FederationOffer *o,
                                char *reason, size_t n)
{
    const Fedagg__RegionPolicy *p = c->p;
    const Fedagg__FederationInfo *info = o->info;
    const char *id = info ? info->federation_id : NULL;
    uint64_t model_bytes;
    int accepted = 0, t, ds;
    size_t i, k;

    if (!usable_id(id)) {
        snprintf(reason, n,
                 "federation id '%.*s' is not one this region can take: 1 to %d characters of "
                 "A-Z, a-z, 0-9, '.', '_' and '-' (it names a directory)",
                 FA_AGENT_ID_MAX, id ? id : "", FA_AGENT_ID_MAX - 1);
        return reason;
    }
    for (i = 0; i < p->n_accept_federations && !accepted; i++)
        accepted = str_eq(p->accept_federations[i], id);
    for (i = 0; i < p->n_accept_teams && !accepted; i++)
        accepted = str_eq(p->accept_teams[i], "*") || str_eq(p->accept_teams[i], o->team);
    if (!accepted) {
        snprintf(reason, n,
                 "not accepted by the region's policy: team '%.64s' is not among its "
                 "accept_teams, nor federation '%s' among its accept_federations",
                 o->team ? o->team : "", id);
        return reason;
    }
    t = policy_trainer(c, o->trainer);
    if (t < 0) {
        snprintf(reason, n, "unknown trainer: the region's policy has no trainer '%.64s'",
                 o->trainer ? o->trainer : "");
        return reason;
    }
    ds = policy_dataset(c, o->dataset);
    if (ds < 0) {
        snprintf(reason, n, "unknown dataset: the region's policy has no dataset '%.64s'",
                 o->dataset ? o->dataset : "");
        return reason;
    }
    if (p->trainers[t]->kind_case == FEDAGG__POLICY_TRAINER__KIND_BUILTIN &&
        empty(p->datasets[ds]->data ? p->datasets[ds]->data->train_images : NULL)) {
        snprintf(reason, n,
                 "trainer '%s' is the built-in one, which reads IDX files, and dataset '%s' has "
                 "none in the region's policy",
                 o->trainer, o->dataset);
        return reason;
    }
    model_bytes = o->model_bytes ? o->model_bytes : (info ? info->num_params * 4u : 0);
    if (p->max_model_bytes && model_bytes > p->max_model_bytes) {
        snprintf(reason, n,
                 "model too large: %" PRIu64 " bytes, and the region's policy takes at most "
                 "%" PRIu64 " (max_model_bytes)",
                 model_bytes, p->max_model_bytes);
        return reason;
    }
    if (p->trainers[t]->max_model_bytes && model_bytes > p->trainers[t]->max_model_bytes) {
        snprintf(reason, n,
                 "model too large: %" PRIu64 " bytes, and trainer '%s' takes at most %" PRIu64
                 " (max_model_bytes)",
                 model_bytes, o->trainer, p->trainers[t]->max_model_bytes);
        return reason;
    }
    for (i = 0; info && i < info->n_regions; i++) {
        for (k = 0; k < c->cfg->n_regions; k++)
            if (str_eq(c->cfg->regions[k]->id, info->regions[i]))
                break;
        if (k == c->cfg->n_regions) {
            snprintf(reason, n,
                     "unknown region: the federation names region '%.63s', which this region "
                     "does not know (its `regions`), so it could not check that region's "
                     "signatures",
                     info->regions[i] ? info->regions[i] : "");
            return reason;
        }
    }
    if (dataset_has_budget(c, ds)) {
        const char *mech = p->datasets[ds]->privacy->mechanism;
        if (str_eq(mech, FA_PRIVACY_MECHANISM_DDG) &&
            !str_eq(o->privacy_mechanism, FA_PRIVACY_MECHANISM_DDG)) {
            snprintf(reason, n,
                     "privacy: dataset '%s' accounts the federation's distributed DP (\"ddg\"), "
                     "and this federation has none",
                     o->dataset);
            return reason;
        }
    } else if (str_eq(o->privacy_mechanism, FA_PRIVACY_MECHANISM_DPSGD)) {
        snprintf(reason, n,
                 "privacy: the federation asks for DP-SGD and dataset '%s' has no privacy "
                 "budget in the region's policy",
                 o->dataset);
        return reason;
    }
    return NULL;
}

int fa_agent_core_find(const fa_agent_core *c, int service, const char *id)
{
    for (size_t i = 0; id && i < c->n_feds; i++)
        if (c->feds[i].service == service && !strcmp(c->feds[i].id, id))
            return (int)i;
    return -1;
}

static fed *find_or_add(fa_agent_core *c, int service, const char *id)
{
    int i = fa_agent_core_find(c, service, id);
    fed *f;

    if (i >= 0)
        return &c->feds[i];
    if (c->n_feds == c->cap_feds) {
        size_t cap = c->cap_feds ? c->cap_feds * 2 : 8;
        fed *nf = realloc(c->feds, cap * sizeof(*nf));
        if (!nf)
            return NULL;
        c->feds = nf;
        c->cap_feds = cap;
    }
    f = &c->feds[c->n_feds++];
    memset(f, 0, sizeof(*f));
    snprintf(f->id, sizeof(f->id), "%s", id);
    f->service = service;
    f->state = FED_GONE;
    f->trainer = f->dataset = f->device = -1;
    return f;
}

static void post(fa_agent_core *c, fed *f, int accept, const char *reason,
                 const char *central_decision)
{
    int want = accept ? POSTED_ACCEPT : POSTED_REFUSE;
    const char *want_name = accept ? "accepted" : "refused";

    if (f->posted == want && !strcmp(f->posted_reason, reason ? reason : "") &&
        str_eq(central_decision, want_name))
        return;
    f->posted = want;
    snprintf(f->posted_reason, sizeof(f->posted_reason), "%s", reason ? reason : "");
    push(c, FA_AGENT_POST_DECISION, (int)(f - c->feds), f->service, accept, reason);
}

static void stop(fa_agent_core *c, fed *f, const char *why)
{
    if (f->worker) {
        if (f->state != FED_STOPPING)
            push(c, FA_AGENT_STOP, (int)(f - c->feds), f->service, 0, why);
        f->state = FED_STOPPING;
    } else {
        f->state = FED_GONE;
    }
}

static void start(fa_agent_core *c, fed *f)
{
    f->state = FED_RUNNING;
    push(c, FA_AGENT_START, (int)(f - c->feds), f->service, 0, NULL);
}

/* One offer of a listing. */
static void decide(fa_agent_core *c, fed *f, const Fedagg__FederationOffer *o)
{
    char reason[FA_AGENT_REASON_MAX], why[FA_AGENT_REASON_MAX];
    const char *r;

    if (str_eq(o->state, "archived")) {
        stop(c, f, "the federation was archived");
        return;
    }
    if (str_eq(o->state, "stopped")) {
        snprintf(why, sizeof(why), "the federation was stopped centrally: %.200s",
                 o->state_reason ? o->state_reason : "");
        if (is_accepted(f))
            stop(c, f, why);
        return;
    }
    if (str_eq(o->state, "finished")) {
        /* a running worker sees it and ends by itself */
        if (f->state == FED_BACKOFF)
            f->state = FED_DONE;
        return;
    }
    if (!str_eq(o->state, "running") && !str_eq(o->state, "paused"))
        return; /* a state this agent does not know: no decision */
    if (is_accepted(f)) {
        if (f->state != FED_STOPPING)
            post(c, f, 1, NULL, o->decision);
        return;
    }
    r = fa_agent_core_judge(c, o, reason, sizeof(reason));
    if (!r && active(c) >= c->p->max_federations) {
        snprintf(reason, sizeof(reason),
                 "at capacity: the region runs %zu federations, as many as its policy allows "
                 "(max_federations %u)",
                 active(c), c->p->max_federations);
        r = reason;
    }
    if (r) {
        f->state = FED_REFUSED;
        post(c, f, 0, r, o->decision);
        return;
    }
    f->trainer = policy_trainer(c, o->trainer);
    f->dataset = policy_dataset(c, o->dataset);
    f->device = trainer_device(c, f->trainer);
    f->failures = 0;
    post(c, f, 1, NULL, o->decision);
    if (!c->shutting_down)
        start(c, f);
    else
        f->state = FED_GONE;
}

void fa_agent_core_listed(fa_agent_core *c, uint64_t now_ms, int service,
                          Fedagg__FederationOffer *const *offers, size_t n, size_t *ignored)
{
    service_state *s = &c->svc[service];
    uint64_t gen = ++s->generation;
    size_t bad = 0;

    s->listing = 0;
    s->failures = 0;
    s->next_list = now_ms + s->poll_ms;
    /* The federations already this region's first, so that a restarted
     * agent keeps the ones it ran rather than fill its places otherwise. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            const Fedagg__FederationOffer *o = offers[i];
            const char *id = o && o->info ? o->info->federation_id : NULL;
            fed *f;
            int first;
            /* an id that could not name a directory or a route is not
             * an offer this agent can answer */
            if (!usable_id(id)) {
                bad += pass == 0;
                continue;
            }
            f = find_or_add(c, service, id);
            if (!f) {
                c->oom = 1;
                continue;
            }
            first = is_accepted(f) || str_eq(o->decision, "accepted");
            if ((pass == 0) != first)
                continue;
            f->seen = gen;
            decide(c, f, o);
        }
    }
    for (size_t i = 0; i < c->n_feds; i++) {
        fed *f = &c->feds[i];
        if (f->service == service && f->seen != gen && f->state != FED_GONE)
            stop(c, f, "the service no longer lists the federation for this region");
    }
    if (ignored)
        *ignored = bad;
}

void fa_agent_core_list_failed(fa_agent_core *c, uint64_t now_ms, int service)
{
    service_state *s = &c->svc[service];
    uint64_t wait = (uint64_t)LIST_RETRY_MIN_MS << (s->failures < 20 ? s->failures : 20);

    if (wait > s->poll_ms)
        wait = s->poll_ms;
    s->failures++;
    s->listing = 0;
    s->next_list = now_ms + wait;
}

void fa_agent_core_decision_failed(fa_agent_core *c, int fi)
{
    c->feds[fi].posted = POSTED_NONE;
}

/* ---------------------------------------------------------------------- */
/* Workers                                                                  */
/* ---------------------------------------------------------------------- */

static void back_off(fa_agent_core *c, fed *f, uint64_t now)
{
    uint64_t wait;

    if (f->started_at && now - f->started_at >= RESTART_RESET_MS)
        f->failures = 0;
    wait = (uint64_t)RESTART_MIN_MS << (f->failures < 20 ? f->failures : 20);
    if (wait > RESTART_MAX_MS)
        wait = RESTART_MAX_MS;
    f->failures++;
    f->restart_at = now + wait;
    f->state = c->shutting_down ? FED_GONE : FED_BACKOFF;
}

void fa_agent_core_started(fa_agent_core *c, uint64_t now_ms, int fi, int ok)
{
    fed *f = &c->feds[fi];

    f->started_at = now_ms;
    if (ok) {
        f->worker = 1;
        return;
    }
    back_off(c, f, now_ms);
}

void fa_agent_core_exited(fa_agent_core *c, uint64_t now_ms, int fi, int done)
{
    fed *f = &c->feds[fi];

    fa_agent_core_detached(c, now_ms, fi);
    f->worker = 0;
    if (f->state == FED_STOPPING || c->shutting_down)
        f->state = FED_GONE;
    else if (done)
        f->state = FED_DONE;
    else
        back_off(c, f, now_ms);
}

void fa_agent_core_shutdown(fa_agent_core *c)
{
    c->shutting_down = 1;
    for (size_t i = 0; i < c->n_feds; i++) {
        fed *f = &c->feds[i];
        if (f->worker)
            stop(c, f, "the agent is stopping");
        else if (f->state == FED_BACKOFF || f->state == FED_RUNNING)
            f->state = FED_GONE;
    }
}

size_t fa_agent_core_running(const fa_agent_core *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_feds; i++)
        n += c->feds[i].worker != 0;
    return n;
}

/* ---------------------------------------------------------------------- */
/* Timers                                                                   */
/* ---------------------------------------------------------------------- */

void fa_agent_core_tick(fa_agent_core *c, uint64_t now_ms)
{
    char why[FA_AGENT_REASON_MAX];

    for (size_t i = 0; i < c->n_svc && !c->shutting_down; i++) {
        service_state *s = &c->svc[i];
        if (!s->listing && now_ms >= s->next_list) {
            s->listing = 1;
            push(c, FA_AGENT_LIST, -1, (int)i, 0, NULL);
        }
    }
    for (size_t i = 0; i < c->n_feds && !c->shutting_down; i++) {
        fed *f = &c->feds[i];
        if (f->state == FED_BACKOFF && now_ms >= f->restart_at)
            start(c, f);
    }
    /* a queued round that can no longer make its deadline even if it got
     * the device now */
    for (size_t k = 0; k < c->n_dev; k++) {
        device_state *d = &c->dev[k];
        for (size_t j = 0; j < d->n_queue;) {
            fed *f = &c->feds[d->queue[j]];
            if (f->deadline && now_ms >= f->deadline) {
                snprintf(why, sizeof(why),
                         "device '%s': the round's deadline passed while it waited for the "
                         "device; the round is skipped",
                         fa_agent_core_device_name(c, (int)k));
            } else if (!would_miss(c, f, now_ms, now_ms, why, sizeof(why))) {
                j++;
                continue;
            }
            dequeue(d, d->queue[j]);
            f->queued = 0;
            push(c, FA_AGENT_SKIP, (int)(f - c->feds), f->service, 0, why);
        }
    }
}

uint64_t fa_agent_core_next_timer(const fa_agent_core *c)
{
    uint64_t t = UINT64_MAX;

    if (c->head < c->n_actions)
        return 0;
    for (size_t i = 0; i < c->n_svc && !c->shutting_down; i++)
        if (!c->svc[i].listing && c->svc[i].next_list < t)
            t = c->svc[i].next_list;
    for (size_t i = 0; i < c->n_feds && !c->shutting_down; i++)
        if (c->feds[i].state == FED_BACKOFF && c->feds[i].restart_at < t)
            t = c->feds[i].restart_at;
    for (size_t k = 0; k < c->n_dev; k++)
        for (size_t j = 0; j < c->dev[k].n_queue; j++) {
            const fed *f = &c->feds[c->dev[k].queue[j]];
            uint64_t when;
            if (!f->deadline)
                continue;
            when =
                f->deadline > f->train_ms ? f->deadline - f->train_ms + (f->train_ms ? 1 : 0) : 0;
            if (when < t)
                t = when;
        }
    return t;
}

/* ---------------------------------------------------------------------- */
/* Privacy                                                                  */
/* ---------------------------------------------------------------------- */

void fa_agent_core_set_accountant(fa_agent_core *c, int ds, fa_privacy_budget *b)
{
    if (ds >= 0 && (size_t)ds < c->p->n_datasets)
        c->budgets[ds] = b;
}

void fa_agent_core_privacy_saved(fa_agent_core *c, int ds, int rc)
{
    if (ds >= 0 && (size_t)ds < c->p->n_datasets)
        c->dirty[ds] = rc != 0;
}

int fa_agent_core_privacy(fa_agent_core *c, int fi, const fa_agent_privacy_req *req,
                          fa_agent_privacy_res *res)
{
    fed *f = &c->feds[fi];
    const fa_privacy_release *l;
    const fa_privacy_spend *sp = NULL;
    fa_privacy_budget *b;
    const char *dsname, *mech;
    fa_error e;
    int rc = 0;

    memset(res, 0, sizeof(res[0]));
    fedagg__privacy_statement__init(&res->st);
    res->ds = f->dataset;
    fa_error_clear(&e);
    if (f->dataset < 0 || !(b = c->budgets[f->dataset])) {
        res->rc = FA_ERR_NOTFOUND;
        snprintf(res->msg, sizeof(res->msg),
                 "federation '%s' trains on no dataset with a privacy budget", f->id);
        return res->rc;
    }
    dsname = c->p->datasets[f->dataset]->name;
    mech = c->p->datasets[f->dataset]->privacy->mechanism;
    if ((req->op == FA_AGENT_PRIVACY_CHARGE || req->have_spend) &&
        !str_eq(req->spend.mechanism, mech)) {
        rc = fa_errorf(&e, FA_ERR_INVAL,
                       "a round of mechanism \"%.32s\" on a budget that accounts \"%s\": a budget "
                       "keeps one mechanism and unit",
                       req->spend.mechanism, mech ? mech : "");
    } else if (req->op == FA_AGENT_PRIVACY_PREVIEW) {
        l = fa_privacy_budget_last_for(b, f->id);
        sp = req->have_spend ? &req->spend : l ? &l->spend : NULL;
        if (sp)
            rc = fa_privacy_budget_preview(b, sp, &res->eps_round, &res->eps_total, &e);
        else if (!(fa_privacy_budget_epsilon(b) < fa_privacy_budget_target_epsilon(b)))
            rc = fa_errorf(&e, FA_ERR_RANGE, "privacy budget exhausted: epsilon %.4g spent of %g",
                           fa_privacy_budget_epsilon(b), fa_privacy_budget_target_epsilon(b));
    } else if (req->op == FA_AGENT_PRIVACY_CHARGE) {
        rc = fa_privacy_budget_charge_for(b, f->id, &req->spend, req->round, req->version,
                                          req->digest, &res->charged, &e);
        if (rc == 0) {
            l = fa_privacy_budget_last_for(b, f->id);
            res->eps_round = l->epsilon_round;
            res->eps_total = l->epsilon_total;
            if (res->charged)
                c->dirty[f->dataset] = 1;
            res->save = c->dirty[f->dataset];
            rc = fa_privacy_budget_statement_for(b, f->id, req->round, req->attempt, &res->st, &e);
        }
    } else {
        rc = fa_privacy_budget_statement_for(b, f->id, req->round, req->attempt, &res->st, &e);
    }
    if (rc != 0)
        snprintf(res->msg, sizeof(res->msg), "dataset '%s': %s", dsname, fa_error_msg(&e, rc));
    res->rc = rc;
    res->spent = fa_privacy_budget_epsilon(b);
    res->budget = fa_privacy_budget_target_epsilon(b);
    res->delta = fa_privacy_budget_delta(b);
    res->rounds = fa_privacy_budget_rounds(b);
    l = fa_privacy_budget_last_for(b, f->id);
    res->have_last = l != NULL;
    if (l)
        res->last = *l;
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Accessors                                                                */
/* ---------------------------------------------------------------------- */

const char *fa_agent_core_fed_id(const fa_agent_core *c, int fi)
{
    return c->feds[fi].id;
}

int fa_agent_core_fed_service(const fa_agent_core *c, int fi)
{
    return c->feds[fi].service;
}

int fa_agent_core_fed_trainer(const fa_agent_core *c, int fi)
{
    return c->feds[fi].trainer;
}

int fa_agent_core_fed_dataset(const fa_agent_core *c, int fi)
{
    return c->feds[fi].dataset;
}

int fa_agent_core_fed_device(const fa_agent_core *c, int fi)
{
    return c->feds[fi].device;
}

const char *fa_agent_core_fed_state(const fa_agent_core *c, int fi)
{
    return state_names[c->feds[fi].state];
}

unsigned fa_agent_core_fed_failures(const fa_agent_core *c, int fi)
{
    return c->feds[fi].failures;
}

size_t fa_agent_core_devices(const fa_agent_core *c)
{
    return c->n_dev;
}

const char *fa_agent_core_device_name(const fa_agent_core *c, int dev)
{
    if (dev < 0 || c->p->n_devices == 0)
        return FA_AGENT_DEFAULT_DEVICE;
    return c->p->devices[dev];
}
