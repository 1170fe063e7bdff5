/* `fedagg resume`: POST /v1/admin/resume (aggregator/api_admin.h). */
#include "tools/admin_client.h"

const char fa_cmd_resume_help[] = "resume a paused federation (operators)";

static const char usage[] =
    "usage: fedagg resume [--json] (--config FILE | --aggregator HOST:PORT --cert C\n"
    "                     --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Resumes a paused federation: the next round opens.  Recorded in the audit\n"
    "log with your operator name.\n"
    "\n"
    "  --json       print the aggregator's JSON answer as it is\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0 done, 1 refused (409: nothing to do; 404: no such region) or\n"
    "the aggregator could not be reached, 2 usage.\n";

int fa_cmd_resume(int argc, char **argv)
{
    return fa_admin_act(argc, argv, "resume", usage, 0);
}
