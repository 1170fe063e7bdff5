/* storage_gate.c - see storage_gate.h. */
#include "aggregator/storage_gate.h"

#include <stdio.h>
#include <string.h>

void fa_storage_gate_init(fa_storage_gate *g)
{
    memset(g, 0, sizeof(*g));
}

int fa_storage_gate_fail(fa_storage_gate *g, uint64_t now_ms, const char *reason)
{
    uint64_t before = g->backoff_ms;

    if (!g->blocked) {
        g->blocked = 1;
        g->since_ms = now_ms;
        g->backoff_ms = FA_STORAGE_BACKOFF_MIN_MS;
    } else if (g->backoff_ms < FA_STORAGE_BACKOFF_MAX_MS) {
        g->backoff_ms = g->backoff_ms * 2 > FA_STORAGE_BACKOFF_MAX_MS ? FA_STORAGE_BACKOFF_MAX_MS
                                                                      : g->backoff_ms * 2;
    }
    g->failures++;
    g->total++;
    g->next_ms = now_ms + g->backoff_ms;
    snprintf(g->reason, sizeof(g->reason), "%s", reason ? reason : "storage failed");
    return g->failures == 1 || g->backoff_ms != before;
}

int fa_storage_gate_due(const fa_storage_gate *g, uint64_t now_ms)
{
    return g->blocked && now_ms >= g->next_ms;
}

int fa_storage_gate_ok(fa_storage_gate *g)
{
    int was = g->blocked;
    uint64_t total = g->total;
    fa_storage_gate_init(g);
    g->total = total;
    return was;
}
