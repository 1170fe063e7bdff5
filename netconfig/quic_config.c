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

void fa_netconfig_server_config(fa_h3_server_config *sc, const Fedagg__QuicConfig *q,
                                const Fedagg__TlsConfig *tls)
{
    fa_h3_server_config_default(sc);
    fa_netconfig_quic_opts(&sc->quic, q);
    if (q) {
        sc->max_connections = q->max_connections;
        sc->max_body_bytes = q->max_body_bytes;
        sc->retry = (int)q->retry;
        sc->retry_load_threshold = q->retry_load_threshold;
        sc->max_connections_per_address = q->max_connections_per_address;
        sc->max_handshakes = q->max_handshakes;
        sc->max_handshakes_per_address = q->max_handshakes_per_address;
        sc->handshake_timeout_ms = q->handshake_timeout_ms;
        sc->max_connections_per_identity = q->max_connections_per_identity;
        sc->max_buffered_bytes = q->max_buffered_request_bytes;
        sc->max_buffered_bytes_per_identity = q->max_buffered_request_bytes_per_identity;
    }
    if (tls) {
        sc->cert_file = tls->cert_file;
        sc->key_file = tls->key_file;
        sc->ca_file = tls->ca_file;
        sc->crl_file = tls->crl_file && tls->crl_file[0] ? tls->crl_file : NULL;
    }
}
