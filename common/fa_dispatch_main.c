/* main() of the multi-command binaries: `PROGRAM COMMAND [ARGS...]`. */
#include <stdio.h>
#include <string.h>

#include "common/fa_dispatch.h"
#include "common/fa_version.h"

static void usage(FILE *out)
{
    const struct fa_dispatch_entry *e;
    fprintf(out, "usage: %s COMMAND [ARGS...]\n\ncommands:\n", fa_dispatch_program);
    for (e = fa_dispatch_table; e->name; e++)
        fprintf(out, "  %-12s %s\n", e->name, e->help);
    fprintf(out, "\n`%s COMMAND --help` describes a command; `%s --version` prints the version.\n",
            fa_dispatch_program, fa_dispatch_program);
}

int main(int argc, char **argv)
{
    const struct fa_dispatch_entry *e;

    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s %s\n", fa_dispatch_program, fa_version);
        return 0;
    }
    for (e = fa_dispatch_table; e->name; e++)
        if (!strcmp(e->name, argv[1]))
            return e->run(argc - 1, argv + 1);
    fprintf(stderr, "%s: unknown command '%s'\n\n", fa_dispatch_program, argv[1]);
    usage(stderr);
    return 2;
}
