/* `fedagg model`: look at and make model files (safetensors).
 *
 *   fedagg model inspect FILE [--json]
 *   fedagg model init --out FILE [--arch 784-256-128-10] [--seed S]
 *   fedagg model init --out FILE --config AGGREGATOR.textproto
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fa_err.h"
#include "common/fa_safetensors.h"
#include "model/mlp.h"
#include "proto/config_check.h"

const char fa_cmd_model_help[] = "inspect a safetensors model (tensors, shapes, sha256); make an initial one";

static void usage(FILE *f)
{
    fprintf(f, "usage: fedagg model inspect FILE [--json]\n"
               "       fedagg model init --out FILE [--arch 784-256-128-10] [--seed S]\n"
               "       fedagg model init --out FILE --config AGGREGATOR.textproto\n"
               "\n"
               "inspect  validates a safetensors file and lists its metadata and tensors: dtype,\n"
               "         shape, bytes, SHA-256 of the tensor bytes and, for float tensors, min,\n"
               "         max, mean, standard deviation and non-finite count; then whether it is\n"
               "         the built-in MLP (fc<l>.weight (out, in), fc<l>.bias).  --json prints one\n"
               "         JSON object instead.\n"
               "init     writes a He-initialised MLP (PyTorch nn.Linear names, F32) of the given\n"
               "         layer widths, input first and classes last (default 784-256-128-10),\n"
               "         seed default 1, atomically.  With --config, the architecture and seed\n"
               "         are the aggregator config's `model` (what version 0 of the federation\n"
               "         would be).\n");
}

struct stats {
    double min, max, sum, sum2;
    uint64_t n, nonfinite;
};

static void stats_add(struct stats *s, float v)
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
    s->sum2 += (double)v * v;
    s->n++;
}

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

/* SHA-256 of bytes [off, off + len) of fd, and float statistics of them for
 * float dtypes (dtype < 0: none). */
static int hash_range(int fd, uint64_t off, uint64_t len, int dtype, char out[65],
                      struct stats *st)
{
    static uint8_t buf[1 << 20];
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t md[32];
    unsigned mdlen;
    int rc = 0;

    memset(st, 0, sizeof(*st));
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx);
        return -1;
    }
    while (len > 0) {
        size_t chunk = len < sizeof(buf) ? (size_t)len : sizeof(buf);
        ssize_t r = pread(fd, buf, chunk, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = -1;
            break;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)r);
        /* chunks are multiples of 8 bytes except at the end, so elements do not straddle */
        if (dtype == FA_ST_F32)
            for (ssize_t i = 0; i + 4 <= r; i += 4) {
                float v;
                memcpy(&v, buf + i, 4);
                stats_add(st, v);
            }
        else if (dtype == FA_ST_F16 || dtype == FA_ST_BF16)
            for (ssize_t i = 0; i + 2 <= r; i += 2) {
                uint16_t h = (uint16_t)(buf[i] | buf[i + 1] << 8);
                stats_add(st, dtype == FA_ST_F16 ? fa_st_f16_to_f32(h) : fa_st_bf16_to_f32(h));
            }
        off += (uint64_t)r;
        len -= (uint64_t)r;
    }
    if (rc == 0 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1)
        hex(md, 32, out);
    else
        rc = -1;
    EVP_MD_CTX_free(ctx);
    return rc;
}

static void shape_str(const fa_st_tensor *t, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (unsigned i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %llu" : "%llu",
                                 (unsigned long long)t->shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

static int cmd_inspect(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    fa_safetensors *st = NULL;
    fa_error err;
    int json = 0, c, fd = -1, rc = 1;
    json_t *root = NULL, *tensors = NULL, *meta = NULL;
    char file_sha[65], arch[160], why[600] = "";
    struct stats fst;
    struct stat sb;
    fa_mlp_config cfg;
    uint64_t total_numel = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
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
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &sb) != 0 ||
        hash_range(fd, 0, (uint64_t)sb.st_size, -1, file_sha, &fst) != 0) {
        fprintf(stderr, "fedagg model inspect: %s: cannot read: %s\n", path, strerror(errno));
        goto out;
    }
    int is_mlp = fa_mlp_config_from_st(st, &cfg, &err) == 0;
    if (is_mlp)
        fa_mlp_config_str(&cfg, arch, sizeof(arch));
    else
        snprintf(why, sizeof(why), "%s", err.msg);

    root = json_object();
    meta = json_object();
    tensors = json_array();
    for (size_t i = 0; i < fa_st_metadata_count(st); i++) {
        const char *k, *v;
        fa_st_metadata_at(st, i, &k, &v);
        json_object_set_new(meta, k, json_string(v));
    }
    if (!json) {
        printf("file: %s\nsize: %lld bytes (header %llu, data %llu at offset %llu)\nsha256: %s\n",
               path, (long long)sb.st_size, (unsigned long long)fa_st_data_offset(st) - 8,
               (unsigned long long)fa_st_data_len(st), (unsigned long long)fa_st_data_offset(st),
               file_sha);
        printf("metadata:%s\n", fa_st_metadata_count(st) ? "" : " (none)");
        for (size_t i = 0; i < fa_st_metadata_count(st); i++) {
            const char *k, *v;
            fa_st_metadata_at(st, i, &k, &v);
            printf("  %s: %s\n", k, v);
        }
        printf("tensors: %zu\n", fa_st_count(st));
        printf("  %-24s %-5s %-16s %12s  %-64s  %s\n", "name", "dtype", "shape", "bytes", "sha256",
               "min / max / mean / std");
    }
    for (size_t i = 0; i < fa_st_count(st); i++) {
        const fa_st_tensor *t = fa_st_at(st, i);
        char sha[65], shape[160];
        struct stats s;
        int is_float = t->dtype == FA_ST_F32 || t->dtype == FA_ST_F16 || t->dtype == FA_ST_BF16;
        if (hash_range(fd, fa_st_data_offset(st) + t->begin, t->end - t->begin,
                       is_float ? (int)t->dtype : -1, sha, &s) != 0) {
            fprintf(stderr, "fedagg model inspect: %s: tensor '%s': cannot read\n", path, t->name);
            goto out;
        }
        total_numel += t->numel;
        shape_str(t, shape, sizeof(shape));
        double mean = s.n ? s.sum / s.n : 0, sd = s.n ? sqrt(fmax(0, s.sum2 / s.n - mean * mean)) : 0;
        if (json) {
            json_t *jt = json_pack("{s:s, s:s, s:[], s:I, s:s}", "name", t->name, "dtype",
                                   fa_st_dtype_name(t->dtype), "shape", "bytes",
                                   (json_int_t)(t->end - t->begin), "sha256", sha);
            for (unsigned d = 0; d < t->ndim; d++)
                json_array_append_new(json_object_get(jt, "shape"),
                                      json_integer((json_int_t)t->shape[d]));
            if (is_float && s.n)
                json_object_set_new(jt, "stats",
                                    json_pack("{s:f, s:f, s:f, s:f, s:I}", "min", s.min, "max",
                                              s.max, "mean", mean, "std", sd, "nonfinite",
                                              (json_int_t)s.nonfinite));
            json_array_append_new(tensors, jt);
        } else {
            printf("  %-24s %-5s %-16s %12llu  %s", t->name, fa_st_dtype_name(t->dtype), shape,
                   (unsigned long long)(t->end - t->begin), sha);
            if (is_float && s.n)
                printf("  %.4g / %.4g / %.4g / %.4g", s.min, s.max, mean, sd);
            if (s.nonfinite)
                printf("  (%llu non-finite)", (unsigned long long)s.nonfinite);
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
        json_object_set_new(root, "tensors", tensors);
        tensors = NULL;
        json_object_set_new(root, "elements", json_integer((json_int_t)total_numel));
        json_object_set_new(root, "mlp", is_mlp ? json_string(arch) : json_null());
        if (!is_mlp)
            json_object_set_new(root, "mlp_mismatch", json_string(why));
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text)
            printf("%s\n", text);
        free(text);
    } else {
        printf("elements: %llu\n", (unsigned long long)total_numel);
        if (is_mlp)
            printf("model: built-in MLP %s (PyTorch nn.Linear names and layout)\n", arch);
        else
            printf("model: not the built-in MLP layout (%s)\n", why);
    }
    rc = 0;
out:
    json_decref(meta);
    json_decref(tensors);
    json_decref(root);
    if (fd >= 0)
        close(fd);
    fa_st_del(st);
    return rc;
}

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
        {"out", required_argument, NULL, 'o'},
        {"arch", required_argument, NULL, 'a'},
        {"seed", required_argument, NULL, 's'},
        {"config", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
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
        if (fa_config_load(FA_CONFIG_AGGREGATOR, config, FA_CONFIG_NO_FILES, &msg, NULL, &err) != 0) {
            fprintf(stderr, "fedagg model init: %s\n", err.msg);
            return 1;
        }
        const Fedagg__AggregatorConfig *ac = (const Fedagg__AggregatorConfig *)msg;
        const Fedagg__ModelSpec *ms = ac->model;
        int rc = 0;
        if (ms && ms->init_file && *ms->init_file) {
            fprintf(stderr, "fedagg model init: %s: model.init_file is set (%s): version 0 is that "
                            "file, nothing to initialise\n", config, ms->init_file);
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
    if (strcmp(argv[1], "inspect") == 0)
        return cmd_inspect(argc - 1, argv + 1);
    if (strcmp(argv[1], "init") == 0)
        return cmd_init(argc - 1, argv + 1);
    fprintf(stderr, "fedagg model: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
