/* quic_config.h - fedagg.QuicConfig (proto/config.proto) onto the
 * transport's options (transport/h3.h), the one mapping both daemons use.
 *
 * Its own module because it needs both sides: the transport knows nothing
 * of config protos and the config library (proto/) nothing of the
 * transport, and common/ includes neither (tests/integration/it_layering.sh).
 */
#ifndef FA_NETCONFIG_QUIC_CONFIG_H
#define FA_NETCONFIG_QUIC_CONFIG_H

#include "config.pb-c.h"
#include "transport/h3.h"

/* fa_h3_quic_default, then every field q sets (a loaded config has them
 * all); q NULL leaves the defaults. */
void fa_netconfig_quic_opts(fa_h3_quic_opts *o, const Fedagg__QuicConfig *q);

/* fa_h3_server_config_default, then the server's part of q (the QUIC
 * options above, connection and handshake limits, body limit, Retry, the
 * slots) and of tls (certificate, key, CA, CRL).  The static secret, the
 * listen address and the callbacks are the caller's.  Strings point into
 * q and tls. */
void fa_netconfig_server_config(fa_h3_server_config *sc, const Fedagg__QuicConfig *q,
                                const Fedagg__TlsConfig *tls);

#endif
