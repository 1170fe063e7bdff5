/* `fedagg rounds`: GET /v1/admin/rounds (aggregator/api_admin.h) as a table,
 * or as the aggregator's JSON with --json. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_rounds_help[] = "the round attempts: outcome, phase times, dropouts (operators)";

static const char usage[] =
    "usage: fedagg rounds [--last N] [--json] [--from FILE] (--config FILE | --aggregator\n"
    "                     HOST:PORT --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Lists the latest round attempts (oldest first): round, attempt, completed or\n"
    "aborted (and why), when it started, its seconds and each phase's, how many\n"
    "regions took part, which dropped out, the model version it made and that\n"
    "version's accuracies.\n"
    "\n"
    "  --last N     only the newest N attempts\n"
    "  --json       print the aggregator's JSON document as it is (for scripts)\n"
    "  --from FILE  show a document saved with --json instead of asking the\n"
    "               aggregator (- reads stdin)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

static const char *const extra[] = {"--last", NULL};

static int render(const char *json, const fa_admin_opts *o)
{
    unsigned long last = 0;
    if (o->extra_val[0]) {
        char *end;
        errno = 0;
        last = strtoul(o->extra_val[0], &end, 10);
        if (!o->extra_val[0][0] || *end || errno) {
            fprintf(stderr, "fedagg rounds: --last '%s' is not a number\n", o->extra_val[0]);
            return 2;
        }
    }
    return fa_admin_render_rounds(stdout, "rounds", json, (size_t)last);
}

int fa_cmd_rounds(int argc, char **argv)
{
    return fa_admin_show(argc, argv, "rounds", usage, extra, render);
}
