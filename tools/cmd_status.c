/* `fedagg status`: GET /v1/admin/status (aggregator/api_admin.h) as text,
 * or as the aggregator's JSON with --json. */
#include <stdio.h>

#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_status_help[] =
    "the federation now: round, phase, model, accuracy, regions (operators)";

static const char usage[] =
    "usage: fedagg status [--json] [--from FILE] (--config FILE | --aggregator HOST:PORT\n"
    "                     --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Shows the federation as the aggregator sees it now: round, attempt, phase and\n"
    "its deadline, paused or not, model version, rounds completed and aborted, the\n"
    "latest accuracies, storage, the audit log's size, and the regions.\n"
    "\n"
    "  --json       print the aggregator's JSON document as it is (for scripts)\n"
    "  --from FILE  show a document saved with --json instead of asking the\n"
    "               aggregator (- reads stdin)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

static int render(const char *json, const fa_admin_opts *o)
{
    (void)o;
    return fa_admin_render_status(stdout, "status", json, fa_time_unix_ms());
}

int fa_cmd_status(int argc, char **argv)
{
    return fa_admin_show(argc, argv, "status", usage, NULL, render);
}
