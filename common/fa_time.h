/* fa_time.h - clocks, and sleeping on them.  Cores take timestamps as
 * arguments; only edges call these. */
#ifndef FA_TIME_H
#define FA_TIME_H

#include <signal.h>
#include <stdint.h>

/* Monotonic clock in nanoseconds (for deadlines and durations). */
uint64_t fa_time_mono_ns(void);

/* The same in milliseconds (the unit of the deadlines the daemons give
 * their cores). */
uint64_t fa_time_mono_ms(void);

/* The monotonic clock in seconds (durations for people and benchmarks). */
double fa_time_mono_s(void);

/* Wall clock in milliseconds since the Unix epoch (for records and logs). */
uint64_t fa_time_unix_ms(void);

/* Sleeps ms milliseconds of the monotonic clock.  A signal does not cut
 * the sleep short unless stop is not NULL and *stop is set (by the
 * handler, or before the call): then it returns at once.  Returns 0 after
 * the full time, 1 when *stop ended it. */
int fa_time_sleep_ms(uint64_t ms, const volatile sig_atomic_t *stop);

#endif
