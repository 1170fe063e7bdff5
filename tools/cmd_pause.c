/* `fedagg pause`: POST /v1/admin/pause (aggregator/api_admin.h). */
#include "tools/admin_client.h"

const char fa_cmd_pause_help[] = "pause: no new round after the current one (operators)";

static const char usage[] =
    "usage: fedagg pause [--json] (--config FILE | --aggregator HOST:PORT --cert C\n"
    "                     --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Pauses the federation: the round in flight goes on to its end (or abort),\n"
    "then no new round opens until `fedagg resume`.  Recorded in the audit log\n"
    "with your operator name.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0 done, 1 refused (409: nothing to do; 404: no such region) or\n"
    "the aggregator could not be reached, 2 usage.\n";

int fa_cmd_pause(int argc, char **argv)
{
    return fa_admin_act(argc, argv, "pause", usage, 0);
}
