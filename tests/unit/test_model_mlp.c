/* Unit tests of model/mlp: layout, He initialisation, safetensors I/O with
 * PyTorch names, the gradient against finite differences of an independent
 * double-precision reference, the SGD update, and evaluation. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fa_safetensors.h"
#include "model/mlp.h"
#include "model/rng.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/fa_test_mlp.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static fa_mlp *new_cpu(const fa_mlp_config *c, uint32_t max_batch)
{
    fa_mlp_opts o;
    fa_mlp *m;
    fa_error err;
    fa_mlp_opts_default(&o);
    o.backend = FA_MLP_CPU;
    o.max_batch = max_batch;
    o.cpu_threads = 1;
    if (fa_mlp_new(&m, c, &o, &err) != 0)
        fail_msg("fa_mlp_new: %s", err.msg);
    return m;
}

static void test_layout_default(void **state)
{
    fa_mlp_config c;
    fa_mlp_layout l;
    char buf[64];

    fa_mlp_config_default(&c);
    assert_string_equal(fa_mlp_config_str(&c, buf, sizeof(buf)), "784-256-128-10");
    assert_int_equal(fa_mlp_layout_init(&l, &c, NULL), 0);
    assert_int_equal(l.n_tensors, 6);
    /* 784*256 + 256 + 256*128 + 128 + 128*10 + 10 */
    assert_int_equal(l.n_params, 235146);
    const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight",
                           "fc3.bias"};
    size_t off = 0;
    for (int i = 0; i < 6; i++) {
        assert_string_equal(l.tensors[i].name, names[i]);
        assert_int_equal(l.tensors[i].offset, off); /* contiguous, state_dict order */
        off += l.tensors[i].numel;
    }
    assert_int_equal(off, l.n_params);
    /* PyTorch nn.Linear: weight (out, in) */
    assert_int_equal(l.tensors[0].shape[0], 256);
    assert_int_equal(l.tensors[0].shape[1], 784);
    assert_int_equal(l.tensors[5].ndim, 1);
    assert_int_equal(l.tensors[5].shape[0], 10);
    assert_ptr_equal(fa_mlp_layout_find(&l, "fc2.bias"), &l.tensors[3]);
    assert_null(fa_mlp_layout_find(&l, "fc4.bias"));

    uint32_t hidden[3] = {64, 32, 16};
    fa_error err;
    assert_int_equal(fa_mlp_config_make(&c, 20, hidden, 3, 5, &err), 0);
    assert_string_equal(fa_mlp_config_str(&c, buf, sizeof(buf)), "20-64-32-16-5");
    assert_int_equal(fa_mlp_config_make(&c, 20, hidden, 0, 5, &err), 0); /* logistic regression */
    assert_int_equal(c.n_layers, 1);
    hidden[1] = 0;
    assert_int_equal(fa_mlp_config_make(&c, 20, hidden, 3, 5, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "layer width 0 at position 2"));
    assert_int_equal(fa_mlp_config_make(&c, 20, NULL, 0, 300, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "300 classes"));
    assert_int_equal(fa_mlp_config_make(&c, 20, hidden, 8, 5, &err), FA_ERR_INVAL);
}

static void test_he_init(void **state)
{
    fa_mlp_config c;
    fa_mlp_layout l;
    fa_mlp_config_default(&c);
    fa_mlp_layout_init(&l, &c, NULL);
    float *a = malloc(l.n_params * 4), *b = malloc(l.n_params * 4);

    fa_mlp_init_he(&l, a, 7);
    fa_mlp_init_he(&l, b, 7);
    assert_memory_equal(a, b, l.n_params * 4);
    fa_mlp_init_he(&l, b, 8);
    assert_memory_not_equal(a, b, l.n_params * 4);
    /* weights ~ N(0, 2/in): sample variance within 2 % of 2/784; biases zero */
    for (int t = 0; t < 6; t++) {
        const fa_mlp_tensor *tt = &l.tensors[t];
        double s = 0, s2 = 0;
        for (size_t i = 0; i < tt->numel; i++) {
            s += a[tt->offset + i];
            s2 += (double)a[tt->offset + i] * a[tt->offset + i];
        }
        if (tt->is_bias) {
            assert_true(s2 == 0.0);
        } else if (tt->numel > 10000) {
            double var = s2 / tt->numel - (s / tt->numel) * (s / tt->numel);
            double want = 2.0 / tt->shape[1];
            assert_true(fabs(var / want - 1.0) < 0.02);
            assert_true(fabs(s / tt->numel) < 4 * sqrt(want / tt->numel));
        }
    }
    /* A known value pins the generator across machines and versions. */
    fa_rng r;
    fa_rng_seed(&r, 1, 0);
    uint64_t first = fa_rng_u64(&r);
    fa_rng_seed(&r, 1, 0);
    assert_true(fa_rng_u64(&r) == first);
    fa_rng_seed(&r, 1, 1);
    assert_true(fa_rng_u64(&r) != first);
    free(a);
    free(b);
}

static void test_save_load_pytorch_names(void **state)
{
    fa_mlp_config c;
    fa_mlp_layout l;
    char path[300];
    fa_error err;
    fa_safetensors *st;
    const char *meta[] = {"num_examples", "600"};

    fa_mlp_config_default(&c);
    fa_mlp_layout_init(&l, &c, NULL);
    float *a = malloc(l.n_params * 4), *b = calloc(l.n_params, 4);
    fa_mlp_init_he(&l, a, 3);
    for (size_t i = 0; i < 256; i++)
        a[l.tensors[1].offset + i] = (float)i; /* a non-zero bias */
    snprintf(path, sizeof(path), "%s/model.safetensors", tmpdir);
    assert_int_equal(fa_mlp_save(path, 0644, &l, a, meta, 1, &err), 0);
    assert_int_equal(fa_mlp_load(path, &l, b, &err), 0);
    assert_memory_equal(a, b, l.n_params * 4);

    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_string_equal(fa_st_metadata_get(st, "format"), "pt");
    assert_string_equal(fa_st_metadata_get(st, "fedagg.arch"), "784-256-128-10");
    assert_string_equal(fa_st_metadata_get(st, "num_examples"), "600");
    const fa_st_tensor *w1 = fa_st_find(st, "fc1.weight");
    assert_non_null(w1);
    assert_int_equal(w1->ndim, 2);
    assert_int_equal(w1->shape[0], 256);
    assert_int_equal(w1->shape[1], 784);
    assert_int_equal(w1->dtype, FA_ST_F32);
    fa_mlp_config c2;
    assert_int_equal(fa_mlp_config_from_st(st, &c2, &err), 0);
    assert_memory_equal(&c2, &c, sizeof(c));
    fa_st_del(st);

    /* Wrong architecture: the message names the tensor and both shapes. */
    fa_mlp_config small;
    fa_mlp_layout ls;
    uint32_t h[2] = {128, 128};
    fa_mlp_config_make(&small, 784, h, 2, 10, NULL);
    fa_mlp_layout_init(&ls, &small, NULL);
    assert_int_equal(fa_mlp_load(path, &ls, b, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "tensor 'fc1.weight': shape [256, 784], the 784-128-128-10 "
                                    "model needs [128, 784] (out_features, in_features)"));
    assert_non_null(strstr(err.msg, "model.safetensors"));

    /* Missing tensor, extra tensor, wrong dtype. */
    uint64_t s1[1] = {256}, sw[2] = {256, 784};
    fa_st_view only_bias = {"fc1.bias", FA_ST_F32, 1, s1, a, NULL, NULL};
    snprintf(path, sizeof(path), "%s/partial.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, &only_bias, 1, NULL, 0, &err), 0);
    assert_int_equal(fa_mlp_load(path, &l, b, &err), FA_ERR_NOTFOUND);
    assert_non_null(strstr(err.msg, "tensor 'fc1.weight' of the 784-256-128-10 model is missing"));

    fa_st_view extra[7];
    uint64_t shapes[6][2];
    for (int i = 0; i < 6; i++) {
        shapes[i][0] = l.tensors[i].shape[0];
        shapes[i][1] = l.tensors[i].shape[1];
        extra[i] = (fa_st_view){l.tensors[i].name, FA_ST_F32, l.tensors[i].ndim, shapes[i],
                                a + l.tensors[i].offset, NULL, NULL};
    }
    extra[6] = (fa_st_view){"fc4.bias", FA_ST_F32, 1, s1, a, NULL, NULL};
    snprintf(path, sizeof(path), "%s/extra.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, extra, 7, NULL, 0, &err), 0);
    assert_int_equal(fa_mlp_load(path, &l, b, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "unexpected tensor 'fc4.bias'"));

    uint16_t *half = calloc(256 * 784, 2);
    extra[0] = (fa_st_view){"fc1.weight", FA_ST_BF16, 2, sw, half, NULL, NULL};
    snprintf(path, sizeof(path), "%s/bf16.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, extra, 6, NULL, 0, &err), 0);
    assert_int_equal(fa_mlp_load(path, &l, b, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "tensor 'fc1.weight': dtype BF16, the model is F32"));
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(fa_mlp_config_from_st(st, &c2, &err), FA_ERR_INVAL);
    fa_st_del(st);

    /* config_from_st: a broken chain of shapes */
    uint64_t bad[2] = {128, 255};
    extra[0] = (fa_st_view){"fc1.weight", FA_ST_F32, 2, sw, a, NULL, NULL};
    extra[2].shape = bad;
    snprintf(path, sizeof(path), "%s/chain.safetensors", tmpdir);
    assert_int_equal(fa_st_save(path, 0644, extra, 6, NULL, 0, &err), 0);
    assert_int_equal(fa_st_open(&st, path, &err), 0);
    assert_int_equal(fa_mlp_config_from_st(st, &c2, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "tensor 'fc2.weight': in_features 255 but fc1 has 256 outputs"));
    fa_st_del(st);
    free(half);
    free(a);
    free(b);
}

/* ---- independent double-precision reference of the loss ---- */

static double ref_loss(const fa_mlp_layout *l, const double *p, const float *x, const uint8_t *y,
                       uint32_t n)
{
    const fa_mlp_config *c = &l->config;
    double total = 0.0, a[64], z[64];

    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < c->dims[0]; k++)
            a[k] = x[i * c->dims[0] + k];
        for (uint32_t layer = 0; layer < c->n_layers; layer++) {
            const fa_mlp_tensor *w = &l->tensors[2 * layer], *b = w + 1;
            uint32_t in = c->dims[layer], out = c->dims[layer + 1];
            for (uint32_t o = 0; o < out; o++) {
                double s = p[b->offset + o];
                for (uint32_t k = 0; k < in; k++)
                    s += p[w->offset + (size_t)o * in + k] * a[k];
                z[o] = (layer + 1 < c->n_layers && s < 0) ? 0 : s;
            }
            memcpy(a, z, out * sizeof(double));
        }
        uint32_t C = c->dims[c->n_layers];
        double mx = a[0], sum = 0;
        for (uint32_t j = 1; j < C; j++)
            mx = a[j] > mx ? a[j] : mx;
        for (uint32_t j = 0; j < C; j++)
            sum += exp(a[j] - mx);
        total += log(sum) + mx - a[y[i]];
    }
    return total / n;
}

static void test_gradient_check(void **state)
{
    uint32_t hidden[2] = {9, 7};
    fa_mlp_config c;
    fa_error err;
    const uint32_t n = 11;
    float x[11 * 13];
    uint8_t y[11];
    fa_rng r;
    fa_mlp_stats st;

    assert_int_equal(fa_mlp_config_make(&c, 13, hidden, 2, 5, &err), 0);
    fa_mlp *m = new_cpu(&c, 16);
    const fa_mlp_layout *l = fa_mlp_layout_of(m);
    size_t np = l->n_params;
    float *p = malloc(np * 4), *g = malloc(np * 4);
    double *pd = calloc(np, sizeof(double));

    fa_rng_seed(&r, 99, 0);
    for (uint32_t i = 0; i < n * 13; i++)
        x[i] = (float)fa_rng_normal(&r);
    for (uint32_t i = 0; i < n; i++)
        y[i] = (uint8_t)fa_rng_below(&r, 5);
    fa_mlp_init_he(l, p, 5);
    for (size_t i = 0; i < np; i++) /* non-zero biases too */
        p[i] += 0.05f * (float)fa_rng_normal(&r);
    assert_int_equal(fa_mlp_set_params(m, p, &err), 0);
    assert_int_equal(fa_mlp_forward_backward(m, x, y, n, n, &st, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, g, &err), 0);

    for (size_t i = 0; i < np; i++)
        pd[i] = p[i];
    double loss = ref_loss(l, pd, x, y, n);
    assert_true(fabs(st.loss_sum / n - loss) < 1e-5);

    /* central differences in double on every parameter */
    double max_err = 0;
    for (size_t i = 0; i < np; i++) {
        const double h = 1e-6, save = pd[i];
        pd[i] = save + h;
        double up = ref_loss(l, pd, x, y, n);
        pd[i] = save - h;
        double down = ref_loss(l, pd, x, y, n);
        pd[i] = save;
        double num = (up - down) / (2 * h), e = fabs(num - g[i]) / fmax(1e-3, fabs(num));
        if (e > max_err)
            max_err = e;
        if (e > 1e-3)
            fail_msg("param %zu: analytic %.8g numeric %.8g", i, (double)g[i], num);
    }
    print_message("gradient check: %zu parameters, max relative error %.2e\n", np, max_err);

    /* The gradient is linear in the scale: a part with scale 2n gives half. */
    float *g2 = malloc(np * 4);
    assert_int_equal(fa_mlp_forward_backward(m, x, y, n, 2 * n, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, g2, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(g2[i] - 0.5f * g[i]) <= 1e-6f + 1e-5f * fabsf(g[i]));
    /* Parts of a batch sum to the whole (what the rank all-reduce relies on). */
    float *sum = calloc(np, 4);
    for (uint32_t lo = 0; lo < n; lo += 4) {
        uint32_t k = n - lo < 4 ? n - lo : 4;
        assert_int_equal(fa_mlp_forward_backward(m, x + lo * 13, y + lo, k, n, NULL, &err), 0);
        assert_int_equal(fa_mlp_grads_to_host(m, g2, &err), 0);
        for (size_t i = 0; i < np; i++)
            sum[i] += g2[i];
    }
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(sum[i] - g[i]) <= 1e-6f + 1e-4f * fabsf(g[i]));
    /* An empty part contributes zero. */
    assert_int_equal(fa_mlp_forward_backward(m, x, y, 0, n, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, g2, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(g2[i] == 0.0f);
    free(sum);
    free(g2);
    free(p);
    free(g);
    free(pd);
    fa_mlp_del(m);
}

static void test_sgd_momentum_weight_decay(void **state)
{
    /* Two steps against a hand computation of torch.optim.SGD. */
    uint32_t hidden[1] = {3};
    fa_mlp_config c;
    fa_error err;
    float x[2 * 4] = {0.1f, -0.2f, 0.3f, 0.4f, 1.0f, 0.5f, -0.5f, 0.0f};
    uint8_t y[2] = {0, 1};
    assert_int_equal(fa_mlp_config_make(&c, 4, hidden, 1, 2, &err), 0);
    fa_mlp *m = new_cpu(&c, 4);
    size_t np = fa_mlp_layout_of(m)->n_params;
    float *w = malloc(np * 4), *g = malloc(np * 4), *v = calloc(np, 4), *got = malloc(np * 4);
    fa_sgd opt = {0.1f, 0.9f, 0.01f};

    fa_mlp_init_he(fa_mlp_layout_of(m), w, 1);
    assert_int_equal(fa_mlp_set_params(m, w, &err), 0);
    for (int step = 0; step < 2; step++) {
        assert_int_equal(fa_mlp_forward_backward(m, x, y, 2, 2, NULL, &err), 0);
        assert_int_equal(fa_mlp_grads_to_host(m, g, &err), 0);
        assert_int_equal(fa_mlp_sgd_step(m, &opt, &err), 0);
        for (size_t i = 0; i < np; i++) {
            float gi = g[i] + opt.weight_decay * w[i];
            v[i] = opt.momentum * v[i] + gi;
            w[i] -= opt.lr * v[i];
        }
        assert_int_equal(fa_mlp_get_params(m, got, &err), 0);
        for (size_t i = 0; i < np; i++)
            assert_true(fabsf(got[i] - w[i]) < 1e-6f);
    }
    /* After a reset, the first step is plain SGD again. */
    assert_int_equal(fa_mlp_reset_momentum(m, &err), 0);
    assert_int_equal(fa_mlp_forward_backward(m, x, y, 2, 2, NULL, &err), 0);
    assert_int_equal(fa_mlp_grads_to_host(m, g, &err), 0);
    assert_int_equal(fa_mlp_sgd_step(m, &(fa_sgd){0.1f, 0.9f, 0.0f}, &err), 0);
    assert_int_equal(fa_mlp_get_params(m, got, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(got[i] - (w[i] - 0.1f * g[i])) < 1e-6f);
    /* grads_from_host replaces the gradient the step uses */
    for (size_t i = 0; i < np; i++)
        g[i] = 1.0f;
    assert_int_equal(fa_mlp_grads_from_host(m, g, &err), 0);
    assert_int_equal(fa_mlp_reset_momentum(m, &err), 0);
    memcpy(w, got, np * 4);
    assert_int_equal(fa_mlp_sgd_step(m, &(fa_sgd){0.5f, 0.0f, 0.0f}, &err), 0);
    assert_int_equal(fa_mlp_get_params(m, got, &err), 0);
    for (size_t i = 0; i < np; i++)
        assert_true(fabsf(got[i] - (w[i] - 0.5f)) < 1e-6f);
    assert_int_equal(fa_mlp_sgd_step(m, &(fa_sgd){-1.0f, 0.0f, 0.0f}, &err), FA_ERR_INVAL);
    free(w);
    free(g);
    free(v);
    free(got);
    fa_mlp_del(m);
}

static void test_forward_evaluate_and_errors(void **state)
{
    uint32_t hidden[1] = {8};
    fa_mlp_config c;
    fa_error err;
    float x[5 * 3], logits[5 * 4];
    uint8_t y[5] = {0, 1, 2, 3, 0};
    fa_mlp_stats st;
    fa_mlp_eval ev;

    assert_int_equal(fa_mlp_config_make(&c, 3, hidden, 1, 4, &err), 0);
    fa_mlp *m = new_cpu(&c, 2); /* evaluate batches by 2 */
    for (int i = 0; i < 15; i++)
        x[i] = (float)(i % 7) / 7.0f;
    assert_int_equal(fa_mlp_init(m, 3, &err), 0);
    /* evaluate over 5 examples equals the sum of batch forwards */
    fa_dataset d = {5, 3, x, y};
    assert_int_equal(fa_mlp_evaluate(m, &d, &ev, &err), 0);
    double loss = 0;
    uint32_t correct = 0;
    for (int i = 0; i < 5; i += 2) {
        uint32_t k = 5 - i < 2 ? 5 - i : 2;
        assert_int_equal(fa_mlp_forward(m, x + i * 3, y + i, k, logits + i * 4, &st, &err), 0);
        loss += st.loss_sum;
        correct += st.correct;
    }
    assert_int_equal(ev.n, 5);
    assert_true(fabs(ev.mean_loss - loss / 5) < 1e-9);
    assert_true(fabs(ev.accuracy - correct / 5.0) < 1e-12);
    /* the arg-max of the logits decides correctness */
    uint32_t c2 = 0;
    for (int i = 0; i < 5; i++) {
        int arg = 0;
        for (int j = 1; j < 4; j++)
            if (logits[i * 4 + j] > logits[i * 4 + arg])
                arg = j;
        c2 += arg == y[i];
    }
    assert_int_equal(c2, correct);

    /* errors a caller sees */
    assert_int_equal(fa_mlp_forward_backward(m, x, y, 3, 3, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "batch of 3 examples exceeds max_batch 2"));
    uint8_t bad[2] = {1, 4};
    assert_int_equal(fa_mlp_forward_backward(m, x, bad, 2, 2, NULL, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "label 4 of example 1 is not below 4 classes"));
    assert_int_equal(fa_mlp_forward_backward(m, x, y, 2, 1, NULL, &err), FA_ERR_INVAL);
    fa_dataset wrong = {5, 4, x, y};
    assert_int_equal(fa_mlp_evaluate(m, &wrong, &ev, &err), FA_ERR_INVAL);
    assert_non_null(strstr(err.msg, "data has 4 features, the model takes 3"));
    fa_dataset badlabels = {2, 3, x, bad};
    assert_int_equal(fa_mlp_evaluate(m, &badlabels, &ev, &err), FA_ERR_INVAL);
    assert_string_equal(fa_mlp_backend_name(m), "cpu-openblas");
    assert_int_equal(fa_mlp_backend(m), FA_MLP_CPU);
    int on_device = 7;
    assert_non_null(fa_mlp_grads(m, &on_device));
    assert_int_equal(on_device, 0);
    assert_null(fa_mlp_cuda_stream(m));
    fa_mlp_del(m);
    fa_mlp_del(NULL);

    fa_mlp_opts o;
    fa_mlp_opts_default(&o);
    o.max_batch = 0;
    assert_int_equal(fa_mlp_new(&m, &c, &o, &err), FA_ERR_INVAL);
    o.max_batch = 8;
    o.backend = 9;
    assert_int_equal(fa_mlp_new(&m, &c, &o, &err), FA_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_default),
        cmocka_unit_test(test_he_init),
        cmocka_unit_test(test_save_load_pytorch_names),
        cmocka_unit_test(test_gradient_check),
        cmocka_unit_test(test_sgd_momentum_weight_decay),
        cmocka_unit_test(test_forward_evaluate_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
