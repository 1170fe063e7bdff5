/* memory_budget.c - see memory_budget.h. */
#include "aggregator/memory_budget.h"

#include "aggregator/upload_journal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void fa_memory_round_need(uint64_t d, size_t n_state, uint32_t in_flight, uint64_t masked_bytes,
                          uint64_t journal_memory, fa_memory_need *out)
{
    const uint64_t mib = (uint64_t)1 << 20;
    out->sum = 4 * (d + 1);
    out->step = (3 + 2 * (uint64_t)n_state) * mib; /* delta, weights, raw; state in and out */
    out->uploads = fa_upload_journal_memory_need(in_flight, masked_bytes, journal_memory);
    out->requests = 0;
    out->initial = 4 * d;
    out->total = out->sum + out->step + out->uploads;
    if (out->initial > out->total)
        out->total = out->initial;
}

void fa_memory_add_requests(fa_memory_need *n, uint64_t bytes)
{
    n->requests += bytes;
    n->total = n->sum + n->step + n->uploads + n->requests;
    if (n->initial > n->total)
        n->total = n->initial;
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
    return fa_memory_check_beside(n, 0, 0, limit, source, err);
}

int fa_memory_check_beside(const fa_memory_need *n, uint64_t used, size_t others, uint64_t limit,
                           const char *source, fa_error *err)
{
    const double mib = 1048576.0;
    if (used <= limit && n->total <= limit - used)
        return 0;
    if (others)
        return fa_errorf(err, FA_ERR_NOSPACE,
                         "a round needs about %.1f MiB at the aggregator (secure-aggregation sum "
                         "%.1f, streamed optimizer step %.1f, journals of the uploads in flight "
                         "%.1f, request bodies being received %.1f (quic.max_buffered_request_"
                         "bytes, the service's, once); the initial model, once at start, %.1f) but "
                         "the service may use %.1f MiB (%s), of which the %zu other federation%s "
                         "that can run a round hold %.1f: %.1f MiB are left.  Raise the limit, "
                         "finish or archive a federation, or federate fewer tensors "
                         "(model.federated)",
                         (double)n->total / mib, (double)n->sum / mib, (double)n->step / mib,
                         (double)n->uploads / mib, (double)n->requests / mib,
                         (double)n->initial / mib, (double)limit / mib, source, others,
                         others == 1 ? "" : "s", (double)used / mib,
                         used < limit ? (double)(limit - used) / mib : 0.0);
    return fa_errorf(err, FA_ERR_NOSPACE,
                     "a round needs about %.1f MiB at the aggregator (secure-aggregation sum "
                     "%.1f, streamed optimizer step %.1f, journals of the uploads in flight %.1f, "
                     "request bodies being received %.1f (quic.max_buffered_request_bytes); "
                     "the initial model, once at start, %.1f) but it may use %.1f MiB (%s): "
                     "raise the limit, or federate fewer tensors (model.federated)",
                     (double)n->total / mib, (double)n->sum / mib, (double)n->step / mib,
                     (double)n->uploads / mib, (double)n->requests / mib, (double)n->initial / mib,
                     (double)limit / mib, source);
}
