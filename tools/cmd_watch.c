/* `fedagg watch`: a live view of the federation in the terminal, redrawn in
 * place from GET /v1/admin/status (ANSI escapes, no curses): round, phase
 * and its deadline, regions and their state, the latest accuracy, bytes.
 * q or Ctrl-C quits and gives the terminal back as it was. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "common/fa_log.h"
#include "common/fa_time.h"
#include "tools/admin_client.h"
#include "tools/admin_render.h"

const char fa_cmd_watch_help[] = "a live view of the federation, redrawn in place (operators)";

static const char usage[] =
    "usage: fedagg watch [--interval MS] [--frames N] (--config FILE | --aggregator HOST:PORT\n"
    "                    --cert C --key K --ca CA [--name SERVER_NAME])\n"
    "\n"
    "Shows the federation live, redrawn in place: round, attempt, phase and its\n"
    "deadline, paused or not, model version, the latest accuracies (and a line of\n"
    "them per version), storage, every region's state, last contact, rounds,\n"
    "dropouts, bytes and privacy budget, and the latest attempts.  q or Ctrl-C\n"
    "quits.  When the aggregator cannot be reached it says so and keeps trying.\n"
    "\n"
    "  --interval MS  time between updates (1000)\n"
    "  --frames N     quit after N updates (scripts; 0 = never)\n" FA_ADMIN_CONNECT_USAGE "\n"
    "Without a terminal on stdout the frames are printed one after another.\n";

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static int parse_ms(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
    char *end;
    errno = 0;
    *out = strtoul(s, &end, 10);
    return s[0] && !*end && !errno && *out >= lo && *out <= hi;
}

/* Writes the frame: in place on a terminal (home, each line cleared to
 * its end, the rest of the screen cleared), else as it is. */
static void show(const char *frame, size_t len, int tty)
{
    if (!tty) {
        fwrite(frame, 1, len, stdout);
        fputs("\n", stdout);
        fflush(stdout);
        return;
    }
    fputs("\x1b[H", stdout);
    for (size_t i = 0; i < len; i++) {
        if (frame[i] == '\n')
            fputs("\x1b[K", stdout);
        fputc(frame[i], stdout);
    }
    fputs("\x1b[J", stdout);
    fflush(stdout);
}

int fa_cmd_watch(int argc, char **argv)
{
    static const char *const extra[] = {"--interval", "--frames", NULL};
    fa_admin_opts o = {.extra = extra};
    fa_admin_client *c = NULL;
    fa_error err = {0};
    struct termios saved;
    struct sigaction sa;
    unsigned long interval = 1000, frames = 0, shown = 0;
    int rc = fa_admin_parse(argc, argv, usage, 0, 0, &o), status = 1;
    int tty_out = isatty(STDOUT_FILENO), tty_in = isatty(STDIN_FILENO), raw = 0, in_open;

    if (rc >= 0)
        return rc;
    if (o.npos) {
        fprintf(stderr, "fedagg watch: unexpected argument '%s'\n\n%s", o.pos[0], usage);
        goto out_usage;
    }
    if (o.extra_val[0] && !parse_ms(o.extra_val[0], 100, 3600000, &interval)) {
        fprintf(stderr, "fedagg watch: --interval '%s' is not a number of ms (100..3600000)\n",
                o.extra_val[0]);
        goto out_usage;
    }
    if (o.extra_val[1] && !parse_ms(o.extra_val[1], 0, 1000000000, &frames)) {
        fprintf(stderr, "fedagg watch: --frames '%s' is not a number\n", o.extra_val[1]);
        goto out_usage;
    }
    fa_log_set_level(FA_LOG_ERROR);
    if (o.timeout_ms > 3000)
        o.timeout_ms = 3000; /* a dead aggregator must not freeze the view */
    rc = fa_admin_client_new(&c, &o, &err);
    if (rc != 0) {
        fprintf(stderr, "fedagg watch: %s\n", fa_error_msg(&err, rc));
        goto out;
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal; /* no SA_RESTART: poll() returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (tty_in && tcgetattr(STDIN_FILENO, &saved) == 0) {
        struct termios t = saved;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* keys one by one, unseen; ISIG stays */
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
    }
    if (tty_out)
        fputs("\x1b[?1049h\x1b[?25l", stdout); /* alternate screen, cursor hidden */
    in_open = tty_in;

    while (!stop_requested) {
        char *json = NULL, *frame = NULL;
        size_t flen = 0;
        int cols = 100, rows = 40;
        struct winsize ws;
        uint64_t next = fa_time_mono_ns() / 1000000u + interval;
        FILE *mem;

        fa_error_clear(&err);
        rc = fa_admin_get(c, "status", &json, NULL, &err);
        if (tty_out && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
            cols = ws.ws_col;
            rows = ws.ws_row - 1; /* never the last line: no scrolling */
        }
        mem = open_memstream(&frame, &flen);
        if (!mem) {
            free(json);
            fprintf(stderr, "fedagg watch: out of memory\n");
            break;
        }
        fa_admin_render_watch(mem, rc == 0 ? json : NULL, rc == 0 ? NULL : fa_error_msg(&err, rc),
                              o.aggregator, fa_time_unix_ms(), cols, rows, tty_out);
        fclose(mem);
        show(frame, flen, tty_out);
        free(frame);
        free(json);
        if (frames && ++shown >= frames)
            break;
        /* until the next update: a key, a signal, or the time */
        for (;;) {
            uint64_t now = fa_time_mono_ns() / 1000000u;
            struct pollfd p = {STDIN_FILENO, POLLIN, 0};
            int n;
            if (stop_requested || now >= next)
                break;
            n = poll(&p, in_open ? 1 : 0, (int)(next - now));
            if (n > 0 && (p.revents & (POLLIN | POLLHUP))) {
                char k;
                ssize_t r = read(STDIN_FILENO, &k, 1);
                if (r == 1 && (k == 'q' || k == 'Q' || k == 3 /* ^C in raw input */))
                    stop_requested = 1;
                else if (r == 0)
                    in_open = 0; /* stdin closed: only signals and --frames end it */
            }
        }
    }
    status = 0;
    if (tty_out) {
        fputs("\x1b[?25h\x1b[?1049l", stdout); /* the cursor and the screen as they were */
        fflush(stdout);
    }
    if (raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
out:
    fa_admin_client_del(c);
    fa_admin_opts_free(&o);
    return status;
out_usage:
    fa_admin_opts_free(&o);
    return 2;
}
