/* relay.h - the impairment core of fedagg-relay, a UDP relay that stands in
 * for netem on machines whose kernel has none.
 *
 * The core does no I/O: it takes datagrams with a direction, an opaque tag
 * (the edge's session) and a timestamp, decides per direction what a lossy
 * WAN path would do to them (blackhole, random and Gilbert-Elliott loss,
 * duplication, corruption, token-bucket rate limit with a drop-tail queue,
 * fixed delay, jitter, reordering), and hands them back when their release
 * time has come.  Every random decision comes from a seeded PRNG, one stream
 * per direction and per impairment, so a given packet sequence with given
 * timestamps always yields the same output, and switching one impairment on
 * does not change the pattern of another (the habit of quicly's t/lossy.c).
 *
 *   fa_relay_new(&r, &cfg, now, &err);
 *   fa_relay_push(r, FA_RELAY_C2S, now, data, len, tag);   for each datagram
 *   while ((p = fa_relay_pop(r, now)) != NULL) { send p->data, p->len; fa_relay_pkt_free(r, p); }
 *   fa_relay_next_release(r) tells when to call fa_relay_pop next.
 *
 * The order of the pipeline (per direction) follows netem: blackhole, loss,
 * duplication, corruption, rate limit (serialisation on the link), then
 * propagation delay with jitter and reordering.
 */
#ifndef FA_RELAY_H
#define FA_RELAY_H

#include <stddef.h>
#include <stdint.h>

#include "common/fa_err.h"

enum { FA_RELAY_C2S = 0, FA_RELAY_S2C = 1, FA_RELAY_NDIR = 2 };

#define FA_RELAY_MAX_BLACKHOLES 16
#define FA_RELAY_MAX_DATAGRAM 65535

/* One blackhole window: every packet pushed at t0 + start <= now < t0 + start
 * + duration is dropped. */
typedef struct fa_relay_window {
    uint64_t start_ns;
    uint64_t duration_ns;
} fa_relay_window;

/* What one direction of the path does.  All zero: a perfect pipe. */
typedef struct fa_relay_dir_params {
    uint64_t delay_ns;          /* fixed one-way delay */
    uint64_t jitter_ns;         /* uniform extra delay in [-jitter, +jitter], floor 0 */
    int jitter_reorder;         /* 0: release times never go backwards (order kept) */
    double loss;                /* independent (Bernoulli) loss probability */
    /* Gilbert-Elliott: a two-state Markov chain advanced once per packet.
     * Enabled when ge_p > 0.  Mean loss = (p * loss_bad + r * loss_good) / (p + r);
     * mean time in the bad state = 1 / r packets. */
    double ge_p;                /* P(good -> bad) */
    double ge_r;                /* P(bad -> good) */
    double ge_loss_bad;         /* loss probability in the bad state (1 - h) */
    double ge_loss_good;        /* loss probability in the good state (1 - k) */
    double reorder;             /* probability that a packet is held back... */
    uint64_t reorder_delay_ns;  /* ...by this much more, so later ones overtake it */
    double duplicate;           /* probability that a packet is sent twice */
    double corrupt;             /* probability that a packet gets bits flipped */
    unsigned corrupt_bits;      /* how many random bits are flipped (>= 1) */
    uint64_t rate;              /* token bucket rate in bytes/s; 0 = unlimited */
    uint64_t rate_burst;        /* bucket depth in bytes; 0: max(3000, 2 ms of rate) */
    uint64_t queue_limit;       /* bytes waiting for tokens, beyond: drop-tail;
                                 * 0: max(64 KiB, 100 ms of rate) */
    unsigned nblackholes;
    fa_relay_window blackholes[FA_RELAY_MAX_BLACKHOLES];
} fa_relay_dir_params;

typedef struct fa_relay_config {
    uint64_t seed;
    uint64_t max_buffer;        /* bytes held in all queues together; beyond: drop */
    fa_relay_dir_params dir[FA_RELAY_NDIR];
} fa_relay_config;

/* Counters of one direction.  in = out + every dropped_* + packets still
 * queued - duplicated (a duplicate is an extra packet that is also counted
 * in out or dropped). */
typedef struct fa_relay_dir_stats {
    uint64_t in, out;
    uint64_t bytes_in, bytes_out;
    uint64_t dropped_loss;      /* independent loss */
    uint64_t dropped_burst;     /* Gilbert-Elliott loss */
    uint64_t dropped_blackhole;
    uint64_t dropped_queue;     /* rate limiter queue full */
    uint64_t dropped_buffer;    /* max_buffer reached */
    uint64_t dropped_edge;      /* dropped by the edge (fa_relay_count_edge_drop) */
    uint64_t corrupted, duplicated, reordered;
} fa_relay_dir_stats;

/* A packet handed back by fa_relay_pop. */
typedef struct fa_relay_pkt {
    uint64_t release_ns;        /* when it was due */
    uint64_t tag;               /* as given to fa_relay_push */
    uint64_t seq;               /* arrival order (a duplicate gets its own) */
    int dir;
    size_t len;
    uint8_t *data;              /* len bytes, owned by the packet */
} fa_relay_pkt;

typedef struct fa_relay fa_relay;

/* Sets cfg to a perfect pipe: seed 1, no impairment, max_buffer 256 MiB,
 * corrupt_bits 1, reorder_delay 10 ms, GE loss_bad 1. */
void fa_relay_config_default(fa_relay_config *cfg);

/* Checks that probabilities lie in [0, 1], a rate has a burst and a queue
 * that hold at least one full datagram, and so on.  Returns 0 or
 * FA_ERR_INVAL with a message naming the direction and the setting. */
int fa_relay_config_check(const fa_relay_config *cfg, fa_error *err);

/* Creates a relay core; now_ns is t = 0 for the blackhole windows.  The
 * configuration is copied.  Returns 0, FA_ERR_INVAL or FA_ERR_NOMEM. */
int fa_relay_new(fa_relay **out, const fa_relay_config *cfg, uint64_t now_ns, fa_error *err);

/* Frees the relay and every packet it still holds.  NULL is a no-op. */
void fa_relay_del(fa_relay *r);

/* Moves the time origin of the blackhole windows (used by the edge for
 * "--t0 first-packet"). */
void fa_relay_set_t0(fa_relay *r, uint64_t t0_ns);

/* Adds a blackhole window [start_ns, start_ns + duration_ns) relative to t0
 * to direction dir, or to both when dir is -1 (used by the edge for a
 * blackhole started by a signal).  Returns 0, FA_ERR_INVAL for a bad
 * direction, or FA_ERR_RANGE when a direction already has
 * FA_RELAY_MAX_BLACKHOLES windows. */
int fa_relay_blackhole_add(fa_relay *r, int dir, uint64_t start_ns, uint64_t duration_ns);

/* The time origin of the blackhole windows. */
uint64_t fa_relay_t0(const fa_relay *r);

/* Submits one datagram travelling in direction dir (FA_RELAY_C2S or
 * FA_RELAY_S2C) at time now_ns.  The data is copied.  Returns the number of
 * copies queued (0 when dropped, 2 when duplicated), FA_ERR_INVAL for a bad
 * direction or length, or FA_ERR_NOMEM (the packet then counts as dropped
 * for the buffer). */
int fa_relay_push(fa_relay *r, int dir, uint64_t now_ns, const uint8_t *data, size_t len,
                  uint64_t tag);

/* Returns the packet with the earliest release time if it is <= now_ns
 * (ties in arrival order), else NULL.  The caller frees it with
 * fa_relay_pkt_free after sending, and the packet counts as out. */
fa_relay_pkt *fa_relay_pop(fa_relay *r, uint64_t now_ns);

void fa_relay_pkt_free(fa_relay *r, fa_relay_pkt *p);

/* The earliest release time of a queued packet, or UINT64_MAX when empty. */
uint64_t fa_relay_next_release(const fa_relay *r);

/* Packets and bytes currently queued. */
size_t fa_relay_queued(const fa_relay *r);
uint64_t fa_relay_queued_bytes(const fa_relay *r);

/* Records that the edge dropped a popped packet (its session was gone, or
 * the socket refused it); moves it from out to dropped_edge. */
void fa_relay_count_edge_drop(fa_relay *r, int dir, size_t len);

const fa_relay_dir_stats *fa_relay_stats(const fa_relay *r, int dir);

/* Writes the counters of both directions as logfmt pairs
 * ("c2s_in=10 c2s_out=9 ... s2c_in=..."); always NUL-terminates. */
void fa_relay_stats_format(const fa_relay *r, char *buf, size_t n);

/* --- command line (relay_config.c) ------------------------------------- */

/* Applies a named profile to both directions: "wan80", "wan220",
 * "corrupt3" or "none".  Returns 0 or FA_ERR_NOTFOUND naming the profiles. */
int fa_relay_profile_apply(fa_relay_config *cfg, const char *name, fa_error *err);

/* Parses one impairment option, name without the leading "--" (e.g. "delay",
 * "c2s-loss", "blackhole"), into cfg; value may be NULL for flags without
 * one.  Returns 1 when the option was consumed with its value, 0 when it
 * is not an impairment option, or FA_ERR_INVAL / FA_ERR_PARSE with a message
 * naming the option and the value. */
int fa_relay_option_parse(fa_relay_config *cfg, const char *name, const char *value,
                          fa_error *err);

/* Whether an impairment option takes a value ("jitter-reorder" does not). */
int fa_relay_option_has_value(const char *name);

/* Parses a duration: a number with an optional unit ns, us, ms or s; a bare
 * number is in bare_unit_ns (e.g. 1000000 for ms).  Returns 0 or FA_ERR_PARSE. */
int fa_relay_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *out);

/* Parses a probability "0.01" or "1%".  Returns 0, FA_ERR_PARSE or FA_ERR_RANGE. */
int fa_relay_parse_prob(const char *s, double *out);

/* Parses a rate: bytes/s bare or with k, M, G (x1000) and optional "B/s",
 * or bits/s with kbit, mbit, gbit.  Returns 0 or FA_ERR_PARSE. */
int fa_relay_parse_rate(const char *s, uint64_t *out);

/* Parses a size in bytes: bare, k/K, M, G (x1024 with KiB/MiB/GiB, x1000 with kB/MB/GB).
 * Returns 0 or FA_ERR_PARSE. */
int fa_relay_parse_size(const char *s, uint64_t *out);

#endif
