/* diags.h - a list of diagnostics for a person, each "file:line:column: message".
 *
 * The text-format parser and the config checker report every problem they
 * find, not only the first, so that `fedagg config check` can show them all
 * at once.  They append to an fa_diags; the caller prints or inspects it.
 */
#ifndef FA_DIAGS_H
#define FA_DIAGS_H

#include <stddef.h>

#include "common/fa_err.h"

typedef struct fa_diags fa_diags;

/* Creates an empty list.  Returns 0 or FA_ERR_NOMEM. */
int fa_diags_new(fa_diags **out);

/* Frees the list.  NULL is a no-op. */
void fa_diags_del(fa_diags *d);

/* Appends "file:line:col: message" (line and col 1-based; file NULL prints
 * "<input>"; line 0 prints "file: message").  Returns 0 or FA_ERR_NOMEM; a
 * failed append is remembered (fa_diags_lost), and fa_diags_count() still
 * counts it so that a caller never mistakes a list that ran out of memory
 * for a clean one. */
int fa_diags_addf(fa_diags *d, const char *file, unsigned line, unsigned col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Number of diagnostics appended (including any lost to out of memory). */
size_t fa_diags_count(const fa_diags *d);

/* How many of them were lost to out of memory: the kept ones are the first
 * fa_diags_count() - fa_diags_lost(). */
size_t fa_diags_lost(const fa_diags *d);

/* The i-th diagnostic kept, or NULL when i is beyond them. */
const char *fa_diags_get(const fa_diags *d, size_t i);

/* Fills err with a message summarising d: the first diagnostic, and "(and
 * N more)" when there are others.  Returns code, or FA_ERR_NOMEM (saying
 * how many were lost) when some could not be kept. */
int fa_diags_to_error(const fa_diags *d, int code, fa_error *err);

#endif
