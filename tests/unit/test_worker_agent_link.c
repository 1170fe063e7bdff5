/* Unit tests of a federation worker's link to its region agent
 * (worker/agent_link.h) against a scripted agent in a thread: a socket
 * path longer than sun_path, the hello, the device granted, skipped with
 * its reason, and given up on a signal (the worker leaves the queue),
 * answers to an older request dropped, a privacy answer with its
 * statement, and what a broken or hostile agent end gives (closed,
 * silent, undecodable). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/agent_link.h"

typedef struct agent_script {
    int listen_fd;
    int kinds[16]; /* the requests the agent saw, in order */
    int n;
    uint64_t released_trained; /* RELEASE requests with trained set */
} agent_script;

static volatile sig_atomic_t cancel_flag;

static void send_reply(int fd, Fedagg__AgentReply *r)
{
    fa_error e;
    assert_int_equal(fa_agent_link_send(fd, &r->base, &e), 0);
}

/* The agent: answers hello, then three ACQUIREs (an old seq then grant;
 * skip; none until the worker gives up), the RELEASEs, one PRIVACY. */
static void *agent_main(void *arg)
{
    agent_script *s = arg;
    int fd = accept(s->listen_fd, NULL, NULL);
    int acquires = 0;

    for (;;) {
        ProtobufCMessage *m = NULL;
        Fedagg__AgentReply r = FEDAGG__AGENT_REPLY__INIT;
        Fedagg__AgentRequest *q;
        fa_error e;
        if (fa_agent_link_recv(fd, &fedagg__agent_request__descriptor, 5000, &m, &e) != 0)
            break;
        q = (Fedagg__AgentRequest *)m;
        if (s->n < 16)
            s->kinds[s->n++] = (int)q->kind;
        r.seq = q->seq;
        switch (q->kind) {
        case FEDAGG__AGENT_REQUEST__KIND__HELLO:
            if (strcmp(q->federation, "fed-a") != 0 || strcmp(q->service, "central") != 0)
                r.code = FA_ERR_INVAL;
            send_reply(fd, &r);
            break;
        case FEDAGG__AGENT_REQUEST__KIND__ACQUIRE:
            acquires++;
            if (acquires == 1) {
                Fedagg__AgentReply old = FEDAGG__AGENT_REPLY__INIT;
                old.seq = q->seq - 1; /* an answer to a request given up: dropped */
                old.granted = 0;
                old.message = "stale";
                send_reply(fd, &old);
                r.granted = 1;
                send_reply(fd, &r);
            } else if (acquires == 2) {
                r.granted = 0;
                r.message = "device 'local': the round is skipped rather than trained late";
                send_reply(fd, &r);
            } else {
                cancel_flag = 1; /* no answer: the worker gives up its place */
            }
            break;
        case FEDAGG__AGENT_REQUEST__KIND__RELEASE:
            s->released_trained += q->trained;
            send_reply(fd, &r);
            break;
        default: /* PRIVACY */ {
            Fedagg__PrivacyStatement st = FEDAGG__PRIVACY_STATEMENT__INIT;
            Fedagg__AgentRelease last = FEDAGG__AGENT_RELEASE__INIT;
            Fedagg__AgentSpend sp;
            fa_privacy_spend in;
            fa_agent_link_spend_from_wire(q->spend, &in);
            assert_string_equal(in.mechanism, "dp-sgd");
            assert_int_equal(in.steps, 500);
            assert_int_equal(q->digest.len, 32);
            st.round = q->round;
            st.attempt = q->attempt;
            st.mechanism = "dp-sgd";
            st.epsilon_total = 1.5;
            st.accountant = "rdp-sgm/tight-conversion";
            st.unit = "example";
            fa_agent_link_spend_to_wire(&in, &sp);
            last.round = q->round;
            last.version = q->version;
            last.digest = q->digest;
            last.spend = &sp;
            last.epsilon_total = 1.5;
            r.charged = 1;
            r.epsilon_spent = 1.5;
            r.budget_epsilon = 3;
            r.rounds = 2;
            r.last = &last;
            r.statement = &st;
            r.dataset = "fmnist";
            send_reply(fd, &r);
            break;
        }
        }
        protobuf_c_message_free_unpacked(m, NULL);
    }
    close(fd);
    return NULL;
}

/* A listening socket at a path longer than sun_path holds. */
static int listen_long(char *dir, size_t n, char *path, size_t pn)
{
    struct sockaddr_un sa;
    socklen_t len;
    fa_error e;
    int fd, dirfd;
    char sub[512];

    snprintf(dir, n, "/tmp/fa-agent-link-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/%0100d", dir, 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(path, pn, "%s/%s", sub, FA_AGENT_SOCKET_FILE);
    assert_true(strlen(path) >= sizeof(sa.sun_path));
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(fa_agent_link_addr(path, &sa, &len, &dirfd, &e), 0);
    assert_true(dirfd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    close(dirfd);
    assert_int_equal(listen(fd, 4), 0);
    return fd;
}

static void cleanup(const char *dir, const char *path)
{
    char sub[512];
    unlink(path);
    snprintf(sub, sizeof(sub), "%s/%0100d", dir, 0);
    rmdir(sub);
    rmdir(dir);
}

static void test_link(void **state)
{
    agent_script s;
    pthread_t t;
    fa_agent_link *l = NULL;
    fa_agent_privacy_req q;
    fa_agent_privacy_res r;
    char dir[64], path[700], why[256];
    fa_error e;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.listen_fd = listen_long(dir, sizeof(dir), path, sizeof(path));
    assert_int_equal(pthread_create(&t, NULL, agent_main, &s), 0);
    assert_int_equal(fa_agent_link_open(&l, path, "central", "fed-a", &e), 0);
    /* granted (the stale answer before it dropped), then released after training */
    assert_int_equal(fa_agent_link_acquire(l, 0, &cancel_flag, why, sizeof(why), &e), 0);
    assert_int_equal(fa_agent_link_release(l, 1, &e), 0);
    /* skipped, with the agent's reason */
    assert_int_equal(fa_agent_link_acquire(l, 123, &cancel_flag, why, sizeof(why), &e),
                     FA_ERR_RANGE);
    assert_non_null(strstr(why, "skipped rather than trained late"));
    /* a signal while waiting: the place is given up (a RELEASE, not trained) */
    assert_int_equal(fa_agent_link_acquire(l, 0, &cancel_flag, why, sizeof(why), &e),
                     FA_ERR_CANCELLED);
    cancel_flag = 0;
    /* a charge: the statement and this federation's last release come back */
    memset(&q, 0, sizeof(q));
    q.op = FA_AGENT_PRIVACY_CHARGE;
    strcpy(q.spend.mechanism, "dp-sgd");
    q.spend.noise_multiplier = 1.1;
    q.spend.clip = 1;
    q.spend.sampling_rate = 0.01;
    q.spend.steps = 500;
    q.round = 4;
    q.attempt = 2;
    q.version = 3;
    memset(q.digest, 7, 32);
    assert_int_equal(fa_agent_link_privacy(l, &q, &r, &e), 0);
    assert_true(r.charged && r.have_last);
    assert_int_equal(r.last.round, 4);
    assert_int_equal(r.last.version, 3);
    assert_int_equal(r.last.digest[31], 7);
    assert_int_equal(r.last.spend.steps, 500);
    assert_true(r.spent == 1.5 && r.budget == 3 && r.rounds == 2);
    assert_int_equal(r.st.attempt, 2);
    assert_string_equal(r.st.accountant, "rdp-sgm/tight-conversion");
    fa_agent_link_del(l);
    pthread_join(t, NULL);
    assert_int_equal(s.kinds[0], FEDAGG__AGENT_REQUEST__KIND__HELLO);
    assert_int_equal(s.released_trained, 1);
    /* the RELEASE of the given-up place came right after its ACQUIRE */
    assert_int_equal(s.kinds[4], FEDAGG__AGENT_REQUEST__KIND__ACQUIRE);
    assert_int_equal(s.kinds[5], FEDAGG__AGENT_REQUEST__KIND__RELEASE);
    close(s.listen_fd);
    cleanup(dir, path);
}

/* A hello the agent refuses, no agent at all, and a broken end. */
static void test_refused_and_broken(void **state)
{
    agent_script s;
    pthread_t t;
    fa_agent_link *l = NULL;
    ProtobufCMessage *m = NULL;
    char dir[64], path[700];
    int sv[2];
    fa_error e;

    (void)state;
    memset(&s, 0, sizeof(s));
    s.listen_fd = listen_long(dir, sizeof(dir), path, sizeof(path));
    assert_int_equal(pthread_create(&t, NULL, agent_main, &s), 0);
    assert_int_equal(fa_agent_link_open(&l, path, "central", "fed-z", &e), FA_ERR_INVAL);
    assert_null(l);
    assert_non_null(strstr(e.msg, "the region agent"));
    pthread_join(t, NULL);
    close(s.listen_fd);
    cleanup(dir, path);
    /* nobody listening */
    assert_int_equal(fa_agent_link_open(&l, path, "central", "fed-a", &e), FA_ERR_IO);
    assert_non_null(strstr(e.msg, "cannot reach the region agent"));

    /* undecodable, closed, silent */
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
    assert_int_equal(write(sv[0], "\xff\xff\xff", 3), 3);
    assert_int_equal(fa_agent_link_recv(sv[1], &fedagg__agent_reply__descriptor, 1000, &m, &e),
                     FA_ERR_PROTOCOL);
    assert_null(m);
    assert_int_equal(fa_agent_link_recv(sv[1], &fedagg__agent_reply__descriptor, 10, &m, &e),
                     FA_ERR_TIMEOUT);
    close(sv[0]);
    assert_int_equal(fa_agent_link_recv(sv[1], &fedagg__agent_reply__descriptor, 1000, &m, &e),
                     FA_ERR_IO);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_link),
        cmocka_unit_test(test_refused_and_broken),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
