/* libFuzzer target: a service's listing of the federations it offers a
 * region (GET /v1/federations, a FederationList from the network) through
 * the region agent's decisions (worker/agent_core.h).  Whatever the bytes,
 * every decision names a federation the core knows, every refusal has its
 * reason, a worker is started only for an accepted offer, and no more are
 * accepted than the policy's max_federations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/config_check.h"
#include "worker/agent_core.h"

static const char agent_text[] =
    "region_id: \"eu-west\"\n"
    "tls { cert_file: \"c\" key_file: \"k\" ca_file: \"ca\" } identity_key_file: \"id\"\n"
    "state_dir: \"state\"\n"
    "regions { id: \"eu-west\" identity_public_key: "
    "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\" }\n"
    "regions { id: \"us-east\" identity_public_key: "
    "\"mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI=\" }\n"
    "services { name: \"central\" address: \"agg:4433\" public_key: "
    "\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\" }\n"
    "policy {\n"
    "  datasets { name: \"fmnist\" data { train_images: \"a\" train_labels: \"b\" }\n"
    "             privacy { target_epsilon: 3 } }\n"
    "  datasets { name: \"notes\" path: \"/n\" }\n"
    "  trainers { name: \"mlp\" builtin { } max_model_bytes: 100000 }\n"
    "  trainers { name: \"torch\" external { command: \"t\" } }\n"
    "  accept_teams: \"vision\" accept_federations: \"guest\"\n"
    "  max_model_bytes: 1000000 max_federations: 2\n"
    "}\n";

static Fedagg__WorkerConfig *config(void)
{
    static Fedagg__WorkerConfig *cfg;
    fa_error err;
    if (!cfg &&
        fa_config_load_text(FA_CONFIG_WORKER, agent_text, sizeof(agent_text) - 1, "agent", "/",
                            FA_CONFIG_NO_FILES, (ProtobufCMessage **)&cfg, NULL, &err) != 0)
        abort();
    return cfg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Fedagg__WorkerConfig *cfg = config();
    Fedagg__FederationList *l = fedagg__federation_list__unpack(NULL, size, data);
    fa_agent_core *c = NULL;
    fa_agent_action a;
    size_t accepted = 0;
    fa_error err;

    if (!l)
        return 0;
    if (fa_agent_core_new(&c, cfg, 1000, &err) != 0)
        abort();
    for (int pass = 0; pass < 2; pass++) {
        fa_agent_core_tick(c, 1000 + (uint64_t)pass * 60000);
        fa_agent_core_listed(c, 1000 + (uint64_t)pass * 60000, 0, l->federations, l->n_federations,
                             NULL);
        while (fa_agent_core_pop(c, &a)) {
            if (a.kind == FA_AGENT_LIST)
                continue;
            if (a.fed < 0 || !fa_agent_core_fed_id(c, a.fed)[0])
                abort();
            if (a.kind == FA_AGENT_POST_DECISION && !a.accept && !a.reason[0])
                abort();
            if (a.kind == FA_AGENT_START) {
                if (strcmp(fa_agent_core_fed_state(c, a.fed), "running") != 0 ||
                    fa_agent_core_fed_trainer(c, a.fed) < 0 ||
                    fa_agent_core_fed_dataset(c, a.fed) < 0)
                    abort();
                fa_agent_core_started(c, 1000, a.fed, 1);
                accepted++;
            }
        }
        if (fa_agent_core_running(c) > cfg->policy->max_federations)
            abort();
    }
    (void)accepted;
    fa_agent_core_del(c);
    fedagg__federation_list__free_unpacked(l, NULL);
    return 0;
}
