/* `fedagg federation`: the federations of an aggregation service
 * (aggregator/service_api.h, docs/service.md): create one from a file,
 * list them, show one, and its lifecycle. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_file.h"
#include "common/fa_log.h"
#include "common/fa_time.h"
#include "aggregator/dashboard.h"
#include "proto/config_check.h"
#include "tools/admin_client.h"

const char fa_cmd_federation_help[] =
    "the federations of a service: create, list, show, pause, resume, abort, archive (operators)";

static const char usage[] =
    "usage: fedagg federation create FILE   [--json] (--config FILE | --aggregator ...)\n"
    "       fedagg federation list          [--json] ...\n"
    "       fedagg federation show ID       [--json] ...\n"
    "       fedagg federation pause|resume|abort|archive ID [--json] ...\n"
    "\n"
    "The federations of an aggregation service (docs/service.md), as your\n"
    "operator certificate may see them (your teams').\n"
    "\n"
    "  create FILE  create a federation from a federation file (FederationConfig;\n"
    "               `fedagg config print --type federation --defaults` shows one).\n"
    "               It is checked here first (syntax and meaning, as `fedagg config\n"
    "               check --type federation --no-files` does), then by the service,\n"
    "               which reads the paths it names on its machine, relative to its\n"
    "               service.dir.  Every problem is printed as FILE:LINE:COLUMN.\n"
    "  list         the federations: id, team, state, round, model version\n"
    "  show ID      one federation: state and why, its regions and their\n"
    "               decisions, its latest rounds\n"
    "  pause ID     no new round opens after the one in flight\n"
    "  resume ID    rounds open again (a federation a fault stopped is reopened)\n"
    "  abort ID     the federation ends now: no round opens again; its models and\n"
    "               audit log stay readable\n"
    "  archive ID   a finished or aborted federation is no longer offered to\n"
    "               regions; operators still read it\n"
    "Each action is recorded with your operator name in the service log.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 refused (the reason is printed) or the aggregator could not\n"
    "be reached, 2 usage.\n";

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static int render_list(const char *json)
{
    json_error_t je;
    json_t *d = json_loads(json, 0, &je), *feds;
    const json_t *f;
    size_t i;

    feds = d ? json_object_get(d, "federations") : NULL;
    if (!json_is_array(feds)) {
        fprintf(stderr, "fedagg federation list: not a list of federations\n");
        json_decref(d);
        return 1;
    }
    if (json_array_size(feds) == 0)
        printf("no federation of your teams on this service\n");
    else
        printf("%-24s %-12s %-9s %7s %-12s %7s %7s  %s\n", "FEDERATION", "TEAM", "STATE", "ROUND",
               "PHASE", "MODEL", "REGIONS", "NOTE");
    json_array_foreach(feds, i, f)
    {
        const char *reason = str(f, "state_reason"), *desc = str(f, "description");
        char round[24] = "-", model[24] = "-";
        if (num(f, "round") >= 0)
            snprintf(round, sizeof(round), "%lld", num(f, "round"));
        if (num(f, "model_version") >= 0)
            snprintf(model, sizeof(model), "v%lld", num(f, "model_version"));
        printf("%-24s %-12s %-9s %7s %-12s %7s %7lld  %s%s%s\n", str(f, "id"),
               str(f, "team")[0] ? str(f, "team") : "-", str(f, "state"), round,
               str(f, "phase")[0] ? str(f, "phase") : "-", model, num(f, "regions_invited"),
               json_is_true(json_object_get(f, "default")) ? "(default) " : "",
               reason[0] ? reason : desc, "");
    }
    json_decref(d);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int render_show(const char *json)
{
    json_t *d = json_loads(json, 0, NULL);
    const json_t *r, *regions, *rounds;
    size_t i, n;
    char when[64];

    if (!json_is_object(d)) {
        fprintf(stderr, "fedagg federation show: not a federation document\n");
        json_decref(d);
        return 1;
    }
    printf("federation  %s%s\n", str(d, "id"),
           json_is_true(json_object_get(d, "default")) ? " (the service's default)" : "");
    printf("team        %s\n", str(d, "team")[0] ? str(d, "team") : "-");
    printf("state       %s%s%s\n", str(d, "state"), str(d, "state_reason")[0] ? ": " : "",
           str(d, "state_reason"));
    if (str(d, "description")[0])
        printf("about       %s\n", str(d, "description"));
    if (str(d, "created_by")[0]) {
        fa_dashboard_fmt_utc((double)num(d, "created_unix_ms"), when, sizeof(when));
        printf("created     by %s, %s (%s)\n", str(d, "created_by"), when, str(d, "config_name"));
    }
    if (num(d, "round") >= 0)
        printf("round       %lld attempt %lld, phase %s; model v%lld; rounds completed %lld of "
               "%s%lld\n",
               num(d, "round"), num(d, "attempt"), str(d, "phase"), num(d, "model_version"),
               num(d, "rounds_completed"), num(d, "rounds_configured") ? "" : "unlimited ",
               num(d, "rounds_configured") ? num(d, "rounds_configured") : 0);
    if (str(d, "trainer")[0] || str(d, "dataset")[0])
        printf("offered     trainer %s, dataset %s\n",
               str(d, "trainer")[0] ? str(d, "trainer") : "-",
               str(d, "dataset")[0] ? str(d, "dataset") : "-");
    regions = json_object_get(d, "regions");
    if (json_array_size(regions)) {
        printf("\n%-16s %-10s %-10s %7s %8s  %s\n", "REGION", "DECISION", "STATE", "ROUNDS",
               "DROPOUTS", "REASON");
        json_array_foreach(regions, i, r)
        {
            const char *dec = str(r, "decision");
            printf("%-16s %-10s %-10s %7lld %8lld  %s\n", str(r, "id"), dec[0] ? dec : "-",
                   json_is_true(json_object_get(r, "drained"))     ? "drained"
                   : json_is_true(json_object_get(r, "connected")) ? "connected"
                                                                   : "offline",
                   num(r, "rounds_participated"), num(r, "dropouts"), str(r, "decision_reason"));
        }
    }
    rounds = json_object_get(d, "rounds");
    n = json_array_size(rounds);
    if (n) {
        printf("\n%7s %4s  %-10s %8s  %s\n", "ROUND", "ATT", "OUTCOME", "SECONDS", "PARTICIPANTS");
        for (i = n > 10 ? n - 10 : 0; i < n; i++) {
            const json_t *a = json_array_get(rounds, i), *p = json_object_get(a, "participants");
            const json_t *x;
            size_t k;
            printf("%7lld %4lld  %-10s %8.1f  ", num(a, "round"), num(a, "attempt"),
                   str(a, "outcome"), json_number_value(json_object_get(a, "seconds")));
            json_array_foreach(p, k, x) printf("%s%s", k ? "," : "", json_string_value(x));
            printf("%s%s\n", str(a, "reason")[0] ? "  " : "", str(a, "reason"));
        }
    }
    json_decref(d);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* create FILE: checked here first, then sent. */
static int create(fa_admin_client *c, const fa_admin_opts *o, const char *file)
{
    ProtobufCMessage *m = NULL;
    fa_diags *d = NULL;
    uint8_t *text = NULL;
    size_t len = 0;
    char *json = NULL;
    json_t *a = NULL;
    fa_error err = {0};
    int rc, status = 0, exit_status = 1;

    if (fa_diags_new(&d) != 0) {
        fprintf(stderr, "fedagg federation: out of memory\n");
        return 1;
    }
    rc = fa_config_load(FA_CONFIG_FEDERATION, file, FA_CONFIG_NO_FILES, &m, d, &err);
    if (rc != 0) {
        for (size_t i = 0; i < fa_diags_count(d); i++)
            fprintf(stderr, "%s\n", fa_diags_get(d, i));
        if (fa_diags_count(d) == 0)
            fprintf(stderr, "fedagg federation create: %s\n", fa_error_msg(&err, rc));
        goto out;
    }
    if ((rc = fa_file_read_all(file, &text, &len, FA_CONFIG_MAX_BYTES, &err)) != 0) {
        fprintf(stderr, "fedagg federation create: %s\n", fa_error_msg(&err, rc));
        goto out;
    }
    rc = fa_admin_request(c, "POST", "federations", text, len, "fedagg-filename", file, &json,
                          &status, &err);
    a = json ? json_loads(json, 0, NULL) : NULL;
    if (o->json && json) {
        printf("%s\n", json);
        exit_status = rc == 0 ? 0 : 1;
        goto out;
    }
    if (rc != 0) {
        const json_t *p = a ? json_object_get(a, "problems") : NULL, *x;
        size_t i;
        if (json_array_size(p)) {
            json_array_foreach(p, i, x) fprintf(stderr, "%s\n", json_string_value(x));
        } else {
            fprintf(stderr, "fedagg federation create: %s\n", fa_error_msg(&err, rc));
        }
        goto out;
    }
    printf("%s\n", str(a, "message"));
    exit_status = 0;
out:
    json_decref(a);
    free(json);
    free(text);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(d);
    return exit_status;
}

int fa_cmd_federation(int argc, char **argv)
{
    static const char *const actions[] = {"pause", "resume", "abort", "archive"};
    fa_admin_opts o = {0};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    const char *sub, *arg = NULL;
    char path[160], *json = NULL;
    int rc = fa_admin_parse(argc, argv, usage, 1, 0, &o), status = 1, action = 0;

    if (rc >= 0)
        return rc;
    sub = o.npos ? o.pos[0] : NULL;
    for (size_t i = 0; sub && i < sizeof(actions) / sizeof(actions[0]); i++)
        action |= !strcmp(sub, actions[i]);
    if (!sub || (strcmp(sub, "list") != 0 && o.npos != 2) ||
        (!strcmp(sub, "list") && o.npos != 1) ||
        (!action && strcmp(sub, "list") && strcmp(sub, "show") && strcmp(sub, "create"))) {
        fprintf(stderr, "fedagg federation: %s\n\n%s",
                !sub ? "which command? (create, list, show, pause, resume, abort, archive)"
                     : "unexpected arguments",
                usage);
        fa_admin_opts_free(&o);
        return 2;
    }
    arg = o.npos > 1 ? o.pos[1] : NULL;
    if (arg && strcmp(sub, "create") != 0 &&
        strspn(arg, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
            strlen(arg)) {
        fprintf(stderr, "fedagg federation %s: '%s' is not a federation id\n", sub, arg);
        fa_admin_opts_free(&o);
        return 2;
    }
    if (o.federation) {
        fprintf(stderr, "fedagg federation: name the federation as the argument, not with "
                        "--federation\n");
        fa_admin_opts_free(&o);
        return 2;
    }
    fa_log_set_level(FA_LOG_ERROR); /* the transport's lines are not for this terminal */
    if ((rc = fa_admin_client_new(&c, &o, &err)) != 0) {
        fprintf(stderr, "fedagg federation: %s\n", fa_error_msg(&err, rc));
        goto out;
    }
    if (!strcmp(sub, "create")) {
        status = create(c, &o, arg);
        goto out;
    }
    if (!strcmp(sub, "list"))
        snprintf(path, sizeof(path), "federations");
    else if (!strcmp(sub, "show"))
        snprintf(path, sizeof(path), "federations/%s", arg);
    else
        snprintf(path, sizeof(path), "federations/%s/%s", arg, sub);
    rc = fa_admin_request(c, action ? "POST" : "GET", path, NULL, 0, NULL, NULL, &json, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg federation %s: %s\n", sub, fa_error_msg(&err, rc));
        goto out;
    }
    if (o.json) {
        printf("%s\n", json);
        status = fflush(stdout) == 0 ? 0 : 1;
    } else if (!strcmp(sub, "list")) {
        status = render_list(json);
    } else if (!strcmp(sub, "show")) {
        status = render_show(json);
    } else {
        json_t *a = json_loads(json, 0, NULL);
        printf("%s\n", a ? str(a, "message") : json);
        json_decref(a);
        status = fflush(stdout) == 0 ? 0 : 1;
    }
out:
    free(json);
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
}
