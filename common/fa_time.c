#include "common/fa_time.h"

#include <errno.h>
#include <time.h>

uint64_t fa_time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t fa_time_mono_ms(void)
{
    return fa_time_mono_ns() / 1000000u;
}

uint64_t fa_time_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

double fa_time_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fa_time_sleep_ms(uint64_t ms, const volatile sig_atomic_t *stop)
{
    struct timespec until;
    int e;

    /* An absolute deadline: a sleep resumed after a signal does not drift. */
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(ms / 1000);
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    for (;;) {
        if (stop && *stop)
            return 1;
        e = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL);
        if (e != EINTR)
            return 0;
    }
}
