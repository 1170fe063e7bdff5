/* Unit tests of worker/local_checkpoint: a saved local round reads back into
 * a new network and compressor exactly; it holds nothing but its header,
 * the parameters, the momentum and the compressor's state; a truncated, torn,
 * altered or foreign file is refused as damaged and one saved for another
 * round, model version, model, starting point, rank or setup as stale, each
 * with a message that names the file and says what differs; nothing is
 * applied from a refused file. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/mlp.h"
#include "model/rng.h"
#include "worker/comm.h"
#include "worker/compress.h"
#include "worker/local_checkpoint.h"

#define DIM 12
#define N_EX 64

static char dir[] = "/tmp/fa_test_local_ckpt.XXXXXX";
static char path[256];
static fa_mlp_config mc;
static float xs[N_EX * DIM];
static uint8_t ys[N_EX];

static int setup(void **state)
{
    const uint32_t hidden[1] = {32};
    fa_rng r;
    fa_rng_seed(&r, 8, 0);
    for (size_t i = 0; i < N_EX * DIM; i++)
        xs[i] = (float)fa_rng_normal(&r);
    for (size_t i = 0; i < N_EX; i++)
        ys[i] = (uint8_t)(xs[i * DIM] > 0);
    if (!mkdtemp(dir) || fa_mlp_config_make(&mc, DIM, hidden, 1, 2, NULL) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/local-round.0", dir);
    return 0;
}

static int teardown(void **state)
{
    unlink(path);
    rmdir(dir);
    return 0;
}

/* A network and a PowerSGD compressor with state in them: a few steps of
 * SGD on the one-rank communicator. */
typedef struct rig {
    fa_comm *comm;
    fa_mlp *m;
    fa_compress *cz;
    size_t np;
} rig;

static void rig_new(rig *g, int train_steps)
{
    fa_mlp_opts mo;
    fa_compress_config cc;
    fa_compress_tensor t[2 * FA_MLP_MAX_LAYERS];
    const fa_mlp_layout *l;
    fa_error err;
    fa_sgd sgd = {0.1f, 0.9f, 0.0f};

    assert_int_equal(fa_comm_local_group_new(&g->comm, 1, NULL), 0);
    fa_mlp_opts_default(&mo);
    mo.backend = FA_MLP_CPU;
    mo.cpu_threads = 1;
    assert_int_equal(fa_mlp_new(&g->m, &mc, &mo, &err), 0);
    l = fa_mlp_layout_of(g->m);
    g->np = l->n_params;
    fa_compress_config_default(&cc);
    cc.kind = FA_COMPRESS_POWERSGD;
    cc.powersgd_start_step = 1;
    cc.min_compress_numel = 64;
    fa_compress_tensors_from_layout(l, t);
    assert_int_equal(fa_compress_new(&g->cz, &cc, t, l->n_tensors, l->n_params, 0, &err), 0);
    assert_int_equal(fa_mlp_init(g->m, 3, &err), 0);
    for (int s = 0; s < train_steps; s++) {
        assert_int_equal(fa_mlp_forward_backward(g->m, xs, ys, N_EX, N_EX, NULL, &err), 0);
        assert_int_equal(
            fa_compress_allreduce(g->cz, g->comm, fa_mlp_grads(g->m, NULL), g->np, &err), 0);
        assert_int_equal(fa_mlp_sgd_step(g->m, &sgd, &err), 0);
    }
}

static void rig_del(rig *g)
{
    fa_compress_del(g->cz);
    fa_mlp_del(g->m);
    fa_comm_del(g->comm);
}

static void key_of(const rig *g, fa_local_ckpt_key *k)
{
    memset(k, 0, sizeof(*k));
    k->round = 7;
    k->attempt = 1;
    k->version = 6;
    memset(k->model_sha256, 0xab, 32);
    memset(k->start_digest, 0x11, sizeof(k->start_digest));
    memset(k->setup_digest, 0x22, sizeof(k->setup_digest));
    k->rank = 0;
    k->world = 1;
    k->n_params = g->np;
}

static const fa_train_pos saved_pos = {
    .step = 5, .samples = 320, .pass_loss = 0.1 + 0.2, .pass_count = 320};

static void save_one(rig *g)
{
    fa_local_ckpt_key k;
    fa_error err;
    key_of(g, &k);
    if (fa_local_ckpt_save(path, &k, &saved_pos, 20, g->m, g->cz, &err) != 0)
        fail_msg("save: %s", err.msg);
}

static void test_round_trip(void **state)
{
    rig a, b;
    fa_local_ckpt_key k;
    fa_local_ckpt *c = NULL;
    fa_compress_part pa[FA_COMPRESS_MAX_PARTS], pb[FA_COMPRESS_MAX_PARTS];
    float *va = malloc(4096 * 4), *vb = malloc(4096 * 4);
    size_t na, nb, expect;
    struct stat st;
    fa_error err;

    rig_new(&a, 4);
    rig_new(&b, 0);
    assert_true(a.np <= 4096);
    save_one(&a);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    key_of(&b, &k);
    k.attempt = 3; /* another attempt of the same round: still this round's */
    if (fa_local_ckpt_load(&c, path, &k, b.cz, NULL, &err) != 0)
        fail_msg("load: %s", err.msg);
    assert_int_equal(fa_local_ckpt_pos(c)->step, 5);
    assert_int_equal(fa_local_ckpt_pos(c)->samples, 320);
    assert_memory_equal(&fa_local_ckpt_pos(c)->pass_loss, &saved_pos.pass_loss, sizeof(double));
    assert_int_equal(fa_local_ckpt_total(c), 20);
    assert_int_equal(fa_local_ckpt_attempt(c), 1);
    assert_int_equal(fa_local_ckpt_apply(c, b.m, b.cz, &err), 0);
    fa_local_ckpt_del(c);

    fa_mlp_get_params(a.m, va, NULL);
    fa_mlp_get_params(b.m, vb, NULL);
    assert_memory_equal(va, vb, a.np * 4);
    fa_mlp_get_momentum(a.m, va, NULL);
    fa_mlp_get_momentum(b.m, vb, NULL);
    assert_memory_equal(va, vb, a.np * 4);
    na = fa_compress_state_parts(a.cz, pa);
    nb = fa_compress_state_parts(b.cz, pb);
    assert_int_equal(na, nb);
    assert_true(na >= 5); /* step, rng, error, PowerSGD's have_q, qrng, q */
    expect = 8 + 4 + 4 + (8 + 4 + 8 + 32 + 32 + 32 + 4 + 4 + 8) + 5 * 8 + 4 + 32;
    expect += 2 * (4 + 8) + strlen("params") + strlen("momentum") + 2 * a.np * 4;
    for (size_t i = 0; i < na; i++) {
        assert_string_equal(pa[i].name, pb[i].name);
        assert_int_equal(pa[i].len, pb[i].len);
        assert_memory_equal(pa[i].data, pb[i].data, pa[i].len);
        expect += 4 + 8 + strlen("compress.") + strlen(pa[i].name) + pa[i].len;
    }
    /* Nothing else is in the file: no key, no seed, no share. */
    assert_int_equal((size_t)st.st_size, expect);
    rig_del(&a);
    rig_del(&b);
    free(va);
    free(vb);
}

/* Loads the file against k into a fresh rig: must return code (with the
 * message holding want and the file's name), and leave the rig untouched. */
static void expect_refusal(const fa_local_ckpt_key *k, int code, const char *want)
{
    rig b;
    fa_local_ckpt *c = NULL;
    float *before = malloc(4096 * 4), *after = malloc(4096 * 4);
    fa_error err;

    rig_new(&b, 0);
    fa_mlp_get_params(b.m, before, NULL);
    memset(&err, 0, sizeof(err));
    assert_int_equal(fa_local_ckpt_load(&c, path, k, b.cz, NULL, &err), code);
    if (code == 0)
        assert_non_null(c); /* loaded, and still not applied */
    else
        assert_null(c);
    fa_local_ckpt_del(c);
    if (want && !strstr(err.msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", err.msg, want);
    if (want)
        assert_non_null(strstr(err.msg, path));
    fa_mlp_get_params(b.m, after, NULL);
    assert_memory_equal(before, after, b.np * 4);
    assert_int_equal(fa_compress_steps(b.cz), 0);
    rig_del(&b);
    free(before);
    free(after);
}

static void rewrite(const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_damaged_files_refused(void **state)
{
    rig a;
    fa_local_ckpt_key k;
    uint8_t *data;
    size_t len;
    FILE *f;

    rig_new(&a, 2);
    key_of(&a, &k);
    save_one(&a);
    f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    len = (size_t)ftell(f);
    rewind(f);
    data = malloc(len);
    assert_int_equal(fread(data, 1, len, f), len);
    fclose(f);

    expect_refusal(&k, 0, NULL); /* as saved: fine (and nothing applied) */

    /* one bit anywhere: in the header, the key, the weights, the last byte */
    const size_t at[] = {20, 60, 250, len / 2, len - 40, len - 1};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        data[at[i]] ^= 0x10;
        rewrite(data, len);
        expect_refusal(&k, FA_ERR_CORRUPT, "digest does not match");
        data[at[i]] ^= 0x10;
    }
    rewrite(data, len / 3); /* torn */
    expect_refusal(&k, FA_ERR_CORRUPT, "damaged");
    rewrite(data, 40);
    expect_refusal(&k, FA_ERR_CORRUPT, "truncated (40 bytes)");
    {
        uint8_t junk[300];
        memset(junk, 'x', sizeof(junk));
        rewrite(junk, sizeof(junk));
    }
    expect_refusal(&k, FA_ERR_CORRUPT, "not a saved local round");
    data[8] = 2; /* format 2 */
    rewrite(data, len);
    expect_refusal(&k, FA_ERR_CORRUPT, "another format version");
    data[8] = 1;
    {
        uint8_t *big = calloc(1, len + 8192);
        memcpy(big, data, len);
        rewrite(big, len + 8192);
        expect_refusal(&k, FA_ERR_CORRUPT, "larger than a round of this model");
        free(big);
    }
    unlink(path);
    expect_refusal(&k, FA_ERR_NOTFOUND, NULL);
    free(data);
    rig_del(&a);
}

static void test_stale_files_refused(void **state)
{
    rig a;
    fa_local_ckpt_key k;

    rig_new(&a, 2);
    save_one(&a);

    key_of(&a, &k);
    k.version = 7;
    expect_refusal(&k, FA_ERR_REPLAY,
                   "is for round 7 from model version 6 (sha256 abababababababab...), not for "
                   "round 7 from version 7");
    key_of(&a, &k);
    k.round = 8;
    expect_refusal(&k, FA_ERR_REPLAY, "not for round 8");
    key_of(&a, &k);
    k.model_sha256[31] ^= 1; /* same version, another model (a rolled-back aggregator) */
    expect_refusal(&k, FA_ERR_REPLAY, "is for round 7 from model version 6");
    key_of(&a, &k);
    k.start_digest[0] ^= 1;
    expect_refusal(&k, FA_ERR_REPLAY, "started from other weights");
    key_of(&a, &k);
    k.world = 2;
    expect_refusal(&k, FA_ERR_REPLAY, "is rank 0 of 1");
    key_of(&a, &k);
    k.setup_digest[5] ^= 1;
    expect_refusal(&k, FA_ERR_REPLAY, "other options, compression, data or device");
    unlink(path);
    rig_del(&a);
}

static void test_digests(void **state)
{
    fa_dataset d = {.n = N_EX, .dim = DIM, .x = xs, .y = ys};
    uint8_t a[32], b[32];
    float v[3] = {1, 2, 3};

    assert_int_equal(fa_local_ckpt_digest_shard(&d, a), 0);
    ys[3] ^= 1;
    assert_int_equal(fa_local_ckpt_digest_shard(&d, b), 0);
    ys[3] ^= 1;
    assert_memory_not_equal(a, b, 32); /* one label changed */
    d.n--;
    assert_int_equal(fa_local_ckpt_digest_shard(&d, b), 0);
    assert_memory_not_equal(a, b, 32);
    assert_int_equal(fa_local_ckpt_digest_floats(v, 3, a), 0);
    v[2] = -0.0f;
    assert_int_equal(fa_local_ckpt_digest_floats(v, 3, b), 0);
    assert_memory_not_equal(a, b, 32);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_damaged_files_refused),
        cmocka_unit_test(test_stale_files_refused),
        cmocka_unit_test(test_digests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
