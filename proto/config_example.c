/* config_example.c - the annotated example of `fedagg config print --defaults`.
 *
 * Walks the descriptor of AggregatorConfig / WorkerConfig / FederationConfig
 * and prints every field with its comment from config.proto
 * (proto/config_doc.h, generated at build time) and its default from the
 * descriptor.  Fields that have no
 * default and need a value (paths, region ids, keys) take one from the
 * table below; optional fields without a default are shown commented out.
 */
#include "proto/config_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/config_doc.h"
#include "proto/textformat_internal.h"

#define MEMBER(msg, off) ((const void *)((const char *)(msg) + (off)))

/* Example values in text format, by "KIND:path" (A aggregator, W worker,
 * F federation file, * all; path without indices).  `active` 0 shows the field commented out
 * (an option the operator may turn on).  For a repeated message, v[0] is the
 * number of elements and v[i] of its fields is the value of element i. */
struct example {
    const char *path;
    int active;
    const char *v[3];
};

static const struct example examples[] = {
    {"A:tls.cert_file", 1, {"\"tls/aggregator.crt\""}},
    {"A:tls.key_file", 1, {"\"tls/aggregator.key\""}},
    {"A:tls.ca_file", 1, {"\"tls/ca.crt\""}},
    {"A:tls.server_name", 0, {"\"\""}},
    {"A:quic.static_secret_file", 0, {"\"state/quic.secret\""}},
    {"*:quic.qlog_dir", 0, {"\"qlog\""}},
    {"A:regions", 1, {"3"}},
    {"A:regions.id", 1, {"\"eu-west\"", "\"us-east\"", "\"ap-south\""}},
    {"A:regions.identity_public_key",
     1,
     {"\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\"", NULL,
      "\"mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI=\""}},
    {"A:regions.identity_public_key_file", 1, {NULL, "\"keys/us-east.pub\"", NULL}},
    {"A:model.hidden", 1, {"[256, 128]"}},
    {"A:model.init_file", 0, {"\"init.safetensors\""}},
    {"A:storage.dir", 1, {"\"state\""}},
    {"A:audit.log_file", 0, {"\"state/audit.log\""}},
    {"A:audit.signing_key_file", 1, {"\"keys/audit.key\""}},
    {"A:audit.origin", 0, {"\"fedagg.example.org/federation-a\""}},
    {"A:evaluation.test_images", 0, {"\"/usr/share/fashion-mnist/t10k-images-idx3-ubyte.gz\""}},
    {"A:evaluation.test_labels", 0, {"\"/usr/share/fashion-mnist/t10k-labels-idx1-ubyte.gz\""}},
    {"A:service.dir", 0, {"\"service\""}},
    {"A:team", 0, {"\"vision\""}},
    {"F:federation_id", 1, {"\"vision-lr3\""}},
    {"F:team", 1, {"\"vision\""}},
    {"F:regions", 1, {"3"}},
    {"F:regions.id", 1, {"\"eu-west\"", "\"us-east\"", "\"ap-south\""}},
    {"F:regions.identity_public_key",
     1,
     {"\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\"", NULL,
      "\"mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI=\""}},
    {"F:regions.identity_public_key_file", 1, {NULL, "\"keys/us-east.pub\"", NULL}},
    {"F:model.hidden", 1, {"[256, 128]"}},
    {"F:model.init_file", 0, {"\"models/init.safetensors\""}},
    {"F:evaluation.test_images", 0, {"\"/usr/share/fashion-mnist/t10k-images-idx3-ubyte.gz\""}},
    {"F:evaluation.test_labels", 0, {"\"/usr/share/fashion-mnist/t10k-labels-idx1-ubyte.gz\""}},
    {"F:evaluator", 0, {"\"fmnist-test\""}},
    {"F:trainer", 0, {"\"pytorch-cnn\""}},
    {"F:dataset", 0, {"\"fmnist\""}},
    {"W:region_id", 1, {"\"eu-west\""}},
    {"W:regions", 1, {"3"}},
    {"W:regions.id", 1, {"\"eu-west\"", "\"us-east\"", "\"ap-south\""}},
    {"W:regions.identity_public_key",
     1,
     {"\"oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=\"", NULL,
      "\"mDnV4ar2nfZf6xu6enwdJgK8jn5ZxbT+YK++8omMLyI=\""}},
    {"W:regions.identity_public_key_file", 1, {NULL, "\"keys/us-east.pub\"", NULL}},
    {"W:aggregator", 1, {"\"aggregator.example.org:4433\""}},
    {"W:tls.cert_file", 1, {"\"tls/eu-west.crt\""}},
    {"W:tls.key_file", 1, {"\"tls/eu-west.key\""}},
    {"W:tls.ca_file", 1, {"\"tls/ca.crt\""}},
    {"W:tls.server_name", 0, {"\"aggregator.example.org\""}},
    {"W:quic.static_secret_file", 0, {"\"\""}},
    {"W:identity_key_file", 1, {"\"keys/eu-west.key\""}},
    {"W:aggregator_public_key", 0, {"\"5SqIx/n9t8uE9kcCJVhnoETV5BYryznnGgFAjrseBbY=\""}},
    {"W:aggregator_public_key_file", 0, {"\"keys/aggregator.pub\""}},
    {"W:data.train_images", 1, {"\"data/train-images-idx3-ubyte.gz\""}},
    {"W:data.train_labels", 1, {"\"data/train-labels-idx1-ubyte.gz\""}},
    {"W:data.test_images", 0, {"\"data/t10k-images-idx3-ubyte.gz\""}},
    {"W:data.test_labels", 0, {"\"data/t10k-labels-idx1-ubyte.gz\""}},
    {"W:trainer.external.command", 1, {"[\"python3\", \"train.py\", \"{input}\", \"{output}\"]"}},
    {"W:trainer.external.env", 1, {"[\"OMP_NUM_THREADS=4\"]"}},
    {"W:trainer.external.workdir", 0, {"\"state\""}},
    {"W:state_dir", 1, {"\"state\""}},
};

struct ex_ctx {
    fa_strbuf *b;
    char kind; /* 'A', 'W' or 'F' */
};

static const struct example *find_example(const struct ex_ctx *x, const char *path)
{
    for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
        const char *p = examples[i].path;
        if ((p[0] == x->kind || p[0] == '*') && !strcmp(p + 2, path))
            return &examples[i];
    }
    return NULL;
}

/* One output line: indentation, "# " when commented out, the text. */
static void line(struct ex_ctx *x, int depth, int commented, const char *text)
{
    fa_tf_buf_indent(x->b, depth);
    if (commented)
        fa_strbuf_put(x->b, "# ", 2);
    fa_strbuf_puts(x->b, text);
    fa_strbuf_put(x->b, "\n", 1);
}

/* A comment from config.proto, each line as "# ...". */
static void comment(struct ex_ctx *x, int depth, const char *text)
{
    while (text && *text) {
        const char *nl = strchr(text, '\n');
        size_t n = nl ? (size_t)(nl - text) : strlen(text);
        fa_tf_buf_indent(x->b, depth);
        fa_strbuf_put(x->b, "#", 1);
        fa_strbuf_put(x->b, text, n);
        fa_strbuf_put(x->b, "\n", 1);
        text = nl ? nl + 1 : text + n;
    }
}

static void enum_values(struct ex_ctx *x, int depth, const ProtobufCEnumDescriptor *e)
{
    for (unsigned i = 0; i < e->n_values; i++) {
        char name[512];
        const char *doc;
        snprintf(name, sizeof(name), "%s.%s", e->name, e->values[i].name);
        doc = fa_config_doc_find(name);
        fa_tf_buf_indent(x->b, depth);
        /* The first line after the name; a longer comment goes on below it,
         * each line commented and indented under the first. */
        {
            const char *nl = doc ? strchr(doc, '\n') : NULL;
            size_t n = doc ? (nl ? (size_t)(nl - doc) : strlen(doc)) : 0;
            fa_strbuf_printf(x->b, "#   %s:%.*s\n", e->values[i].name, (int)n, doc ? doc : "");
            while (nl && nl[1]) {
                const char *line = nl + 1;
                nl = strchr(line, '\n');
                n = nl ? (size_t)(nl - line) : strlen(line);
                fa_tf_buf_indent(x->b, depth);
                fa_strbuf_printf(x->b, "#     %.*s\n", (int)n, line);
            }
        }
    }
}

static void message_body(struct ex_ctx *x, const ProtobufCMessageDescriptor *d, const char *path,
                         int depth, int commented, int element, int annotate);

static void field(struct ex_ctx *x, const ProtobufCMessageDescriptor *d,
                  const ProtobufCFieldDescriptor *f, const ProtobufCMessage *defaults,
                  const char *parent, int depth, int commented, int element, int annotate,
                  int oneof_first)
{
    char path[256], full[512], text[1024];
    const struct example *ex;
    const char *doc, *val;
    int active;

    snprintf(path, sizeof(path), "%s%s%s", parent, *parent ? "." : "", f->name);
    snprintf(full, sizeof(full), "%s.%s", d->name, f->name);
    ex = find_example(x, path);
    val = NULL;
    if (ex && f->type != PROTOBUF_C_TYPE_MESSAGE) {
        if (ex->v[1] || ex->v[2]) /* one value per element of the enclosing list */
            val = element < 3 ? ex->v[element] : NULL;
        else if (element == 0)
            val = ex->v[0];
    }

    if (annotate) {
        doc = fa_config_doc_find(full);
        if (!doc && f->type == PROTOBUF_C_TYPE_MESSAGE)
            doc = fa_config_doc_find(((const ProtobufCMessageDescriptor *)f->descriptor)->name);
        comment(x, depth, doc);
        if (f->type == PROTOBUF_C_TYPE_ENUM)
            enum_values(x, depth, f->descriptor);
    }

    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessageDescriptor *sd = f->descriptor;
        int oneof_alt = (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && !oneof_first;
        size_t count = 1;
        if (f->label == PROTOBUF_C_LABEL_REPEATED)
            count = ex && ex->v[0] ? (size_t)strtoul(ex->v[0], NULL, 10) : 0;
        if (oneof_alt && annotate)
            line(x, depth, 1, "(the other choice of this oneof; set only one)");
        if (count == 0) { /* a repeated message with no example: one, commented out */
            snprintf(text, sizeof(text), "%s {", f->name);
            line(x, depth, 1, text);
            message_body(x, sd, path, depth + 1, 1, 0, annotate);
            line(x, depth, 1, "}");
            return;
        }
        for (size_t k = 0; k < count; k++) {
            snprintf(text, sizeof(text), "%s {", f->name);
            line(x, depth, commented || oneof_alt, text);
            message_body(x, sd, path, depth + 1, commented || oneof_alt, (int)k,
                         annotate && k == 0);
            line(x, depth, commented || oneof_alt, "}");
        }
        return;
    }

    active = !commented;
    if (val) {
        if (!ex->active)
            active = 0;
        snprintf(text, sizeof(text), "%s: %s", f->name, val);
    } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        snprintf(text, sizeof(text), "%s: []", f->name);
        active = 0;
    } else if (f->default_value ||
               (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_BYTES)) {
        fa_strbuf vb = {0};
        fa_tf_print_value(&vb, f, MEMBER(defaults, f->offset));
        snprintf(text, sizeof(text), "%s: %s", f->name, vb.data ? vb.data : "");
        free(vb.data);
    } else {
        snprintf(text, sizeof(text), "%s: \"\"", f->name);
        active = 0;
    }
    if (!active && element > 0)
        return; /* later elements of a list show only what they set */
    line(x, depth, !active, text);
}

static void message_body(struct ex_ctx *x, const ProtobufCMessageDescriptor *d, const char *path,
                         int depth, int commented, int element, int annotate)
{
    ProtobufCMessage *defaults;
    unsigned last_oneof = 0; /* quantifier offset of the last oneof seen, +1 */

    if (depth > 8)
        return;
    defaults = malloc(d->sizeof_message);
    if (!defaults) {
        x->b->oom = 1;
        return;
    }
    protobuf_c_message_init(d, defaults);
    /* fields in declaration order read best; protobuf-c sorts by number,
     * which config.proto keeps equal to declaration order */
    for (unsigned i = 0; i < d->n_fields && !x->b->oom; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        int first = 1;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            first = last_oneof != f->quantifier_offset + 1;
            last_oneof = f->quantifier_offset + 1;
        }
        if (annotate && depth == 0 && i > 0)
            fa_strbuf_put(x->b, "\n", 1);
        field(x, d, f, defaults, path, depth, commented, element, annotate, first);
    }
    free(defaults);
}

int fa_config_example(fa_config_kind kind, char **out, size_t *len, fa_error *err)
{
    const ProtobufCMessageDescriptor *d = fa_config_descriptor(kind);
    fa_strbuf b = {0};
    struct ex_ctx x = {&b, kind == FA_CONFIG_AGGREGATOR   ? 'A'
                           : kind == FA_CONFIG_FEDERATION ? 'F'
                                                          : 'W'};

    *out = NULL;
    if (len)
        *len = 0;
    if (!d)
        return fa_errorf(err, FA_ERR_INVAL, "no example for config kind %d", (int)kind);
    fa_strbuf_printf(&b,
                     "# fedagg %s configuration (%s, proto/config.proto), printed by\n"
                     "# `fedagg config print --type %s --defaults`: every field with its\n"
                     "# comment and its default, or an example value where it has none.\n"
                     "# Lines starting with '#' are comments; optional settings are shown\n"
                     "# commented out.  Paths are relative to this file's directory.\n"
                     "# Check a config with `fedagg config check FILE`.\n\n",
                     fa_config_kind_name(kind), d->name, fa_config_kind_name(kind));
    comment(&x, 0, fa_config_doc_find(d->name));
    message_body(&x, d, "", 0, 0, 0, 1);
    if (b.oom) {
        free(b.data);
        return fa_errorf(err, FA_ERR_NOMEM, "out of memory");
    }
    *out = b.data;
    if (len)
        *len = b.len;
    return 0;
}
