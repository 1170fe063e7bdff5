/* fa_quic_config.h - fedagg.QuicConfig (proto/config.proto) onto the
 * transport's options (transport/h3.h), the one mapping both daemons use.
 * Header-only: the transport knows nothing of config protos, and the config
 * library nothing of the transport. */
#ifndef FA_QUIC_CONFIG_H
#define FA_QUIC_CONFIG_H

#include "config.pb-c.h"
#include "transport/h3.h"

/* Defaults, then every field the config sets (a loaded config has them all). */
static inline void fa_quic_opts_from_config(fa_h3_quic_opts *o, const Fedagg__QuicConfig *q)
{
    fa_h3_quic_default(o);
    if (!q)
        return;
    o->max_stream_window = q->max_stream_window;
    o->max_connection_window = q->max_connection_window;
    o->cc = (int)q->congestion_control;
    o->idle_timeout_ms = q->idle_timeout_ms;
    o->max_streams = q->max_streams_per_connection;
    o->qlog_dir = q->qlog_dir && q->qlog_dir[0] ? q->qlog_dir : NULL;
    o->gso = q->gso;
    o->gro = q->gro;
    o->max_udp_payload = q->max_udp_payload_size;
}

#endif
