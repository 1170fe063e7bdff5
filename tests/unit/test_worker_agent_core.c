/* Unit tests of the region agent's decisions (worker/agent_core.h) on a
 * synthetic clock: every offer accepted or refused with its reason (the
 * team, the trainer, the dataset, the model's size, a region not known,
 * the privacy mechanism, capacity), decisions posted once and again after
 * a failure, workers restarted after a back-off and not after they ended
 * by themselves, stopped when their federation goes, the device shared
 * first come first served with rounds skipped rather than trained past
 * their deadline, a service that does not answer backed off, and one
 * dataset's budget spent by two federations. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/config_check.h"
#include "worker/agent_core.h"

#define SEC 1000ULL
#define T0 (1700000000000ULL) /* a wall-clock origin, in ms */

static const char *const agent_text =
    "region_id: \"eu-west\"\n"
    "tls { cert_file: \"c.crt\" key_file: \"c.key\" ca_file: \"ca.crt\" }\n"
    "identity_key_file: \"id.key\"\n"
    "state_dir: \"state\"\n"
    "regions { id: \"eu-west\" identity_public_key: "
    "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\" }\n"
    "regions { id: \"us-east\" identity_public_key: "
    "\"mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI=\" }\n"
    "services { name: \"central\" address: \"agg.example.org:4433\" public_key: "
    "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\" poll_s: 10 }\n"
    "services { name: \"lab\" address: \"lab.example.org:4433\" public_key: "
    "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\" poll_s: 20 }\n"
    "policy {\n"
    "  datasets { name: \"clinics\" data { train_images: \"a.idx\" train_labels: \"b.idx\" }\n"
    "             privacy { target_epsilon: 1.8 } }\n"
    "  datasets { name: \"notes\" path: \"/data/notes\" }\n"
    "  datasets { name: \"ddg-set\" path: \"/data/d\" privacy { target_epsilon: 5 mechanism: "
    "\"ddg\" unit: \"region\" } }\n"
    "  trainers { name: \"mlp\" builtin { local_steps: 5 } max_model_bytes: 100000 }\n"
    "  trainers { name: \"torch\" external { command: [\"python3\", \"t.py\"] } device: \"gpu1\" "
    "}\n"
    "  accept_teams: [\"vision\"]\n"
    "  accept_federations: [\"guest-fed\"]\n"
    "  max_model_bytes: 1000000\n"
    "  max_federations: 3\n"
    "  devices: [\"gpu0\", \"gpu1\"]\n"
    "}\n";

typedef struct env {
    Fedagg__WorkerConfig *cfg;
    fa_agent_core *c;
    fa_agent_action acts[64];
    size_t n;
} env;

static void setup_env(env *e, const char *text, uint64_t now)
{
    fa_diags *d = NULL;
    fa_error err;
    int rc;

    memset(e, 0, sizeof(*e));
    assert_int_equal(fa_diags_new(&d), 0);
    rc = fa_config_load_text(FA_CONFIG_WORKER, text, strlen(text), "agent.textproto", "/etc/fedagg",
                             FA_CONFIG_NO_FILES, (ProtobufCMessage **)&e->cfg, d, &err);
    if (rc != 0)
        fail_msg("the agent config: %s", err.msg);
    fa_diags_del(d);
    assert_int_equal(fa_agent_core_new(&e->c, e->cfg, now, &err), 0);
}

static void teardown_env(env *e)
{
    fa_agent_core_del(e->c);
    protobuf_c_message_free_unpacked(&e->cfg->base, NULL);
}

/* Everything the core wants done now, into e->acts. */
static size_t drain(env *e)
{
    e->n = 0;
    while (e->n < 64 && fa_agent_core_pop(e->c, &e->acts[e->n]))
        e->n++;
    return e->n;
}

static const fa_agent_action *find_act(const env *e, fa_agent_action_kind kind, int fed)
{
    for (size_t i = 0; i < e->n; i++)
        if (e->acts[i].kind == kind && (fed < 0 || e->acts[i].fed == fed))
            return &e->acts[i];
    return NULL;
}

/* An offer; strings must outlive it (literals). */
typedef struct offer {
    Fedagg__FederationOffer o;
    Fedagg__FederationInfo info;
    char *regions[4];
} offer;

static void make_offer(offer *x, const char *id, const char *team, const char *trainer,
                       const char *dataset)
{
    memset(x, 0, sizeof(*x));
    fedagg__federation_offer__init(&x->o);
    fedagg__federation_info__init(&x->info);
    x->info.federation_id = (char *)id;
    x->info.num_params = 1000;
    x->regions[0] = "eu-west";
    x->regions[1] = "us-east";
    x->info.regions = x->regions;
    x->info.n_regions = 2;
    x->o.info = &x->info;
    x->o.team = (char *)team;
    x->o.state = "running";
    x->o.trainer = (char *)trainer;
    x->o.dataset = (char *)dataset;
    x->o.model_bytes = 4200;
    x->o.privacy_mechanism = "";
    x->o.decision = "";
}

static void list(env *e, uint64_t now, int service, offer *const *xs, size_t n)
{
    Fedagg__FederationOffer *os[8];
    for (size_t i = 0; i < n; i++)
        os[i] = &xs[i]->o;
    fa_agent_core_listed(e->c, now, service, os, n, NULL);
    drain(e);
}

/* Lists one offer on service 0 and returns its decision's action. */
static const fa_agent_action *judge_one(env *e, offer *x)
{
    offer *xs[1] = {x};
    int f;
    list(e, T0, 0, xs, 1);
    f = fa_agent_core_find(e->c, 0, x->info.federation_id);
    assert_true(f >= 0);
    return find_act(e, FA_AGENT_POST_DECISION, f);
}

static void test_accept_and_start(void **state)
{
    env e;
    offer a;
    offer *xs[1] = {&a};
    const fa_agent_action *p;
    int f;

    (void)state;
    setup_env(&e, agent_text, T0);
    /* both services are due for a listing at once */
    fa_agent_core_tick(e.c, T0);
    assert_int_equal(drain(&e), 2);
    assert_int_equal(e.acts[0].kind, FA_AGENT_LIST);
    assert_int_equal(e.acts[0].service, 0);
    assert_int_equal(e.acts[1].service, 1);
    /* no second LIST while one is out */
    fa_agent_core_tick(e.c, T0 + 60 * SEC);
    assert_int_equal(drain(&e), 0);

    make_offer(&a, "cnn-1", "vision", "torch", "clinics");
    list(&e, T0, 0, xs, 1);
    f = fa_agent_core_find(e.c, 0, "cnn-1");
    assert_true(f >= 0);
    p = find_act(&e, FA_AGENT_POST_DECISION, f);
    assert_non_null(p);
    assert_true(p->accept);
    assert_non_null(find_act(&e, FA_AGENT_START, f));
    assert_int_equal(fa_agent_core_fed_trainer(e.c, f), 1);
    assert_int_equal(fa_agent_core_fed_dataset(e.c, f), 0);
    assert_int_equal(fa_agent_core_fed_device(e.c, f), 1); /* torch trains on gpu1 */
    assert_string_equal(fa_agent_core_device_name(e.c, 1), "gpu1");
    assert_string_equal(fa_agent_core_fed_state(e.c, f), "running");
    fa_agent_core_started(e.c, T0, f, 1);
    assert_int_equal(fa_agent_core_running(e.c), 1);
    /* the next listing is due after the service's poll interval */
    assert_int_equal(fa_agent_core_next_timer(e.c), T0 + 10 * SEC);
    /* listed again with the decision recorded centrally: nothing new */
    a.o.decision = "accepted";
    list(&e, T0 + 10 * SEC, 0, xs, 1);
    assert_int_equal(e.n, 0);
    /* the same id on the other service is another federation */
    list(&e, T0, 1, xs, 1);
    assert_true(fa_agent_core_find(e.c, 1, "cnn-1") >= 0);
    assert_true(fa_agent_core_find(e.c, 1, "cnn-1") != f);
    assert_non_null(find_act(&e, FA_AGENT_START, -1));
    teardown_env(&e);
}

static void expect_refusal(env *e, offer *x, const char *words)
{
    const fa_agent_action *p = judge_one(e, x);
    assert_non_null(p);
    assert_false(p->accept);
    if (!strstr(p->reason, words))
        fail_msg("refusal of %s: '%s' does not say '%s'", x->info.federation_id, p->reason, words);
    assert_null(find_act(e, FA_AGENT_START, -1));
    assert_string_equal(
        fa_agent_core_fed_state(e->c, fa_agent_core_find(e->c, 0, x->info.federation_id)),
        "refused");
}

static void test_refusals(void **state)
{
    env e;
    offer x;
    static char *stranger[] = {"eu-west", "mars-1"};

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&x, "f-team", "finance", "mlp", "clinics");
    expect_refusal(&e, &x, "team 'finance' is not among its accept_teams");
    /* a federation accepted by id, whatever its team */
    make_offer(&x, "guest-fed", "finance", "mlp", "clinics");
    assert_true(judge_one(&e, &x)->accept);
    make_offer(&x, "f-trainer", "vision", "jax", "clinics");
    expect_refusal(&e, &x, "unknown trainer: the region's policy has no trainer 'jax'");
    make_offer(&x, "f-dataset", "vision", "mlp", "x-rays");
    expect_refusal(&e, &x, "unknown dataset: the region's policy has no dataset 'x-rays'");
    make_offer(&x, "f-idx", "vision", "mlp", "notes");
    expect_refusal(&e, &x, "dataset 'notes' has none");
    make_offer(&x, "f-big", "vision", "torch", "notes");
    x.o.model_bytes = 1000001;
    expect_refusal(&e, &x, "model too large: 1000001 bytes, and the region's policy takes at most");
    make_offer(&x, "f-big-mlp", "vision", "mlp", "clinics");
    x.o.model_bytes = 200000;
    expect_refusal(&e, &x, "trainer 'mlp' takes at most 100000");
    /* no model_bytes: the federated coordinates at 4 bytes */
    make_offer(&x, "f-big-params", "vision", "torch", "notes");
    x.o.model_bytes = 0;
    x.info.num_params = 300000;
    expect_refusal(&e, &x, "1200000 bytes");
    make_offer(&x, "f-region", "vision", "torch", "notes");
    x.info.regions = stranger;
    expect_refusal(&e, &x, "region 'mars-1'");
    make_offer(&x, "f-ddg", "vision", "torch", "ddg-set");
    expect_refusal(&e, &x, "accounts the federation's distributed DP");
    make_offer(&x, "f-dpsgd", "vision", "torch", "notes");
    x.o.privacy_mechanism = "dp-sgd";
    expect_refusal(&e, &x, "asks for DP-SGD and dataset 'notes' has no privacy budget");
    /* capacity: three places; guest-fed holds one */
    make_offer(&x, "f-2", "vision", "torch", "notes");
    assert_true(judge_one(&e, &x)->accept);
    teardown_env(&e);

    setup_env(&e, agent_text, T0);
    {
        offer a, b, c, d;
        offer *xs[4] = {&a, &b, &c, &d};
        const fa_agent_action *p;
        make_offer(&a, "a", "vision", "torch", "notes");
        make_offer(&b, "b", "vision", "torch", "notes");
        make_offer(&c, "c", "vision", "torch", "notes");
        make_offer(&d, "d", "vision", "torch", "notes");
        list(&e, T0, 0, xs, 4);
        p = find_act(&e, FA_AGENT_POST_DECISION, fa_agent_core_find(e.c, 0, "d"));
        assert_non_null(p);
        assert_false(p->accept);
        assert_non_null(strstr(p->reason, "at capacity: the region runs 3 federations"));
        assert_int_equal(fa_agent_core_fed_state(e.c, fa_agent_core_find(e.c, 0, "c"))[0], 'r');
        /* a place frees when a federation ends: the next listing accepts d */
        fa_agent_core_started(e.c, T0, fa_agent_core_find(e.c, 0, "a"), 1);
        fa_agent_core_exited(e.c, T0 + SEC, fa_agent_core_find(e.c, 0, "a"), 1);
        d.o.decision = "refused";
        list(&e, T0 + 10 * SEC, 0, xs, 4);
        p = find_act(&e, FA_AGENT_POST_DECISION, fa_agent_core_find(e.c, 0, "d"));
        assert_non_null(p);
        assert_true(p->accept);
        assert_non_null(find_act(&e, FA_AGENT_START, fa_agent_core_find(e.c, 0, "d")));
    }
    teardown_env(&e);

    /* an id that could not name a directory is not answered */
    setup_env(&e, agent_text, T0);
    {
        offer a;
        offer *xs[1] = {&a};
        Fedagg__FederationOffer *os[1] = {&a.o};
        size_t ignored = 0;
        make_offer(&a, "../etc", "vision", "torch", "notes");
        fa_agent_core_listed(e.c, T0, 0, os, 1, &ignored);
        assert_int_equal(ignored, 1);
        assert_int_equal(drain(&e), 0);
        assert_int_equal(fa_agent_core_find(e.c, 0, "../etc"), -1);
        (void)xs;
    }
    teardown_env(&e);
}

static void test_decisions_posted_once(void **state)
{
    env e;
    offer x;
    offer *xs[1] = {&x};
    int f;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&x, "f", "finance", "mlp", "clinics");
    list(&e, T0, 0, xs, 1);
    f = fa_agent_core_find(e.c, 0, "f");
    assert_non_null(find_act(&e, FA_AGENT_POST_DECISION, f));
    /* recorded centrally: not posted again */
    x.o.decision = "refused";
    list(&e, T0 + 10 * SEC, 0, xs, 1);
    assert_null(find_act(&e, FA_AGENT_POST_DECISION, f));
    /* the post failed: posted again at the next listing */
    fa_agent_core_decision_failed(e.c, f);
    list(&e, T0 + 20 * SEC, 0, xs, 1);
    assert_non_null(find_act(&e, FA_AGENT_POST_DECISION, f));
    /* the offer changed but the first rule that refuses it is the same: no post */
    x.o.trainer = "jax";
    list(&e, T0 + 30 * SEC, 0, xs, 1);
    assert_null(find_act(&e, FA_AGENT_POST_DECISION, f));
    /* another reason: posted with it */
    x.o.team = "vision";
    list(&e, T0 + 40 * SEC, 0, xs, 1);
    assert_non_null(strstr(find_act(&e, FA_AGENT_POST_DECISION, f)->reason, "jax"));
    /* a central record that lost our decision gets it again */
    x.o.trainer = "mlp";
    list(&e, T0 + 50 * SEC, 0, xs, 1);
    assert_true(find_act(&e, FA_AGENT_POST_DECISION, f)->accept);
    x.o.decision = "";
    list(&e, T0 + 60 * SEC, 0, xs, 1);
    assert_true(find_act(&e, FA_AGENT_POST_DECISION, f)->accept);
    teardown_env(&e);
}

static void test_restart_backoff(void **state)
{
    env e;
    offer x;
    offer *xs[1] = {&x};
    uint64_t t = T0;
    int f;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&x, "f", "vision", "torch", "notes");
    list(&e, t, 0, xs, 1);
    f = fa_agent_core_find(e.c, 0, "f");
    fa_agent_core_started(e.c, t, f, 1);
    /* failures: restarted after 1, 2, 4, 8 s */
    for (unsigned k = 0; k < 4; k++) {
        uint64_t wait = (1000ULL << k);
        fa_agent_core_exited(e.c, t, f, 0);
        assert_string_equal(fa_agent_core_fed_state(e.c, f), "restarting");
        assert_int_equal(fa_agent_core_running(e.c), 0);
        assert_int_equal(fa_agent_core_fed_failures(e.c, f), k + 1);
        fa_agent_core_tick(e.c, t + wait - 1);
        drain(&e);
        assert_null(find_act(&e, FA_AGENT_START, f));
        fa_agent_core_tick(e.c, t + wait);
        drain(&e);
        assert_non_null(find_act(&e, FA_AGENT_START, f));
        t += wait;
        fa_agent_core_started(e.c, t, f, 1);
    }
    /* a start that fails counts as a failure too: 16 s */
    fa_agent_core_exited(e.c, t, f, 0);
    fa_agent_core_tick(e.c, t + 16 * SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_START, f));
    fa_agent_core_started(e.c, t + 16 * SEC, f, 0);
    t += 16 * SEC;
    fa_agent_core_tick(e.c, t + 32 * SEC - 1);
    drain(&e);
    assert_null(find_act(&e, FA_AGENT_START, f));
    fa_agent_core_tick(e.c, t + 32 * SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_START, f));
    t += 32 * SEC;
    /* a worker that ran for 5 minutes before failing starts the back-off over */
    fa_agent_core_started(e.c, t, f, 1);
    t += 300 * SEC;
    fa_agent_core_exited(e.c, t, f, 0);
    assert_int_equal(fa_agent_core_fed_failures(e.c, f), 1);
    fa_agent_core_tick(e.c, t + SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_START, f));
    fa_agent_core_started(e.c, t + SEC, f, 1);
    /* one that ends by itself is not restarted, listed again or not */
    fa_agent_core_exited(e.c, t + 2 * SEC, f, 1);
    assert_string_equal(fa_agent_core_fed_state(e.c, f), "done");
    x.o.decision = "accepted";
    list(&e, t + 3 * SEC, 0, xs, 1);
    fa_agent_core_tick(e.c, t + 3600 * SEC);
    drain(&e);
    assert_null(find_act(&e, FA_AGENT_START, f));
    teardown_env(&e);
}

static void test_federation_goes(void **state)
{
    env e;
    offer a, b, c, d;
    offer *all[4] = {&a, &b, &c, &d}, *none[1];
    int fa, fb, fc, fd;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&a, "a", "vision", "torch", "notes");
    make_offer(&b, "b", "vision", "torch", "notes");
    make_offer(&c, "c", "vision", "torch", "notes");
    make_offer(&d, "d", "finance", "torch", "notes");
    list(&e, T0, 0, all, 4);
    fa = fa_agent_core_find(e.c, 0, "a");
    fb = fa_agent_core_find(e.c, 0, "b");
    fc = fa_agent_core_find(e.c, 0, "c");
    fd = fa_agent_core_find(e.c, 0, "d");
    fa_agent_core_started(e.c, T0, fa, 1);
    fa_agent_core_started(e.c, T0, fb, 1);
    fa_agent_core_started(e.c, T0, fc, 1);
    /* archived, stopped centrally, finished (its worker ends by itself) */
    a.o.state = "archived";
    b.o.state = "stopped";
    b.o.state_reason = "disk full under its store";
    c.o.state = "finished";
    d.o.decision = "refused";
    list(&e, T0 + 10 * SEC, 0, all, 4);
    assert_non_null(strstr(find_act(&e, FA_AGENT_STOP, fa)->reason, "archived"));
    assert_non_null(strstr(find_act(&e, FA_AGENT_STOP, fb)->reason, "disk full"));
    assert_null(find_act(&e, FA_AGENT_STOP, fc));
    assert_null(find_act(&e, FA_AGENT_POST_DECISION, -1));
    assert_string_equal(fa_agent_core_fed_state(e.c, fa), "stopping");
    /* stopping: an exit is not a failure, nothing restarts */
    fa_agent_core_exited(e.c, T0 + 11 * SEC, fa, 0);
    fa_agent_core_exited(e.c, T0 + 11 * SEC, fb, 0);
    assert_string_equal(fa_agent_core_fed_state(e.c, fa), "gone");
    fa_agent_core_exited(e.c, T0 + 12 * SEC, fc, 1);
    fa_agent_core_tick(e.c, T0 + 100 * SEC);
    drain(&e);
    assert_null(find_act(&e, FA_AGENT_START, -1));
    /* a federation no longer listed at all: stopped */
    a.o.state = "running";
    list(&e, T0 + 110 * SEC, 0, all, 1);
    assert_non_null(find_act(&e, FA_AGENT_START, fa));
    fa_agent_core_started(e.c, T0 + 110 * SEC, fa, 1);
    list(&e, T0 + 120 * SEC, 0, none, 0);
    assert_non_null(strstr(find_act(&e, FA_AGENT_STOP, fa)->reason, "no longer lists"));
    assert_null(find_act(&e, FA_AGENT_STOP, fd)); /* refused, no worker */
    teardown_env(&e);
}

/* Three federations on one device: granted in the order asked, and one
 * that asks again waits behind those already waiting. */
static void test_device_fifo(void **state)
{
    env e;
    offer a, b, c;
    offer *all[3] = {&a, &b, &c};
    char why[FA_AGENT_REASON_MAX];
    int f[3];

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&a, "a", "vision", "torch", "notes");
    make_offer(&b, "b", "vision", "torch", "notes");
    make_offer(&c, "c", "vision", "torch", "notes");
    list(&e, T0, 0, all, 3);
    for (int i = 0; i < 3; i++) {
        f[i] = fa_agent_core_find(e.c, 0, all[i]->info.federation_id);
        fa_agent_core_started(e.c, T0, f[i], 1);
    }
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0, f[0], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    /* again while holding: granted again */
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0, f[0], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0 + 1, f[1], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0 + 2, f[2], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    assert_int_equal(drain(&e), 0);
    fa_agent_core_device_release(e.c, T0 + 10 * SEC, f[0]);
    assert_int_equal(fa_agent_core_train_ms(e.c, f[0]), 10 * SEC);
    assert_int_equal(drain(&e), 1);
    assert_int_equal(e.acts[0].kind, FA_AGENT_GRANT);
    assert_int_equal(e.acts[0].fed, f[1]);
    /* a asks again: behind c */
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0 + 11 * SEC, f[0], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    fa_agent_core_device_release(e.c, T0 + 20 * SEC, f[1]);
    assert_int_equal(drain(&e), 1);
    assert_int_equal(e.acts[0].fed, f[2]);
    /* c's worker ends while holding it: a gets the device */
    fa_agent_core_exited(e.c, T0 + 25 * SEC, f[2], 1);
    assert_int_equal(drain(&e), 1);
    assert_int_equal(e.acts[0].kind, FA_AGENT_GRANT);
    assert_int_equal(e.acts[0].fed, f[0]);
    assert_int_equal(fa_agent_core_train_ms(e.c, f[2]), 0); /* no measurement */
    /* a waiter that disconnects leaves the queue */
    assert_int_equal(fa_agent_core_device_acquire(e.c, T0 + 26 * SEC, f[1], 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    fa_agent_core_detached(e.c, T0 + 27 * SEC, f[1]);
    fa_agent_core_device_release(e.c, T0 + 30 * SEC, f[0]);
    assert_int_equal(drain(&e), 0);
    /* federations on other devices never wait for this one */
    {
        offer m;
        offer *xs[1] = {&m};
        int fm;
        make_offer(&m, "m", "vision", "mlp", "clinics");
        list(&e, T0 + 31 * SEC, 1, xs, 1);
        fm = fa_agent_core_find(e.c, 1, "m");
        assert_int_equal(fa_agent_core_fed_device(e.c, fm), 0);
        assert_int_equal(
            fa_agent_core_device_acquire(e.c, T0 + 31 * SEC, f[0], 0, why, sizeof(why)),
            FA_AGENT_DEVICE_GRANTED);
        assert_int_equal(fa_agent_core_device_acquire(e.c, T0 + 31 * SEC, fm, 0, why, sizeof(why)),
                         FA_AGENT_DEVICE_GRANTED);
    }
    teardown_env(&e);
}

/* A round the queue would make miss its deadline is skipped at once; one
 * whose deadline passes while it waits is skipped then; nothing is skipped
 * on an estimate that was never measured. */
static void test_deadline_skip(void **state)
{
    env e;
    offer a, b;
    offer *all[2] = {&a, &b};
    char why[FA_AGENT_REASON_MAX];
    uint64_t t = T0;
    int fa, fb;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&a, "a", "vision", "torch", "notes");
    make_offer(&b, "b", "vision", "torch", "notes");
    list(&e, t, 0, all, 2);
    fa = fa_agent_core_find(e.c, 0, "a");
    fb = fa_agent_core_find(e.c, 0, "b");
    /* nothing measured: b waits even with a deadline close by */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fa, 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, t + 5 * SEC, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    /* its deadline passes while it waits: skipped */
    fa_agent_core_tick(e.c, t + 5 * SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_SKIP, fb));
    assert_non_null(strstr(find_act(&e, FA_AGENT_SKIP, fb)->reason, "deadline passed"));
    /* a trains 30 s: measured */
    fa_agent_core_device_release(e.c, t + 30 * SEC, fa);
    assert_int_equal(drain(&e), 0); /* b is no longer waiting */
    t += 30 * SEC;
    /* b trains 10 s */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    fa_agent_core_device_release(e.c, t + 10 * SEC, fb);
    t += 10 * SEC;
    /* a holds it (30 s expected); b's deadline in 35 s: 30 + 10 > 35, skipped at once */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fa, 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, t + 35 * SEC, why, sizeof(why)),
                     FA_AGENT_DEVICE_SKIP);
    assert_non_null(strstr(why, "skipped rather than trained late"));
    /* with 45 s it fits: it waits, and gets the device when a is done */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, t + 45 * SEC, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    fa_agent_core_tick(e.c, t + 35 * SEC);
    drain(&e);
    assert_null(find_act(&e, FA_AGENT_SKIP, fb));
    /* a overruns: at 36 s b could no longer finish in time, skipped while waiting */
    fa_agent_core_tick(e.c, t + 36 * SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_SKIP, fb));
    /* b asks again with 53 s left; a is done 3 s later: b granted */
    assert_int_equal(
        fa_agent_core_device_acquire(e.c, t + 37 * SEC, fb, t + 90 * SEC, why, sizeof(why)),
        FA_AGENT_DEVICE_QUEUED);
    fa_agent_core_device_release(e.c, t + 40 * SEC, fa);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_GRANT, fb));
    fa_agent_core_device_release(e.c, t + 50 * SEC, fb);
    t += 50 * SEC;
    /* the device is free but the round cannot be trained in time: skipped */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, t + 5 * SEC, why, sizeof(why)),
                     FA_AGENT_DEVICE_SKIP);
    /* a queued waiter whose turn comes too late is skipped when the device frees */
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fa, 0, why, sizeof(why)),
                     FA_AGENT_DEVICE_GRANTED);
    assert_int_equal(fa_agent_core_device_acquire(e.c, t, fb, t + 100 * SEC, why, sizeof(why)),
                     FA_AGENT_DEVICE_QUEUED);
    fa_agent_core_device_release(e.c, t + 95 * SEC, fa); /* 95 + 10 > 100 */
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_SKIP, fb));
    assert_null(find_act(&e, FA_AGENT_GRANT, fb));
    teardown_env(&e);
}

static void test_list_backoff(void **state)
{
    env e;
    offer *none[1];
    uint64_t t = T0;

    (void)state;
    setup_env(&e, agent_text, T0);
    fa_agent_core_tick(e.c, t);
    drain(&e);
    /* service 0 (poll 10 s) fails: 1, 2, 4, 8, then 10 s (its interval) */
    for (unsigned k = 0; k < 6; k++) {
        uint64_t wait = k < 4 ? (1000ULL << k) : 10 * SEC;
        fa_agent_core_list_failed(e.c, t, 0);
        fa_agent_core_tick(e.c, t + wait - 1);
        drain(&e);
        assert_null(find_act(&e, FA_AGENT_LIST, -1));
        fa_agent_core_tick(e.c, t + wait);
        drain(&e);
        assert_non_null(find_act(&e, FA_AGENT_LIST, -1));
        assert_int_equal(find_act(&e, FA_AGENT_LIST, -1)->service, 0);
        t += wait;
    }
    /* an answer: the poll interval again */
    list(&e, t, 0, none, 0);
    fa_agent_core_tick(e.c, t + 10 * SEC - 1);
    drain(&e);
    assert_null(find_act(&e, FA_AGENT_LIST, -1));
    fa_agent_core_tick(e.c, t + 10 * SEC);
    drain(&e);
    assert_non_null(find_act(&e, FA_AGENT_LIST, -1));
    teardown_env(&e);
}

static fa_privacy_spend dpsgd(void)
{
    fa_privacy_spend s;
    memset(&s, 0, sizeof(s));
    strcpy(s.mechanism, FA_PRIVACY_MECHANISM_DPSGD);
    s.noise_multiplier = 1.1;
    s.clip = 1.0;
    s.sampling_rate = 0.01;
    s.steps = 500;
    return s;
}

/* One dataset, two federations, one budget that fits two such rounds: the
 * third is refused in whichever federation asks. */
static void test_budget_across_federations(void **state)
{
    env e;
    offer a, b;
    offer *all[2] = {&a, &b};
    fa_privacy_budget *bud;
    fa_agent_privacy_req q;
    fa_agent_privacy_res r;
    fa_error err;
    int fa, fb, fn;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&a, "a", "vision", "mlp", "clinics");
    make_offer(&b, "b", "vision", "torch", "clinics");
    list(&e, T0, 0, all, 2);
    fa = fa_agent_core_find(e.c, 0, "a");
    fb = fa_agent_core_find(e.c, 0, "b");
    assert_int_equal(fa_privacy_budget_new(&bud, "dataset:clinics", "eu-west", 1.8, 1e-5, &err), 0);
    fa_agent_core_set_accountant(e.c, 0, bud);

    memset(&q, 0, sizeof(q));
    q.op = FA_AGENT_PRIVACY_PREVIEW;
    q.have_spend = 1;
    q.spend = dpsgd();
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), 0);
    assert_false(r.have_last);
    assert_true(r.eps_round > 1.3 && r.eps_round < 1.33);
    /* a charges round 1 */
    q.op = FA_AGENT_PRIVACY_CHARGE;
    q.round = 1;
    q.version = 0;
    q.attempt = 0;
    q.digest[0] = 1;
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), 0);
    assert_true(r.charged && r.save && r.ds == 0);
    assert_string_equal(r.st.federation_id, "a");
    assert_int_equal(r.st.rounds_accounted, 1);
    /* not saved yet: even a repeat asks for the save */
    fa_agent_core_privacy_saved(e.c, 0, FA_ERR_IO);
    q.attempt = 1;
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), 0);
    assert_true(!r.charged && r.save);
    assert_int_equal(r.st.attempt, 1);
    fa_agent_core_privacy_saved(e.c, 0, 0);
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), 0);
    assert_false(r.save);
    /* b charges its round 1 from the same budget */
    q.attempt = 0;
    q.digest[0] = 2;
    assert_int_equal(fa_agent_core_privacy(e.c, fb, &q, &r), 0);
    assert_true(r.charged);
    assert_int_equal(r.rounds, 2);
    assert_true(r.spent > 1.7 && r.spent < 1.8);
    fa_agent_core_privacy_saved(e.c, 0, 0);
    /* the third round is refused whichever asks: a's preview, b's charge */
    q.op = FA_AGENT_PRIVACY_PREVIEW;
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), FA_ERR_RANGE);
    assert_non_null(strstr(r.msg, "dataset 'clinics': privacy budget exhausted"));
    q.op = FA_AGENT_PRIVACY_CHARGE;
    q.round = 2;
    q.version = 1;
    q.digest[0] = 3;
    assert_int_equal(fa_agent_core_privacy(e.c, fb, &q, &r), FA_ERR_RANGE);
    assert_false(r.save);
    assert_int_equal(r.rounds, 2);
    /* a preview without a spend uses the federation's last one */
    q.op = FA_AGENT_PRIVACY_PREVIEW;
    q.have_spend = 0;
    assert_int_equal(fa_agent_core_privacy(e.c, fb, &q, &r), FA_ERR_RANGE);
    assert_true(r.have_last && r.last.round == 1);
    /* b's statement of its round 1, attempt 4 (a restarted worker) */
    q.op = FA_AGENT_PRIVACY_STATEMENT;
    q.round = 1;
    q.attempt = 4;
    assert_int_equal(fa_agent_core_privacy(e.c, fb, &q, &r), 0);
    assert_string_equal(r.st.federation_id, "b");
    assert_int_equal(r.st.attempt, 4);
    /* a spend of another mechanism on this budget: refused */
    q.op = FA_AGENT_PRIVACY_CHARGE;
    q.round = 3;
    strcpy(q.spend.mechanism, FA_PRIVACY_MECHANISM_DDG);
    assert_int_equal(fa_agent_core_privacy(e.c, fa, &q, &r), FA_ERR_INVAL);
    assert_non_null(strstr(r.msg, "one mechanism"));
    /* a federation on a dataset without a budget */
    {
        offer n;
        offer *xs[1] = {&n};
        make_offer(&n, "n", "vision", "torch", "notes");
        list(&e, T0, 1, xs, 1);
        fn = fa_agent_core_find(e.c, 1, "n");
        assert_int_equal(fa_agent_core_privacy(e.c, fn, &q, &r), FA_ERR_NOTFOUND);
    }
    fa_privacy_budget_del(bud);
    teardown_env(&e);
}

/* A restarted agent at capacity keeps the federations it ran (recorded
 * "accepted" centrally) whatever the order of the listing. */
static void test_restart_keeps_accepted(void **state)
{
    char text[4096];
    env e;
    offer a, b;
    offer *all[2] = {&a, &b};
    const fa_agent_action *p;

    (void)state;
    snprintf(text, sizeof(text), "%s", agent_text);
    /* the same policy with one place */
    *strstr(text, "  max_federations: 3") = '\0';
    strcat(text, "  max_federations: 1\n  devices: [\"gpu0\", \"gpu1\"]\n}\n");
    setup_env(&e, text, T0);
    make_offer(&a, "a", "vision", "torch", "notes");
    make_offer(&b, "b", "vision", "torch", "notes");
    b.o.decision = "accepted";
    list(&e, T0, 0, all, 2);
    p = find_act(&e, FA_AGENT_POST_DECISION, fa_agent_core_find(e.c, 0, "a"));
    assert_false(p->accept);
    assert_non_null(find_act(&e, FA_AGENT_START, fa_agent_core_find(e.c, 0, "b")));
    assert_null(find_act(&e, FA_AGENT_START, fa_agent_core_find(e.c, 0, "a")));
    teardown_env(&e);
}

static void test_shutdown(void **state)
{
    env e;
    offer a, b;
    offer *all[2] = {&a, &b};
    int fa, fb;

    (void)state;
    setup_env(&e, agent_text, T0);
    make_offer(&a, "a", "vision", "torch", "notes");
    make_offer(&b, "b", "vision", "torch", "notes");
    list(&e, T0, 0, all, 2);
    fa = fa_agent_core_find(e.c, 0, "a");
    fb = fa_agent_core_find(e.c, 0, "b");
    fa_agent_core_started(e.c, T0, fa, 1);
    fa_agent_core_started(e.c, T0, fb, 0); /* b waits for its restart */
    fa_agent_core_shutdown(e.c);
    drain(&e);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.acts[0].kind, FA_AGENT_STOP);
    assert_int_equal(e.acts[0].fed, fa);
    fa_agent_core_exited(e.c, T0 + SEC, fa, 0);
    assert_int_equal(fa_agent_core_running(e.c), 0);
    fa_agent_core_tick(e.c, T0 + 3600 * SEC);
    assert_int_equal(drain(&e), 0);
    assert_int_equal(fa_agent_core_next_timer(e.c), UINT64_MAX);
    teardown_env(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_and_start),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_decisions_posted_once),
        cmocka_unit_test(test_restart_backoff),
        cmocka_unit_test(test_federation_goes),
        cmocka_unit_test(test_device_fifo),
        cmocka_unit_test(test_deadline_skip),
        cmocka_unit_test(test_list_backoff),
        cmocka_unit_test(test_budget_across_federations),
        cmocka_unit_test(test_restart_keeps_accepted),
        cmocka_unit_test(test_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
