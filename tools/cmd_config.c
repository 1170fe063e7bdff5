/* `fedagg config`: check, print, encode and decode configuration files.
 *
 *   fedagg config check FILE [--type T] [--syntax-only] [--no-files]
 *   fedagg config print --type T --defaults
 *   fedagg config print FILE [--type T]
 *   fedagg config encode --type T  < text > binary
 *   fedagg config decode --type T  < binary > text
 *
 * Exit status: 0 success, 1 the config (or input) is invalid, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_file.h"
#include "common/fa_version.h"
#include "proto/config_check.h"
#include "proto/textformat.h"
#include "tools/admin_client.h"

const char fa_cmd_config_help[] =
    "check, print (annotated defaults), encode and decode config files";

#define MAX_STDIN (64u << 20)

static const char usage_text[] =
    "usage: fedagg config COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  check FILE [--type T]     validate a config: syntax, meaning, files\n"
    "  print --type T --defaults print a complete, commented example config\n"
    "  print FILE [--type T]     print the effective config (defaults filled in,\n"
    "                            paths absolute)\n"
    "  encode --type T           text format on stdin -> binary protobuf on stdout\n"
    "  decode --type T           binary protobuf on stdin -> text format on stdout\n"
    "\n"
    "T is `aggregator` (fedagg.AggregatorConfig), `worker` (fedagg.WorkerConfig),\n"
    "`federation` (fedagg.FederationConfig: a federation to create on a service,\n"
    "docs/service.md) or, for check, print FILE, encode and decode, `operator`\n"
    "(fedagg.OperatorConfig: how `fedagg status`, `watch`, `pause`... reach the\n"
    "admin API).\n"
    "`fedagg config COMMAND --help` describes a command.\n";

static const char check_help[] =
    "usage: fedagg config check FILE [--type aggregator|worker|federation|operator]\n"
    "                           [--syntax-only] [--no-files]\n"
    "\n"
    "Validates a config file.  Exit 0 and one line `FILE: OK (...)` when it is\n"
    "valid; otherwise exit 1 and every problem as FILE:LINE:COLUMN: message.\n"
    "\n"
    "Beyond syntax it checks meaning: required fields, value ranges (threshold\n"
    "within 1..regions or 0 for a majority, min_regions <= regions, quantization\n"
    "bits 2..24, positive deadlines, optimizer hyperparameters), region ids\n"
    "([a-z0-9-]{1,63}, unique), identity keys (32-byte Ed25519, base64), that\n"
    "files exist (paths are relative to FILE's directory) and that key files\n"
    "are not readable by group or others.\n"
    "\n"
    "  --type T        aggregator, worker, federation or operator; the first three\n"
    "                  are guessed from the fields when omitted\n"
    "  --syntax-only   check the text format only\n"
    "  --no-files      check meaning but not the file system (a config written\n"
    "                  for another machine: a federation file's paths are the\n"
    "                  service's, relative to its service.dir)\n";

static const char print_help[] =
    "usage: fedagg config print --type aggregator|worker|federation --defaults\n"
    "       fedagg config print FILE [--type aggregator|worker|federation]\n"
    "\n"
    "With --defaults, prints a complete example config: every field with its\n"
    "comment from config.proto and its default (or an example value), optional\n"
    "settings commented out.  It passes `fedagg config check` once the files it\n"
    "names exist.\n"
    "\n"
    "With FILE, loads and checks it like `check`, then prints the effective\n"
    "config in canonical text format: defaults filled in, paths made absolute.\n";

static const char encode_help[] =
    "usage: fedagg config encode --type aggregator|worker|federation < config.textproto >\n"
    "       config.bin\n"
    "\n"
    "Reads text format on stdin and writes the binary protobuf encoding on stdout,\n"
    "like `protoc --encode=fedagg.AggregatorConfig config.proto` (byte for byte).\n"
    "Syntax only: the meaning is not checked.  Errors go to stderr as\n"
    "<stdin>:LINE:COLUMN: message; exit 1.\n";

static const char decode_help[] =
    "usage: fedagg config decode --type aggregator|worker|federation < config.bin >\n"
    "       config.textproto\n"
    "\n"
    "Reads a binary protobuf on stdin and writes it as canonical text format on\n"
    "stdout, like `protoc --decode=fedagg.AggregatorConfig config.proto`.\n";

static int is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help");
}

/* Common option parsing: --type T, flags; at most one positional FILE.
 * --type operator (fedagg.OperatorConfig) is no fa_config_kind: its loader
 * is the operator subcommands' own (tools/admin_client.h). */
struct opts {
    fa_config_kind kind;
    int operator_cfg;
    const char *file;
    int defaults, syntax_only, no_files;
};

static int parse_opts(int argc, char **argv, const char *help, int allow_file, int allow_defaults,
                      int allow_check_flags, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(a, "--type") || !strncmp(a, "--type=", 7)) {
            const char *v = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) {
                fprintf(stderr, "fedagg config: --type needs a value (aggregator, worker, "
                                "federation or operator)\n");
                return 2;
            }
            o->kind = fa_config_kind_from_name(v);
            o->operator_cfg = !strcmp(v, "operator");
            if (o->kind == FA_CONFIG_UNKNOWN && !o->operator_cfg) {
                fprintf(stderr,
                        "fedagg config: unknown --type '%s' (aggregator, worker, federation or "
                        "operator)\n",
                        v);
                return 2;
            }
        } else if (allow_defaults && !strcmp(a, "--defaults")) {
            o->defaults = 1;
        } else if (allow_check_flags && !strcmp(a, "--syntax-only")) {
            o->syntax_only = 1;
        } else if (allow_check_flags && !strcmp(a, "--no-files")) {
            o->no_files = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "fedagg config: unknown option '%s'\n\n%s", a, help);
            return 2;
        } else if (allow_file && !o->file) {
            o->file = a;
        } else {
            fprintf(stderr, "fedagg config: unexpected argument '%s'\n\n%s", a, help);
            return 2;
        }
    }
    return -1; /* go on */
}

static void print_diags(const fa_diags *d)
{
    for (size_t i = 0; i < fa_diags_count(d); i++) {
        const char *s = fa_diags_get(d, i);
        fprintf(stderr, "%s\n", s ? s : "(a message was lost: out of memory)");
    }
}

static void summary(const char *file, const ProtobufCMessage *m, fa_config_kind kind, int syntax,
                    int operator_cfg)
{
    if (operator_cfg) {
        const Fedagg__OperatorConfig *c = (const Fedagg__OperatorConfig *)m;
        if (syntax)
            printf("%s: OK (operator config, syntax only)\n", file);
        else
            printf("%s: OK (operator config: aggregator %s, certificate %s)\n", file, c->aggregator,
                   c->tls->cert_file);
    } else if (syntax) {
        printf("%s: OK (%s config, syntax only)\n", file, fa_config_kind_name(kind));
    } else if (kind == FA_CONFIG_AGGREGATOR) {
        const Fedagg__AggregatorConfig *c = (const Fedagg__AggregatorConfig *)m;
        if (c->n_regions)
            printf("%s: OK (aggregator config: federation \"%s\", %zu region%s, threshold %u, "
                   "listen %s%s)\n",
                   file, c->federation_id, c->n_regions, c->n_regions == 1 ? "" : "s",
                   c->round->threshold, c->listen,
                   c->service->dir && c->service->dir[0] ? ", a service" : "");
        else
            printf("%s: OK (aggregator config: a service without a default federation, "
                   "listen %s)\n",
                   file, c->listen);
    } else if (kind == FA_CONFIG_FEDERATION) {
        const Fedagg__FederationConfig *c = (const Fedagg__FederationConfig *)m;
        printf("%s: OK (federation config: federation \"%s\" of team \"%s\", %zu region%s, "
               "threshold %u)\n",
               file, c->federation_id, c->team, c->n_regions, c->n_regions == 1 ? "" : "s",
               c->round->threshold);
    } else {
        const Fedagg__WorkerConfig *c = (const Fedagg__WorkerConfig *)m;
        if (c->n_services) /* a region agent (docs/region-policy.md) */
            printf("%s: OK (region agent config: region %s, %zu service%s, %zu dataset%s, %zu "
                   "trainer%s)\n",
                   file, c->region_id, c->n_services, c->n_services == 1 ? "" : "s",
                   c->policy->n_datasets, c->policy->n_datasets == 1 ? "" : "s",
                   c->policy->n_trainers, c->policy->n_trainers == 1 ? "" : "s");
        else
            printf("%s: OK (worker config: region %s, aggregator %s, %s trainer)\n", file,
                   c->region_id, c->aggregator,
                   c->trainer->kind_case == FEDAGG__TRAINER__KIND_BUILTIN ? "built-in"
                                                                          : "external");
    }
}

/* Loads an operator config as `check` does; prints the problems.  Returns 0 or 1. */
static int load_operator(const struct opts *o, unsigned flags, ProtobufCMessage **m)
{
    fa_diags *d = NULL;
    fa_error err = {0};
    Fedagg__OperatorConfig *c = NULL;
    int rc;

    *m = NULL;
    if (fa_diags_new(&d) != 0) {
        fprintf(stderr, "fedagg config: out of memory\n");
        return 1;
    }
    if (flags & FA_CONFIG_SYNTAX_ONLY) {
        uint8_t *text = NULL;
        size_t len = 0;
        fa_textformat_parse_opts po = {0};
        po.filename = o->file;
        po.diags = d;
        rc = fa_file_read_all(o->file, &text, &len, FA_CONFIG_MAX_BYTES, &err);
        if (rc == 0)
            rc = fa_textformat_parse_ex(&fedagg__operator_config__descriptor, (const char *)text,
                                        len, &po, m, &err);
        free(text);
    } else {
        rc = fa_admin_config_load(o->file, (flags & FA_CONFIG_NO_FILES) != 0, &c, d, &err);
        *m = c ? &c->base : NULL;
    }
    if (rc != 0) {
        print_diags(d);
        if (fa_diags_count(d) == 0)
            fprintf(stderr, "%s\n", fa_error_msg(&err, rc));
        else if (rc == FA_ERR_PARSE || rc == FA_ERR_INVAL)
            fprintf(stderr, "%s: %zu error%s (operator config)\n", o->file, fa_diags_count(d),
                    fa_diags_count(d) == 1 ? "" : "s");
    }
    fa_diags_del(d);
    return rc == 0 ? 0 : 1;
}

/* Loads FILE as `check` does; prints the problems.  Returns 0 or 1. */
static int load(const struct opts *o, unsigned flags, ProtobufCMessage **m, fa_config_kind *kind)
{
    fa_diags *d = NULL;
    fa_error err = {0};
    uint8_t *text = NULL;
    size_t len = 0;
    int rc;

    *m = NULL;
    *kind = o->kind;
    if (o->operator_cfg)
        return load_operator(o, flags, m);
    if (*kind == FA_CONFIG_UNKNOWN) {
        /* guess from the content, so that the message can say so */
        if (fa_file_read_all(o->file, &text, &len, FA_CONFIG_MAX_BYTES, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        *kind = fa_config_guess_kind((const char *)text, len);
        free(text);
        if (*kind == FA_CONFIG_UNKNOWN) {
            fprintf(stderr,
                    "%s:1:1: cannot tell whether this is an aggregator or a worker config "
                    "(or a federation file) from its fields; pass --type aggregator, worker or "
                    "federation\n",
                    o->file);
            return 1;
        }
    }
    if (fa_diags_new(&d) != 0) {
        fprintf(stderr, "fedagg config: out of memory\n");
        return 1;
    }
    rc = fa_config_load(*kind, o->file, flags, m, d, &err);
    if (rc != 0) {
        print_diags(d);
        if (fa_diags_count(d) == 0)
            fprintf(stderr, "%s\n", fa_error_msg(&err, rc));
        else if (rc == FA_ERR_PARSE || rc == FA_ERR_INVAL)
            fprintf(stderr, "%s: %zu error%s (%s config)\n", o->file, fa_diags_count(d),
                    fa_diags_count(d) == 1 ? "" : "s", fa_config_kind_name(*kind));
    }
    fa_diags_del(d);
    return rc == 0 ? 0 : 1;
}

static int cmd_check(int argc, char **argv)
{
    struct opts o;
    ProtobufCMessage *m;
    fa_config_kind kind;
    int rc = parse_opts(argc, argv, check_help, 1, 0, 1, &o);

    if (rc >= 0)
        return rc;
    if (!o.file) {
        fprintf(stderr, "fedagg config check: which file?\n\n%s", check_help);
        return 2;
    }
    rc = load(&o,
              (o.syntax_only ? FA_CONFIG_SYNTAX_ONLY : 0) | (o.no_files ? FA_CONFIG_NO_FILES : 0),
              &m, &kind);
    if (rc == 0) {
        summary(o.file, m, kind, o.syntax_only, o.operator_cfg);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    return rc;
}

static int write_all(FILE *f, const void *data, size_t len)
{
    if (fwrite(data, 1, len, f) != len || fflush(f) != 0) {
        perror("fedagg config: write");
        return 1;
    }
    return 0;
}

static int cmd_print(int argc, char **argv)
{
    struct opts o;
    ProtobufCMessage *m;
    fa_config_kind kind;
    fa_error err = {0};
    char *text = NULL;
    size_t len = 0;
    int rc = parse_opts(argc, argv, print_help, 1, 1, 0, &o);

    if (rc >= 0)
        return rc;
    if (o.defaults) {
        if (o.file) {
            fprintf(stderr, "fedagg config print: --defaults takes no FILE\n\n%s", print_help);
            return 2;
        }
        if (o.kind == FA_CONFIG_UNKNOWN) {
            fprintf(stderr,
                    "fedagg config print: --defaults needs --type aggregator or --type "
                    "worker%s\n",
                    o.operator_cfg ? " (an operator config is aggregator, tls and timeout_ms: "
                                     "see `fedagg status --help`)"
                                   : "");
            return 2;
        }
        if (fa_config_example(o.kind, &text, &len, &err) != 0) {
            fprintf(stderr, "fedagg config print: %s\n", err.msg);
            return 1;
        }
    } else {
        if (!o.file) {
            fprintf(stderr, "fedagg config print: give FILE, or --type T --defaults\n\n%s",
                    print_help);
            return 2;
        }
        if (load(&o, 0, &m, &kind) != 0)
            return 1;
        rc = fa_textformat_print(m, &text, &len, &err);
        protobuf_c_message_free_unpacked(m, NULL);
        if (rc != 0) {
            fprintf(stderr, "fedagg config print: %s\n", err.msg);
            return 1;
        }
    }
    rc = write_all(stdout, text, len);
    free(text);
    return rc;
}

static int read_stdin(char **out, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);

    if (!buf)
        return -1;
    for (;;) {
        size_t got;
        if (n == cap) {
            char *g;
            if (cap >= MAX_STDIN) {
                fprintf(stderr, "fedagg config: input exceeds %u MiB\n", MAX_STDIN >> 20);
                free(buf);
                return -1;
            }
            g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                return -1;
            }
            buf = g;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(stdin)) {
        perror("fedagg config: stdin");
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int cmd_encode(int argc, char **argv, int decode)
{
    const char *help = decode ? decode_help : encode_help;
    fa_textformat_parse_opts po = {0};
    const ProtobufCMessageDescriptor *d;
    ProtobufCMessage *m = NULL;
    fa_diags *diags = NULL;
    fa_error err = {0};
    struct opts o;
    char *in = NULL, *text = NULL;
    size_t len, tlen;
    int rc = parse_opts(argc, argv, help, 0, 0, 0, &o);

    if (rc >= 0)
        return rc;
    if (o.kind == FA_CONFIG_UNKNOWN && !o.operator_cfg) {
        fprintf(stderr, "fedagg config %s: --type aggregator, worker or operator is required\n",
                decode ? "decode" : "encode");
        return 2;
    }
    d = o.operator_cfg ? &fedagg__operator_config__descriptor : fa_config_descriptor(o.kind);
    if (read_stdin(&in, &len) != 0)
        return 1;
    rc = 1;
    if (decode) {
        m = protobuf_c_message_unpack(d, NULL, len, (const uint8_t *)in);
        if (!m) {
            fprintf(stderr, "<stdin>: not a valid binary %s (%zu bytes)\n", d->name, len);
            goto out;
        }
        if (fa_textformat_print(m, &text, &tlen, &err) != 0) {
            fprintf(stderr, "fedagg config decode: %s\n", err.msg);
            goto out;
        }
        rc = write_all(stdout, text, tlen);
    } else {
        uint8_t *bin;
        size_t n;
        if (fa_diags_new(&diags) != 0)
            goto out;
        po.filename = "<stdin>";
        po.diags = diags;
        if (fa_textformat_parse_ex(d, in, len, &po, &m, &err) != 0) {
            print_diags(diags);
            if (fa_diags_count(diags) == 0)
                fprintf(stderr, "%s\n", err.msg);
            goto out;
        }
        n = protobuf_c_message_get_packed_size(m);
        bin = malloc(n ? n : 1);
        if (!bin) {
            fprintf(stderr, "fedagg config encode: out of memory\n");
            goto out;
        }
        protobuf_c_message_pack(m, bin);
        rc = write_all(stdout, bin, n);
        free(bin);
    }
out:
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(diags);
    free(text);
    free(in);
    return rc;
}

int fa_cmd_config(int argc, char **argv)
{
    const char *sub;

    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    sub = argv[1];
    if (is_help(sub)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (!strcmp(sub, "--version")) {
        printf("fedagg %s\n", fa_version);
        return 0;
    }
    if (!strcmp(sub, "check"))
        return cmd_check(argc - 1, argv + 1);
    if (!strcmp(sub, "print"))
        return cmd_print(argc - 1, argv + 1);
    if (!strcmp(sub, "encode"))
        return cmd_encode(argc - 1, argv + 1, 0);
    if (!strcmp(sub, "decode"))
        return cmd_encode(argc - 1, argv + 1, 1);
    fprintf(stderr, "fedagg config: unknown command '%s'\n\n%s", sub, usage_text);
    return 2;
}
