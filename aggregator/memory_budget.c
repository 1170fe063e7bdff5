/* memory_budget.c - see memory_budget.h. */
#include "aggregator/memory_budget.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fa_memory_round_need(uint64_t d, size_t n_state, uint32_t in_flight, uint64_t masked_bytes,
                          fa_memory_need *out)
{
    out->master = 4 * d;
    out->optimizer = 8 * d * (uint64_t)n_state;
    out->sum = 4 * (d + 1);
    out->step = 8 * d;
    out->uploads = (uint64_t)in_flight * masked_bytes;
    out->total = out->master + out->optimizer + out->sum + out->step + out->uploads;
}

/* A number in a one-line file; 0 when absent, unreadable or "max". */
static uint64_t read_limit(const char *path)
{
    char buf[64];
    FILE *f = fopen(path, "r");
    uint64_t v = 0;
    if (!f)
        return 0;
    if (fgets(buf, sizeof(buf), f) && strncmp(buf, "max", 3) != 0)
        v = strtoull(buf, NULL, 10);
    fclose(f);
    /* cgroup v1 writes "no limit" as a huge number near 2^63 */
    return v >= ((uint64_t)1 << 60) ? 0 : v;
}

int fa_memory_limit(uint64_t configured, uint64_t *limit, const char **source, fa_error *err)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t v;

    if (configured) {
        *limit = configured;
        *source = "memory_limit_bytes in the config";
        return 0;
    }
    if ((v = read_limit("/sys/fs/cgroup/memory.max")) != 0) {
        *limit = v;
        *source = "the cgroup's memory.max";
        return 0;
    }
    if ((v = read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes")) != 0) {
        *limit = v;
        *source = "the cgroup's memory.limit_in_bytes";
        return 0;
    }
    if (pages <= 0 || page <= 0)
        return fa_errorf(err, FA_ERR_IO, "cannot tell how much memory this machine has");
    *limit = (uint64_t)pages * (uint64_t)page;
    *source = "the machine's memory";
    return 0;
}

int fa_memory_check(const fa_memory_need *n, uint64_t limit, const char *source, fa_error *err)
{
    const double mib = 1048576.0;
    if (n->total <= limit)
        return 0;
    return fa_errorf(err, FA_ERR_NOSPACE,
                     "a round needs about %.1f MiB at the aggregator (master weights %.1f, "
                     "optimizer state %.1f, secure-aggregation sum %.1f, the optimizer step %.1f, "
                     "uploads in flight %.1f) but it may use %.1f MiB (%s): raise the limit, "
                     "lower round.max_uploads_in_flight, use a server optimizer with less state, "
                     "or federate fewer tensors (model.federated)",
                     (double)n->total / mib, (double)n->master / mib, (double)n->optimizer / mib,
                     (double)n->sum / mib, (double)n->step / mib, (double)n->uploads / mib,
                     (double)limit / mib, source);
}
