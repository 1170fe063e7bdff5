/* fa_time.h - clocks.  Cores take timestamps as arguments; only edges call these. */
#ifndef FA_TIME_H
#define FA_TIME_H

#include <stdint.h>

/* Monotonic clock in nanoseconds (for deadlines and durations). */
uint64_t fa_time_mono_ns(void);

/* The monotonic clock in seconds (durations for people and benchmarks). */
double fa_time_mono_s(void);

/* Wall clock in milliseconds since the Unix epoch (for records and logs). */
uint64_t fa_time_unix_ms(void);

#endif
