#include "common/fa_daemon.h"
#include "common/fa_version.h"

#include <stdio.h>
#include <string.h>

#include "common/fa_failpoint.h"

int fa_daemon_args(int argc, char **argv, const char *prog, const char *usage, const char **config,
                   const char **level)
{
    *config = NULL;
    *level = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            *config = argv[++i];
        } else if (!strcmp(argv[i], "--log-level") && i + 1 < argc) {
            *level = argv[++i];
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("%s %s%s\n", prog, fa_version,
                   FA_TEST_HOOKS_COMPILED ? " (test hooks compiled in: not for production)" : "");
            return 0;
        } else {
            fprintf(stderr, "%s: unknown or incomplete option '%s'\n\n%s", prog, argv[i], usage);
            return 2;
        }
    }
    if (!*config) {
        fprintf(stderr, "%s: --config FILE is required\n\n%s", prog, usage);
        return 2;
    }
    fa_test_hooks_warn_env(prog);
    return -1;
}
