/* `fedagg regions`: GET /v1/admin/regions (aggregator/api_admin.h) as text,
 * or as the aggregator's JSON with --json. */
#include <stdio.h>

#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_regions_help[] =
    "the regions: state, last seen, rounds, dropouts, bytes (operators)";

static const char usage[] =
    "usage: fedagg regions [--json] [--from FILE] (--config FILE | --aggregator HOST:PORT\n"
    "                     --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Lists the regions: connected, offline or drained, when last seen, rounds\n"
    "taken part in, dropouts, bytes received, and the privacy budget spent when\n"
    "the region reports one.\n"
    "\n"
    "  --json       print the aggregator's JSON document as it is (for scripts)\n"
    "  --from FILE  show a document saved with --json instead of asking the\n"
    "               aggregator (- reads stdin)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

static int render(const char *json, const fa_admin_opts *o)
{
    (void)o;
    return fa_admin_render_regions(stdout, "regions", json, fa_time_unix_ms());
}

int fa_cmd_regions(int argc, char **argv)
{
    return fa_admin_show(argc, argv, "regions", usage, NULL, render);
}
