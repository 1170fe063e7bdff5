/* fa_daemon.h - the command line shared by the daemons (fedagg-aggregator,
 * fedagg-worker): --config FILE, --log-level LEVEL, --help, --version. */
#ifndef FA_DAEMON_H
#define FA_DAEMON_H

/* Parses argv.  usage is printed for --help (stdout) and for mistakes
 * (stderr).  Returns -1 when the program should go on with *config set (and
 * *level, or NULL), else the exit status (0 after --help/--version, 2 after a
 * usage error, with a message naming the option).  Before going on it
 * warns of test switches set in the environment of a build without test
 * hooks (fa_test_hooks_warn_env); --version says when a build has them. */
int fa_daemon_args(int argc, char **argv, const char *prog, const char *usage, const char **config,
                   const char **level);

#endif
