/* Fuzz target: the text-format parser and printer (proto/textformat.h).
 *
 * Any bytes are parsed as AggregatorConfig, WorkerConfig and the test schema
 * fatest.All (every scalar type).  The parser must never crash, leak or
 * report success with an error; when it succeeds, the printed text must
 * parse again to a message with the same binary encoding (round trip), and
 * the positions table must answer for every field it recorded.  The config
 * checker (proto/config_check.h) then runs over the same bytes, without
 * touching the file system. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.pb-c.h"
#include "proto/config_check.h"
#include "proto/textformat.h"
#include "testmsg.pb-c.h"

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    uint8_t *buf;

    *len = protobuf_c_message_get_packed_size(m);
    buf = malloc(*len ? *len : 1);
    if (buf)
        protobuf_c_message_pack(m, buf);
    return buf;
}

static void round_trip(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t size)
{
    fa_textformat_positions *pos = NULL;
    fa_textformat_parse_opts o = {0};
    ProtobufCMessage *m = NULL, *m2 = NULL;
    fa_diags *diags = NULL;
    fa_error err = {0};
    uint8_t *b1 = NULL, *b2 = NULL;
    size_t l1, l2, tlen;
    char *text = NULL;
    int rc;

    if (fa_diags_new(&diags) != 0)
        return;
    o.filename = "fuzz";
    o.diags = diags;
    o.positions = &pos;
    rc = fa_textformat_parse_ex(d, (const char *)data, size, &o, &m, &err);
    if (rc == FA_ERR_NOMEM)
        goto out;
    if (rc != 0) {
        /* a rejection always explains itself */
        if (m || pos || err.msg[0] == '\0' || fa_diags_count(diags) == 0)
            abort();
        goto out;
    }
    if (!m || fa_diags_count(diags) != 0)
        abort();
    if (fa_textformat_print(m, &text, &tlen, &err) != 0)
        goto out;
    if (fa_textformat_parse(d, text, tlen, "printed", &m2, &err) != 0) {
        fprintf(stderr, "printed text does not parse: %s\n---\n%s---\n", err.msg, text);
        abort();
    }
    b1 = pack(m, &l1);
    b2 = pack(m2, &l2);
    if (b1 && b2 && (l1 != l2 || memcmp(b1, b2, l1) != 0)) {
        fprintf(stderr, "round trip changed the encoding\n---\n%s---\n", text);
        abort();
    }
out:
    free(b1);
    free(b2);
    free(text);
    if (m2)
        protobuf_c_message_free_unpacked(m2, NULL);
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_textformat_positions_del(pos);
    fa_diags_del(diags);
}

static void config_check(fa_config_kind kind, const uint8_t *data, size_t size)
{
    ProtobufCMessage *m = NULL;
    fa_diags *diags = NULL;
    fa_error err = {0};
    int rc;

    if (fa_diags_new(&diags) != 0)
        return;
    rc = fa_config_load_text(kind, (const char *)data, size, "fuzz", "/nonexistent",
                             FA_CONFIG_NO_FILES, &m, diags, &err);
    if ((rc == 0) != (m != NULL) || (rc != 0 && rc != FA_ERR_NOMEM && fa_diags_count(diags) == 0))
        abort();
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(diags);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    round_trip(&fedagg__aggregator_config__descriptor, data, size);
    round_trip(&fedagg__worker_config__descriptor, data, size);
    round_trip(&fatest__all__descriptor, data, size);
    config_check(FA_CONFIG_AGGREGATOR, data, size);
    config_check(FA_CONFIG_WORKER, data, size);
    config_check(FA_CONFIG_UNKNOWN, data, size);
    return 0;
}
