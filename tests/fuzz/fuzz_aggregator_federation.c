/* Fuzz target: the aggregator's round orchestration (fa_fed) fed arbitrary
 * requests, as the HTTP/3 layer would hand them over from the network.
 * The input is a sequence of operations:
 *
 *   op (1 byte): kind (low 3 bits: 0-4 a protocol message of that kind,
 *                5 a masked upload, 6 a poll, 7 a tick), region (next 2 bits:
 *                one of the 3 members or a stranger), round/attempt skew (top 3)
 *   len (2 bytes, little-endian), then len bytes of body
 *
 * Every call must return an answer or an error; nothing may crash, leak or
 * change the position of the federation except through a proper phase close.
 * One federation (temporary directory) serves all inputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/federation.h"
#include "common/fa_file.h"
#include "common/fa_log.h"
#include "crypto/identity.h"
#include "proto/config_check.h"

static fa_fed *fed;
static Fedagg__AggregatorConfig *cfg;
static uint64_t now_ms = 1000;
static const char *regions[4] = {"ap-south", "eu-west", "us-east", "mars"};

static char dir[] = "/tmp/fa_fuzz_fed.XXXXXX";

static void cleanup(void)
{
    char cmd[128];
    fa_fed_close(fed);
    fed = NULL;
    if (cfg)
        protobuf_c_message_free_unpacked(&cfg->base, NULL);
    cfg = NULL;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: could not remove %s\n", dir);
}

static int setup(void)
{
    char text[4096], path[512], key[FA_IDENTITY_SECRET_TEXT_MAX];
    uint8_t seed[32], pk[32];
    size_t n = 0, klen;

    fa_log_set_level(FA_LOG_ERROR);
    if (!mkdtemp(dir))
        return -1;
    atexit(cleanup);
    if (fa_identity_generate(seed, pk, NULL) != 0 ||
        fa_identity_format_secret(seed, key, &klen) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/audit.key", dir);
    if (fa_file_write_atomic(path, key, klen, 0600, NULL) != 0)
        return -1;
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "federation_id: \"fuzz\" listen: \"127.0.0.1:4433\"\n"
                          "tls { cert_file: \"x\" key_file: \"x\" ca_file: \"x\" }\n");
    for (int i = 0; i < 3; i++) {
        char pub[FA_IDENTITY_PUBLIC_TEXT_MAX];
        size_t pl;
        if (fa_identity_generate(seed, pk, NULL) != 0)
            return -1;
        fa_identity_format_public(pk, pub, &pl);
        pub[strcspn(pub, "\n")] = '\0';
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "regions { id: \"%s\" identity_public_key: \"%s\" }\n", regions[i],
                              pub);
    }
    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "round { min_regions: 2 threshold: 2 advertise_deadline_ms: 50 "
                          "shares_deadline_ms: 50 masked_deadline_ms: 50 "
                          "consistency_deadline_ms: 50 unmask_deadline_ms: 50 }\n"
                          "model { input_dim: 4 hidden: [3] output_dim: 2 }\n"
                          "storage { dir: \"%s/store\" }\n"
                          "audit { signing_key_file: \"%s/audit.key\" }\nmetrics_listen: \"\"\n",
                          dir, dir);
    if (fa_config_load_text(FA_CONFIG_AGGREGATOR, text, n, "fuzz.textproto", dir,
                            FA_CONFIG_NO_FILES, (ProtobufCMessage **)&cfg, NULL, NULL) != 0)
        return -1;
    return fa_fed_open(&fed, cfg, NULL, now_ms, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;

    if (!fed && setup() != 0)
        abort(); /* the harness itself is broken */
    while (off + 3 <= size) {
        uint8_t op = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        const char *region = regions[(op >> 3) & 3];
        uint64_t round;
        uint32_t attempt;
        int skew = op >> 5, kind = op & 7;
        fa_fed_reply r = {0};

        off += 3;
        if (len > size - off)
            len = size - off;
        fa_fed_position(fed, &round, &attempt, NULL, NULL);
        round += (uint64_t)(skew & 3) - 1; /* the current round, or one off */
        attempt += (uint32_t)(skew >> 2);
        if (kind <= 4) {
            fa_fed_submit(fed, kind, region, round, attempt, data + off, len, now_ms, &r);
        } else if (kind == 5) {
            uint64_t id = 0;
            int discard = 0;
            if (fa_fed_masked_begin(fed, region, round, attempt, (int64_t)len, now_ms, &id,
                                    &discard, &r) == 0 &&
                !discard) {
                fa_fed_reply_free(&r);
                if (fa_fed_masked_chunk(fed, region, id, data + off, len, now_ms, &r) == 0) {
                    fa_fed_reply_free(&r);
                    if (len & 1)
                        fa_fed_masked_end(fed, region, id, now_ms, &r);
                    else
                        fa_fed_masked_abort(fed, region, id, now_ms);
                }
            }
        } else if (kind == 6) {
            fa_fed_poll(fed, (int)(len % 5), region, round, attempt, &r);
        } else {
            now_ms += len;
            fa_fed_tick(fed, now_ms);
        }
        fa_fed_reply_free(&r);
        off += len;
    }
    return 0;
}
