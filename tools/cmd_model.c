/* `fedagg model`: look at, compare, convert and make model files (safetensors).
 *
 *   fedagg model inspect FILE [--config AGGREGATOR.textproto] [--json]
 *   fedagg model diff A B [--json]
 *   fedagg model convert IN OUT --dtype bf16|f16|f32 [--all]
 *   fedagg model init --out FILE [--arch 784-256-128-10] [--seed S]
 *   fedagg model init --out FILE --config AGGREGATOR.textproto
 *   fedagg model card|fetch|verify ...   released models (tools/model_release.c)
 *
 * Exit status: 0 success; 1 an invalid file or config (inspect, convert,
 * init) or, for diff, files whose tables differ; 2 usage (and, for diff,
 * any error).  Every error names the file and, where there is one, the
 * tensor. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_endian.h"
#include "common/fa_err.h"
#include "common/fa_hex.h"
#include "common/fa_safetensors.h"
#include "common/fa_sha256.h"
#include "model/mlp.h"
#include "model/tensors.h"
#include "proto/config_check.h"

/* tools/model_release.c */
int fa_model_card_main(int argc, char **argv);
int fa_model_fetch_main(int argc, char **argv);
int fa_model_verify_main(int argc, char **argv);

const char fa_cmd_model_help[] =
    "inspect, diff and convert safetensors models (tensor table, federated tensors); make an "
    "initial one; model cards; fetch and verify released models";

/* Elements compared or converted per step. */
#define STEP_ELEMS ((size_t)1 << 16)

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fedagg model inspect FILE [--config AGGREGATOR.textproto] [--json]\n"
            "       fedagg model diff A B [--json]\n"
            "       fedagg model convert IN OUT --dtype bf16|f16|f32 [--all]\n"
            "       fedagg model init --out FILE [--arch 784-256-128-10] [--seed S]\n"
            "       fedagg model init --out FILE --config AGGREGATOR.textproto\n"
            "       fedagg model card VERSION [--json] (operator connection)\n"
            "       fedagg model fetch --channel NAME --config WORKER.textproto --out FILE\n"
            "       fedagg model verify FILE --proof PROOF --pubkey KEY [--channel NAME]\n"
            "\n"
            "inspect  validates any safetensors file and lists its metadata and tensor table:\n"
            "         name, dtype, shape, bytes, whether the tensor is federated, SHA-256 of\n"
            "         its bytes and, for floating tensors, min, max, mean, standard deviation\n"
            "         and non-finite count; then totals (tensors, parameters, bytes, federated\n"
            "         tensors and coordinates) and whether it is the built-in MLP (fc<l>.weight\n"
            "         (out, in), fc<l>.bias).  Federated tensors are those of the file's\n"
            "         fedagg.federated metadata (a published model) or, with --config, those\n"
            "         the aggregator config's model.federated selects.  --json prints one JSON\n"
            "         object instead.\n"
            "diff     compares two files tensor by tensor: for tensors in both with the same\n"
            "         shape, the largest and the mean |a - b| (as float32); lists the tensors\n"
            "         only in one and those whose shape or dtype differ.  Exit 0 when the\n"
            "         files have the same table (names, shapes, dtypes; values may differ),\n"
            "         1 when the tables differ, 2 on an error.\n"
            "convert  writes IN with its floating tensors in another dtype, atomically:\n"
            "         --dtype bf16 or f16 converts the F32 tensors (with --all every floating\n"
            "         tensor), rounding to nearest even; --dtype f32 widens F16 and BF16\n"
            "         tensors exactly (with --all F64 ones too, rounded).  Integer and BOOL\n"
            "         tensors, the order and the metadata stay as they are.\n"
            "init     writes a He-initialised MLP (PyTorch nn.Linear names, F32) of the given\n"
            "         layer widths, input first and classes last (default 784-256-128-10),\n"
            "         seed default 1, atomically.  With --config, the architecture and seed\n"
            "         are the aggregator config's `model` (what version 0 of the federation\n"
            "         would be).\n");
}

static void shape_str(unsigned ndim, const uint64_t *shape, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (unsigned i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %llu" : "%llu",
                                 (unsigned long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

static json_t *shape_json(unsigned ndim, const uint64_t *shape)
{
    json_t *a = json_array();
    for (unsigned d = 0; d < ndim; d++)
        json_array_append_new(a, json_integer((json_int_t)shape[d]));
    return a;
}

/* A table of every tensor of st, none federated, its metadata not applied
 * (diff and convert compare and copy files as they are). */
static int plain_table(const fa_safetensors *st, fa_tensors **out, fa_error *err)
{
    int rc = fa_tensors_new(out, err);
    for (size_t i = 0; rc == 0 && i < fa_st_count(st); i++) {
        const fa_st_tensor *s = fa_st_at(st, i);
        rc = fa_tensors_add(*out, s->name, s->dtype, s->ndim, s->shape, err);
    }
    if (rc != 0) {
        fa_tensors_del(*out);
        *out = NULL;
    }
    return rc;
}

/* ---------------------------------------------------------------------- */
/* inspect                                                                 */
/* ---------------------------------------------------------------------- */

struct stats {
    double min, max, sum, sum2;
    uint64_t n, nonfinite;
};

static void stats_add(struct stats *s, double v)
{
    if (!isfinite(v)) {
        s->nonfinite++;
        return;
    }
    if (s->n == 0 || v < s->min)
        s->min = v;
    if (s->n == 0 || v > s->max)
        s->max = v;
    s->sum += v;
    s->sum2 += v * v;
    s->n++;
}

/* SHA-256 of bytes [off, off + len) of fd, and statistics of them for the
 * floating dtypes (dtype < 0: none).  Returns 0, or -1 with *why set. */
static int hash_range(int fd, uint64_t off, uint64_t len, int dtype, char out[65], struct stats *st,
                      const char **why)
{
    static uint8_t buf[1 << 20];
    fa_sha256_ctx sha = {0};
    uint8_t md[32];
    int rc = 0;

    memset(st, 0, sizeof(*st));
    *why = "SHA-256 (OpenSSL) failed";
    if (fa_sha256_init(&sha) != 0) {
        fa_sha256_free(&sha);
        return -1;
    }
    while (len > 0) {
        size_t chunk = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        ssize_t r = pread(fd, buf, chunk, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0 || (size_t)r != chunk) {
            *why = r < 0 ? strerror(errno) : "short read (file changed?)";
            rc = -1;
            break;
        }
        if (fa_sha256_update(&sha, buf, (size_t)r) != 0) {
            rc = -1;
            break;
        }
        /* chunks are multiples of 8 bytes except at the end, so elements do not straddle */
        if (dtype == FA_ST_F32)
            for (ssize_t i = 0; i + 4 <= r; i += 4) {
                float v;
                memcpy(&v, buf + i, 4);
                stats_add(st, v);
            }
        else if (dtype == FA_ST_F64)
            for (ssize_t i = 0; i + 8 <= r; i += 8) {
                double v;
                memcpy(&v, buf + i, 8);
                stats_add(st, v);
            }
        else if (dtype == FA_ST_F16 || dtype == FA_ST_BF16)
            for (ssize_t i = 0; i + 2 <= r; i += 2) {
                uint16_t h = fa_le_get_u16(buf + i);
                stats_add(st, dtype == FA_ST_F16 ? fa_st_f16_to_f32(h) : fa_st_bf16_to_f32(h));
            }
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    if (rc == 0 && fa_sha256_final(&sha, md) == 0)
        fa_hex_encode(out, FA_HEX_LEN(32), md, 32);
    else if (rc == 0)
        rc = -1;
    fa_sha256_free(&sha);
    return rc;
}

/* Applies the aggregator config's model.federated to t.  Returns 0, or 1
 * with the message printed. */
static int select_from_config(fa_tensors *t, const char *config, const char *path)
{
    ProtobufCMessage *msg = NULL;
    fa_error err;
    int rc = 0;

    if (fa_config_load(FA_CONFIG_AGGREGATOR, config, FA_CONFIG_NO_FILES, &msg, NULL, &err) != 0) {
        fprintf(stderr, "fedagg model inspect: %s\n", err.msg);
        return 1;
    }
    const Fedagg__AggregatorConfig *ac = (const Fedagg__AggregatorConfig *)msg;
    const Fedagg__TensorSelection *ts = ac->model ? ac->model->federated : NULL;
    fa_tensor_select sel = {NULL, 0, NULL, 0, FA_TENSORS_INT_KEEP};
    if (ts) {
        sel.include = (const char *const *)ts->include;
        sel.n_include = ts->n_include;
        sel.exclude = (const char *const *)ts->exclude;
        sel.n_exclude = ts->n_exclude;
        sel.integers = ts->integers == FEDAGG__INTEGER_TENSORS__INTEGERS_MEAN_DELTA
                           ? FA_TENSORS_INT_MEAN_DELTA
                           : FA_TENSORS_INT_KEEP;
    }
    if (fa_tensors_select(t, &sel, &err) != 0) {
        fprintf(stderr, "fedagg model inspect: %s: model.federated on %s: %s\n", config, path,
                err.msg);
        rc = 1;
    }
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* Metadata values are printed whole up to this many bytes (a model of 10^5
 * tensors has a fedagg.federated value of megabytes). */
#define META_PRINT_MAX 240

static int cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    fa_safetensors *st = NULL;
    fa_tensors *t = NULL;
    fa_error err;
    int json = 0, c, fd = -1, rc = 1;
    json_t *root = NULL, *tensors = NULL, *meta = NULL, *fedmeta = NULL;
    char file_sha[65], arch[160], why[600] = "";
    const char *config = NULL, *fed_source = NULL, *e;
    struct stats fst;
    struct stat sb;
    fa_mlp_config cfg;
    uint64_t total_numel = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'c': config = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "fedagg model inspect: give exactly one FILE\n");
        usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    if (fa_st_open(&st, path, &err) != 0) {
        fprintf(stderr, "fedagg model inspect: %s\n", err.msg);
        return 1;
    }
    if (fa_tensors_from_st(&t, st, &err) != 0) {
        fprintf(stderr, "fedagg model inspect: %s: %s\n", path, err.msg);
        goto out;
    }
    if (fa_st_metadata_get(st, FA_TENSORS_META_KEY))
        fed_source = "the file's " FA_TENSORS_META_KEY;
    if (config) {
        if (select_from_config(t, config, path) != 0)
            goto out;
        fed_source = "model.federated of the config";
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0 ||
        hash_range(fd, 0, (uint64_t)sb.st_size, -1, file_sha, &fst, &e) != 0) {
        fprintf(stderr, "fedagg model inspect: %s: cannot read: %s\n", path,
                fd < 0 ? strerror(errno) : e);
        goto out;
    }
    int is_mlp = fa_mlp_config_from_st(st, &cfg, &err) == 0;
    if (is_mlp)
        fa_mlp_config_str(&cfg, arch, sizeof(arch));
    else
        snprintf(why, sizeof(why), "%s", err.msg);

    root = json_object();
    meta = json_object();
    fedmeta = json_object();
    tensors = json_array();
    for (size_t i = 0; i < fa_st_metadata_count(st); i++) {
        const char *k, *v;
        fa_st_metadata_at(st, i, &k, &v);
        json_object_set_new(meta, k, json_string(v));
        if (strncmp(k, "fedagg.", 7) == 0)
            json_object_set_new(fedmeta, k, json_string(v));
    }
    if (!json) {
        printf("file: %s\nsize: %lld bytes (header %llu, data %llu at offset %llu)\nsha256: %s\n",
               path, (long long)sb.st_size, (unsigned long long)fa_st_data_offset(st) - 8,
               (unsigned long long)fa_st_data_len(st), (unsigned long long)fa_st_data_offset(st),
               file_sha);
        printf("metadata:%s\n", fa_st_metadata_count(st) ? "" : " (none)");
        /* metadata may hold anything (a newline, a terminal's escape
         * sequence): shown escaped (tensor names are printable already:
         * the reader refuses others) */
        for (size_t i = 0; i < fa_st_metadata_count(st); i++) {
            const char *k, *v;
            char ek[FA_ST_MAX_NAME * 4 + 1], ev[META_PRINT_MAX * 4 + 1];
            fa_st_metadata_at(st, i, &k, &v);
            fa_st_escape(ek, sizeof(ek), k);
            if (strlen(v) <= META_PRINT_MAX)
                printf("  %s: %s\n", ek, fa_st_escape(ev, sizeof(ev), v));
            else
                printf("  %s: %s... (%zu bytes; --json prints it whole)\n", ek,
                       fa_st_escape(ev, META_PRINT_MAX + 1, v), strlen(v));
        }
        printf("tensors: %zu\n", fa_st_count(st));
        printf("  %-24s %-5s %-16s %12s  %-15s  %-64s  %s\n", "name", "dtype", "shape", "bytes",
               "federated", "sha256", "min / max / mean / std");
    }
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *s = fa_st_at(st, i);
        const fa_tensor *x = fa_tensors_at(t, i); /* the same tensor: table order is file order */
        char sha[65], shape[160], fed[32];
        struct stats v;
        int is_float = fa_tensors_dtype_is_float(s->dtype);
        if (hash_range(fd, fa_st_data_offset(st) + s->begin, s->end - s->begin,
                       is_float ? (int)s->dtype : -1, sha, &v, &e) != 0) {
            fprintf(stderr, "fedagg model inspect: %s: tensor '%s': cannot read: %s\n", path,
                    s->name, e);
            goto out;
        }
        total_numel += s->numel;
        shape_str(s->ndim, s->shape, shape, sizeof(shape));
        if (!fed_source)
            snprintf(fed, sizeof(fed), "-");
        else if (!x->federated)
            snprintf(fed, sizeof(fed), "no");
        else if (x->range > 0)
            snprintf(fed, sizeof(fed), "yes r=%.4g", (double)x->range);
        else
            snprintf(fed, sizeof(fed), "yes");
        double mean = v.n ? v.sum / v.n : 0,
               sd = v.n ? sqrt(fmax(0, v.sum2 / v.n - mean * mean)) : 0;
        if (json) {
            json_t *jt = json_pack("{s:s, s:s, s:o, s:I, s:I, s:s}", "name", s->name, "dtype",
                                   fa_st_dtype_name(s->dtype), "shape",
                                   shape_json(s->ndim, s->shape), "numel", (json_int_t)s->numel,
                                   "bytes", (json_int_t)(s->end - s->begin), "sha256", sha);
            json_object_set_new(jt, "federated",
                                fed_source ? json_boolean(x->federated) : json_null());
            if (fed_source && x->federated) {
                json_object_set_new(jt, "fed_offset", json_integer((json_int_t)x->fed_offset));
                json_object_set_new(jt, "range", json_real((double)x->range));
            }
            if (is_float && v.n)
                json_object_set_new(jt, "stats",
                                    json_pack("{s:f, s:f, s:f, s:f, s:I}", "min", v.min, "max",
                                              v.max, "mean", mean, "std", sd, "nonfinite",
                                              (json_int_t)v.nonfinite));
            json_array_append_new(tensors, jt);
        } else {
            printf("  %-24s %-5s %-16s %12llu  %-15s  %s", s->name, fa_st_dtype_name(s->dtype),
                   shape, (unsigned long long)(s->end - s->begin), fed, sha);
            if (is_float && v.n)
                printf("  %.4g / %.4g / %.4g / %.4g", v.min, v.max, mean, sd);
            if (v.nonfinite)
                printf("  (%llu non-finite)", (unsigned long long)v.nonfinite);
            printf("\n");
        }
    }
    if (json) {
        json_object_set_new(root, "file", json_string(path));
        json_object_set_new(root, "size", json_integer((json_int_t)sb.st_size));
        json_object_set_new(root, "sha256", json_string(file_sha));
        json_object_set_new(root, "data_offset", json_integer((json_int_t)fa_st_data_offset(st)));
        json_object_set_new(root, "metadata", meta);
        meta = NULL;
        json_object_set_new(root, "fedagg", fedmeta);
        fedmeta = NULL;
        json_object_set_new(root, "tensors", tensors);
        tensors = NULL;
        json_object_set_new(root, "elements", json_integer((json_int_t)total_numel));
        json_t *tot =
            json_pack("{s:I, s:I, s:I}", "tensors", (json_int_t)fa_tensors_count(t), "parameters",
                      (json_int_t)total_numel, "bytes", (json_int_t)fa_tensors_total_bytes(t));
        json_object_set_new(tot, "federated_tensors",
                            fed_source ? json_integer((json_int_t)fa_tensors_fed_count(t))
                                       : json_null());
        json_object_set_new(tot, "federated_coordinates",
                            fed_source ? json_integer((json_int_t)fa_tensors_fed_numel(t))
                                       : json_null());
        json_object_set_new(root, "totals", tot);
        json_object_set_new(root, "federated_from",
                            !fed_source ? json_null()
                            : config    ? json_string(config)
                                        : json_string(FA_TENSORS_META_KEY));
        json_object_set_new(root, "mlp", is_mlp ? json_string(arch) : json_null());
        if (!is_mlp)
            json_object_set_new(root, "mlp_mismatch", json_string(why));
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text)
            printf("%s\n", text);
        free(text);
    } else {
        printf("elements: %llu\n", (unsigned long long)total_numel);
        printf("totals: %zu tensors, %llu parameters, %llu bytes\n", fa_tensors_count(t),
               (unsigned long long)total_numel, (unsigned long long)fa_tensors_total_bytes(t));
        if (fed_source)
            printf("federated: %zu tensors, %llu coordinates (%s%s%s)\n", fa_tensors_fed_count(t),
                   (unsigned long long)fa_tensors_fed_numel(t), fed_source, config ? " " : "",
                   config ? config : "");
        else
            printf("federated: not known (no %s metadata; give --config AGGREGATOR.textproto)\n",
                   FA_TENSORS_META_KEY);
        if (is_mlp)
            printf("model: built-in MLP %s (PyTorch nn.Linear names and layout)\n", arch);
        else
            printf("model: not the built-in MLP layout (%s)\n", why);
    }
    rc = 0;
out:
    json_decref(meta);
    json_decref(fedmeta);
    json_decref(tensors);
    json_decref(root);
    if (fd >= 0)
        close(fd);
    fa_tensors_del(t);
    fa_st_del(st);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* diff                                                                    */
/* ---------------------------------------------------------------------- */

struct absdiff {
    double max, sum;
    uint64_t n, nonfinite; /* pairs where one side is NaN or infinite and they differ */
};

/* |a - b| over tensors x of a and y of b (same numel), as float32. */
static int diff_values(const fa_safetensors *a, const fa_st_tensor *x, const fa_safetensors *b,
                       const fa_st_tensor *y, struct absdiff *d, fa_error *err)
{
    size_t ea = fa_st_dtype_size(x->dtype), eb = fa_st_dtype_size(y->dtype);
    uint8_t *ba = malloc(STEP_ELEMS * ea), *bb = malloc(STEP_ELEMS * eb);
    float *va = malloc(STEP_ELEMS * sizeof(float)), *vb = malloc(STEP_ELEMS * sizeof(float));
    int rc = 0;

    memset(d, 0, sizeof(*d));
    if (!ba || !bb || !va || !vb) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "tensor '%s': out of memory", x->name);
        goto out;
    }
    for (uint64_t done = 0; rc == 0 && done < x->numel;) {
        size_t k = x->numel - done < STEP_ELEMS ? (size_t)(x->numel - done) : STEP_ELEMS;
        if ((rc = fa_st_read_range(a, x, done * ea, ba, k * ea, err)) != 0 ||
            (rc = fa_st_read_range(b, y, done * eb, bb, k * eb, err)) != 0)
            break;
        fa_tensors_to_f32(x->dtype, ba, va, k);
        fa_tensors_to_f32(y->dtype, bb, vb, k);
        for (size_t i = 0; i < k; i++) {
            double v = fabs((double)va[i] - (double)vb[i]);
            if (va[i] == vb[i] || (isnan(va[i]) && isnan(vb[i])))
                v = 0;
            if (!isfinite(v)) {
                d->nonfinite++;
                continue;
            }
            d->max = v > d->max ? v : d->max;
            d->sum += v;
            d->n++;
        }
        done += k;
    }
out:
    free(ba);
    free(bb);
    free(va);
    free(vb);
    return rc;
}

static int cmd_diff(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    fa_safetensors *sa = NULL, *sb = NULL;
    fa_tensors *ta = NULL, *tb = NULL;
    json_t *root = NULL, *rows = NULL, *only_a = NULL, *only_b = NULL, *diffs = NULL;
    size_t n_only_a = 0, n_only_b = 0, n_diff = 0, n_valdiff = 0;
    double worst = 0;
    const char *worst_name = NULL;
    fa_error err;
    int json = 0, c, rc = 2;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 2 != argc) {
        fprintf(stderr, "fedagg model diff: give two files, A and B\n");
        usage(stderr);
        return 2;
    }
    const char *pa = argv[optind], *pb = argv[optind + 1];
    if (fa_st_open(&sa, pa, &err) != 0 || fa_st_open(&sb, pb, &err) != 0) {
        fprintf(stderr, "fedagg model diff: %s\n", err.msg);
        goto out;
    }
    if (plain_table(sa, &ta, &err) != 0 || plain_table(sb, &tb, &err) != 0) {
        fprintf(stderr, "fedagg model diff: %s: %s\n", !ta ? pa : pb, err.msg);
        goto out;
    }
    root = json_object();
    rows = json_array();
    only_a = json_array();
    only_b = json_array();
    diffs = json_array();
    if (!json) {
        printf("A: %s (%zu tensors)\nB: %s (%zu tensors)\n", pa, fa_st_count(sa), pb,
               fa_st_count(sb));
        printf("  %-32s %-10s %-16s %12s %12s\n", "name", "dtype", "shape", "max |a-b|",
               "mean |a-b|");
    }
    for (size_t i = 0; i < fa_st_count(sa); i++) {
        const fa_st_tensor *x = fa_st_at(sa, i);
        long j = fa_tensors_index(tb, x->name);
        const fa_st_tensor *y = j >= 0 ? fa_st_at(sb, (size_t)j) : NULL;
        char shx[160], shy[160], dt[16];
        struct absdiff d;
        shape_str(x->ndim, x->shape, shx, sizeof(shx));
        if (!y) {
            n_only_a++;
            json_array_append_new(only_a, json_string(x->name));
            continue;
        }
        shape_str(y->ndim, y->shape, shy, sizeof(shy));
        int same_shape =
            x->ndim == y->ndim && memcmp(x->shape, y->shape, x->ndim * sizeof(uint64_t)) == 0;
        if (!same_shape || x->dtype != y->dtype) {
            n_diff++;
            json_array_append_new(
                diffs, json_pack("{s:s, s:{s:s, s:o}, s:{s:s, s:o}}", "name", x->name, "a", "dtype",
                                 fa_st_dtype_name(x->dtype), "shape", shape_json(x->ndim, x->shape),
                                 "b", "dtype", fa_st_dtype_name(y->dtype), "shape",
                                 shape_json(y->ndim, y->shape)));
        }
        if (!same_shape)
            continue;
        if (diff_values(sa, x, sb, y, &d, &err) != 0) {
            fprintf(stderr, "fedagg model diff: %s\n", err.msg);
            goto out;
        }
        double mean = d.n ? d.sum / (double)d.n : 0;
        if (d.max > 0 || d.nonfinite) {
            double w = d.nonfinite ? INFINITY : d.max;
            n_valdiff++;
            if (!worst_name || w > worst) {
                worst = w;
                worst_name = x->name;
            }
        }
        snprintf(dt, sizeof(dt), "%s%s%s", fa_st_dtype_name(x->dtype),
                 x->dtype == y->dtype ? "" : "/",
                 x->dtype == y->dtype ? "" : fa_st_dtype_name(y->dtype));
        if (json) {
            json_t *r =
                json_pack("{s:s, s:s, s:s, s:o, s:f, s:f, s:I}", "name", x->name, "dtype_a",
                          fa_st_dtype_name(x->dtype), "dtype_b", fa_st_dtype_name(y->dtype),
                          "shape", shape_json(x->ndim, x->shape), "max_abs_diff", d.max,
                          "mean_abs_diff", mean, "nonfinite_diffs", (json_int_t)d.nonfinite);
            json_array_append_new(rows, r);
        } else {
            printf("  %-32s %-10s %-16s %12.6g %12.6g", x->name, dt, shx, d.max, mean);
            if (d.nonfinite)
                printf("  (%llu pairs with NaN/inf differ)", (unsigned long long)d.nonfinite);
            printf("\n");
        }
    }
    for (size_t j = 0; j < fa_st_count(sb); j++) {
        const fa_st_tensor *y = fa_st_at(sb, j);
        if (fa_tensors_index(ta, y->name) < 0) {
            n_only_b++;
            json_array_append_new(only_b, json_string(y->name));
        }
    }
    int same = n_only_a == 0 && n_only_b == 0 && n_diff == 0;
    if (json) {
        json_object_set_new(root, "a", json_string(pa));
        json_object_set_new(root, "b", json_string(pb));
        json_object_set_new(root, "same_table", json_boolean(same));
        json_object_set_new(root, "tensors", rows);
        json_object_set_new(root, "only_in_a", only_a);
        json_object_set_new(root, "only_in_b", only_b);
        json_object_set_new(root, "different", diffs);
        rows = only_a = only_b = diffs = NULL;
        json_object_set_new(root, "values_differ", json_integer((json_int_t)n_valdiff));
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text)
            printf("%s\n", text);
        free(text);
    } else {
        for (size_t i = 0; i < fa_st_count(sa); i++) {
            const fa_st_tensor *x = fa_st_at(sa, i), *y;
            long j = fa_tensors_index(tb, x->name);
            char shx[160], shy[160];
            if (j < 0) {
                shape_str(x->ndim, x->shape, shx, sizeof(shx));
                printf("only in A: '%s' (%s %s)\n", x->name, fa_st_dtype_name(x->dtype), shx);
                continue;
            }
            y = fa_st_at(sb, (size_t)j);
            shape_str(x->ndim, x->shape, shx, sizeof(shx));
            shape_str(y->ndim, y->shape, shy, sizeof(shy));
            if (strcmp(shx, shy) != 0)
                printf("shape differs: '%s' is %s in A, %s in B\n", x->name, shx, shy);
            if (x->dtype != y->dtype)
                printf("dtype differs: '%s' is %s in A, %s in B\n", x->name,
                       fa_st_dtype_name(x->dtype), fa_st_dtype_name(y->dtype));
        }
        for (size_t j = 0; j < fa_st_count(sb); j++) {
            const fa_st_tensor *y = fa_st_at(sb, j);
            char shy[160];
            if (fa_tensors_index(ta, y->name) >= 0)
                continue;
            shape_str(y->ndim, y->shape, shy, sizeof(shy));
            printf("only in B: '%s' (%s %s)\n", y->name, fa_st_dtype_name(y->dtype), shy);
        }
        if (same)
            printf("same table: %zu tensors", fa_st_count(sa));
        else
            printf("tables differ: %zu tensors only in A, %zu only in B, %zu with another shape "
                   "or dtype",
                   n_only_a, n_only_b, n_diff);
        if (n_valdiff)
            printf("; values differ in %zu tensors (largest |a-b| %.6g, in '%s')\n", n_valdiff,
                   worst, worst_name);
        else
            printf("; the values compared are equal\n");
    }
    rc = same ? 0 : 1;
out:
    json_decref(root);
    json_decref(rows);
    json_decref(only_a);
    json_decref(only_b);
    json_decref(diffs);
    fa_tensors_del(ta);
    fa_tensors_del(tb);
    fa_st_del(sa);
    fa_st_del(sb);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* convert                                                                 */
/* ---------------------------------------------------------------------- */

struct conv {
    const fa_safetensors *st;
    const fa_st_tensor *src;
};

/* fa_st_view fill: bytes [off, off + len) of the tensor in v->dtype, from
 * the source tensor's elements through float32.  The writer asks in chunks
 * of whole elements (1 MiB is a multiple of every dtype's size). */
static int conv_fill(void *ctx, const fa_st_view *v, uint64_t off, void *buf, size_t len,
                     fa_error *err)
{
    const struct conv *c = ctx;
    size_t eo = fa_st_dtype_size(v->dtype), ei = fa_st_dtype_size(c->src->dtype);
    uint8_t *in = NULL;
    float *f = NULL;
    int rc = 0;

    if (v->dtype == c->src->dtype)
        return fa_st_read_range(c->st, c->src, off, buf, len, err);
    if (off % eo || len % eo)
        return fa_errorf(err, FA_ERR_INVAL, "tensor '%s': a chunk [%llu, +%zu) cuts an element",
                         v->name, (unsigned long long)off, len);
    in = malloc(STEP_ELEMS * ei);
    f = malloc(STEP_ELEMS * sizeof(float));
    if (!in || !f) {
        rc = fa_errorf(err, FA_ERR_NOMEM, "tensor '%s': out of memory", v->name);
        goto out;
    }
    for (size_t done = 0, n = len / eo; rc == 0 && done < n;) {
        size_t k = n - done < STEP_ELEMS ? n - done : STEP_ELEMS;
        rc = fa_st_read_range(c->st, c->src, (off / eo + done) * ei, in, k * ei, err);
        if (rc == 0) {
            fa_tensors_to_f32(c->src->dtype, in, f, k);
            fa_tensors_from_f32(v->dtype, f, (uint8_t *)buf + done * eo, k);
        }
        done += k;
    }
out:
    free(in);
    free(f);
    return rc;
}

static int cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dtype", required_argument, NULL, 'd'},
        {"all", no_argument, NULL, 'a'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dtype = NULL, **meta = NULL;
    fa_safetensors *st = NULL;
    fa_st_view *views = NULL;
    struct conv *ctx = NULL;
    fa_st_dtype to;
    uint64_t bytes_in = 0, bytes_out = 0;
    size_t n, converted = 0;
    fa_error err;
    int all = 0, c, rc = 1;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dtype = optarg; break;
        case 'a': all = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind + 2 != argc || !dtype) {
        fprintf(stderr, "fedagg model convert: give IN, OUT and --dtype bf16|f16|f32\n");
        usage(stderr);
        return 2;
    }
    if (strcasecmp(dtype, "bf16") == 0)
        to = FA_ST_BF16;
    else if (strcasecmp(dtype, "f16") == 0)
        to = FA_ST_F16;
    else if (strcasecmp(dtype, "f32") == 0)
        to = FA_ST_F32;
    else {
        fprintf(stderr, "fedagg model convert: --dtype '%s': give bf16, f16 or f32\n", dtype);
        return 2;
    }
    const char *in = argv[optind], *outp = argv[optind + 1];
    if (fa_st_open(&st, in, &err) != 0) {
        fprintf(stderr, "fedagg model convert: %s\n", err.msg);
        return 1;
    }
    n = fa_st_count(st);
    views = calloc(n + 1, sizeof(*views));
    ctx = calloc(n + 1, sizeof(*ctx));
    meta = calloc(2 * fa_st_metadata_count(st) + 1, sizeof(*meta));
    if (!views || !ctx || !meta) {
        fprintf(stderr, "fedagg model convert: %s: out of memory\n", in);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const fa_st_tensor *s = fa_st_at(st, i);
        fa_st_dtype d = s->dtype;
        if (fa_tensors_dtype_is_float(d) && d != to &&
            (all || (to == FA_ST_F32 ? d != FA_ST_F64 : d == FA_ST_F32))) {
            d = to;
            converted++;
        }
        ctx[i] = (struct conv){st, s};
        views[i] = (fa_st_view){s->name, d, s->ndim, s->shape, NULL, conv_fill, &ctx[i]};
        bytes_in += s->end - s->begin;
        bytes_out += s->numel * fa_st_dtype_size(d);
    }
    for (size_t i = 0; i < fa_st_metadata_count(st); i++)
        fa_st_metadata_at(st, i, &meta[2 * i], &meta[2 * i + 1]);
    if (fa_st_save(outp, 0644, views, n, meta, fa_st_metadata_count(st), &err) != 0) {
        fprintf(stderr, "fedagg model convert: %s -> %s: %s\n", in, outp, err.msg);
        goto out;
    }
    printf("wrote %s: %zu tensors, %zu converted to %s; tensor data %llu -> %llu bytes\n", outp, n,
           converted, fa_st_dtype_name(to), (unsigned long long)bytes_in,
           (unsigned long long)bytes_out);
    rc = 0;
out:
    free(meta);
    free(ctx);
    free(views);
    fa_st_del(st);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* init                                                                    */
/* ---------------------------------------------------------------------- */

/* "784-256-128-10" */
static int parse_arch(const char *s, fa_mlp_config *c, fa_error *err)
{
    uint32_t w[FA_MLP_MAX_LAYERS + 2];
    uint32_t n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || v == 0 || v > FA_MLP_MAX_DIM || n == FA_MLP_MAX_LAYERS + 2)
            return fa_errorf(err, FA_ERR_INVAL,
                             "--arch '%s': widths 1..%u separated by '-', 2 to %d of them", s,
                             FA_MLP_MAX_DIM, FA_MLP_MAX_LAYERS + 1);
        w[n++] = (uint32_t)v;
        p = end;
        if (*p == '-')
            p++;
        else if (*p)
            return fa_errorf(err, FA_ERR_INVAL, "--arch '%s': unexpected '%c'", s, *p);
    }
    if (n < 2)
        return fa_errorf(err, FA_ERR_INVAL, "--arch '%s': give at least input and classes", s);
    return fa_mlp_config_make(c, w[0], w + 1, n - 2, w[n - 1], err);
}

static int cmd_init(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, NULL, 'o'},  {"arch", required_argument, NULL, 'a'},
        {"seed", required_argument, NULL, 's'}, {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0},
    };
    const char *out = NULL, *arch = "784-256-128-10", *config = NULL;
    unsigned long long seed = 1;
    fa_mlp_config c;
    fa_mlp_layout l;
    fa_error err;
    char *end, buf[160], sbuf[32];
    int ch;

    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'o': out = optarg; break;
        case 'a': arch = optarg; break;
        case 'c': config = optarg; break;
        case 's':
            errno = 0;
            seed = strtoull(optarg, &end, 10);
            if (*end || !*optarg || *optarg == '-' || errno) {
                fprintf(stderr, "fedagg model init: --seed: '%s' is not an integer\n", optarg);
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!out || optind != argc) {
        fprintf(stderr, "fedagg model init: --out FILE is required\n");
        usage(stderr);
        return 2;
    }
    if (config) {
        /* the aggregator's ModelSpec, defaults filled by the config loader */
        ProtobufCMessage *msg = NULL;
        if (fa_config_load(FA_CONFIG_AGGREGATOR, config, FA_CONFIG_NO_FILES, &msg, NULL, &err) !=
            0) {
            fprintf(stderr, "fedagg model init: %s\n", err.msg);
            return 1;
        }
        const Fedagg__AggregatorConfig *ac = (const Fedagg__AggregatorConfig *)msg;
        const Fedagg__ModelSpec *ms = ac->model;
        int rc = 0;
        if (ms && ms->init_file && *ms->init_file) {
            fprintf(stderr,
                    "fedagg model init: %s: model.init_file is set (%s): version 0 is that "
                    "file, nothing to initialise\n",
                    config, ms->init_file);
            rc = 2;
        } else if (ms) {
            rc = fa_mlp_config_make(&c, ms->input_dim, ms->hidden, (uint32_t)ms->n_hidden,
                                    ms->output_dim, &err) != 0;
            if (rc)
                fprintf(stderr, "fedagg model init: %s: model: %s\n", config, err.msg);
            seed = ms->init_seed;
        } else {
            fa_mlp_config_default(&c);
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        if (rc)
            return rc;
    } else if (parse_arch(arch, &c, &err) != 0) {
        fprintf(stderr, "fedagg model init: %s\n", err.msg);
        return 2;
    }
    if (fa_mlp_layout_init(&l, &c, &err) != 0) {
        fprintf(stderr, "fedagg model init: %s\n", err.msg);
        return 2;
    }
    float *p = malloc(l.n_params * sizeof(float));
    if (!p) {
        fprintf(stderr, "fedagg model init: out of memory\n");
        return 1;
    }
    fa_mlp_init_he(&l, p, seed);
    snprintf(sbuf, sizeof(sbuf), "%llu", seed);
    const char *meta[] = {"fedagg.init", "he-normal", "fedagg.init_seed", sbuf};
    int rc = fa_mlp_save(out, 0644, &l, p, meta, 2, &err);
    free(p);
    if (rc != 0) {
        fprintf(stderr, "fedagg model init: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s: MLP %s, %zu parameters, seed %llu\n", out,
           fa_mlp_config_str(&c, buf, sizeof(buf)), l.n_params, seed);
    return 0;
}

int fa_cmd_model(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "card") == 0)
        return fa_model_card_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "fetch") == 0)
        return fa_model_fetch_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "verify") == 0)
        return fa_model_verify_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(argv[1], "diff") == 0)
        return cmd_diff(argc - 1, argv + 1);
    if (strcmp(argv[1], "convert") == 0)
        return cmd_convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "init") == 0)
        return cmd_init(argc - 1, argv + 1);
    fprintf(stderr, "fedagg model: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
