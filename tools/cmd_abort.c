/* `fedagg abort`: POST /v1/admin/abort (aggregator/api_admin.h). */
#include "tools/admin_client.h"

const char fa_cmd_abort_help[] = "abort the current attempt; a new one opens (operators)";

static const char usage[] =
    "usage: fedagg abort [--json] (--config FILE | --aggregator HOST:PORT --cert C\n"
    "                     --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Aborts the attempt in flight: its regions are that attempt's dropouts and a\n"
    "new attempt of the same round opens with fresh keys (unless the federation is\n"
    "paused).  Recorded in the audit log with your operator name.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0 done, 1 refused (409: nothing to do; 404: no such region) or\n"
    "the aggregator could not be reached, 2 usage.\n";

int fa_cmd_abort(int argc, char **argv)
{
    return fa_admin_act(argc, argv, "abort", usage, 0);
}
