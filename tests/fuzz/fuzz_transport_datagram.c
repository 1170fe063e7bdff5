/* libFuzzer target: the HTTP/3 server's datagram input path.
 *
 * The input is a sequence of datagrams, each prefixed by its length (2 bytes,
 * big endian); a short tail is one more datagram.  They go, as if from one
 * client address, through the server's dispatch: header decoding, version
 * negotiation, Retry and token checks, stateless resets, connection
 * creation, Initial decryption, the TLS handshake and whatever follows.
 * Nothing may crash, leak or hang; after each input the server forgets every
 * connection so inputs stay independent.
 *
 * The server's certificate below is a throwaway self-signed test key (no
 * client certificate can verify against it, which is fine: the fuzzer is
 * not expected to complete a handshake).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_log.h"
#include "transport/h3.h"
#include "transport/h3_internal.h"

static const char KEY[] = "-----BEGIN PRIVATE KEY-----\n"
                          "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgw2Wi4eK9UY0DesLq\n"
                          "j354nikX6n5anhT8M53V6TZ28+uhRANCAAS4TmSK3wuAlM8C7D/kXfA1FPr1xXeM\n"
                          "P3TusokVu0zLDBwUI1Djom1/R7g5G907PBH8lJmRZh+L3KaEeUpT0dd+\n"
                          "-----END PRIVATE KEY-----\n";

static const char CERT[] = "-----BEGIN CERTIFICATE-----\n"
                           "MIIBizCCATGgAwIBAgIUGLBvVXiKcQ2XKojS/Uw4TmgmnsAwCgYIKoZIzj0EAwIw\n"
                           "DzENMAsGA1UEAwwEZnV6ejAgFw0yNjExMzAwNDI2NTlaGA8yMTI2MTEwNjA0MjY1\n"
                           "OVowDzENMAsGA1UEAwwEZnV6ejBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABLhO\n"
                           "ZIrfC4CUzwLsP+Rd8DUU+vXFd4w/dO6yiRW7TMsMHBQjUOOibX9HuDkb3Ts8EfyU\n"
                           "mZFmH4vcpoR5SlPR136jaTBnMB0GA1UdDgQWBBQa7xsfsXpH84+OhcOjunj3G9Hc\n"
                           "dDAfBgNVHSMEGDAWgBQa7xsfsXpH84+OhcOjunj3G9HcdDAPBgNVHRMBAf8EBTAD\n"
                           "AQH/MBQGA1UdEQQNMAuCCWxvY2FsaG9zdDAKBggqhkjOPQQDAgNIADBFAiA98TCY\n"
                           "KUGPlH+t6cJL0403MZeHmN38r4HskWfv9hjQQAIhALtobakW5idw/6g0Dyxcnhzs\n"
                           "R6R9r2fKMvVCw5rgU9/l\n"
                           "-----END CERTIFICATE-----\n";

static fa_h3_server *srv;
static struct sockaddr_in from;

static int write_file(const char *path, const char *data, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(data, f);
    fclose(f);
    return chmod(path, mode);
}

static int on_request(fa_h3_request *req, void *arg)
{
    return fa_h3_respond(req, 200, NULL, 0, "ok", 2);
}

static void init_once(void)
{
    char dir[] = "/tmp/fa_fuzz_transport.XXXXXX", key[128], crt[128];
    fa_h3_server_config cfg;
    fa_h3_handler h = {.on_request = on_request};
    fa_error err;

    if (srv)
        return;
    fa_log_set_level(FA_LOG_ERROR);
    if (!mkdtemp(dir))
        abort();
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(crt, sizeof(crt), "%s/crt.pem", dir);
    if (write_file(key, KEY, 0600) != 0 || write_file(crt, CERT, 0644) != 0)
        abort();
    fa_h3_server_config_default(&cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.cert_file = crt;
    cfg.key_file = key;
    cfg.ca_file = crt;
    /* fixed secret: token and reset derivation stay reproducible */
    memset(cfg.static_secret, 0x5a, sizeof(cfg.static_secret));
    cfg.has_static_secret = 1;
    if (fa_h3_server_new(&srv, &cfg, &err) != 0) {
        fprintf(stderr, "fuzz: %s\n", err.msg);
        abort();
    }
    fa_h3_server_route(srv, "*", "/", &h, NULL);
    /* the files were read: remove them */
    unlink(key);
    unlink(crt);
    rmdir(dir);
    from.sin_family = AF_INET;
    from.sin_port = htons(9); /* discard: replies go nowhere */
    from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf;

    init_once();
    buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    /* a raw datagram when it does not parse as length-prefixed records */
    if (size < 2 || (size_t)((buf[0] << 8) | buf[1]) + 2 > size) {
        fa_h3_server_feed(srv, buf, size, (struct sockaddr *)&from, sizeof(from));
    } else {
        size_t off = 0;
        while (off + 2 <= size) {
            size_t len = (size_t)((buf[off] << 8) | buf[off + 1]);
            off += 2;
            if (len > size - off)
                len = size - off;
            fa_h3_server_feed(srv, buf + off, len, (struct sockaddr *)&from, sizeof(from));
            off += len;
        }
    }
    fa_h3_server_forget_all(srv);
    free(buf);
    return 0;
}
