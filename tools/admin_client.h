/* admin_client.h - what the operators' subcommands share: their options,
 * the operator config (fedagg.OperatorConfig), and the HTTP/3 client of the
 * aggregator's admin API (aggregator/api_admin.h) over transport/h3.h.
 *
 *   fedagg status|rounds|regions|models|audit-head|watch|pause|resume|abort
 *          [drain|admit REGION]
 *          --aggregator HOST:PORT --cert C --key K --ca CA [--name SERVER_NAME]
 *          | --config OPERATOR.textproto
 *
 * Where the connection settings come from, later ones winning: the config
 * named by $FEDAGG_OPERATOR_CONFIG, then --config, then each flag.
 */
#ifndef FA_TOOLS_ADMIN_CLIENT_H
#define FA_TOOLS_ADMIN_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"
#include "config.pb-c.h"
#include "proto/diags.h"

/* The options every operator subcommand takes, in its usage text. */
#define FA_ADMIN_CONNECT_USAGE                                                                     \
    "\n"                                                                                           \
    "connection (or --config FILE, or $FEDAGG_OPERATOR_CONFIG):\n"                                 \
    "  --aggregator HOST:PORT  the aggregator's HTTP/3 address\n"                                  \
    "  --cert FILE             your operator certificate (deploy/pki.sh --operators NAME)\n"       \
    "  --key FILE              its private key\n"                                                  \
    "  --ca FILE               the federation CA\n"                                                \
    "  --name SERVER_NAME      the name the aggregator's certificate carries (default: HOST)\n"    \
    "  --config FILE           an OperatorConfig textproto with the above\n"                       \
    "  --timeout MS            how long to wait for the aggregator (10000)\n"                      \
    "  --federation ID         a federation of the service (default: its default one)\n"

typedef struct fa_admin_opts {
    const char *aggregator, *cert, *key, *ca, *server_name;
    const char *federation; /* --federation ID; NULL: the default federation */
    uint32_t timeout_ms;
    int json;         /* --json: the aggregator's JSON as it is */
    const char *from; /* --from FILE: a saved document instead of the aggregator */
    /* Command-specific flags the caller accepts (NULL-terminated names with
     * a value, e.g. {"--last", "--interval", NULL}); their values land in
     * extra_val[i]. */
    const char *const *extra;
    const char *extra_val[8];
    /* Positional arguments (at most 4). */
    const char *pos[4];
    size_t npos;
    /* Owned: the config loaded for --config (strings above may point into it). */
    Fedagg__OperatorConfig *cfg[2];
} fa_admin_opts;

/* Parses argv (argv[0] the subcommand).  Prints usage on --help (returns 0)
 * or a mistake (returns 2 with a message on stderr); returns -1 to go on.
 * allow_json / allow_from: whether --json and --from are accepted. */
int fa_admin_parse(int argc, char **argv, const char *usage, int allow_json, int allow_from,
                   fa_admin_opts *o);

/* Frees what fa_admin_parse loaded. */
void fa_admin_opts_free(fa_admin_opts *o);

/* Loads an OperatorConfig textproto: syntax, paths relative to its
 * directory, then meaning (aggregator host:port, tls cert/key/ca present,
 * files readable, the key private; unless no_files).  Problems go to diags
 * as file:line:column lines.  Returns 0, FA_ERR_NOTFOUND / FA_ERR_IO,
 * FA_ERR_PARSE, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_admin_config_load(const char *path, int no_files, Fedagg__OperatorConfig **out,
                         fa_diags *diags, fa_error *err);

typedef struct fa_admin_client fa_admin_client;

/* A client for the options' aggregator.  Returns 0, FA_ERR_INVAL (an
 * option missing: the message names it), FA_ERR_TLS or FA_ERR_NOMEM. */
int fa_admin_client_new(fa_admin_client **out, const fa_admin_opts *o, fa_error *err);
void fa_admin_client_del(fa_admin_client *c);

/* GET /v1/admin/<doc>: *json is the document (malloc'ed, NUL-terminated).
 * POST /v1/admin/<action>[?region=R]: *json is the answer {"ok", "message"}.
 * With the options' --federation, the same of that federation
 * (/v1/admin/federations/<id>/..., where the attempt's abort is
 * abort-round).  Both return 0 on a 200, FA_ERR_HTTP with the aggregator's
 * {"error"} in the message otherwise (and *status, when not NULL, the HTTP
 * status), or the transport's FA_ERR_TLS, FA_ERR_TIMEOUT, FA_ERR_QUIC... */
int fa_admin_get(fa_admin_client *c, const char *doc, char **json, int *status, fa_error *err);
int fa_admin_post(fa_admin_client *c, const char *action, const char *region, char **json,
                  int *status, fa_error *err);

/* Any admin request: method, path (from /v1/admin/), a body (may be NULL)
 * and one extra header (name NULL: none).  *json is the answer whatever its
 * status (malloc'ed; NULL when empty or not JSON-like); returns 0 on a 200,
 * FA_ERR_HTTP otherwise (the {"error"} in the message), or the transport's
 * errors. */
int fa_admin_request(fa_admin_client *c, const char *method, const char *path, const void *body,
                     size_t len, const char *hname, const char *hvalue, char **json, int *status,
                     fa_error *err);

/* Reads a document saved with --json (for --from).  Returns 0, FA_ERR_IO... */
int fa_admin_read_saved(const char *path, char **json, fa_error *err);

/* The operator subcommands' common body: a document fetched (or read with
 * --from) and printed by render(doc_json, now_unix_ms) or as JSON.
 * Returns the exit status: 0, 1 (the aggregator or the document failed,
 * with a message on stderr), 2 (usage). */
int fa_admin_show(int argc, char **argv, const char *doc, const char *usage,
                  const char *const *extra,
                  int (*render)(const char *json, const fa_admin_opts *o));

/* The actions' common body: POST, then the message (or the JSON answer).
 * region_arg: the action takes one REGION argument. */
int fa_admin_act(int argc, char **argv, const char *action, const char *usage, int region_arg);

#endif
