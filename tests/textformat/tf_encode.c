/* tf_encode - our text-format parser and printer, driven like `protoc --encode`
 * so that tests/integration/it_textformat_protoc.sh can compare them.
 *
 *   tf_encode TYPE [FILE]           text (FILE or stdin) -> binary on stdout
 *   tf_encode --print TYPE [FILE]   text -> canonical text on stdout
 *   tf_encode --decode TYPE         binary on stdin -> canonical text on stdout
 *
 * TYPE is a full message name of tests/textformat/testmsg*.proto or
 * proto/config.proto.  Errors go to stderr as file:line:col; exit 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.pb-c.h"
#include "proto/textformat.h"
#include "testmsg.pb-c.h"
#include "testmsg3.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &fatest__all__descriptor,
    &fatest__inner__descriptor,
    &fatest__with_required__descriptor,
    &fatest3__scalars__descriptor,
    &fatest3__sub__descriptor,
    &fedagg__aggregator_config__descriptor,
    &fedagg__worker_config__descriptor,
    &fedagg__tls_config__descriptor,
    &fedagg__quic_config__descriptor,
    &fedagg__region__descriptor,
    &fedagg__round_policy__descriptor,
    &fedagg__model_spec__descriptor,
    &fedagg__server_optimizer__descriptor,
    &fedagg__quantization__descriptor,
    &fedagg__trainer__descriptor,
};

static int read_stream(FILE *f, char **out, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);

    if (!buf)
        return -1;
    for (;;) {
        size_t got;
        if (n == cap) {
            char *g = realloc(buf, cap * 2);
            if (!g) {
                free(buf);
                return -1;
            }
            buf = g;
            cap *= 2;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

int main(int argc, char **argv)
{
    const ProtobufCMessageDescriptor *d = NULL;
    const char *mode = "encode", *type, *file = NULL;
    ProtobufCMessage *m = NULL;
    fa_diags *diags = NULL;
    fa_error err = {0};
    char *in = NULL, *text = NULL;
    size_t len, tlen;
    int i = 1, rc = 1;
    FILE *f = stdin;

    if (argc > 1 && (!strcmp(argv[1], "--print") || !strcmp(argv[1], "--decode")))
        mode = argv[i++] + 2;
    if (i >= argc) {
        fprintf(stderr, "usage: tf_encode [--print|--decode] TYPE [FILE]\n");
        return 2;
    }
    type = argv[i++];
    if (i < argc)
        file = argv[i];
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++)
        if (!strcmp(types[k]->name, type))
            d = types[k];
    if (!d) {
        fprintf(stderr, "tf_encode: unknown message type %s\n", type);
        return 2;
    }
    if (file && !(f = fopen(file, "rb"))) {
        perror(file);
        return 2;
    }
    if (read_stream(f, &in, &len) != 0) {
        fprintf(stderr, "tf_encode: cannot read input\n");
        goto out;
    }
    if (!strcmp(mode, "decode")) {
        m = protobuf_c_message_unpack(d, NULL, len, (const uint8_t *)in);
        if (!m) {
            fprintf(stderr, "tf_encode: input is not a valid binary %s\n", type);
            goto out;
        }
    } else {
        fa_textformat_parse_opts o = {0};
        if (fa_diags_new(&diags) != 0)
            goto out;
        o.filename = file ? file : "<stdin>";
        o.diags = diags;
        if (fa_textformat_parse_ex(d, in, len, &o, &m, &err) != 0) {
            for (size_t k = 0; fa_diags_get(diags, k); k++)
                fprintf(stderr, "%s\n", fa_diags_get(diags, k));
            if (fa_diags_count(diags) == 0)
                fprintf(stderr, "%s\n", err.msg);
            goto out;
        }
    }
    if (!strcmp(mode, "encode")) {
        size_t n = protobuf_c_message_get_packed_size(m);
        uint8_t *bin = malloc(n ? n : 1);
        if (!bin)
            goto out;
        protobuf_c_message_pack(m, bin);
        rc = fwrite(bin, 1, n, stdout) == n ? 0 : 1;
        free(bin);
    } else {
        if (fa_textformat_print(m, &text, &tlen, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            goto out;
        }
        rc = fwrite(text, 1, tlen, stdout) == tlen ? 0 : 1;
    }
out:
    if (m)
        protobuf_c_message_free_unpacked(m, NULL);
    fa_diags_del(diags);
    free(text);
    free(in);
    if (f && f != stdin)
        fclose(f);
    return rc;
}
