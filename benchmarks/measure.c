#include "benchmarks/measure.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "common/fa_time.h"
#include "crypto/mask_prg_internal.h"

double fa_bench_now_s(void)
{
    return fa_time_mono_s();
}

double fa_bench_thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fa_bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fa_bench_median(const double *v, int n)
{
    double *s, m;
    int k = 0;

    if (n <= 0 || !(s = malloc((size_t)n * sizeof(double))))
        return NAN;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            s[k++] = v[i];
    if (k == 0) {
        free(s);
        return NAN;
    }
    qsort(s, (size_t)k, sizeof(double), fa_bench_cmp_double);
    m = k % 2 ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2;
    free(s);
    return m;
}

void fa_bench_verror(const char *cmd, const char *part, const char *head, const char *fmt,
                     va_list ap)
{
    char msg[1024], q[1100];
    size_t j = 0;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    for (size_t i = 0; msg[i] && j + 3 < sizeof(q); i++) {
        if (msg[i] == '"' || msg[i] == '\\')
            q[j++] = '\\';
        q[j++] = (msg[i] == '\n' || msg[i] == '\t') ? ' ' : msg[i];
    }
    q[j] = '\0';
    printf("{%s,\"error\":\"%s\"}\n", head, q);
    fflush(stdout);
    fprintf(stderr, "fedagg-bench %s: %s: %s\n", cmd, part, msg);
}

const char *fa_bench_json_num(char *buf, size_t n, double v, int prec)
{
    if (!isfinite(v))
        snprintf(buf, n, "null");
    else
        snprintf(buf, n, "%.*f", prec, v);
    return buf;
}

/* The client's masking step (stream_block in crypto/secagg_client.c, ring
 * input): the library's fa_mask_prg_mask from the input into the accumulator,
 * block by block, every mask of the block in one call.  The self mask is
 * added and the pairwise masks alternate in sign, as they do for a client
 * in the middle of the sorted ids. */
double fa_bench_mask_seconds(const uint32_t *in, uint64_t d, size_t n)
{
    fa_mask_prg *g = calloc(n, sizeof(*g));
    int *sign = calloc(n, sizeof(*sign));
    uint32_t *acc = sodium_malloc(FA_MASK_PRG_BLOCK_WORDS * 4);
    uint32_t *scratch = sodium_malloc(FA_MASK_PRG_BLOCK_WORDS * 4);
    uint8_t key[16];
    double t0 = -1;
    if (!g || !sign || !acc || !scratch)
        goto out;
    for (size_t i = 0; i < n; i++) {
        memset(key, (int)i + 1, sizeof(key));
        if (fa_mask_prg_init(&g[i], key, 0) != 0)
            goto out;
        sign[i] = (i & 1) ? -1 : 1;
    }
    t0 = fa_bench_thread_cpu_s();
    for (uint64_t off = 0; off < d; off += FA_MASK_PRG_BLOCK_WORDS) {
        size_t m = d - off < FA_MASK_PRG_BLOCK_WORDS ? (size_t)(d - off) : FA_MASK_PRG_BLOCK_WORDS;
        if (fa_mask_prg_mask(g, sign, n, in + off, acc, m, scratch) != 0) {
            t0 = -1;
            goto out;
        }
    }
    t0 = fa_bench_thread_cpu_s() - t0;
out:
    for (size_t i = 0; g && i < n; i++)
        fa_mask_prg_free(&g[i]);
    free(g);
    free(sign);
    if (acc)
        sodium_free(acc);
    if (scratch)
        sodium_free(scratch);
    return t0;
}
