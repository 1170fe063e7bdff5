/* `fedagg data`: a region's data.
 *
 *   fedagg data split --regions N --alpha A --seed S --out DIR
 *                     [--images F --labels F] [--names a,b,...] [--min-per-region K]
 *   fedagg data info --images F --labels F
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fa_err.h"
#include "worker/data.h"

const char fa_cmd_data_help[] = "split a data set into non-IID regional shards; show a data set";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fedagg data split --regions N --alpha A --seed S --out DIR\n"
            "                         [--images FILE --labels FILE] [--names a,b,...]\n"
            "                         [--min-per-region K]\n"
            "       fedagg data info [--images FILE --labels FILE]\n"
            "\n"
            "split   cuts IDX training data into N shards with label skew: for every class,\n"
            "        proportions over the regions ~ Dirichlet(A) (small A: each region sees few\n"
            "        classes; large A: close to IID).  Writes DIR/<region>/train-images-idx3-ubyte.gz,\n"
            "        DIR/<region>/train-labels-idx1-ubyte.gz and DIR/manifest.json (counts and\n"
            "        label histogram per region).  Same seed, same shards.  Each region's worker\n"
            "        is given only its own directory.\n"
            "        --images/--labels default to Fashion-MNIST's training set in\n"
            "        " FA_FASHION_MNIST_DIR " (package dataset-fashion-mnist).\n"
            "        --names: region names instead of region-0..region-<N-1>.\n"
            "        --min-per-region: redraw until every region has at least K examples (10).\n"
            "info    prints the number of examples, image size and label histogram.\n");
}

static int parse_u64(const char *flag, const char *s, unsigned long long max,
                     unsigned long long *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        goto bad;
    *out = strtoull(s, &end, 10);
    if (*end || *out > max)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "fedagg data: %s: '%s' is not an integer in 0..%llu\n", flag, s ? s : "",
            max);
    return -1;
}

static int cmd_split(int argc, char **argv)
{
    static const struct option opts[] = {
        {"regions", required_argument, NULL, 'n'}, {"alpha", required_argument, NULL, 'a'},
        {"seed", required_argument, NULL, 's'},    {"out", required_argument, NULL, 'o'},
        {"images", required_argument, NULL, 'i'},  {"labels", required_argument, NULL, 'l'},
        {"names", required_argument, NULL, 'N'},   {"min-per-region", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *images = FA_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz";
    const char *labels = FA_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz";
    const char *out = NULL;
    char *names_buf = NULL, **names = NULL;
    int have_regions = 0, have_alpha = 0, have_seed = 0, c, rc = 1;
    unsigned long long v;
    fa_split_opts so;
    fa_error err;

    fa_split_opts_default(&so);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (parse_u64("--regions", optarg, 100000, &v) != 0 || v == 0) {
                fprintf(stderr, "fedagg data split: --regions must be 1..100000\n");
                goto out;
            }
            so.regions = (uint32_t)v;
            have_regions = 1;
            break;
        case 'a': {
            char *end;
            so.alpha = strtod(optarg, &end);
            if (*end || !(so.alpha > 0.0)) {
                fprintf(stderr, "fedagg data split: --alpha: '%s' is not a number > 0\n", optarg);
                goto out;
            }
            have_alpha = 1;
            break;
        }
        case 's':
            if (parse_u64("--seed", optarg, UINT64_MAX, &v) != 0)
                goto out;
            so.seed = v;
            have_seed = 1;
            break;
        case 'o': out = optarg; break;
        case 'i': images = optarg; break;
        case 'l': labels = optarg; break;
        case 'N': free(names_buf); names_buf = strdup(optarg); break;
        case 'm':
            if (parse_u64("--min-per-region", optarg, UINT32_MAX, &v) != 0)
                goto out;
            so.min_per_region = (uint32_t)v;
            break;
        case 'h': usage(stdout); rc = 0; goto out;
        default: usage(stderr); rc = 2; goto out;
        }
    }
    if (optind < argc || !have_regions || !have_alpha || !have_seed || !out) {
        fprintf(stderr, "fedagg data split: %s\n",
                optind < argc ? "unexpected argument"
                              : "--regions, --alpha, --seed and --out are required");
        usage(stderr);
        rc = 2;
        goto out;
    }
    if (names_buf) {
        uint32_t k = 0;
        names = calloc(so.regions + 1, sizeof(char *));
        for (char *p = names_buf, *comma; names && p; p = comma ? comma + 1 : NULL) {
            comma = strchr(p, ',');
            if (comma)
                *comma = '\0';
            if (k < so.regions + 1)
                names[k] = p;
            k++;
        }
        if (!names || k != so.regions) {
            fprintf(stderr, "fedagg data split: --names lists %u names for %u regions\n", k,
                    so.regions);
            goto out;
        }
    }
    if (fa_split_files(images, labels, out, &so, (const char *const *)names, &err) != 0) {
        fprintf(stderr, "fedagg data split: %s\n", err.msg);
        goto out;
    }
    printf("wrote %u shards and %s/manifest.json (alpha %g, seed %llu)\n", so.regions, out,
           so.alpha, (unsigned long long)so.seed);
    rc = 0;
out:
    free(names);
    free(names_buf);
    return rc;
}

static int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {
        {"images", required_argument, NULL, 'i'},
        {"labels", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *images = FA_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz";
    const char *labels = FA_FASHION_MNIST_DIR "/train-labels-idx1-ubyte.gz";
    fa_data d;
    fa_error err;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': images = optarg; break;
        case 'l': labels = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (fa_data_load(&d, images, labels, &err) != 0) {
        fprintf(stderr, "fedagg data info: %s\n", err.msg);
        return 1;
    }
    uint32_t hist[256] = {0};
    for (uint32_t i = 0; i < d.ds.n; i++)
        hist[d.y[i]]++;
    printf("images: %s\nlabels: %s\nexamples: %u\nimage: %u x %u\nclasses: %u\nhistogram:",
           images, labels, d.ds.n, d.rows, d.cols, d.classes);
    for (uint32_t k = 0; k < d.classes; k++)
        printf(" %u", hist[k]);
    printf("\n");
    fa_data_free(&d);
    return 0;
}

int fa_cmd_data(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "split") == 0)
        return cmd_split(argc - 1, argv + 1);
    if (strcmp(argv[1], "info") == 0)
        return cmd_info(argc - 1, argv + 1);
    fprintf(stderr, "fedagg data: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
