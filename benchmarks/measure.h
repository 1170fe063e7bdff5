/* measure.h - clocks, statistics and timed steps shared by the fedagg-bench
 * subcommands.
 *
 * (Not bench_*.c: every benchmarks/bench_<name>.c is a subcommand.) */
#ifndef FA_BENCH_MEASURE_H
#define FA_BENCH_MEASURE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* The monotonic clock, in seconds (fa_time_mono_s). */
double fa_bench_now_s(void);

/* This thread's CPU time, in seconds: a measure of work that does not
 * depend on who else is running. */
double fa_bench_thread_cpu_s(void);

/* qsort comparator of doubles, ascending (NaNs compare equal to all). */
int fa_bench_cmp_double(const void *a, const void *b);

/* The median of the finite values of v[0..n) (the mean of the two middle
 * ones when their count is even); NAN when there is none or no memory. */
double fa_bench_median(const double *v, int n);

/* v with prec decimals into buf, or "null" when it is not finite (JSON has
 * no NaN); returns buf. */
const char *fa_bench_json_num(char *buf, size_t n, double v, int prec);

/* A benchmark's failure, said twice: the JSON line {<head>,"error":"<the
 * message>"} on stdout (head: the fields before, e.g. "\"bench\":\"model\"";
 * the message JSON-escaped, newlines and tabs as spaces) and
 * "fedagg-bench <cmd>: <part>: <the message>" on stderr. */
void fa_bench_verror(const char *cmd, const char *part, const char *head, const char *fmt,
                     va_list ap) __attribute__((format(printf, 4, 0)));

/* Thread-CPU seconds of a region's masking step over d coordinates with n
 * masks on this process's generator (crypto/mask_prg_internal.h): fa_mask_prg_mask block
 * by block from in into an accumulator, with the client's buffers
 * (sodium_malloc); the first mask added, the others alternating in sign.
 * -1 when a generator cannot be keyed or a mask fails. */
double fa_bench_mask_seconds(const uint32_t *in, uint64_t d, size_t n);

#endif
