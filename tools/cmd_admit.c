/* `fedagg admit`: POST /v1/admin/admit?region=REGION (aggregator/api_admin.h). */
#include "tools/admin_client.h"

const char fa_cmd_admit_help[] = "admit a drained REGION again (operators)";

static const char usage[] =
    "usage: fedagg admit REGION [--json] (--config FILE | --aggregator HOST:PORT --cert C\n"
    "                     --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Admits REGION again after `fedagg drain`: it takes part from the next\n"
    "attempt on.  Recorded in the audit log with your operator name.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0 done, 1 refused (409: nothing to do; 404: no such region) or\n"
    "the aggregator could not be reached, 2 usage.\n";

int fa_cmd_admit(int argc, char **argv)
{
    return fa_admin_act(argc, argv, "admit", usage, 1);
}
