/* `fedagg drain`: POST /v1/admin/drain?region=REGION (aggregator/api_admin.h). */
#include "tools/admin_client.h"

const char fa_cmd_drain_help[] = "drain REGION: it sits out until admitted (operators)";

static const char usage[] =
    "usage: fedagg drain REGION [--json] (--config FILE | --aggregator HOST:PORT --cert C\n"
    "                     --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Drains REGION: from the next attempt on it takes no part (its requests get\n"
    "409 with the reason) until `fedagg admit REGION`.  Recorded in the audit log\n"
    "with your operator name.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0 done, 1 refused (409: nothing to do; 404: no such region) or\n"
    "the aggregator could not be reached, 2 usage.\n";

int fa_cmd_drain(int argc, char **argv)
{
    return fa_admin_act(argc, argv, "drain", usage, 1);
}
