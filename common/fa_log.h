/* fa_log.h - one logfmt line per event on stderr.
 *
 *   ts=2026-11-30T03:45:54.123Z level=info msg="round started" round=12 region=eu-west
 *
 * The caller passes the message and a printf-style tail of key=value pairs.
 * Every string the tail formats (%s, %c) is escaped by fa_log itself, for
 * where it stands in the format, so that no value -- a region id from a
 * certificate, a peer's CONNECTION_CLOSE reason, a name from a file --
 * can end the line, forge a key, or write bytes a terminal or grep would
 * trip over:
 *   key="%s"   inside the format's own quotes: \" \\ \n \r \t escaped;
 *   key=%s     a whole value (before a space or the end): bare when it
 *              has no space, quote, '=', backslash or control character,
 *              else quoted and escaped as above (a value fa_log_quote
 *              already quoted is kept as it is);
 *   elsewhere  (%s=%d, addr=%s:%d): escaped as above, and space and '='
 *              as \x20 and \x3d, so the part stays inside its token.
 * Everywhere, other control characters and DEL become \xHH, bytes that
 * are not well-formed UTF-8 \xHH, and C1 controls, U+2028/9 and the
 * bidirectional controls \uHHHH: the log stays valid UTF-8, one line per
 * event.  Numbers are printed as printf prints them.  The message is one
 * value too.  A line longer than 4 KiB is cut (closing its quote).
 *
 * Never pass a secret (key, seed, share) to any of these functions.
 */
#ifndef FA_LOG_H
#define FA_LOG_H

#include <stddef.h>

enum fa_log_level { FA_LOG_DEBUG = 0, FA_LOG_INFO = 1, FA_LOG_WARN = 2, FA_LOG_ERROR = 3 };

/* Sets the minimum level written (default info; the environment variable
 * FEDAGG_LOG_LEVEL=debug|info|warn|error overrides at the first log call).
 * Called from main only. */
void fa_log_set_level(int level);

/* Parses "debug", "info", "warn", "error"; returns the level or -1. */
int fa_log_level_parse(const char *name);

/* Sets a key=value prefix added to every line of this process after the
 * message, e.g. "proc=aggregator" or "region=eu-west rank=0".  Called from
 * main only; the string is copied with its control characters and
 * malformed UTF-8 escaped. */
void fa_log_set_context(const char *kv);

/* Sets a key=value scope added after the context to every line this thread
 * writes until it is set again ("" or NULL: none), e.g. "federation=beta"
 * while an aggregation service works on one of its federations.  The
 * caller passes plain key=value text (fa_log_quote a value that needs
 * it); the string is copied. */
void fa_log_set_scope(const char *kv);

int fa_log_enabled(int level);

/* Writes one line with a single write(2), so concurrent processes sharing
 * stderr do not interleave within a line.  kvfmt may be NULL. */
void fa_log(int level, const char *msg, const char *kvfmt, ...)
    __attribute__((format(printf, 3, 4)));

#define fa_log_debug(msg, ...) fa_log(FA_LOG_DEBUG, msg, __VA_ARGS__)
#define fa_log_info(msg, ...) fa_log(FA_LOG_INFO, msg, __VA_ARGS__)
#define fa_log_warn(msg, ...) fa_log(FA_LOG_WARN, msg, __VA_ARGS__)
#define fa_log_error(msg, ...) fa_log(FA_LOG_ERROR, msg, __VA_ARGS__)

/* Writes s into buf as one logfmt value, as fa_log writes a key=%s value:
 * bare when it has no space, quote, '=', backslash or control character,
 * otherwise double-quoted with the escapes above.  fa_log needs no such
 * help; this is for text that goes elsewhere (a status line, a file).
 * Always NUL-terminates (truncating at an escape's boundary); returns buf. */
char *fa_log_quote(char *buf, size_t n, const char *s);

#endif
