/* Allocation failures under the text-format config parser
 * (proto/config_check.h, proto/textformat.h): every allocation failing in
 * turn (support/fail_alloc.h) must give FA_ERR_NOMEM with a message, free
 * everything, and never crash, for a config that loads and for ones that
 * are refused (with every problem collected in an fa_diags). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "proto/config_check.h"
#include "proto/diags.h"
#include "tests/unit/support/fail_alloc.h"

struct input {
    fa_config_kind kind;
    const char *text;
    size_t len;
    fa_failalloc_ref ref;
};

static int load(struct input *in, fa_error *err)
{
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    int rc = fa_diags_new(&d);

    if (rc != 0)
        return fa_errorf(err, rc, "test: no diags");
    rc = fa_config_load_text(in->kind, in->text, in->len, "c.textproto", "/etc/fedagg",
                             FA_CONFIG_NO_FILES, &m, d, err);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(d);
    return rc;
}

static int loads(void *arg, fa_error *err)
{
    return load(arg, err);
}

static int refused(void *arg, fa_error *err)
{
    struct input *in = arg;
    return fa_failalloc_same(&in->ref, load(in, err), err);
}

static void test_examples(void **state)
{
    static const struct {
        const char *file;
        fa_config_kind kind;
    } ex[] = {{"aggregator.textproto", FA_CONFIG_AGGREGATOR},
              {"worker.textproto", FA_CONFIG_WORKER},
              {"worker-gpu.textproto", FA_CONFIG_WORKER}};
    const char *src = getenv("FA_SRC");
    (void)state;

    for (size_t i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
        struct input in = {ex[i].kind, NULL, 0, {0}};
        uint8_t *text = NULL;
        char path[4096];
        fa_error err;
        snprintf(path, sizeof(path), "%s/deploy/examples/%s", src ? src : "..", ex[i].file);
        if (fa_file_read_all(path, &text, &in.len, 1 << 20, &err) != 0)
            fail_msg("%s", err.msg);
        in.text = (const char *)text;
        fa_failalloc_check(ex[i].file, loads, &in, 0);
        free(text);
    }
}

static void test_refused(void **state)
{
    static const char *const bad[] = {
        /* syntax: an unknown field (with its nearest name), a bad list */
        "region_id: \"eu-west\"\nfederation_idd: \"f\"\ntrainer { kind: [1, }\n",
        /* meaning: several problems collected */
        "region_id: \"\"\naggregator: \"\"\nstate_dir: \"\"\n",
        /* string escapes and nesting */
        "region_id: \"eu-\\x77est\\n\"\nquic { idle_timeout_ms: -1 }\nregions { id: \"a\" }\n",
    };
    (void)state;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct input in = {FA_CONFIG_WORKER, bad[i], strlen(bad[i]), {0}};
        char what[32];
        snprintf(what, sizeof(what), "refused config %zu", i);
        fa_failalloc_check(what, refused, &in, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_examples),
                                       cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
