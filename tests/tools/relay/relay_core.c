/* relay_core.c - the sans-I/O impairment pipeline of fedagg-relay (see relay.h).
 *
 * Queued packets live in one binary min-heap keyed on (release time, arrival
 * sequence), so packets due at the same instant leave in arrival order and the
 * output is a deterministic function of the input.
 */
#include "relay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RS_LOSS, RS_GE, RS_DUP, RS_CORRUPT, RS_JITTER, RS_REORDER, RS_NSTREAMS };

/* xoshiro256** (Blackman and Vigna), seeded through splitmix64. */
typedef struct prng {
    uint64_t s[4];
} prng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void prng_seed(prng *g, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++)
        g->s[i] = splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t prng_next(prng *g)
{
    uint64_t *s = g->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 bits. */
static double prng_unit(prng *g) { return (double)(prng_next(g) >> 11) * 0x1.0p-53; }

static int prng_bernoulli(prng *g, double p)
{
    if (p <= 0.0)
        return 0;
    return prng_unit(g) < p;
}

/* Uniform in [0, n) for 0 < n < 2^53 (plenty for bit indices and
 * nanosecond jitter). */
static uint64_t prng_below(prng *g, uint64_t n)
{
    uint64_t x = (uint64_t)(prng_unit(g) * (double)n);
    return x < n ? x : n - 1;
}

/* A departure scheduled by the token bucket, kept until it leaves the queue. */
typedef struct departure {
    uint64_t at_ns;
    uint64_t len;
} departure;

typedef struct dir_state {
    fa_relay_dir_params p;
    fa_relay_dir_stats st;
    prng rng[RS_NSTREAMS];
    int ge_bad;                 /* Gilbert-Elliott state */
    uint64_t last_release_ns;   /* for jitter that keeps order */
    /* token bucket */
    double tb_tokens;           /* bytes available at tb_time_ns */
    uint64_t tb_time_ns;
    uint64_t queue_bytes;       /* bytes whose departure is still ahead */
    departure *deps;            /* ring of scheduled departures */
    size_t deps_cap, deps_head, deps_len;
} dir_state;

struct fa_relay {
    uint64_t t0_ns;
    uint64_t max_buffer;
    uint64_t seq;
    uint64_t held_bytes;
    fa_relay_pkt **heap;
    size_t heap_len, heap_cap;
    dir_state dir[FA_RELAY_NDIR];
};

void fa_relay_config_default(fa_relay_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->seed = 1;
    cfg->max_buffer = 256ULL << 20;
    for (int d = 0; d < FA_RELAY_NDIR; d++) {
        cfg->dir[d].corrupt_bits = 1;
        cfg->dir[d].reorder_delay_ns = 10000000ULL;
        cfg->dir[d].ge_loss_bad = 1.0;
    }
}

static const char *dir_name(int d) { return d == FA_RELAY_C2S ? "c2s" : "s2c"; }

static int prob_ok(double p) { return p >= 0.0 && p <= 1.0; }

int fa_relay_config_check(const fa_relay_config *cfg, fa_error *err)
{
    for (int d = 0; d < FA_RELAY_NDIR; d++) {
        const fa_relay_dir_params *p = &cfg->dir[d];
        const char *dn = dir_name(d);
        struct {
            const char *name;
            double v;
        } probs[] = {{"loss", p->loss},           {"ge p", p->ge_p},
                     {"ge r", p->ge_r},           {"ge loss_bad", p->ge_loss_bad},
                     {"ge loss_good", p->ge_loss_good}, {"reorder", p->reorder},
                     {"duplicate", p->duplicate}, {"corrupt", p->corrupt}};
        for (size_t i = 0; i < sizeof(probs) / sizeof(probs[0]); i++)
            if (!prob_ok(probs[i].v))
                return fa_errorf(err, FA_ERR_INVAL,
                                 "relay %s %s: probability %g is outside [0, 1]", dn,
                                 probs[i].name, probs[i].v);
        if (p->ge_p > 0 && p->ge_r <= 0)
            return fa_errorf(err, FA_ERR_INVAL,
                             "relay %s Gilbert-Elliott: r (bad -> good) must be > 0 when p > 0",
                             dn);
        if (p->corrupt > 0 && p->corrupt_bits == 0)
            return fa_errorf(err, FA_ERR_INVAL, "relay %s corrupt: bits must be >= 1", dn);
        if (p->rate > 0) {
            /* 0 means "the default" (set by fa_relay_new). */
            if (p->rate_burst != 0 && p->rate_burst < 1500)
                return fa_errorf(err, FA_ERR_INVAL,
                                 "relay %s rate-burst %llu bytes is below one 1500-byte packet",
                                 dn, (unsigned long long)p->rate_burst);
            if (p->queue_limit != 0 && p->queue_limit < 1500)
                return fa_errorf(err, FA_ERR_INVAL,
                                 "relay %s queue-limit %llu bytes is below one 1500-byte packet",
                                 dn, (unsigned long long)p->queue_limit);
        }
        if (p->nblackholes > FA_RELAY_MAX_BLACKHOLES)
            return fa_errorf(err, FA_ERR_INVAL, "relay %s: more than %d blackhole windows", dn,
                             FA_RELAY_MAX_BLACKHOLES);
    }
    if (cfg->max_buffer < FA_RELAY_MAX_DATAGRAM)
        return fa_errorf(err, FA_ERR_INVAL, "relay max-buffer %llu is below one datagram (%d)",
                         (unsigned long long)cfg->max_buffer, FA_RELAY_MAX_DATAGRAM);
    return 0;
}

int fa_relay_new(fa_relay **out, const fa_relay_config *cfg, uint64_t now_ns, fa_error *err)
{
    fa_relay *r;
    int rv;

    *out = NULL;
    if ((rv = fa_relay_config_check(cfg, err)) != 0)
        return rv;
    r = calloc(1, sizeof(*r));
    if (!r)
        return fa_errorf(err, FA_ERR_NOMEM, "relay: out of memory");
    r->t0_ns = now_ns;
    r->max_buffer = cfg->max_buffer;
    for (int d = 0; d < FA_RELAY_NDIR; d++) {
        dir_state *ds = &r->dir[d];
        ds->p = cfg->dir[d];
        if (ds->p.rate > 0 && ds->p.rate_burst == 0) /* 2 ms worth, at least 2 packets */
            ds->p.rate_burst = ds->p.rate / 500 > 3000 ? ds->p.rate / 500 : 3000;
        if (ds->p.rate > 0 && ds->p.queue_limit == 0) /* 100 ms worth, at least 64 KiB */
            ds->p.queue_limit = ds->p.rate / 10 > 65536 ? ds->p.rate / 10 : 65536;
        for (int s = 0; s < RS_NSTREAMS; s++)
            prng_seed(&ds->rng[s], cfg->seed, (uint64_t)d * 16 + (uint64_t)s + 1);
        ds->tb_tokens = (double)ds->p.rate_burst;
        ds->tb_time_ns = now_ns;
    }
    *out = r;
    return 0;
}

void fa_relay_del(fa_relay *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->heap_len; i++)
        free(r->heap[i]);
    free(r->heap);
    for (int d = 0; d < FA_RELAY_NDIR; d++)
        free(r->dir[d].deps);
    free(r);
}

void fa_relay_set_t0(fa_relay *r, uint64_t t0_ns) { r->t0_ns = t0_ns; }

uint64_t fa_relay_t0(const fa_relay *r) { return r->t0_ns; }

int fa_relay_blackhole_add(fa_relay *r, int dir, uint64_t start_ns, uint64_t duration_ns)
{
    int lo = dir < 0 ? 0 : dir, hi = dir < 0 ? FA_RELAY_NDIR : dir + 1;

    if (dir < -1 || dir >= FA_RELAY_NDIR)
        return FA_ERR_INVAL;
    for (int d = lo; d < hi; d++)
        if (r->dir[d].p.nblackholes >= FA_RELAY_MAX_BLACKHOLES)
            return FA_ERR_RANGE;
    for (int d = lo; d < hi; d++) {
        fa_relay_dir_params *p = &r->dir[d].p;
        p->blackholes[p->nblackholes++] = (fa_relay_window){start_ns, duration_ns};
    }
    return 0;
}

/* --- heap ---------------------------------------------------------------- */

static int pkt_before(const fa_relay_pkt *a, const fa_relay_pkt *b)
{
    return a->release_ns < b->release_ns || (a->release_ns == b->release_ns && a->seq < b->seq);
}

static int heap_push(fa_relay *r, fa_relay_pkt *p)
{
    size_t i;

    if (r->heap_len == r->heap_cap) {
        size_t cap = r->heap_cap ? r->heap_cap * 2 : 256;
        fa_relay_pkt **h = realloc(r->heap, cap * sizeof(*h));
        if (!h)
            return FA_ERR_NOMEM;
        r->heap = h;
        r->heap_cap = cap;
    }
    i = r->heap_len++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pkt_before(p, r->heap[parent]))
            break;
        r->heap[i] = r->heap[parent];
        i = parent;
    }
    r->heap[i] = p;
    return 0;
}

static fa_relay_pkt *heap_pop(fa_relay *r)
{
    fa_relay_pkt *top = r->heap[0], *last = r->heap[--r->heap_len];
    size_t i = 0, n = r->heap_len;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pkt_before(r->heap[c + 1], r->heap[c]))
            c++;
        if (!pkt_before(r->heap[c], last))
            break;
        r->heap[i] = r->heap[c];
        i = c;
    }
    if (n > 0)
        r->heap[i] = last;
    return top;
}

/* --- token bucket -------------------------------------------------------- */

static int deps_push(dir_state *ds, uint64_t at_ns, uint64_t len)
{
    if (ds->deps_len == ds->deps_cap) {
        size_t cap = ds->deps_cap ? ds->deps_cap * 2 : 256;
        departure *n = malloc(cap * sizeof(*n));
        if (!n)
            return FA_ERR_NOMEM;
        for (size_t i = 0; i < ds->deps_len; i++)
            n[i] = ds->deps[(ds->deps_head + i) % ds->deps_cap];
        free(ds->deps);
        ds->deps = n;
        ds->deps_cap = cap;
        ds->deps_head = 0;
    }
    ds->deps[(ds->deps_head + ds->deps_len) % ds->deps_cap] = (departure){at_ns, len};
    ds->deps_len++;
    ds->queue_bytes += len;
    return 0;
}

/* Forgets the departures at or before now: those bytes have left the queue. */
static void deps_expire(dir_state *ds, uint64_t now_ns)
{
    while (ds->deps_len > 0) {
        departure *d = &ds->deps[ds->deps_head];
        if (d->at_ns > now_ns)
            break;
        ds->queue_bytes -= d->len;
        ds->deps_head = (ds->deps_head + 1) % ds->deps_cap;
        ds->deps_len--;
    }
}

/* Returns 0 and the departure time of a len-byte packet arriving at now,
 * 1 when the queue is full (drop-tail), or FA_ERR_NOMEM. */
static int token_bucket(dir_state *ds, uint64_t now_ns, uint64_t len, uint64_t *dep_ns)
{
    const fa_relay_dir_params *p = &ds->p;
    uint64_t start, at;
    double tokens;

    deps_expire(ds, now_ns);
    if (ds->queue_bytes + len > p->queue_limit)
        return 1;
    /* The bucket state is known at tb_time; a backlog means the next packet
     * waits for the previous departure first. */
    start = now_ns > ds->tb_time_ns ? now_ns : ds->tb_time_ns;
    tokens = ds->tb_tokens + (double)(start - ds->tb_time_ns) * (double)p->rate / 1e9;
    if (tokens > (double)p->rate_burst)
        tokens = (double)p->rate_burst;
    at = start;
    if (tokens < (double)len) {
        at += (uint64_t)ceil(((double)len - tokens) * 1e9 / (double)p->rate);
        tokens = (double)len;
    }
    if (deps_push(ds, at, len) != 0)
        return FA_ERR_NOMEM;
    ds->tb_tokens = tokens - (double)len;
    ds->tb_time_ns = at;
    *dep_ns = at;
    return 0;
}

/* --- pipeline ------------------------------------------------------------ */

static int in_blackhole(const fa_relay *r, const dir_state *ds, uint64_t now_ns)
{
    uint64_t t;

    if (ds->p.nblackholes == 0 || now_ns < r->t0_ns)
        return 0;
    t = now_ns - r->t0_ns;
    for (unsigned i = 0; i < ds->p.nblackholes; i++) {
        const fa_relay_window *w = &ds->p.blackholes[i];
        if (t >= w->start_ns && t - w->start_ns < w->duration_ns)
            return 1;
    }
    return 0;
}

/* The Gilbert-Elliott chain: the loss is drawn in the current state, then
 * the state moves (Gilbert 1960, Elliott 1963; as in netem's "loss gemodel"). */
static int ge_lose(dir_state *ds)
{
    prng *g = &ds->rng[RS_GE];
    int lost;

    if (ds->p.ge_p <= 0.0)
        return 0;
    lost = prng_bernoulli(g, ds->ge_bad ? ds->p.ge_loss_bad : ds->p.ge_loss_good);
    if (ds->ge_bad)
        ds->ge_bad = !prng_bernoulli(g, ds->p.ge_r);
    else
        ds->ge_bad = prng_bernoulli(g, ds->p.ge_p);
    return lost;
}

static void corrupt(dir_state *ds, uint8_t *data, size_t len)
{
    uint64_t nbits = (uint64_t)len * 8, chosen[64];
    unsigned want = ds->p.corrupt_bits, n = 0;

    if (want > 64)
        want = 64;
    if (want > nbits)
        want = (unsigned)nbits;
    while (n < want) {
        uint64_t b = prng_below(&ds->rng[RS_CORRUPT], nbits);
        unsigned i;
        /* Distinct bits: flipping one twice would undo the damage. */
        for (i = 0; i < n && chosen[i] != b; i++)
            ;
        if (i < n)
            continue;
        chosen[n++] = b;
        data[b / 8] ^= (uint8_t)(1u << (b % 8));
    }
}

/* Queues one copy of the packet; returns 1 if queued, 0 if dropped,
 * FA_ERR_NOMEM. */
static int enqueue_copy(fa_relay *r, int dir, uint64_t now_ns, const uint8_t *data, size_t len,
                        uint64_t tag)
{
    dir_state *ds = &r->dir[dir];
    const fa_relay_dir_params *p = &ds->p;
    uint64_t dep = now_ns, release;
    fa_relay_pkt *pkt;
    int rv;

    if (r->held_bytes + len > r->max_buffer) {
        ds->st.dropped_buffer++;
        return 0;
    }
    pkt = malloc(sizeof(*pkt) + (len ? len : 1));
    if (!pkt) {
        ds->st.dropped_buffer++;
        return FA_ERR_NOMEM;
    }
    pkt->data = (uint8_t *)(pkt + 1);
    pkt->len = len;
    if (len)
        memcpy(pkt->data, data, len);

    if (p->corrupt > 0 && prng_bernoulli(&ds->rng[RS_CORRUPT], p->corrupt) && len > 0) {
        corrupt(ds, pkt->data, len);
        ds->st.corrupted++;
    }

    if (p->rate > 0) {
        rv = token_bucket(ds, now_ns, len, &dep);
        if (rv != 0) {
            free(pkt);
            ds->st.dropped_queue++;
            return rv == 1 ? 0 : rv;
        }
    }

    release = dep + p->delay_ns;
    if (p->jitter_ns > 0) {
        /* Uniform in [-jitter, +jitter]; the delay never goes below zero. */
        uint64_t span = 2 * p->jitter_ns + 1;
        uint64_t x = prng_below(&ds->rng[RS_JITTER], span);
        if (x >= p->jitter_ns)
            release += x - p->jitter_ns;
        else
            release = (release - dep > p->jitter_ns - x) ? release - (p->jitter_ns - x) : dep;
        if (!p->jitter_reorder && release < ds->last_release_ns)
            release = ds->last_release_ns;
    }
    if (p->reorder > 0 && prng_bernoulli(&ds->rng[RS_REORDER], p->reorder)) {
        /* Held back and, unlike the others, not a floor for the next ones:
         * the packets behind it overtake it. */
        release += p->reorder_delay_ns;
        ds->st.reordered++;
    } else if (release > ds->last_release_ns) {
        ds->last_release_ns = release;
    }

    pkt->release_ns = release;
    pkt->tag = tag;
    pkt->seq = r->seq++;
    pkt->dir = dir;
    if (heap_push(r, pkt) != 0) {
        free(pkt);
        ds->st.dropped_buffer++;
        return FA_ERR_NOMEM;
    }
    r->held_bytes += len;
    return 1;
}

int fa_relay_push(fa_relay *r, int dir, uint64_t now_ns, const uint8_t *data, size_t len,
                  uint64_t tag)
{
    dir_state *ds;
    int copies, queued = 0, rv;

    if (dir < 0 || dir >= FA_RELAY_NDIR || len > FA_RELAY_MAX_DATAGRAM || (!data && len))
        return FA_ERR_INVAL;
    ds = &r->dir[dir];
    ds->st.in++;
    ds->st.bytes_in += len;

    if (in_blackhole(r, ds, now_ns)) {
        ds->st.dropped_blackhole++;
        return 0;
    }
    /* Both loss processes always advance, so each keeps its own pattern
     * whatever the other does. */
    {
        int lost_random = ds->p.loss > 0 && prng_bernoulli(&ds->rng[RS_LOSS], ds->p.loss);
        int lost_burst = ge_lose(ds);
        if (lost_random) {
            ds->st.dropped_loss++;
            return 0;
        }
        if (lost_burst) {
            ds->st.dropped_burst++;
            return 0;
        }
    }
    copies = 1;
    if (ds->p.duplicate > 0 && prng_bernoulli(&ds->rng[RS_DUP], ds->p.duplicate)) {
        copies = 2;
        ds->st.duplicated++;
    }
    for (int i = 0; i < copies; i++) {
        rv = enqueue_copy(r, dir, now_ns, data, len, tag);
        if (rv < 0)
            return rv;
        queued += rv;
    }
    return queued;
}

fa_relay_pkt *fa_relay_pop(fa_relay *r, uint64_t now_ns)
{
    fa_relay_pkt *p;

    if (r->heap_len == 0 || r->heap[0]->release_ns > now_ns)
        return NULL;
    p = heap_pop(r);
    r->held_bytes -= p->len;
    r->dir[p->dir].st.out++;
    r->dir[p->dir].st.bytes_out += p->len;
    return p;
}

void fa_relay_pkt_free(fa_relay *r, fa_relay_pkt *p)
{
    (void)r;
    free(p);
}

uint64_t fa_relay_next_release(const fa_relay *r)
{
    return r->heap_len ? r->heap[0]->release_ns : UINT64_MAX;
}

size_t fa_relay_queued(const fa_relay *r) { return r->heap_len; }

uint64_t fa_relay_queued_bytes(const fa_relay *r) { return r->held_bytes; }

void fa_relay_count_edge_drop(fa_relay *r, int dir, size_t len)
{
    if (dir < 0 || dir >= FA_RELAY_NDIR)
        return;
    if (r->dir[dir].st.out > 0)
        r->dir[dir].st.out--;
    if (r->dir[dir].st.bytes_out >= len)
        r->dir[dir].st.bytes_out -= len;
    r->dir[dir].st.dropped_edge++;
}

const fa_relay_dir_stats *fa_relay_stats(const fa_relay *r, int dir) { return &r->dir[dir].st; }

void fa_relay_stats_format(const fa_relay *r, char *buf, size_t n)
{
    size_t off = 0;

    if (n == 0)
        return;
    buf[0] = '\0';
    for (int d = 0; d < FA_RELAY_NDIR && off < n; d++) {
        const fa_relay_dir_stats *s = &r->dir[d].st;
        uint64_t dropped = s->dropped_loss + s->dropped_burst + s->dropped_blackhole +
                           s->dropped_queue + s->dropped_buffer + s->dropped_edge;
        const char *dn = dir_name(d);
        int w = snprintf(buf + off, n - off,
                         "%s%s_in=%llu %s_out=%llu %s_dropped=%llu %s_corrupted=%llu "
                         "%s_duplicated=%llu %s_reordered=%llu %s_bytes_in=%llu "
                         "%s_bytes_out=%llu %s_dropped_loss=%llu %s_dropped_burst=%llu "
                         "%s_dropped_blackhole=%llu %s_dropped_queue=%llu "
                         "%s_dropped_buffer=%llu %s_dropped_edge=%llu",
                         d ? " " : "", dn, (unsigned long long)s->in, dn,
                         (unsigned long long)s->out, dn, (unsigned long long)dropped, dn,
                         (unsigned long long)s->corrupted, dn, (unsigned long long)s->duplicated,
                         dn, (unsigned long long)s->reordered, dn,
                         (unsigned long long)s->bytes_in, dn, (unsigned long long)s->bytes_out,
                         dn, (unsigned long long)s->dropped_loss, dn,
                         (unsigned long long)s->dropped_burst, dn,
                         (unsigned long long)s->dropped_blackhole, dn,
                         (unsigned long long)s->dropped_queue, dn,
                         (unsigned long long)s->dropped_buffer, dn,
                         (unsigned long long)s->dropped_edge);
        if (w < 0)
            break;
        off += (size_t)w;
    }
}
