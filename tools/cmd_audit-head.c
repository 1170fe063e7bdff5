/* `fedagg audit-head`: GET /v1/admin/audit-head (aggregator/api_admin.h) as text,
 * or as the aggregator's JSON with --json. */
#include <stdio.h>

#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_audit_head_help[] =
    "the audit log's size and latest signed checkpoint (operators)";

static const char usage[] =
    "usage: fedagg audit-head [--json] [--from FILE] (--config FILE | --aggregator HOST:PORT\n"
    "                     --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Prints the audit log's size, the size its latest signed checkpoint covers,\n"
    "the root hash and the checkpoint itself (a C2SP signed note: check it\n"
    "against the log with `fedagg audit verify`).\n"
    "\n"
    "  --json       print the aggregator's JSON document as it is (for scripts)\n"
    "  --from FILE  show a document saved with --json instead of asking the\n"
    "               aggregator (- reads stdin)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Exit status: 0, 1 the aggregator refused or could not be reached, 2 usage.\n";

static int render(const char *json, const fa_admin_opts *o)
{
    (void)o;
    return fa_admin_render_audit_head(stdout, "audit-head", json);
}

int fa_cmd_audit_head(int argc, char **argv)
{
    return fa_admin_show(argc, argv, "audit-head", usage, NULL, render);
}
