#include "netconfig/quic_config.h"

void fa_netconfig_quic_opts(fa_h3_quic_opts *o, const Fedagg__QuicConfig *q)
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
