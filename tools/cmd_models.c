/* `fedagg models`: the model versions kept (GET /v1/admin/models), and the
 * governance of released models (aggregator/fed_gov.h): release a promoted
 * version to a channel, roll back to the last promoted version, show the
 * gate's decisions and the channels. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/fa_log.h"
#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_models_help[] =
    "the model versions kept; release a promoted version to a channel, roll back, show the "
    "gate's decisions (operators)";

static const char usage[] =
    "usage: fedagg models [--json] [--from FILE] (--config FILE | --aggregator HOST:PORT\n"
    "                     --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "       fedagg models release VERSION --channel NAME [connection]\n"
    "       fedagg models rollback [connection]\n"
    "       fedagg models governance [--json] [--from FILE] [connection]\n"
    "\n"
    "Lists the model versions the aggregator keeps: the round that made each, its\n"
    "size, whether float32 master weights are kept beside it, and its SHA-256 (the\n"
    "digest the audit log records and GET /v1/models/{v} announces).\n"
    "\n"
    "release     points the release channel NAME (e.g. production; [a-z0-9._-]) at\n"
    "            VERSION, a version the promotion gate promoted; recorded in the\n"
    "            signed audit log with your operator name.  Serving systems read a\n"
    "            channel with `fedagg model fetch --channel NAME`.\n"
    "rollback    commits the last promoted version again as the current one (with its\n"
    "            optimizer state) and abandons the round in flight; recorded with\n"
    "            your name.  After a rejection that paused the federation: rollback,\n"
    "            then `fedagg resume`.\n"
    "governance  the promotion policy, the promoted versions and their figures, each\n"
    "            recent version's decision, the channels and who moved them.\n"
    "\n"
    "  --json       print the aggregator's JSON document as it is (for scripts)\n"
    "  --from FILE  show a document saved with --json instead of asking the\n"
    "               aggregator (- reads stdin)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

static int render(const char *json, const fa_admin_opts *o)
{
    (void)o;
    return fa_admin_render_models(stdout, "models", json);
}

static int render_governance(const char *json, const fa_admin_opts *o)
{
    json_t *g = json_loads(json, 0, NULL), *pol, *x;
    size_t i;

    (void)o;
    if (!json_is_object(g)) {
        fprintf(stderr, "fedagg models governance: the aggregator's document is not JSON\n");
        json_decref(g);
        return 1;
    }
    pol = json_object_get(g, "policy");
    if (json_is_object(pol))
        printf("gate: %s (%s), %s is better, tolerance %g, baseline %s, at least %lld regions, "
               "on regression: %s\n",
               json_string_value(json_object_get(pol, "metric")),
               json_string_value(json_object_get(pol, "source")),
               json_is_true(json_object_get(pol, "higher_is_better")) ? "higher" : "lower",
               json_number_value(json_object_get(pol, "tolerance")),
               json_string_value(json_object_get(pol, "baseline")),
               (long long)json_integer_value(json_object_get(pol, "min_regions")),
               json_string_value(json_object_get(pol, "on_regression")));
    else
        printf("gate: off (no promotion policy)\n");
    printf("promotions %lld, rejections %lld (%lld in a row), expired %lld, rollbacks %lld%s\n",
           (long long)json_integer_value(json_object_get(g, "promotions")),
           (long long)json_integer_value(json_object_get(g, "rejections")),
           (long long)json_integer_value(json_object_get(g, "rejections_in_a_row")),
           (long long)json_integer_value(json_object_get(g, "expired")),
           (long long)json_integer_value(json_object_get(g, "rollbacks")),
           json_is_true(json_object_get(g, "paused_by_gate"))
               ? "; PAUSED by the gate after a rejection"
               : "");
    printf("\nCHANNEL          VERSION  RECORD  MOVED BY\n");
    json_array_foreach(json_object_get(g, "channels"), i, x)
    {
        const char *by = json_string_value(json_object_get(x, "by"));
        printf("%-16s %7lld  %6lld  %s\n", json_string_value(json_object_get(x, "channel")),
               (long long)json_integer_value(json_object_get(x, "version")),
               (long long)json_integer_value(json_object_get(x, "record")), by ? by : "the gate");
    }
    printf("\nVERSION  MADE BY   DECISION   FIGURE    RECORD\n");
    json_array_foreach(json_object_get(g, "versions"), i, x)
    {
        json_t *v = json_object_get(x, "value"), *rec = json_object_get(x, "record");
        char fig[32] = "-", recs[24] = "-";
        if (json_is_number(v))
            snprintf(fig, sizeof(fig), "%.4f", json_number_value(v));
        if (json_is_integer(rec))
            snprintf(recs, sizeof(recs), "%lld", (long long)json_integer_value(rec));
        printf("%7lld  %-8s  %-9s  %-8s  %s\n",
               (long long)json_integer_value(json_object_get(x, "version")),
               json_string_value(json_object_get(x, "made")),
               json_string_value(json_object_get(x, "outcome")), fig, recs);
    }
    json_decref(g);
    return 0;
}

/* fedagg models release VERSION --channel NAME */
static int release(int argc, char **argv)
{
    static const char *const extra[] = {"--channel", NULL};
    fa_admin_opts o = {.extra = extra};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    char action[160], *json = NULL;
    int rc = fa_admin_parse(argc, argv, usage, 1, 0, &o), status = 1;
    const char *ch;

    if (rc >= 0)
        return rc;
    ch = o.extra_val[0];
    if (o.npos != 1 || !ch || strspn(o.pos[0], "0123456789") != strlen(o.pos[0]) || !o.pos[0][0]) {
        fprintf(stderr, "fedagg models release: give a VERSION and --channel NAME\n\n%s", usage);
        fa_admin_opts_free(&o);
        return 2;
    }
    if (strspn(ch, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(ch) || !ch[0] ||
        strlen(ch) > 63) {
        fprintf(stderr, "fedagg models release: '%s' is not a channel name ([a-z0-9._-])\n", ch);
        fa_admin_opts_free(&o);
        return 2;
    }
    snprintf(action, sizeof(action), "release?version=%s&channel=%s", o.pos[0], ch);
    fa_log_set_level(FA_LOG_ERROR);
    if ((rc = fa_admin_client_new(&c, &o, &err)) == 0)
        rc = fa_admin_post(c, action, NULL, &json, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg models release: %s\n", fa_error_msg(&err, rc));
    } else {
        json_t *a = json_loads(json, 0, NULL);
        const char *msg = a ? json_string_value(json_object_get(a, "message")) : NULL;
        printf("%s\n", o.json || !msg ? json : msg);
        json_decref(a);
        status = 0;
    }
    free(json);
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
}

int fa_cmd_models(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "release"))
        return release(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "rollback"))
        return fa_admin_act(argc - 1, argv + 1, "rollback", usage, 0);
    if (argc >= 2 && !strcmp(argv[1], "governance"))
        return fa_admin_show(argc - 1, argv + 1, "governance", usage, NULL, render_governance);
    return fa_admin_show(argc, argv, "models", usage, NULL, render);
}
