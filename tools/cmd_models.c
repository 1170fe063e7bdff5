/* `fedagg models`: GET /v1/admin/models (aggregator/api_admin.h) as text,
 * or as the aggregator's JSON with --json. */
#include <stdio.h>

#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_models_help[] = "the model versions kept: round, size, SHA-256 (operators)";

static const char usage[] =
    "usage: fedagg models [--json] [--from FILE] (--config FILE | --aggregator HOST:PORT\n"
    "                     --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Lists the model versions the aggregator keeps: the round that made each, its\n"
    "size, whether float32 master weights are kept beside it, and its SHA-256 (the\n"
    "digest the audit log records and GET /v1/models/{v} announces).\n"
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

int fa_cmd_models(int argc, char **argv)
{
    return fa_admin_show(argc, argv, "models", usage, NULL, render);
}
