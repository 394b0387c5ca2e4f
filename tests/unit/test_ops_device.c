/* Ops check the device of their inputs before they read any storage:
 * inputs on two devices are DUET_EDEVICE naming the op and both inputs,
 * inputs all on a device an op has no implementation for are
 * DUET_EUNSUPPORTED naming the op. Runs without a GPU: the device tensors
 * here are headers that say "cuda:0" over CPU storage the ops never reach. */
#include "testutil.h"

#include "ops/ops_internal.h"

#include <math.h>
#include <string.h>

/* A copy of t's header that claims to live on cuda:0. */
static duet_tensor on_gpu(const duet_tensor *t) {
    duet_tensor g = *t;
    g.device = duet_device_cuda(0);
    g.grad = NULL;
    g.grad_fn = NULL;
    return g;
}

static void expect_mixed(int rc, duet_tensor **out, const char *op, const char *a, const char *b) {
    assert_int_equal(rc, DUET_EDEVICE);
    assert_null(*out); /* the op set it; read after the call returned */
    const char *m = duet_last_error();
    char want[128];
    snprintf(want, sizeof want, "%s: inputs on different devices: %s on cpu, %s on cuda:0", op, a,
             b);
    if (strstr(m, want) == NULL) fail_msg("expected \"%s\" in \"%s\"", want, m);
}

static void expect_no_gpu_impl(int rc, duet_tensor **out, const char *op) {
    assert_int_equal(rc, DUET_EUNSUPPORTED);
    assert_null(*out); /* the op set it; read after the call returned */
    char want[96];
    snprintf(want, sizeof want, "%s: its inputs are on cuda:0", op);
    if (strstr(duet_last_error(), want) == NULL)
        fail_msg("expected \"%s\" in \"%s\"", want, duet_last_error());
}

/* For an op with a GPU kernel: without CUDA the fake device tensor is
 * refused as for any op; in a CUDA build without a GPU the device check
 * refuses it. (Where a GPU is visible the fake headers must not reach a
 * kernel: those calls are not made.) */
static void expect_gpu_kernel_refused(int rc, duet_tensor **out, const char *op) {
    if (!duet_cuda_built()) {
        expect_no_gpu_impl(rc, out, op);
        return;
    }
    assert_int_equal(rc, DUET_EDEVICE);
    assert_null(*out);
    if (strstr(duet_last_error(), "cuda:0 asked for, but no CUDA device is visible") == NULL)
        fail_msg("%s: unexpected message \"%s\"", op, duet_last_error());
}

static bool fakes_would_reach_a_kernel(void) {
    return duet_cuda_built() && duet_cuda_device_count() > 0;
}

static void test_mixed_devices_name_the_op(void **state) {
    (void)state;
    duet_tensor *x = NULL, *w = NULL, *b = NULL, *l = NULL, *lw = NULL, *out = NULL;
    TU_OK(duet_tensor_create4(1, 2, 4, 4, &x));
    TU_OK(duet_tensor_create4(3, 2, 3, 3, &w));
    TU_OK(duet_tensor_create(1, (int64_t[]){3}, &b));
    TU_OK(duet_tensor_create(2, (int64_t[]){2, 5}, &l));
    TU_OK(duet_tensor_create(2, (int64_t[]){3, 5}, &lw));
    duet_tensor gx = on_gpu(x), gw = on_gpu(w), gb = on_gpu(b), glw = on_gpu(lw);

    expect_mixed(duet_conv2d(x, &gw, b, 1, 1, &out), &out, "conv2d", "x", "weight");
    expect_mixed(duet_conv2d(x, w, &gb, 1, 1, &out), &out, "conv2d", "x", "bias");
    expect_mixed(duet_conv_transpose2d(x, &gw, NULL, 1, 0, 0, &out), &out, "conv_transpose2d",
                 "x", "weight");
    expect_mixed(duet_linear(l, &glw, NULL, &out), &out, "linear", "x", "weight");
    expect_mixed(duet_add(x, &gx, &out), &out, "add", "a", "b");
    expect_mixed(duet_add_inplace(x, &gx, &out), &out, "add", "a", "b");
    expect_mixed(duet_sub(x, &gx, &out), &out, "sub", "a", "b");
    expect_mixed(duet_mul(x, &gx, &out), &out, "mul", "a", "b");
    expect_mixed(duet_l1_loss(x, &gx, 1.0f, &out), &out, "l1_loss", "pred", "target");
    expect_mixed(duet_mse_loss(x, &gx, 1.0f, &out), &out, "mse_loss", "pred", "target");
    expect_mixed(duet_bce_with_logits(x, &gx, 1.0f, &out), &out, "bce_with_logits", "logits",
                 "target");
    expect_mixed(duet_sub_group_mean(x, &gx, 1, &out), &out, "sub_group_mean", "a", "b");
    duet_tensor *two[2] = {x, &gx};
    assert_int_equal(duet_concat_channels(2, two, &out), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "input 0 on cpu, input 1 on cuda:0"));
    duet_batch_norm_opts bo = duet_batch_norm_opts_default();
    duet_tensor gscale = on_gpu(b);
    duet_tensor *bw = NULL;
    TU_OK(duet_tensor_create(1, (int64_t[]){2}, &bw));
    gscale = on_gpu(bw);
    expect_mixed(duet_batch_norm2d(x, &gscale, NULL, NULL, NULL, NULL, &bo, &out), &out,
                 "batch_norm2d", "x", "weight");
    expect_mixed(duet_instance_norm2d(x, &gscale, NULL, 1e-5f, &out), &out, "instance_norm2d", "x",
                 "weight");
    duet_tensor_release(bw);
    duet_tensor_release(lw);
    duet_tensor_release(l);
    duet_tensor_release(b);
    duet_tensor_release(w);
    duet_tensor_release(x);
}

static void test_device_inputs_without_a_gpu_kernel(void **state) {
    (void)state;
    duet_tensor *x = NULL, *out = NULL;
    TU_OK(duet_tensor_create4(1, 2, 4, 4, &x));
    duet_tensor g = on_gpu(x);
    duet_rng rng = duet_rng_make(1, 0);
    if (!fakes_would_reach_a_kernel()) {
        expect_gpu_kernel_refused(duet_relu(&g, &out), &out, "relu");
        expect_gpu_kernel_refused(duet_leaky_relu(&g, 0.2f, &out), &out, "leaky_relu");
        expect_gpu_kernel_refused(duet_relu_inplace(&g, &out), &out, "relu");
        expect_gpu_kernel_refused(duet_leaky_relu_inplace(&g, 0.2f, &out), &out, "leaky_relu");
        expect_gpu_kernel_refused(duet_scale(&g, 2.0f, &out), &out, "scale");
        expect_gpu_kernel_refused(duet_add(&g, &g, &out), &out, "add");
        expect_gpu_kernel_refused(duet_add_inplace(&g, &g, &out), &out, "add");
        expect_gpu_kernel_refused(duet_sub(&g, &g, &out), &out, "sub");
        expect_gpu_kernel_refused(duet_mul(&g, &g, &out), &out, "mul");
        expect_gpu_kernel_refused(duet_sum(&g, &out), &out, "sum");
        expect_gpu_kernel_refused(duet_mean(&g, &out), &out, "mean");
        duet_tensor *lw = NULL;
        TU_OK(duet_tensor_create(2, (int64_t[]){3, 4}, &lw));
        duet_tensor glw = on_gpu(lw);
        expect_gpu_kernel_refused(duet_linear(&g, &glw, NULL, &out), &out, "linear");
        duet_tensor_release(lw);
        expect_gpu_kernel_refused(duet_sigmoid(&g, &out), &out, "sigmoid");
        expect_gpu_kernel_refused(duet_tanh(&g, &out), &out, "tanh");
        expect_gpu_kernel_refused(duet_bce_with_logits_const(&g, 1.0f, 1.0f, &out), &out,
                                  "bce_with_logits_const");
        expect_gpu_kernel_refused(duet_l1_loss(&g, &g, 1.0f, &out), &out, "l1_loss");
        expect_gpu_kernel_refused(duet_mse_loss(&g, &g, 1.0f, &out), &out, "mse_loss");
        expect_gpu_kernel_refused(duet_bce_with_logits(&g, &g, 1.0f, &out), &out,
                                  "bce_with_logits");
        duet_tensor *w = NULL;
        TU_OK(duet_tensor_create4(3, 2, 3, 3, &w));
        duet_tensor gw = on_gpu(w);
        expect_gpu_kernel_refused(duet_conv2d(&g, &gw, NULL, 1, 1, &out), &out, "conv2d");
        duet_tensor_release(w);
    }
    expect_no_gpu_impl(duet_channel_affine(&g, (float[]){1, 1}, (float[]){0, 0}, &out), &out,
                       "channel_affine");
    expect_no_gpu_impl(duet_dropout(&g, 0.5f, true, &rng, &out), &out, "dropout");
    expect_no_gpu_impl(duet_max_pool2d(&g, 2, 2, &out), &out, "max_pool2d");
    expect_no_gpu_impl(duet_reflection_pad2d(&g, 1, 1, 1, 1, &out), &out, "reflection_pad2d");
    expect_no_gpu_impl(duet_pixel_shuffle(&g, 2, &out), &out, "pixel_shuffle");
    expect_no_gpu_impl(duet_upsample_bilinear(&g, 2, &out), &out, "upsample_bilinear");
    expect_no_gpu_impl(duet_upsample_nearest(&g, 2, &out), &out, "upsample_nearest");
    expect_no_gpu_impl(duet_resize_bilinear_ac(&g, 8, 8, &out), &out, "resize_bilinear_ac");
    expect_no_gpu_impl(duet_gram_matrix(&g, &out), &out, "gram_matrix");
    expect_no_gpu_impl(duet_reshape(&g, 1, (int64_t[]){32}, &out), &out, "reshape");
    expect_no_gpu_impl(duet_flatten(&g, &out), &out, "flatten");
    /* CPU inputs pass the check and compute as before. */
    TU_OK(duet_relu(x, &out));
    assert_int_equal(duet_tensor_device(out).type, DUET_DEVICE_CPU);
    duet_tensor_release(out);
    duet_tensor_release(x);
}

static void test_op_device_helper(void **state) {
    (void)state;
    duet_tensor *x = NULL;
    TU_OK(duet_tensor_create(1, (int64_t[]){4}, &x));
    duet_tensor g = on_gpu(x);
    duet_device d = duet_device_cuda(7);
    TU_OK(duet__op_device("op", "a,b", 2, (duet_tensor *[]){NULL, NULL}, &d));
    assert_int_equal(d.type, DUET_DEVICE_CPU);
    TU_OK(duet__op_device("op", "a,b,c", 3, (duet_tensor *[]){NULL, &g, &g}, &d));
    assert_true(d.type == DUET_DEVICE_CUDA && d.index == 0);
    assert_int_equal(duet__op_device("op", "a,,c", 3, (duet_tensor *[]){&g, x, x}, &d),
                     DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "op: inputs on different devices: a on cuda:0, "
                                              "input 1 on cpu"));
    duet_tensor_release(x);
}

/* duet_adam_update's checks: one device, moments the parameter's size, a
 * gradient, steps from 1; and the update itself against the formula. */
static void test_adam_update_checks(void **state) {
    (void)state;
    duet_tensor *p = NULL, *m = NULL, *v = NULL, *small = NULL;
    TU_OK(duet_tensor_from_data(1, (int64_t[]){2}, (float[]){1.0f, -2.0f}, &p));
    TU_OK(duet_tensor_create(1, (int64_t[]){2}, &m));
    TU_OK(duet_tensor_create(1, (int64_t[]){2}, &v));
    TU_OK(duet_tensor_create(1, (int64_t[]){1}, &small));
    const duet_adam_hparams hp = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.0f};
    int64_t step = 1;
    assert_int_equal(duet_adam_update(1, &p, &m, &v, &step, &hp), DUET_EINVAL);
    assert_non_null(strstr(duet_last_error(), "parameter 0 has no gradient"));
    TU_OK(duet_tensor_ensure_grad(p));
    p->grad[0] = 0.5f;
    p->grad[1] = -0.25f;
    assert_int_equal(duet_adam_update(1, &p, &small, &v, &step, &hp), DUET_ESHAPE);
    int64_t zero = 0;
    assert_int_equal(duet_adam_update(1, &p, &m, &v, &zero, &hp), DUET_EINVAL);
    duet_tensor gm = on_gpu(m);
    duet_tensor *gmp = &gm;
    assert_int_equal(duet_adam_update(1, &p, &gmp, &v, &step, &hp), DUET_EDEVICE);
    assert_non_null(strstr(duet_last_error(), "adam_update: inputs on different devices: param "
                                              "on cpu, exp_avg on cuda:0"));
    /* Step 1: m = 0.1 g, v = 0.001 g^2, p -= lr * m/0.1 / (sqrt(v/0.001) + eps)
     * = lr * sign(g) (to eps). */
    TU_OK(duet_adam_update(1, &p, &m, &v, &step, &hp));
    assert_true(fabsf(p->data[0] - 0.9f) < 1e-6f && fabsf(p->data[1] - (-1.9f)) < 1e-6f);
    /* The moments, with 1 - beta of the float betas (0.1 and 0.001 to 1e-4). */
    assert_true(fabsf(m->data[0] - 0.05f) < 0.05f * 1e-4f);
    assert_true(fabsf(v->data[1] - 0.0000625f) < 0.0000625f * 1e-4f);
    duet_tensor_release(small);
    duet_tensor_release(v);
    duet_tensor_release(m);
    duet_tensor_release(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mixed_devices_name_the_op),
        cmocka_unit_test(test_device_inputs_without_a_gpu_kernel),
        cmocka_unit_test(test_op_device_helper),
        cmocka_unit_test(test_adam_update_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
